"""`perflint verify`: the comparison logic with canned runs, and one real run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from perflint.cli import main as cli  # noqa: E402
from perflint_runtime import verify  # noqa: E402
from perflint_runtime.harness import CRASHED, OK, RunResult  # noqa: E402

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
"""


def run(times, losses, status=OK, device="cpu", device_name="Test CPU") -> RunResult:
    return RunResult(status=status, argv=["python", "x.py"], wall_s=1.0, message="it broke" if status != OK else "",
                     steps_done=len(losses), step_times_s=list(times), losses=list(losses), batch_size=16,
                     peak_memory_bytes=2**20, device=device, device_name=device_name, torch_version="2.13.0",
                     torch_threads=2, stderr_tail=["Traceback", "ValueError: bad"] if status != OK else [])


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
    assert [name == "train.py" for name, _, _ in calls] == [True, False, True, False]  # A B A B
    assert all(args == ["--lr", "1"] and kw["steps"] == 10 and kw["warmup"] == 2 for _, args, kw in calls)
    assert "speedup 2.000×" in result.output and "verdict: faster" in result.output
    assert "not a GPU figure" in result.output
    data = json.loads(out.read_text())
    assert data["command"].startswith("perflint verify ") and data["command"].endswith("-- --lr 1")
    assert data["gpu_figure"] is False and data["cpu_model"] and data["torch_version"] == "2.13.0"
    assert [r["variant"] for r in data["runs"]] == ["original", "fixed", "original", "fixed"]
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


def test_nothing_to_fix_exits_0_without_running(monkeypatch, tmp_path):
    calls = fake_runner(monkeypatch, lambda p: pytest.fail("nothing should run"))
    clean = tmp_path / "clean.py"
    clean.write_text("print('no torch here')\n")
    result = invoke(clean)
    assert result.exit_code == 0
    assert "nothing to compare" in result.output and not calls


def test_explicit_fixed_script_is_used_as_given(monkeypatch, project, tmp_path):
    other = tmp_path / "mine.py"
    other.write_text("print('hand-optimised')\n")
    calls = fake_runner(monkeypatch, lambda p: run([0.1] * 5, [1.0]))
    result = invoke(project, "--fixed", other, "--repeats", "1")
    assert result.exit_code == 0, result.output
    assert [name for name, _, _ in calls] == ["train.py", "mine.py"]


def test_warmup_zero_is_refused(project):
    result = invoke(project, "--warmup", "0")
    assert result.exit_code == 2


def test_fix_follows_the_project_configuration(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(NEEDS_A_FIX)
    assert "pin_memory=True" in verify.perflint_fix(script, unsafe=True, target_torch=None)
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nignore = ["PF102"]\n')
    fixed = verify.perflint_fix(script, unsafe=True, target_torch=None)
    assert "pin_memory" not in fixed and "persistent_workers" in fixed


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
                    "--timeout", "300", "--json", out, "--", "--device", "cpu")
    assert result.exit_code in (0, 1), result.output
    data = json.loads(out.read_text())
    assert result.exit_code == 0 or data["comparison"]["verdict"] == "slower beyond noise", result.output
    assert "not a GPU figure" in result.output
    assert data["device"] == "cpu" and data["gpu_figure"] is False
    original, fixed = data["runs"]
    assert (original["variant"], fixed["variant"]) == ("original", "fixed")
    assert len(original["step_times_s"]) == len(fixed["step_times_s"]) == 20
    assert original["batch_size"] == fixed["batch_size"] == 32
    losses = original["losses"]
    assert len(losses) == 22
    assert sum(losses[-5:]) < sum(losses[:5])  # it learns
    assert data["comparison"]["max_loss_divergence"] <= 0.05
    assert not list(IMAGE_CLASSIFIER.parent.glob(".image_classifier.*"))


def test_verify_command_is_reproducible():
    settings = verify.MeasureSettings(steps=30, warmup=5, repeats=3, timeout=600.0, loss_tolerance=0.05)
    cmd = verify.verify_command("train.py", None, True, settings, "out.json", ["--device", "cuda"], (2, 4))
    assert cmd == ("perflint verify train.py --unsafe-fixes --steps 30 --warmup 5 --repeats 3 --timeout 600 "
                   "--loss-tolerance 0.05 --target-torch 2.4 --json out.json -- --device cuda")


def test_gpu_runs_are_named_as_such():
    line = verify.device_line([run([0.1], [1.0], device="cuda", device_name="NVIDIA H100 80GB HBM3")])
    assert line == "Measured on NVIDIA H100 80GB HBM3 (torch 2.13.0)."
