"""Jupyter notebooks: positions as cell:row:col, code cells fixed and nothing else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from cli_support import AMP, AMP_FIXED, run, write
from perflint.source import read_source


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n"})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def jupyter_notebook() -> dict:
    """A notebook as Jupyter saves it: outputs, metadata, markdown, magics, unicode."""
    return {
        "cells": [
            {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": lines("# Training ✓\n\nUses `torch.cuda.amp.GradScaler()`.")},
            {"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {"tags": ["setup"]},
             "outputs": [{"name": "stdout", "output_type": "stream", "text": ["Collecting foo\n"]}],
             "source": lines("%matplotlib inline\n!pip install foo \\\n    bar\nfiles = !ls\nimport torch\n")},
            {"cell_type": "code", "execution_count": 2, "id": "c2", "metadata": {},
             "outputs": [{"data": {"text/plain": ["1.0"], "image/png": "iVBORw0KGgo="}, "execution_count": 2,
                          "metadata": {}, "output_type": "execute_result"}],
             "source": lines("for i in range(2):\n    %time x = i\nscaler = torch.cuda.amp.GradScaler()  # ü\nscaler?")},
            {"cell_type": "code", "execution_count": None, "id": "c3", "metadata": {}, "outputs": [],
             "source": lines("%%bash\nif true; then\n    echo hi\nfi")},
            {"cell_type": "raw", "id": "r1", "metadata": {}, "source": ["torch.cuda.amp.autocast()"]},
            {"cell_type": "code", "execution_count": None, "id": "c4", "metadata": {"collapsed": True}, "outputs": [],
             "source": "with torch.cuda.amp.autocast():\n    pass\n"},
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python", "version": "3.11.7"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def test_findings_are_reported_by_cell_row_and_column(proj):
    write(proj, {"nb.ipynb": dump(jupyter_notebook())})
    r = run("check", "--no-cache", "--output-format", "concise", "--select", "PF402")
    assert r.exit_code == 1, r.output
    assert [line.split(": PF402")[0] for line in r.stdout.splitlines() if "PF402" in line] == [
        "nb.ipynb:cell 3:3:10", "nb.ipynb:cell 6:1:6",
    ]
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF402")
    data = json.loads(r.stdout)
    assert [(d["cell"], d["location"]["row"], d["location"]["column"]) for d in data] == [(3, 3, 10), (6, 1, 6)]
    r = run("check", "--no-cache", "--select", "PF402")
    assert "3 | scaler = torch.cuda.amp.GradScaler()  # ü" in r.stdout


def test_fix_rewrites_code_cells_and_nothing_else(proj):
    original = dump(jupyter_notebook())
    write(proj, {"nb.ipynb": original})
    r = run("fix", "--select", "PF402")
    assert r.exit_code == 0, r.output
    after_text = (proj / "nb.ipynb").read_text(encoding="utf-8")
    after = json.loads(after_text)
    expected = jupyter_notebook()
    expected["cells"][2]["source"] = lines(
        'for i in range(2):\n    %time x = i\nscaler = torch.amp.GradScaler("cuda")  # ü\nscaler?'
    )
    expected["cells"][5]["source"] = 'with torch.amp.autocast("cuda"):\n    pass\n'
    assert after == expected
    # Byte for byte, only the two changed source values differ.
    assert after_text == dump(expected)
    old_lines, new_lines = original.splitlines(), after_text.splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b]
    assert len(changed) == 2 and all("GradScaler" in new_lines[i] or "autocast" in new_lines[i] for i in changed)


def test_fix_keeps_the_notebook_json_layout(proj):
    nb = jupyter_notebook()
    for style in ({"indent": 2}, {"indent": 4, "ensure_ascii": True}, {"indent": None}):
        text = json.dumps(nb, **style)
        write(proj, {"nb.ipynb": text})
        assert run("fix", "--select", "PF402").exit_code == 0
        new = (proj / "nb.ipynb").read_text()
        expected = json.loads(text)
        expected["cells"][2]["source"][2] = 'scaler = torch.amp.GradScaler("cuda")  # ü\n'
        expected["cells"][5]["source"] = 'with torch.amp.autocast("cuda"):\n    pass\n'
        assert new == json.dumps(expected, **style)


def test_diff_shows_cells(proj):
    write(proj, {"nb.ipynb": dump(jupyter_notebook())})
    r = run("fix", "--diff", "--select", "PF402")
    assert r.exit_code == 1
    assert "--- nb.ipynb:cell 3" in r.stdout and "--- nb.ipynb:cell 6" in r.stdout
    assert '+scaler = torch.amp.GradScaler("cuda")  # ü' in r.stdout


def test_syntax_error_in_a_cell_names_the_cell(proj):
    nb = jupyter_notebook()
    nb["cells"][5]["source"] = "import torch\ndef f(:\n"
    write(proj, {"nb.ipynb": dump(nb), "ok.py": AMP})
    r = run("check", "--no-cache", "--output-format", "concise", "--select", "PF402")
    assert r.exit_code == 2
    assert "nb.ipynb: syntax error: cell 6, line 2" in r.stderr
    assert "ok.py:3:10: PF402" in r.stdout


def test_notebooks_of_other_languages_are_not_checked(proj):
    nb = jupyter_notebook()
    nb["metadata"] = {"kernelspec": {"language": "R", "name": "ir"}, "language_info": {"name": "R"}}
    write(proj, {"nb.ipynb": dump(nb)})
    r = run("check", "--no-cache", "--select", "PF402")
    assert r.exit_code == 0


def test_a_notebook_that_is_not_json(proj):
    write(proj, {"nb.ipynb": "{not json", "ok.py": AMP})
    r = run("check", "--no-cache", "--select", "PF402", "--output-format", "concise")
    assert r.exit_code == 2
    assert "nb.ipynb: invalid notebook JSON" in r.stderr
    assert "ok.py" in r.stdout


# ---------------------------------------------------------------------------------------
# Round trips (property tests)
# ---------------------------------------------------------------------------------------

_code_line = st.sampled_from([
    "import torch", "x = 1", "%matplotlib inline", "!pip install foo", "    y = 2", "if x:", "for i in range(3):",
    "def f():", "    return 1", "s = 'é ✓'", "files = !ls", "obj?", "", "# comment", "print('%d' % 3)", "\tz = 3",
])
_cell = st.one_of(
    st.tuples(st.just("code"), st.lists(_code_line, max_size=6).map("\n".join)),
    st.tuples(st.just("markdown"), st.text(max_size=30)),
    st.tuples(st.just("code"), st.lists(_code_line, max_size=4).map(lambda ls: "\n".join(["%%bash", *ls]))),
)


def _nb_text(cells, as_list: bool, indent, ensure_ascii: bool) -> str:
    out = []
    for kind, source in cells:
        cell = {"cell_type": kind, "metadata": {"k": "ü"}, "source": lines(source) if as_list else source}
        if kind == "code":
            cell.update({"execution_count": 3, "outputs": [{"output_type": "stream", "name": "stdout", "text": ["ok ✓\n"]}]})
        out.append(cell)
    nb = {"cells": out, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=indent, ensure_ascii=ensure_ascii) + ("\n" if indent else "")


@settings(max_examples=150, deadline=None)
@given(cells=st.lists(_cell, max_size=5), as_list=st.booleans(), indent=st.sampled_from([None, 1, 2]),
       ensure_ascii=st.booleans(), bom=st.booleans())
def test_unchanged_notebook_round_trips_byte_exact(cells, as_list, indent, ensure_ascii, bom):
    raw = (b"\xef\xbb\xbf" if bom else b"") + _nb_text(cells, as_list, indent, ensure_ascii).encode()
    src = read_source("n.ipynb", raw)
    assert src.encode(src.text) == raw


@settings(max_examples=150, deadline=None)
@given(cells=st.lists(_cell, min_size=1, max_size=5), as_list=st.booleans(), indent=st.sampled_from([None, 1, 2]),
       ensure_ascii=st.booleans(), new_line=st.sampled_from(["z = 'ß'", "import os", "w = 0  # é"]), data=st.data())
def test_editing_one_cell_changes_only_that_cells_source(cells, as_list, indent, ensure_ascii, new_line, data):
    text = _nb_text(cells, as_list, indent, ensure_ascii)
    src = read_source("n.ipynb", text.encode())
    spans = src.notebook.cells
    if not spans:
        return
    span = data.draw(st.sampled_from(spans))
    virtual = src.text.split("\n")
    # Insert a line at the start of the chosen cell, as a fix that adds a statement would.
    virtual.insert(span.first_row - 1, new_line)
    new_raw = src.encode("\n".join(virtual))
    before, after = json.loads(text), json.loads(new_raw)
    old_src = "".join(before["cells"][span.index - 1]["source"])
    new_src = after["cells"][span.index - 1]["source"]
    assert ("".join(new_src) if isinstance(new_src, list) else new_src) == new_line + "\n" + old_src
    assert isinstance(new_src, list) is as_list
    after["cells"][span.index - 1]["source"] = before["cells"][span.index - 1]["source"]
    assert after == before
    # Outside the changed value, the text is untouched: the old and new texts differ only
    # in a window that holds no other key.
    new_text = new_raw.decode()
    prefix = 0
    while prefix < min(len(text), len(new_text)) and text[prefix] == new_text[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < min(len(text), len(new_text)) - prefix
           and text[len(text) - 1 - suffix] == new_text[len(new_text) - 1 - suffix]):
        suffix += 1
    window = text[prefix : len(text) - suffix]
    for key in ('"cell_type"', '"metadata"', '"outputs"', '"execution_count"', '"nbformat"'):
        assert key not in window


def test_automagic_pip_install_is_not_a_syntax_error(proj):
    # IPython runs `pip install …` without its `%` (automagic): Jupyter accepts the cell.
    nb = jupyter_notebook()
    nb["cells"][5]["source"] = "pip install torch\nconda install -y numpy\nscaler = torch.cuda.amp.GradScaler()\n"
    write(proj, {"nb.ipynb": dump(nb)})
    r = run("check", "--no-cache", "--output-format", "concise", "--select", "PF402")
    assert r.exit_code == 1, r.output
    assert "nb.ipynb:cell 6:3:10: PF402" in r.stdout
    fixed = run("fix", "--no-cache", "--select", "PF402")
    assert fixed.exit_code == 0, fixed.output
    cell = json.loads((proj / "nb.ipynb").read_text())["cells"][5]["source"]
    assert "".join(cell).startswith("pip install torch\nconda install -y numpy\n")
    # `cd folder` after a `!git clone` (Colab notebooks), `pwd` alone: automagics too
    nb["cells"][5]["source"] = "cd DeOldify\npwd\nscaler = torch.cuda.amp.GradScaler()\n"
    write(proj, {"nb.ipynb": dump(nb)})
    r = run("check", "--no-cache", "--output-format", "concise", "--select", "PF402")
    assert r.exit_code == 1, r.output
    assert "nb.ipynb:cell 6:3:10: PF402" in r.stdout
    # a name that merely starts like it is still Python: `pip_install = 1` parses, untouched
    nb["cells"][5]["source"] = "pipeline = 1\npip install torch\n"
    write(proj, {"nb.ipynb": dump(nb)})
    assert run("check", "--no-cache", "--select", "PF402").exit_code == 1
