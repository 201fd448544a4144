"""`perflint verify`: measure a training script against its fixed version.

    perflint verify train.py --unsafe-fixes --steps 30 -- --batch-size 64

1. The "after" script is `--fixed FILE`, or perflint's own fix of SCRIPT (with the
   project's configuration, as `perflint fix` would), written to a hidden temporary file
   next to SCRIPT so that relative imports and paths still resolve; it is removed after.
2. Both scripts run under the step-timing harness (`perflint_runtime.harness`),
   alternately, A B A B …, so that drift of the machine (clocks, other load) hits both,
   until the speedup is known: at least `--repeats` runs of each, then more pairs until
   the 95% interval is within ±`--precision` of the speedup, or until another pair
   would not end within `--max-time` seconds (`measure_until_known`).
3. The report gives, per script, the mean step time, samples per second and peak
   memory, and where the step goes (waiting for data, host-to-device copies, forward +
   backward, optimizer step, other host time; on CUDA the end-of-step wait for the GPU
   and the host syncs per step), with the rules that address the largest share; then
   the speedup (mean original / mean fixed step time) with a hierarchical-bootstrap 95%
   confidence interval, how far the two loss curves drift apart (window means against
   the loss scale; `stats.max_loss_divergence`), and what stopped the sampling.

With fewer than 3 runs of each script the interval cannot hold run-to-run noise, and the
verdict is "inconclusive" (never faster or slower).  The report names the fixes that went
into the measured script; the warm-up is lengthened, and the report says so, until the
loaders' prefetch queue (workers × prefetch_factor batches) has been drained; a slower
fixed script gets the likely cause its step split shows.

Exit status: 0 when the fixed script is not slower beyond noise (or the verdict is
inconclusive) and its losses agree;
1 when it is slower (the interval's upper bound is below 1) or its losses diverge beyond
the tolerance; 2 when a run fails (crash, timeout, too few optimizer steps), the fixed
script cannot be produced, or there is nothing to compare (no fix applies).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from perflint_runtime import stats
from perflint_runtime.harness import RunResult, run_script
from perflint_runtime.phases import PHASES
from perflint_runtime.sysinfo import host

EXIT_OK, EXIT_WORSE, EXIT_ERROR = 0, 1, 2
ORIGINAL, FIXED = "original", "fixed"
# Fewer runs of a script than this say nothing about run-to-run noise (start-up, placement,
# clocks, the loader's workers): one run of 5 steps gave "faster, 1.214× [1.089, 1.323]",
# fifteen runs of the same pair 1.024× [0.936, 1.125].  Below it the verdict is inconclusive.
MIN_RUNS = 3


class VerifyError(Exception):
    """The comparison cannot be made (one line, shown to the user)."""


# ----------------------------------------------------------------------------------------
# The "after" script
# ----------------------------------------------------------------------------------------


@dataclass
class AppliedFix:
    """One fix that went into the measured script."""

    code: str
    row: int
    message: str


def perflint_fix(script: Path, unsafe: bool, target_torch: tuple[int, int] | None,
                 applied: list[AppliedFix] | None = None) -> str:
    """SCRIPT's text after `perflint fix` (the project's rule selection and target torch);
    the fixes it applied are appended to `applied`."""
    from perflint.api import PerflintError, check_source, fix_source, lint_options

    try:
        text = script.read_text(encoding="utf-8")
        _, settings = lint_options(str(script))
        use_unsafe = True if unsafe else None
        result = fix_source(text, path=str(script), unsafe=use_unsafe, target_torch=target_torch)
        if applied is not None and result.changed:
            allowed = {"safe", "unsafe"} if (unsafe or settings.unsafe_fixes) else {"safe"}
            for d in check_source(text, path=str(script), target_torch=target_torch):
                if d.fix is not None and d.fix.applicability.value in allowed and d.code in result.applied:
                    applied.append(AppliedFix(d.code, d.location.row, d.fix.message))
        return result.text
    except (OSError, UnicodeDecodeError, PerflintError) as exc:
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
    # `measure_until_known`: stop once the 95% interval is within ±precision of the
    # speedup, or when another pair of runs would end after max_time seconds.
    max_time: float = 300.0
    precision: float = 0.05


def measure_alternating(
    scripts: dict[str, str],
    script_args: list[str],
    settings: MeasureSettings,
    on_run: Callable[[str, int, RunResult], None] | None = None,
) -> dict[str, list[RunResult]]:
    """Run every script exactly `repeats` times, interleaved (A B C A B C …); stop at the first failure."""
    return measure_until_known(scripts, script_args, dataclasses.replace(settings, max_time=0.0), on_run)[0]


PRECISION, TIME_BUDGET, FAILURE = "precision", "time budget", "failure"


@dataclass
class Sampling:
    """How much was measured, and what stopped it."""

    stopped_by: str  # PRECISION, TIME_BUDGET or FAILURE
    runs_per_script: int
    measured_steps: dict[str, int]
    elapsed_s: float
    half_width: float | None  # the 95% interval's larger half, relative to the speedup
    precision: float
    max_time_s: float


def relative_half_width(baseline: list[RunResult], candidate: list[RunResult], seed: int = 0) -> float:
    """How far the 95% interval of the speedup reaches from it, as a fraction of it."""
    base = [r.step_times_s for r in baseline]
    cand = [r.step_times_s for r in candidate]
    point = stats.speedup(base, cand)
    lo, hi = stats.bootstrap_speedup_ci(base, cand, seed=seed)
    return max(hi / point - 1.0, 1.0 - lo / point)


def measure_until_known(
    scripts: dict[str, str],
    script_args: list[str],
    settings: MeasureSettings,
    on_run: Callable[[str, int, RunResult], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, list[RunResult]], Sampling]:
    """Run the scripts in turn (A B A B …) until the speedup of the second against the
    first is known to ±`settings.precision` (95% interval), or the time budget is spent.

    At least `settings.repeats` runs of each; after that a pair is started only if, at the
    mean duration of the pairs so far, it ends within `settings.max_time` seconds of the
    start.  The first failed run stops everything.  (Compare `torch.utils.benchmark`'s
    `adaptive_autorange`, which adds measurements until the spread is small enough, and
    pyperf, which sizes its runs to a time budget.)"""
    names = list(scripts)
    runs: dict[str, list[RunResult]] = {name: [] for name in names}
    started = clock()
    pair_times: list[float] = []

    def sampling(stopped_by: str, half: float | None) -> Sampling:
        return Sampling(stopped_by, max(map(len, runs.values())),
                        {n: sum(len(r.step_times_s) for r in rs) for n, rs in runs.items()},
                        clock() - started, half, settings.precision, settings.max_time)

    repeat = 0
    while True:
        repeat += 1
        pair_start = clock()
        for name in names:
            steps, warmup = settings.per_script.get(name, (settings.steps, settings.warmup))
            result = run_script(scripts[name], script_args, steps=steps, warmup=warmup, timeout=settings.timeout)
            runs[name].append(result)
            if on_run is not None:
                on_run(name, repeat, result)
            if not result.ok:
                return runs, sampling(FAILURE, None)
        pair_times.append(clock() - pair_start)
        if repeat < settings.repeats:
            continue
        half = relative_half_width(runs[names[0]], runs[names[1]]) if len(names) > 1 else 0.0
        if half <= settings.precision and repeat >= MIN_RUNS:
            return runs, sampling(PRECISION, half)
        if clock() - started + stats.mean(pair_times) > settings.max_time:
            return runs, sampling(TIME_BUDGET, half)


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
    # mean seconds per step in each phase (they add up to mean_step_s); None if not measured
    phases_s: dict[str, float] | None = None
    host_syncs_per_step: float | None = None  # CUDA runs only


@dataclass
class Comparison:
    """A candidate against the baseline."""

    speedup: float
    speedup_ci95: tuple[float, float]
    max_loss_divergence: float | None
    loss_tolerance: float
    verdict: str  # "faster", "no difference beyond noise", "slower beyond noise", "inconclusive: …", …
    exit_code: int
    conclusive: bool = True  # False: fewer than MIN_RUNS runs of a script, no faster/slower verdict
    likely_cause: str | None = None  # when slower: what the step split shows


def summarise(runs: list[RunResult]) -> Summary:
    med = stats.mean(stats.pooled([r.step_times_s for r in runs]))
    batch = runs[0].batch_size
    peaks = [r.peak_memory_bytes for r in runs if r.peak_memory_bytes is not None]
    phases = None
    if all(set(PHASES) <= set(r.phase_times_s) for r in runs):
        phases = {p: stats.mean(stats.pooled([r.phase_times_s[p] for r in runs])) for p in PHASES}
    syncs = None
    if all(r.host_syncs for r in runs):
        syncs = stats.mean(stats.pooled([r.host_syncs for r in runs]))
    return Summary(
        mean_step_s=med,
        samples_per_s=batch / med if batch else None,
        batch_size=batch,
        peak_memory_bytes=max(peaks) if peaks else None,
        memory_kind=runs[0].memory_kind,
        runs=len(runs),
        steps_per_run=len(runs[0].step_times_s),
        phases_s=phases,
        host_syncs_per_step=syncs,
    )


def compare(baseline: list[RunResult], candidate: list[RunResult], loss_tolerance: float, seed: int = 0) -> Comparison:
    """Speedup with its 95% interval, loss agreement, and the verdict with its exit status.

    The interval resamples runs, then steps within each drawn run, so it holds run-to-run
    noise only when there are runs to resample: with fewer than `MIN_RUNS` runs of either
    script the verdict is "inconclusive", never faster or slower (exit 0 unless the losses
    diverge)."""
    base_times = [r.step_times_s for r in baseline]
    cand_times = [r.step_times_s for r in candidate]
    speedup = stats.speedup(base_times, cand_times)
    lo, hi = stats.bootstrap_speedup_ci(base_times, cand_times, seed=seed)
    divergences = [stats.max_loss_divergence(b.losses, c.losses) for b, c in zip(baseline, candidate)]
    known = [d for d in divergences if d is not None]
    divergence = max(known) if known else None
    diverged = divergence is not None and divergence > loss_tolerance
    diverge_text = f"losses diverge ({divergence:.1%} > {loss_tolerance:.1%})" if diverged else ""
    runs = min(len(baseline), len(candidate))
    if runs < MIN_RUNS:
        verdict = (f"inconclusive: {runs} run{'s' if runs != 1 else ''} of each script "
                   f"{'say' if runs != 1 else 'says'} nothing about run-to-run noise; at least {MIN_RUNS} "
                   f"are needed (--repeats {MIN_RUNS})")
        if diverged:
            verdict += f"; {diverge_text}"
        return Comparison(speedup, (lo, hi), divergence, loss_tolerance, verdict,
                          EXIT_WORSE if diverged else EXIT_OK, conclusive=False)
    problems = []
    if hi < 1.0:
        problems.append("slower beyond noise")
    if diverged:
        problems.append(diverge_text)
    if problems:
        return Comparison(speedup, (lo, hi), divergence, loss_tolerance, "; ".join(problems), EXIT_WORSE)
    verdict = "faster" if lo > 1.0 else "no difference beyond noise"
    return Comparison(speedup, (lo, hi), divergence, loss_tolerance, verdict, EXIT_OK)


def likely_cause(base: Summary, cand: Summary, cpu_count: int | None = None) -> str | None:
    """When the fixed script is slower, what the step split says about why (None: no split,
    or it is not slower)."""
    if not base.phases_s or not cand.phases_s or cand.mean_step_s <= base.mean_step_s:
        return None
    deltas = {p: cand.phases_s[p] - base.phases_s[p] for p in PHASES}
    grew = max(deltas, key=lambda p: deltas[p])
    fell = min(deltas, key=lambda p: deltas[p])
    if deltas[grew] <= 0:
        return None
    text = f"{PHASE_LABELS[grew]} grew by {format_ms(deltas[grew])} a step"
    if deltas[fell] < 0:
        text += f" while {PHASE_LABELS[fell]} fell by {format_ms(-deltas[fell])}"
    syncs = (base.host_syncs_per_step, cand.host_syncs_per_step)
    if grew in ("compute", "optimizer", "other") and None not in syncs and syncs[1] >= syncs[0] + 0.5:
        # on a GPU a host sync waits for the queued kernels, and the wait is timed in its phase
        text += (f": the fixed script waits for the GPU more often ({syncs[1]:.1f} host syncs a step "
                 f"against {syncs[0]:.1f}), and each wait counts in the phase it happens in")
    elif grew in ("compute", "optimizer", "other") and fell == "data":
        cores = cpu_count or os.cpu_count() or 1
        cpu = f"this machine's {cores} CPU core{'s' if cores != 1 else ''}"
        if base.memory_kind == "cuda":
            text += (f": the loader's worker processes compete with the training process for {cpu}, "
                     f"which also launch its GPU work (fewer workers would change that)")
        else:
            text += (f": the loader's worker processes compete with the training process for {cpu} "
                     f"(fewer workers, or a GPU, would change that)")
    elif grew == "h2d":
        text += ": the copies to the device got slower (pinned-memory allocation, or copies that now wait)"
    elif grew == "data":
        text += ": the loader delivers batches more slowly (worker start-up, or more work per sample)"
    return text


# ----------------------------------------------------------------------------------------
# Where the step goes, and the rules for it
# ----------------------------------------------------------------------------------------

PHASE_LABELS = {
    "data": "waiting for data",
    "h2d": "host-to-device copies",
    "compute": "forward + backward",
    "optimizer": "optimizer step",
    "other": "other host time",
    "device": "GPU wait at step end",
}
SHARE_WORDS = {
    "data": "waits for data",
    "h2d": "is host-to-device copies",
    "compute": "is forward + backward",
    "optimizer": "is the optimizer step",
    "other": "is other host time",
    "device": "waits for the GPU at the step's end",
}

# The rules whose fixes shorten each phase: (code, what it changes, whether it only pays
# on CUDA — there the rule's fix, or its advice, is a CUDA feature or a GPU sync).
PHASE_RULES: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "data": (("PF101", "num_workers", False), ("PF103", "persistent_workers", False),
             ("PF106", "worker start method", False), ("PF501", "FFT convolution", False)),
    "h2d": (("PF102", "pin_memory", True), ("PF105", "non_blocking copies", True),
            ("PF409", "tensors created on the device", True)),
    "compute": (("PF403", "bf16 autocast", True), ("PF405", "TF32", True), ("PF406", "cudnn.benchmark", True),
                ("PF408", "channels_last", True), ("PF307", "anomaly detection / profiler left on", False),
                ("PF502", "no_sync while accumulating", False)),
    "optimizer": (("PF302", "fused optimizer", True),),
    "other": (("PF201", ".item() every step", True), ("PF202", "host syncs every step", True),
              ("PF203", "empty_cache() every step", True), ("PF204", "loss kept with its graph", False),
              ("PF301", "zero_grad(set_to_none=True)", False)),
    "device": (("PF403", "bf16 autocast", True), ("PF405", "TF32", True), ("PF406", "cudnn.benchmark", True),
               ("PF408", "channels_last", True), ("PF302", "fused optimizer", True)),
}
FIX_WORDS = {"safe": "safe fix", "unsafe": "unsafe fix", "none": "no automatic fix"}


@dataclass
class Findings:
    """What `perflint check` reports on a script, as far as `verify` needs it."""

    fixes: dict[str, set[str]] = field(default_factory=dict)  # code -> {"safe", "unsafe", "none"}
    unsafe_fixes: int = 0  # findings whose fix is unsafe (and fixable by the configuration)
    unsafe_codes: list[str] = field(default_factory=list)
    reported: list[tuple[str, str]] = field(default_factory=list)  # (code, message) of every finding
    selected: frozenset[str] | None = None  # the rules the configuration runs (None: unknown)


def lint_findings(path: Path, target_torch: tuple[int, int] | None, config_for: Path | None = None) -> Findings:
    """`perflint check` on `path`, with the configuration that governs `config_for` (default:
    `path`); an empty result when the file cannot be linted (the runs will say why)."""
    from perflint.api import PerflintError, check_source, lint_options
    from perflint.selection import fixable_codes

    try:
        options, settings = lint_options(str(config_for or path))
        diagnostics = check_source(Path(path).read_bytes(), path=str(config_for or path), target_torch=target_torch)
    except (PerflintError, OSError):
        return Findings()
    fixable = fixable_codes(settings)
    out = Findings(selected=frozenset(options.codes))
    for d in diagnostics:
        kind = "none" if d.fix is None else d.fix.applicability.value
        if kind != "none" and fixable is not None and d.code not in fixable:
            kind = "none"
        out.fixes.setdefault(d.code, set()).add(kind)
        out.reported.append((d.code, d.message))
        if kind == "unsafe":
            out.unsafe_fixes += 1
            if d.code not in out.unsafe_codes:
                out.unsafe_codes.append(d.code)
    out.unsafe_codes.sort()
    return out


def largest_share(summary: Summary) -> tuple[str, float] | None:
    """The phase with the largest share of the mean step, and that share."""
    if not summary.phases_s or summary.mean_step_s <= 0:
        return None
    phase = max(PHASES, key=lambda p: summary.phases_s[p])
    return phase, summary.phases_s[phase] / summary.mean_step_s


def rules_line(summary: Summary, findings: Findings, cuda: bool) -> str | None:
    """"86% of the step waits for data: PF101 num_workers (reported here: unsafe fix); also PF103 …":
    the rules that shorten the largest phase on this device, those reported on the script first."""
    top = largest_share(summary)
    if top is None:
        return None
    phase, share = top
    return _name_rules(f"{share:.0%} of the step {SHARE_WORDS[phase]}", PHASE_RULES[phase], findings, cuda)


SYNC_RULES = (("PF201", ".item() every step", True), ("PF202", "host syncs every step", True),
              ("PF203", "empty_cache() every step", True))


def syncs_line(summary: Summary, findings: Findings) -> str | None:
    """On CUDA: "3.0 host syncs per step: PF201 .item() every step (reported here: …)"; None without syncs."""
    if not summary.host_syncs_per_step:
        return None
    return _name_rules(f"{summary.host_syncs_per_step:,.1f} host syncs per step", SYNC_RULES, findings, True)


def _unselected(code: str, findings: Findings) -> str:
    """" (not selected: `--extend-select PF403`)" for a rule the configuration does not run
    (off by default, or ignored): its silence says nothing about the script."""
    if findings.selected is None or code in findings.selected:
        return ""
    return f" (not selected: `--extend-select {code}`)"


def _name_rules(head: str, candidates, findings: Findings, cuda: bool) -> str:
    rules = [(code, what) for code, what, cuda_only in candidates if cuda or not cuda_only]
    if not rules:
        return f"{head}: perflint has no rule for it on this device"
    reported = [(c, w) for c, w in rules if c in findings.fixes]
    others = ", ".join(f"{c} {w}{_unselected(c, findings)}" for c, w in rules if c not in findings.fixes)
    if not reported:
        return f"{head}; perflint reports none of its rules here ({others})"
    parts = [f"{c} {w} (reported here: {', '.join(FIX_WORDS[k] for k in sorted(findings.fixes[c]))})"
             for c, w in reported]
    return f"{head}: " + ", ".join(parts) + (f"; also {others}" if others else "")


# ----------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------


def format_bytes(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def format_ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def format_phase(summary: Summary, phase: str) -> str:
    seconds = summary.phases_s[phase]
    share = seconds / summary.mean_step_s if summary.mean_step_s > 0 else 0.0
    return f"{format_ms(seconds)} {share:>4.0%}"


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


def sampling_line(sampling: Sampling) -> str:
    steps = " + ".join(f"{n:,}" for n in sampling.measured_steps.values())
    done = (f"after {sampling.runs_per_script} runs of each script ({steps} measured steps, "
            f"{sampling.elapsed_s:.0f} s)")
    if sampling.stopped_by == PRECISION:
        return (f"sampling: stopped when the 95% interval came within ±{sampling.precision:.0%} of the speedup "
                f"(±{sampling.half_width:.1%}), {done}")
    if sampling.stopped_by == TIME_BUDGET:
        return (f"sampling: stopped by the time budget (--max-time {sampling.max_time_s:g} s) {done}; the interval "
                f"reaches ±{sampling.half_width:.1%}, not ±{sampling.precision:.1%}: give it more time (--max-time) "
                "or more steps per run (--steps)")
    return f"sampling: stopped by a failed run {done}"


def fixes_lines(fixes: "MeasuredFixes | None") -> list[str]:
    """What went into the measured script, one line a fix."""
    if fixes is None:
        return []
    if not fixes.items:
        return [f"fixes in the measured script: {fixes.how}: none known"]
    out = [f"fixes in the measured script ({fixes.how}):"]
    out += [f"  {f.code} line {f.row}: {f.message}" for f in fixes.items]
    return out


def warmup_line(runs: dict[str, list[RunResult]]) -> str | None:
    """Say so when the harness had to lengthen the warm-up to drain a prefetch queue."""
    longer = [r for rs in runs.values() for r in rs if r.warmup > r.warmup_requested > 0]
    if not longer:
        return None
    depth = max(r.prefetch_depth for r in longer)
    asked = longer[0].warmup_requested
    used = max(r.warmup for r in longer)
    every = sum(len(rs) for rs in runs.values())
    return (f"warm-up: extended from {asked} to up to {used} steps on {len(longer)} of {every} runs, so that no "
            f"measured step is served from the loaders' prefetch queue (workers × prefetch_factor = {depth} "
            "batches made in advance)")


def print_report(console, script: str, fixed_label: str, summaries: dict[str, Summary],
                 comparison: Comparison, runs: list[RunResult], sampling: Sampling | None = None,
                 findings: dict[str, Findings] | None = None, fixes: "MeasuredFixes | None" = None,
                 all_runs: dict[str, list[RunResult]] | None = None) -> None:
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
    cuda = runs[0].device == "cuda"
    if base.phases_s and cand.phases_s:
        table.add_section()
        for phase in PHASES:
            if phase == "device" and not cuda:
                continue
            table.add_row(PHASE_LABELS[phase], format_phase(base, phase), format_phase(cand, phase))
        if cuda:
            table.add_row("host syncs per step", _syncs(base), _syncs(cand))
    console.print(table)
    if base.phases_s and cand.phases_s:
        findings = findings or {}
        console.print("where the step goes:")
        for name, summary in ((ORIGINAL, base), (FIXED, cand)):
            line = rules_line(summary, findings.get(name, Findings()), cuda)
            if line:
                console.print(f"  {name + ':':<9} {line}")
            line = syncs_line(summary, findings.get(name, Findings())) if cuda else None
            if line:
                console.print(f"  {'':<9} {line}")
    lo, hi = comparison.speedup_ci95
    console.print(f"speedup {comparison.speedup:.3f}× (95% CI {lo:.3f}–{hi:.3f})")
    div = comparison.max_loss_divergence
    console.print("max loss divergence " + ("n/a (no loss seen)" if div is None else
                                            f"{div:.2%} (tolerance {comparison.loss_tolerance:.1%})"))
    console.print(f"verdict: {comparison.verdict}")
    if comparison.likely_cause:
        console.print(f"likely cause: {comparison.likely_cause}")
    if sampling is not None:
        console.print(sampling_line(sampling))
    line = warmup_line(all_runs) if all_runs else None
    if line:
        console.print(line)
    for line in fixes_lines(fixes):
        console.print(line)
    console.print(device_line(runs))


def _syncs(summary: Summary) -> str:
    return "n/a" if summary.host_syncs_per_step is None else f"{summary.host_syncs_per_step:,.1f}"


def verify_command(script: str, fixed: str | None, unsafe_fixes: bool, settings: MeasureSettings,
                   json_out: str | None, script_args: list[str], target_torch: tuple[int, int] | None) -> str:
    """The `perflint verify …` command line equivalent to this call."""
    argv = ["perflint", "verify", script]
    if fixed:
        argv += ["--fixed", fixed]
    if unsafe_fixes:
        argv.append("--unsafe-fixes")
    argv += ["--steps", str(settings.steps), "--warmup", str(settings.warmup), "--repeats", str(settings.repeats),
             "--max-time", f"{settings.max_time:g}", "--precision", f"{settings.precision:g}",
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


@dataclass
class MeasuredFixes:
    """The fixes that went into the measured script, and how they are known."""

    how: str  # "perflint fix", "perflint fix --unsafe-fixes", or what --fixed removed
    items: list[AppliedFix] = field(default_factory=list)


def removed_findings(original: Findings, fixed: Findings) -> list[AppliedFix]:
    """Findings of the original that a script given with --fixed no longer has."""
    left = list(fixed.reported)
    out = []
    for code, message in original.reported:
        if (code, message) in left:
            left.remove((code, message))
        else:
            out.append(AppliedFix(code, 0, message))
    return out


def report_json(command: str, script: str, fixed_label: str, settings: MeasureSettings,
                runs: dict[str, list[RunResult]], summaries: dict[str, Summary] | None,
                comparison: Comparison | None, error: str | None, sampling: Sampling | None = None,
                fixes: MeasuredFixes | None = None) -> dict:
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
        "sampling": None if sampling is None else asdict(sampling),
        "fixes": None if fixes is None else asdict(fixes),
        "warmup_note": warmup_line(runs) if runs else None,
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
         target_torch: tuple[int, int] | None, quiet: bool, max_time: float = 300.0,
         precision: float = 0.05) -> int:
    """Run `perflint verify`; returns the exit status (see the module docstring)."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True, emoji=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)  # piped or captured: keep the table's rows on one line
    err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
    settings = MeasureSettings(steps, warmup, repeats, timeout, loss_tolerance, max_time=max_time, precision=precision)
    command = verify_command(script, fixed, unsafe_fixes, settings, json_out, script_args, target_torch)
    fixed_label = fixed or ("perflint fix --unsafe-fixes" if unsafe_fixes else "perflint fix")
    if warmup < 1:
        err.print("[bold red]error[/]: --warmup must be at least 1 (the first step's time includes start-up)")
        return EXIT_ERROR
    script_path = Path(script)
    applied: list[AppliedFix] = []
    try:
        with _after_script(script_path, fixed, unsafe_fixes, target_torch, applied) as after:
            original_findings = lint_findings(script_path, target_torch)
            if after is None:
                if not unsafe_fixes and original_findings.unsafe_fixes and \
                        perflint_fix(script_path, True, target_torch) == script_path.read_text(encoding="utf-8"):
                    original_findings.unsafe_fixes = 0  # they would change nothing either
                message = nothing_to_compare(script, original_findings, unsafe_fixes)
                err.print(f"[bold red]error[/]: {message}")
                if json_out:
                    write_json(json_out, report_json(command, script, fixed_label, settings, {}, None, None, message))
                return EXIT_ERROR
            findings = {ORIGINAL: original_findings, FIXED: lint_findings(after, target_torch, config_for=script_path)}
            if fixed:
                fixes = MeasuredFixes("findings of the original that the given script no longer has",
                                      removed_findings(findings[ORIGINAL], findings[FIXED]))
            else:
                fixes = MeasuredFixes(fixed_label, applied)
            on_run = None if quiet else (lambda name, i, r: err.print(run_line(name, i, r)))
            runs, sampling = measure_until_known({ORIGINAL: script, FIXED: str(after)}, script_args, settings, on_run)
    except VerifyError as exc:
        err.print(f"[bold red]error[/]: {exc}")
        return EXIT_ERROR
    failed = [r for rs in runs.values() for r in rs if not r.ok]
    if failed:
        message = failed[0].describe_failure()
        err.print(f"[bold red]error[/]: {message}")
        if json_out:
            write_json(json_out, report_json(command, script, fixed_label, settings, runs, None, None, message,
                                             sampling, fixes))
        return EXIT_ERROR
    summaries = {name: summarise(rs) for name, rs in runs.items()}
    comparison = compare(runs[ORIGINAL], runs[FIXED], loss_tolerance)
    comparison.likely_cause = likely_cause(summaries[ORIGINAL], summaries[FIXED]) \
        if comparison.speedup < 1.0 else None
    print_report(console, script, fixed_label, summaries, comparison, runs[ORIGINAL], sampling, findings, fixes,
                 runs)
    if json_out:
        write_json(json_out, report_json(command, script, fixed_label, settings, runs, summaries, comparison, None,
                                         sampling, fixes))
    return comparison.exit_code


def nothing_to_compare(script: str, findings: Findings, unsafe_fixes: bool) -> str:
    """Why there is no fixed script, and what would give one."""
    if not unsafe_fixes and findings.unsafe_fixes:
        n = findings.unsafe_fixes
        return (f"nothing to compare: `perflint fix` changes nothing in {script}, and {n} unsafe "
                f"fix{'es' if n != 1 else ''} exist{'s' if n == 1 else ''} ({', '.join(findings.unsafe_codes)}); "
                "add --unsafe-fixes to include them")
    return (f"nothing to compare: perflint has no fix for {script}"
            f"{' (unsafe fixes included)' if unsafe_fixes else ''}; pass --fixed FILE to measure a version of your own")


@contextlib.contextmanager
def _after_script(script: Path, fixed: str | None, unsafe: bool, target_torch: tuple[int, int] | None,
                  applied: list[AppliedFix] | None = None) -> Iterator[Path | None]:
    """The fixed script's path: `--fixed`, or perflint's fix in a temporary file (None if no fix applies)."""
    if fixed:
        yield Path(fixed)
        return
    text = perflint_fix(script, unsafe, target_torch, applied)
    if text == script.read_text(encoding="utf-8"):
        yield None
        return
    with temporary_sibling(script, text) as path:
        yield path
