"""The optimised trainer on the CPU: learning, accumulation, clipping order, checkpoints, DDP."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from perflint_runtime import Trainer  # noqa: E402
from perflint_runtime.data import build_dataloader, move_to_device  # noqa: E402
from perflint_runtime.distributed import placement_from_env  # noqa: E402
from perflint_runtime.trainer import format_log, fused_is_safe, resolve_precision  # noqa: E402


def toy_classification(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def mlp(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 2))


def cross_entropy(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits, y), {"acc": (logits.argmax(1) == y).float().mean()}


def test_fit_reduces_the_loss(capsys):
    trainer = Trainer(device="cpu", log_every=10, progress=False)
    model = trainer.setup_model(mlp())
    optimizer = trainer.setup_optimizer(torch.optim.AdamW, model.parameters(), lr=1e-2)
    loader = trainer.dataloader(toy_classification(), 32, shuffle=True, num_workers=0)
    x, y = toy_classification().tensors
    before = F.cross_entropy(model(x), y).item()
    metrics = trainer.fit(model, optimizer, loader, cross_entropy, steps=40)
    after = F.cross_entropy(model(x), y).item()
    assert trainer.global_step == 40
    assert after < 0.5 * before
    assert set(metrics) == {"loss", "acc"} and metrics["acc"] > 0.8
    logged = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in logged] == ["10/40", "20/40", "30/40", "40/40"]


def test_fit_continues_from_the_current_step():
    trainer = Trainer(device="cpu", progress=False)
    model = trainer.setup_model(mlp())
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    loader = trainer.dataloader(toy_classification(64), 32, num_workers=0)
    trainer.fit(model, optimizer, loader, cross_entropy, steps=3)
    trainer.fit(model, optimizer, loader, cross_entropy, steps=5)
    assert trainer.global_step == 5
    assert (trainer.epoch, trainer.batch_in_epoch) == (2, 1)  # 5 batches of a 2-batch pass: the second call went on


def test_accumulation_steps_once_per_window_with_the_mean_gradient():
    data = toy_classification(32)
    trainer = Trainer(device="cpu", grad_accum_steps=4, progress=False)
    model = trainer.setup_model(mlp())
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.5)
    stepped = []
    for x, y in torch.utils.data.DataLoader(data, batch_size=8):
        with trainer.accumulate(model):
            trainer.backward(F.cross_entropy(model(x), y))
        stepped.append(trainer.step(optimizer))
    assert stepped == [False, False, False, True]
    assert trainer.global_step == 1

    reference = mlp()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    x, y = data.tensors
    F.cross_entropy(reference(x), y).backward()  # one batch of 32 = four of 8, averaged
    ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_clipping_happens_after_unscaling():
    x, y = toy_classification(32).tensors
    trainer = Trainer(device="cpu", max_grad_norm=0.05, progress=False)
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)  # as fp16 training would have
    model = trainer.setup_model(mlp())
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=1.0)
    trainer.backward(F.cross_entropy(model(x), y))
    assert trainer.step(optimizer)

    reference = mlp()
    F.cross_entropy(reference(x), y).backward()
    true_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    torch.optim.SGD(reference.parameters(), lr=1.0).step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)
    assert trainer.read_metrics()["grad_norm"] == pytest.approx(true_norm.item(), rel=1e-5)


def train_steps(trainer, model, optimizer, batches):
    losses = []
    for batch in batches:
        with trainer.accumulate(model), trainer.autocast():
            loss, _ = cross_entropy(model, batch)
        trainer.backward(loss)
        trainer.step(optimizer)
        losses.append(loss.item())
    return losses


def test_checkpoint_resume_gives_the_identical_next_step(tmp_path):
    batches = [tuple(t[i * 16:(i + 1) * 16] for t in toy_classification(64).tensors) for i in range(4)]
    path = str(tmp_path / "ckpt.pt")

    trainer = Trainer(device="cpu", progress=False)
    model = trainer.setup_model(mlp(seed=1, dropout=0.3))
    optimizer = trainer.setup_optimizer(torch.optim.AdamW, model.parameters(), lr=1e-2)
    train_steps(trainer, model, optimizer, batches[:3])
    trainer.save_checkpoint(path, model, optimizer, note="three steps")
    expected_loss = train_steps(trainer, model, optimizer, batches[3:])
    expected = [p.detach().clone() for p in model.parameters()]

    torch.manual_seed(12345)  # a different random state, which the checkpoint must replace
    resumed = Trainer(device="cpu", progress=False)
    model2 = resumed.setup_model(mlp(seed=2, dropout=0.3))
    optimizer2 = resumed.setup_optimizer(torch.optim.AdamW, model2.parameters(), lr=1e-2)
    assert resumed.load_checkpoint(path, model2, optimizer2) == {"note": "three steps"}
    assert resumed.global_step == 3
    assert train_steps(resumed, model2, optimizer2, batches[3:]) == expected_loss
    for p, q in zip(model2.parameters(), expected):
        assert torch.equal(p, q)


def test_checkpoints_load_with_weights_only_so_extras_must_be_plain_data(tmp_path):
    """`load_checkpoint` uses `weights_only=True` (the default since torch 2.6; safe to
    load a file from elsewhere): an `argparse.Namespace` in the extras cannot be loaded
    back, its `vars()` can (rule-facts-repro/torch_load_weights_only.py)."""
    import argparse
    import pickle

    args = argparse.Namespace(lr=0.1, epochs=3)
    trainer = Trainer(device="cpu", progress=False)
    model = trainer.setup_model(mlp(seed=1))
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    good, bad = str(tmp_path / "good.pt"), str(tmp_path / "bad.pt")
    trainer.save_checkpoint(good, model, optimizer, args=vars(args))
    trainer.save_checkpoint(bad, model, optimizer, args=args)
    assert trainer.load_checkpoint(good, model, optimizer) == {"args": {"lr": 0.1, "epochs": 3}}
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        trainer.load_checkpoint(bad, model, optimizer)


def test_metrics_stay_on_the_device_until_read():
    trainer = Trainer(device="cpu", progress=False)
    trainer.track(loss=torch.tensor(1.0), acc=0.5)
    trainer.track(loss=torch.tensor(3.0, requires_grad=True), acc=1.0)
    assert trainer.read_metrics() == {"loss": 2.0, "acc": 0.75}
    assert trainer.read_metrics() == {}


def test_precision_choice(monkeypatch):
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == "fp32"
    assert resolve_precision("bf16", cpu) == "bf16"
    with pytest.raises(ValueError, match="needs CUDA"):
        resolve_precision("fp16", cpu)
    with pytest.raises(ValueError, match="one of"):
        resolve_precision("fp8", cpu)
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert resolve_precision("auto", cuda) == "fp16"  # Turing: bf16 would only be emulated
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert resolve_precision("auto", cuda) == "bf16"


def test_fused_only_where_safe():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert fused_is_safe(torch.optim.AdamW, cuda, {})
    assert fused_is_safe(torch.optim.Adam, cpu, {})  # torch ≥ 2.4
    assert not fused_is_safe(torch.optim.SGD, cuda, {})
    assert not fused_is_safe(torch.optim.AdamW, cuda, {"foreach": True})
    assert not fused_is_safe(torch.optim.AdamW, cuda, {"fused": False})
    assert not fused_is_safe(torch.optim.AdamW, cuda, {"differentiable": True})
    assert not fused_is_safe(torch.optim.AdamW, torch.device("mps"), {})
    trainer = Trainer(device="cpu", progress=False)
    params = list(mlp().parameters())
    assert trainer.setup_optimizer(torch.optim.AdamW, params, lr=1e-3).defaults["fused"] is True
    assert not trainer.setup_optimizer(torch.optim.SGD, params, lr=1e-3, momentum=0.9).defaults.get("fused")


def test_dataloader_options_follow_the_device():
    placement = placement_from_env("cpu")
    loader = build_dataloader(toy_classification(), 8, placement, shuffle=True)
    assert loader.num_workers >= 1
    assert loader.persistent_workers and loader.prefetch_factor == 4
    assert not loader.pin_memory  # no accelerator
    single = build_dataloader(toy_classification(), 8, placement, num_workers=0)
    assert single.num_workers == 0 and not single.persistent_workers and single.prefetch_factor is None
    override = build_dataloader(toy_classification(), 8, placement, num_workers=2, persistent_workers=False)
    assert override.num_workers == 2 and not override.persistent_workers


def test_batches_keep_their_structure_on_the_device():
    Pair = collections.namedtuple("Pair", "image label")
    batch = {"x": Pair(torch.zeros(2, 3, 4, 4), torch.tensor([1, 2])), "ids": [torch.ones(2)], "name": "b"}
    moved = move_to_device(batch, torch.device("cpu"), channels_last=True)
    assert isinstance(moved["x"], Pair) and moved["name"] == "b" and isinstance(moved["ids"], list)
    assert moved["x"].image.is_contiguous(memory_format=torch.channels_last)
    assert moved["x"].label.dtype == torch.long


def test_empty_loader_is_an_error():
    trainer = Trainer(device="cpu", progress=False)
    empty = torch.utils.data.DataLoader(toy_classification(0), batch_size=4)
    with pytest.raises(ValueError, match="no batches"):
        next(trainer.batches(empty))


def test_log_line():
    assert format_log(10, 100, {"loss": 0.123456}, 35.04) == "step 10/100 loss 0.1235 (35.0 ms/step)"


DDP_SCRIPT = """
    import json, os, sys
    import torch, torch.nn as nn, torch.nn.functional as F
    from perflint_runtime import Trainer

    torch.manual_seed(int(os.environ["RANK"]))  # different initial weights: DDP must broadcast rank 0's
    trainer = Trainer(device="cpu", grad_accum_steps=2, progress=False)
    model = trainer.setup_model(nn.Linear(6, 1))
    reductions = []

    def counting_allreduce(state, bucket):
        reductions.append(1)
        fut = torch.distributed.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0] / trainer.placement.world_size)

    model.register_comm_hook(None, counting_allreduce)
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
    loader = trainer.dataloader(data, 4, shuffle=True, num_workers=0)
    trainer.fit(model, optimizer, loader, lambda m, b: F.mse_loss(m(b[0]), b[1]), steps=3)
    weights = [p.detach().flatten().tolist() for p in model.parameters()]
    with open(os.path.join(sys.argv[1], f"rank{trainer.placement.rank}.json"), "w") as f:
        json.dump({"weights": weights, "reductions": len(reductions), "step": trainer.global_step}, f)
    trainer.close()
"""


def test_ddp_on_cpu_with_torchrun(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    for attempt in range(2):
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
             str(tmp_path)],
            capture_output=True, text=True, timeout=180, env=env,
        )
        # A gloo worker process occasionally aborts inside torch's C++ runtime on this 2-core
        # machine (`terminate called without an active exception`; about 1 run in 30): one
        # retry for that signature only, any other failure is reported at once.
        if proc.returncode == 0 or "terminate called without an active exception" not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights"] == ranks[1]["weights"]  # one model, kept in sync
    assert [r["step"] for r in ranks] == [3, 3]
    assert [r["reductions"] for r in ranks] == [3, 3]  # 6 micro-batches, all-reduced only on the 3 steps
