"""The `full` (with source and caret) and `concise` (one line a finding) formats.

Output goes through a writer: on a terminal (or with FORCE_COLOR) rich styles it; piped,
redirected or written to a file, `PlainOut` writes the same characters without importing
rich (what rich prints there: markup removed, tabs expanded to 8 columns, control
characters other than newline dropped).
"""

from __future__ import annotations

import os
import re
import sys

from perflint.diagnostics import Applicability, FileResult
from perflint.report import where
from perflint.report.counts import fixable_counts, is_fixable

fixable = is_fixable

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}
_CONTROL = re.compile(r"[\x07\x08\x0b\x0c\x0d]")  # what rich's Text drops

Segment = tuple[str, "str | None"]  # text, and its rich style (None: unstyled)


class PlainOut:
    """Lines of text to a stream, as rich would print them to a file."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def line(self, *segments: Segment) -> None:
        text = "".join(t for t, _ in segments)
        if "\t" in text:
            text = text.expandtabs(8)
        self.stream.write(_CONTROL.sub("", text) + "\n")


class RichOut:
    """Lines to a rich console, each segment in its style."""

    def __init__(self, console) -> None:
        from rich.markup import escape

        self.console = console
        self._escape = escape

    def line(self, *segments: Segment) -> None:
        esc = self._escape
        self.console.print("".join(f"[{style}]{esc(t)}[/]" if style else esc(t) for t, style in segments),
                           highlight=False, soft_wrap=True)


def wants_rich(stderr: bool = False) -> bool:
    """Whether the stream is a terminal as rich decides it (FORCE_COLOR / TTY_COMPATIBLE set it)."""
    if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return True
    if os.environ.get("TTY_COMPATIBLE") == "0":
        return False
    stream = sys.stderr if stderr else sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def writer(stderr: bool = False):
    """The writer for stdout (or stderr): rich on a terminal, plain text elsewhere."""
    if wants_rich(stderr):
        from rich.console import Console

        return RichOut(Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False))
    return PlainOut(sys.stderr if stderr else sys.stdout)


def _header(path: str, d, unsafe: bool) -> tuple[Segment, ...]:
    return ((where(path, d), "bold"), (": ", None), (d.code, _STYLE[d.severity.value]), (" ", None),
            ("[*] " if fixable(d, unsafe) else "", None), (d.message, None))


def _why(out, d, indent: str) -> None:
    """`--show-why`: the evidence that the finding's code runs on every step."""
    for i, step in enumerate(d.why):
        out.line((indent, None), *((("= why", "cyan"), (": ", None)) if i == 0 else (("       ", None),)),
                 (step, None))


def concise(out, results: list[FileResult], unsafe: bool, show_why: bool = False) -> None:
    for r in results:
        for d in r.diagnostics:
            out.line(*_header(r.path, d, unsafe))
            if show_why and d.why:
                _why(out, d, "  ")


def full(out, results: list[FileResult], unsafe: bool, lines: dict, show_why: bool = False) -> None:
    """Each finding with its source line and a caret under the reported span, as ruff does.

    `lines` maps (path, cell or None, row) to the text of that line.
    """
    for r in results:
        for d in r.diagnostics:
            out.line(*_header(r.path, d, unsafe))
            text = lines.get((r.path, d.cell, d.location.row))
            if text is not None:
                text = text.rstrip("\r\n")
                row = str(d.location.row)
                pad = " " * len(row)
                col = max(1, d.location.column)
                if d.end_location.row == d.location.row and d.end_location.column > col:
                    width = d.end_location.column - col
                else:
                    width = max(1, len(text.rstrip()) - col + 1)
                # Keep tabs in the gutter so the caret lines up under tab-indented code.
                lead = "".join("\t" if ch == "\t" else " " for ch in text[: col - 1])
                style = _STYLE[d.severity.value]
                out.line((f"{pad} |", "blue"))
                out.line((f"{row} |", "blue"), (f" {text}", None))
                out.line((f"{pad} |", "blue"), (f" {lead}", None), (f"{'^' * max(1, width)} {d.code}", style))
                out.line((f"{pad} |", "blue"))
            if d.fix is not None:
                kind = "" if d.fix.applicability is Applicability.SAFE else " (unsafe)"
                out.line(("  ", None), ("= help", "cyan"), (f": {d.fix.message}{kind}", None))
            if show_why and d.why:
                _why(out, d, "  ")
            out.line()


def summary(out, results: list[FileResult], unsafe: bool, fixed: int = 0, errors: int = 0,
            files: int | None = None, config_errors: bool = False, uncovered: int = 0) -> None:
    """The closing lines: how many findings, how many fixable, what could not be checked."""
    total = sum(len(r.diagnostics) for r in results)
    n_safe, n_unsafe = fixable_counts(results)
    errs = f"{errors} error{'s' if errors != 1 else ''} reported above"
    if fixed or uncovered:
        more = f" (and {uncovered} more that the fixes uncovered)" if uncovered else ""
        out.line((f"Fixed {fixed} finding{'s' if fixed != 1 else ''}{more}.", None))
    if files == 0 and errors:
        out.line(("Nothing checked", "bold red"), (f": no file could be checked; {errs}.", None))
        return
    if total == 0:
        if errors:
            out.line((f"No findings in the files checked; {errs}.", None))
        elif not fixed and not uncovered:
            out.line(("All checks passed!", "green"))
    else:
        out.line((f"Found {total} finding{'s' if total != 1 else ''}" + (" remaining" if fixed or uncovered else "") +
                  (f"; {errs}." if errors else "."), None))
        n_fixable = n_safe + (n_unsafe if unsafe else 0)
        if n_fixable:
            out.line((f"[*] {n_fixable} fixable with `perflint fix" + (" --unsafe-fixes" if unsafe and n_unsafe else "")
                      + "`.", None))
        if n_unsafe and not unsafe:
            out.line((f"{n_unsafe} more fixable with `perflint fix --unsafe-fixes`.", None))
    if config_errors:
        out.line(("Files under a broken configuration were not checked.", None))


def statistics(console, results: list[FileResult], unsafe: bool = False) -> None:
    """Count, code, `[*]` if fixable, name; most frequent first (ruff's --statistics)."""
    counts: dict[str, list] = {}
    for r in results:
        for d in r.diagnostics:
            entry = counts.setdefault(d.code, [0, d.name, False])
            entry[0] += 1
            entry[2] = entry[2] or fixable(d, unsafe)
    if not counts:
        return
    from rich.table import Table

    table = Table(box=None, show_header=False, pad_edge=False)
    for code, (n, name, can_fix) in sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0])):
        table.add_row(str(n), code, "\\[*]" if can_fix else "", name)
    console.print(table)
