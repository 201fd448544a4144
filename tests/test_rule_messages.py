"""Messages say what fits the code at hand: PF201's advice depends on the value read with
`.item()`; PF405/PF406 name what they report (the training loop, the conv layer)."""

from __future__ import annotations

import textwrap

import pytest

from perflint.engine import LintOptions, lint_bytes


def _messages(src: str, code: str) -> dict[int, str]:
    result = lint_bytes("t.py", textwrap.dedent(src).encode(), LintOptions(codes=(code,), prefilter=False))
    assert not result.errors
    return {d.location.row: d.message for d in result.diagnostics}


PF201_SRC = """\
import math
import torch

device = torch.device("cuda")
model = torch.nn.Linear(8, 3).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = []
total = correct = 0
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
    total += loss.item()
    out = model(x)  # (each read after a forward of its own: a read right after another is not reported apart)
    correct += (out.argmax(1) == y).sum().item()
    out = model(x)
    hits = out.argmax(1).eq(y).sum().item()
    out = model(x)
    acc = (out.argmax(1) == y).float().mean().item()
    out = model(x)
    if loss.item() > 10:
        print("diverging")
    out = model(x)
    if not math.isfinite(loss.item()):
        break
    out = model(x)
    peak = out.max().item()
"""


def test_pf201_advice_fits_the_value():
    msgs = _messages(PF201_SRC, "PF201")
    loss, count, count_eq, rate, branch, finite, other = (msgs[r] for r in (15, 17, 19, 21, 23, 26, 29))
    assert "loss.detach()" in loss and ".item()" in loss
    for m in (count, count_eq):
        assert "loss" not in m
        assert "correct += (pred == y).sum()" in m
    assert "loss" not in rate and ".sum()" in rate
    for m in (branch, finite):
        assert "loss.detach()" not in m and "running" not in m
        assert "branch" in m or "condition" in m
    assert "loss" not in other and "running +=" not in other
    assert len({loss, count, branch, other}) == 4


PF201_SIZE_SRC = """\
import numpy as np
import torch

device = torch.device("cuda")
model = torch.nn.Linear(8, 3).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, lengths in loader:
    x, lengths = x.to(device, non_blocking=True), lengths.to(device, non_blocking=True)
    loss = model(x).mean()
    loss.backward()
    opt.step()
    crop = int(lengths.min().item() / 2 - 1)
    start = np.random.randint(0, 100 - crop)
    clip = x[:, start:start + crop]
"""


def test_pf201_says_where_a_value_that_sizes_host_work_comes_from():
    msgs = _messages(PF201_SIZE_SRC, "PF201")
    assert list(msgs) == [12]
    assert "take it from the batch before it is copied to the device" in msgs[12]
    assert "running" not in msgs[12]


def _rows(path, codes) -> set[tuple[int, str]]:
    result = lint_bytes(str(path), path.read_bytes(), LintOptions(codes=tuple(codes), prefilter=False))
    assert not result.errors
    return {(d.location.row, d.code) for d in result.diagnostics}


def test_pf201_counts_a_blocking_copy_as_the_wait_only_while_no_selected_rule_reports_it():
    from fixture_support import FIXTURES

    path = FIXTURES / "rules" / "PF201_blocking_batch_copy.py"
    fires = {(80, "PF201"), (91, "PF201"), (103, "PF201"), (114, "PF201"), (168, "PF201")}
    batch_reads = {(20, "PF201"), (30, "PF201"), (56, "PF201"), (69, "PF201"), (128, "PF201"), (141, "PF201"), (156, "PF201")}  # after a blocking batch copy (PF105's)
    made_read = (43, "PF201")  # after a copy of `torch.rand(...)` (PF409's)
    assert {r for r in _rows(path, ["PF201"])} == fires
    with_copies = _rows(path, ["PF201", "PF105"])
    assert {r for r in with_copies if r[1] == "PF201"} == fires | batch_reads
    assert {r for r in with_copies if r[1] == "PF105"}  # PF105 reports the copies the reads no longer hide behind
    assert {r for r in _rows(path, ["PF201", "PF409"]) if r[1] == "PF201"} == fires | {made_read}
    assert {r for r in _rows(path, ["PF201", "PF105", "PF409"]) if r[1] == "PF201"} == fires | batch_reads | {made_read}


PF405_SRC = """\
import torch
import torch.nn as nn

model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def evaluate(loader):
    for x in loader:
        model(x.cuda())


for step in range(10):
    loss = model(torch.randn(2, 3, 8, 8).cuda()).sum()
    loss.backward()
    opt.step()
"""


def test_pf405_points_at_the_training_loop_and_pf406_at_the_conv_layer():
    tf32 = _messages(PF405_SRC, "PF405")
    assert list(tf32) == [13]
    assert "training loop" in tf32[13]
    cudnn = _messages(PF405_SRC, "PF406")
    assert list(cudnn) == [4]
    assert "conv" in cudnn[4].lower() and "layer" in cudnn[4]


def test_pf403_message_names_the_scripts_device_test():
    src = """\
    import torch
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        out = model(torch.randn(2, 4, device=device))
        loss = out.square().mean()
        loss.backward()
        opt.step()
    """
    (msg,) = _messages(src, "PF403").values()
    assert 'torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")' in msg
    assert "another device keeps fp32" in msg
    (plain,) = _messages(src.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cuda"'), "PF403").values()
    assert 'torch.autocast("cuda", dtype=torch.bfloat16)' in plain and "another device" not in plain


def test_pf403_says_why_it_offers_no_rewrite():
    from fixture_support import FIXTURES

    reasons = {"bce": "unsafe to autocast", "rnn": "cuDNN LSTM/GRU/RNN layers run in float16",
               "dataparallel": "`nn.DataParallel` runs its replicas in threads"}
    for name, why in reasons.items():
        src = (FIXTURES / "rules" / f"PF403_no_fix_{name}.py").read_text()
        result = lint_bytes("t.py", src.encode(), LintOptions(codes=("PF403",), prefilter=False))
        (d,) = result.diagnostics
        assert why in d.message and d.fix is None, (name, d.message)


OLD_TORCH_STEP = """\
import torch
import torch.nn as nn

model = nn.Linear(4, 1).cuda()
criterion = CRITERION
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = criterion(torch.sigmoid(model(x.cuda(non_blocking=True))), y.cuda(non_blocking=True))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("criterion, target, reported", [
    ("nn.MSELoss()", (1, 9), True), ("nn.BCELoss()", (1, 9), False),
    ("nn.MSELoss(); model = nn.DataParallel(model)", (1, 7), True),
    ("nn.MSELoss(); model = nn.DataParallel(model)", (1, 6), False),
])
def test_pf403_on_torch_1_6_to_1_9_advises_float16_unless_float16_autocast_would_raise(criterion, target, reported):
    """`BCELoss` raises under float16 autocast as well ("unsafe to autocast"); DataParallel's
    replica threads enter autocast only from torch 1.7 (pytorch PR #43102)."""
    src = OLD_TORCH_STEP.replace("CRITERION", criterion)
    got = lint_bytes("t.py", src.encode(), LintOptions(codes=("PF403",), prefilter=False, target_torch=target))
    assert not got.errors
    messages = [d.message for d in got.diagnostics]
    assert bool(messages) is reported
    if reported:
        assert "`torch.cuda.amp.autocast()`" in messages[0] and "torch %d.%d has neither" % target in messages[0]
        assert all(d.fix is None for d in got.diagnostics)
    old = lint_bytes("t.py", src.encode(), LintOptions(codes=("PF403",), prefilter=False, target_torch=(1, 5)))
    assert not old.diagnostics  # no `torch.cuda.amp` before 1.6
