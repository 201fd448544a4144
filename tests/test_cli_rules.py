"""`perflint rule` and `perflint rules`, and the house format of every rule's documentation."""

from __future__ import annotations

import json
import re

import pytest

from cli_support import run
from perflint.rules import all_rules

SECTIONS = ["What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "Applies to", "References"]
FIX_CLASSES = {"none", "safe", "unsafe", "safe or unsafe"}


@pytest.mark.parametrize("code", sorted(all_rules()))
def test_every_rule_doc_has_the_seven_house_sections_in_order(code):
    rule = all_rules()[code]
    doc = rule.doc()
    heads = re.findall(r"^## (.+?)\s*$", doc, re.M)
    assert heads == SECTIONS, f"{code}: sections {heads}"
    bodies = re.split(r"^## .+$", doc, flags=re.M)[1:]
    for head, body in zip(heads, bodies):
        assert body.strip(), f"{code}: section '{head}' is empty"
    assert "```python" in bodies[SECTIONS.index("Example")], f"{code}: the example has no python block"
    assert "```python" in bodies[SECTIONS.index("Use instead")], f"{code}: 'Use instead' has no python block"
    assert re.fullmatch(r"PF\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name), rule.name
    assert rule.summary.strip()
    assert rule.fix_class in FIX_CLASSES


def test_rule_piped_prints_the_documentation_with_whole_lines():
    """`perflint rule PF201 | less` or `> file`: the markdown as written, no line wrapped at
    the 80 columns of a terminal that is not there."""
    r = run("rule", "PF201", env={"COLUMNS": "80"})
    assert r.exit_code == 0
    rule = all_rules()["PF201"]
    doc_lines = rule.doc().splitlines()
    assert any(len(line) > 80 for line in doc_lines)  # else the test shows nothing
    out_lines = r.stdout.splitlines()
    assert out_lines[0] == f"# PF201 ({rule.name})"
    for line in doc_lines:
        assert line in out_lines
    assert run("rule", "pf201", env={"COLUMNS": "80"}).stdout == r.stdout


def test_rule_on_a_terminal_renders_the_markdown(monkeypatch):
    from rich.console import Console

    import perflint.cli as cli

    monkeypatch.setattr(cli, "_console", lambda stderr=False: Console(force_terminal=True, width=120,
                                                                       color_system=None))
    r = run("rule", "PF402")
    assert r.exit_code == 0
    out = r.stdout
    rule = all_rules()["PF402"]
    assert "PF402" in out and rule.name in out
    for section in SECTIONS:
        assert section in out
    # Rendered, not raw: no markdown heading markers or code fences left.
    assert "## What it does" not in out and "```" not in out


@pytest.mark.parametrize("code", sorted(all_rules()))
def test_rule_docs_cite_only_what_a_user_can_open(code):
    """No references to files outside the project (research notes, repro scripts)."""
    doc = all_rules()[code].doc()
    assert "research/" not in doc and "rule-facts" not in doc, code


def test_rule_unknown_code_is_a_usage_error():
    r = run("rule", "PF000")
    assert r.exit_code == 2 and "PF000" in r.stderr
    assert run("rule").exit_code == 2


def test_rule_all_json():
    r = run("rule", "--all", "--output-format", "json")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert [d["code"] for d in data] == sorted(all_rules())
    for d in data:
        rule = all_rules()[d["code"]]
        assert d["name"] == rule.name and d["fix"] == rule.fix_class and d["default"] == rule.default
        assert d["explanation"] == rule.doc()
    one = json.loads(run("rule", "PF402", "--output-format", "json").stdout)
    assert one["code"] == "PF402" and one["min_torch"] == "2.4"


def test_rules_lists_code_name_fix_class_and_default_in_a_table():
    r = run("rules")
    assert r.exit_code == 0
    # piped (as here): plain columns, nothing drawn, one rule a line
    assert not re.search(r"[│┃┏━┡─]", r.stdout)
    assert r.stdout.splitlines()[0].split()[:2] == ["code", "name"]
    rows = {}
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in re.split(r"\s{2,}", line) if c.strip()]
        if cells and re.fullmatch(r"PF\d{3}", cells[0]):
            rows[cells[0]] = cells
    assert set(rows) == set(all_rules())
    for code, rule in all_rules().items():
        assert rows[code][1] == rule.name
        assert rows[code][2] == rule.fix_class
        assert rows[code][3] == ("on" if rule.default else "off")
    data = json.loads(run("rules", "--output-format", "json").stdout)
    assert [d["code"] for d in data] == sorted(all_rules())
