"""One epoch over an in-memory TensorDataset with and without DataLoader workers.

Backs PF101's exception for `TensorDataset`: a sample is a tensor index, so worker
processes add only inter-process copies.  Prints a table of seconds per epoch.

    python benchmarks/tensor_dataset_workers.py [--rows 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(args.rows, args.features), torch.randint(0, 10, (args.rows,)))
    times: dict[int, list[float]] = {w: [] for w in args.workers}
    for _ in range(args.repeats):
        for w in args.workers:  # alternate, so drift in machine load hits every setting
            loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=w)
            t0 = time.perf_counter()
            n = sum(x.shape[0] for x, _ in loader)
            times[w].append(time.perf_counter() - t0)
            assert n == args.rows
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.rows} x {args.features} floats, batch {args.batch_size}")
    print(f"{'num_workers':>11}  {'min s/epoch':>11}  {'max s/epoch':>11}")
    for w, ts in times.items():
        print(f"{w:>11}  {min(ts):>11.3f}  {max(ts):>11.3f}")


if __name__ == "__main__":
    main()
