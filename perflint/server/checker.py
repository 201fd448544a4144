"""What the language server does with a document, without the protocol: check it, fix it,
suppress a finding, explain a rule.  Tests drive this directly; `perflint.server.lsp` turns
its answers into LSP messages.

Settings come from the CLI's own resolver (`perflint.config.Resolver`, with the client's
overrides in the place of command-line flags) and `options.options_for`, so a file gets the
same rules in the editor as from `perflint check`.  Checking goes through `perflint.api`
(`check_file`, `fix_text`, `fix_file`) with the file's `ProjectView` from the warm project
model.
"""

from __future__ import annotations

import io
import json
import os
import re
import tokenize
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from perflint.config import ConfigError, Resolver, Settings, parse_version
from perflint.diagnostics import Applicability, Diagnostic, ErrorKind, FileError
from perflint.server.project import Projects, WarmProject, wants_summary

# Client settings the server accepts (camelCase as editors send them, or the CLI's spelling).
_KEYS = {
    "select": "select", "extendSelect": "extend_select", "extend-select": "extend_select",
    "extend_select": "extend_select", "ignore": "ignore", "unsafeFixes": "unsafe_fixes",
    "unsafe-fixes": "unsafe_fixes", "unsafe_fixes": "unsafe_fixes", "targetTorch": "target_torch",
    "target-torch": "target_torch", "target_torch": "target_torch",
}
_SYNTAX_AT = re.compile(r"^(?:cell (\d+), )?line (\d+), column (\d+): (.*)$", re.S)
NOTEBOOK_LANGUAGE = {"name": "python"}


def parse_client_settings(raw: object) -> tuple[dict, list[str]]:
    """Resolver overrides from a client's settings (`initializationOptions`, or the
    `perflint` section of `workspace/didChangeConfiguration`), and one line per problem."""
    from perflint.selection import validate_selector

    problems: list[str] = []
    if not isinstance(raw, dict):
        return {}, problems
    for nest in ("settings", "perflint"):
        if isinstance(raw.get(nest), dict):
            raw = raw[nest]
    out: dict = {}
    for key, value in raw.items():  # type: ignore[union-attr]
        attr = _KEYS.get(key)
        if attr is None:
            continue
        if value is None:
            continue
        if attr in ("select", "extend_select", "ignore"):
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
                problems.append(f"setting `{key}` must be a list of rule codes, got {value!r}")
                continue
            codes = [v.strip().upper() for v in items if v.strip()]
            bad = [err for err in (validate_selector(c) for c in codes) if err]
            if bad:
                problems.append(f"setting `{key}`: {bad[0]}")
                continue
            out[attr] = codes
        elif attr == "unsafe_fixes":
            if not isinstance(value, bool):
                problems.append(f"setting `{key}` must be true or false, got {value!r}")
                continue
            out[attr] = value
        elif attr == "target_torch":
            try:
                out[attr] = parse_version(value, f"setting `{key}`")
            except ConfigError as exc:
                problems.append(str(exc))
    return out, problems


@dataclass
class Doc:
    """A snapshot of an open document: a Python file, or a notebook's cells in order."""

    key: str  # the document's URI
    path: str  # the path the engine sees (a notebook's ends in .ipynb)
    version: int | None = None
    text: str | None = None
    cells: list[tuple[str, str]] | None = None  # (kind: "code" | "markdown", text)

    @property
    def is_notebook(self) -> bool:
        return self.cells is not None


@dataclass
class SyntaxProblem:
    cell: int | None  # 1-based cell number in the notebook (all cells counted)
    row: int  # 1-based
    column: int  # 1-based
    message: str


@dataclass
class Report:
    doc: Doc
    diagnostics: list[Diagnostic] = field(default_factory=list)
    syntax: SyntaxProblem | None = None
    config_error: str | None = None
    file_error: FileError | None = None  # the file could not be read as Python (shown at its top)
    errors: list[FileError] = field(default_factory=list)  # logged, not shown as diagnostics
    settings: Settings | None = None
    options: object = None  # LintOptions
    root: str | None = None
    recheck: list[str] = field(default_factory=list)  # other open files to check again
    _with_edits: dict | None = None
    _fix_all: tuple | None = None  # (result,) once computed

    @property
    def unsafe(self) -> bool:
        return bool(self.settings and self.settings.unsafe_fixes)

    def fix_allowed(self, d: Diagnostic) -> bool:
        """Whether `d`'s fix may be offered: safe, or unsafe with unsafe-fixes on; and its
        rule fixable under `fixable`/`unfixable`."""
        if d.fix is None:
            return False
        if d.fix.applicability is Applicability.UNSAFE and not self.unsafe:
            return False
        from perflint.selection import fixable_codes

        allowed = fixable_codes(self.settings) if self.settings is not None else None
        return allowed is None or d.code in allowed


def _diag_key(d: Diagnostic) -> tuple:
    return (d.code, d.cell, d.location.row, d.location.column)


class Checker:
    def __init__(self, overrides: dict | None = None, folders: list[str] | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.overrides = dict(overrides or {})
        self.folders = list(folders or [])
        self.log = log or (lambda message: None)
        self.resolver = Resolver(overrides=self.overrides)
        self.projects = Projects()
        self.buffers: dict[str, bytes] = {}  # open Python documents, by absolute path
        self.asked: dict[str, tuple[str, list[str], str]] = {}  # abs path → (root, questions, digest)
        self._completed: set[str] = set()
        self.stale: set[str] = set()  # open files whose summary in the project predates their last edit
        self._excluded: dict[str, bool] = {}

    # -- settings ------------------------------------------------------------------------
    def reload(self, overrides: dict | None = None) -> None:
        """Read the configuration afresh (a pyproject.toml changed, or the client's settings)."""
        if overrides is not None:
            self.overrides = dict(overrides)
        self.resolver = Resolver(overrides=self.overrides)
        self._excluded.clear()

    def excluded(self, path: str) -> bool:
        """Whether the configuration excludes the file (`exclude`, `extend-exclude`,
        .gitignore), as `perflint check --force-exclude` (pre-commit) decides."""
        from perflint.discovery import discover

        a = os.path.abspath(path)
        if a not in self._excluded:
            if not os.path.isabs(path) or not os.path.isfile(a):
                return False  # not on disk (yet): nothing to exclude it by
            found = discover([a], self.resolver, force_exclude=True)
            self._excluded[a] = not found.files and not found.errors
        return self._excluded[a]

    def _settings(self, path: str):
        from perflint.options import options_for

        settings = self.resolver.for_path(Path(path))
        return settings, options_for(Path(path), settings, with_edits=False)

    # -- checking --------------------------------------------------------------------------
    def _project(self, path: str) -> WarmProject | None:
        if not os.path.isabs(path):
            return None
        try:
            return self.projects.for_path(path, self.folders)
        except OSError:
            return None

    def close(self, doc: Doc) -> None:
        """The editor closed a document: the project sees the file on disk again."""
        a = os.path.abspath(doc.path)
        self.buffers.pop(a, None)
        self.asked.pop(a, None)
        self._completed.discard(a)
        self.stale.discard(a)
        wp = self._project(doc.path)
        if wp is not None and a in wp.summaries:
            from perflint.analysis.project import read_regular
            from perflint.server.project import summarise_bytes

            raw = read_regular(a)
            wp.put(a, summarise_bytes(a, raw) if raw is not None and wants_summary(raw) else None)

    def check(self, doc: Doc) -> Report:
        report = Report(doc=doc)
        try:
            report.settings, report.options = self._settings(doc.path)
        except ConfigError as exc:
            report.config_error = str(exc)
            return report
        if self.excluded(doc.path):
            return report
        try:
            self._check(doc, report)
        except Exception as exc:  # noqa: BLE001 - one bad document must not stop the server
            where = traceback.extract_tb(exc.__traceback__)[-1]
            report.errors.append(FileError(doc.path, ErrorKind.INTERNAL,
                                           f"{type(exc).__name__}: {exc} at {os.path.basename(where.filename)}:{where.lineno}"))
        return report

    def _check(self, doc: Doc, report: Report) -> None:
        from perflint.api import check_file

        wp = self._project(doc.path)
        report.root = wp.root if wp is not None else None
        a = os.path.abspath(doc.path)
        if wp is not None:
            for other in sorted(self.stale - {a}):
                if self.asked.get(other, ("",))[0] == wp.root:
                    # This check may ask about an edited file: bring its summary up to date.
                    report.recheck.extend(p for p in self.refresh(other) if p != a)
        if doc.is_notebook:
            raw = notebook_bytes(doc.cells or [])
            view = wp.view(a) if wp is not None else None
            result = check_file(doc.path, raw, report.options, project=view)
        else:
            raw = encode_python(doc.text or "")
            self.buffers[a] = raw
            summarised = wp is not None and (wants_summary(raw) or a in wp.summaries)
            if wp is not None and a not in self._completed:
                # First check of this file: its summary says what it imports; summarise those
                # (and the files importing it) before checking it with the project.
                self._completed.add(a)
                view = wp.view(a)
                result = check_file(doc.path, raw, report.options, project=view, summarise=summarised)
                before = self._digest_of(wp, a, result.questions, view)
                changed = wp.put(a, result.summary) if summarised else False
                changed = wp.complete(a, self.buffers) or changed
                self.stale.discard(a)
                if changed and wp.digest(a, result.questions) != before:
                    result = check_file(doc.path, raw, report.options, project=wp.view(a))
            else:
                # An edit: check the file against the project as it is; its own summary is
                # brought up to date afterwards (`refresh`), off the path of the diagnostics.
                view = wp.view(a) if wp is not None else None
                result = check_file(doc.path, raw, report.options, project=view)
                if summarised:
                    self.stale.add(a)
        if wp is not None:
            self.asked[a] = (wp.root, list(result.questions), wp.digest(a, result.questions))
        report.diagnostics = list(result.diagnostics)
        for err in result.errors:
            if err.kind is ErrorKind.SYNTAX and report.syntax is None:
                report.syntax = syntax_problem(err.message)
            elif err.kind in (ErrorKind.DECODE, ErrorKind.NOTEBOOK, ErrorKind.IO) and report.file_error is None:
                report.file_error = err
            else:
                report.errors.append(err)

    def refresh(self, path: str) -> list[str]:
        """Summarise an edited document again and update its project; the open documents
        (itself included) whose project answers changed, to be checked again."""
        from perflint.server.project import summarise_bytes

        a = os.path.abspath(path)
        if a not in self.stale:
            return []
        self.stale.discard(a)
        raw = self.buffers.get(a)
        wp = self._project(a)
        if raw is None or wp is None:
            return []
        if not wp.put(a, summarise_bytes(a, raw) if wants_summary(raw) else None):
            return []
        wp.complete(a, self.buffers)
        out = self.dependents(a)
        own = self.asked.get(a)
        if own is not None and own[1] and wp.digest(a, own[1]) != own[2]:
            out.append(a)
        return out

    @staticmethod
    def _digest_of(wp: WarmProject, path: str, questions: list[str], view) -> str:
        from perflint.analysis.project import answers_digest

        return answers_digest(wp.index, path, questions, view)

    def dependents(self, path: str) -> list[str]:
        """Open documents (other than `path`) whose project answers changed: they depend on
        what just changed and must be checked again."""
        a = os.path.abspath(path)
        out = []
        for other, (root, questions, digest) in list(self.asked.items()):
            if other == a or not questions:
                continue
            wp = self.projects.by_root.get(root)
            if wp is None:
                continue
            if wp.digest(other, questions) != digest:
                out.append(other)
        return out

    def disk_changed(self, path: str) -> list[str]:
        """A Python file changed on disk: update the projects; the open documents to check again."""
        for wp in self.projects.containing(path):
            wp.refresh_from_disk(path, self.buffers)
        return self.dependents(path)

    # -- fixes -----------------------------------------------------------------------------
    def with_edits(self, report: Report, code: str) -> dict:
        """The report's findings of rule `code` with their fix edits, by (code, cell, row,
        column); computed on first use by checking again with only that rule (a fix's edit
        costs a pass over the tree, so only the fixes asked for are rendered)."""
        cache = report._with_edits if report._with_edits is not None else {}
        report._with_edits = cache
        if code in cache:
            return cache[code]
        from perflint.api import check_file

        out: dict = {}
        if report.options is not None and report.syntax is None and report.file_error is None:
            doc = report.doc
            raw = notebook_bytes(doc.cells or []) if doc.is_notebook else encode_python(doc.text or "")
            wp = self._project(doc.path)
            view = wp.view(os.path.abspath(doc.path)) if wp is not None else None
            try:
                options = replace(report.options, codes=(code,), with_edits=True)
                result = check_file(doc.path, raw, options, project=view)
                out = {_diag_key(d): d for d in result.diagnostics}
            except Exception as exc:  # noqa: BLE001
                self.log(f"perflint: computing fixes for {doc.path} failed: {type(exc).__name__}: {exc}")
        cache[code] = out
        return out

    def edits_for(self, report: Report, d: Diagnostic):
        got = self.with_edits(report, d.code).get(_diag_key(d))
        return got.fix.edits if got is not None and got.fix is not None else ()

    def fix_all(self, report: Report) -> str | list[str] | None:
        """Every safe fix applied: the new text (a notebook: the new text of every cell), or
        None when nothing changes."""
        if report.options is None or report.syntax is not None or report.file_error is not None:
            return None
        if report._fix_all is None:
            report._fix_all = (self._fix_all(report),)
        return report._fix_all[0]

    def _fix_all(self, report: Report) -> str | list[str] | None:
        from perflint.api import fix_file, fix_text
        from perflint.selection import fixable_codes

        doc = report.doc
        allowed = fixable_codes(report.settings) if report.settings is not None else None
        fixable = (lambda code: code in allowed) if allowed is not None else None
        wp = self._project(doc.path)
        view = wp.view(os.path.abspath(doc.path)) if wp is not None else None
        options = replace(report.options, prefilter=False)
        if not doc.is_notebook:
            new, _, errors = fix_text(doc.text or "", doc.path, options, unsafe=False, fixable=fixable, project=view)
            for e in errors:
                self.log(f"perflint: {e.one_line()}")
            return new if new != doc.text else None
        result = fix_file(doc.path, notebook_bytes(doc.cells or []), options, unsafe=False, fixable=fixable,
                          project=view)
        for e in result.errors:
            self.log(f"perflint: {e.one_line()}")
        if result.fixed_bytes is None:
            return None
        cells = json.loads(result.fixed_bytes.decode("utf-8"))["cells"]
        from perflint.source import cell_source

        return [cell_source(c) for c in cells]


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------


def encode_python(text: str) -> bytes:
    """The bytes a file with this text has on disk: UTF-8, or the encoding its coding
    cookie declares."""
    raw = text.encode("utf-8", errors="replace")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError:
        return raw
    if encoding in ("utf-8", "utf-8-sig"):
        return raw
    try:
        return text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return raw


def notebook_bytes(cells: list[tuple[str, str]]) -> bytes:
    """A minimal Jupyter notebook holding the cells (cell numbers match the editor's)."""
    data = {
        "cells": [
            {"cell_type": "code" if kind == "code" else "markdown", "metadata": {}, "source": text,
             **({"outputs": [], "execution_count": None} if kind == "code" else {})}
            for kind, text in cells
        ],
        "metadata": {"language_info": NOTEBOOK_LANGUAGE},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(data, indent=1).encode("utf-8")


def syntax_problem(message: str) -> SyntaxProblem:
    m = _SYNTAX_AT.match(message)
    if m is None:
        return SyntaxProblem(None, 1, 1, message)
    cell = int(m.group(1)) if m.group(1) else None
    return SyntaxProblem(cell, max(1, int(m.group(2))), max(1, int(m.group(3))), m.group(4))


_NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:(?:\s*,\s*|\s+)[A-Za-z]+[0-9]+)*)", re.I)


def noqa_insertion(text: str, row: int, code: str) -> tuple[int, int, str] | None:
    """Where and what to insert in `text` so that `# noqa` suppresses `code` on `row`
    (1-based): (row, column, text to insert), columns 1-based in characters.  None when no
    comment on that line can do it (the line ends inside a string, or after a backslash)."""
    from perflint.noqa import parse_suppressions

    lines = _split_lines(text)
    if not 1 <= row <= len(lines):
        return None
    line = lines[row - 1]
    comment = _comment_on(text, row)
    insert = None
    if comment is not None:
        m = _NOQA.search(line, comment[0])
        if m is not None:
            insert = (row, m.end("codes") + 1, f", {code}")
    if insert is None:
        insert = (row, len(line.rstrip()) + 1, f"  # noqa: {code}")
    # The inserted text must end up in a comment on that line that suppresses the code (a
    # comment changes nothing else); only the lines up to it are tokenized.
    new_line = line[: insert[1] - 1] + insert[2] + line[insert[1] - 1:]
    after = _comment_on("\n".join(lines[: row - 1] + [new_line]) + "\n", row)
    first = insert[1] - 1 + len(insert[2]) - len(insert[2].lstrip())  # where the inserted text starts
    if after is None or after[0] > first or not parse_suppressions(after[1]).suppressed(code, 1):
        return None
    return insert


def _comment_on(text: str, row: int) -> tuple[int, str] | None:
    """(0-based column, text) of the comment token on `row`, tokenizing no further than it."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.ERRORTOKEN and not tok.string.isspace():
                return None  # e.g. a backslash that no longer ends its line
            if tok.type == tokenize.COMMENT and tok.start[0] == row:
                return tok.start[1], tok.string
            if tok.start[0] > row:
                return None
    except (tokenize.TokenError, SyntaxError):
        return None
    return None


_NEWLINE = re.compile(r"\r\n?|\n")


def _split_lines(text: str) -> list[str]:
    """Lines as the engine counts them (\\n, \\r\\n, \\r), without their endings."""
    return _NEWLINE.split(text)


def hover_markdown(code: str) -> str | None:
    """A rule's documentation for a hover."""
    from perflint.rules import all_rules, docs_url

    rule = all_rules().get(code)
    if rule is None:
        return None
    head = f"**{rule.code}** `{rule.name}`: {rule.summary}"
    meta = f"Fix: {rule.fix_class} · severity: {rule.severity.value} · [documentation]({docs_url(rule.code)})"
    return f"{head}\n\n{meta}\n\n{_demote_headings(rule.doc())}"


def _demote_headings(doc: str) -> str:
    """The docs' `##` sections as `####`, so they sit under the hover's title."""
    return re.sub(r"^(#{1,4}) ", lambda m: "#" * min(6, len(m.group(1)) + 2) + " ", doc, flags=re.M)
