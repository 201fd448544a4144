"""The edits of each finding's fix (`--output-format json`): computed once per file from
one application of the fixes, minimal (the changed tokens only), each finding's edits
equal to applying its fix alone; every finding links to its rule's documentation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perflint.engine as engine
from cli_support import AMP, run, write
from perflint.engine import LintOptions
from perflint.noqa import parse_suppressions
from perflint.positions import LineIndex, node_offsets
from perflint.rules import DOCS_FILE, all_rules, docs_url
from perflint.source import read_source

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p for p in (ROOT / "fixtures" / "rules").glob("*.py") if not p.name.endswith((".fixed.py", ".unsafe.py")))

THREE_AMP = """\
import torch

scaler = torch.cuda.amp.GradScaler()


def step(model, x, opt):
    with torch.cuda.amp.autocast():
        loss = model(x)
    scaler.scale(loss).backward()
    with torch.cuda.amp.autocast(dtype=torch.float16):
        out = model(x)
    return out
"""


def _apply_offsets(text: str, edits) -> str:
    lines = LineIndex(text)
    for e in sorted(edits, key=lambda e: (e.location.row, e.location.column), reverse=True):
        s = lines.offset(e.location.row, e.location.column)
        t = lines.offset(e.end_location.row, e.end_location.column)
        text = text[:s] + e.content + text[t:]
    return text


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_each_fix_edits_equal_applying_that_fix_alone(path):
    src = read_source(str(path))
    rules = engine._rules_for(LintOptions(codes=tuple(all_rules())))
    analysis = engine._analyze(src.text, str(path), rules, (2, 13))
    assert not isinstance(analysis, Exception)
    whole: dict = {}
    replaced = [n for _, v in analysis.findings if v.fix is not None for n in v.fix.replacements]
    offsets = node_offsets(analysis.module, [v.node for _, v in analysis.findings], whole, replaced)
    lines = LineIndex(src.text)
    by_plan = engine._fix_edits(analysis, src.text, lines, src, parse_suppressions(src.text), offsets, whole)
    plans = {id(v.fix): v.fix for _, v in analysis.findings if v.fix is not None and id(v.fix) in by_plan}
    for key, plan in plans.items():
        alone = engine._apply(analysis.module, [plan]).code
        assert _apply_offsets(src.text, by_plan[key]) == alone, (path.name, plan.message)


def test_edits_cover_the_changed_tokens_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"a.py": AMP})
    r = run("check", "--output-format", "json", "--select", "PF402", "--no-cache")
    edits = json.loads(r.stdout)[0]["fix"]["edits"]
    # torch.cuda.amp.GradScaler() -> torch.amp.GradScaler("cuda"): "cuda." out, '"cuda"' in.
    assert sorted((e["location"]["column"], e["end_location"]["column"], e["content"]) for e in edits) == [
        (15, 20, ""), (36, 36, '"cuda"')]


def test_edits_need_no_whole_file_rewrite_per_finding(tmp_path, monkeypatch):
    """Three findings, three fixes: each replacement is rendered where it stands; the file
    is not transformed and re-rendered once per finding."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"a.py": THREE_AMP})
    calls = []
    real = engine._apply
    monkeypatch.setattr(engine, "_apply", lambda module, plans: calls.append(len(plans)) or real(module, plans))
    r = run("check", "--output-format", "json", "--select", "PF402", "--no-cache", "-j1")
    data = json.loads(r.stdout)
    assert len(data) == 3 and all(d["fix"]["edits"] for d in data)
    assert calls == []
    # Each finding's edits touch its own line only.
    for d in data:
        assert {e["location"]["row"] for e in d["fix"]["edits"]} == {d["location"]["row"]}


def test_json_url_is_the_rules_docs_anchor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"a.py": AMP})
    d = json.loads(run("check", "--output-format", "json", "--select", "PF402").stdout)[0]
    assert d["url"] == docs_url("PF402")
    assert d["url"].startswith("file://") and d["url"].endswith("#pf402")
    sarif = json.loads(run("check", "--output-format", "sarif", "--select", "PF402").stdout)
    assert sarif["runs"][0]["tool"]["driver"]["rules"][0]["helpUri"] == docs_url("PF402")


def test_rule_reference_has_every_rule_and_is_up_to_date():
    from perflint.ruledoc import reference_html

    html = DOCS_FILE.read_text(encoding="utf-8")
    assert html == reference_html(), "regenerate it: python -m perflint.ruledoc"
    for code in all_rules():
        anchor = docs_url(code).rsplit("#", 1)[1]
        assert f'<section id="{anchor}">' in html


def _apply_edits(text: str, edits) -> str:
    out, at = [], 0
    for s, e, content in edits:
        assert s >= at  # in order, not overlapping
        out.append(text[at:s] + content)
        at = e
    return "".join(out) + text[at:]


def _body(n: int, indent: str) -> str:
    return "".join(f"{indent}a{i} = helper(model(x.cuda()))\n" for i in range(n))


def test_a_long_body_re_indented_is_diffed_line_by_line(monkeypatch):
    """A loop body of 1,000 lines wrapped in a new block: too many token pairs for the token
    matcher (it took minutes), so lines are paired first; the edits are the new indentation."""
    from perflint import fixedits

    old = _body(1000, " " * 8)
    new = " " * 8 + "with torch.autocast(\"cuda\"):\n" + _body(1000, " " * 12)
    token_runs = []
    real = fixedits._token_edits
    monkeypatch.setattr(fixedits, "_token_edits", lambda a, b, s: token_runs.append(len(a) * len(b)) or real(a, b, s))
    edits = fixedits.minimal_edits(old, new, 0)
    assert _apply_edits(old, edits) == new
    assert max(token_runs) <= fixedits.TOKEN_PAIRS_LIMIT
    assert len(edits) == 1001 and all(c.strip() in ("", 'with torch.autocast("cuda"):') for _, _, c in edits)


def test_below_the_limit_the_line_path_is_not_taken(monkeypatch):
    from perflint import fixedits

    monkeypatch.setattr(fixedits, "_edits_by_line", None)  # would raise if called
    old, new = _body(20, " " * 8), " " * 8 + "with a:\n" + _body(20, " " * 12)
    assert _apply_edits(old, fixedits.minimal_edits(old, new, 0)) == new


_LINES = st.lists(st.sampled_from(["x = f(y)\n", "    x = f(y)\n", "\n", "if a:\r\n", "  z += 1\r", "# c\n", "w"]),
                  max_size=30)


@settings(max_examples=200, deadline=None)
@given(_LINES, _LINES, st.integers(0, 3))
def test_edits_turn_the_old_text_into_the_new_on_both_paths(a, b, start):
    """Whichever path finds them, the edits applied to the old text give the new one."""
    from perflint import fixedits

    old, new = "".join(a), "".join(b)
    for edits in (fixedits.minimal_edits(old, new, start), fixedits._edits_by_line(old, new, start)):
        shifted = [(s - start, e - start, c) for s, e, c in edits]
        assert _apply_edits(old, shifted) == new


_SPAN = st.tuples(st.integers(0, 1200), st.integers(0, 600)).map(lambda t: (t[0], t[0] + t[1] * (t[1] % 3 != 0)))


@settings(max_examples=300, deadline=None)
@given(st.lists(_SPAN, max_size=25), st.lists(_SPAN, min_size=1, max_size=10))
def test_spans_find_exactly_the_clashes_every_pair_would(taken, queries):
    """`compose` files the taken edits by block; the answer is the all-pairs one."""
    from perflint import fixedits

    spans = fixedits._Spans([(s, e, "") for s, e in taken])
    for q in queries:
        assert spans.clashes(q) == any(fixedits._clash(q, t) for t in taken)
