"""The step-timing harness: the recorder's bookkeeping in process, and whole runs of small scripts.

The end-to-end scripts encode what they did in what the harness can see: the loss of
optimizer step k is exactly k, and a script that runs to its end leaves a marker file, so
an early exit is visible by its absence.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from perflint_runtime import bootstrap  # noqa: E402
from perflint_runtime.harness import CRASHED, NO_STEPS, OK, TIMEOUT, TOO_FEW, _classify, run_script  # noqa: E402


def write(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


# A training loop whose k-th optimizer step sees the loss k (through a GradScaler, so the
# backward runs on the scaled loss); the first two steps are slow on purpose.
TRAIN = """
    import sys, time
    from pathlib import Path
    import torch

    steps = int(sys.argv[1])
    marker = Path(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    data = torch.utils.data.TensorDataset(torch.randn(160, 4), torch.randn(160, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    step = 0
    while step < steps:
        for x, y in loader:
            step += 1
            time.sleep(0.3 if step <= 2 else 0.01)
            loss = (model(x) - y).pow(2).mean() * 0 + step
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            if step == steps:
                break
    marker.write_text("ran to the end")
"""


def test_counts_steps_discards_warmup_and_exits_early(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    marker = tmp_path / "finished"
    result = run_script(script, ["1000", str(marker)], steps=4, warmup=2, timeout=120)
    assert result.status == OK, result.describe_failure()
    assert result.steps_done == 6
    assert len(result.step_times_s) == 4
    assert max(result.step_times_s) < 0.3  # the two slow (0.3 s sleep) steps were the warm-up
    assert result.losses == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # unscaled, one per step, in order
    assert result.batch_size == 16
    assert result.device == "cpu" and result.peak_memory_bytes > 0
    assert not marker.exists()  # stopped after warmup + steps, not at the script's end
    assert result.argv[-3:] == [script, "1000", str(marker)]


def test_script_ending_before_enough_steps(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    marker = tmp_path / "finished"
    result = run_script(script, ["3", str(marker)], steps=4, warmup=2, timeout=120)
    assert result.status == TOO_FEW
    assert result.steps_done == 3
    assert marker.exists()
    assert "after 3 optimizer steps" in result.message and "needs 6" in result.message


def test_crash_reports_exit_code_and_stderr(tmp_path):
    script = write(tmp_path, "crash.py", """
        print("starting")
        raise RuntimeError("out of cheese")
    """)
    result = run_script(script, [], steps=2, warmup=1, timeout=120)
    assert result.status == CRASHED
    assert result.exit_code == 1
    assert any("RuntimeError: out of cheese" in line for line in result.stderr_tail)
    assert "out of cheese" in result.describe_failure()


def test_script_without_optimizer_steps(tmp_path):
    script = write(tmp_path, "idle.py", """
        import sys
        print("no training here")
        sys.exit(0)
    """)
    result = run_script(script, [], steps=2, warmup=1, timeout=120)
    assert result.status == NO_STEPS
    assert result.steps_done == 0
    assert "without a single optimizer step" in result.message


def test_timeout_kills_the_run(tmp_path):
    script = write(tmp_path, "slow.py", """
        import time
        time.sleep(120)
    """)
    result = run_script(script, [], steps=2, warmup=1, timeout=5)
    assert result.status == TIMEOUT
    assert result.wall_s < 60
    assert "timed out after 5 s" in result.message


# -- the recorder in process: no hooks are installed, the hook functions are called directly


class FakeOptimizer:
    pass


def recorder(warmup: int, steps: int) -> tuple[bootstrap.StepRecorder, list]:
    completed: list = []
    return bootstrap.StepRecorder(warmup, steps, completed.append), completed


def step(rec: bootstrap.StepRecorder, optimizer, loss: float | None = None) -> None:
    rec.pre_step(optimizer, (), {})
    if loss is not None:
        rec.note_backward(torch.tensor(loss))
    rec.post_step(optimizer, (), {})


def test_first_optimizer_to_step_defines_the_step():
    rec, completed = recorder(warmup=1, steps=2)
    generator, discriminator = FakeOptimizer(), FakeOptimizer()
    for k in range(3):
        step(rec, discriminator, loss=float(k))
        step(rec, generator)
    assert rec.result.steps_done == 3
    assert len(rec.result.step_times_s) == 2
    assert completed == [rec]


def test_losses_of_several_backwards_are_averaged_per_step():
    rec, _ = recorder(warmup=1, steps=5)
    opt = FakeOptimizer()
    rec.note_backward(torch.tensor(1.0))
    rec.note_backward(torch.tensor(3.0))  # gradient accumulation: two micro-batches
    step(rec, opt)
    step(rec, opt)  # a step without a backward
    assert rec.result.losses == [2.0, None]


def test_scaled_loss_is_recorded_unscaled_once():
    rec, _ = recorder(warmup=1, steps=5)
    loss = torch.tensor(0.5)
    scaled = loss * 1024
    rec.note_scaled(loss, scaled)
    rec.note_backward(scaled)
    step(rec, FakeOptimizer())
    assert rec.result.losses == [0.5]


def test_non_scalar_backward_is_not_a_loss():
    rec, _ = recorder(warmup=1, steps=5)
    rec.note_backward(torch.ones(3))
    rec.note_backward([torch.tensor(1.0), torch.tensor(2.0)])
    step(rec, FakeOptimizer())
    assert rec.result.losses == [None]


def test_warmup_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        bootstrap.StepRecorder(0, 3, lambda r: None)


def test_batch_size_prefers_the_loader_and_ignores_forwards_inside_it():
    rec, _ = recorder(warmup=1, steps=1)
    rec.in_loader = True
    assert rec.note_forward((torch.zeros(16000),)) is False  # a transform run by the dataset
    rec.in_loader = False
    rec.note_loader_batch({"audio": torch.zeros(8, 100), "label": torch.zeros(8)})
    assert rec.note_forward((torch.zeros(4, 3),)) is True
    assert rec.finish(bootstrap.STATUS_COMPLETE, 0).batch_size == 8


@pytest.mark.parametrize("code, expected", [(None, 0), (0, 0), (3, 3), ("message", 1)])
def test_exit_code_of_sys_exit(code, expected):
    assert bootstrap.exit_code_of(SystemExit(code)) == expected


def test_classify_nonzero_sys_exit_after_some_steps():
    data = {"status": "exited", "exit_code": 3, "warmup": 1, "steps_wanted": 4, "steps_done": 2,
            "step_times_s": [0.1], "losses": [1.0, 0.9], "batch_size": 4, "peak_memory_bytes": 1,
            "memory_kind": "rss", "device": "cpu", "device_name": "cpu", "torch_version": "x", "torch_threads": 1}
    result = _classify(data, 3, [sys.executable, "x.py"], "x.py", 1.0, ["boom"])
    assert result.status == CRASHED
    assert result.exit_code == 3
    assert "after 2 of 5 optimizer steps" in result.message


def test_classify_missing_result_is_a_crash():
    result = _classify(None, -9, [sys.executable, "x.py"], "x.py", 1.0, [])
    assert result.status == CRASHED
    assert result.exit_code == -9
    assert "no result" in result.message
