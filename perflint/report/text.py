"""The `full` (rich, with source and caret) and `concise` (one line a finding) formats."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from perflint.diagnostics import Applicability, FileResult
from perflint.report import where

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}


def _marker(d, unsafe: bool) -> str:
    if d.fix is None:
        return ""
    if d.fix.applicability is Applicability.SAFE or unsafe:
        return "[*] "
    return ""


def concise(console: Console, results: list[FileResult], unsafe: bool) -> None:
    for r in results:
        for d in r.diagnostics:
            console.print(
                f"{escape(where(r.path, d))}: [{_STYLE[d.severity.value]}]{d.code}[/] {_marker(d, unsafe)}{escape(d.message)}",
                highlight=False,
                soft_wrap=True,
            )


def full(console: Console, results: list[FileResult], unsafe: bool, lines: dict) -> None:
    for r in results:
        for d in r.diagnostics:
            console.print(
                f"[bold]{escape(where(r.path, d))}[/]: [{_STYLE[d.severity.value]}]{d.code}[/] "
                f"{_marker(d, unsafe)}{escape(d.message)}",
                highlight=False,
                soft_wrap=True,
            )
            text = lines.get((r.path, d.cell or 0, d.location.row))
            if text is not None:
                row = str(d.location.row)
                pad = " " * len(row)
                col = d.location.column
                width = (
                    d.end_location.column - col
                    if d.end_location.row == d.location.row and d.end_location.column > col
                    else max(1, len(text.rstrip()) - col + 1)
                )
                console.print(f"[blue]{pad} |[/]", highlight=False)
                console.print(f"[blue]{row} |[/] {escape(text.rstrip())}", highlight=False, soft_wrap=True)
                console.print(
                    f"[blue]{pad} |[/] {' ' * (col - 1)}[{_STYLE[d.severity.value]}]{'^' * max(1, width)} {d.code}[/]",
                    highlight=False,
                    soft_wrap=True,
                )
                console.print(f"[blue]{pad} |[/]", highlight=False)
            if d.fix is not None:
                kind = "" if d.fix.applicability is Applicability.SAFE else " (unsafe)"
                console.print(f"  [cyan]= help[/]: {escape(d.fix.message)}{kind}", highlight=False)
            console.print()


def summary(console: Console, results: list[FileResult], unsafe: bool, fixed: int = 0, verb: str = "fix") -> None:
    total = sum(len(r.diagnostics) for r in results)
    safe = sum(1 for r in results for d in r.diagnostics if d.fix and d.fix.applicability is Applicability.SAFE)
    uns = sum(1 for r in results for d in r.diagnostics if d.fix and d.fix.applicability is Applicability.UNSAFE)
    if fixed:
        console.print(f"Fixed {fixed} finding{'s' if fixed != 1 else ''}.")
    if total == 0:
        if not fixed:
            console.print("[green]All checks passed![/]")
        return
    console.print(f"Found {total} finding{'s' if total != 1 else ''}" + (" remaining." if fixed else "."))
    fixable = safe + (uns if unsafe else 0)
    if fixable:
        console.print(f"[*] {fixable} fixable with `perflint {verb}`" + (" --unsafe-fixes" if unsafe and uns else "") + ".")
    if uns and not unsafe:
        console.print(f"{uns} more fixable with `perflint fix --unsafe-fixes`.")


def statistics(console: Console, results: list[FileResult]) -> None:
    counts: dict[str, list] = {}
    for r in results:
        for d in r.diagnostics:
            entry = counts.setdefault(d.code, [0, d.name, False])
            entry[0] += 1
            entry[2] = entry[2] or d.fix is not None
    table = Table(box=None, show_header=False, pad_edge=False)
    for code, (n, name, fixable) in sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0])):
        table.add_row(str(n), code, "[*]" if fixable else "", name)
    console.print(table)
