"""The five workloads run: as written, after `perflint fix --unsafe-fixes`, and on the trainer.

Fifteen scripts for three optimizer steps each, on the CPU with a tiny batch.  They run
one after another in a single child process (each as `__main__`, as `python script.py`
would run it), which pays for importing torch once; each test then checks one script's
outcome and log.  Which fixes apply is not assumed: only that perflint changes each
workload and that the result still trains.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from cli_support import fix_source  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS_DIR = ROOT / "fixtures" / "workloads"
WORKLOADS = ("speaker_verification", "antispoofing_seresnet", "icl_finetune", "mel_cnn_trainer", "image_classifier")
VARIANTS = ("original", "fixed", "trainer")
ARGS = ["--steps", "3", "--device", "cpu", "--batch-size", "2"]
STEP_LOSS = re.compile(r"^(?:epoch \d+ )?step (\d+)(?:/\d+)? loss (\S+)")

RUNNER = """
    import contextlib, json, runpy, sys, traceback
    jobs = json.loads(sys.argv[1])
    outcomes = {}
    for job in jobs:
        sys.argv = [job["script"], *job["args"]]
        sys.path.insert(0, job["dir"])
        ok, error = True, ""
        with open(job["log"], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                runpy.run_path(job["script"], run_name="__main__")
            except SystemExit as exc:
                ok, error = exc.code in (None, 0), f"sys.exit({exc.code!r})"
            except BaseException:
                ok, error = False, traceback.format_exc()
        sys.path.remove(job["dir"])
        outcomes[job["id"]] = {"ok": ok, "error": error}
    print(json.dumps(outcomes))
"""


def script_for(name: str, variant: str, fixed_dir: Path) -> Path:
    if variant == "original":
        return WORKLOADS_DIR / f"{name}.py"
    if variant == "trainer":
        return WORKLOADS_DIR / "on_trainer" / f"{name}.py"
    return fixed_dir / f"{name}.py"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Run every workload variant once; {(name, variant): (outcome, log text)}."""
    tmp = tmp_path_factory.mktemp("workloads")
    fixed_dir = tmp / "fixed"
    fixed_dir.mkdir()
    for name in WORKLOADS:
        original = (WORKLOADS_DIR / f"{name}.py").read_text()
        (fixed_dir / f"{name}.py").write_text(fix_source(original, unsafe=True))
    jobs = []
    for name in WORKLOADS:
        for variant in VARIANTS:
            script = script_for(name, variant, fixed_dir)
            args = ARGS + (["--log-every", "1"] if variant == "trainer" else [])
            jobs.append({"id": f"{name}/{variant}", "script": str(script), "dir": str(script.parent),
                         "args": args, "log": str(tmp / f"{name}.{variant}.log")})
    jobs.append({"id": "icl_finetune/learns", "script": str(WORKLOADS_DIR / "icl_finetune.py"),
                 "dir": str(WORKLOADS_DIR), "args": ["--steps", "20", "--device", "cpu"],
                 "log": str(tmp / "icl_finetune.learns.log")})
    # One compute thread per process: the fixed variants start loader workers, and with
    # several test processes on the machine, spinning OpenMP threads multiply the time.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(RUNNER), json.dumps(jobs)], capture_output=True,
                          text=True, timeout=600, cwd=tmp, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return {job["id"]: (results[job["id"]], Path(job["log"]).read_text()) for job in jobs}


def step_losses(log: str) -> list[float]:
    return [float(m.group(2)) for line in log.splitlines() if (m := STEP_LOSS.match(line))]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_trains_for_three_steps(outcomes, name, variant):
    outcome, log = outcomes[f"{name}/{variant}"]
    assert outcome["ok"], f"{name} ({variant}) failed:\n{outcome['error']}\n{log[-2000:]}"
    losses = step_losses(log)
    assert len(losses) == 3, log[-2000:]
    assert all(math.isfinite(x) for x in losses), losses


@pytest.mark.parametrize("name", WORKLOADS)
def test_perflint_changes_every_workload(name):
    original = (WORKLOADS_DIR / f"{name}.py").read_text()
    assert fix_source(original, unsafe=True) != original


def test_a_workload_learns(outcomes):
    outcome, log = outcomes["icl_finetune/learns"]
    assert outcome["ok"], outcome["error"]
    losses = step_losses(log)
    assert len(losses) == 20
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3


def test_on_trainer_scripts_take_the_original_flags():
    flag = re.compile(r'add_argument\("(--[a-z-]+)"')
    for name in WORKLOADS:
        original = set(flag.findall((WORKLOADS_DIR / f"{name}.py").read_text()))
        rewritten = set(flag.findall((WORKLOADS_DIR / "on_trainer" / f"{name}.py").read_text()))
        assert {"--steps", "--device", "--batch-size", "--seed"} <= original
        assert original <= rewritten, (name, original - rewritten)


def test_benchmark_script_on_one_workload(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "verify_workloads.py"), "--out", str(out), "--workloads",
         "mel_cnn_trainer", "--steps", "3", "--warmup", "1", "--repeats", "1", "--trainer-steps", "5", "--",
         "--device", "cpu",
         "--batch-size", "2"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "mel_cnn_trainer" in proc.stdout and "not a GPU figure" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"].endswith("--workloads mel_cnn_trainer --steps 3 --warmup 1 --repeats 1 "
                                       "--trainer-steps 5 -- --device cpu --batch-size 2")
    assert summary["environment"]["device"] == "cpu" and summary["environment"]["torch_version"]
    assert summary["environment"]["cpu_model"]
    (row,) = summary["workloads"]
    assert row["error"] is None
    assert set(row["summary"]) == {"original", "fixed", "trainer"}
    assert set(row["comparisons"]) == {"fixed", "trainer"}
    record = json.loads((out / "mel_cnn_trainer.json").read_text())
    for variant in ("original", "fixed", "trainer"):
        (run,) = record["runs"][variant]
        steps = 5 if variant == "trainer" else 3
        assert run["status"] == "complete" and len(run["step_times_s"]) == steps and run["batch_size"] == 2
    assert not list((ROOT / "fixtures" / "workloads").glob(".mel_cnn_trainer.*"))
