"""What each rule's fix is worth on this machine: paired micro-benchmarks.

    python benchmarks/rule_effects.py [--device cuda] [--quick] [--json OUT.json] [--only PF403,PF405]

Each case times one operation (a matmul, a training step, an optimizer step, a copy) in
the form a rule reports and in the form its fix or message asks for, with the same inputs
and the same model, and prints one table: median time of each, the ratio, and the
interquartile range as the noise.  Timing uses `torch.utils.benchmark.Timer`
(`blocked_autorange`), which synchronises the device around each block.  The numbers
are for the machine it runs on; the rule docs quote the results committed under
`benchmarks/results/` together with this command and the device.

CUDA-only cases (TF32, cudnn.benchmark, pinned copies, empty_cache) are skipped on the
CPU.  `--quick` uses tiny sizes and short timings (tests run it on the CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import benchmark


@dataclass
class Result:
    rule: str
    case: str
    baseline: str
    optimized: str
    baseline_ms: float
    optimized_ms: float
    baseline_iqr_ms: float
    optimized_iqr_ms: float
    speedup: float
    note: str = ""


@dataclass
class Case:
    rule: str
    name: str
    baseline: str
    optimized: str
    cuda_only: bool
    build: Callable[["Ctx"], tuple[Callable[[], object], Callable[[], object], str]]


@dataclass
class Ctx:
    device: torch.device
    quick: bool
    min_run_time: float

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def time_ms(fn: Callable[[], object], ctx: Ctx) -> tuple[float, float]:
    fn()  # warm up (cudnn autotuning, allocator, lazy init)
    fn()
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    m = benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=ctx.min_run_time)
    return m.median * 1e3, m.iqr * 1e3


def conv_net(width: int) -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for cout, stride in ((width, 1), (width, 2), (2 * width, 1), (2 * width, 2), (4 * width, 1), (4 * width, 2)):
        layers += [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)


def transformer(d: int, layers: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(d, nhead=max(d // 64, 1), dim_feedforward=4 * d, batch_first=True,
                                       dropout=0.0)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def conv_setup(ctx: Ctx, batch_full: int, res_full: int = 128, width_full: int = 64):
    """A seeded conv net, its SGD optimizer and one batch on the device."""
    torch.manual_seed(0)
    batch, res, width = ctx.size(batch_full, 4), ctx.size(res_full, 16), ctx.size(width_full, 8)
    model = conv_net(width).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, 3, res, res, device=ctx.device)
    y = torch.randint(0, 10, (batch,), device=ctx.device)
    return model, opt, x, y, batch, res, width


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               autocast: bool, device: torch.device) -> torch.Tensor:
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        out = model(x)
        loss = F.cross_entropy(out.float().flatten(0, -2) if out.dim() > 2 else out.float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


# -- cases ----------------------------------------------------------------------------------

def tf32_matmul(ctx: Ctx):
    n = ctx.size(8192, 256)
    a, b = (torch.randn(n, n, device=ctx.device) for _ in range(2))

    def run(precision: str):
        def fn():
            torch.set_float32_matmul_precision(precision)
            return a @ b
        return fn

    return run("highest"), run("high"), f"{n}x{n} fp32 matmul"


def autocast_cnn(ctx: Ctx):
    model, opt, x, y, batch, res, width = conv_setup(ctx, 128)
    return (lambda: train_step(model, opt, x, y, False, ctx.device),
            lambda: train_step(model, opt, x, y, True, ctx.device),
            f"conv net training step, batch {batch}, {res}x{res}, width {width}")


def autocast_transformer(ctx: Ctx):
    torch.manual_seed(0)
    batch, seq, d, n_layers = ctx.size(16, 2), ctx.size(512, 16), ctx.size(1024, 64), ctx.size(8, 2)
    model = nn.Sequential(transformer(d, n_layers), nn.Linear(d, 1000)).to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d, device=ctx.device)
    y = torch.randint(0, 1000, (batch * seq,), device=ctx.device)
    return (lambda: train_step(model, opt, x, y, False, ctx.device),
            lambda: train_step(model, opt, x, y, True, ctx.device),
            f"transformer training step, {n_layers} layers, d {d}, batch {batch} x {seq} tokens")


def cudnn_benchmark(ctx: Ctx):
    model, opt, x, y, batch, res, _ = conv_setup(ctx, 64)

    def run(flag: bool):
        def fn():
            torch.backends.cudnn.benchmark = flag
            return train_step(model, opt, x, y, False, ctx.device)
        return fn

    return run(False), run(True), f"fp32 conv net training step, batch {batch}, {res}x{res}"


def channels_last(ctx: Ctx):
    torch.manual_seed(0)
    batch, res, width = ctx.size(128, 4), ctx.size(128, 16), ctx.size(64, 8)
    nchw = conv_net(width).to(ctx.device)
    nhwc = conv_net(width).to(ctx.device).to(memory_format=torch.channels_last)
    nhwc.load_state_dict(nchw.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (nchw, nhwc)]
    x = torch.randn(batch, 3, res, res, device=ctx.device)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), device=ctx.device)
    return (lambda: train_step(nchw, opts[0], x, y, True, ctx.device),
            lambda: train_step(nhwc, opts[1], x_cl, y, True, ctx.device),
            f"bf16 conv net training step, batch {batch}, {res}x{res}")


def fused_adamw(ctx: Ctx):
    torch.manual_seed(0)
    d, n_layers = ctx.size(1024, 64), ctx.size(12, 2)
    models = [transformer(d, n_layers).to(ctx.device) for _ in range(2)]
    opts = [torch.optim.AdamW(models[0].parameters(), lr=1e-4),
            torch.optim.AdamW(models[1].parameters(), lr=1e-4, fused=True)]
    for m in models:
        for p in m.parameters():
            p.grad = torch.randn_like(p)
    n_params = sum(p.numel() for p in models[0].parameters())
    n_tensors = len(list(models[0].parameters()))
    return (opts[0].step, opts[1].step,
            f"AdamW.step() on {n_params / 1e6:.1f}M parameters in {n_tensors} tensors "
            f"(default: {'foreach' if ctx.device.type == 'cuda' else 'a loop over parameters'})")


def item_per_step(ctx: Ctx, d_full: int = 512, batch: int = 64):
    torch.manual_seed(0)
    d, steps = ctx.size(d_full, 32), ctx.size(20, 4)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(4)], nn.Linear(d, 10)).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, d, device=ctx.device)
    y = torch.randint(0, 10, (batch,), device=ctx.device)

    def synced():
        total = 0.0
        for _ in range(steps):
            total += train_step(model, opt, x, y, False, ctx.device).item()
        return total

    def on_device():
        total = torch.zeros((), device=ctx.device)
        for _ in range(steps):
            total += train_step(model, opt, x, y, False, ctx.device).detach()
        return total.item()

    return synced, on_device, f"{steps} steps of a 5-layer MLP, width {d}, batch {batch}; time per {steps} steps"


def blocking_copy(ctx: Ctx):
    torch.manual_seed(0)
    batch, res, width = ctx.size(64, 4), ctx.size(224, 16), ctx.size(32, 8)
    model = conv_net(width).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pageable = [torch.randn(batch, 3, res, res) for _ in range(4)]
    pinned = [t.pin_memory() for t in pageable]
    y = torch.randint(0, 10, (batch,), device=ctx.device)

    def run(batches, non_blocking):
        def fn():
            for t in batches:
                train_step(model, opt, t.to(ctx.device, non_blocking=non_blocking), y, True, ctx.device)
        return fn

    mb = pageable[0].numel() * 4 / 2**20
    return (run(pageable, False), run(pinned, True),
            f"4 bf16 conv steps, each copying a {mb:.0f} MiB batch first")


def empty_cache(ctx: Ctx):
    model, opt, x, y, batch, _, _ = conv_setup(ctx, 64)

    def with_empty():
        train_step(model, opt, x, y, True, ctx.device)
        torch.cuda.empty_cache()

    return with_empty, lambda: train_step(model, opt, x, y, True, ctx.device), f"bf16 conv net step, batch {batch}"


def tensor_then_moved(ctx: Ctx, ctor: str = "randn"):
    n = ctx.size(4096, 64)
    make = getattr(torch, ctor)
    return (lambda: make(n, n).to(ctx.device), lambda: make(n, n, device=ctx.device), f"torch.{ctor}({n}, {n})")


CASES = [
    Case("PF405", "tf32-matmul", 'precision "highest"', 'precision "high" (TF32)', True, tf32_matmul),
    Case("PF403", "bf16-autocast-cnn", "fp32", "bf16 autocast", False, autocast_cnn),
    Case("PF403", "bf16-autocast-transformer", "fp32", "bf16 autocast", False, autocast_transformer),
    Case("PF406", "cudnn-benchmark", "benchmark=False", "benchmark=True", True, cudnn_benchmark),
    Case("PF408", "channels-last", "NCHW", "channels_last", False, channels_last),
    Case("PF302", "fused-adamw", "AdamW()", "AdamW(fused=True)", False, fused_adamw),
    Case("PF201", "item-per-step", ".item() every step", "accumulate on device", False, item_per_step),
    Case("PF201", "item-per-step-wide", ".item() every step", "accumulate on device", False,
         lambda ctx: item_per_step(ctx, d_full=4096, batch=512)),
    Case("PF105", "pinned-non-blocking", "pageable, blocking", "pinned, non_blocking", True, blocking_copy),
    Case("PF203", "empty-cache-per-step", "empty_cache() every step", "no empty_cache()", True, empty_cache),
    Case("PF409", "create-on-device", "CPU then .to(device)", "device=", False, tensor_then_moved),
    Case("PF409", "zeros-on-device", "CPU then .to(device)", "device=", False,
         lambda ctx: tensor_then_moved(ctx, "zeros")),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and short timings")
    ap.add_argument("--min-run-time", type=float, default=None, help="seconds of timing per variant")
    ap.add_argument("--only", default="", help="comma-separated rule codes or case names")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    device = torch.device(args.device)
    ctx = Ctx(device, args.quick, args.min_run_time or (0.05 if args.quick else 1.0))
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    results: list[Result] = []
    skipped: list[str] = []
    for case in CASES:
        if wanted and case.rule not in wanted and case.name not in wanted:
            continue
        if case.cuda_only and device.type != "cuda":
            skipped.append(f"{case.rule} {case.name} (CUDA only)")
            continue
        base, opt, what = case.build(ctx)
        b_ms, b_iqr = time_ms(base, ctx)
        o_ms, o_iqr = time_ms(opt, ctx)
        results.append(Result(case.rule, case.name, case.baseline, case.optimized, b_ms, o_ms, b_iqr, o_iqr,
                              b_ms / o_ms, what))
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.benchmark = False
        print(f"{case.rule} {case.name}: {b_ms:.3f} ms -> {o_ms:.3f} ms ({b_ms / o_ms:.2f}x)  [{what}]", flush=True)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "CPU")
    print()
    print(f"device: {name}; torch {torch.__version__}; {os.cpu_count()} CPUs; "
          "median of torch.utils.benchmark blocked_autorange, IQR in brackets")
    print(f"| rule | case | reported form | fixed form | ms | ms | speedup |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r.rule} | {r.case} ({r.note}) | {r.baseline} | {r.optimized} | {r.baseline_ms:.3f} "
              f"[{r.baseline_iqr_ms:.3f}] | {r.optimized_ms:.3f} [{r.optimized_iqr_ms:.3f}] | {r.speedup:.2f}× |")
    for s in skipped:
        print(f"skipped: {s}")
    if args.json:
        data = {
            "command": " ".join(["python", "benchmarks/rule_effects.py", *sys.argv[1:]]),
            "device": str(device), "device_name": name, "torch_version": torch.__version__,
            "cpu_count": os.cpu_count(), "python_version": platform.python_version(),
            "quick": args.quick, "results": [asdict(r) for r in results], "skipped": skipped,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
