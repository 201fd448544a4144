"""The trainer in one process: skipped fp16 steps, loss results, log hooks and writers, the
profiler, the determinism switch, no host sync between log lines, evaluation, state files."""

from __future__ import annotations

import csv
import importlib.util
import os
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from perflint_runtime import Trainer  # noqa: E402
from perflint_runtime.distributed import Placement  # noqa: E402
from perflint_runtime.loggers import CSVWriter, TensorBoardWriter  # noqa: E402
from perflint_runtime.parallel import find_layers  # noqa: E402


def data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))


def setup(**options):
    trainer = Trainer(device="cpu", progress=False, **options)
    model = trainer.setup_model(mlp())
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    loader = trainer.dataloader(data(), 8, shuffle=True, num_workers=0)
    return trainer, model, optimizer, loader


def test_a_step_the_scaler_skips_advances_neither_the_scheduler_nor_the_step_count():
    trainer, model, optimizer, _ = setup()
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)  # as fp16 training has
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    x, y = data(8).tensors
    before = [p.detach().clone() for p in model.parameters()]
    trainer.backward(F.cross_entropy(model(x), y) * float("inf"))  # an overflow
    assert trainer.step(optimizer, scheduler) is False
    assert (trainer.global_step, trainer.skipped_steps, scheduler.last_epoch) == (0, 1, 0)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters())  # the window starts again
    trainer.backward(F.cross_entropy(model(x), y))
    assert trainer.step(optimizer, scheduler) is True
    assert (trainer.global_step, trainer.skipped_steps, scheduler.last_epoch) == (1, 1, 1)


def test_loss_function_may_return_the_loss_with_anything_or_with_values_to_track():
    trainer, model, optimizer, loader = setup(log_every=2)

    def with_logits(model, batch):
        logits = model(batch[0])
        return F.cross_entropy(logits, batch[1]), logits

    def with_values(model, batch):
        logits = model(batch[0])
        return F.cross_entropy(logits, batch[1]), {"acc": (logits.argmax(1) == batch[1]).float().mean(),
                                                   "per_sample": logits[:, 0], "constant": 1.0}

    assert set(trainer.fit(model, optimizer, loader, with_logits, steps=2)) == {"loss"}
    assert set(trainer.fit(model, optimizer, loader, with_values, steps=4)) == {"loss", "acc", "constant"}


def test_log_hooks_and_csv_writer(tmp_path):
    calls = []
    path = tmp_path / "logs" / "metrics.csv"
    writer = CSVWriter(path)
    assert not path.exists()  # made at the first call: rank 0's (hooks run there only)
    trainer, model, optimizer, loader = setup(log_every=2, on_log=[writer, lambda step, m: calls.append((step, m))])
    trainer.fit(model, optimizer, loader, lambda m, b: F.cross_entropy(m(b[0]), b[1]), steps=4)
    writer.close()
    assert [step for step, _ in calls] == [2, 4]
    assert set(calls[0][1]) == {"loss", "lr", "ms_per_step"} and calls[0][1]["lr"] == 0.1
    with open(path) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "name", "value"]
    assert [(r[0], r[1]) for r in rows[1:]] == [("2", "loss"), ("2", "lr"), ("2", "ms_per_step"),
                                                ("4", "loss"), ("4", "lr"), ("4", "ms_per_step")]
    assert float(rows[1][2]) == pytest.approx(calls[0][1]["loss"])


def test_tensorboard_writer_writes_events_or_says_what_to_install(tmp_path):
    if importlib.util.find_spec("tensorboard") is None:
        with pytest.raises(ImportError, match="pip install tensorboard"):
            TensorBoardWriter(tmp_path)
        return
    writer = TensorBoardWriter(tmp_path)
    writer(1, {"loss": 0.5})
    writer.close()
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path))


def test_profiler_schedule_counts_optimizer_steps(tmp_path):
    trainer, model, optimizer, loader = setup(log_every=100)
    with trainer.profiler(tmp_path, wait=1, warmup=1, active=2) as prof:
        trainer.fit(model, optimizer, loader, lambda m, b: F.cross_entropy(m(b[0]), b[1]), steps=5, profiler=prof)
    traces = [name for name in os.listdir(tmp_path) if name.startswith("rank0")]
    assert len(traces) == 1  # one active window: steps 3 and 4
    assert prof.step_num == 5


def test_deterministic_switch():
    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision(),
             torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        torch.backends.cudnn.benchmark = True
        torch.set_float32_matmul_precision("high")
        Trainer(device="cpu", deterministic=True, progress=False)
        assert torch.backends.cudnn.benchmark is False and torch.backends.cudnn.deterministic is True
        assert torch.get_float32_matmul_precision() == "highest"
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[0], saved[1]
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[2], saved[3]
        torch.set_float32_matmul_precision(saved[4])
        torch.use_deterministic_algorithms(saved[5], warn_only=saved[6])


def test_fit_reads_tensors_on_the_host_only_at_log_lines(monkeypatch):
    """The rules' guarantee: metrics, the loss and the clipped norm stay on the device between
    log lines (one `.tolist()` per log line, nothing per step)."""
    trainer, model, optimizer, loader = setup(log_every=5, max_grad_norm=1.0, grad_accum_steps=2)
    reads = []

    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if "perflint_runtime" in caller:
                reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    trainer.fit(model, optimizer, loader, lambda m, b: F.cross_entropy(m(b[0]), b[1]), steps=10)
    assert reads == ["tolist", "tolist"]  # steps 5 and 10


def test_evaluate_in_one_process():
    trainer, model, _, _ = setup()
    values = torch.arange(10, dtype=torch.float32)
    loader = trainer.dataloader(torch.utils.data.TensorDataset(values), 4, num_workers=0)
    modes = []

    def fn(m, batch):
        modes.append((m.training, torch.is_inference_mode_enabled()))
        return {"v": batch[0], "out": m(batch[0].unsqueeze(1).repeat(1, 10))[:, 0]}

    result = trainer.evaluate(model, loader, fn)
    assert result["v"] == pytest.approx(4.5)  # batches of 4, 4, 2: weighted by samples, not batches
    assert modes == [(False, True)] * 3 and model.training
    model.eval()
    trainer.evaluate(model, loader, fn)
    assert not model.training  # put back as it was
    with pytest.raises(ValueError, match="shape \\[batch size\\]"):
        trainer.evaluate(model, loader, lambda m, b: {"v": b[0].mean()})


def test_state_in_one_process(tmp_path):
    trainer, model, optimizer, loader = setup(seed=0)
    with pytest.raises(FileNotFoundError):
        trainer.load_state(tmp_path / "none", model, optimizer)
    loss = lambda m, b: F.cross_entropy(m(b[0]), b[1])  # noqa: E731
    trainer.fit(model, optimizer, loader, loss, steps=3, state_dir=tmp_path, save_every=3)  # nothing to resume yet
    assert (tmp_path / "latest").read_text().strip() == "step_000000003"
    assert not list(tmp_path.glob("*.tmp"))
    expected = trainer.full_state_dict(model)

    fresh, model2, optimizer2, loader2 = setup(seed=1)
    assert fresh.load_state(tmp_path / "step_000000003", model2, optimizer2) == {}
    assert (fresh.global_step, fresh.epoch, fresh.batch_in_epoch) == (3, 0, 3)
    for name, value in fresh.full_state_dict(model2).items():
        assert torch.equal(value, expected[name])


def test_iterable_dataset_epochs_end_when_it_is_exhausted():
    class Five(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(5))

    trainer = Trainer(device="cpu", progress=False)
    loader = trainer.dataloader(Five(), 2, num_workers=0)
    batches = trainer.batches(loader)
    taken = [next(batches).tolist() for _ in range(4)]
    assert taken == [[0, 1], [2, 3], [4], [0, 1]]
    assert (trainer.epoch, trainer.batch_in_epoch) == (1, 1)
    with pytest.raises(ValueError, match="orders itself"):
        trainer.dataloader(Five(), 2, shuffle=True)


def test_options_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="sync_batchnorm needs CUDA"):
        Trainer(device="cpu", sync_batchnorm=True)
    with pytest.raises(ValueError, match="strategy must be one of"):
        Trainer(device="cpu", strategy="deepspeed")
    with pytest.raises(ValueError, match="ddp_kwargs are for"):
        Trainer(device="cpu", strategy="fsdp", ddp_kwargs={"static_graph": True})


def test_save_checkpoint_runs_no_collective_and_writes_on_rank_0_only(tmp_path, monkeypatch):
    trainer, model, optimizer, _ = setup()
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: pytest.fail("a collective"))
    trainer.placement = Placement(rank=1, local_rank=1, world_size=2, device=torch.device("cpu"))
    trainer.save_checkpoint(str(tmp_path / "other.pt"), model, optimizer)
    assert not (tmp_path / "other.pt").exists()
    trainer.placement = Placement(rank=0, local_rank=0, world_size=2, device=torch.device("cpu"))
    trainer.save_checkpoint(str(tmp_path / "main.pt"), model, optimizer)
    assert (tmp_path / "main.pt").exists()


def test_layers_for_sharding_and_checkpointing():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(4, 4)
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Linear(4, 4)]))
                                        for _ in range(2))

    net = Net()
    assert find_layers(net) == list(net.blocks)  # outermost blocks only
    plain = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    assert find_layers(plain) == [plain[0], plain[2]]  # children with parameters
    assert find_layers(net, [nn.Linear]) == [net.blocks[0][0], net.blocks[0][1][0], net.blocks[1][0],
                                             net.blocks[1][1][0]]
