"""benchmarks/rule_effects.py runs end to end on the CPU with tiny sizes (the timings
themselves are not asserted: they are measurements, not tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_rule_effects_quick_run_on_the_cpu(tmp_path):
    out = tmp_path / "effects.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rule_effects.py"), "--quick", "--device", "cpu",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    measured = {x["case"] for x in data["results"]}
    assert {"bf16-autocast-cnn", "fused-adamw", "item-per-step", "channels-last"} <= measured
    assert all(x["baseline_ms"] > 0 and x["optimized_ms"] > 0 for x in data["results"])
    assert any("tf32-matmul" in s for s in data["skipped"])  # CUDA-only cases say so on a CPU
    assert "| PF302 | fused-adamw" in r.stdout and data["device"] == "cpu"


def test_rule_effects_only_selects_by_rule_code(tmp_path):
    out = tmp_path / "effects.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rule_effects.py"), "--quick", "--device", "cpu",
                        "--only", "PF409", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert {x["rule"] for x in json.loads(out.read_text())["results"]} == {"PF409"}
