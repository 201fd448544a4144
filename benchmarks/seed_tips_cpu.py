"""The seed write-ups' remaining tips that have no rule, measured on this CPU: does the
rewrite they recommend pay?

    python benchmarks/seed_tips_cpu.py [--repeat N] [--threads N]

Each case times the "before" and "after" form of the same work in alternating blocks
(the machine may be shared) and prints the medians and their ratio:

* conv-bias-before-batchnorm: a training step of a conv net whose convolutions feed
  BatchNorm, with `bias=True` (the default) against `bias=False` (the performance tuning
  guide: the bias "is not needed because in the first step BatchNorm subtracts the mean");
* ddp-find-unused-parameters: a DistributedDataParallel training step (gloo, one process)
  with `find_unused_parameters=True` against the default `False`;
* tensor-from-ndarray: a DataLoader epoch over a map-style dataset whose `__getitem__`
  returns `torch.tensor(array)` (a copy) against `torch.from_numpy(array)` (no copy);
* linear-dims-multiple-of-8: an fp32 training step of a language-model head with a
  vocabulary of 50257 against one padded to 50304 (the tip is about GPU tensor cores
  under AMP; the CPU figure only shows what it does here).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn


def alternate(before, after, repeat: int, block: int) -> tuple[float, float]:
    """Median seconds per call of `before` and `after`, timed in alternating blocks."""
    for fn in (before, after):
        fn()
        fn()
    tb, ta = [], []
    for _ in range(repeat):
        for fn, out in ((before, tb), (after, ta)):
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
    return statistics.median(tb), statistics.median(ta)


def train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def conv_bn_net(bias: bool) -> nn.Module:
    layers: list[nn.Module] = []
    c = 3
    for o in (32, 64, 64, 128):
        layers += [nn.Conv2d(c, o, 3, padding=1, bias=bias), nn.BatchNorm2d(o), nn.ReLU()]
        c = o
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))


def case_conv_bias(repeat: int) -> tuple[str, str, str, float, float]:
    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    b, a = alternate(train_step(conv_bn_net(True), x, y), train_step(conv_bn_net(False), x, y), repeat, 5)
    return ("conv-bias-before-batchnorm", "4 × Conv3×3+BN+ReLU, batch 16 × 3×32×32, training step",
            "bias=True → bias=False", b, a)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(256, 256), nn.ReLU())])
        self.head = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def case_ddp_unused(repeat: int) -> tuple[str, str, str, float, float]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    store = tempfile.NamedTemporaryFile(delete=False)
    dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
        before = train_step(DDP(TwoHeads(), find_unused_parameters=True), x, y)
        after = train_step(DDP(TwoHeads()), x, y)
        b, a = alternate(before, after, repeat, 10)
    finally:
        dist.destroy_process_group()
        os.unlink(store.name)
    return ("ddp-find-unused-parameters", "DDP (gloo, 1 process), 5-layer MLP 256, batch 64, training step",
            "find_unused_parameters=True → False", b, a)


class Arrays(torch.utils.data.Dataset):
    def __init__(self, n: int, shape: tuple[int, ...], copy: bool) -> None:
        rng = np.random.default_rng(0)
        self.items = [rng.standard_normal(shape, dtype=np.float32) for _ in range(n)]
        self.copy = copy

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> torch.Tensor:
        a = self.items[i]
        return torch.tensor(a) if self.copy else torch.from_numpy(a)


def case_tensor_copy(repeat: int) -> tuple[str, str, str, float, float]:
    def epoch(ds):
        loader = torch.utils.data.DataLoader(ds, batch_size=32)
        return lambda: [b.sum() for b in loader]

    shape = (64000,)  # 4 s of 16 kHz audio, float32
    b, a = alternate(epoch(Arrays(256, shape, True)), epoch(Arrays(256, shape, False)), repeat, 2)
    return ("tensor-from-ndarray", "DataLoader epoch, 256 items of 64,000 float32 (4 s of 16 kHz audio), batch 32",
            "torch.tensor(a) → torch.from_numpy(a)", b, a)


def case_vocab_pad(repeat: int) -> tuple[str, str, str, float, float]:
    torch.manual_seed(0)
    x, y = torch.randn(64, 256), torch.randint(0, 50257, (64,))
    b, a = alternate(train_step(nn.Linear(256, 50257), x, y), train_step(nn.Linear(256, 50304), x, y), repeat, 3)
    return ("linear-dims-multiple-of-8", "Linear 256 → vocabulary, batch 64, fp32 training step",
            "50257 → 50304 outputs", b, a)


CASES = [case_conv_bias, case_ddp_unused, case_tensor_copy, case_vocab_pad]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default=",".join(c.__name__[5:] for c in CASES),
                    help="comma-separated subset of: " + ", ".join(c.__name__[5:] for c in CASES))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{args.threads} thread(s); medians over {args.repeat} alternating blocks")
    print()
    print("| tip | workload | change | before ms | after ms | speedup |")
    print("|---|---|---|---|---|---|")
    wanted = set(args.cases.split(","))
    for case in CASES:
        if case.__name__[5:] not in wanted:
            continue
        tip, workload, change, b, a = case(args.repeat)
        print(f"| {tip} | {workload} | {change} | {b * 1e3:.2f} | {a * 1e3:.2f} | {b / a:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
