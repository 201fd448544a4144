"""Run the code before and after the PF4/PF5 fixes (CPU, fixed seeds) and check what the fix
promises: safe fixes leave results bit-identical, unsafe fixes stay within a stated tolerance
or are shown to change behaviour.  The `guard` tests reproduce, from
research/rule-facts-repro/, the failure each of the rules' guards keeps the fixer away from.

CUDA-only code is run on the CPU by swapping the device strings in the test harness.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from cli_support import fix_source  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny models: extra threads only add contention (and make timings noisy under load).
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def _fix(src: str, code: str, unsafe: bool) -> str:
    return fix_source(textwrap.dedent(src), unsafe=unsafe, codes=[code])


def _on_cpu(src: str) -> str:
    """The same program with every CUDA device swapped for the CPU."""
    for old, new in (('"cuda:0"', '"cpu"'), ('"cuda"', '"cpu"'), (".cuda(0)", '.to("cpu")'), (".cuda()", '.to("cpu")')):
        src = src.replace(old, new)
    assert "cuda" not in src.replace("torch.cuda.is_available", "")
    return src


def _run(src: str, **env) -> dict:
    ns: dict = dict(env)
    exec(compile(src, "<snippet>", "exec"), ns)  # noqa: S102 - test snippets only
    return ns


# ----------------------------------------------------------------------------------------
# PF409 — tensor-created-then-moved
# ----------------------------------------------------------------------------------------

PF409_SAFE = """
import numpy as np
import torch

device = torch.device("cuda")
arr = np.arange(12, dtype=np.float32).reshape(3, 4)
for step in range(2):  # built on every iteration (PF409 leaves one-off buffers alone)
    a = torch.zeros(4, 4).to(device)
    b = torch.ones(3).cuda()
    c = torch.full((2, 2), 0.1).to("cuda:0")
    d = torch.eye(3).to(device, torch.float16)
    e = torch.empty(0).to(device=device, non_blocking=True)
    f = torch.arange(10).cuda(0)
    g = torch.from_numpy(arr).to(device)  # host data: left alone
"""


def test_pf409_safe_fix_is_bit_identical():
    fixed = _fix(PF409_SAFE, "PF409", unsafe=False)
    assert fixed.count(".to(") == 1 and ".cuda(" not in fixed
    assert "g = torch.from_numpy(arr).to(device)" in fixed
    before, after = _run(_on_cpu(textwrap.dedent(PF409_SAFE))), _run(_on_cpu(fixed))
    for name in "abcdefg":
        x, y = before[name], after[name]
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), name


def test_pf409_random_constructors_are_unsafe_only():
    src = """
    import torch
    torch.manual_seed(0)
    for step in range(1):
        noise = torch.randn(5).to("cuda")
    """
    assert _fix(src, "PF409", unsafe=False) == textwrap.dedent(src)
    fixed = _fix(src, "PF409", unsafe=True)
    assert 'torch.randn(5, device="cuda")' in fixed
    # On the CPU the stream is the same; on CUDA the draw comes from the CUDA generator, so
    # a seeded run changes: that behaviour change is why the fix is unsafe.
    a, b = _run(_on_cpu(textwrap.dedent(src)))["noise"], _run(_on_cpu(fixed))["noise"]
    assert torch.equal(a, b)
    if torch.cuda.is_available():  # pragma: no cover - GPU machines only
        torch.manual_seed(0)
        cpu_draw = torch.randn(5).cuda()
        torch.manual_seed(0)
        assert not torch.equal(cpu_draw, torch.randn(5, device="cuda"))


def test_pf409_guard_float_ranges_depend_on_the_device():
    # CPU kernels accumulate float ranges in double (acc_type<float, false>), CUDA kernels in
    # float (acc_type<float, true>): emulate the CUDA formula and see the values differ.
    t = torch.arange(0, 1, 0.1)
    idx = np.arange(len(t), dtype=np.float32)
    float_acc = np.float32(0) + np.float32(0.1) * idx
    assert not np.array_equal(t.numpy(), float_acc)
    assert "device=" in _fix("import torch\nfor i in range(2):\n    r = torch.arange(0, 1, 0.1).to('cuda')\n", "PF409", unsafe=True)
    assert ".to(" in _fix("import torch\nfor i in range(2):\n    r = torch.arange(0, 1, 0.1).to('cuda')\n", "PF409", unsafe=False)


def test_pf409_guard_requires_grad_turns_a_non_leaf_into_a_leaf():
    moved = torch.zeros(3, requires_grad=True).to(torch.float64)
    created = torch.zeros(3, requires_grad=True, dtype=torch.float64)
    assert not moved.is_leaf and created.is_leaf
    src = "import torch\nfor i in range(2):\n    w = torch.zeros(3, requires_grad=True).to('cuda')\n"
    assert _fix(src, "PF409", unsafe=True) == src


# ----------------------------------------------------------------------------------------
# PF501 — slow-convolution (unsafe: equal up to FFT rounding)
# ----------------------------------------------------------------------------------------

PF501_SRC = """
import numpy as np
from scipy import signal

rng = np.random.default_rng(0)
audio = rng.standard_normal(16000).astype(np.float32)
rir = rng.standard_normal(4000).astype(np.float32)
wet = np.convolve(audio, rir)
wet2 = signal.convolve(audio, rir, method="direct")
"""


def test_pf501_fix_matches_within_fft_rounding():
    assert _fix(PF501_SRC, "PF501", unsafe=False) == textwrap.dedent(PF501_SRC)
    fixed = _fix(PF501_SRC, "PF501", unsafe=True)
    assert "signal.fftconvolve(audio, rir)" in fixed and "method=" not in fixed
    before, after = _run(textwrap.dedent(PF501_SRC)), _run(fixed)
    for name in ("wet", "wet2"):
        x, y = before[name], after[name]
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.allclose(x, y, rtol=1e-4, atol=1e-3 * np.abs(x).max())
        assert not np.array_equal(x, y)  # not bit-identical: hence unsafe


def test_pf501_guard_same_mode_lengths_differ():
    import scipy.signal as ss

    x, h = np.arange(5, dtype=np.float32), np.ones(8, dtype=np.float32)
    assert len(np.convolve(x, h, "same")) == 8 and len(ss.fftconvolve(x, h, "same")) == 5
    src = "import numpy as np\ny = np.convolve(a, b, mode='same')\n"
    assert _fix(src, "PF501", unsafe=True) == src


def test_pf501_guard_default_scipy_convolve_already_uses_fft():
    import scipy.signal as ss

    rng = np.random.default_rng(1)
    x = rng.standard_normal(64000).astype(np.float32)
    h = rng.standard_normal(16000).astype(np.float32)
    assert ss.choose_conv_method(x, h, mode="full") == "fft"
    assert np.array_equal(ss.convolve(x, h), ss.fftconvolve(x, h))


# ----------------------------------------------------------------------------------------
# PF401 — relu-not-inplace (unsafe; bit-identical where it fires)
# ----------------------------------------------------------------------------------------

PF401_SRC = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)
        self.act = nn.ReLU()
        self.head = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 3))

    def forward(self, x):
        h = self.bn(self.conv(x))
        h = F.relu(h)
        h = self.act(self.fc(h.flatten(1)))
        return self.head(h)
"""


def _train_net(ns: dict):
    torch.manual_seed(0)
    net = ns["Net"]()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4, 3, 8, 8)
    outs = []
    for _ in range(2):
        out = net(x)
        out.square().mean().backward()
        opt.step()
        opt.zero_grad()
        outs.append(out.detach())
    grads_net = ns["Net"]()
    grads_net.load_state_dict(net.state_dict())
    grads_net(x).sum().backward()
    return outs, [p.grad for p in grads_net.parameters()], net.bn.running_mean


def test_pf401_fix_is_bit_identical():
    fixed = _fix(PF401_SRC, "PF401", unsafe=True)
    assert fixed.count("inplace=True") == 3
    a, b = _train_net(_run(textwrap.dedent(PF401_SRC))), _train_net(_run(fixed))
    for x, y in zip(a[0] + a[1] + [a[2]], b[0] + b[1] + [b[2]]):
        assert torch.equal(x, y)


@pytest.mark.parametrize("producer", [torch.sigmoid, torch.tanh, torch.exp, lambda t: torch.softmax(t, -1), F.relu])
def test_pf401_guard_output_saving_producers_raise(producer):
    x = torch.randn(4, requires_grad=True)
    y = producer(x)
    F.relu(y, inplace=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.filterwarnings("ignore:Error detected in SigmoidBackward0")
def test_pf401_guard_holds_under_torch_compile():
    """torch.compile does not make the sigmoid guard moot: the traced backward still needs
    the overwritten sigmoid output (rule-facts-repro/compile_aot_eager_inplace.py)."""

    def inplace(t):
        return F.relu(torch.sigmoid(t), inplace=True).sum()

    x = torch.randn(8, requires_grad=True)
    with pytest.raises(Exception, match="modified by an inplace operation"):
        torch.compile(inplace, backend="aot_eager")(x).backward()
    src = "import torch\nimport torch.nn.functional as F\n\n@torch.compile\ndef f(t):\n    return F.relu(torch.sigmoid(t)).sum()\n"
    assert _fix(src, "PF401", unsafe=True) == src


def test_pf401_guard_leaves_views_residuals_and_dropout():
    leaf = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        F.relu(leaf, inplace=True)
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        F.relu(leaf.view(2, 2), inplace=True)
    lin = nn.Linear(4, 4)
    h = lin(torch.randn(2, 4))
    kept = h.detach().clone()
    F.relu(h, inplace=True)
    assert not torch.equal(h, kept)  # a later read of `h` (a residual) silently changes
    x = torch.randn(4)
    F.relu(nn.Dropout(0.5).eval()(x), inplace=True)  # dropout returns its input in eval mode
    assert (x >= 0).all()  # the caller's tensor was rewritten


# ----------------------------------------------------------------------------------------
# PF403 — no-mixed-precision (unsafe: bf16 autocast still converges)
# ----------------------------------------------------------------------------------------

PF403_SRC = """
import torch
import torch.nn as nn

device = "cuda"
torch.manual_seed(0)
X = torch.randn(512, 16)
Y = (X @ torch.randn(16, 1) > 0).float()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.BCEWithLogitsLoss()
losses = []
for step in range(120):
    x, y = X.to(device), Y.to(device)
    opt.zero_grad()
    # forward
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
"""


def test_pf403_fix_wraps_forward_and_still_converges():
    fixed = _fix(PF403_SRC, "PF403", unsafe=True)
    assert '    # forward\n    with torch.autocast("cuda", dtype=torch.bfloat16):\n        out = model(x)\n' \
           '        loss = criterion(out, y)\n    loss.backward()\n' in fixed
    assert _fix(PF403_SRC, "PF403", unsafe=False) == textwrap.dedent(PF403_SRC)
    fp32 = _run(_on_cpu(textwrap.dedent(PF403_SRC)))["losses"]
    bf16 = _run(_on_cpu(fixed))["losses"]
    assert bf16 != fp32  # numerics change: unsafe
    assert bf16[-1] < 0.25 * bf16[0]  # still converges
    assert abs(bf16[-1] - fp32[-1]) < 0.05  # stated tolerance on the final loss


DEVICE_OPTION_SRC = """
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
args = parser.parse_args()
device = torch.device(args.device)
torch.manual_seed(0)
X = torch.randn(256, 16)
Y = (X @ torch.randn(16, 1) > 0).float()
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
criterion = nn.BCEWithLogitsLoss()


def train_step(x, y):
    x, y = x.to(args.device), y.to(args.device)
    opt.zero_grad()
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    opt.step()
    return loss


for step in range(40):
    x, y = X.to(device), Y.to(device)
    opt.zero_grad()
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    opt.step()
last = train_step(X, Y)
print("dtype", out.dtype, "fused", bool(opt.param_groups[0]["fused"]), "loss", float(last))
"""


def test_pf403_pf302_fixes_follow_the_scripts_device_option(tmp_path):
    """With `--device cpu` the fixed script runs as before: autocast and `fused` are enabled
    only when the script's own device is CUDA (no "CUDA is not available" warning)."""
    fixed = _fix(DEVICE_OPTION_SRC, "PF403", unsafe=True)
    fixed = fix_source(fixed, unsafe=True, codes=["PF302"])
    assert 'with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):' in fixed
    assert 'enabled=torch.device(args.device).type == "cuda"):' in fixed
    assert 'lr=1e-2, fused=device.type == "cuda")' in fixed
    runs = {}
    for name, src in (("before", textwrap.dedent(DEVICE_OPTION_SRC)), ("after", fixed)):
        path = tmp_path / f"{name}.py"
        path.write_text(src)
        out = subprocess.run([sys.executable, "-W", "always", str(path), "--device", "cpu"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "CUDA is not available" not in out.stderr, out.stderr[-2000:]
        runs[name] = out.stdout.strip()
    assert runs["after"] == runs["before"]  # fp32, unfused on the CPU: the same numbers
    assert runs["after"].startswith("dtype torch.float32 fused False")


# ----------------------------------------------------------------------------------------
# PF404 — fp16 without a GradScaler (guard: why bf16 is exempt)
# ----------------------------------------------------------------------------------------


def test_pf404_guard_fp16_gradients_underflow_bf16_and_scaled_do_not():
    def zero_grad_fraction(dtype, scale):
        torch.manual_seed(0)
        lin = nn.Linear(16, 4)
        x = torch.randn(8, 16)
        with torch.autocast("cpu", dtype=dtype):
            loss = lin(x).float().pow(2).mean() * 1e-8
        (loss * scale).backward()
        return (lin.weight.grad == 0).float().mean().item()

    assert zero_grad_fraction(torch.float16, 1.0) > 0.5
    assert zero_grad_fraction(torch.bfloat16, 1.0) == 0.0
    assert zero_grad_fraction(torch.float16, 65536.0) == 0.0  # what GradScaler does


# ----------------------------------------------------------------------------------------
# PF405 / PF406 — TF32 and cudnn.benchmark
# ----------------------------------------------------------------------------------------

SETTINGS_SRC = """
import torch
import torch.nn as nn

model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(0)
x = torch.randn(2, 3, 8, 8).cuda()
for step in range(3):
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_pf405_pf406_fixes_insert_one_legacy_setting_each_and_run():
    fixed = fix_source(textwrap.dedent(SETTINGS_SRC), unsafe=True, codes=["PF405", "PF406"])
    # After the imports, set off by a blank line, the second setting next to the first.
    assert fixed.strip().split("\n\n")[:2] == [
        "import torch\nimport torch.nn as nn",
        'torch.backends.cudnn.benchmark = True\ntorch.set_float32_matmul_precision("high")',
    ]
    assert "fp32_precision" not in fixed and "allow_tf32" not in fixed
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark
    try:
        torch.manual_seed(0)
        before = _run(_on_cpu(textwrap.dedent(SETTINGS_SRC)))["model"]
        torch.manual_seed(0)
        after = _run(_on_cpu(fixed))["model"]
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cuda.matmul.allow_tf32  # the legacy getter agrees
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.benchmark = saved[1]
    for p, q in zip(before.parameters(), after.parameters()):
        # TF32 only exists on Ampere+ GPUs; on the CPU the results stay within rounding.
        assert torch.allclose(p, q, rtol=1e-3, atol=1e-5)


def test_pf405_guard_mixing_tf32_apis_raises():
    code = (
        "import torch\n"
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
        "try:\n"
        "    torch.backends.cuda.matmul.allow_tf32\n"
        "except RuntimeError as e:\n"
        "    print('RuntimeError', 'mix of the legacy and new APIs' in str(e))\n"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "RuntimeError True", out.stderr[-2000:]


# ----------------------------------------------------------------------------------------
# PF407 — graph breaks inside compiled functions
# ----------------------------------------------------------------------------------------


def test_pf407_guard_print_and_item_break_the_graph():
    dynamo = pytest.importorskip("torch._dynamo")

    def with_print(x):
        y = x * 2
        print("", end="")
        return y + 1

    def with_item(x):
        y = x * 2
        return y + y.sum().item()

    def clean(x):
        return (x * 2 + 1).sum()

    x = torch.randn(3)
    assert dynamo.explain(with_print)(x).graph_break_count == 1
    assert dynamo.explain(with_item)(x).graph_break_count == 1
    assert dynamo.explain(clean)(x).graph_break_count == 0


# ----------------------------------------------------------------------------------------
# PF502 — DDP accumulation with no_sync (world size 1, gloo, in a subprocess)
# ----------------------------------------------------------------------------------------

PF502_SRC = """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

torch.manual_seed(0)
model = DDP(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(4, 8), torch.randn(4, 2)) for _ in range(8)]
accum = 4

for i, (x, y) in enumerate(data):
    out = model(x)
    loss = ((out - y) ** 2).mean() / accum
    loss.backward()
    if (i + 1) % accum == 0:
        opt.step()
        opt.zero_grad()
"""

_DDP_HARNESS = r"""
import json, sys, tempfile
import torch, torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

sources = json.loads(sys.stdin.read())
store = tempfile.NamedTemporaryFile(delete=False).name
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
calls = [0]
_init = DistributedDataParallel.__init__

def counting_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    def hook(state, bucket):
        calls[0] += 1
        return default_hooks.allreduce_hook(None, bucket)
    self.register_comm_hook(None, hook)

DistributedDataParallel.__init__ = counting_init
result = {}
for key, src in sources.items():
    calls[0] = 0
    ns = {}
    exec(src, ns)
    result[key] = {"allreduces": calls[0], "params": [p.detach().flatten().tolist() for p in ns["model"].parameters()]}
DistributedDataParallel.__init__ = _init

# The hazard the fix's static_graph guard avoids.
m = DistributedDataParallel(torch.nn.Linear(4, 2), static_graph=True)
try:
    for _ in range(3):
        with m.no_sync():
            m(torch.randn(2, 4)).sum().backward()
        m(torch.randn(2, 4)).sum().backward()
    result["static_graph"] = "ok"
except RuntimeError as e:
    result["static_graph"] = str(e)[:200]
dist.destroy_process_group()
print(json.dumps(result))
"""


def test_pf502_no_sync_fix_skips_allreduces_and_keeps_parameters():
    pytest.importorskip("torch.distributed")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("no gloo backend")
    fixed = _fix(PF502_SRC, "PF502", unsafe=True)
    assert "with contextlib.nullcontext() if (i + 1) % accum == 0 else model.no_sync():" in fixed
    assert _fix(PF502_SRC, "PF502", unsafe=False) == textwrap.dedent(PF502_SRC)
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", "import torch; torch.set_num_threads(1)\n" + _DDP_HARNESS],
        input=json.dumps({"before": textwrap.dedent(PF502_SRC), "after": fixed}),
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["before"]["allreduces"] == 8 and result["after"]["allreduces"] == 2
    # World size 1: the one all-reduce of the summed gradient equals the per-step ones.
    assert result["before"]["params"] == result["after"]["params"]
    assert "expect_autograd_hooks_" in result["static_graph"]
