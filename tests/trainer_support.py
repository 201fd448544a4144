"""Running tests/trainer_scenarios.py once per test module and reading what each rank saw."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SCENARIOS = Path(__file__).resolve().parent / "trainer_scenarios.py"
ALL = ("resume", "stretches", "fsdp", "options")


@functools.cache
def all_scenarios() -> dict[str, list[dict]]:
    """Every scenario, run once per test session in one pair of processes (torch is imported
    once for all of them)."""
    out = Path(tempfile.mkdtemp(prefix="trainer_scenarios_"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    return run_scenarios(out, *ALL)


def run_scenarios(out: Path, *names: str) -> dict[str, list[dict]]:
    """{scenario: [rank 0's result, rank 1's result]}; fails with the workers' output."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    for _attempt in range(2):
        proc = subprocess.run([sys.executable, str(SCENARIOS), str(out), *names], capture_output=True, text=True,
                              timeout=300, env=env)
        # A gloo worker occasionally aborts inside torch's C++ runtime on a loaded 2-core
        # machine (`terminate called without an active exception`): one retry for that only.
        if proc.returncode == 0 or "terminate called without an active exception" not in proc.stderr:
            break
    results = {}
    for name in names:
        ranks = []
        for rank in (0, 1):
            path = out / f"{name}.rank{rank}.pt"
            ranks.append(torch.load(path, weights_only=False) if path.exists() else {"error": "no result"})
        results[name] = ranks
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return results


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)
