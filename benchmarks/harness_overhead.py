"""What the phase probes of `perflint verify` cost: the same script under the harness with
and without them (`--no-split`), runs alternated.

    python benchmarks/harness_overhead.py [--repeats 6] [--steps 300] [--json out.json]

Runs are alternated A B B A …, so that a trend in the machine's load hits both variants
alike.  Two scripts: a tiny training loop whose steps take well under a millisecond on a CPU (a
16-32-1 MLP, batch 8, an in-memory DataLoader, three `.to()` calls a step: the worst case
for a fixed per-step cost), and `fixtures/workloads/image_classifier.py --device cpu`.
Prints the mean step time of each variant, the difference per step, and the ratio with
its 95% bootstrap interval.  Whole runs on a shared machine are noisy, so two steadier
figures follow: the tiny loop's step timed in one process, fastest of 7 chunks of 500
steps, before and after the harness is installed, with and without the probes (the
difference of the two is what the probes add; it includes the split's bookkeeping,
which the harness itself does not time); and, in this process, what one probe costs
(fastest of several `timeit` repeats): a time stamp, and the `Tensor.to` wrapper on a
call that copies nothing and on one that copies.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "runtime"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from perflint_runtime import stats  # noqa: E402
from perflint_runtime.harness import run_script  # noqa: E402
from perflint_runtime.sysinfo import host  # noqa: E402

TINY = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1)), batch_size=8, shuffle=True)
    while True:
        for x, y in loader:
            x, y = x.to("cpu"), y.to(torch.float32)
            loss = (model(x.to(torch.float32)) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def fmt(seconds: float, sign: bool = False) -> str:
    """Microseconds below 10 ms, else milliseconds."""
    if abs(seconds) < 0.01:
        return f"{seconds * 1e6:{'+' if sign else ''},.1f} µs"
    return f"{seconds * 1e3:{'+' if sign else ''},.2f} ms"


def measure(script: str, args: list[str], steps: int, warmup: int, repeats: int, console: Console) -> dict:
    times: dict[bool, list[list[float]]] = {True: [], False: []}
    for k in range(repeats):
        for split in ((False, True) if k % 2 == 0 else (True, False)):  # A B B A: a load trend hits both
            r = run_script(script, args, steps=steps, warmup=warmup, timeout=600, split=split)
            if not r.ok:
                raise SystemExit(r.describe_failure())
            times[split].append(r.step_times_s)
            console.print(f"  {Path(script).name} run {k + 1} {'probes' if split else 'no probes'}: "
                          f"{fmt(stats.mean(r.step_times_s))}/step", highlight=False)
    plain, probed = stats.mean(stats.pooled(times[False])), stats.mean(stats.pooled(times[True]))
    lo, hi = stats.bootstrap_speedup_ci(times[False], times[True])
    return {"script": " ".join([Path(script).name, *args]), "steps": steps, "warmup": warmup, "repeats": repeats,
            "mean_step_s_without": plain, "mean_step_s_with": probed,
            "ratio_without_over_with": plain / probed, "ratio_ci95": [lo, hi],
            "step_times_s": {"without": times[False], "with": times[True]}}


IN_PROCESS = """
    import sys, time
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from perflint_runtime import bootstrap

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1)), batch_size=8, shuffle=True)

    def chunk(n=500):
        batches = iter(loader)
        started = time.perf_counter()
        for _ in range(n):
            x, y = next(batches)
            x, y = x.to("cpu"), y.to(torch.float32)
            loss = (model(x.to(torch.float32)) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return (time.perf_counter() - started) / n

    plain = min(chunk() for _ in range(7))
    bootstrap.install(bootstrap.StepRecorder(1, 10**9, lambda r: None), split=sys.argv[1] == "split")
    print(plain, min(chunk() for _ in range(7)))
"""


def in_process(pairs: int = 3) -> dict:
    """Seconds per tiny-loop step added by the harness, with and without the probes (A B B A …)."""
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "runtime"), os.environ.get("PYTHONPATH")])))
    added: dict[str, list[float]] = {"split": [], "no-split": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "in_process.py"
        script.write_text(textwrap.dedent(IN_PROCESS))
        for k in range(pairs):
            for mode in (("no-split", "split") if k % 2 == 0 else ("split", "no-split")):
                out = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, env=env,
                                     check=True).stdout.split()
                added[mode].append(float(out[1]) - float(out[0]))
    return {mode: stats.median(values) for mode, values in added.items()} | {"runs": added}


def probe_costs(number: int = 20000, repeat: int = 7) -> list[tuple[str, float]]:
    """(what, seconds per call added by the probe), fastest of `repeat` timings."""
    import timeit

    import torch

    from perflint_runtime import bootstrap

    rec = bootstrap.StepRecorder(1, 1, lambda r: None)
    x = torch.ones(4)
    originals = {"to": torch.Tensor.to}

    def best(stmt) -> float:
        return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number

    def stamp():
        rec.mark("data")
        if len(rec.events) > 1000:
            rec.events.clear()

    empty = best(lambda: None)
    out = [("time stamp (`mark`)", best(stamp) - empty)]
    plain_same = best(lambda: originals["to"](x, torch.float32))
    plain_copy = best(lambda: originals["to"](x, "meta"))
    bootstrap.install_copy_probes(rec)
    try:
        out.append(("`.to()` that copies nothing (same dtype)", best(lambda: x.to(torch.float32)) - plain_same))
        rec.events.clear()
        out.append(("`.to()` that copies (CPU → meta device)", best(lambda: (x.to("meta"), rec.events.clear()))
                    - plain_copy - (best(lambda: rec.events.clear()) - empty)))
    finally:
        torch.Tensor.to = originals["to"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6, help="runs of each variant")
    parser.add_argument("--steps", type=int, default=300, help="measured steps per run of the tiny loop")
    parser.add_argument("--workload-steps", type=int, default=20, help="measured steps per run of the workload")
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args(argv)
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 140)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny_loop.py"
        tiny.write_text(textwrap.dedent(TINY))
        rows.append(measure(str(tiny), [], opts.steps, 20, opts.repeats, console))
    workload = ROOT / "fixtures" / "workloads" / "image_classifier.py"
    rows.append(measure(str(workload), ["--device", "cpu"], opts.workload_steps, 3, opts.repeats, console))
    table = Table(title="perflint verify: the phase probes' cost (mean step time, runs alternated)")
    for col in ("script", "runs × steps", "without probes", "with probes", "difference", "ratio [95% CI]"):
        table.add_column(col, justify="left" if col == "script" else "right")
    for r in rows:
        lo, hi = r["ratio_ci95"]
        table.add_row(r["script"], f"{r['repeats']} × {r['steps']}", fmt(r["mean_step_s_without"]),
                      fmt(r["mean_step_s_with"]), fmt(r["mean_step_s_with"] - r["mean_step_s_without"], sign=True),
                      f"{r['ratio_without_over_with']:.3f} [{lo:.3f}, {hi:.3f}]")
    console.print(table)
    inproc = in_process()
    steady = Table(title="tiny loop in one process: step time added by installing the harness (median of 3)")
    steady.add_column("harness")
    steady.add_column("added per step", justify="right")
    steady.add_row("without probes (--no-split)", fmt(inproc["no-split"], sign=True))
    steady.add_row("with probes", fmt(inproc["split"], sign=True))
    steady.add_row("the probes (difference)", fmt(inproc["split"] - inproc["no-split"], sign=True))
    console.print(steady)
    costs = probe_costs()
    per_probe = Table(title="one probe, in process (fastest of 7 × 20,000 calls)")
    per_probe.add_column("probe")
    per_probe.add_column("added per call", justify="right")
    for what, seconds in costs:
        per_probe.add_row(what, f"{seconds * 1e9:,.0f} ns")
    console.print(per_probe)
    if opts.json:
        command = shlex.join([Path(sys.executable).name, "benchmarks/harness_overhead.py", *(argv or sys.argv[1:])])
        Path(opts.json).write_text(json.dumps({"command": command, **host(), "results": rows,
                                               "in_process_added_s": inproc, "probe_costs_s": dict(costs)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
