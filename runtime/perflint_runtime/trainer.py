"""An optimised training loop: what perflint's rules ask for, applied by construction.

    trainer = Trainer(grad_accum_steps=2, max_grad_norm=1.0)
    model = trainer.setup_model(Net())
    optimizer = trainer.setup_optimizer(torch.optim.AdamW, model.parameters(), lr=3e-4)
    loader = trainer.dataloader(dataset, batch_size=64, shuffle=True)
    trainer.fit(model, optimizer, loader, lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
                steps=1000)

`fit` is a short loop over the trainer's building blocks; a loop of your own can use them
directly (this is all `fit` does, apart from logging and checkpoints):

    for batch in trainer.batches(loader):            # on the device, copied without blocking
        with trainer.accumulate(model):              # DDP all-reduce only when the optimizer steps
            with trainer.autocast():                 # bf16 / fp16 / fp32
                loss = compute_loss(model, batch)
            trainer.backward(loss)                   # scaled for fp16 and for accumulation
        trainer.track(loss=loss)                     # summed on the device, read every log_every steps
        if trainer.step(optimizer, scheduler) and trainer.global_step == max_steps:
            break

What it applies, and the perflint rule behind each:

    precision      bf16 autocast on GPUs with compute capability ≥ 8.0; fp16 autocast and a
                   GradScaler on older GPUs; fp32 on the CPU (bf16 on request)      PF403 PF404
    optimizer      fused Adam/AdamW (never fused SGD: with a GradScaler its momentum is
                   corrupted after an overflow)                                     PF302
    kernels        TF32 matmuls (`set_float32_matmul_precision("high")`), cudnn.benchmark
                   (opt out for variable input shapes); channels_last and torch.compile
                   on request                                                       PF405 PF406 PF408
    data           workers, pinned memory, persistent workers, prefetch; non-blocking
                   copies                                                           PF101-PF105
    host syncs     metrics accumulate on the device and are read once per log interval PF201 PF204
    gradients      accumulation with DDP `no_sync`; clipping after `scaler.unscale_`;
                   `zero_grad(set_to_none=True)`                                    PF502 PF305 PF301

Several GPUs: launch the same script with `torchrun --nproc_per_node N script.py`; the
trainer joins the process group (NCCL on GPUs, Gloo on CPUs) and wraps the model in
DistributedDataParallel.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from perflint_runtime.data import build_dataloader, move_to_device
from perflint_runtime.distributed import all_reduce_mean, barrier, init_process_group, placement_from_env

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
FUSABLE_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)

LossFn = Callable[[torch.nn.Module, Any], "torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]"]


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def resolve_precision(requested: str, device: torch.device) -> str:
    """"auto" → bf16 on GPUs that run it natively (compute capability ≥ 8.0), else fp16 on
    CUDA, else fp32.  `torch.cuda.is_bf16_supported()` is not asked: by default it also
    says yes for GPUs that only emulate bf16, slowly."""
    if requested not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {requested!r}")
    if requested == "fp16" and device.type != "cuda":
        raise ValueError("fp16 training needs CUDA (for its GradScaler); use bf16 or fp32 on the CPU")
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"
    return "fp32"


def fused_is_safe(optimizer_class: type, device: torch.device, kwargs: dict) -> bool:
    """Whether `fused=True` may be added: Adam/AdamW only, not chosen otherwise by the
    caller, on CUDA, or on the CPU from torch 2.4."""
    if optimizer_class not in FUSABLE_OPTIMIZERS:
        return False
    if "fused" in kwargs or "foreach" in kwargs or kwargs.get("differentiable"):
        return False
    return device.type == "cuda" or (device.type == "cpu" and torch_version() >= (2, 4))


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside torch.compile's and DDP's wrappers."""
    model = getattr(model, "_orig_mod", model)
    return model.module if isinstance(model, DistributedDataParallel) else model


class Trainer:
    """Set up a model, optimizer and data for fast training, and run the training step.

    device            None: CUDA (this process's LOCAL_RANK) when available, else the CPU
    precision         "auto", "fp32", "bf16" or "fp16" (see `resolve_precision`)
    grad_accum_steps  micro-batches per optimizer step; the loss is divided by it
    max_grad_norm     clip the gradient norm to this (after unscaling); None: no clipping
    compile           wrap the model in `torch.compile`
    channels_last     channels-last model and 4-D inputs (conv nets under autocast)
    cudnn_benchmark   let cuDNN pick the fastest kernels; turn off when input shapes vary
    log_every         read and print the tracked metrics every this many optimizer steps
    progress          show a progress bar in `fit` (on a terminal, on the main process)
    """

    def __init__(self, *, device: str | torch.device | None = None, precision: str = "auto",
                 grad_accum_steps: int = 1, max_grad_norm: float | None = None, compile: bool = False,
                 channels_last: bool = False, cudnn_benchmark: bool = True, log_every: int = 10,
                 progress: bool = True) -> None:
        if grad_accum_steps < 1 or log_every < 1:
            raise ValueError("grad_accum_steps and log_every must be at least 1")
        self.placement = placement_from_env(device)
        self.device = self.placement.device
        self._owns_process_group = init_process_group(self.placement)
        self.precision = resolve_precision(precision, self.device)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.grad_accum_steps = grad_accum_steps
        self.max_grad_norm = max_grad_norm
        self.compile = compile
        self.channels_last = channels_last
        self.log_every = log_every
        self.progress = progress
        if self.device.type == "cuda":
            torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls
            torch.backends.cudnn.benchmark = cudnn_benchmark
        self.global_step = 0  # optimizer steps taken
        self.epoch = 0  # passes over the data started by `batches`
        self._micro_batches = 0  # backward passes since the last optimizer step
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}

    @property
    def is_main(self) -> bool:
        return self.placement.is_main

    # -- setting up ----------------------------------------------------------------------

    def setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model on the device; channels-last, DDP-wrapped and compiled as configured."""
        model = model.to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if self.placement.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids)
        if self.compile:
            model = torch.compile(model)
        return model

    def setup_optimizer(self, optimizer_class: type[torch.optim.Optimizer], params: Iterable, **kwargs: Any
                        ) -> torch.optim.Optimizer:
        """`optimizer_class(params, **kwargs)`, fused where that is safe (`fused_is_safe`).

        Call it after `setup_model`, with the parameters on the device."""
        if fused_is_safe(optimizer_class, self.device, kwargs):
            kwargs["fused"] = True
        return optimizer_class(params, **kwargs)

    def dataloader(self, dataset: Dataset, batch_size: int, *, shuffle: bool = False, **kwargs: Any) -> DataLoader:
        """A DataLoader with workers, pinned memory and prefetching (see `perflint_runtime.data`)."""
        return build_dataloader(dataset, batch_size, self.placement, shuffle=shuffle, **kwargs)

    # -- the training step ---------------------------------------------------------------

    def to_device(self, batch: Any) -> Any:
        return move_to_device(batch, self.device, self.channels_last)

    def batches(self, loader: DataLoader) -> Iterator[Any]:
        """The loader's batches on the device, epoch after epoch, without end.

        Each call starts a new pass over the data; `epoch` counts the passes started (it
        seeds the shuffling of a DistributedSampler)."""
        while True:
            if isinstance(loader.sampler, DistributedSampler):
                loader.sampler.set_epoch(self.epoch)
            self.epoch += 1
            empty = True
            for batch in loader:
                empty = False
                yield self.to_device(batch)
            if empty:
                raise ValueError("the DataLoader yields no batches")

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for the forward pass and the loss (not for backward)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=AUTOCAST_DTYPES[self.precision])

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module) -> Iterator[None]:
        """Wrap forward and backward of one micro-batch: DDP skips its gradient all-reduce
        unless this micro-batch completes the accumulation window."""
        ddp = getattr(model, "_orig_mod", model)  # under torch.compile
        steps_next = self._micro_batches + 1 == self.grad_accum_steps
        if steps_next or not isinstance(ddp, DistributedDataParallel):
            yield
            return
        with ddp.no_sync():
            yield

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate one micro-batch's loss, divided by `grad_accum_steps` and scaled for fp16."""
        self._micro_batches += 1
        loss = loss / self.grad_accum_steps
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def step(self, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> bool:
        """Update the weights once the accumulation window is full; True when it did."""
        if self._micro_batches < self.grad_accum_steps:
            return False
        self._micro_batches = 0
        if self.max_grad_norm is not None:
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            params = [p for group in optimizer.param_groups for p in group["params"]]
            self.track(grad_norm=torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()
        self.global_step += 1
        return True

    # -- metrics -------------------------------------------------------------------------

    def track(self, **values: torch.Tensor | float) -> None:
        """Add values to running sums kept on the device: no host sync."""
        for name, value in values.items():
            if name not in self._sums:
                self._sums[name] = torch.zeros((), device=self.device)
                self._counts[name] = 0
            self._sums[name] += value.detach().float() if isinstance(value, torch.Tensor) else float(value)
            self._counts[name] += 1

    def read_metrics(self) -> dict[str, float]:
        """The means of the tracked values since the last read, over all processes; one host sync."""
        if not self._sums:
            return {}
        names = list(self._sums)
        sums = torch.stack([self._sums[n] for n in names])
        counts = torch.tensor([self._counts[n] for n in names], dtype=torch.float32, device=self.device)
        means = all_reduce_mean(sums / counts, self.placement).tolist()
        self._sums.clear()
        self._counts.clear()
        return dict(zip(names, means))

    def print(self, *args: Any) -> None:
        """`print` on the main process only."""
        if self.is_main:
            print(*args, flush=True)

    # -- the whole loop ------------------------------------------------------------------

    def fit(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader, loss_fn: LossFn, *,
            steps: int, scheduler: Any = None, checkpoint_path: str | None = None,
            checkpoint_every: int = 0) -> dict[str, float]:
        """Train until `global_step` reaches `steps`; return the last metrics read.

        `loss_fn(model, batch)` returns the loss, or `(loss, {name: tensor})` with more
        values to track (accuracy, say).  Every `log_every` steps the means are printed;
        every `checkpoint_every` steps (if given) a checkpoint is written to
        `checkpoint_path`.
        """
        metrics: dict[str, float] = {}
        if self.global_step >= steps:
            return metrics
        model.train()
        bar = self._progress_bar()
        task = bar.add_task("training", total=steps, completed=self.global_step)
        last_time, last_step = time.perf_counter(), self.global_step
        with bar:
            for batch in self.batches(loader):
                with self.accumulate(model):
                    with self.autocast():
                        out = loss_fn(model, batch)
                    loss, extra = out if isinstance(out, tuple) else (out, {})
                    self.backward(loss)
                self.track(loss=loss, **extra)
                if not self.step(optimizer, scheduler):
                    continue
                bar.advance(task)
                if self.global_step % self.log_every == 0 or self.global_step == steps:
                    metrics = self.read_metrics()
                    now = time.perf_counter()
                    ms = (now - last_time) * 1e3 / (self.global_step - last_step)
                    last_time, last_step = now, self.global_step
                    if self.is_main:
                        bar.console.print(format_log(self.global_step, steps, metrics, ms), highlight=False)
                if checkpoint_path and checkpoint_every and self.global_step % checkpoint_every == 0:
                    self.save_checkpoint(checkpoint_path, model, optimizer, scheduler)
                if self.global_step >= steps:
                    break
        return metrics

    def _progress_bar(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        console = Console()
        show = self.progress and self.is_main and console.is_terminal
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=console, disable=not show)

    # -- checkpoints ---------------------------------------------------------------------

    def save_checkpoint(self, path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        scheduler: Any = None, **extra: Any) -> None:
        """Write everything needed to continue exactly: weights, optimizer, scaler,
        scheduler, step count and random-number states (the main process writes).

        `extra` values must be plain data (numbers, strings, lists, dicts, tensors):
        `load_checkpoint` reads with `weights_only=True`, which refuses arbitrary objects
        such as an `argparse.Namespace` (save `vars(args)` instead)."""
        state = {
            "model": unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "global_step": self.global_step,
            "epoch": self.epoch,
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
                "python": random.getstate(),
            },
            "extra": extra,
        }
        if self.is_main:
            tmp = f"{path}.tmp"
            torch.save(state, tmp)
            os.replace(tmp, path)
        barrier(self.placement)

    def load_checkpoint(self, path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        scheduler: Any = None) -> dict[str, Any]:
        """Restore what `save_checkpoint` wrote; return its `extra` values.

        The data order continues from the restored random state, not from the position
        in the interrupted epoch."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        if scheduler is not None and state["scheduler"] is not None:
            scheduler.load_state_dict(state["scheduler"])
        self.global_step = state["global_step"]
        self.epoch = state["epoch"]
        self._micro_batches = 0
        torch.set_rng_state(state["rng"]["torch"])
        if self.device.type == "cuda" and state["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        random.setstate(state["rng"]["python"])
        return state["extra"]

    def close(self) -> None:
        """Leave the process group if this trainer joined it (after every process got here)."""
        if self._owns_process_group:
            barrier(self.placement)
            torch.distributed.destroy_process_group()
            self._owns_process_group = False


def format_log(step: int, steps: int, metrics: dict[str, float], ms_per_step: float) -> str:
    values = " ".join(f"{name} {value:.4g}" for name, value in metrics.items())
    return f"step {step}/{steps} {values} ({ms_per_step:.1f} ms/step)"
