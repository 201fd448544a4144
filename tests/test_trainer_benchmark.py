"""benchmarks/fsdp_icl.py runs (on the CPU, 2 timed steps, under torchrun with one process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


def test_fsdp_icl_benchmark_runs_and_writes_its_json(tmp_path):
    out = tmp_path / "fsdp_icl.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
         str(ROOT / "benchmarks" / "fsdp_icl.py"), "--device", "cpu", "--precision", "fp32", "--steps", "2",
         "--warmup", "1", "--batch-size", "2", "--block-size", "32", "--num-workers", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["strategy"] == "fsdp" and result["world_size"] == 1 and result["timed_steps"] == 2
    assert result["ms_per_step"] > 0 and result["tokens_per_s"] == pytest.approx(result["samples_per_s"] * 32)
    assert result["torch_version"] and result["device_name"] and result["peak_memory_gib"] > 0
    assert "ms/step" in proc.stdout and "tokens/s" in proc.stdout
