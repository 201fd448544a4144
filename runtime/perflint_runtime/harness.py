"""Launch a training script under the step-timing bootstrap and read back what it measured.

`run_script()` starts `python -m perflint_runtime.bootstrap … script args…` in a new
process group (so that DataLoader workers can be reaped with it), waits at most `timeout`
seconds, and turns every way a run can end into a `RunResult`:

    complete   the script reached warmup + steps optimizer steps (the only good outcome)
    no-steps   it ended without one optimizer step
    too-few    it ended (returned or called sys.exit) before enough steps
    crashed    it raised, was killed, or exited without a result; stderr's tail says why
    timeout    it ran past the time limit and was killed
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

STDERR_TAIL_LINES = 20
OK, NO_STEPS, TOO_FEW, CRASHED, TIMEOUT = "complete", "no-steps", "too-few", "crashed", "timeout"


@dataclass
class RunResult:
    """One run of one script."""

    status: str
    argv: list[str]
    wall_s: float
    message: str = ""
    exit_code: int | None = None
    steps_done: int = 0
    step_times_s: list[float] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)
    batch_size: int | None = None
    peak_memory_bytes: int | None = None
    memory_kind: str = "rss"
    device: str = "cpu"
    device_name: str = ""
    torch_version: str = ""
    torch_threads: int = 0
    # per measured step, seconds in each phase (`perflint_runtime.phases.PHASES`); empty if unknown
    phase_times_s: dict[str, list[float]] = field(default_factory=dict)
    host_syncs: list[int] | None = None  # per measured step, on CUDA only
    warmup: int = 0  # warm-up steps used: more than asked when the loaders' prefetch queue needed it
    warmup_requested: int = 0
    prefetch_depth: int = 0  # workers × prefetch_factor of the loaders (0: no worker processes)
    stderr_tail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def describe_failure(self) -> str:
        """One paragraph: what went wrong, with the last lines of stderr."""
        text = self.message
        if self.stderr_tail:
            text += "\n  stderr (last lines):\n" + "\n".join(f"    {line}" for line in self.stderr_tail)
        return text


def bootstrap_command(script: str, script_args: list[str], steps: int, warmup: int, result: str,
                      split: bool = True) -> list[str]:
    """`python -m perflint_runtime.bootstrap …`, with this interpreter."""
    return [sys.executable, "-m", "perflint_runtime.bootstrap", "--steps", str(steps), "--warmup", str(warmup),
            "--result", result, *([] if split else ["--no-split"]), "--", script, *script_args]


def run_script(script: str, script_args: list[str] | tuple[str, ...] = (), *, steps: int, warmup: int,
               timeout: float, split: bool = True) -> RunResult:
    """Run `script` for `warmup + steps` optimizer steps and return the measurements.

    The script runs in the current folder, as `python script args…` would; without
    `split`, no phase probes are installed (the step times alone)."""
    with tempfile.TemporaryDirectory(prefix="perflint-run-") as tmp:
        result_path = os.path.join(tmp, "result.json")
        argv = bootstrap_command(script, list(script_args), steps, warmup, result_path, split)
        stderr_path = os.path.join(tmp, "stderr.txt")
        started = time.perf_counter()
        with open(stderr_path, "wb") as err:  # a file, not a pipe: nothing can block on it
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                    env=_child_env(), start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                code = None
            finally:
                _kill_group(proc)
        wall = time.perf_counter() - started
        tail = _tail(stderr_path)
        data = _read_json(result_path)
    cmd = shlex.join([script, *script_args])
    if timed_out:
        return RunResult(TIMEOUT, argv, wall, f"`{cmd}` timed out after {timeout:g} s", stderr_tail=tail,
                         **_measurements(data))
    return _classify(data, code, argv, cmd, wall, tail)


def _classify(data: dict | None, code: int, argv: list[str], cmd: str, wall: float, tail: list[str]) -> RunResult:
    if data is None:
        return RunResult(CRASHED, argv, wall, f"`{cmd}` ended with exit code {code} and no result", exit_code=code,
                         stderr_tail=tail)
    fields = _measurements(data)
    wanted = data["warmup"] + data["steps_wanted"]
    done = data["steps_done"]
    if data["status"] == "complete":
        return RunResult(OK, argv, wall, exit_code=code, **fields)
    if data["status"] == "crashed" or (data["status"] == "exited" and data["exit_code"] != 0):
        msg = f"`{cmd}` failed (exit code {data['exit_code']}) after {done} of {wanted} optimizer steps"
        return RunResult(CRASHED, argv, wall, msg, exit_code=data["exit_code"], stderr_tail=tail, **fields)
    how = "called sys.exit" if data["status"] == "exited" else "returned"
    if done == 0:
        msg = (f"`{cmd}` {how} without a single optimizer step; the harness counts "
               "torch.optim optimizer steps")
        return RunResult(NO_STEPS, argv, wall, msg, exit_code=data["exit_code"], stderr_tail=tail, **fields)
    msg = (f"`{cmd}` {how} after {done} optimizer steps; the run needs {wanted} "
           f"({data['warmup']} warm-up + {data['steps_wanted']} measured): ask the script for more steps")
    return RunResult(TOO_FEW, argv, wall, msg, exit_code=data["exit_code"], stderr_tail=tail, **fields)


def _measurements(data: dict | None) -> dict:
    if data is None:
        return {}
    keys = ("steps_done", "step_times_s", "losses", "batch_size", "peak_memory_bytes", "memory_kind", "device",
            "device_name", "torch_version", "torch_threads")
    out = {k: data[k] for k in keys}
    out["phase_times_s"] = data.get("phase_times_s") or {}
    out["host_syncs"] = data.get("host_syncs")
    out["warmup"] = data.get("warmup", 0)
    out["warmup_requested"] = data.get("warmup_requested", data.get("warmup", 0))
    out["prefetch_depth"] = data.get("prefetch_depth", 0)
    return out


def _child_env() -> dict[str, str]:
    """The environment, with this package importable and output unbuffered."""
    env = dict(os.environ)
    runtime_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (runtime_root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill what is left of the run's process group (the script, its DataLoader workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(path: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.rstrip().splitlines()[-STDERR_TAIL_LINES:]


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
