"""Every rule's fixtures: the findings marked in the file, and the fixed output.

For `fixtures/rules/PF101.py` (and variants such as `PF101_torch1.py`):
* linting with only that rule gives exactly the `# expect:` markers;
* `PF101.fixed.py`, if present, is what `fix` (safe fixes) produces, else `fix` changes
  nothing; `PF101.unsafe.py` likewise for `fix --unsafe-fixes`;
* fixing again changes nothing, and the fixed file still parses;
* `snapshots/PF101.txt` holds every finding's span, message, fix and fix safety (as ruff's
  snapshot tests do); after a deliberate change, rewrite them with
  `PERFLINT_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_rule_fixtures.py -k snapshot`
  and review the diff.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from fixture_support import (
    FIXTURES,
    actual_findings,
    apply_fixes,
    describe,
    expected_findings,
    finding_lines,
    fixture_options,
)
from perflint.rules import FixClass, all_rules

RULE_DIR = FIXTURES / "rules"
CASES = sorted(
    p for p in RULE_DIR.glob("PF*.py") if not p.name.endswith((".fixed.py", ".unsafe.py"))
)


def _code(path: Path) -> str:
    return path.stem.split("_")[0].split(".")[0]


def test_every_rule_has_a_fixture():
    have = {_code(p) for p in CASES}
    missing = sorted(set(all_rules()) - have)
    assert not missing, f"rules without fixtures: {missing}"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_findings_match_markers(path: Path):
    code = _code(path)
    text = path.read_text()
    expected = expected_findings(text)
    if fixture_options(text).get("expect") != "none":
        assert expected, f"{path.name} marks no finding: a fixture must show the rule firing"
    actual = actual_findings(path, [code])
    missing = expected - actual
    extra = actual - expected
    assert not missing and not extra, f"missing: [{describe(missing)}]; unexpected: [{describe(extra)}]"


SNAPSHOTS = RULE_DIR / "snapshots"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_snapshot_of_spans_messages_and_fixes(path: Path):
    snap = SNAPSHOTS / (path.stem + ".txt")
    got = "".join(line + "\n" for line in finding_lines(path, [_code(path)]))
    if os.environ.get("PERFLINT_UPDATE_SNAPSHOTS"):
        SNAPSHOTS.mkdir(exist_ok=True)
        snap.write_text(got)
    assert snap.exists(), (f"no snapshot for {path.name}: run PERFLINT_UPDATE_SNAPSHOTS=1 python -m pytest "
                           "tests/test_rule_fixtures.py -k snapshot, and review it")
    assert got == snap.read_text(), f"{path.name}: findings differ from {snap.relative_to(FIXTURES.parent)}"


def test_every_snapshot_has_its_fixture():
    stems = {p.stem for p in CASES}
    assert sorted(p.stem for p in SNAPSHOTS.glob("*.txt") if p.stem not in stems) == []


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_fixed_output(path: Path, unsafe: bool):
    code = _code(path)
    original = path.read_text()
    expected_path = path.with_name(path.stem + (".unsafe.py" if unsafe else ".fixed.py"))
    fixed = apply_fixes(path, [code], unsafe)
    if expected_path.exists():
        assert fixed == expected_path.read_text()
    elif unsafe:
        # Without an .unsafe.py, unsafe fixes add nothing beyond the safe ones.
        safe_path = path.with_name(path.stem + ".fixed.py")
        assert fixed == (safe_path.read_text() if safe_path.exists() else original)
    else:
        assert fixed == original, "fix changed the file but there is no .fixed.py to compare with"
    ast.parse(fixed)
    again = apply_fixes(path, [code], unsafe, text=fixed)
    assert again == fixed, "fix is not idempotent"


def test_fixture_variants_cover_the_rule_classes():
    registry = all_rules()
    for code, rule in registry.items():
        fixed = list(RULE_DIR.glob(f"{code}*.fixed.py"))
        unsafe = list(RULE_DIR.glob(f"{code}*.unsafe.py"))
        if rule.fix_class is FixClass.NONE:
            assert not fixed and not unsafe, f"{code} has no fix but has fixed fixtures"
        if rule.fix_class.offers_safe:
            assert fixed, f"{code} has safe fixes but no .fixed.py fixture"
        if rule.fix_class.offers_unsafe:
            assert unsafe, f"{code} has unsafe fixes but no .unsafe.py fixture"
