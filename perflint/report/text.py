"""The `full` (rich, with source and caret) and `concise` (one line a finding) formats."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from perflint.diagnostics import Applicability, FileResult
from perflint.report import where
from perflint.report.counts import fixable_counts, is_fixable

fixable = is_fixable

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}


def _marker(d, unsafe: bool) -> str:
    return "\\[*] " if fixable(d, unsafe) else ""


def _header(path: str, d, unsafe: bool) -> str:
    return (f"[bold]{escape(where(path, d))}[/]: [{_STYLE[d.severity.value]}]{d.code}[/] "
            f"{_marker(d, unsafe)}{escape(d.message)}")


def _why(console: Console, d, indent: str) -> None:
    """`--show-why`: the evidence that the finding's code runs on every step."""
    for i, step in enumerate(d.why):
        lead = "[cyan]= why[/]: " if i == 0 else "       "
        console.print(f"{indent}{lead}{escape(step)}", highlight=False, soft_wrap=True)


def concise(console: Console, results: list[FileResult], unsafe: bool, show_why: bool = False) -> None:
    for r in results:
        for d in r.diagnostics:
            console.print(_header(r.path, d, unsafe), highlight=False, soft_wrap=True)
            if show_why and d.why:
                _why(console, d, "  ")


def full(console: Console, results: list[FileResult], unsafe: bool, lines: dict, show_why: bool = False) -> None:
    """Each finding with its source line and a caret under the reported span, as ruff does.

    `lines` maps (path, cell or None, row) to the text of that line.
    """
    for r in results:
        for d in r.diagnostics:
            console.print(_header(r.path, d, unsafe), highlight=False, soft_wrap=True)
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
                console.print(f"[blue]{pad} |[/]", highlight=False)
                console.print(f"[blue]{row} |[/] {escape(text)}", highlight=False, soft_wrap=True)
                console.print(f"[blue]{pad} |[/] {lead}[{style}]{'^' * max(1, width)} {d.code}[/]",
                              highlight=False, soft_wrap=True)
                console.print(f"[blue]{pad} |[/]", highlight=False)
            if d.fix is not None:
                kind = "" if d.fix.applicability is Applicability.SAFE else " (unsafe)"
                console.print(f"  [cyan]= help[/]: {escape(d.fix.message)}{kind}", highlight=False, soft_wrap=True)
            if show_why and d.why:
                _why(console, d, "  ")
            console.print()


def summary(console: Console, results: list[FileResult], unsafe: bool, fixed: int = 0, errors: int = 0,
            files: int | None = None, config_errors: bool = False, uncovered: int = 0) -> None:
    """The closing lines: how many findings, how many fixable, what could not be checked."""
    total = sum(len(r.diagnostics) for r in results)
    n_safe, n_unsafe = fixable_counts(results)
    errs = f"{errors} error{'s' if errors != 1 else ''} reported above"
    if fixed or uncovered:
        more = f" (and {uncovered} more that the fixes uncovered)" if uncovered else ""
        console.print(f"Fixed {fixed} finding{'s' if fixed != 1 else ''}{more}.")
    if files == 0 and errors:
        console.print(f"[bold red]Nothing checked[/]: no file could be checked; {errs}.")
        return
    if total == 0:
        if errors:
            console.print(f"No findings in the files checked; {errs}.")
        elif not fixed and not uncovered:
            console.print("[green]All checks passed![/]")
    else:
        console.print(f"Found {total} finding{'s' if total != 1 else ''}" + (" remaining" if fixed or uncovered else "") +
                      (f"; {errs}." if errors else "."))
        n_fixable = n_safe + (n_unsafe if unsafe else 0)
        if n_fixable:
            console.print(f"\\[*] {n_fixable} fixable with `perflint fix" + (" --unsafe-fixes" if unsafe and n_unsafe else "")
                          + "`.")
        if n_unsafe and not unsafe:
            console.print(f"{n_unsafe} more fixable with `perflint fix --unsafe-fixes`.")
    if config_errors:
        console.print("Files under a broken configuration were not checked.")


def statistics(console: Console, results: list[FileResult], unsafe: bool = False) -> None:
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
