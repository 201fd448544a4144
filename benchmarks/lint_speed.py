"""How fast is `perflint check` on a folder, against the cost of just parsing it?

    python benchmarks/lint_speed.py FOLDER [--repeat N] [--jobs N] [--select CODES] [--json OUT.json]
    python benchmarks/lint_speed.py FOLDER --formats        # every output format, cold and warm
    python benchmarks/lint_speed.py --one-file FILE         # start-up: one small file (pre-commit)
    python benchmarks/lint_speed.py --one-file FILE --against DIR   # … and DIR's perflint, alternating
    python benchmarks/lint_speed.py --big-file 10000 20000  # generated training files of N lines
    python benchmarks/lint_speed.py --phases 40000          # where a big file's check time goes

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

`--formats` adds a table of every `--output-format` on FOLDER, cold (`--no-cache`) and warm
(one cache, filled by a `full` run: the cache serves every format), against `concise`.

`--phases LINES` (or `--phases FILE`) splits one cold `check --jobs 1` of a generated file of
LINES lines (or of FILE) into its phases, as CPU seconds in one process: libcst's parse, the
walk that builds the facts, the rules (each rule's `check`), the module summary, the
positions of the findings, the fix edits, and what is left (imports, discovery, reporting).

`--one-file FILE` times what a pre-commit hook pays for one small file: `python -c pass`
(the interpreter), `python -c "import libcst"` (the parser's import, which a file with a
candidate needs), `perflint --version` (click and perflint's package), and `perflint check
FILE` cold (an empty cache folder each run: what the first run pays) and warm (cache
filled), with the modules the warm run imports that it should not need (libcst, packaging,
rich's markdown, the runtime, torch).
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


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _timed(cmd: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    start, cpu = time.perf_counter(), _children_cpu()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start, _children_cpu() - cpu, p


SELECT: list[str] = []  # `--select CODES` for every perflint run (set from the command line)


def _perflint(folder: Path, jobs: int | None, cache_dir: str | None, fmt: str = "concise") -> tuple[float, float, int]:
    """Seconds (wall, CPU of all its processes) for `perflint check FOLDER`; findings."""
    cmd = [sys.executable, "-m", "perflint", "check", str(folder), "--exit-zero", "--quiet",
           "--output-format", fmt, *SELECT]
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


FORMATS = ("concise", "full", "json", "sarif", "github")


def format_table(folder: Path, jobs: int | None, repeat: int, med) -> dict:
    """Each output format, cold and warm, against concise."""
    rows = {}
    with tempfile.TemporaryDirectory(prefix="perflint-bench-cache-") as cache:
        _perflint(folder, jobs, cache, "full")  # one cache, filled by a `full` run
        for fmt in FORMATS:
            cold = [_perflint(folder, jobs, None, fmt)[:2] for _ in range(repeat)]
            warm = [_perflint(folder, jobs, cache, fmt)[:2] for _ in range(repeat)]
            rows[fmt] = {"cold_s": med(t for t, _ in cold), "cold_cpu_s": med(c for _, c in cold),
                         "warm_s": med(t for t, _ in warm), "warm_cpu_s": med(c for _, c in warm)}
    base = rows["concise"]
    print()
    print(f"output formats on {folder.name} (cold: --no-cache; warm: the cache a `full` run filled)")
    print()
    print(f"| {'format':<8} | {'cold s':>7} | {'CPU s':>6} | {'× concise':>9} | {'warm s':>7} | {'CPU s':>6} | "
          f"{'× concise':>9} |")
    print(f"|{'-' * 10}|{'-' * 9}|{'-' * 8}|{'-' * 11}|{'-' * 9}|{'-' * 8}|{'-' * 11}|")
    for fmt, r in rows.items():
        print(f"| {fmt:<8} | {r['cold_s']:>7.2f} | {r['cold_cpu_s']:>6.2f} | {r['cold_s'] / base['cold_s']:>8.2f}× | "
              f"{r['warm_s']:>7.2f} | {r['warm_cpu_s']:>6.2f} | {r['warm_s'] / base['warm_s']:>8.2f}× |")
    return rows


# Modules a warm one-file run should never import.
NOT_ON_A_WARM_RUN = ("libcst", "packaging", "rich.markdown", "perflint_runtime", "torch", "pathspec")

_IMPORTS_PROBE = """
import sys, atexit
def _dump():
    sys.stderr.write("\\nimported: " + " ".join(sorted(m for m in sys.modules if m in {names!r})) + "\\n")
atexit.register(_dump)
sys.argv = ["perflint"] + sys.argv[1:]
from perflint.cli import main
main()
"""


_RULES_PROBE = """
import sys, atexit
def _dump():
    sys.stderr.write("\\nrules: " + str(sum(1 for m in sys.modules if m.rsplit(".", 1)[-1].startswith("pf"))) + "\\n")
atexit.register(_dump)
sys.argv = ["perflint"] + sys.argv[1:]
from perflint.cli import main
main()
"""


def one_file_table(path: Path, repeat: int, med, against: Path | None = None) -> dict:
    """Start-up: what a pre-commit hook pays for one small file; with `against` (another
    checkout's folder, e.g. `git archive REV | tar -x -C DIR`), the same cold check run from
    that code, alternating with this one's."""
    env = _env()
    check = [sys.executable, "-m", "perflint", "check", str(path), "--exit-zero", "--quiet", "--output-format",
             "concise"]
    rows: dict[str, list] = {"python -c pass": [], "python -c 'import libcst'": [], "perflint --version": [],
                             "check, cold (empty cache)": [], "check, warm (cache filled)": []}
    if against is not None:
        rows[f"check, cold, code of {against.name}"] = []
    for _ in range(repeat):
        if against is not None:
            other = {**env, "PYTHONPATH": str(against.resolve()) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            with tempfile.TemporaryDirectory(prefix="perflint-bench-cache-") as cache:
                t, c, p = _timed(check, {**other, "PERFLINT_CACHE_DIR": cache})
                if p.returncode != 0:
                    raise SystemExit(f"perflint from {against} failed ({p.returncode}):\n{p.stderr}")
                rows[f"check, cold, code of {against.name}"].append((t, c))
        rows["python -c pass"].append(_timed([sys.executable, "-c", "pass"], env)[:2])
        rows["python -c 'import libcst'"].append(_timed([sys.executable, "-c", "import libcst"], env)[:2])
        rows["perflint --version"].append(_timed([sys.executable, "-m", "perflint", "--version"], env)[:2])
        with tempfile.TemporaryDirectory(prefix="perflint-bench-cache-") as cache:
            t, c, p = _timed(check, {**env, "PERFLINT_CACHE_DIR": cache})
            if p.returncode != 0:
                raise SystemExit(f"perflint failed ({p.returncode}):\n{p.stderr}")
            rows["check, cold (empty cache)"].append((t, c))
    with tempfile.TemporaryDirectory(prefix="perflint-bench-cache-") as cache:
        wenv = {**env, "PERFLINT_CACHE_DIR": cache}
        _timed(check, wenv)
        for _ in range(repeat):
            rows["check, warm (cache filled)"].append(_timed(check, wenv)[:2])
        probe = [sys.executable, "-c", _IMPORTS_PROBE.format(names=set(NOT_ON_A_WARM_RUN)), *check[3:]]
        p = subprocess.run(probe, capture_output=True, text=True, env=wenv, stdin=subprocess.DEVNULL)
        imported = p.stderr.rsplit("imported:", 1)[-1].split() if "imported:" in p.stderr else ["?"]
    lines = path.read_bytes().count(b"\n")
    print()
    print(f"one file: {path} ({lines} lines)")
    print()
    print(f"| {'run':<28} | {'seconds':>7} | {'CPU s':>6} |")
    print(f"|{'-' * 30}|{'-' * 9}|{'-' * 8}|")
    out = {}
    for name, runs in rows.items():
        t, c = med(r[0] for r in runs), med(r[1] for r in runs)
        out[name] = {"s": t, "cpu_s": c}
        print(f"| {name:<28} | {t:>7.2f} | {c:>6.2f} |")
    ratio = out["check, cold (empty cache)"]["s"] / out["python -c 'import libcst'"]["s"]
    out["cold_vs_import_libcst"] = ratio
    print()
    print(f"cold check vs `import libcst`: {ratio:.2f} (goal ≤ 1.5)")
    print(f"targets: cold ≤ 0.50 s, warm ≤ 0.25 s; the warm run imported "
          f"{', '.join(imported) if imported else 'none'} of {', '.join(NOT_ON_A_WARM_RUN)}")
    out["warm_imported"] = imported
    with tempfile.TemporaryDirectory(prefix="perflint-bench-cache-") as cache:
        probe = [sys.executable, "-c", _RULES_PROBE, *check[3:]]
        p = subprocess.run(probe, capture_output=True, text=True, env={**env, "PERFLINT_CACHE_DIR": cache},
                           stdin=subprocess.DEVNULL)
    loaded = p.stderr.rsplit("rules:", 1)[-1].split()[0] if "rules:" in p.stderr else "?"
    print(f"rule modules the cold run imported: {loaded}")
    out["rule_modules_imported"] = loaded
    if against is not None:
        theirs = out[f"check, cold, code of {against.name}"]["s"] / out["python -c 'import libcst'"]["s"]
        out["against_cold_vs_import_libcst"] = theirs
        print(f"the same, code of {against.name}: {theirs:.2f}")
    return out


_BLOCK = """
class Net{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        return self.fc(x.mean((2, 3)))


def train_{i}(device, epochs=2):
    ds = TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 10, (64,)))
    loader = DataLoader(ds, batch_size=8)
    model = Net{i}().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        total = 0.0
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            if step % 10 == 0:
                print(epoch, step, loss.item())
    return total
"""
_HEAD = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
         "from torch.utils.data import DataLoader, TensorDataset\n")


def big_file_text(lines: int) -> str:
    """A generated training module of about `lines` lines: model classes and training
    functions with loaders, device copies, `.item()` logging (about 7 findings a block)."""
    blocks = max(1, lines // _BLOCK.count("\n"))
    return _HEAD + "".join(_BLOCK.format(i=i) for i in range(blocks)) + \
        "\n\nif __name__ == '__main__':\n    train_0('cuda')\n"


_PARSE_ONLY = """
import resource, sys, time
import libcst
text = open(sys.argv[1], encoding="utf-8").read()
t = time.perf_counter()
libcst.parse_module(text)
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def big_file_table(sizes: list[int], repeat: int, med) -> dict:
    """One generated file per size: `perflint check FILE --no-cache` (one job) against a
    process that only runs `libcst.parse_module` on it — time and peak memory."""
    env = _env()
    out = {}
    print()
    print(f"| {'lines':>7} | {'parse s':>7} | {'check s':>7} | {'ratio':>5} | {'parse MB':>8} | {'check MB':>8} | {'ratio':>5} |")
    print(f"|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 7}|{'-' * 10}|{'-' * 10}|{'-' * 7}|")
    with tempfile.TemporaryDirectory(prefix="perflint-bench-big-") as tmp:
        for n in sizes:
            path = Path(tmp) / f"train_{n}.py"
            path.write_text(big_file_text(n), encoding="utf-8")
            real = path.read_bytes().count(b"\n")
            parse, check = [], []
            for _ in range(repeat):
                p = subprocess.run([sys.executable, "-c", _PARSE_ONLY, str(path)], capture_output=True, text=True,
                                   env=env, check=True)
                secs, rss = p.stdout.split()
                parse.append((float(secs), int(rss)))
                cmd = [sys.executable, "-c", "import resource, runpy, sys, time\n"
                       "t = time.perf_counter()\nsys.argv = ['perflint', 'check', sys.argv[1], '--no-cache', '--jobs', '1',"
                       " '--exit-zero', '-q', '-o', '/dev/null']\n"
                       "try:\n    runpy.run_module('perflint', run_name='__main__')\nexcept SystemExit:\n    pass\n"
                       "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,"
                       " file=sys.stderr)", str(path)]
                p = subprocess.run(cmd, capture_output=True, text=True, env=env)
                secs, rss = p.stderr.split()[-2:]
                check.append((float(secs), int(rss)))
            ps, cs = med(t for t, _ in parse), med(t for t, _ in check)
            pm, cm = med(m for _, m in parse) / 2**20, med(m for _, m in check) / 2**20
            out[str(n)] = {"lines": real, "parse_s": ps, "check_s": cs, "parse_mb": pm, "check_mb": cm}
            print(f"| {real:>7,} | {ps:>7.2f} | {cs:>7.2f} | {cs / ps:>5.2f} | {pm:>8.0f} | {cm:>8.0f} | {cm / pm:>5.2f} |")
    print()
    print("check: `perflint check FILE --no-cache --jobs 1` in one process (imports included); parse: "
          "`libcst.parse_module` alone (its import excluded); memory: peak RSS of each process")
    return out


_PHASES = """
import json, sys, time
from perflint import engine, positions
from perflint.analysis import facts as facts_mod
from perflint.rules import all_rules

spent = {}
stack = []  # [label, time spent in nested phases]: each phase counts its own time only
def timed(owner, name, label, generator=False):
    real = getattr(owner, name)
    def wrapper(*a, **k):
        stack.append([label, 0.0])
        t = time.process_time()
        try:
            got = real(*a, **k)
            return list(got) if generator else got
        finally:
            took = time.process_time() - t
            _, nested = stack.pop()
            spent[label] = spent.get(label, 0.0) + took - nested
            if stack:
                stack[-1][1] += took
    setattr(owner, name, wrapper)

timed(engine, "_parse_module", "parse (libcst)")
timed(facts_mod.Facts, "__init__", "facts walk")
timed(engine, "_summary_of", "module summary")
timed(positions, "node_offsets", "finding positions")
timed(engine, "_fix_edits", "fix edits")
for cls in all_rules().values():
    timed(cls, "check", "rules", generator=True)
start = time.process_time()
sys.argv = ["perflint", "check", sys.argv[1], "--no-cache", "--jobs", "1", "--exit-zero", "-q", "-o", "/dev/null"]
from perflint.cli import main
try:
    main()
except SystemExit:
    pass
spent["total"] = time.process_time() - start
print(json.dumps(spent))
"""


def phases_table(target: str, med, repeat: int) -> dict:
    """Where one cold check of one file goes (CPU seconds in its one process)."""
    env = _env()
    with tempfile.TemporaryDirectory(prefix="perflint-bench-phases-") as tmp:
        if target.isdigit():
            path = Path(tmp) / f"train_{target}.py"
            path.write_text(big_file_text(int(target)), encoding="utf-8")
        else:
            path = Path(target)
        runs = []
        for _ in range(repeat):
            p = subprocess.run([sys.executable, "-c", _PHASES, str(path)], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                raise SystemExit(f"phases run failed:\n{p.stderr}")
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        lines = path.read_bytes().count(b"\n")
    # Each phase counts its own time only (the position pass a summary makes is a position
    # pass); "the rest" is imports, discovery, the hot-path evidence, reporting.
    keys = ["parse (libcst)", "facts walk", "rules", "module summary", "finding positions", "fix edits"]
    total = med(r["total"] for r in runs)
    out = {k: med(r.get(k, 0.0) for r in runs) for k in keys}
    print()
    print(f"phases of `perflint check --no-cache --jobs 1` on {path.name} ({lines:,} lines), CPU s, "
          f"{'min' if med is min else 'median'} of {repeat}")
    print()
    print(f"| {'phase':<20} | {'CPU s':>7} | {'share':>6} | {'× parse':>7} |")
    print(f"|{'-' * 22}|{'-' * 9}|{'-' * 8}|{'-' * 9}|")
    parse = out["parse (libcst)"] or float("nan")
    for k in keys:
        print(f"| {k:<20} | {out[k]:>7.2f} | {out[k] / total:>6.1%} | {out[k] / parse:>7.2f} |")
    rest = total - sum(out.values())
    print(f"| {'the rest':<20} | {rest:>7.2f} | {rest / total:>6.1%} | {rest / parse:>7.2f} |")
    print(f"| {'total':<20} | {total:>7.2f} | {1:>6.1%} | {total / parse:>7.2f} |")
    out["rest"], out["total"], out["lines"] = rest, total, lines
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, nargs="?")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    ap.add_argument("--statistic", choices=["min", "median"], default="min", help="how the runs are summarised")
    ap.add_argument("--jobs", type=int, default=None, help="perflint --jobs (default: every core)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    ap.add_argument("--select", metavar="CODES", help="perflint --select for the folder runs (e.g. ALL)")
    ap.add_argument("--formats", action="store_true", help="also time every output format on FOLDER")
    ap.add_argument("--one-file", type=Path, metavar="FILE", help="time start-up on one small file")
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="with --one-file: also time the cold check with the perflint package in DIR (another commit)")
    ap.add_argument("--big-file", type=int, nargs="+", metavar="LINES",
                    help="time generated training files of these sizes against the bare parse")
    ap.add_argument("--phases", metavar="LINES_OR_FILE",
                    help="split one cold check of a generated file of LINES lines (or of FILE) into its phases")
    args = ap.parse_args()
    if args.select:
        SELECT[:] = ["--select", args.select]
    med = min if args.statistic == "min" else statistics.median
    extra: dict = {}
    if args.one_file is not None:
        extra["one_file"] = one_file_table(args.one_file, args.repeat, med, args.against)
    if args.big_file:
        extra["big_file"] = big_file_table(args.big_file, args.repeat, med)
    if args.phases:
        extra["phases"] = phases_table(args.phases, med, args.repeat)
    if args.folder is None:
        if args.one_file is None and not args.big_file and not args.phases:
            ap.error("give a FOLDER, --one-file FILE, --big-file LINES, --phases LINES, or several")
        if args.json:
            args.json.write_text(json.dumps(extra, indent=2) + "\n")
        return
    folder = args.folder.resolve()
    print()

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
    print(f"cold / floor: {cold / floor:.2f}×  (goal ≤ 0.5×, issue 19)")
    print(f"warm speed-up over cold: {cold / warm:.1f}×  (goal ≥ 20×)")
    if load_before > cores * 0.5 or load_after > cores * 0.5:
        print(f"note: other processes were running (load average above {cores * 0.5:.1f}); "
              "wall-clock ratios are pessimistic, the CPU column is not")
    if args.formats:
        extra["formats"] = format_table(folder, args.jobs, args.repeat, med)
    if args.json:
        args.json.write_text(json.dumps({**extra,
            "folder": folder.name, "files": n, "lines": lines, "cores": cores, "findings": findings,
            "repeat": args.repeat, "statistic": args.statistic, "floor_s": floor, "cold_s": cold, "warm_s": warm,
            "cold_over_floor": cold / floor, "warm_speedup": cold / warm,
            "floor_cpu_s": med(floor_cpu), "cold_cpu_s": med(cold_cpu), "warm_cpu_s": med(warm_cpu),
            "load_average": [load_before, load_after],
            "floor_runs": floor_runs, "cold_runs": cold_runs, "warm_runs": warm_runs,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
