"""Two-process trainer scenarios for tests/test_trainer_*.py: `python trainer_scenarios.py OUT NAME...`.

Each scenario runs on 2 CPU processes (gloo on 127.0.0.1, started with mp.spawn) and
writes what each rank saw to OUT/NAME.rankR.pt; the tests read those files and assert.
The scenarios of one call share the process group, so torch is imported once.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from perflint_runtime import Trainer

WORLD = 2


# -- models and data -----------------------------------------------------------------------

def indexed_data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return torch.utils.data.TensorDataset(x, y, torch.arange(n))


def dropout_mlp(seed):
    with torch.random.fork_rng():  # leaves the trainer's random state alone
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.forwards = 0

    def forward(self, x):
        self.forwards += 1
        self.weight_dtype = self.linear.weight.dtype  # what the forward computes with
        return x + torch.tanh(self.linear(x))


class Stack(nn.Module):
    def __init__(self, seed, width=16, depth=3):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.embed = nn.Linear(10, width)
            self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
            self.head = nn.Linear(width, 2)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(10, 2)
        self.unused = nn.Linear(10, 2)

    def forward(self, x):
        return self.used(x)


class Numbers(torch.utils.data.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(torch.arange(self.n, dtype=torch.float32).unsqueeze(1))


class Augmented(torch.utils.data.Dataset):
    """Each sample drawn at random in the loader worker: what augmentation does."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return torch.rand(1)


def params(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


# -- scenarios ---------------------------------------------------------------------------

def scenario_resume(rank, out):
    """The same 9 steps: straight; stopped at step 3 (mid-epoch) and resumed in a fresh trainer
    over two fit calls; stopped by SIGTERM on one rank and resumed."""
    data = indexed_data()
    seen = []

    def loss_fn(model, batch):
        x, y, ids = batch
        seen.append(ids.tolist())
        logits = model(x)
        return F.cross_entropy(logits, y), logits  # (loss, anything): the logits are ignored

    def make(seed):
        trainer = Trainer(device="cpu", seed=7, grad_accum_steps=2, max_grad_norm=1.0, log_every=100, progress=False)
        model = trainer.setup_model(dropout_mlp(seed))
        optimizer = trainer.setup_optimizer(torch.optim.AdamW, model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        loader = trainer.dataloader(data, 4, shuffle=True, num_workers=0)
        return trainer, model, optimizer, scheduler, loader

    trainer, model, optimizer, scheduler, loader = make(0)
    trainer.fit(model, optimizer, loader, loss_fn, steps=9, scheduler=scheduler)
    straight = {"params": params(model), "seen": list(seen), "epoch": trainer.epoch,
                "batch_in_epoch": trainer.batch_in_epoch, "lr": scheduler.get_last_lr()}

    state_dir = os.path.join(out, "state")
    seen.clear()
    trainer, model, optimizer, scheduler, loader = make(0)
    trainer.fit(model, optimizer, loader, loss_fn, steps=3, scheduler=scheduler, state_dir=state_dir, save_every=1,
                keep_last=2)
    first_part = list(seen)
    saved = sorted(p for p in os.listdir(state_dir))
    latest = open(os.path.join(state_dir, "latest")).read().strip()

    seen.clear()
    torch.manual_seed(1000 + rank)  # another random state, which the saved one must replace
    trainer, model, optimizer, scheduler, loader = make(5)  # other initial weights, replaced too
    trainer.fit(model, optimizer, loader, loss_fn, steps=6, scheduler=scheduler, state_dir=state_dir)
    trainer.fit(model, optimizer, loader, loss_fn, steps=9, scheduler=scheduler, state_dir=state_dir)
    resumed = {"params": params(model), "seen": first_part + list(seen), "saved": saved, "latest": latest,
               "epoch": trainer.epoch, "batch_in_epoch": trainer.batch_in_epoch, "lr": scheduler.get_last_lr()}

    preempt_dir = os.path.join(out, "preempt")
    sent = []

    def preempted_loss(model, batch):
        if rank == 1 and trainer.global_step == 4 and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)  # on one rank only; the other learns it at the step's end
        return loss_fn(model, batch)

    trainer, model, optimizer, scheduler, loader = make(0)
    exit_code = None
    try:
        trainer.fit(model, optimizer, loader, preempted_loss, steps=9, scheduler=scheduler, state_dir=preempt_dir)
    except SystemExit as exc:
        exit_code = exc.code
    stopped_at = trainer.global_step
    torch.manual_seed(2000 + rank)
    trainer, model, optimizer, scheduler, loader = make(6)
    trainer.fit(model, optimizer, loader, loss_fn, steps=9, scheduler=scheduler, state_dir=preempt_dir)
    preempted = {"params": params(model), "exit_code": exit_code, "stopped_at": stopped_at,
                 "latest": open(os.path.join(preempt_dir, "latest")).read().strip()}
    return {"straight": straight, "resumed": resumed, "preempted": preempted}


def scenario_stretches(rank, out):
    """8 steps in stretches of 3: one pass over the 64 samples (4 per batch, 2 ranks)."""
    trainer = Trainer(device="cpu", seed=1, log_every=100, progress=False)
    model = trainer.setup_model(dropout_mlp(0))
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    loader = trainer.dataloader(indexed_data(), 4, shuffle=True, num_workers=0)
    seen = []

    def loss_fn(model, batch):
        seen.extend(batch[2].tolist())
        return F.cross_entropy(model(batch[0]), batch[1])

    for stop in (3, 6, 8):
        trainer.fit(model, optimizer, loader, loss_fn, steps=stop)
    return {"seen": seen, "epoch": trainer.epoch, "batch_in_epoch": trainer.batch_in_epoch}


def scenario_fsdp(rank, out):
    """DDP and FSDP from the same (rank 0's) initial weights, 4 steps with accumulation;
    FSDP saved and resumed; FSDP with activation checkpointing; evaluation in lockstep."""
    data = indexed_data(48)

    def loss_fn(model, batch):
        return F.cross_entropy(model(batch[0]), batch[1])

    def run(strategy, seed, **options):
        trainer = Trainer(device="cpu", strategy=strategy, grad_accum_steps=2, max_grad_norm=1.0, log_every=100,
                          progress=False, **options)
        model = trainer.setup_model(Stack(seed))
        optimizer = trainer.setup_optimizer(torch.optim.AdamW, model.parameters(), lr=1e-2)
        loader = trainer.dataloader(data, 4, shuffle=True, num_workers=0)
        return trainer, model, optimizer, loader

    result = {"rank0_init": params(Stack(0))}
    trainer, model, optimizer, loader = run("ddp", seed=rank)  # a different model on each rank: rank 0's wins
    trainer.fit(model, optimizer, loader, loss_fn, steps=4)
    result["ddp"] = trainer.full_state_dict(model)

    trainer, model, optimizer, loader = run("fsdp", seed=rank)
    result["fsdp_init"] = trainer.full_state_dict(model)
    result["fsdp_sharded"] = [type(p).__name__ for p in model.parameters()]
    from torch.distributed.fsdp import FSDPModule
    result["fsdp_units"] = [isinstance(m, FSDPModule) for m in (model, *model.blocks, model.embed, model.head)]
    state_dir = os.path.join(out, "fsdp_state")
    trainer.fit(model, optimizer, loader, loss_fn, steps=2, state_dir=state_dir, save_every=2)
    trainer.fit(model, optimizer, loader, loss_fn, steps=4)
    result["fsdp"] = trainer.full_state_dict(model)

    trainer, model, optimizer, loader = run("fsdp", seed=10 + rank)
    trainer.fit(model, optimizer, loader, loss_fn, steps=4, state_dir=state_dir)
    result["fsdp_resumed"] = trainer.full_state_dict(model)
    result["fsdp_files"] = sorted(os.listdir(os.path.join(state_dir, "step_000000002")))

    trainer, model, optimizer, loader = run("fsdp", seed=rank, activation_checkpointing=True)
    # evaluated before any training (FSDP's first forward): training must still work afterwards
    numbers = trainer.dataloader(Numbers(13), 2, evaluation=True, num_workers=0)  # 7 and 6 numbers: 4 and 3 batches
    result["fsdp_eval"] = trainer.evaluate(model, numbers, lambda m, b: {"v": b[:, 0] + 0 * m(b.repeat(1, 10))[:, 0]})
    result["fsdp_mode_after_eval"] = model.training
    for block in model.blocks:
        block.forwards = 0
    trainer.fit(model, optimizer, loader, loss_fn, steps=4)
    result["fsdp_ac"] = trainer.full_state_dict(model)
    result["forwards_ac"] = [block.forwards for block in model.blocks]
    bf16, bf16_model, bf16_optimizer, bf16_loader = run("fsdp", seed=rank, precision="bf16")
    bf16.fit(bf16_model, bf16_optimizer, bf16_loader, loss_fn, steps=1)
    result["bf16_compute_dtype"] = str(bf16_model.blocks[0].weight_dtype)
    result["bf16_stored_dtype"] = str(next(bf16_model.parameters()).dtype)
    return result


def scenario_options(rank, out):
    """DDP options, seeding, sharded data, evaluation without padding, rank-aware workers."""
    result = {}
    x, y = torch.randn(8, 10), torch.randint(0, 2, (8,))
    trainer = Trainer(device="cpu", ddp_kwargs={"find_unused_parameters": True}, progress=False)
    model = trainer.setup_model(Unused())
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    for _ in range(2):
        trainer.backward(F.cross_entropy(model(x), y))
        trainer.step(optimizer)
    result["unused_ok"] = trainer.global_step

    trainer = Trainer(device="cpu", progress=False)
    model = trainer.setup_model(Unused())
    optimizer = trainer.setup_optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    try:
        for _ in range(2):
            trainer.backward(F.cross_entropy(model(x), y))
            trainer.step(optimizer)
        result["unused_default"] = "no error"
    except RuntimeError as exc:
        result["unused_default"] = str(exc)

    trainer = Trainer(device="cpu", ddp_kwargs={"static_graph": True}, progress=False)
    model = trainer.setup_model(nn.Linear(10, 2))
    result["static_graph"] = model.static_graph

    draws = []
    for _ in range(2):
        Trainer(device="cpu", seed=3, progress=False)
        draws.append(torch.tensor([*torch.rand(2).tolist(), float(np.random.rand()), random.random()]))
    result["seeded"] = draws  # torch, torch, numpy, random

    trainer = Trainer(device="cpu", progress=False)
    train = trainer.dataloader(Numbers(11), 2, num_workers=0)
    evaluation = trainer.dataloader(Numbers(11), 2, num_workers=0, evaluation=True)
    result["iterable_train"] = torch.cat([b[:, 0] for b in train]).tolist()
    result["iterable_eval"] = torch.cat([b[:, 0] for b in evaluation]).tolist()

    values = torch.arange(11, dtype=torch.float32) ** 2  # mean 35; rank 1's sampler repeats sample 0 as padding
    padded = trainer.dataloader(torch.utils.data.TensorDataset(values), 4, num_workers=0)
    ddp_model = trainer.setup_model(nn.Sequential(nn.Linear(1, 1), nn.BatchNorm1d(1)))
    ddp_model.train()
    result["eval"] = trainer.evaluate(ddp_model, padded, lambda m, b: {"v": b[0], "twice": 2 * b[0]})
    result["eval_samples"] = trainer.evaluate_samples(ddp_model, padded, lambda m, b: {"v": b[0]})["v"]
    result["mode_after_eval"] = ddp_model.training

    seeded = Trainer(device="cpu", seed=5, progress=False)
    draws = []
    for _ in range(2):  # fork: a process started by mp.spawn would start its loader workers with spawn (seconds)
        loader = seeded.dataloader(Augmented(), 4, num_workers=1, persistent_workers=False,
                                   multiprocessing_context="fork")
        draws.append(torch.cat([b[:, 0] for b in loader]))
    result["worker_draws"] = draws
    return result


SCENARIOS = {"resume": scenario_resume, "stretches": scenario_stretches, "fsdp": scenario_fsdp,
             "options": scenario_options}


def worker(rank, port, out, names):
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_WORLD_SIZE": str(WORLD)})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        for name in names:
            try:
                result = SCENARIOS[name](rank, os.path.join(out, name))
            except BaseException:  # recorded for the test to show; the other rank may then wait: the test times out
                result = {"error": traceback.format_exc()}
                torch.save(result, os.path.join(out, f"{name}.rank{rank}.pt"))
                raise
            torch.save(result, os.path.join(out, f"{name}.rank{rank}.pt"))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    out_dir, scenario_names = sys.argv[1], sys.argv[2:]
    for scenario_name in scenario_names:
        os.makedirs(os.path.join(out_dir, scenario_name), exist_ok=True)
    mp.spawn(worker, args=(free_port(), out_dir, scenario_names), nprocs=WORLD)
