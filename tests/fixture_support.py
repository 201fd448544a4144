"""Helpers for fixture-driven tests.

A fixture is a Python file with the expected findings written as trailing comments on the
line each finding is reported on:

    loader = DataLoader(ds, batch_size=32)  # expect: PF101, PF102

Header lines of the form `# fixture: target-torch=1.13` set options for that file.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from perflint.engine import LintOptions, fix_text, lint_bytes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>PF\d+(?:\s*,\s*PF\d+)*)")
_OPTION = re.compile(r"^#\s*fixture:\s*(?P<key>[\w-]+)\s*=\s*(?P<value>\S+)\s*$")


def expected_findings(text: str) -> Counter:
    out: Counter = Counter()
    for row, line in enumerate(text.splitlines(), start=1):
        m = _EXPECT.search(line)
        if m:
            for code in re.split(r"\s*,\s*", m.group("codes").strip()):
                out[(row, code)] += 1
    return out


def fixture_options(text: str) -> dict[str, str]:
    opts = {}
    for line in text.splitlines()[:10]:
        m = _OPTION.match(line.strip())
        if m:
            opts[m.group("key")] = m.group("value")
    return opts


def options_for(codes, text: str) -> LintOptions:
    opts = fixture_options(text)
    target = (2, 4)
    if "target-torch" in opts:
        major, minor = opts["target-torch"].split(".")[:2]
        target = (int(major), int(minor))
    return LintOptions(codes=tuple(codes), target_torch=target, prefilter=False)


def actual_findings(path: Path, codes, text: str | None = None) -> Counter:
    raw = path.read_bytes() if text is None else text.encode()
    result = lint_bytes(str(path), raw, options_for(codes, raw.decode()))
    assert not result.errors, [e.one_line() for e in result.errors]
    return Counter((d.location.row, d.code) for d in result.diagnostics)


def finding_lines(path: Path, codes) -> list[str]:
    """Every finding of `codes` in the fixture as a snapshot line: span, code, message, and
    the fix with its safety (`-` for none)."""
    raw = path.read_bytes()
    result = lint_bytes(str(path), raw, options_for(codes, raw.decode()))
    assert not result.errors, [e.one_line() for e in result.errors]
    out = []
    for d in sorted(result.diagnostics, key=lambda d: (d.location.row, d.location.column, d.code, d.message)):
        fix = f"{d.fix.applicability.value}: {d.fix.message}" if d.fix is not None else "-"
        out.append(f"{d.location.row}:{d.location.column}-{d.end_location.row}:{d.end_location.column} "
                   f"{d.code} {d.message}\n    fix: {fix}")
    return out


def apply_fixes(path: Path, codes, unsafe: bool, text: str | None = None) -> str:
    text = path.read_text() if text is None else text
    new, _, errors = fix_text(text, str(path), options_for(codes, text), unsafe)
    assert not errors, [e.one_line() for e in errors]
    return new


def describe(diff: Counter) -> str:
    return ", ".join(f"line {row}: {code}" + (f" ×{n}" if n > 1 else "") for (row, code), n in sorted(diff.items()))
