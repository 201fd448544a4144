"""The byte-level prefilter only saves time: over every file in fixtures/, results with and
without it are the same, for all rules together and for each rule alone.  With it on, a
file whose bytes pass is analysed by only the rules that find one of their own tokens in it
(`engine._runnable`), so the comparison with all rules together checks that too."""

from __future__ import annotations

from pathlib import Path

import pytest

from perflint.engine import LintOptions, lint_bytes, prefilter_tokens, _rules_for
from perflint.rules import all_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Hidden files are left out: `perflint verify` writes its fixed copy of a workload as a
# hidden temporary file beside it while it runs.
FILES = sorted(
    p
    for p in FIXTURES.rglob("*")
    if p.suffix in (".py", ".ipynb") and p.is_file() and not p.name.startswith(".")
)


def _target(raw: bytes) -> tuple[int, int]:
    """The fixture's own `# fixture: target-torch=X.Y` header, else 2.4."""
    import re

    m = re.search(rb"^#\s*fixture:\s*target-torch\s*=\s*(\d+)\.(\d+)", raw, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else (2, 4)


def _key(result):
    return (
        [(d.code, d.cell, d.location, d.end_location, d.message, d.fix) for d in result.diagnostics],
        [(e.kind, e.message) for e in result.errors],
    )


def test_there_are_fixtures_to_compare():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_prefilter_never_changes_results(path):
    raw = path.read_bytes()
    target = _target(raw)
    codes = tuple(all_rules())
    without = lint_bytes(str(path), raw, LintOptions(codes, target, prefilter=False))
    together = lint_bytes(str(path), raw, LintOptions(codes, target, prefilter=True))
    assert _key(together) == _key(without)
    # Each rule alone: where the prefilter skips the file, the full analysis finds nothing
    # for that rule either.
    for code in codes:
        options = LintOptions((code,), target, prefilter=True)
        tokens = prefilter_tokens(options.codes, options.target_torch)
        if any(tok in raw for tok in tokens):
            continue  # analysed either way: the same code path
        alone = lint_bytes(str(path), raw, options)
        assert alone.skipped
        expected = [d for d in without.diagnostics if d.code == code]
        assert expected == [], f"{code} fires in {path.name} but the prefilter skips the file"
        assert [(e.kind, e.message) for e in alone.errors] == [
            (e.kind, e.message) for e in without.errors if e.kind.value == "syntax-error"
        ]


def test_prefilter_skips_files_that_cannot_match_and_still_reports_syntax_errors():
    options = LintOptions(("PF402",), (2, 4), prefilter=True)
    clean = lint_bytes("a.py", b"def add(a, b):\n    return a + b\n", options)
    assert clean.skipped and not clean.errors and not clean.diagnostics
    broken = lint_bytes("b.py", b"def add(a, b:\n    return a + b\n", options)
    assert broken.skipped
    assert [e.kind.value for e in broken.errors] == ["syntax-error"]
    full = lint_bytes("b.py", b"def add(a, b:\n    return a + b\n", LintOptions(("PF402",), (2, 4), prefilter=False))
    assert _key(broken) == _key(full)


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix == ".py"][:20], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_parse_without_per_node_validation_builds_the_same_tree(path):
    import libcst as cst

    from perflint.engine import _parse_module

    text = path.read_text(encoding="utf-8")
    fast, reference = _parse_module(text), cst.parse_module(text)
    assert fast.deep_equals(reference)
    assert fast.code == text


def test_validation_is_back_after_parsing():
    import libcst as cst

    from perflint.engine import _parse_module

    _parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not an identifier")
    with pytest.raises(cst.ParserSyntaxError):
        _parse_module("def f(:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")
