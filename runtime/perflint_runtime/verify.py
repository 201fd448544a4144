"""`perflint verify`: measure a training script against its fixed version.

    perflint verify train.py --unsafe-fixes --steps 30 -- --batch-size 64

1. The "after" script is `--fixed FILE`, or perflint's own fix of SCRIPT (with the
   project's configuration, as `perflint fix` would), written to a hidden temporary file
   next to SCRIPT so that relative imports and paths still resolve; it is removed after.
2. Both scripts run under the step-timing harness (`perflint_runtime.harness`),
   alternately, A B A B …, so that drift of the machine (clocks, other load) hits both.
3. The report gives, per script, the mean step time, samples per second and peak
   memory; then the speedup (mean original / mean fixed step time) with a
   hierarchical-bootstrap 95% confidence interval, and how far the two loss curves drift
   apart (window means against the loss scale; `stats.max_loss_divergence`).

Exit status: 0 when the fixed script is not slower beyond noise and its losses agree;
1 when it is slower (the interval's upper bound is below 1) or its losses diverge beyond
the tolerance; 2 when a run fails (crash, timeout, too few optimizer steps) or the fixed
script cannot be produced.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from perflint_runtime import stats
from perflint_runtime.harness import RunResult, run_script
from perflint_runtime.sysinfo import host

EXIT_OK, EXIT_WORSE, EXIT_ERROR = 0, 1, 2
ORIGINAL, FIXED = "original", "fixed"


class VerifyError(Exception):
    """The comparison cannot be made (one line, shown to the user)."""


# ----------------------------------------------------------------------------------------
# The "after" script
# ----------------------------------------------------------------------------------------


def perflint_fix(script: Path, unsafe: bool, target_torch: tuple[int, int] | None) -> str:
    """SCRIPT's text after `perflint fix` (the project's rule selection and target torch)."""
    from perflint.config import ConfigError, Resolver
    from perflint.engine import fix_source
    from perflint.runner import options_for
    from perflint.selection import fixable_codes

    try:
        settings = Resolver().for_path(script)
    except ConfigError as exc:
        raise VerifyError(str(exc)) from None
    codes = options_for(script, settings, with_edits=False).codes
    fixable = fixable_codes(settings)
    if fixable is not None:
        codes = tuple(c for c in codes if c in fixable)
    try:
        text = script.read_text(encoding="utf-8")
        return fix_source(text, unsafe=unsafe or settings.unsafe_fixes, codes=codes,
                          target_torch=target_torch or settings.effective_target(), path=str(script))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise VerifyError(f"cannot fix {script}: {exc}") from None


@contextlib.contextmanager
def temporary_sibling(script: Path, text: str) -> Iterator[Path]:
    """`text` written to a hidden file beside `script` (same folder, so imports resolve)."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{script.stem}.", suffix=".perflint-fixed.py", dir=script.parent)
    except OSError as exc:
        raise VerifyError(f"cannot write the fixed script beside {script}: {exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


# ----------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureSettings:
    steps: int
    warmup: int
    repeats: int
    timeout: float
    loss_tolerance: float
    # (steps, warmup) for some scripts by name: a script whose loader has many workers
    # needs more steps to span several of their bursts (see stats).
    per_script: dict[str, tuple[int, int]] = field(default_factory=dict)


def measure_alternating(
    scripts: dict[str, str],
    script_args: list[str],
    settings: MeasureSettings,
    on_run: Callable[[str, int, RunResult], None] | None = None,
) -> dict[str, list[RunResult]]:
    """Run every script `repeats` times, interleaved (A B C A B C …); stop at the first failure."""
    runs: dict[str, list[RunResult]] = {name: [] for name in scripts}
    for repeat in range(1, settings.repeats + 1):
        for name, path in scripts.items():
            steps, warmup = settings.per_script.get(name, (settings.steps, settings.warmup))
            result = run_script(path, script_args, steps=steps, warmup=warmup, timeout=settings.timeout)
            runs[name].append(result)
            if on_run is not None:
                on_run(name, repeat, result)
            if not result.ok:
                return runs
    return runs


@dataclass
class Summary:
    """One script's runs, summarised."""

    mean_step_s: float
    samples_per_s: float | None
    batch_size: int | None
    peak_memory_bytes: int | None
    memory_kind: str
    runs: int
    steps_per_run: int


@dataclass
class Comparison:
    """A candidate against the baseline."""

    speedup: float
    speedup_ci95: tuple[float, float]
    max_loss_divergence: float | None
    loss_tolerance: float
    verdict: str
    exit_code: int


def summarise(runs: list[RunResult]) -> Summary:
    med = stats.mean(stats.pooled([r.step_times_s for r in runs]))
    batch = runs[0].batch_size
    peaks = [r.peak_memory_bytes for r in runs if r.peak_memory_bytes is not None]
    return Summary(
        mean_step_s=med,
        samples_per_s=batch / med if batch else None,
        batch_size=batch,
        peak_memory_bytes=max(peaks) if peaks else None,
        memory_kind=runs[0].memory_kind,
        runs=len(runs),
        steps_per_run=len(runs[0].step_times_s),
    )


def compare(baseline: list[RunResult], candidate: list[RunResult], loss_tolerance: float, seed: int = 0) -> Comparison:
    """Speedup with its 95% interval, loss agreement, and the verdict with its exit status."""
    base_times = [r.step_times_s for r in baseline]
    cand_times = [r.step_times_s for r in candidate]
    speedup = stats.speedup(base_times, cand_times)
    lo, hi = stats.bootstrap_speedup_ci(base_times, cand_times, seed=seed)
    divergences = [stats.max_loss_divergence(b.losses, c.losses) for b, c in zip(baseline, candidate)]
    known = [d for d in divergences if d is not None]
    divergence = max(known) if known else None
    problems = []
    if hi < 1.0:
        problems.append("slower beyond noise")
    if divergence is not None and divergence > loss_tolerance:
        problems.append(f"losses diverge ({divergence:.1%} > {loss_tolerance:.1%})")
    if problems:
        return Comparison(speedup, (lo, hi), divergence, loss_tolerance, "; ".join(problems), EXIT_WORSE)
    verdict = "faster" if lo > 1.0 else "no difference beyond noise"
    return Comparison(speedup, (lo, hi), divergence, loss_tolerance, verdict, EXIT_OK)


# ----------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------


def format_bytes(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def format_ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def format_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:,.1f}"


def memory_label(kind: str) -> str:
    return "peak CUDA memory allocated" if kind == "cuda" else "peak process RSS"


def device_line(runs: list[RunResult]) -> str:
    """Where the figures come from, said plainly when it is not a GPU."""
    first = runs[0]
    if first.device == "cuda":
        return f"Measured on {first.device_name} (torch {first.torch_version})."
    return (f"Measured on the CPU ({first.device_name}, {first.torch_threads} torch threads, torch "
            f"{first.torch_version}): this is a CPU figure, not a GPU figure.")


def run_line(name: str, repeat: int, result: RunResult) -> str:
    if result.ok:
        return (f"  {name} run {repeat}: mean {format_ms(stats.mean(result.step_times_s))}/step over "
                f"{len(result.step_times_s)} steps ({result.wall_s:.1f} s)")
    return f"  {name} run {repeat}: {result.status}"


def print_report(console, script: str, fixed_label: str, summaries: dict[str, Summary],
                 comparison: Comparison, runs: list[RunResult]) -> None:
    from rich.table import Table

    base, cand = summaries[ORIGINAL], summaries[FIXED]
    table = Table(title=f"perflint verify: {script}")
    table.add_column("")
    table.add_column(ORIGINAL, justify="right")
    table.add_column(f"{FIXED} ({fixed_label})", justify="right")
    table.add_row("mean step time", format_ms(base.mean_step_s), format_ms(cand.mean_step_s))
    table.add_row(f"samples/s (batch {base.batch_size})", format_rate(base.samples_per_s),
                  format_rate(cand.samples_per_s))
    table.add_row(memory_label(base.memory_kind), format_bytes(base.peak_memory_bytes),
                  format_bytes(cand.peak_memory_bytes))
    table.add_row("runs × measured steps", f"{base.runs} × {base.steps_per_run}",
                  f"{cand.runs} × {cand.steps_per_run}")
    console.print(table)
    lo, hi = comparison.speedup_ci95
    console.print(f"speedup {comparison.speedup:.3f}× (95% CI {lo:.3f}–{hi:.3f})")
    div = comparison.max_loss_divergence
    console.print("max loss divergence " + ("n/a (no loss seen)" if div is None else
                                            f"{div:.2%} (tolerance {comparison.loss_tolerance:.1%})"))
    console.print(f"verdict: {comparison.verdict}")
    console.print(device_line(runs))


def verify_command(script: str, fixed: str | None, unsafe_fixes: bool, settings: MeasureSettings,
                   json_out: str | None, script_args: list[str], target_torch: tuple[int, int] | None) -> str:
    """The `perflint verify …` command line equivalent to this call."""
    argv = ["perflint", "verify", script]
    if fixed:
        argv += ["--fixed", fixed]
    if unsafe_fixes:
        argv.append("--unsafe-fixes")
    argv += ["--steps", str(settings.steps), "--warmup", str(settings.warmup), "--repeats", str(settings.repeats),
             "--timeout", f"{settings.timeout:g}", "--loss-tolerance", f"{settings.loss_tolerance:g}"]
    if target_torch:
        argv += ["--target-torch", ".".join(map(str, target_torch))]
    if json_out:
        argv += ["--json", json_out]
    if script_args:
        argv += ["--", *script_args]
    return shlex.join(argv)


def environment(run: RunResult | None) -> dict:
    """Where the measurement was taken: the run's device and torch, this host's CPU and Python."""
    from perflint import __version__

    return {
        "perflint_version": __version__,
        "device": run.device if run else None,
        "device_name": run.device_name if run else None,
        "gpu_figure": bool(run and run.device == "cuda"),
        "torch_version": run.torch_version if run else None,
        "torch_threads": run.torch_threads if run else None,
        **host(),
    }


def report_json(command: str, script: str, fixed_label: str, settings: MeasureSettings,
                runs: dict[str, list[RunResult]], summaries: dict[str, Summary] | None,
                comparison: Comparison | None, error: str | None) -> dict:
    every = [r for rs in runs.values() for r in rs]
    return {
        "command": command,
        "script": script,
        "fixed": fixed_label,
        **environment(every[0] if every else None),
        "settings": asdict(settings),
        "runs": [{"variant": name, "repeat": i + 1, **asdict(rs[i])}  # in the order they ran
                 for i in range(max(map(len, runs.values()), default=0)) for name, rs in runs.items() if i < len(rs)],
        "summary": None if summaries is None else {name: asdict(s) for name, s in summaries.items()},
        "comparison": None if comparison is None else asdict(comparison),
        "error": error,
    }


def write_json(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------


def main(script: str, fixed: str | None, unsafe_fixes: bool, steps: int, warmup: int, repeats: int,
         timeout: float, loss_tolerance: float, json_out: str | None, script_args: list[str],
         target_torch: tuple[int, int] | None, quiet: bool) -> int:
    """Run `perflint verify`; returns the exit status (see the module docstring)."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True, emoji=False)
    err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
    settings = MeasureSettings(steps, warmup, repeats, timeout, loss_tolerance)
    command = verify_command(script, fixed, unsafe_fixes, settings, json_out, script_args, target_torch)
    fixed_label = fixed or ("perflint fix --unsafe-fixes" if unsafe_fixes else "perflint fix")
    if warmup < 1:
        err.print("[bold red]error[/]: --warmup must be at least 1 (the first step's time includes start-up)")
        return EXIT_ERROR
    try:
        with _after_script(Path(script), fixed, unsafe_fixes, target_torch) as after:
            if after is None:
                console.print(f"perflint has no fix for {script}: nothing to compare.")
                return EXIT_OK
            on_run = None if quiet else (lambda name, i, r: err.print(run_line(name, i, r)))
            runs = measure_alternating({ORIGINAL: script, FIXED: str(after)}, script_args, settings, on_run)
    except VerifyError as exc:
        err.print(f"[bold red]error[/]: {exc}")
        return EXIT_ERROR
    failed = [r for rs in runs.values() for r in rs if not r.ok]
    if failed:
        message = failed[0].describe_failure()
        err.print(f"[bold red]error[/]: {message}")
        if json_out:
            write_json(json_out, report_json(command, script, fixed_label, settings, runs, None, None, message))
        return EXIT_ERROR
    summaries = {name: summarise(rs) for name, rs in runs.items()}
    comparison = compare(runs[ORIGINAL], runs[FIXED], loss_tolerance)
    print_report(console, script, fixed_label, summaries, comparison, runs[ORIGINAL])
    if json_out:
        write_json(json_out, report_json(command, script, fixed_label, settings, runs, summaries, comparison, None))
    return comparison.exit_code


@contextlib.contextmanager
def _after_script(script: Path, fixed: str | None, unsafe: bool,
                  target_torch: tuple[int, int] | None) -> Iterator[Path | None]:
    """The fixed script's path: `--fixed`, or perflint's fix in a temporary file (None if no fix applies)."""
    if fixed:
        yield Path(fixed)
        return
    text = perflint_fix(script, unsafe, target_torch)
    if text == script.read_text(encoding="utf-8"):
        yield None
        return
    with temporary_sibling(script, text) as path:
        yield path
