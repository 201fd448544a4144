"""Measure the five workloads: original vs perflint-fixed vs rewritten on the trainer.

    python benchmarks/verify_workloads.py --out benchmarks/results/<name> [--steps 30] [--warmup 5]
        [--repeats 3] [--workloads image_classifier,mel_cnn_trainer] [-- --device cuda --batch-size 256]

For each workload in fixtures/workloads/, three scripts run under the step-timing harness,
interleaved (original, fixed, trainer, original, …):

    original   fixtures/workloads/<name>.py, unchanged
    fixed      perflint's fix of it (`perflint fix --unsafe-fixes`, the workloads' own
               configuration), in a temporary file beside it
    trainer    fixtures/workloads/on_trainer/<name>.py

Arguments after `--` go to every script.  One table is printed; `<out>/<name>.json` holds
every run of a workload and `<out>/summary.json` the table, each with the device, the
torch version, the CPU model and the exact command.  Exit status 2 if a run failed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from perflint_runtime.verify import (
    MeasureSettings,
    VerifyError,
    compare,
    device_line,
    environment,
    format_ms,
    measure_alternating,
    perflint_fix,
    summarise,
    temporary_sibling,
)

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS_DIR = ROOT / "fixtures" / "workloads"
WORKLOADS = ("speaker_verification", "antispoofing_seresnet", "icl_finetune", "mel_cnn_trainer", "image_classifier")
ORIGINAL, FIXED, TRAINER = "original", "fixed", "trainer"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ours, script_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON results")
    parser.add_argument("--steps", type=int, default=30, help="measured optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="optimizer steps discarded first (at least 1)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each script")
    parser.add_argument("--trainer-steps", type=int, default=None,
                        help="measured steps of the on-trainer scripts (default: --steps); their loaders "
                             "have up to 8 workers, so use several times that many")
    parser.add_argument("--trainer-warmup", type=int, default=None,
                        help="warm-up steps of the on-trainer scripts (default: --warmup)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    parser.add_argument("--loss-tolerance", type=float, default=0.05)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    opts = parser.parse_args(ours)
    if opts.warmup < 1:
        parser.error("--warmup must be at least 1")
    unknown = set(opts.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    return opts, script_args


def run_workload(name: str, script_args: list[str], settings: MeasureSettings, console: Console) -> dict:
    """Measure one workload's three scripts; return its JSON record."""
    original = WORKLOADS_DIR / f"{name}.py"
    trainer = WORKLOADS_DIR / "on_trainer" / f"{name}.py"
    with temporary_sibling(original, perflint_fix(original, unsafe=True, target_torch=None)) as fixed:
        scripts = {ORIGINAL: str(original), FIXED: str(fixed), TRAINER: str(trainer)}
        runs = measure_alternating(scripts, script_args, settings,
                                   lambda variant, i, r: console.print(f"  {name} {variant} run {i}: {r.status}"))
    record = {"workload": name, "runs": {k: [vars(r) for r in v] for k, v in runs.items()}}
    failed = [r for rs in runs.values() for r in rs if not r.ok]
    if failed:
        record["error"] = failed[0].describe_failure()
        return record
    record["summary"] = {k: vars(summarise(v)) for k, v in runs.items()}
    record["comparisons"] = {
        FIXED: vars(compare(runs[ORIGINAL], runs[FIXED], settings.loss_tolerance)),
        TRAINER: vars(compare(runs[ORIGINAL], runs[TRAINER], settings.loss_tolerance)),
    }
    record["device_line"] = device_line(runs[ORIGINAL])
    record["environment"] = environment(runs[ORIGINAL][0])
    return record


def speedup_cell(c: dict) -> str:
    lo, hi = c["speedup_ci95"]
    return f"{c['speedup']:.2f}× [{lo:.2f}, {hi:.2f}]"


def divergence_cell(c: dict) -> str:
    d = c["max_loss_divergence"]
    return "n/a" if d is None else f"{d:.2%}"


def table(records: list[dict]) -> Table:
    t = Table(title="perflint verify: workloads (mean step time; speedup vs original, 95% CI)")
    for col in ("workload", "original", "fixed", "speedup", "loss Δ", "trainer", "speedup", "loss Δ"):
        t.add_column(col, justify="left" if col == "workload" else "right")
    for rec in records:
        if rec.get("error"):
            t.add_row(rec["workload"], "[red]failed[/]", "", "", "", "", "", "")
            continue
        s, c = rec["summary"], rec["comparisons"]
        t.add_row(rec["workload"], format_ms(s[ORIGINAL]["mean_step_s"]),
                  format_ms(s[FIXED]["mean_step_s"]), speedup_cell(c[FIXED]), divergence_cell(c[FIXED]),
                  format_ms(s[TRAINER]["mean_step_s"]), speedup_cell(c[TRAINER]), divergence_cell(c[TRAINER]))
    return t


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    opts, script_args = parse_args(argv)
    command = shlex.join([Path(sys.executable).name, "benchmarks/verify_workloads.py", *argv])
    settings = MeasureSettings(opts.steps, opts.warmup, opts.repeats, opts.timeout, opts.loss_tolerance)
    if opts.trainer_steps is not None or opts.trainer_warmup is not None:
        settings.per_script[TRAINER] = (opts.trainer_steps or opts.steps, opts.trainer_warmup or opts.warmup)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)  # the table is wide
    records = []
    for name in opts.workloads.split(","):
        try:
            record = run_workload(name, script_args, settings, console)
        except VerifyError as exc:
            record = {"workload": name, "error": str(exc)}
        record.update(command=command, settings=vars(settings), script_args=script_args)
        (out / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        records.append(record)
    console.print(table(records))
    for rec in records:
        if rec.get("error"):
            console.print(f"[red]{rec['workload']}[/]: {rec['error']}", soft_wrap=True)
    ok = [r for r in records if not r.get("error")]
    if ok:
        console.print(ok[0]["device_line"])
    summary = {
        "command": command,
        "environment": ok[0]["environment"] if ok else None,
        "settings": vars(settings),
        "script_args": script_args,
        "workloads": [{k: r.get(k) for k in ("workload", "summary", "comparisons", "error")} for r in records],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 2 if len(ok) < len(records) else 0


if __name__ == "__main__":
    sys.exit(main())
