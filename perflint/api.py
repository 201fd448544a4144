"""perflint as a library: check or fix one source text.

    from perflint.api import check_source, fix_source

    for d in check_source(text, path="train.py"):
        print(d.location.row, d.code, d.message)
    fixed = fix_source(text, path="train.py", unsafe=True).text

`path` names the file in messages, decides which configuration applies (the
`pyproject.toml` above it, as for `perflint check`, unless `config=False`) and whether it is
a test file; the file need not exist.  `select`, `extend_select` and `ignore` act as the
command-line options of the same names; `target_torch` as `--target-torch` ("2.4" or (2, 4)).

The functions are safe to call from several threads at once: they share no mutable state
and leave libcst as it is (the process-wide libcst speed-ups of `perflint.cstprivate` are
only turned on by perflint's own command line).  The project model is not used: a finding
that needs another module of the project is reported as a single-file check reports it.
A text that cannot be read or parsed, or a broken configuration, raises `PerflintError`
with perflint's one-line message.

The command line, the language server and the runtime all check and fix through this
module.  Besides the two text functions above it has the file-level forms they are built
on, for programs that resolve options and keep a project model themselves (perflint's
worker processes and its language server do):

    options, settings = lint_options("train.py")
    result = check_file("train.py", raw_bytes, options, project=view)   # a FileResult
    result = fix_file("train.py", raw_bytes, options, unsafe=False)      # .fixed_bytes

`check_file`, `fix_file` and `fix_text` never raise for bad input: a file that cannot be
read or parsed comes back as `FileError`s in the result, as `perflint check` reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from perflint.diagnostics import Diagnostic, ErrorKind, FileError

__all__ = ["PerflintError", "FixResult", "check_source", "fix_source", "lint_options",
           "check_file", "fix_file", "fix_text", "LintOptions"]


def __getattr__(name: str):
    # `LintOptions` (what `lint_options` resolves) without importing the engine up front.
    if name == "LintOptions":
        from perflint.engine import LintOptions

        return LintOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class PerflintError(ValueError):
    """The text could not be read or parsed, or the configuration is broken."""

    def __init__(self, error: FileError) -> None:
        super().__init__(error.one_line())
        self.error = error


@dataclass(frozen=True)
class FixResult:
    text: str  # the fixed source (the input itself when nothing was fixed)
    applied: dict[str, int] = field(default_factory=dict)  # fixes applied, by rule code
    remaining: list[Diagnostic] = field(default_factory=list)  # what is reported after fixing
    # Fixes that were not applied because their output did not parse (the others were).
    fix_errors: list[FileError] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def _codes(value: Sequence[str] | str | None) -> list[str] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    return [c.strip().upper() for item in items for c in str(item).split(",") if c.strip()]


def lint_options(path: str = "<stdin>.py", *, select=None, extend_select=None, ignore=None, target_torch=None,
                 config: bool = True, with_edits: bool = True):
    """The `LintOptions` and `Settings` that `perflint check PATH` would use, with these overrides.

    Raises `PerflintError` for an unknown rule selector or a broken configuration."""
    from perflint.config import ConfigError, Resolver, Settings, parse_version
    from perflint.options import options_for
    from perflint.selection import validate_selector

    overrides: dict = {}
    for key, value in (("select", select), ("extend_select", extend_select), ("ignore", ignore)):
        codes = _codes(value)
        for sel in codes or ():
            why = validate_selector(sel)
            if why is not None:
                raise PerflintError(FileError(path, ErrorKind.CONFIG, f"{key}: {why}"))
        overrides[key] = codes
    try:
        if target_torch is not None:
            overrides["target_torch"] = (tuple(target_torch) if isinstance(target_torch, (tuple, list))
                                         else parse_version(target_torch, "target_torch"))
        resolver = Resolver(overrides=overrides)
        settings = resolver.for_path(Path(path)) if config else resolver._apply_overrides(Settings())
    except ConfigError as exc:
        where = exc.path or path
        raise PerflintError(FileError(where, ErrorKind.CONFIG, str(exc).removeprefix(f"{where}: "))) from None
    return options_for(Path(path), settings, with_edits=with_edits), settings


def _raw(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _raise_first(errors: list[FileError]) -> None:
    """Raise for input that could not be read or parsed; a fix that was dropped is not one."""
    fatal = [e for e in errors if e.kind is not ErrorKind.FIX]
    if fatal:
        raise PerflintError(fatal[0])


def check_file(path: str, raw: bytes | None, options, *, project=None, summarise: bool = False,
               alone: bool = False):
    """Check one file's bytes (`raw=None`: read `path`) with resolved `LintOptions`.

    `project` is the file's `ProjectView` (its questions to the project are recorded in
    `result.questions`); with `summarise`, `result.summary` is its module summary (`alone`:
    the file is its project's only Python file).  Returns a `FileResult`; unreadable or
    unparsable input is in `result.errors`."""
    from perflint.engine import lint_bytes

    return lint_bytes(path, raw, options, project=project, summarise=summarise, alone=alone)


def fix_file(path: str, raw: bytes | None, options, *, unsafe: bool, fixable=None, project=None, reuse: bool = False):
    """Fix one file's bytes to a fixed point.  `fixable` is a predicate on rule codes (the
    configuration's `fixable`/`unfixable`).  Returns a `FileResult` whose `fixed_bytes` is the
    new file (None when nothing changed) and whose diagnostics are what is left.  `reuse`: a
    project run's first lint of these bytes still holds (the project answers its questions
    as before), so its analysis, where this process kept it, is the fix loop's first pass."""
    from perflint.engine import fix_bytes

    return fix_bytes(path, raw, options, unsafe, fixable=fixable, project=project, reuse=reuse)


def fix_text(text: str, path: str, options, *, unsafe: bool, fixable=None, project=None):
    """Fix a Python source text (no encoding, no notebook): `(new text, fixes applied by
    rule code, errors)`.  The new text always parses."""
    from perflint.engine import fix_text as _fix_text

    return _fix_text(text, path, options, unsafe, fixable=fixable, project=project)


def check_source(text: str | bytes, path: str = "<stdin>.py", *, select=None, extend_select=None, ignore=None,
                 target_torch=None, config: bool = True) -> list[Diagnostic]:
    """The findings `perflint check` reports on `text` (bytes are decoded as a file would be)."""
    options, _ = lint_options(path, select=select, extend_select=extend_select, ignore=ignore,
                              target_torch=target_torch, config=config)
    result = check_file(path, _raw(text), replace(options, prefilter=True))
    _raise_first(result.errors)
    return list(result.diagnostics)


def fix_source(text: str | bytes, path: str = "<stdin>.py", *, unsafe: bool | None = None, select=None,
               extend_select=None, ignore=None, target_torch=None, config: bool = True) -> FixResult:
    """`text` with the fixes `perflint fix` would apply (`unsafe=None`: as the configuration says).

    The fixed text is always one that parses; the configuration's `fixable`/`unfixable` hold."""
    from perflint.selection import fixable_codes
    from perflint.source import read_source

    options, settings = lint_options(path, select=select, extend_select=extend_select, ignore=ignore,
                                     target_torch=target_torch, config=config, with_edits=False)
    use_unsafe = settings.unsafe_fixes if unsafe is None else unsafe
    allowed = fixable_codes(settings)
    result = fix_file(path, _raw(text), options, unsafe=use_unsafe,
                      fixable=None if allowed is None else allowed.__contains__)
    _raise_first(result.errors)
    raw = _raw(text) if result.fixed_bytes is None else result.fixed_bytes
    if path.endswith(".ipynb"):  # the notebook's JSON, as it would be written
        out = raw.decode("utf-8")
    else:
        out = read_source(path, raw).text
    return FixResult(out, dict(result.fixes_applied) if result.fixed_bytes is not None else {},
                     list(result.diagnostics), [e for e in result.errors if e.kind is ErrorKind.FIX])
