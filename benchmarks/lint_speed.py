"""How fast is `perflint check` on a folder, against the cost of just parsing it?

    python benchmarks/lint_speed.py FOLDER [--repeat N] [--jobs N] [--json OUT.json]

Prints files, lines, seconds and files/s for:

* the floor: a bare, single-process loop of `libcst.parse_module` over the same files;
* perflint cold: `perflint check FOLDER --no-cache` on every core, as a user runs it
  (a fresh process: interpreter start-up and imports included);
* perflint warm: the same command again with a filled result cache;

with the ratios (cold against the floor, warm against cold).  The perflint runs may write
bytecode (PYTHONDONTWRITEBYTECODE is dropped for them), as an installed package has.  Each time is the best of
--repeat runs (other processes only ever add time; `--statistic median` for the median);
the CPU column (all of a run's processes) shows the work done whatever else is running.
The folder is only read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _files(folder: Path) -> list[Path]:
    """The files perflint checks in `folder` (its discovery: .gitignore, excludes)."""
    sys.path.insert(0, str(ROOT))
    from perflint.config import Resolver
    from perflint.discovery import discover

    found = discover([str(folder)], Resolver())
    return [p for p, _ in found.files]


def _floor(files: list[Path]) -> tuple[float, float, int]:
    """Seconds (wall, CPU) for one process to parse every file with libcst; files that do
    not parse."""
    import libcst

    from perflint.source import SourceError, read_source

    failed = 0
    start, cpu = time.perf_counter(), time.process_time()
    for p in files:
        try:
            if p.suffix == ".py":
                libcst.parse_module(p.read_bytes())
            else:
                libcst.parse_module(read_source(str(p)).text)
        except (libcst.ParserSyntaxError, SourceError, RecursionError, UnicodeDecodeError):
            failed += 1
    return time.perf_counter() - start, time.process_time() - cpu, failed


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _perflint(folder: Path, jobs: int | None, cache_dir: str | None) -> tuple[float, float, int]:
    """Seconds (wall, CPU of all its processes) for `perflint check FOLDER`; findings."""
    cmd = [sys.executable, "-m", "perflint", "check", str(folder), "--exit-zero", "--quiet",
           "--output-format", "concise"]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # An installed perflint has its bytecode compiled; with PYTHONDONTWRITEBYTECODE set, every
    # run of a source checkout would recompile it, which is not what a user's run pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if cache_dir is None:
        cmd.append("--no-cache")
    else:
        env["PERFLINT_CACHE_DIR"] = cache_dir
    start, cpu = time.perf_counter(), _children_cpu()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    elapsed, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if p.returncode not in (0, 2):
        raise SystemExit(f"perflint failed ({p.returncode}):\n{p.stderr}")
    findings = sum(1 for line in p.stdout.splitlines() if line.strip())
    return elapsed, cpu, findings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    ap.add_argument("--statistic", choices=["min", "median"], default="min", help="how the runs are summarised")
    ap.add_argument("--jobs", type=int, default=None, help="perflint --jobs (default: every core)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    folder = args.folder.resolve()

    files = _files(folder)
    lines = 0
    for p in files:
        try:
            lines += p.read_bytes().count(b"\n")
        except OSError:
            pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    floor_runs, cold_runs, warm_runs = [], [], []
    floor_cpu, cold_cpu, warm_cpu = [], [], []
    failed = findings = 0
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory(prefix="perflint-bench-cache-") as cache:
        for _ in range(args.repeat):
            t, c, failed = _floor(files)
            floor_runs.append(t)
            floor_cpu.append(c)
            t, c, findings = _perflint(folder, args.jobs, None)
            cold_runs.append(t)
            cold_cpu.append(c)
        _perflint(folder, args.jobs, cache)  # fill the cache
        for _ in range(args.repeat):
            t, c, warm_findings = _perflint(folder, args.jobs, cache)
            warm_runs.append(t)
            warm_cpu.append(c)
            if warm_findings != findings:
                raise SystemExit(f"warm run found {warm_findings} findings, cold {findings}")
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    med = min if args.statistic == "min" else statistics.median
    floor, cold, warm = med(floor_runs), med(cold_runs), med(warm_runs)

    n = len(files)
    rows = [
        ("libcst.parse_module loop (floor, 1 process)", floor, med(floor_cpu)),
        (f"perflint cold (--no-cache, {args.jobs or cores} jobs)", cold, med(cold_cpu)),
        ("perflint warm (cache)", warm, med(warm_cpu)),
    ]
    print(f"folder: {folder}")
    print(f"files: {n}   lines: {lines:,}   cores: {cores}   findings: {findings}   "
          f"files that do not parse: {failed}   runs: {args.statistic} of {args.repeat}   "
          f"load average before/after: {load_before:.1f}/{load_after:.1f}")
    print()
    print(f"| {'run':<46} | {'seconds':>8} | {'files/s':>8} | {'× floor':>8} | {'CPU s':>7} |")
    print(f"|{'-' * 48}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 9}|")
    for name, t, c in rows:
        print(f"| {name:<46} | {t:>8.2f} | {n / t:>8.1f} | {t / floor:>7.2f}× | {c:>7.2f} |")
    print()
    print(f"cold / floor: {cold / floor:.2f}×  (target ≤ 1.0×)")
    print(f"warm speed-up over cold: {cold / warm:.1f}×  (target ≥ 20×)")
    if load_before > cores * 0.5 or load_after > cores * 0.5:
        print(f"note: other processes were running (load average above {cores * 0.5:.1f}); "
              "wall-clock ratios are pessimistic, the CPU column is not")
    if args.json:
        args.json.write_text(json.dumps({
            "folder": folder.name, "files": n, "lines": lines, "cores": cores, "findings": findings,
            "repeat": args.repeat, "statistic": args.statistic, "floor_s": floor, "cold_s": cold, "warm_s": warm,
            "cold_over_floor": cold / floor, "warm_speedup": cold / warm,
            "floor_cpu_s": med(floor_cpu), "cold_cpu_s": med(cold_cpu), "warm_cpu_s": med(warm_cpu),
            "load_average": [load_before, load_after],
            "floor_runs": floor_runs, "cold_runs": cold_runs, "warm_runs": warm_runs,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
