"""Does `pin_memory=True` speed up a loader that has no worker processes?

With `num_workers=0` the DataLoader pins each batch in the training process itself, one
host copy per batch before the step can start; with workers a thread of the training
process pins while the GPU works. This measures, per training step, a loader of
`--samples-mib` samples batched `--batch-size` at a time into a small bf16 conv net:

  pageable, blocking        num_workers=0, `.to(device)`                     (the default)
  pinned, blocking          num_workers=0, pin_memory=True, `.to(device)`    (Accelerate's default copy)
  pinned, non_blocking      num_workers=0, pin_memory=True, `.to(device, non_blocking=True)`
  workers, pinned, nb       num_workers=--workers, pin_memory=True, non_blocking (for reference)

Runs alternate between the variants; the table gives the median ms/step of each variant's
runs and its ratio to the first.  Needs CUDA for the pinned variants.

    python benchmarks/pin_zero_workers.py [--steps 30] [--repeats 3] [--batch-size 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    """Precomputed host images: `__getitem__` only indexes, so the copy is what is measured."""

    def __init__(self, n: int, side: int) -> None:
        self.x = torch.rand(n, 3, side, side)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


def model(device: str) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).to(device)


def run(ds: Dataset, net: nn.Module, opt, device: str, batch: int, workers: int, pin: bool, nb: bool,
        steps: int, warmup: int) -> float:
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=pin, drop_last=True)
    it = iter(loader)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t0 = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            sync()
            t0 = time.perf_counter()
        x = next(it).to(device, non_blocking=nb)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = net(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync()
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--side", type=int, default=1024, help="image side: 3 x side x side floats a sample")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    n = (args.warmup + args.steps) * args.batch_size + args.batch_size
    ds = Images(n, args.side)
    net = model(args.device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    cuda = args.device == "cuda"
    variants = [("pageable, blocking", 0, False, False)]
    if cuda:
        variants += [("pinned, blocking", 0, True, False), ("pinned, non_blocking", 0, True, True),
                     (f"{args.workers} workers, pinned, nb", args.workers, True, True)]
    times: dict[str, list[float]] = {v[0]: [] for v in variants}
    for _ in range(args.repeats):
        for name, workers, pin, nb in variants:  # alternate, so drift hits every variant
            times[name].append(run(ds, net, opt, args.device, args.batch_size, workers, pin, nb, args.steps, args.warmup))
    mib = 3 * args.side * args.side * 4 * args.batch_size / 2**20
    where = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"{where}, torch {torch.__version__}, {os.cpu_count()} CPUs; batch {args.batch_size} x 3 x {args.side}^2 "
          f"float32 = {mib:.1f} MiB; {args.steps} steps after {args.warmup}, {args.repeats} runs each")
    base = statistics.median(times[variants[0][0]])
    print(f"{'variant':<28} {'median ms/step':>14} {'min':>8} {'max':>8} {'vs first':>9}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<28} {med:>14.2f} {min(ts):>8.2f} {max(ts):>8.2f} {base / med:>8.2f}x")


if __name__ == "__main__":
    main()
