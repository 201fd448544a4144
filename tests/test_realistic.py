"""Precision on realistic code: fixtures/realistic/ holds training and evaluation scripts
written the way such code is written (anti-patterns next to correct code that must stay
silent), each finding annotated with `# expect: PFxxx` on its line.  perflint must report
exactly the annotated findings: a missing one is a missed anti-pattern, an extra one is a
false alarm."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from cli_support import run
from fixture_support import FIXTURES, actual_findings, describe, expected_findings
from perflint.rules import all_rules

REALISTIC = FIXTURES / "realistic"
SCRIPTS = sorted(REALISTIC.glob("*.py"))


def test_there_are_at_least_25_scripts_each_listed_in_the_readme():
    assert len(SCRIPTS) >= 25
    readme = (REALISTIC / "README.md").read_text()
    for p in SCRIPTS:
        assert f"`{p.name}`" in readme, f"{p.name} is not described in fixtures/realistic/README.md"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_rule_reports_exactly_the_annotated_findings(path: Path):
    text = path.read_text()
    expected = expected_findings(text)
    actual = actual_findings(path, tuple(all_rules()))
    missing, extra = expected - actual, actual - expected
    assert not missing and not extra, f"missing: [{describe(missing)}]; unexpected: [{describe(extra)}]"


def _cli_findings(*select: str) -> Counter:
    r = run("check", str(REALISTIC), "--no-cache", "--output-format", "json", "--select", ",".join(select))
    assert r.exit_code in (0, 1), r.output
    out: Counter = Counter()
    for d in json.loads(r.stdout):
        out[(Path(d["filename"]).name, d["location"]["row"], d["code"])] += 1
    return out


def _annotated(prefixes: tuple[str, ...]) -> Counter:
    out: Counter = Counter()
    for p in SCRIPTS:
        for (row, code), n in expected_findings(p.read_text()).items():
            if code.startswith(prefixes):
                out[(p.name, row, code)] += n
    return out


def test_check_select_pf1_pf2_pf3_on_the_folder_gives_exactly_the_annotations():
    """The issue's acceptance command, `perflint check --select PF2,PF3 fixtures/realistic/`,
    with PF1 and PF409 added: the annotations are those of every rule, and PF201 reads a
    loop's blocking copy of its batch or of a host-made tensor as its wait unless PF105 or
    PF409 is there to report it."""
    expected = _annotated(("PF1", "PF2", "PF3", "PF409"))
    assert sum(expected.values()) >= 25  # the corpus exercises these rules
    actual = _cli_findings("PF1", "PF2", "PF3", "PF409")
    assert actual == expected, f"missing: {sorted(expected - actual)}; unexpected: {sorted(actual - expected)}"


def test_the_corpus_exercises_the_loop_rules():
    found = {code for p in SCRIPTS for (_, code) in expected_findings(p.read_text())}
    for code in ("PF101", "PF102", "PF105", "PF201", "PF202", "PF204", "PF301", "PF302", "PF304", "PF403"):
        assert code in found, f"no realistic script shows {code}"


def test_annotations_name_real_rules():
    known = set(all_rules())
    for p in SCRIPTS:
        for m in re.finditer(r"#\s*expect:\s*([^\n]*)", p.read_text()):
            for code in re.split(r"\s*,\s*", m.group(1).strip()):
                assert code in known, f"{p.name}: unknown code {code!r} in an annotation"
