"""Rule selection: codes and prefixes (`PF1`, `PF10`, `PF102`, `ALL`), resolved as ruff does.

The default set is every rule whose class says `default = True` (`perflint rules` shows
it).  A selection layer is (select, extend-select, ignore); the configuration file is one
layer and the command line another, applied in that order:

* a layer with `select` starts afresh from its own selectors; one without adds to and
  removes from the rules selected so far;
* inside a layer, more specific selectors win (`select = ["PF1"]`, `ignore = ["PF102"]`
  turns PF102 off; `select = ["PF102"]`, `ignore = ["PF1"]` keeps it on); at the same
  specificity, `ignore` wins.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: config imports selection to validate codes
    from perflint.config import Settings


def _registry():
    """Rule code → its declarations: the rule classes once they are all imported, else the
    generated table (`perflint.rules.table`, the same declarations), so that selecting
    rules, reporting and the prefilter do not import the rule modules (and libcst, which
    costs a run answered from the cache a third of its time)."""
    from perflint.rules import _REGISTRY, all_rules

    if _REGISTRY:
        return all_rules()
    return _records()


class _RuleRecord:
    """A rule's declarations as `perflint.rules.table` keeps them."""

    __slots__ = ("code", "name", "default", "severity", "summary", "fix_class", "min_torch", "max_torch", "tokens",
                 "_doc")

    def __init__(self, code: str, row: dict) -> None:
        from perflint.diagnostics import Severity
        from perflint.rules.metadata import FixClass

        self.code, self.name, self.default = code, row["name"], row["default"]
        self.severity = Severity(row["severity"])
        self.summary, self.fix_class, self._doc = row["summary"], FixClass(row["fix"]), row["doc"]
        self.min_torch, self.max_torch, self.tokens = row["min_torch"], row["max_torch"], row["tokens"]

    def applies_to(self, target) -> bool:
        """As `Rule.applies_to`: whether the rule runs for this target torch."""
        return (self.min_torch is None or tuple(target) >= self.min_torch) and \
            (self.max_torch is None or tuple(target) < self.max_torch)

    def doc(self) -> str:
        return self._doc


@lru_cache(maxsize=1)
def _records() -> dict:
    from perflint.rules.table import RULES

    return {code: _RuleRecord(code, row) for code, row in RULES.items()}


def rule_records() -> dict:
    """Rule code → its name, summary, severity, fix class and documentation, without
    importing the rules."""
    return _registry()


def prefilter_tokens(codes, target) -> tuple[bytes, ...]:
    """The byte strings one of which a file must hold for any of `codes` to fire there at
    this target torch (each rule's `tokens`)."""
    records = _registry()
    toks = {tok for c in codes if c in records and records[c].applies_to(target) for tok in records[c].tokens}
    return tuple(sorted(toks))


def severity_of(code: str):
    """A rule's severity, without importing the rules when the snapshot has it."""
    return _registry()[code].severity


def validate_selector(sel: str) -> str | None:
    """None if `sel` selects at least one rule; else why not."""
    s = sel.strip().upper()
    if s == "ALL":
        return None
    if not re.fullmatch(r"PF\d*", s):
        return f"unknown rule selector `{sel}` (codes look like PF101; prefixes like PF1 or PF10; or ALL)"
    if not any(code.startswith(s) for code in _registry()):
        return f"unknown rule code or prefix `{sel}`"
    return None


def _specificity(sel: str) -> int:
    s = sel.strip().upper()
    return -1 if s == "ALL" else len(s)


def _expand(selectors) -> set[str]:
    codes: set[str] = set()
    for sel in selectors:
        s = sel.strip().upper()
        if s == "ALL":
            codes.update(_registry())
        else:
            codes.update(c for c in _registry() if c.startswith(s))
    return codes


def default_codes() -> set[str]:
    return {code for code, rule in _registry().items() if rule.default}


def _apply_layer(current: set[str], select, extend_select, ignore) -> set[str]:
    updates: dict[str, bool] = {}
    chosen = list(select or ()) + list(extend_select or ())
    levels = sorted({_specificity(s) for s in chosen} | {_specificity(s) for s in ignore or ()})
    for level in levels:
        for code in _expand(s for s in chosen if _specificity(s) == level):
            updates[code] = True
        for code in _expand(s for s in ignore or () if _specificity(s) == level):
            updates[code] = False
    if select is not None:
        return {code for code, on in updates.items() if on}
    out = set(current)
    for code, on in updates.items():
        if on:
            out.add(code)
        else:
            out.discard(code)
    return out


def selected_codes(settings: Settings) -> tuple[str, ...]:
    codes = default_codes()
    codes = _apply_layer(codes, settings.select, settings.extend_select, settings.ignore)
    codes = _apply_layer(codes, settings.cli_select, settings.cli_extend_select, settings.cli_ignore)
    return tuple(sorted(codes))


def fixable_codes(settings: Settings) -> frozenset[str] | None:
    """The codes whose fixes may be applied; None means all of them."""
    if settings.fixable is None and not settings.unfixable:
        return None
    base = set(_registry())
    return frozenset(_apply_layer(base, settings.fixable if settings.fixable is not None else ("ALL",), (),
                                  settings.unfixable))


def ignored_for_path(settings: Settings, rel_path: str) -> set[str]:
    """Codes that per-file-ignores switch off for a path relative to the settings' root.

    Patterns are matched as `exclude` patterns are, with pathspec's gitignore semantics
    (`*` stays within one folder, `**` crosses folders; a pattern without a slash matches
    a file or folder name at any depth; `tests/` everything below it), plus `{a,b}`
    alternatives as in ruff: `"__init__.py"`, `"tests/*"`, `"**/scripts/*.py"`,
    `"{tests,docs}/"`.
    """
    out: set[str] = set()
    posix = PurePosixPath(rel_path).as_posix()
    for pattern, codes in settings.per_file_ignores:
        if _pattern_spec(pattern).match_file(posix):
            out |= _expand(codes)
    return out


@lru_cache(maxsize=256)
def _pattern_spec(pattern: str):
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(p.removeprefix("./") for p in _braces(pattern))


@lru_cache(maxsize=256)
def _braces(pattern: str) -> tuple[str, ...]:
    """Expand `{a,b}` alternatives (nesting allowed), as ruff's globs do."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return (pattern,)
    out: list[str] = []
    for alt in m.group(1).split(","):
        out.extend(_braces(pattern[: m.start()] + alt + pattern[m.end():]))
    return tuple(out)
