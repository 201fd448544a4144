"""A checked file's first pass may answer the questions about its own functions from its own
summary (`engine._first_pass`, for long files that call their own functions): the findings
must be those of the two-pass check, and the file is analysed once instead of twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import run, write
from fixture_support import FIXTURES
from perflint import engine

PROJECTS = sorted(p for p in (FIXTURES / "projects").iterdir() if (p / "pyproject.toml").is_file())


def _findings(path: Path) -> list:
    r = run("check", str(path), "--no-cache", "--jobs", "1", "--output-format", "json", "--exit-zero",
            "--select", "ALL")
    return sorted((f["filename"], f["location"]["row"], f["location"]["column"], f["code"], f["message"])
                  for f in json.loads(r.stdout))


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_answering_from_the_file_alone_first_gives_the_same_findings(project, monkeypatch):
    two_pass = _findings(project)
    monkeypatch.setattr(engine, "FIRST_PASS_ALONE_CHARS", 0)
    assert _findings(project) == two_pass


TRAIN = """\
import torch
from torch.utils.data import DataLoader


def train(model, loader, opt, device):
    for x, y in loader:
        x = x.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()


def main():
    device = torch.device("cuda")
    model = torch.nn.Linear(4, 2).to(device)
    loader = DataLoader(ds, batch_size=8, num_workers=2, pin_memory=True, persistent_workers=True)
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), device)


if __name__ == "__main__":
    main()
"""


def _count_rule_passes(monkeypatch) -> list:
    """A list that receives, for every analysis of a file, the number of rules it ran."""
    calls: list = []
    real = engine._analyze

    def counting(text, path, rules, *args, **kwargs):
        calls.append(len(rules))
        return real(text, path, rules, *args, **kwargs)

    monkeypatch.setattr(engine, "_analyze", counting)
    return calls


def test_a_file_that_calls_its_own_functions_is_analysed_once(tmp_path, monkeypatch):
    # Another file in the project: `train.py` is not alone in it (see the test below).
    write(tmp_path, {"pyproject.toml": "", "train.py": TRAIN, "utils.py": "def helper():\n    return 1\n"})
    calls = _count_rule_passes(monkeypatch)
    monkeypatch.chdir(tmp_path)
    before = _findings(Path("train.py"))
    assert len([n for n in calls if n]) == 2  # the rules ran twice: alone, then with the project
    calls.clear()
    monkeypatch.setattr(engine, "FIRST_PASS_ALONE_CHARS", 0)
    assert _findings(Path("train.py")) == before
    assert len([n for n in calls if n]) == 1  # the rules ran once; the other walk only summarised
    # the device reached `train`'s copies from `main`
    assert {(row, code) for _, row, _, code, _ in before} >= {(7, "PF105"), (8, "PF105")}


def test_a_script_alone_in_its_project_is_analysed_once(tmp_path, monkeypatch):
    """Its own summary is the whole project: the first pass is also the last, whatever its size."""
    write(tmp_path, {"pyproject.toml": "", "train.py": TRAIN})
    calls = _count_rule_passes(monkeypatch)
    monkeypatch.chdir(tmp_path)
    alone = _findings(Path("train.py"))
    assert len([n for n in calls if n]) == 1
    write(tmp_path, {"utils.py": "def helper():\n    return 1\n"})  # no longer alone: two passes
    calls.clear()
    assert _findings(Path("train.py")) == alone
    assert len([n for n in calls if n]) == 2


@pytest.mark.parametrize("text, calls", [
    ("def f(x):\n    return x\n\ndef g():\n    return f (1)\n", True),  # `f (1)`: a call
    ("def f(x):\n    return x\n\ndef g():\n    return ff(1) + self.f\n", False),  # another name; no call
    ("class Net(Base):\n    pass\n\nnet = Net(\n)\n", True),  # a class called over two lines
    ("class Net(Base):\n    pass\n", False),  # only its own header
    ("async def step(b):\n    pass\n\ndef g():\n    return obj.step(1)\n", True),  # spelled like a method call
    ("def f(x):\n    return x\n\nf2(1)\nx1f(2)\n", False),  # the name inside longer words
    ("x = 1\n", False),
])
def test_which_texts_call_their_own_functions(text, calls):
    assert engine._calls_its_own_functions(text) is calls


def test_a_long_file_calling_none_of_its_functions_is_scanned_once(monkeypatch):
    """One scan of the text for all names: 3,000 top-level functions once took 15 s (a scan
    per name). Counted as the scans made, not as time."""
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(3000))
    scans = []

    class Counting:
        def __init__(self, pattern):
            self.pattern = pattern

        def findall(self, s):
            scans.append(self.pattern.pattern)
            return self.pattern.findall(s)

    for name in ("_TOP_DEF", "_CALLED_WORD", "_HEADER"):
        monkeypatch.setattr(engine, name, Counting(getattr(engine, name)))
    assert engine._calls_its_own_functions(text) is False
    assert len(scans) == 3
