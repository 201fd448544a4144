"""The rules' layout and metadata: one rule a file, found by walking the package; what other
parts of perflint need to know about a rule (fix class, per-step claim, editor tags, the
README's table) is read from the rule class, never from a list of codes kept by hand."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from perflint.rules import EditorTag, FixClass, all_rules

ROOT = Path(__file__).resolve().parent.parent
PERFLINT = ROOT / "perflint"
FAMILIES = {"1": "data_loading", "2": "host_sync", "3": "optim_autograd", "4": "precision", "5": "data_dist"}
CODE = re.compile(r"PF\d{3}")


def test_every_rule_is_in_its_own_file_named_after_it():
    for code, rule in all_rules().items():
        family = FAMILIES[code[2]]
        stem = f"{code.lower()}_{rule.name.replace('-', '_')}"
        assert rule.__module__ == f"perflint.rules.{family}.{stem}", code
    modules = {p.stem for p in (PERFLINT / "rules").glob("*/pf*.py")}
    assert len(modules) == len(all_rules()), "a pfNNN_ module without a rule, or with several"


def test_rules_are_found_by_walking_the_package_in_code_order():
    from perflint.rules import discover

    found = discover()
    assert list(found) == sorted(found) == list(all_rules())
    assert all(CODE.fullmatch(c) for c in found)


def test_fix_class_prints_as_it_always_has():
    assert [str(f) for f in FixClass] == ["none", "safe", "unsafe", "safe or unsafe"]
    assert f"{FixClass.SAFE_OR_UNSAFE}" == FixClass.SAFE_OR_UNSAFE.value == "safe or unsafe"
    assert json.dumps({"fix": FixClass.UNSAFE}) == '{"fix": "unsafe"}'
    assert [(f.offers_safe, f.offers_unsafe) for f in FixClass] == [
        (False, False), (True, False), (False, True), (True, True)]
    for rule in all_rules().values():
        assert isinstance(rule.fix_class, FixClass), rule.code
        assert all(isinstance(t, EditorTag) for t in rule.editor_tags), rule.code
        assert isinstance(rule.per_step, bool), rule.code


def test_a_fix_class_written_as_text_becomes_the_member_and_a_wrong_one_is_refused():
    from perflint.rules.base import Rule

    cls = type("R", (Rule,), {"code": "PF999", "name": "r", "summary": "s", "fix_class": "safe or unsafe"})
    assert cls.fix_class is FixClass.SAFE_OR_UNSAFE
    with pytest.raises(ValueError):
        type("R", (Rule,), {"code": "PF999", "name": "r", "summary": "s", "fix_class": "safe / unsafe"})


def test_per_step_rules_get_the_hot_path_evidence(tmp_path):
    """The engine gives a per-step rule's finding the file's hot path when the rule attaches
    none, and only a per-step rule's."""
    from perflint.engine import LintOptions, lint_bytes

    src = (
        "import torch\n"
        "model = torch.nn.Linear(4, 4).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n"
        "    loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    print(loss.item())\n"
    )
    per_step = sorted(c for c, r in all_rules().items() if r.per_step)
    result = lint_bytes(str(tmp_path / "train.py"), src.encode(),
                        LintOptions(codes=tuple(all_rules()), target_torch=(2, 4), prefilter=False))
    found = {d.code for d in result.diagnostics}
    assert found & set(per_step), found
    for d in result.diagnostics:
        if d.code in per_step:
            assert d.why, d.code


def test_editor_tags_come_from_the_rules():
    pytest.importorskip("pygls")
    from lsprotocol import types as lsp

    from perflint.server.lsp import diagnostic_tags

    for code, rule in all_rules().items():
        tags = diagnostic_tags(code)
        if EditorTag.DEPRECATED in rule.editor_tags:
            assert tags == [lsp.DiagnosticTag.Deprecated], code
        if not rule.editor_tags:
            assert tags is None, code
    assert any(r.editor_tags for r in all_rules().values())


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_no_rule_code_is_written_outside_the_rules():
    """A string that is a rule code (`"PF201"`) in perflint's code outside `perflint/rules/`
    is a list kept by hand; what a rule is, is declared on its class.  Docstrings and
    comments may name codes, and so may prose (help texts that give an example code)."""
    found = []
    for path in sorted(PERFLINT.rglob("*.py")):
        if (PERFLINT / "rules") in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and CODE.fullmatch(node.value.strip())):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "rule codes written by hand:\n" + "\n".join(found)


def test_the_rule_table_is_generated_from_the_rules():
    """perflint/rules/table.py (what selection, the prefilter and reports read without
    importing the rules) is exactly what the rule classes declare."""
    from perflint import selection
    from perflint.ruledoc import TABLE_FILE, table_source

    assert TABLE_FILE.read_text(encoding="utf-8") == table_source(), "regenerate it: python -m perflint.ruledoc"
    records = selection._records()  # the table's records (rule_records() gives the classes once imported)
    assert list(records) == list(all_rules())
    for code, r in all_rules().items():
        rec = records[code]
        assert (rec.name, rec.default, rec.severity, rec.fix_class, rec.tokens) == \
            (r.name, r.default, r.severity, r.fix_class, r.tokens)
        for target in ((1, 4), (1, 9), (1, 10), (1, 13), (2, 0), (2, 4), (2, 13), (3, 0)):
            assert rec.applies_to(target) == r.applies_to(target), (code, target)


def test_readme_rule_table_is_the_rules_metadata():
    """Each row is code, name, summary, fix class and default as the rule declares them;
    `python -m perflint.ruledoc` writes the table."""
    from perflint.ruledoc import README_TABLE_HEAD, readme_table

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(README_TABLE_HEAD)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    expected = [[code, r.name, r.summary, str(r.fix_class), "on" if r.default else "off"]
                for code, r in all_rules().items()]
    assert rows == expected, "regenerate the README's rule table: python -m perflint.ruledoc"
    assert text[start:start + len(readme_table())] == readme_table()
