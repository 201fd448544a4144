"""The hot-path model: a finding that claims a per-step cost carries the evidence (the loop,
the call that reaches the helper, the branch), and code that is not part of training gets
no such finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import run, write
from fixture_support import FIXTURES, options_for
from perflint.engine import lint_bytes

HELPER = """\
import torch
import torch.nn.functional as F

device = torch.device("cuda")
model = torch.nn.Linear(8, 3).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def log_loss(loss, history):
    if history is not None:
        history.append(loss.item())


for x, y in loader:
    loss = F.cross_entropy(model(x.to(device)), y.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    log_loss(loss, losses)
"""


def _json(result) -> list[dict]:
    return [d for d in json.loads(result.stdout) if d["code"]]


def test_json_gives_the_chain_from_the_loop_to_the_branch(tmp_path, monkeypatch):
    write(tmp_path, {"train.py": HELPER})
    monkeypatch.chdir(tmp_path)
    found = _json(run("check", "--no-cache", "--select", "PF201", "--output-format", "json", "train.py"))
    assert [(d["code"], d["location"]["row"]) for d in found] == [("PF201", 11)]
    why = found[0]["why"]
    assert why[0].startswith("line 14: `for x, y in loader` is a training loop")
    assert why[1].startswith("line 17: `loss.backward()`")
    assert why[2].startswith("line 19: it calls `log_loss(loss, losses)`")
    assert why[3].startswith("line 10: in `if history is not None:`")


def test_show_why_prints_the_chain_under_the_finding(tmp_path, monkeypatch):
    write(tmp_path, {"train.py": HELPER})
    monkeypatch.chdir(tmp_path)
    plain = run("check", "--no-cache", "--select", "PF201", "--output-format", "concise", "train.py")
    shown = run("check", "--no-cache", "--select", "PF201", "--output-format", "concise", "--show-why", "train.py")
    assert "why" not in plain.stdout
    assert "= why: line 14: `for x, y in loader` is a training loop" in shown.stdout
    assert "line 19: it calls `log_loss(loss, losses)` on each iteration" in shown.stdout
    full = run("check", "--no-cache", "--select", "PF201", "--show-why", "train.py")
    assert "= why: line 14" in full.stdout


def test_a_finding_without_a_per_step_claim_has_no_chain(tmp_path, monkeypatch):
    write(tmp_path, {"train.py": "from torch.utils.data import DataLoader\n\nloader = DataLoader(ds, batch_size=2)\n"})
    monkeypatch.chdir(tmp_path)
    found = _json(run("check", "--no-cache", "--select", "PF101", "--output-format", "json", "train.py"))
    assert found and all(d["why"] == [] for d in found)


PER_STEP = ("PF201", "PF202", "PF203", "PF204")


@pytest.mark.parametrize("path", sorted(p for p in (FIXTURES / "rules").glob("PF20*.py")
                                        if not p.name.endswith((".fixed.py", ".unsafe.py"))
                                        and p.stem.split("_")[0].split(".")[0] in PER_STEP), ids=lambda p: p.name)
def test_every_per_step_finding_carries_its_evidence(path: Path):
    code = path.stem.split("_")[0].split(".")[0]
    # the fixture's own options (`# fixture: target-torch=1.8`), as the fixture test reads them
    result = lint_bytes(str(path), path.read_bytes(), options_for((code,), path.read_text()))
    expected = path.read_text().count(f"expect: {code}")
    assert len(result.diagnostics) == expected  # the fixture's own markers: the loop below checks something
    for d in result.diagnostics:
        assert d.why, f"{path.name}:{d.location.row} {d.code} has no evidence"
        assert d.why[0].startswith(("line ", "cell ")) or ":" in d.why[0]


EVAL = """\
import torch

device = torch.device("cuda")


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        out = model(x.to(device, non_blocking=True))
        total += torch.nn.functional.cross_entropy(out, y.to(device, non_blocking=True)).item()
    return total
"""

TRAIN = """\
import torch
from evaluation import evaluate

device = torch.device("cuda")
model = torch.nn.Linear(8, 3).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    evaluate(model, val_loader)
"""

PREDICT = """\
import torch
from evaluation import evaluate

model = torch.load("model.pt")
print(evaluate(model, test_loader))
"""


def test_an_evaluation_a_training_module_calls_is_reported_with_that_evidence(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "evaluation.py": EVAL, "train.py": TRAIN})
    monkeypatch.chdir(tmp_path)
    found = _json(run("check", "--no-cache", "--select", "PF201", "--output-format", "json"))
    assert [(Path(d["filename"]).name, d["location"]["row"]) for d in found] == [("evaluation.py", 12)]
    assert "`evaluate` is called by a module that trains" in found[0]["why"][0]


def test_an_evaluation_only_an_inference_script_calls_is_not_reported(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "evaluation.py": EVAL, "predict.py": PREDICT})
    monkeypatch.chdir(tmp_path)
    assert _json(run("check", "--no-cache", "--select", "PF201", "--output-format", "json")) == []


pytest.importorskip("pytest_lsp")
from lsprotocol import types as lsp  # noqa: E402

from test_server import TRAIN as SERVER_TRAIN, client, open_doc, wait_diagnostics  # noqa: E402,F401


@pytest.mark.asyncio
async def test_hover_shows_why_the_finding_runs_every_step(client, tmp_path):  # noqa: F811
    uri = open_doc(client, tmp_path / "train.py", SERVER_TRAIN)
    diags = await wait_diagnostics(client, uri, lambda d: any(x.code == "PF201" for x in d))
    pf201 = next(d for d in diags if d.code == "PF201")
    hover = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=pf201.range.start))
    assert hover is not None
    text = hover.contents.value
    assert "PF201: why this runs on every step" in text
    assert "- line 12: `for x, y in loader` is a training loop" in text
    assert "## What it does" in text


AUDIO = """\
import torch


def spectrogram(y):
    if torch.min(y) < -1.0:
        print("min value is", torch.min(y))
    return torch.stft(y, 256, return_complex=True).abs()
"""

AUDIO_TRAIN = """\
import torch
from audio import spectrogram

device = torch.device("cuda")
model = torch.nn.Linear(8, 8).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0.0
for y in loader:
    out = model(y.to(device, non_blocking=True))
    loss = (out - y.to(device, non_blocking=True)).abs().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    spec = spectrogram(out.detach())
    total += loss.item()
    loss2 = model(y.to(device, non_blocking=True)).mean()
    total += loss2.item()
"""


def test_a_read_right_after_a_project_helper_that_reads_back_is_part_of_that_wait(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "audio.py": AUDIO, "train.py": AUDIO_TRAIN})
    monkeypatch.chdir(tmp_path)
    found = _json(run("check", "--no-cache", "--select", "PF201,PF202", "--output-format", "json"))
    got = sorted((Path(d["filename"]).name, d["location"]["row"], d["code"]) for d in found)
    # the helper's branch is the wait (reported there); `loss.item()` right after it is free;
    # the read after a second forward is a wait of its own
    assert got == [("audio.py", 5, "PF202"), ("train.py", 17, "PF201")]


def test_the_chain_survives_the_cache(tmp_path, monkeypatch):
    write(tmp_path, {"train.py": HELPER})
    monkeypatch.chdir(tmp_path)
    env = {"PERFLINT_CACHE_DIR": str(tmp_path / "cache")}
    first = run("check", "--select", "PF201", "--output-format", "json", "train.py", env=env)
    again = run("check", "--select", "PF201", "--output-format", "json", "train.py", env=env)
    assert _json(first)[0]["why"] and _json(again)[0]["why"] == _json(first)[0]["why"]
