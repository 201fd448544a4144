"""Dynamic proof for the PF1, PF2, PF3 and PF402 fixes: run code before and after the fix.

A safe fix must leave losses, gradients and outputs bit-identical; an unsafe fix must stay
within its stated tolerance or is shown to change behaviour the way its doc says.  Each
guard is shown preventing the failure it exists for (the shared research's repro scripts,
as tests).  CPU, fixed seeds, a few steps each.
"""

from __future__ import annotations

import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")

from pathlib import Path  # noqa: E402

from cli_support import fix_source  # noqa: E402
from perflint.engine import LintOptions, lint_bytes  # noqa: E402

FIXTURES_RULES = Path(__file__).resolve().parent.parent / "fixtures" / "rules"


def fixed(src: str, codes, unsafe=False, target=(2, 4)) -> str:
    src = textwrap.dedent(src)
    out = fix_source(src, unsafe=unsafe, codes=codes, target_torch=target)
    return out


def findings(src: str, codes, target=(2, 4)) -> list[str]:
    res = lint_bytes("snippet.py", textwrap.dedent(src).encode(), LintOptions(codes=tuple(codes), target_torch=target))
    assert not res.errors, res.errors
    return [d.code for d in res.diagnostics]


def run(src: str) -> dict:
    ns: dict = {"__name__": "snippet"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(textwrap.dedent(src), "<snippet>", "exec"), ns)
    return ns


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


TRAIN = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


# -- PF1 -------------------------------------------------------------------------------------


def test_pf104_fix_turns_a_constructor_that_raises_into_one_that_runs():
    src = TRAIN + "loader = DataLoader(ds, batch_size=8, persistent_workers=True, prefetch_factor=4)\nresult = [b[1] for b in loader]\n"
    with pytest.raises(ValueError, match="num_workers > 0"):
        run(src)
    after = fixed(src, ["PF104"])
    assert "persistent_workers" not in after and "prefetch_factor" not in after
    assert len(run(after)["result"]) == 8


def test_pf104_conditional_fix_keeps_working_when_workers_are_raised():
    src = TRAIN + "nw = 0\nloader = DataLoader(ds, batch_size=8, num_workers=nw, persistent_workers=True)\n"
    after = fixed(src, ["PF104"])
    assert "persistent_workers=nw > 0" in after
    run(after)
    run(after.replace("nw = 0", "nw = 1"))


def test_pf102_pin_memory_and_pf105_non_blocking_leave_batches_and_training_identical():
    src = TRAIN + """
loader = DataLoader(ds, batch_size=8, num_workers=1)  # PF102 leaves loaders without workers to PF101
losses = []
for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.detach())
result = losses
"""
    after = fixed(src, ["PF102", "PF105"], unsafe=False)
    assert "pin_memory=True" in after and "non_blocking=True" in after
    assert same(run(src)["result"], run(after)["result"])


def test_pf103_persistent_workers_same_data_when_the_dataset_is_unchanged():
    src = TRAIN + """
loader = DataLoader(ds, batch_size=16, num_workers=1)
result = [[b[1].clone() for b in loader] for epoch in range(2)]
"""
    after = fixed(src, ["PF103"], unsafe=True)
    assert "persistent_workers=True" in after
    assert same(run(src)["result"], run(after)["result"])


def test_pf103_is_unsafe_because_persistent_workers_keep_a_stale_dataset():
    src = """
import torch
from torch.utils.data import DataLoader, Dataset

class Scaled(Dataset):
    scale = 1.0
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return torch.tensor(float(i) * self.scale)

ds = Scaled()
loader = DataLoader(ds, batch_size=4, num_workers=1)
epochs = []
for epoch in range(2):  # whole epochs (PF103 leaves a loader read for one batch alone)
    epochs.append([b.tolist() for b in loader][0])
    ds.scale = 10.0
epoch1, epoch2 = epochs
"""
    before = run(src)
    after_src = fixed(src, ["PF103"], unsafe=True)
    after = run(after_src)
    assert before["epoch2"] == [0.0, 10.0, 20.0, 30.0]
    assert after["epoch2"] == [0.0, 1.0, 2.0, 3.0]  # the workers kept the old dataset
    assert fixed(src, ["PF103"], unsafe=False) == textwrap.dedent(src)  # never applied by plain `fix`


# -- PF2 ---------------------------------------------------------------------------------------


def test_pf204_detach_leaves_training_bit_identical_and_frees_the_graph():
    src = TRAIN + """
loader = DataLoader(ds, batch_size=8)
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total += loss
result = (float(total), [p.detach().clone() for p in model.parameters()], total.requires_grad)
"""
    after = fixed(src, ["PF204"])
    assert "total += loss.detach()" in after
    b, a = run(src)["result"], run(after)["result"]
    assert b[0] == a[0] and same(b[1], a[1])
    assert b[2] is True and a[2] is False


def test_pf204_guard_an_accumulator_that_is_backpropagated_is_left_alone():
    src = TRAIN + """
acc = 0
for x, y in DataLoader(ds, batch_size=32):
    acc += criterion(model(x), y)
acc.backward()
"""
    assert findings(src, ["PF204"]) == []
    broken = textwrap.dedent(src).replace("acc += criterion(model(x), y)", "acc += criterion(model(x), y).detach()")
    with pytest.raises(RuntimeError, match="does not require grad"):
        run(broken)


# -- PF3 ---------------------------------------------------------------------------------------


def test_pf301_unsafe_fix_sets_grads_to_none_and_keeps_the_trajectory():
    src = TRAIN + """
losses, cleared = [], []
for x, y in DataLoader(ds, batch_size=16):
    optimizer.zero_grad(set_to_none=False)
    cleared.append([p.grad is None for p in model.parameters()])
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.detach())
result = (losses, cleared)
"""
    after = fixed(src, ["PF301"], unsafe=True)
    assert "zero_grad(set_to_none=False)" not in after
    b, a = run(src)["result"], run(after)["result"]
    assert same(b[0], a[0])
    # the documented change: each step starts from None gradients instead of zero tensors
    assert not any(any(step) for step in b[1][1:]) and all(all(step) for step in a[1])


def test_pf302_fused_adamw_within_tolerance_on_cpu():
    # The model is moved with `.cuda()` only (no `.to(device)`), so the fix writes a plain
    # `fused=True`, which this runs on the CPU (torch >= 2.4).
    src = TRAIN.replace("torch.optim.SGD(model.parameters(), lr=0.1)", "torch.optim.AdamW(model.parameters(), lr=1e-2)") \
        .replace(").to(device)\n", ")\n") + """
model = model.cuda() if False else model
losses = []
for x, y in DataLoader(ds, batch_size=16):
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.detach())
result = [p.detach().clone() for p in model.parameters()]
"""
    after = fixed(src, ["PF302"], unsafe=True)
    assert "fused=True" in after
    for b, a in zip(run(src)["result"], run(after)["result"]):
        assert torch.allclose(b, a, atol=1e-6)


def test_pf302_never_offers_fused_sgd_because_it_breaks_after_a_gradscaler_overflow():
    src = "import torch\nmodel = torch.nn.Linear(2, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
    assert findings(src, ["PF302"]) == []
    # The failure the exclusion avoids (rule-facts §6): when a GradScaler skips the first
    # step, fused SGD has already created its momentum buffer with `empty_like` and later
    # reads it as if initialised; the for-loop/foreach implementations create no state.
    states = {}
    for fused in (True, None):
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, fused=fused)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
        opt.zero_grad()
        scaler.scale((p * 1e38).sum()).backward()  # overflows: the step is skipped
        scaler.step(opt)
        scaler.update()
        assert torch.equal(p.detach(), torch.ones(4))
        states[fused] = "momentum_buffer" in opt.state[p]
    assert states == {True: True, None: False}


def test_pf303_inference_mode_same_outputs_and_the_escape_guard():
    src = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
x = torch.randn(3, 4)

@torch.no_grad()
def accuracy(batch):
    return model(batch).argmax(1).tolist()

result = accuracy(x)
"""
    after = fixed(src, ["PF303"], unsafe=True)
    assert "@torch.inference_mode()" in after
    assert run(src)["result"] == run(after)["result"]
    escaping = """
import torch
model = torch.nn.Linear(4, 2)
student = torch.nn.Linear(4, 2)
x = torch.randn(3, 4)
with torch.no_grad():
    target = model(x)
loss = (student(x) * target).mean()
loss.backward()
"""
    assert findings(escaping, ["PF303"]) == []
    broken = textwrap.dedent(escaping).replace("torch.no_grad()", "torch.inference_mode()")
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        run(broken)


def test_pf304_no_grad_wrap_same_numbers_and_no_graph():
    src = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
loader = [(torch.randn(5, 4), torch.randint(0, 2, (5,))) for _ in range(3)]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
model.eval()
correct = 0
graphs = []
for x, y in loader:
    out = model(x)
    graphs.append(bool(out.requires_grad))
    correct += (out.argmax(1) == y).sum().item()
result = (correct, graphs)
"""
    after = fixed(src, ["PF304"])
    assert "with torch.no_grad():" in after
    b, a = run(src)["result"], run(after)["result"]
    assert b[0] == a[0]
    assert all(b[1]) and not any(a[1])


PF101_TRAIN = textwrap.dedent("""
    import json
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Squares(Dataset):
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            x = torch.randn(8, generator=g)
            return x, (x ** 2).sum(0, keepdim=True)


    if __name__ == "__main__":
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(Squares(96), batch_size=16, shuffle=True)
        losses = []
        for epoch in range(EPOCHS):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        print(json.dumps(losses))
""")


def _losses(tmp_path, code: str) -> list[float]:
    import json
    import subprocess
    import sys

    path = tmp_path / "train.py"
    path.write_text(code)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_pf101_workers_fix_keeps_the_loss_trajectory_of_a_seeded_map_style_dataset(tmp_path):
    src = PF101_TRAIN.replace("for epoch in range(EPOCHS):\n", "if True:\n")  # the loader is read once
    after = fixed(src, ["PF101"], unsafe=True)
    assert "shuffle=True, num_workers=min(8, os.cpu_count() or 1))" in after
    assert after.startswith("\nimport os\nimport json\n")
    assert fixed(src, ["PF101"]) == src  # unsafe only
    before = _losses(tmp_path, src)
    assert len(before) == 6 and _losses(tmp_path, after) == before


def test_pf101_persistent_workers_keep_the_first_epoch_and_reshuffle_later_ones_differently(tmp_path):
    # A persistent worker pool keeps its iterator, so later epochs no longer draw a worker
    # base seed from the global generator before shuffling: same samples, another order.
    src = PF101_TRAIN.replace("EPOCHS", "2")
    after = fixed(src, ["PF101"], unsafe=True)
    assert "num_workers=min(8, os.cpu_count() or 1), persistent_workers=True)" in after
    before, now = _losses(tmp_path, src), _losses(tmp_path, after)
    assert now[:6] == before[:6] and now[6:] != before[6:]
    without_persistence = after.replace(", persistent_workers=True", "")
    assert _losses(tmp_path, without_persistence) == before


def test_pf101_no_workers_fix_where_workers_would_change_the_data():
    src = """
import math

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(8))


class Counting(Dataset):
    def __init__(self):
        self.seen = []

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.seen.append(i)  # a log each worker keeps apart (a `self.seen += 1` counter: no finding at all)
        return math.sqrt(i)  # some work per sample (indexing alone is exempt, like TensorDataset)


a = DataLoader(Stream(), batch_size=4)
b = DataLoader(Counting(), batch_size=4)
c = DataLoader(Counting(), batch_size=4, collate_fn=lambda b: b)
d = DataLoader(make_dataset(transform=augment), batch_size=4)
"""
    assert findings(src, ["PF101"]) == ["PF101"] * 4
    assert fixed(src, ["PF101"], unsafe=True) == textwrap.dedent(src)
    # What the IterableDataset guard prevents: two workers each yield the whole stream.
    ns = run(src.replace("d = DataLoader(make_dataset(transform=augment), batch_size=4)", ""))
    doubled = ns["DataLoader"](ns["Stream"](), batch_size=4, num_workers=2)
    assert sorted(int(v) for batch in doubled for v in batch) == sorted(list(range(8)) * 2)


def test_pf305_unscale_fix_clips_the_true_gradients():
    src = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
x, y = torch.randn(16, 8), torch.randn(16, 1)
norms = []
for step in range(3):
    loss = ((model(x) - y) ** 2).mean() * 100
    opt.zero_grad()
    scaler.scale(loss).backward()
    norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
    scaler.step(opt)
    scaler.update()
result = (norms, [p.detach().clone() for p in model.parameters()])
"""
    reference_src = textwrap.dedent(src).replace(
        "scaler.scale(loss).backward()", "loss.backward()").replace("scaler.step(opt)", "opt.step()").replace(
        "scaler.update()", "")
    after = fixed(src, ["PF305"])
    assert "scaler.unscale_(opt)" in after
    before, fixed_run, reference = run(src)["result"], run(after)["result"], run(reference_src)["result"]
    assert before[0][0] > 1e4  # clipping saw scaled gradients
    assert fixed_run[0] == pytest.approx(reference[0], rel=1e-5)
    for a, r in zip(fixed_run[1], reference[1]):
        assert torch.allclose(a, r, atol=1e-6)


def test_pf305_guard_a_second_unscale_raises():
    scaler = torch.amp.GradScaler("cpu")
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler.scale(p.sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)


def test_pf305_no_fix_under_gradient_accumulation_where_an_inserted_unscale_would_raise():
    src = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(16, 8), torch.randn(16, 1)
loader = [(x, y)] * 4
for i, (xb, yb) in enumerate(loader):
    loss = ((model(xb) - yb) ** 2).mean() / 2
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if (i + 1) % 2 == 0:
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
result = [p.detach().clone() for p in model.parameters()]
"""
    assert findings(src, ["PF305"]) == ["PF305"]
    assert fixed(src, ["PF305"], unsafe=True) == textwrap.dedent(src)
    # What the guard prevents: the same insertion as in the plain case raises here.
    inserted = textwrap.dedent(src).replace(
        "    torch.nn.utils.clip_grad_norm_", "    scaler.unscale_(opt)\n    torch.nn.utils.clip_grad_norm_")
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        run(inserted)


# -- PF102 on data placed on a device --------------------------------------------------------------


def test_pf102_no_pin_memory_for_a_dataset_created_on_a_device_variable():
    # "meta" stands in for a CUDA device on this CPU machine: like CUDA tensors, meta tensors
    # cannot be pinned, and pinning is what the loader's pin-memory step does to each batch.
    from torch.utils.data._utils.pin_memory import pin_memory

    src = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "meta")
X = torch.randn(32, 4, device=device)
Y = torch.zeros(32, device=device)
loader = DataLoader(TensorDataset(X, Y), batch_size=8, num_workers=1)
for epoch in range(2):  # read every epoch (a loader read for one batch is left alone)
    for batch in loader:
        x, y = batch[0].to(device), batch[1].to(device)
"""
    assert findings(src, ["PF102"]) == []
    assert fixed(src, ["PF102"], unsafe=True) == textwrap.dedent(src)
    batch = run(src)["batch"]
    with pytest.raises(RuntimeError, match="cannot pin"):
        pin_memory(batch)
    # The same loader over host data gets the safe fix, and its batches are unchanged.
    host = src.replace(", device=device)", ")").replace('"meta"', '"cpu"') + "\nx = X.sum()\n"
    assert findings(host, ["PF102"]) == ["PF102"]
    after = fixed(host, ["PF102"])
    assert "pin_memory=True" in after
    assert same(run(host)["batch"], run(after)["batch"])


# -- PF402 -------------------------------------------------------------------------------------


def test_pf402_new_amp_api_behaves_identically_on_cpu():
    src = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
x = torch.randn(2, 8)
with torch.cpu.amp.autocast(True, torch.bfloat16):
    out = model(x)
scaler = torch.cpu.amp.GradScaler(2.0**10)
result = (out, out.dtype, scaler.get_scale())
"""
    after = fixed(src, ["PF402"])
    assert 'torch.amp.autocast("cpu", enabled=True, dtype=torch.bfloat16)' in after
    assert 'torch.amp.GradScaler("cpu", 2.0**10)' in after
    b, a = run(src)["result"], run(after)["result"]
    assert same(b[0], a[0]) and b[1] == a[1] == torch.bfloat16 and b[2] == a[2]


def test_pf402_guard_positional_arguments_must_be_keywordized():
    # Keeping `enabled` positional would pass it as `dtype` (rule-facts §10).
    with pytest.raises(TypeError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.amp.autocast("cpu", False):
                pass


def test_pf403_offers_no_fix_for_margin_losses_because_both_rewrites_break():
    src = (FIXTURES_RULES / "PF403_margin_loss.py").read_text()
    assert fixed(src, ["PF403"], unsafe=True) == src
    cpu = src.replace('"cuda"', '"cpu"').replace(".cuda()", "")
    check = "\nresult = torch.isfinite(model.weight.grad).all().item()\n"
    assert run(cpu + check)["result"] is True
    wrap = '    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
    forward = "    emb = model(x)  # expect: PF403\n"
    loss = "    loss = criterion(emb, y)\n"
    assert forward + loss in cpu
    only_forward = cpu.replace(forward + loss, wrap + "    " + forward + loss)
    with pytest.raises(RuntimeError, match="same dtype"):
        run(only_forward + check)
    # Wrapping the loss too: an embedding at (nearly) zero angle to its class weight makes
    # the clamp 1 - 1e-7 round to 1.0 in bf16, and acos's gradient is infinite there.
    import torch.nn.functional as F

    torch.manual_seed(0)
    emb = torch.randn(8, 16, requires_grad=True)
    weight = emb.detach()[:4].clone().requires_grad_()
    labels = torch.arange(8) % 4
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cos = F.linear(F.normalize(emb), F.normalize(weight)).clamp(-1 + 1e-7, 1 - 1e-7)
        F.cross_entropy(30 * torch.cos(torch.acos(cos) + 0.2), labels).backward()
    assert torch.isnan(emb.grad).any()
