"""The language server's document logic, in process (no protocol): settings as the CLI
resolves them, a failing rule, noqa insertion, notebooks, client settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perflint.server.checker import Checker, Doc, hover_markdown, noqa_insertion, notebook_bytes, parse_client_settings

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = '''\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(Frames(transform=augment), batch_size=2)
model = torch.nn.Linear(2, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    loss = model(x.cuda(non_blocking=True)).sum()
    loss.backward()
    opt.step()
    print(loss.item())
'''


def _doc(tmp_path: Path, text: str = SCRIPT, name: str = "train.py") -> Doc:
    path = tmp_path / name
    path.write_text(text)
    return Doc(key=path.as_uri(), path=str(path), version=1, text=text)


def _apply(text: str, edits) -> str:
    """Engine edits (1-based rows and character columns) applied to `text`."""
    lines = text.split("\n")
    starts = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]

    def offset(loc):
        return starts[loc.row - 1] + loc.column - 1

    for e in sorted(edits, key=lambda e: (e.location.row, e.location.column), reverse=True):
        text = text[: offset(e.location)] + e.content + text[offset(e.end_location):]
    return text


def _codes(report) -> set[str]:
    return {d.code for d in report.diagnostics}


def test_settings_are_the_clis(tmp_path):
    from perflint.config import Resolver
    from perflint.options import options_for

    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nignore = ["PF201"]\ntarget-torch = "2.1"\n')
    doc = _doc(tmp_path)
    report = Checker(folders=[str(tmp_path)]).check(doc)
    cli = options_for(Path(doc.path), Resolver().for_path(Path(doc.path)), with_edits=False)
    assert report.options == cli
    assert "PF201" not in _codes(report) and "PF101" in _codes(report)


def test_excluded_files_are_not_reported(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-exclude = ["vendor/**"]\n')
    (tmp_path / "vendor").mkdir()
    checker = Checker(folders=[str(tmp_path)])
    assert checker.check(_doc(tmp_path, name="vendor/train.py")).diagnostics == []
    assert "PF101" in _codes(checker.check(_doc(tmp_path)))


def test_client_overrides_sit_where_command_line_flags_do(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nignore = ["PF201"]\n')
    overrides, problems = parse_client_settings({"perflint": {"select": "PF2", "targetTorch": "2.6",
                                                              "unsafeFixes": True, "colour": "blue"}})
    assert problems == [] and overrides == {"select": ["PF2"], "target_torch": (2, 6), "unsafe_fixes": True}
    report = Checker(overrides, folders=[str(tmp_path)]).check(_doc(tmp_path))
    assert _codes(report) == {"PF201"} and report.unsafe
    assert report.options.target_torch == (2, 6)
    _, problems = parse_client_settings({"select": ["PF9"], "unsafeFixes": "yes", "targetTorch": "two"})
    assert len(problems) == 3 and "PF9" in problems[0]


def test_a_failing_rule_is_logged_and_the_others_still_report(tmp_path, monkeypatch):
    from perflint.rules import all_rules

    def broken(self, facts):
        raise RuntimeError("boom")

    monkeypatch.setattr(all_rules()["PF201"], "check", broken)
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF201"]\n')  # off by default
    report = Checker(folders=[str(tmp_path)]).check(_doc(tmp_path))
    assert "PF101" in _codes(report) and "PF201" not in _codes(report)
    assert any("rule PF201 failed" in e.message and "boom" in e.message for e in report.errors)


def test_an_engine_crash_is_an_error_not_an_exception(tmp_path, monkeypatch):
    import perflint.engine

    def crash(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(perflint.engine, "lint_bytes", crash)
    report = Checker(folders=[str(tmp_path)]).check(_doc(tmp_path))
    assert report.diagnostics == [] and "MemoryError: no room" in report.errors[0].message


def test_notebook_fixes_stay_in_their_cells(tmp_path):
    cells = [("code", "import torch\n"), ("markdown", "# title"),
             ("code", "scaler = torch.cuda.amp.GradScaler()\nprint(scaler)\n")]
    doc = Doc(key="nb", path=str(tmp_path / "nb.ipynb"), version=1, cells=cells)
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF402"]\n')
    checker = Checker(folders=[str(tmp_path)])
    report = checker.check(doc)
    (d,) = [d for d in report.diagnostics if d.code == "PF402"]
    assert d.cell == 3 and d.location.row == 1
    edits = checker.edits_for(report, d)
    assert edits and all(e.location.row == e.end_location.row == 1 for e in edits)
    assert _apply(cells[2][1], edits).startswith('scaler = torch.amp.GradScaler("cuda")\n')
    new = checker.fix_all(report)
    assert new[0] == cells[0][1] and new[2].startswith('scaler = torch.amp.GradScaler("cuda")')


def test_syntax_error_position_in_a_notebook_cell(tmp_path):
    cells = [("code", "import torch\n"), ("markdown", "# title"), ("code", "x = 1\ny = (\n")]
    doc = Doc(key="nb", path=str(tmp_path / "nb.ipynb"), version=1, cells=cells)
    report = Checker(folders=[str(tmp_path)]).check(doc)
    assert report.syntax is not None and report.syntax.cell == 3 and report.syntax.row == 2


@pytest.mark.parametrize("line, row, code, expect", [
    ("x = loss.item()", 1, "PF201", "x = loss.item()  # noqa: PF201"),
    ("x = loss.item()  # running total", 1, "PF201", "x = loss.item()  # running total  # noqa: PF201"),
    ("x = loss.item()  # noqa: E501", 1, "PF201", "x = loss.item()  # noqa: E501, PF201"),
    ("x = loss.item()  # noqa: PF105 (why)", 1, "PF201", "x = loss.item()  # noqa: PF105, PF201 (why)"),
])
def test_noqa_insertion(line, row, code, expect):
    text = f"{line}\ny = 2\n"
    r, col, insert = noqa_insertion(text, row, code)
    lines = text.split("\n")
    lines[r - 1] = lines[r - 1][: col - 1] + insert + lines[r - 1][col - 1:]
    assert lines[0] == expect


def test_noqa_on_the_first_line_of_a_bracketed_call():
    text = "loader = DataLoader(\r\n    ds,\r\n)\r\n"
    assert noqa_insertion(text, 1, "PF101") == (1, 21, "  # noqa: PF101")


def test_no_noqa_where_a_comment_cannot_go():
    # The reported line ends inside a string, or with a backslash continuation.
    assert noqa_insertion('x = f("""a\nb""")\n', 1, "PF201") is None
    assert noqa_insertion("x = a + \\\n    b\n", 1, "PF201") is None


def test_notebook_bytes_keep_cell_numbers():
    import json

    data = json.loads(notebook_bytes([("code", "a = 1"), ("markdown", "# t"), ("code", "b = 2")]))
    assert [c["cell_type"] for c in data["cells"]] == ["code", "markdown", "code"]


def test_hover_text_is_the_rule_documentation():
    md = hover_markdown("PF201")
    assert md.startswith("**PF201** `item-in-loop`") and "#### What it does" in md and "#pf201" in md
    assert hover_markdown("PF999") is None


def test_the_server_never_imports_torch():
    code = ("import sys; from perflint.server.lsp import create_server; from perflint.server.checker import Checker; "
            "create_server(); Checker().check; assert 'torch' not in sys.modules, 'torch imported'")
    env_path = f"{ROOT}{':' + str(ROOT / 'runtime')}"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})


def test_server_command_without_pygls_says_how_to_install(tmp_path):
    # A site folder whose `pygls` cannot be imported stands in for a missing extra.
    (tmp_path / "pygls").mkdir()
    (tmp_path / "pygls" / "__init__.py").write_text("raise ImportError('No module named pygls')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}:{ROOT / 'runtime'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "perflint", "server"], capture_output=True, text=True, env=env,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and '.[server]"' in out.stderr  # from this checkout: pip install -e
