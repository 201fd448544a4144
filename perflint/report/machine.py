"""Machine-readable formats: `json` (ruff-compatible objects), `sarif` (2.1.0), `github`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import quote

from perflint import __version__
from perflint.diagnostics import FileError, FileResult

_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _loc(loc) -> dict:
    return {"column": loc.column, "row": loc.row}


_AT = re.compile(r"(?:^|\b)line (\d+), column (\d+)")


def _error_position(e: FileError) -> tuple[int, int]:
    """Where a file error points (a syntax error's line and column), else 1:1."""
    m = _AT.search(e.message)
    return (int(m.group(1)), int(m.group(2))) if m else (1, 1)


def _error_text(e: FileError) -> str:
    return f"{e.kind.value}: {e.message}"


def _errors_json(errors) -> list[dict]:
    """A file that could not be read, parsed or fixed, as ruff reports a syntax error: an
    object with `code` null."""
    out = []
    for e in errors:
        row, col = _error_position(e)
        out.append({"cell": None, "code": None, "end_location": {"column": col, "row": row},
                    "filename": os.path.abspath(e.path), "fix": None, "location": {"column": col, "row": row},
                    "message": _error_text(e), "name": e.kind.value, "noqa_row": None, "severity": "error",
                    "url": None, "why": []})
    return out


def to_json(results: list[FileResult], errors=()) -> str:
    from perflint.rules import docs_url

    out = _errors_json(errors)
    for r in results:
        filename = os.path.abspath(r.path)
        for d in r.diagnostics:
            out.append(
                {
                    "cell": d.cell,
                    "code": d.code,
                    "end_location": _loc(d.end_location),
                    "filename": filename,
                    "fix": None
                    if d.fix is None
                    else {
                        "applicability": d.fix.applicability.value,
                        "edits": [
                            {"content": e.content, "end_location": _loc(e.end_location), "location": _loc(e.location)}
                            for e in d.fix.edits
                        ],
                        "message": d.fix.message,
                    },
                    "location": _loc(d.location),
                    "message": d.message,
                    "name": d.name,
                    "noqa_row": d.location.row,
                    "severity": d.severity.value,
                    "url": docs_url(d.code),
                    "why": list(d.why),
                }
            )
    return json.dumps(out, indent=2)


def statistics_json(results: list[FileResult], unsafe: bool = False) -> str:
    """`--statistics --output-format json`: ruff's shape, most frequent first."""
    from perflint.report.counts import is_fixable as fixable

    counts: dict[str, dict] = {}
    for r in results:
        for d in r.diagnostics:
            entry = counts.setdefault(d.code, {"code": d.code, "name": d.name, "count": 0, "fixable": False})
            entry["count"] += 1
            entry["fixable"] = entry["fixable"] or fixable(d, unsafe)
    return json.dumps(sorted(counts.values(), key=lambda e: (-e["count"], e["code"])), indent=2)


def _artifact(path: str) -> dict:
    """A SARIF artifactLocation: relative to %SRCROOT% (the current folder) when the file
    is inside it, else an absolute file URI."""
    absolute = os.path.abspath(path)
    rel = os.path.relpath(absolute)
    if rel.startswith(".." + os.sep) or rel == ".." or os.path.isabs(rel):
        return {"uri": Path(absolute).as_uri()}
    return {"uri": quote(Path(rel).as_posix()), "uriBaseId": "%SRCROOT%"}


def to_sarif(results: list[FileResult], errors=()) -> str:
    from perflint.rules import docs_url
    from perflint.selection import rule_records

    registry = rule_records()
    used = sorted({d.code for r in results for d in r.diagnostics})
    rule_index = {code: i for i, code in enumerate(used)}
    rules = []
    for code in used:
        rule = registry.get(code)
        name = rule.name if rule else next(d.name for r in results for d in r.diagnostics if d.code == code)
        summary = rule.summary if rule else name
        doc = rule.doc() if rule else summary
        level = _SARIF_LEVEL[rule.severity.value] if rule else "warning"
        rules.append(
            {
                "id": code,
                "name": name,
                "shortDescription": {"text": summary},
                "fullDescription": {"text": summary},
                "help": {"text": doc, "markdown": doc},
                "defaultConfiguration": {"level": level},
                "helpUri": docs_url(code),
                "properties": {"fix": rule.fix_class if rule else "none", "tags": ["performance", "pytorch"]},
            }
        )
    sarif_results = []
    for r in results:
        artifact = _artifact(r.path)
        for d in r.diagnostics:
            region = {
                "startLine": d.location.row,
                "startColumn": d.location.column,
                "endLine": d.end_location.row,
                "endColumn": d.end_location.column,
            }
            sarif_results.append(
                {
                    "ruleId": d.code,
                    "ruleIndex": rule_index[d.code],
                    "level": _SARIF_LEVEL[d.severity.value],
                    "message": {"text": d.message},
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": artifact,
                                "region": region,
                            }
                        }
                    ],
                    **({"properties": {"cell": d.cell}} if d.cell is not None else {}),
                }
            )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "perflint",
                        "version": __version__,
                        "informationUri": "https://pypi.org/project/torch-perflint/",
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
                # Files that could not be read, parsed or fixed: the run did not analyse them.
                "invocations": [
                    {
                        "executionSuccessful": not errors,
                        "toolExecutionNotifications": [_sarif_notification(e) for e in errors],
                    }
                ],
                "results": sarif_results,
            }
        ],
    }
    return json.dumps(doc, indent=2)


def _sarif_notification(e: FileError) -> dict:
    row, col = _error_position(e)
    return {
        "level": "error",
        "message": {"text": f"{e.path}: {_error_text(e)}"},
        "descriptor": {"id": e.kind.value},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(e.path),
                                            "region": {"startLine": row, "startColumn": col}}}],
    }


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def to_github(results: list[FileResult], errors=()) -> str:
    lines = []
    for e in errors:
        path = Path(os.path.relpath(os.path.abspath(e.path))).as_posix()
        row, col = _error_position(e)
        props = f"file={_gh_escape(path, True)},line={row},col={col},title={_gh_escape(f'perflint ({e.kind.value})', True)}"
        lines.append(f"::error {props}::{_gh_escape(f'{path}:{row}:{col}: {_error_text(e)}')}")
    for r in results:
        path = Path(os.path.relpath(os.path.abspath(r.path))).as_posix()
        for d in r.diagnostics:
            level = _GITHUB_LEVEL[d.severity.value]
            props = (
                f"file={_gh_escape(path, True)},line={d.location.row},col={d.location.column},"
                f"endLine={d.end_location.row},endColumn={d.end_location.column},"
                f"title={_gh_escape(f'perflint ({d.code})', True)}"
            )
            cell = f"cell {d.cell}:" if d.cell is not None else ""
            lines.append(
                f"::{level} {props}::{_gh_escape(f'{path}:{cell}{d.location.row}:{d.location.column}: {d.code} {d.message}')}"
            )
    return "\n".join(lines)
