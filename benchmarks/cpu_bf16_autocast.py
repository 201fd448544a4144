"""Why PF403's fix enables bf16 autocast only on CUDA when a script picks its device: what
CPU bf16 autocast costs against fp32 for a small training step on this CPU.

    python benchmarks/cpu_bf16_autocast.py [--repeat N] [--threads N]

Prints, per repeat, the mean time of one forward + backward of a 256-512-10 MLP (batch 64)
in fp32 and under `torch.autocast("cpu", dtype=torch.bfloat16)`, and their ratio. On CPUs
without native bf16 (no AVX512-BF16/AMX) autocast converts every matmul's inputs and runs
slower bf16 kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import time

import torch


def step_ms(model, x, ctx, n: int) -> float:
    for _ in range(20):  # warm-up
        with ctx():
            loss = model(x).square().mean()
        loss.backward()
    t0 = time.perf_counter()
    for _ in range(n):
        with ctx():
            loss = model(x).square().mean()
        loss.backward()
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    x = torch.randn(64, 256)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {args.threads} thread(s)")
    print("| repeat | fp32 ms | bf16 autocast ms | ratio |")
    print("|---|---|---|---|")
    for r in range(args.repeat):
        fp32 = step_ms(model, x, contextlib.nullcontext, args.steps)
        bf16 = step_ms(model, x, lambda: torch.autocast("cpu", dtype=torch.bfloat16), args.steps)
        print(f"| {r + 1} | {fp32:.2f} | {bf16:.2f} | {bf16 / fp32:.1f}x |")


if __name__ == "__main__":
    main()
