"""`perflint verify`: the comparison logic with canned runs, and one real run end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from perflint.cli import main as cli  # noqa: E402
from perflint_runtime import verify  # noqa: E402
from perflint_runtime.harness import CRASHED, OK, RunResult  # noqa: E402
from perflint_runtime.phases import PHASES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMAGE_CLASSIFIER = ROOT / "fixtures" / "workloads" / "image_classifier.py"

NEEDS_A_FIX = """
import torch
from torch.utils.data import DataLoader

device = "cuda" if torch.cuda.is_available() else "cpu"
loader = DataLoader(torch.arange(8.0), batch_size=2, num_workers=2)
for epoch in range(2):
    for batch in loader:
        batch = batch.to(device)
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
"""


def run(times, losses, status=OK, device="cpu", device_name="Test CPU", phases=None, syncs=None) -> RunResult:
    """A canned run; `phases` maps a phase to its share of every step (the rest is "other")."""
    phase_times = {}
    if phases is not None:
        shares = {p: phases.get(p, 0.0) for p in PHASES}
        shares["other"] = 1.0 - sum(v for p, v in shares.items() if p != "other")
        phase_times = {p: [t * share for t in times] for p, share in shares.items()}
    return RunResult(status=status, argv=["python", "x.py"], wall_s=1.0, message="it broke" if status != OK else "",
                     steps_done=len(losses), step_times_s=list(times), losses=list(losses), batch_size=16,
                     peak_memory_bytes=2**20, device=device, device_name=device_name, torch_version="2.13.0",
                     torch_threads=2, stderr_tail=["Traceback", "ValueError: bad"] if status != OK else [],
                     phase_times_s=phase_times, host_syncs=None if syncs is None else [syncs] * len(times))


def fake_runner(monkeypatch, by_script):
    """Replace the harness: `by_script(path)` gives the RunResult for each script run."""
    calls = []

    def fake_run_script(path, args, **kwargs):
        calls.append((Path(path).name, list(args), kwargs))
        return by_script(path)

    monkeypatch.setattr(verify, "run_script", fake_run_script)
    return calls


@pytest.fixture
def project(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(NEEDS_A_FIX)
    # PF105 (the copy's `non_blocking=True`), PF102 (`pin_memory`) and PF403 (autocast) are off
    # by default: this project opts in.
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF105", "PF102", "PF403"]\n')
    return script


def invoke(*args):
    return CliRunner().invoke(cli, ["verify", *map(str, args)])


def invoke_unsafe(script, *args):
    return invoke(script, "--unsafe-fixes", *args)


def test_faster_fixed_script_exits_0_and_writes_json(monkeypatch, project, tmp_path):
    calls = fake_runner(monkeypatch, lambda p: run([0.1] * 10, [2.0, 1.5]) if Path(p) == project
                        else run([0.05] * 10, [2.0, 1.5]))
    out = tmp_path / "result.json"
    result = invoke_unsafe(project, "--steps", "10", "--warmup", "2", "--repeats", "2", "--json", out,
                           "--", "--lr", "1")
    assert result.exit_code == 0, result.output
    # A B A B A B: precision is met after two pairs, but a verdict needs three runs of each
    assert [name == "train.py" for name, _, _ in calls] == [True, False] * 3
    assert all(args == ["--lr", "1"] and kw["steps"] == 10 and kw["warmup"] == 2 for _, args, kw in calls)
    assert "speedup 2.000×" in result.output and "verdict: faster" in result.output
    assert "not a GPU figure" in result.output
    data = json.loads(out.read_text())
    assert data["command"].startswith("perflint verify ") and data["command"].endswith("-- --lr 1")
    assert data["gpu_figure"] is False and data["cpu_model"] and data["torch_version"] == "2.13.0"
    assert [r["variant"] for r in data["runs"]] == ["original", "fixed"] * 3
    assert data["comparison"]["speedup"] == pytest.approx(2.0)
    assert data["summary"]["fixed"]["samples_per_s"] == pytest.approx(16 / 0.05)
    assert not list(project.parent.glob(".train.*perflint-fixed.py"))  # the temporary fix is gone


def test_slower_fixed_script_exits_1(monkeypatch, project):
    fake_runner(monkeypatch, lambda p: run([0.05, 0.051, 0.049] * 4, [1.0]) if Path(p) == project
                else run([0.1, 0.101, 0.099] * 4, [1.0]))
    result = invoke_unsafe(project, "--repeats", "2")
    assert result.exit_code == 1
    assert "slower beyond noise" in result.output


def test_diverging_losses_exit_1(monkeypatch, project):
    fake_runner(monkeypatch, lambda p: run([0.1] * 5, [2.0, 1.0]) if Path(p) == project else run([0.1] * 5, [2.0, 1.5]))
    result = invoke_unsafe(project, "--repeats", "1", "--loss-tolerance", "0.1")
    assert result.exit_code == 1
    assert "losses diverge" in result.output


def test_crash_exits_2_with_stderr(monkeypatch, project, tmp_path):
    fake_runner(monkeypatch, lambda p: run([0.1] * 5, [1.0]) if Path(p) == project else run([], [], status=CRASHED))
    out = tmp_path / "r.json"
    result = invoke_unsafe(project, "--repeats", "3", "--json", out)
    assert result.exit_code == 2
    assert "it broke" in result.output and "ValueError: bad" in result.output
    data = json.loads(out.read_text())
    assert data["error"] and len(data["runs"]) == 2  # stopped at the first failure
    assert data["comparison"] is None


def test_nothing_to_fix_exits_2_without_running(monkeypatch, tmp_path):
    calls = fake_runner(monkeypatch, lambda p: pytest.fail("nothing should run"))
    clean = tmp_path / "clean.py"
    clean.write_text("print('no torch here')\n")
    result = invoke(clean)
    assert result.exit_code == 2 and not calls
    assert "nothing to compare: perflint has no fix for" in result.output
    assert "--fixed FILE" in result.output and "unsafe" not in result.output


ONLY_UNSAFE_FIXES = """
import torch

model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(10):
    loss = model(torch.randn(8, 4, device="cuda")).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_only_unsafe_fixes_says_how_to_include_them(monkeypatch, tmp_path):
    calls = fake_runner(monkeypatch, lambda p: pytest.fail("nothing should run"))
    script = tmp_path / "train.py"
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF403"]\n')  # off by default
    script.write_text(ONLY_UNSAFE_FIXES)
    out = tmp_path / "r.json"
    result = invoke(script, "--json", out)
    assert result.exit_code == 2 and not calls
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "1 unsafe fix exists (PF403)" in lines[0]  # PF302 (fused) and PF405 (TF32) are off by default
    assert "add --unsafe-fixes to include them" in lines[0]
    assert json.loads(out.read_text())["error"].startswith("nothing to compare")


def test_only_unsafe_fixes_are_measured_with_unsafe_fixes(monkeypatch, tmp_path):
    calls = fake_runner(monkeypatch, lambda p: run([0.1] * 5, [1.0]))
    script = tmp_path / "train.py"
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF403"]\n')  # off by default
    script.write_text(ONLY_UNSAFE_FIXES)
    result = invoke_unsafe(script, "--repeats", "1", "--max-time", "0")
    assert result.exit_code == 0, result.output
    assert len(calls) == 2
    assert "verdict: inconclusive: 1 run of each script" in " ".join(result.output.split())


def test_without_torch_exits_2_with_one_line(monkeypatch, project):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, as where it is not installed
    result = invoke(project)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("error: `perflint verify`")
    from perflint import install_hint

    assert "cannot import" in result.output and f"`{install_hint('runtime')}`" in result.output


def test_explicit_fixed_script_is_used_as_given(monkeypatch, project, tmp_path):
    other = tmp_path / "mine.py"
    other.write_text("print('hand-optimised')\n")
    calls = fake_runner(monkeypatch, lambda p: run([0.1] * 5, [1.0]))
    result = invoke(project, "--fixed", other, "--repeats", "1", "--max-time", "0")
    assert result.exit_code == 0, result.output
    assert [name for name, _, _ in calls] == ["train.py", "mine.py"]
    text = " ".join(result.output.split())
    # what the given script no longer has, by rule
    assert "fixes in the measured script (findings of the original that the given script no longer has):" in text
    assert "PF105" in text.split("no longer has):")[1]


def test_warmup_zero_is_refused(project):
    result = invoke(project, "--warmup", "0")
    assert result.exit_code == 2


def test_fix_follows_the_project_configuration(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(NEEDS_A_FIX)
    assert "pin_memory" not in verify.perflint_fix(script, unsafe=True, target_torch=None)  # off by default
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF102"]\n')
    assert "pin_memory=True" in verify.perflint_fix(script, unsafe=True, target_torch=None)
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF105"]\nignore = ["PF102"]\n')
    fixed = verify.perflint_fix(script, unsafe=True, target_torch=None)
    assert "pin_memory" not in fixed and "non_blocking=True" in fixed


def test_temporary_sibling_is_removed_even_on_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    with pytest.raises(RuntimeError):
        with verify.temporary_sibling(script, "x = 2\n") as path:
            assert path.parent == tmp_path and path.read_text() == "x = 2\n"
            raise RuntimeError
    assert list(tmp_path.iterdir()) == [script]


def test_end_to_end_on_the_image_classifier(tmp_path):
    """The real thing: both scripts run under the harness on the CPU (speed itself is not asserted)."""
    out = tmp_path / "verify.json"
    result = invoke(IMAGE_CLASSIFIER, "--unsafe-fixes", "--steps", "20", "--warmup", "2", "--repeats", "1",
                    "--max-time", "0", "--timeout", "300", "--json", out, "--", "--device", "cpu")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert "not a GPU figure" in result.output
    assert data["device"] == "cpu" and data["gpu_figure"] is False
    original, fixed = data["runs"]
    assert (original["variant"], fixed["variant"]) == ("original", "fixed")
    assert len(original["step_times_s"]) == len(fixed["step_times_s"]) == 20
    assert original["batch_size"] == fixed["batch_size"] == 32
    losses = original["losses"]
    # two warm-up steps asked; more where the loader's prefetch queue had to drain first
    assert original["warmup_requested"] == 2 and original["warmup"] >= 2
    assert len(losses) == original["warmup"] + 20
    assert sum(losses[-5:]) < sum(losses[:5])  # it learns
    assert data["comparison"]["max_loss_divergence"] <= 0.05
    assert not list(IMAGE_CLASSIFIER.parent.glob(".image_classifier.*"))
    # where the step goes: every step split, the phases adding up to the step
    for r in (original, fixed):
        phases = r["phase_times_s"]
        assert all(len(phases[p]) == 20 for p in PHASES)
        for k, step in enumerate(r["step_times_s"]):
            assert sum(phases[p][k] for p in PHASES) == pytest.approx(step, rel=1e-9)
        assert sum(phases["compute"]) > 0 and sum(phases["optimizer"]) > 0 and sum(phases["data"]) > 0
        assert sum(phases["h2d"]) == 0 and sum(phases["device"]) == 0  # the CPU: no copies, no GPU
        assert r["host_syncs"] is None
    assert "where the step goes:" in result.output and "original: " in result.output
    # One run each, stopped by the time budget (0 s): no verdict from one run.
    assert data["sampling"]["stopped_by"] == "time budget"
    assert data["sampling"]["runs_per_script"] == 1
    assert data["comparison"]["conclusive"] is False and data["comparison"]["verdict"].startswith("inconclusive")
    # the fixes that went into the measured script, by rule and line
    assert data["fixes"]["how"] == "perflint fix --unsafe-fixes"
    assert {f["code"] for f in data["fixes"]["items"]} >= {"PF102", "PF105"}
    assert all(f["row"] > 0 for f in data["fixes"]["items"])


def test_verify_command_is_reproducible():
    settings = verify.MeasureSettings(steps=30, warmup=5, repeats=3, timeout=600.0, loss_tolerance=0.05,
                                      max_time=120, precision=0.1)
    cmd = verify.verify_command("train.py", None, True, settings, "out.json", ["--device", "cuda"], (2, 4))
    assert cmd == ("perflint verify train.py --unsafe-fixes --steps 30 --warmup 5 --repeats 3 --max-time 120 "
                   "--precision 0.1 --timeout 600 --loss-tolerance 0.05 --target-torch 2.4 --json out.json "
                   "-- --device cuda")


def test_gpu_runs_are_named_as_such():
    line = verify.device_line([run([0.1], [1.0], device="cuda", device_name="NVIDIA H100 80GB HBM3")])
    assert line == "Measured on NVIDIA H100 80GB HBM3 (torch 2.13.0)."


# -- where the step goes -------------------------------------------------------------------

LOADER_BOUND = """
import torch
from torch.utils.data import DataLoader, Dataset


class Noise(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.randn(4), torch.randn(1)


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Noise(), batch_size=8)
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_split_is_printed_side_by_side_with_the_rules_for_the_largest_share(monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOADER_BOUND)
    fake_runner(monkeypatch, lambda p: run([0.1] * 5, [1.0], phases={"data": 0.86, "compute": 0.1})
                if Path(p) == script else run([0.05] * 5, [1.0], phases={"data": 0.7, "compute": 0.1}))
    out = tmp_path / "r.json"
    result = invoke_unsafe(script, "--repeats", "1", "--json", out)
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in result.output.splitlines() if line.count("│") == 4}
    assert rows["waiting for data"] == ["86.00 ms  86%", "35.00 ms  70%"]
    assert rows["forward + backward"] == ["10.00 ms  10%", "5.00 ms  10%"]
    assert rows["other host time"] == ["4.00 ms   4%", "10.00 ms  20%"]
    assert "host-to-device copies" in rows and "optimizer step" in rows
    assert "GPU wait at step end" not in rows and "host syncs per step" not in rows  # a CPU run
    text = " ".join(result.output.split())
    # PF101 is reported on the original (no fix); on the CPU the CUDA-only rules are not named
    # PF103 is off by default: its silence says nothing, and the line says how to run it
    assert ("original: 86% of the step waits for data: PF101 num_workers (reported here: unsafe fix); also "
            "PF103 persistent_workers (not selected: `--extend-select PF103`), PF106 worker start method, "
            "PF501 FFT convolution") in text
    assert "fixed: 70% of the step waits for data; perflint reports none of its rules here (PF101 num_workers" in text
    summary = json.loads(out.read_text())["summary"]
    assert summary["original"]["phases_s"]["data"] == pytest.approx(0.086)
    assert sum(summary["fixed"]["phases_s"].values()) == pytest.approx(summary["fixed"]["mean_step_s"])


def test_cuda_runs_show_the_gpu_wait_and_host_syncs(monkeypatch, project):
    def cuda_run(path):
        fast = Path(path) != project
        return run([0.05 if fast else 0.1] * 5, [1.0], device="cuda", device_name="NVIDIA H100",
                   phases={"device": 0.2 if fast else 0.7, "h2d": 0.1}, syncs=1 if fast else 3)

    fake_runner(monkeypatch, cuda_run)
    result = invoke_unsafe(project, "--repeats", "1")
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in result.output.splitlines() if line.count("│") == 4}
    assert rows["GPU wait at step end"] == ["70.00 ms  70%", "10.00 ms  20%"]
    assert rows["host syncs per step"] == ["3.0", "1.0"]
    text = " ".join(result.output.split())
    # the script's model step has no autocast: PF403 is reported there, and named first
    assert ("original: 70% of the step waits for the GPU at the step's end: PF403 bf16 autocast (reported here: "
            "unsafe fix)") in text
    assert "PF405 TF32" in text and "PF302 fused optimizer" in text
    assert "3.0 host syncs per step; perflint reports none of its rules here (PF201 .item() every step" in text
    assert "1.0 host syncs per step;" in text


def test_a_rule_the_configuration_does_not_run_is_named_as_such(monkeypatch, project):
    """PF403 is off by default: on a step that waits for the GPU, its silence is not a verdict
    on the script, and the line says how to turn it on."""
    (project.parent / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF105", "PF102"]\n')

    def cuda_run(path):
        fast = Path(path) != project
        return run([0.05 if fast else 0.1] * 5, [1.0], device="cuda", device_name="NVIDIA H100",
                   phases={"device": 0.2 if fast else 0.7, "h2d": 0.1}, syncs=0)

    fake_runner(monkeypatch, cuda_run)
    result = invoke_unsafe(project, "--repeats", "1")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert ("original: 70% of the step waits for the GPU at the step's end; perflint reports none of its rules "
            "here (PF403 bf16 autocast (not selected: `--extend-select PF403`), PF405 TF32 (not selected: "
            "`--extend-select PF405`)") in text


def test_runs_without_a_split_print_no_split(monkeypatch, project):
    fake_runner(monkeypatch, lambda p: run([0.1] * 5, [1.0]))
    result = invoke_unsafe(project, "--repeats", "1")
    assert result.exit_code == 0, result.output
    assert "where the step goes" not in result.output and "waiting for data" not in result.output


def test_reported_rules_come_first_with_their_fix_kind():
    summary = verify.summarise([run([0.1] * 4, [1.0], phases={"data": 0.1})])  # "other" is 90%
    findings = verify.Findings(fixes={"PF301": {"unsafe"}, "PF201": {"none"}})
    assert verify.rules_line(summary, findings, cuda=False) == (
        "90% of the step is other host time: PF301 zero_grad(set_to_none=True) (reported here: unsafe fix); "
        "also PF204 loss kept with its graph")
    assert verify.rules_line(summary, findings, cuda=True).startswith(
        "90% of the step is other host time: PF201 .item() every step (reported here: no automatic fix), "
        "PF301 zero_grad(set_to_none=True) (reported here: unsafe fix); also PF202 host syncs every step")
    assert verify.rules_line(summary, verify.Findings(), cuda=False) == (
        "90% of the step is other host time; perflint reports none of its rules here (PF204 loss kept with its "
        "graph, PF301 zero_grad(set_to_none=True))")


def test_syncs_line_names_the_sync_rules():
    summary = verify.summarise([run([0.1] * 4, [1.0], device="cuda", phases={}, syncs=2)])
    findings = verify.Findings(fixes={"PF201": {"none"}})
    assert verify.syncs_line(summary, findings) == (
        "2.0 host syncs per step: PF201 .item() every step (reported here: no automatic fix); also PF202 host syncs "
        "every step, PF203 empty_cache() every step")
    assert verify.syncs_line(verify.summarise([run([0.1] * 4, [1.0], device="cuda", syncs=0)]), findings) is None


def test_no_rule_for_the_largest_share_on_this_device():
    summary = verify.summarise([run([0.1] * 4, [1.0], phases={"h2d": 0.9})])
    assert verify.rules_line(summary, verify.Findings(), cuda=False) == (
        "90% of the step is host-to-device copies: perflint has no rule for it on this device")
    assert verify.rules_line(summary, verify.Findings(fixes={"PF105": {"safe", "unsafe"}}), cuda=True) == (
        "90% of the step is host-to-device copies: PF105 non_blocking copies (reported here: safe fix, unsafe fix); "
        "also PF102 pin_memory, PF409 tensors created on the device")


# -- sampling until the speedup is known -------------------------------------------------------


class FakeClock:
    """Each run takes `per_run` seconds of this clock."""

    def __init__(self, per_run: float):
        self.now = 0.0
        self.per_run = per_run

    def __call__(self) -> float:
        return self.now


def scripted_runs(monkeypatch, clock: FakeClock, original, fixed):
    """Run k of each script gets the step times `original(k)` / `fixed(k)`."""
    counts = {"a.py": 0, "b.py": 0}

    def fake_run_script(path, args, **kwargs):
        counts[path] += 1
        clock.now += clock.per_run
        times = (original if path == "a.py" else fixed)(counts[path])
        return run(times, [1.0] * len(times))

    monkeypatch.setattr(verify, "run_script", fake_run_script)
    return counts


def settings(**kw):
    base = dict(steps=4, warmup=1, repeats=2, timeout=60.0, loss_tolerance=0.05, max_time=100.0, precision=0.05)
    return verify.MeasureSettings(**{**base, **kw})


def test_sampling_stops_when_the_interval_is_tight(monkeypatch):
    clock = FakeClock(per_run=1.0)
    steady = [0.100, 0.101, 0.099, 0.100]
    counts = scripted_runs(monkeypatch, clock, lambda k: steady, lambda k: [t / 2 for t in steady])
    runs, sampling = verify.measure_until_known({"original": "a.py", "fixed": "b.py"}, [], settings(), clock=clock)
    assert sampling.stopped_by == verify.PRECISION
    # tight after --repeats 2, but a verdict needs three runs of each script
    assert counts == {"a.py": 3, "b.py": 3}
    assert sampling.runs_per_script == 3 and sampling.measured_steps == {"original": 12, "fixed": 12}
    assert sampling.half_width <= 0.05 and sampling.elapsed_s == 6.0


def test_sampling_adds_runs_until_the_interval_is_tight(monkeypatch):
    """Run-to-run drift makes the first runs disagree; more runs narrow the interval."""
    clock = FakeClock(per_run=1.0)
    drift = lambda k: [0.1 * (1.5 if k == 1 else 1.0)] * 4  # noqa: E731 - the first run is slow
    counts = scripted_runs(monkeypatch, clock, drift, lambda k: [0.05] * 4)
    _, sampling = verify.measure_until_known({"original": "a.py", "fixed": "b.py"}, [],
                                             settings(precision=0.1, max_time=1000.0), clock=clock)
    assert sampling.stopped_by == verify.PRECISION
    assert counts["a.py"] > 2 and counts["a.py"] == counts["b.py"]
    assert sampling.half_width <= 0.1


def test_sampling_stops_at_the_time_budget(monkeypatch):
    clock = FakeClock(per_run=10.0)
    noisy = lambda k: [0.1 * (1 + (k % 3))] * 4  # noqa: E731 - runs that never agree
    counts = scripted_runs(monkeypatch, clock, noisy, lambda k: [0.05] * 4)
    runs, sampling = verify.measure_until_known({"original": "a.py", "fixed": "b.py"}, [],
                                                settings(max_time=75.0), clock=clock)
    assert sampling.stopped_by == verify.TIME_BUDGET
    # pairs take 20 s: after 3 pairs (60 s) a fourth would end at 80 s > 75 s
    assert counts == {"a.py": 3, "b.py": 3} and sampling.elapsed_s == 60.0
    assert sampling.half_width > 0.05
    line = verify.sampling_line(sampling)
    assert line.startswith("sampling: stopped by the time budget (--max-time 75 s) after 3 runs of each script "
                           "(12 + 12 measured steps, 60 s)")


def test_zero_time_budget_runs_just_the_minimum(monkeypatch):
    clock = FakeClock(per_run=1.0)
    noisy = lambda k: [0.1 * (1 + (k % 3))] * 4  # noqa: E731
    counts = scripted_runs(monkeypatch, clock, noisy, lambda k: [0.05] * 4)
    _, sampling = verify.measure_until_known({"original": "a.py", "fixed": "b.py"}, [],
                                             settings(repeats=3, max_time=0.0), clock=clock)
    assert counts == {"a.py": 3, "b.py": 3} and sampling.stopped_by == verify.TIME_BUDGET


def test_sampling_is_reported_and_written(monkeypatch, project, tmp_path):
    fake_runner(monkeypatch, lambda p: run([0.1] * 10, [2.0]) if Path(p) == project else run([0.05] * 10, [2.0]))
    out = tmp_path / "r.json"
    result = invoke_unsafe(project, "--steps", "10", "--json", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "sampling: stopped when the 95% interval came within ±5% of the speedup (±0.0%), after 3 runs of each " \
           "script (30 + 30 measured steps" in text
    data = json.loads(out.read_text())
    assert data["sampling"]["stopped_by"] == "precision" and data["sampling"]["measured_steps"] == {
        "original": 30, "fixed": 30}
    assert data["settings"]["max_time"] == 300.0 and data["settings"]["precision"] == 0.05


def test_measure_alternating_runs_exactly_the_repeats(monkeypatch):
    order = []

    def fake_run_script(path, args, **kwargs):
        order.append(path)
        return run([0.1] * 3, [1.0] * 3)

    monkeypatch.setattr(verify, "run_script", fake_run_script)
    runs = verify.measure_alternating({"original": "a.py", "fixed": "b.py", "trainer": "c.py"}, [],
                                      settings(repeats=3, max_time=1e9))
    assert order == ["a.py", "b.py", "c.py"] * 3 and [len(v) for v in runs.values()] == [3, 3, 3]


# ---------------------------------------------------------------------------------------
# Claims: no verdict from fewer than three runs, the fixes named, the warm-up, the cause
# ---------------------------------------------------------------------------------------


def test_one_run_of_each_is_inconclusive_however_tight_its_steps(monkeypatch, project, tmp_path):
    # one run of five tight steps each: the step-level interval excludes 1, but says nothing
    # of run-to-run noise
    fake_runner(monkeypatch, lambda p: run([0.12, 0.121, 0.119, 0.12, 0.12], [1.0]) if Path(p) == project
                else run([0.1, 0.101, 0.099, 0.1, 0.1], [1.0]))
    out = tmp_path / "r.json"
    result = invoke_unsafe(project, "--steps", "5", "--repeats", "1", "--max-time", "0", "--json", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "verdict: inconclusive" in text and "verdict: faster" not in text
    comparison = json.loads(out.read_text())["comparison"]
    assert comparison["conclusive"] is False and comparison["speedup_ci95"][0] > 1.0


def test_compare_needs_three_runs_of_each_for_a_verdict():
    fast, slow = run([0.05] * 5, [1.0]), run([0.1] * 5, [1.0])
    assert verify.compare([slow, slow], [fast, fast], 0.05).conclusive is False
    assert verify.compare([slow] * 3, [fast] * 3, 0.05).verdict == "faster"
    worse = verify.compare([fast] * 2, [slow] * 2, 0.05)
    assert worse.verdict.startswith("inconclusive") and worse.exit_code == 0
    diverged = verify.compare([run([0.1] * 5, [1.0])], [run([0.1] * 5, [2.0])], 0.05)
    assert diverged.verdict.startswith("inconclusive") and "losses diverge" in diverged.verdict
    assert diverged.exit_code == 1


def test_the_fixes_in_the_measured_script_are_named(monkeypatch, project, tmp_path):
    fake_runner(monkeypatch, lambda p: run([0.1] * 10, [2.0]) if Path(p) == project else run([0.05] * 10, [2.0]))
    out = tmp_path / "r.json"
    result = invoke_unsafe(project, "--steps", "10", "--json", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "fixes in the measured script (perflint fix --unsafe-fixes):" in text
    items = json.loads(out.read_text())["fixes"]["items"]
    # NEEDS_A_FIX: the loader on line 6 (pin_memory, persistent_workers), the copy on line 9
    assert ("PF102", 6) in {(f["code"], f["row"]) for f in items}
    assert ("PF105", 9) in {(f["code"], f["row"]) for f in items}
    assert f"PF102 line 6:" in text


def test_a_lengthened_warmup_is_reported(monkeypatch, project, tmp_path):
    def by_script(p):
        r = run([0.1] * 10, [2.0]) if Path(p) == project else run([0.05] * 10, [2.0])
        r.warmup_requested, r.warmup, r.prefetch_depth = 2, 2, 0
        if Path(p) != project:
            r.warmup, r.prefetch_depth = 9, 8
        return r

    fake_runner(monkeypatch, by_script)
    out = tmp_path / "r.json"
    result = invoke_unsafe(project, "--steps", "10", "--warmup", "2", "--json", out)
    text = " ".join(result.output.split())
    assert ("warm-up: extended from 2 to up to 9 steps on 3 of 6 runs, so that no measured step is served from "
            "the loaders' prefetch queue (workers × prefetch_factor = 8 batches made in advance)") in text
    assert json.loads(out.read_text())["warmup_note"].startswith("warm-up: extended from 2")


def test_a_slower_fix_gets_the_likely_cause_from_the_split(monkeypatch, project):
    # the fix moved loading to workers: data wait fell, forward + backward grew more
    fake_runner(monkeypatch, lambda p: run([0.10] * 12, [1.0], phases={"data": 0.5, "compute": 0.3})
                if Path(p) == project else run([0.12] * 12, [1.0], phases={"data": 0.05, "compute": 0.8}))
    result = invoke_unsafe(project, "--steps", "12")
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "likely cause: forward + backward grew by 66.00 ms a step while waiting for data fell by 44.00 ms" in text
    assert "worker processes compete with the training process" in text


def gpu_run(times, phases, syncs) -> RunResult:
    r = run(times, [1.0], device="cuda", phases=phases, syncs=syncs)
    r.memory_kind = "cuda"
    return r


def test_on_a_gpu_more_host_syncs_in_the_fix_are_the_likely_cause():
    # H200, anti-spoofing on the trainer against perflint's fix: the fix's per-step `.item()`
    # waits for the GPU inside forward + backward; the workers are not what grew it
    base = verify.summarise([gpu_run([0.10] * 4, {"data": 0.8, "compute": 0.1}, 0.2)])
    cand = verify.summarise([gpu_run([0.11] * 4, {"data": 0.7, "compute": 0.2}, 1.0)])
    cause = verify.likely_cause(base, cand, cpu_count=16)
    assert cause.startswith("forward + backward grew by")
    assert "waits for the GPU more often (1.0 host syncs a step against 0.2)" in cause
    assert "worker processes" not in cause


def test_on_a_gpu_worker_competition_names_no_gpu_as_the_remedy():
    base = verify.summarise([gpu_run([0.10] * 4, {"data": 0.8, "compute": 0.1}, 1.0)])
    cand = verify.summarise([gpu_run([0.11] * 4, {"data": 0.7, "compute": 0.2}, 1.0)])
    cause = verify.likely_cause(base, cand, cpu_count=16)
    assert "compete with the training process for this machine's 16 CPU cores, which also launch its GPU work" in cause
    assert "or a GPU" not in cause


def test_no_likely_cause_when_not_slower():
    base = verify.summarise([run([0.1] * 4, [1.0], phases={"data": 0.5})])
    cand = verify.summarise([run([0.05] * 4, [1.0], phases={"data": 0.1})])
    assert verify.likely_cause(base, cand) is None
