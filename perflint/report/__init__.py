"""Output formats. Each takes the run's results and writes text; none decides exit codes."""

from __future__ import annotations

FORMATS = ("full", "concise", "json", "sarif", "github")


def display_path(path: str) -> str:
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def where(path: str, d) -> str:
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{display_path(path)}:{cell}{d.location.row}:{d.location.column}"
