"""The step-timing harness: the recorder's bookkeeping in process, and whole runs of small scripts.

The end-to-end scripts encode what they did in what the harness can see: the loss of
optimizer step k is exactly k, and a script that runs to its end leaves a marker file, so
an early exit is visible by its absence.
"""

from __future__ import annotations

import sys
import textwrap
import time
import warnings

import pytest

torch = pytest.importorskip("torch")

from perflint_runtime import bootstrap  # noqa: E402
from perflint_runtime.harness import CRASHED, NO_STEPS, OK, TIMEOUT, TOO_FEW, _classify, run_script  # noqa: E402
from perflint_runtime.phases import PHASES, SYNC_MESSAGE, SyncCounter, mode_number, split_step  # noqa: E402


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


# -- where the step goes -------------------------------------------------------------------

# Each step: the loader sleeps 4 × 10 ms, a copy goes to another device ("meta" stands in
# for a GPU here), the forward sleeps 20 ms, and after the update the script sleeps 30 ms.
PHASED = """
    import threading, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 1000

        def __getitem__(self, i):
            time.sleep(0.01)
            torch.ones(2).to("meta")  # inside the loader: data loading, not a copy of the step
            return torch.ones(4), torch.ones(1)

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Slow(), batch_size=4):
        x.to("meta")
        x.to(torch.float64)  # not a copy to another device
        time.sleep(0.02)
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        threading.Thread(target=lambda: torch.ones(2).to("meta")).start()  # another thread: not stamped
        time.sleep(0.03)
"""


def test_steps_are_split_into_phases_that_add_up(tmp_path):
    script = write(tmp_path, "phased.py", PHASED)
    result = run_script(script, [], steps=3, warmup=1, timeout=120)
    assert result.status == OK, result.describe_failure()
    phases = result.phase_times_s
    assert set(phases) == set(PHASES) and all(len(v) == 3 for v in phases.values())
    for k, step_time in enumerate(result.step_times_s):
        got = {p: phases[p][k] for p in PHASES}
        assert sum(got.values()) == pytest.approx(step_time, rel=1e-9)
        assert got["data"] >= 0.04 and got["compute"] >= 0.02 and got["other"] >= 0.03
        assert got["h2d"] > 0 and got["optimizer"] > 0
        assert got["h2d"] < 0.01  # only the step's own copy, not the loader's
        assert got["device"] == 0.0  # no CUDA
    assert result.host_syncs is None


def test_split_charges_every_instant_to_one_phase():
    events = [(1.0, "data"), (1.5, "h2d"), (1.6, None), (2.0, None),  # a copy inside the loader is data
              (2.1, "h2d"), (2.3, None),  # a copy of the step
              (3.0, "backward"), (3.5, None),  # 2.3 → 3.0 is the forward pass
              (3.6, "optimizer"), (3.8, None), (3.9, None),  # an unmatched exit is ignored
              (4.0, "optimizer")]  # still open at the step's end
    split = split_step(events, start=0.5, host_end=4.2, end=4.5)
    assert split["data"] == pytest.approx(1.0)
    assert split["h2d"] == pytest.approx(0.2)
    assert split["compute"] == pytest.approx(0.7 + 0.5)
    assert split["optimizer"] == pytest.approx(0.2 + 0.2)
    assert split["other"] == pytest.approx(0.5 + 0.1 + 0.1 + 0.2)  # start→data, 2.0→2.1, 3.5→3.6, 3.8→4.0
    assert split["device"] == pytest.approx(0.3)
    assert sum(split.values()) == pytest.approx(4.5 - 0.5)


def test_split_without_stamps_is_all_other():
    assert split_step([], 1.0, 3.0) == {"data": 0.0, "h2d": 0.0, "compute": 0.0, "optimizer": 0.0, "other": 2.0,
                                        "device": 0.0}


def test_probes_of_other_threads_are_ignored():
    import threading

    rec, _ = recorder(warmup=1, steps=1)
    thread = threading.Thread(target=rec.mark, args=("data",))
    thread.start()
    thread.join()
    assert rec.events == []
    rec.mark("data")
    assert [kind for _, kind in rec.events] == ["data"]


# -- host syncs on CUDA, without a GPU: torch's warnings are raised by hand -------------------


def sync_warning():
    warnings.warn(f"{SYNC_MESSAGE} (Triggered internally at c10/cuda/CUDAFunctions.cpp:1)", UserWarning)


@pytest.fixture
def shown():
    """What reaches the display hook the script had (warnings state restored afterwards)."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        seen: list[str] = []
        warnings.showwarning = lambda message, *args, **kwargs: seen.append(str(message))
        yield seen


def test_sync_warnings_are_counted_and_swallowed(shown):
    modes: list[int] = []
    counter = SyncCounter(modes.append)
    sync_warning()  # before start: not counted, shown as the script would see it
    counter.start()
    assert modes == [1]
    for _ in range(3):
        sync_warning()  # one line, three times: each is counted ("always")
    warnings.warn("something else", UserWarning)
    assert counter.take() == 3 and counter.take() == 0
    assert shown == [shown[0], "something else"] and shown[0].startswith(SYNC_MESSAGE)


def test_sync_counting_survives_the_script_changing_the_warnings(shown):
    counter = SyncCounter(lambda mode: None)
    counter.start()
    warnings.simplefilter("ignore")  # the script silences warnings
    sync_warning()
    assert counter.take() == 0
    logged: list[str] = []
    warnings.showwarning = lambda message, *args, **kwargs: logged.append(str(message))  # captureWarnings
    counter.ensure_installed()  # between steps
    sync_warning()
    warnings.warn("for the log", UserWarning)
    assert counter.take() == 1
    assert logged == []  # "ignore" still holds for the script's own warnings; the sync one was not passed on
    warnings.simplefilter("always")
    counter.ensure_installed()
    warnings.warn("for the log", UserWarning)
    assert logged == ["for the log"]


def test_a_script_asking_for_sync_warnings_or_errors_gets_them(shown):
    modes: list[int] = []
    counter = SyncCounter(modes.append)
    counter.script_sets_mode(1)  # before the harness starts counting: passed through
    counter.start()
    sync_warning()
    assert counter.take() == 1 and len(shown) == 1  # counted and shown
    counter.script_sets_mode(2)
    counter.script_sets_mode(0)
    assert modes == [1, 1, 2, 1]  # "error" is kept; "default" keeps the harness's "warn"
    assert mode_number("error") == 2 and mode_number("warn") == 1 and mode_number(0) == 0


def test_explicit_synchronize_is_counted_on_the_main_thread_only():
    import threading

    counter = SyncCounter(lambda mode: None)
    counter.note_explicit()  # not active yet
    with warnings.catch_warnings():
        counter.start()
        counter.note_explicit()
        thread = threading.Thread(target=counter.note_explicit)
        thread.start()
        thread.join()
    assert counter.take() == 1


def test_cuda_step_records_the_gpu_wait_and_the_scripts_syncs(monkeypatch):
    """post_step on a (pretend) CUDA run: the end-of-step wait is its own phase, and syncs
    counted while the harness itself waits or reads the loss are not the script's."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(bootstrap.StepRecorder, "_reset_peak_memory", staticmethod(lambda: None))
    rec, _ = recorder(warmup=1, steps=2)
    modes: list[int] = []
    rec.syncs = SyncCounter(modes.append)

    def harness_sync():
        time.sleep(0.02)
        rec.syncs.count += 5  # as if the harness's own wait had warned

    monkeypatch.setattr(bootstrap, "_cuda_synchronize", harness_sync)
    opt = FakeOptimizer()
    with warnings.catch_warnings():
        step(rec, opt)  # warm-up; counting starts when it ends
        assert modes == [1] and rec.syncs.active
        for n in (2, 0):
            rec.pre_step(opt, (), {})
            for _ in range(n):
                rec.syncs.note_explicit()
            rec.post_step(opt, (), {})
    r = rec.result
    assert r.host_syncs == [2, 0]
    assert all(d >= 0.02 for d in r.phase_times_s["device"])
    for k, t in enumerate(r.step_times_s):
        assert sum(r.phase_times_s[p][k] for p in PHASES) == pytest.approx(t, rel=1e-9)


def test_install_sync_counter_wraps_the_scripts_calls(monkeypatch):
    calls: list = []
    # registered first, so that the test restores torch's own functions afterwards
    monkeypatch.setattr(torch.cuda, "synchronize", torch.cuda.synchronize)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: calls.append(("script", mode)))
    monkeypatch.setattr(torch._C, "_cuda_set_sync_debug_mode", lambda mode: calls.append(("set", mode)),
                        raising=False)
    monkeypatch.setattr(bootstrap, "_cuda_synchronize", lambda device=None: calls.append(("sync", device)))
    rec, _ = recorder(warmup=1, steps=1)
    bootstrap.install_sync_counter(rec)
    torch.cuda.set_sync_debug_mode("error")
    assert calls == [("script", "error"), ("set", 2)] and rec.syncs.script_mode == 2
    with warnings.catch_warnings():
        rec.syncs.start()
        torch.cuda.synchronize()
    assert calls[-2:] == [("set", 2), ("sync", None)]  # the script's "error" holds
    assert rec.syncs.take() == 1


def test_without_split_no_probe_is_installed(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    result = run_script(script, ["1000", str(tmp_path / "finished")], steps=2, warmup=2, timeout=120, split=False)
    assert result.status == OK, result.describe_failure()
    assert "--no-split" in result.argv
    assert len(result.step_times_s) == 2 and result.phase_times_s == {} and result.batch_size == 16


def test_probes_do_not_break_a_fullgraph_compiled_step(tmp_path):
    """Inside code torch.compile traces, the probes and the batch-size hook do nothing: a
    `fullgraph=True` function with a module call and `.to()` calls compiles and runs."""
    script = write(tmp_path, "compiled.py", """
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        @torch.compile(fullgraph=True, backend="eager")
        def compute_loss(x, y):
            return (model(x.to(torch.float64).to(torch.float32)) - y).pow(2).mean()

        for step in range(10):
            loss = compute_loss(torch.randn(8, 4), torch.randn(8, 1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """)
    result = run_script(script, [], steps=3, warmup=2, timeout=300)
    assert result.status == OK, result.describe_failure()
    assert len(result.phase_times_s["compute"]) == 3


# A loader with worker processes fills workers × prefetch_factor batches while the first
# steps run; the warm-up must last until that queue has been drained.
WORKERS = """
    import sys
    import torch

    def main():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        data = torch.utils.data.TensorDataset(torch.randn(400, 4), torch.randn(400, 1))
        loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=int(sys.argv[1]), prefetch_factor=3
                                             if int(sys.argv[1]) else None)
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    if __name__ == "__main__":
        main()
"""


def test_warmup_covers_the_loaders_prefetch_queue(tmp_path):
    script = write(tmp_path, "workers.py", WORKERS)
    r = run_script(script, ["2"], steps=3, warmup=2, timeout=120)
    assert r.ok, r.describe_failure()
    assert r.prefetch_depth == 6 and r.warmup_requested == 2
    # six batches were made in advance: the measured steps start after the seventh.
    assert r.warmup == 7 and len(r.step_times_s) == 3 and r.steps_done == 10
    plain = run_script(script, ["0"], steps=3, warmup=2, timeout=120)
    assert plain.ok and plain.prefetch_depth == 0 and plain.warmup == 2 and plain.steps_done == 5
