"""What PF410's fix (`model = torch.compile(model)`) costs and pays on this machine: compile
seconds against the per-step saving of a static-shape training step, and the break-even step
count.

    python benchmarks/compile_break_even.py [--threads N] [--steps N] [--models mlp,cnn]

For each small model, one process: eager training steps (forward, loss, backward, AdamW
step), then the same steps on `torch.compile(model)` with an empty inductor cache (cold:
the first compiled step pays the compile), then again after `torch._dynamo.reset()` with
the cache the first compile left on disk (warm: what a second run of the same script pays).
Compile seconds = first compiled step − a compiled step. Eager and compiled steps are then
timed in alternating blocks (the machine may be shared), median over `--steps` steps each.
Break-even = compile seconds / (eager step − compiled step); "never" when compiled steps
are not faster. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

# An empty inductor cache for the cold compile, set before torch is imported.
_CACHE = tempfile.mkdtemp(prefix="perflint-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(6):
        layers += [nn.Linear(256, 256), nn.GELU(), nn.LayerNorm(256)]
    model = nn.Sequential(*layers, nn.Linear(256, 10))
    return model, torch.randn(64, 256), torch.randint(0, 10, (64,))


def cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    def block(i: int, o: int) -> list[nn.Module]:
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2)]

    model = nn.Sequential(*block(1, 16), *block(16, 32), *block(32, 64), nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
    return model, torch.randn(16, 1, 64, 64), torch.randint(0, 10, (16,))


MODELS = {"mlp": (mlp, "6 × (Linear 256, GELU, LayerNorm), batch 64"),
          "cnn": (cnn, "3 × (Conv 3×3, BatchNorm, ReLU, MaxPool), 1×64×64 input, batch 16")}


def make_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> float:
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    return step


def interleaved_medians(steps: list, n: int, rounds: int = 10) -> list[float]:
    """Median step time of each step function, measured in alternating blocks so that the
    load of a shared machine falls on all of them alike."""
    for step in steps:
        for _ in range(3):
            step()
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(rounds):
        for k, step in enumerate(steps):
            times[k] += [step() for _ in range(max(1, n // rounds))]
    return [statistics.median(t) for t in times]


def measure(name: str, steps: int) -> dict:
    build, _ = MODELS[name]
    torch.manual_seed(0)
    model, x, y = build()
    eager_step = make_step(model, x, y)
    out = {"model": name}
    compiled_step = None
    for label in ("cold", "warm"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        m, cx, cy = build()
        step = make_step(torch.compile(m), cx, cy)
        first = step()  # compiles forward and backward
        second = min(step() for _ in range(3))
        out[f"{label}_compile_s"] = first - second
        compiled_step = step
    eager, compiled = interleaved_medians([eager_step, compiled_step], steps)
    out["eager_ms"], out["compiled_ms"] = eager * 1e3, compiled * 1e3
    saving = out["eager_ms"] - out["compiled_ms"]
    for label in ("cold", "warm"):
        out[f"{label}_break_even"] = (out[f"{label}_compile_s"] * 1e3 / saving) if saving > 0 else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--models", default="mlp,cnn")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, {args.threads} thread(s), CPU inductor; median of {args.steps} steps")
    print()
    print("| model | eager step ms | compiled step ms | speedup | compile s (cold cache) | break-even steps (cold) "
          "| compile s (warm cache) | break-even steps (warm) |")
    print("|---|---|---|---|---|---|---|---|")

    def fmt(n):
        return "never" if n is None else f"{n:,.0f}"

    for name in args.models.split(","):
        r = measure(name.strip(), args.steps)
        print(f"| {name} | {r['eager_ms']:.2f} | {r['compiled_ms']:.2f} | {r['eager_ms'] / r['compiled_ms']:.2f}× "
              f"| {r['cold_compile_s']:.1f} | {fmt(r['cold_break_even'])} | {r['warm_compile_s']:.1f} "
              f"| {fmt(r['warm_break_even'])} |", flush=True)
    print()
    for name in args.models.split(","):
        print(f"- {name}: {MODELS[name.strip()][1]}")


if __name__ == "__main__":
    main()
