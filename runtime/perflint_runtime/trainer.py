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
DistributedDataParallel (`ddp_kwargs` passed on), or shards it with FSDP2
(`strategy="fsdp"`, see `perflint_runtime.parallel`).  Every rank must call the
collectives (`setup_model`, `fit`, `read_metrics`, `evaluate`, `save_state`, `load_state`,
`full_state_dict`, `close`).

Resuming exactly: `fit(..., state_dir="state", save_every=1000)` saves every 1000 steps and
on SIGTERM, and a new run of the same script continues from the latest saved step with
the same weights, optimizer, scheduler, random states (per rank) and the next batch of the
interrupted epoch (`save_state` / `load_state`, `perflint_runtime.checkpoint`).  Calling
`fit` again continues the pass over the data in progress.  `evaluate` averages per-sample
values over every sample once, across ranks.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from perflint_runtime import checkpoint
from perflint_runtime.data import ResumableSampler, build_dataloader, derive_seed, move_to_device
from perflint_runtime.distributed import (all_reduce_mean, all_reduce_sum, barrier, broadcast_from_rank0,
                                          init_process_group, init_single_process_group, placement_from_env)
from perflint_runtime.loggers import LogHook
from perflint_runtime.parallel import (STRATEGIES, checkpoint_activations, find_layers, is_fsdp, local_value,
                                       wrap_ddp, wrap_fsdp)

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
FUSABLE_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM

LossFn = Callable[[torch.nn.Module, Any], Any]
EvalFn = Callable[[torch.nn.Module, Any], "dict[str, torch.Tensor]"]


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


def seed_everything(seed: int, rank: int = 0) -> int:
    """Seed torch (CPU and every CUDA device), numpy and `random` for this rank; return the seed
    used, which differs between ranks and is the same in every run."""
    rank_seed = derive_seed(seed, rank)
    torch.manual_seed(rank_seed)
    random.seed(rank_seed)
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        np.random.seed(rank_seed % 2**32)
    return rank_seed


def set_deterministic() -> None:
    """Reproducible kernels: no cudnn.benchmark, no TF32, deterministic algorithms where torch
    has them (a warning, not an error, for an operation that has none)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)


def split_loss(out: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """A loss function's result as (loss, values to track): the loss alone, `(loss, {name:
    scalar})` (each scalar tracked; other values ignored) or `(loss, anything)` (ignored)."""
    if not isinstance(out, (tuple, list)):
        return out, {}
    if not out:
        raise ValueError("the loss function returned an empty tuple")
    loss, rest = out[0], out[1:]
    extra: dict[str, Any] = {}
    if len(rest) == 1 and isinstance(rest[0], dict):
        for name, value in rest[0].items():
            if isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1):
                extra[name] = value
    return loss, extra


def real_samples(sampler: Any) -> int | None:
    """How many of this rank's indices from a DistributedSampler are not padding (None for
    other samplers)."""
    if isinstance(sampler, ResumableSampler):
        return sampler.real_samples()
    if isinstance(sampler, DistributedSampler):
        if sampler.drop_last:
            return sampler.num_samples
        return max(0, -(-(len(sampler.dataset) - sampler.rank) // sampler.num_replicas))
    return None


class _Preemption:
    """SIGTERM sets a flag (the step in progress finishes; the loop saves and exits)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> "_Preemption":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


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
    strategy          "ddp" (whole model on every process) or "fsdp" (FSDP2, sharded; see
                      `perflint_runtime.parallel`); one process runs either unwrapped/sharded over one
    seed              seed torch, CUDA, numpy and `random` now, differently on every rank, the
                      same in every run; also orders the shuffling and seeds loader workers
    deterministic     no cudnn.benchmark, no TF32, deterministic algorithms where they exist
    ddp_kwargs        passed to DistributedDataParallel (find_unused_parameters, static_graph...)
    activation_checkpointing  recompute each layer's activations in backward (layers as FSDP's)
    fsdp_layers       module classes that make a layer (for FSDP and activation checkpointing)
    sync_batchnorm    convert BatchNorm layers to SyncBatchNorm under DDP (CUDA only)
    on_log            a hook or hooks `hook(step, metrics)` called on the main process at every
                      log line (see `perflint_runtime.loggers`: CSVWriter, TensorBoardWriter)

    Collectives: under several processes every rank must call `setup_model`, `fit`,
    `read_metrics`, `evaluate`, `save_state`, `load_state`, `full_state_dict`, `barrier` and
    `close`, in the same order; guarding one of them with `if trainer.is_main:` makes the
    others wait for ever.  `save_checkpoint`, `load_checkpoint` and `print` are safe anywhere.
    """

    def __init__(self, *, device: str | torch.device | None = None, precision: str = "auto",
                 grad_accum_steps: int = 1, max_grad_norm: float | None = None, compile: bool = False,
                 channels_last: bool = False, cudnn_benchmark: bool = True, log_every: int = 10,
                 progress: bool = True, strategy: str = "ddp", seed: int | None = None, deterministic: bool = False,
                 ddp_kwargs: dict[str, Any] | None = None, activation_checkpointing: bool = False,
                 fsdp_layers: Iterable[type] | None = None, sync_batchnorm: bool = False,
                 on_log: LogHook | Iterable[LogHook] | None = None) -> None:
        if grad_accum_steps < 1 or log_every < 1:
            raise ValueError("grad_accum_steps and log_every must be at least 1")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        if ddp_kwargs and strategy != "ddp":
            raise ValueError("ddp_kwargs are for strategy='ddp'")
        if sync_batchnorm and strategy != "ddp":
            raise ValueError("sync_batchnorm is for strategy='ddp'")
        self.placement = placement_from_env(device)
        self.device = self.placement.device
        self._owns_process_group = init_process_group(self.placement)
        self.precision = resolve_precision(precision, self.device)
        if sync_batchnorm and self.device.type != "cuda":
            raise ValueError("sync_batchnorm needs CUDA: DDP refuses SyncBatchNorm layers on the CPU")
        self.strategy = strategy
        if strategy == "fsdp":
            if self.precision == "fp16":
                raise ValueError("strategy='fsdp' with fp16 is not supported (a GradScaler would skip steps on "
                                 "some ranks only): use bf16, or DDP")
            self._owns_process_group |= init_single_process_group(self.placement)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.grad_accum_steps = grad_accum_steps
        self.max_grad_norm = max_grad_norm
        self.compile = compile
        self.channels_last = channels_last
        self.log_every = log_every
        self.progress = progress
        self.seed = seed
        self.deterministic = deterministic
        self.ddp_kwargs = dict(ddp_kwargs or {})
        self.activation_checkpointing = activation_checkpointing
        self.fsdp_layers = tuple(fsdp_layers) if fsdp_layers else None
        self.sync_batchnorm = sync_batchnorm
        self.on_log: list[LogHook] = [on_log] if callable(on_log) else list(on_log or [])
        if seed is not None:
            seed_everything(seed, self.placement.rank)
        if deterministic:
            set_deterministic()
        elif self.device.type == "cuda":
            torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls
            torch.backends.cudnn.benchmark = cudnn_benchmark
        self.global_step = 0  # optimizer steps taken
        self.epoch = 0  # passes over the training data completed (the one in progress, counted from 0)
        self.batch_in_epoch = 0  # batches taken from the pass in progress
        self.skipped_steps = 0  # optimizer steps the GradScaler skipped (fp16 overflow)
        self._micro_batches = 0  # backward passes since the last optimizer step
        self._stream: tuple[DataLoader, Iterator[Any]] | None = None
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}
        self._resumed_from: set[str] = set()
        self._signal_group: Any = None

    @property
    def is_main(self) -> bool:
        return self.placement.is_main

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    # -- setting up ----------------------------------------------------------------------

    def setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model on the device, with rank 0's weights on every rank; SyncBatchNorm,
        channels-last, activation checkpointing, DDP or FSDP, and compiled, as configured."""
        model = model.to(self.device)
        if self.sync_batchnorm and self.placement.distributed and self.strategy == "ddp":
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if self.activation_checkpointing or self.strategy == "fsdp":
            layers = find_layers(model, self.fsdp_layers)
            if self.activation_checkpointing:
                if not layers:
                    raise ValueError("activation_checkpointing found no layers: pass fsdp_layers=(YourBlock,)")
                checkpoint_activations(layers)
        if self.strategy == "fsdp":
            broadcast_from_rank0(model)
            model = wrap_fsdp(model, self.device, self.precision, layers)
        elif self.placement.distributed:
            model = wrap_ddp(model, self.device, self.ddp_kwargs)  # broadcasts rank 0's weights
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

    def dataloader(self, dataset: Dataset, batch_size: int, *, shuffle: bool = False, evaluation: bool = False,
                   **kwargs: Any) -> DataLoader:
        """A DataLoader with workers, pinned memory and prefetching (see `perflint_runtime.data`),
        this rank's share of the data, and an order that a resumed run can continue.

        `evaluation=True` is for `evaluate`: an IterableDataset keeps its uneven tail (a
        map-style one is padded as DistributedSampler pads, and `evaluate` does not count
        the padding)."""
        shuffle_seed = self.seed if self.seed is not None else 0
        return build_dataloader(dataset, batch_size, self.placement, shuffle=shuffle, seed=shuffle_seed,
                                worker_seed=self.seed, evaluation=evaluation, **kwargs)

    # -- the training step ---------------------------------------------------------------

    def to_device(self, batch: Any) -> Any:
        return move_to_device(batch, self.device, self.channels_last)

    def batches(self, loader: DataLoader) -> Iterator[Any]:
        """The loader's batches on the device, epoch after epoch, without end.

        The trainer keeps its place: another call (or another `fit`) continues the pass in
        progress, and after `load_state` the pass continues from the saved position.  `epoch`
        counts the passes completed (it seeds the shuffling), `batch_in_epoch` the batches
        taken from the pass in progress."""
        while True:
            yield self.next_batch(loader)

    def next_batch(self, loader: DataLoader) -> Any:
        for _ in range(2):
            iterator = self._iterator(loader)
            try:
                batch = next(iterator)
            except StopIteration:
                if self.batch_in_epoch == 0:
                    raise ValueError("the DataLoader yields no batches") from None
                self._end_epoch()
                continue
            self.batch_in_epoch += 1
            if not isinstance(loader.dataset, IterableDataset) and self.batch_in_epoch >= len(loader):
                self._end_epoch()  # known to be the last: the position saved after it is the next pass
            return self.to_device(batch)
        raise ValueError("the DataLoader yields no batches")

    def _end_epoch(self) -> None:
        self.epoch += 1
        self.batch_in_epoch = 0
        self._stream = None

    def _iterator(self, loader: DataLoader) -> Iterator[Any]:
        if self._stream is not None and self._stream[0] is loader:
            return self._stream[1]
        sampler = loader.batch_sampler.sampler if loader.batch_sampler is not None else loader.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        worker_seed = getattr(loader, "_perflint_worker_seed", None)
        if worker_seed is not None and loader.generator is not None:
            loader.generator.manual_seed(derive_seed(worker_seed, self.epoch))
        skip = self.batch_in_epoch
        if skip and isinstance(sampler, ResumableSampler) and loader.batch_size is not None:
            sampler.start_at(skip * loader.batch_size)
            skip = 0
        iterator = iter(loader)
        for _ in range(skip):  # another sampler: read past the batches already trained on
            next(iterator)
        self._stream = (loader, iterator)
        return iterator

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for the forward pass and the loss (not for backward)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=AUTOCAST_DTYPES[self.precision])

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module) -> Iterator[None]:
        """Wrap forward and backward of one micro-batch: DDP and FSDP skip their gradient
        reduction unless this micro-batch completes the accumulation window."""
        inner = getattr(model, "_orig_mod", model)  # under torch.compile
        steps_next = self._micro_batches + 1 == self.grad_accum_steps
        if is_fsdp(inner):
            inner.set_requires_gradient_sync(steps_next)
            yield
            return
        if steps_next or not isinstance(inner, DistributedDataParallel):
            yield
            return
        with inner.no_sync():
            yield

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate one micro-batch's loss, divided by `grad_accum_steps` and scaled for fp16."""
        self._micro_batches += 1
        loss = loss / self.grad_accum_steps
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def step(self, optimizer: torch.optim.Optimizer, scheduler: Any = None) -> bool:
        """Update the weights once the accumulation window is full; True when it did.

        With fp16, a step the GradScaler skips (an overflow) returns False and advances
        neither the scheduler nor `global_step` (`skipped_steps` counts it); finding out
        reads the scale, one host sync per step, as GradScaler does itself with an
        optimizer that is not fused."""
        if self._micro_batches < self.grad_accum_steps:
            return False
        self._micro_batches = 0
        if self.max_grad_norm is not None:
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            params = [p for group in optimizer.param_groups for p in group["params"]]
            norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
            self.track(grad_norm=local_value(norm))
        skipped = False
        if self.scaler is not None:
            scale = self.scaler.get_scale()
            self.scaler.step(optimizer)
            self.scaler.update()
            skipped = self.scaler.get_scale() < scale  # the scale only falls after an overflow
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if skipped:
            self.skipped_steps += 1
            return False
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
            self._sums[name] += value.detach().float().reshape(()) if isinstance(value, torch.Tensor) else float(value)
            self._counts[name] += 1

    def read_metrics(self) -> dict[str, float]:
        """The means of the tracked values since the last read, over all processes; one host sync.

        A collective under several processes: every rank must call it, having tracked the
        same names."""
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

    def barrier(self) -> None:
        """Wait for every process (nothing in a world of one)."""
        if dist.is_initialized():
            dist.barrier()

    # -- evaluation ----------------------------------------------------------------------

    def evaluate(self, model: torch.nn.Module, loader: DataLoader, fn: EvalFn) -> dict[str, float]:
        """The mean of each of `fn`'s per-sample values over the whole evaluation set.

        `fn(model, batch)` returns `{name: tensor of shape [batch size]}` (a loss with
        `reduction="none"`, `(logits.argmax(1) == y).float()`...).  It runs in eval mode under
        `inference_mode` (`no_grad` under FSDP) and autocast; every sample counts exactly once
        over the ranks: the
        padding a DistributedSampler adds is left out.  The model is put back in the mode it
        was in.  A collective: every rank calls it."""
        sums, count = self._evaluation(model, loader, fn, keep=None)
        names = list(sums)
        if not names:
            return {}
        totals = all_reduce_sum(torch.stack([*(sums[n] for n in names), count])).tolist()
        return {name: totals[i] / totals[-1] for i, name in enumerate(names)}

    def evaluate_samples(self, model: torch.nn.Module, loader: DataLoader, fn: EvalFn) -> dict[str, torch.Tensor]:
        """Like `evaluate`, but every sample's values, gathered from every rank (on every rank,
        on the device; in rank order, not the dataset's): for metrics that are not means,
        such as an equal error rate or a confusion matrix."""
        kept: dict[str, list[torch.Tensor]] = {}
        self._evaluation(model, loader, fn, keep=kept)
        return {name: self._all_gather_cat(torch.cat(parts)) for name, parts in kept.items()}

    def _evaluation(self, model: torch.nn.Module, loader: DataLoader, fn: EvalFn,
                    keep: dict[str, list[torch.Tensor]] | None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        fsdp = is_fsdp(model)
        module = model if fsdp else unwrap(model)  # DDP's own forward would broadcast buffers: a collective
        lockstep = fsdp and dist.is_initialized() and dist.get_world_size() > 1
        real = real_samples(loader.sampler)
        was_training = module.training
        module.eval()
        sums: dict[str, torch.Tensor] = {}
        count = torch.zeros((), device=self.device)
        position = 0
        last = None
        iterator = iter(loader)
        try:
            # FSDP allocates its gather buffers on the first forward: made under inference_mode they
            # could not be used by training afterwards, so FSDP evaluates under no_grad
            with (torch.no_grad() if fsdp else torch.inference_mode()), self.autocast():
                while True:
                    batch = next(iterator, None)
                    if lockstep:  # FSDP gathers each layer's weights: every rank runs the same forwards
                        more = torch.tensor([float(batch is not None)], device=self.device)
                        dist.all_reduce(more, op=dist.ReduceOp.MAX)
                        if not more.item():
                            break
                        if batch is None and last is None:
                            raise ValueError("evaluate under FSDP needs at least one batch on every rank")
                    elif batch is None:
                        break
                    replay = batch is None
                    batch = last if replay else batch
                    last = batch
                    values = fn(module, self.to_device(batch))
                    if not isinstance(values, dict) or not values:
                        raise TypeError("the evaluation function must return a dict of per-sample tensors")
                    size = None
                    for name, value in values.items():
                        if not isinstance(value, torch.Tensor) or value.dim() != 1:
                            raise ValueError(f"evaluation value {name!r} must be a tensor of shape [batch size], "
                                             f"one value per sample")
                        if size is None:
                            size = value.shape[0]
                        elif value.shape[0] != size:
                            raise ValueError("evaluation values of one batch must have the same length")
                    index = torch.arange(position, position + size, device=self.device)
                    weight = torch.zeros(size, device=self.device) if replay else (
                        (index < real).float() if real is not None else torch.ones(size, device=self.device))
                    if not replay:
                        position += size
                    count += weight.sum()
                    for name, value in values.items():
                        total = sums.get(name, torch.zeros((), device=self.device))
                        sums[name] = total + (value.float() * weight).sum()
                        if keep is not None and not replay:
                            keep.setdefault(name, []).append(value[weight.bool()].clone() if real is not None
                                                             else value.clone())
        finally:
            module.train(was_training)
        return {name: value.clone() for name, value in sums.items()}, count.clone()

    def _all_gather_cat(self, tensor: torch.Tensor) -> torch.Tensor:
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return tensor
        world = dist.get_world_size()
        size = torch.tensor([tensor.shape[0]], device=tensor.device)
        sizes = [torch.zeros_like(size) for _ in range(world)]
        dist.all_gather(sizes, size)
        sizes_list = [int(s.item()) for s in sizes]
        padded = tensor.new_zeros((max(sizes_list), *tensor.shape[1:]))
        padded[:tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        return torch.cat([part[:n] for part, n in zip(parts, sizes_list)])

    # -- the whole loop ------------------------------------------------------------------

    def fit(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader, loss_fn: LossFn, *,
            steps: int, scheduler: Any = None, checkpoint_path: str | None = None, checkpoint_every: int = 0,
            state_dir: str | os.PathLike | None = None, save_every: int = 0, resume: str | bool = "auto",
            keep_last: int | None = 2, profiler: Any = None) -> dict[str, float]:
        """Train until `global_step` reaches `steps`; return the last metrics read.

        `loss_fn(model, batch)` returns the loss, `(loss, {name: tensor})` with more values
        to track (accuracy, say), or `(loss, anything else)` (logits, say: ignored).  Every
        `log_every` steps the means are printed and passed to the `on_log` hooks.  Another
        call continues where this one stopped, in the same pass over the data.

        With `state_dir`, the state is saved there (`save_state`) every `save_every` steps
        (0: never on a schedule) and when the process receives SIGTERM: the step in progress
        finishes, every rank saves, and the process exits with status 143.  `resume="auto"`
        first loads the latest state in `state_dir`, if there is one (once per trainer and
        directory).  `profiler` (a running `torch.profiler.profile`, see `profiler()`) is
        stepped after every optimizer step.  `checkpoint_path` / `checkpoint_every` write the
        single-file checkpoint of `save_checkpoint`.
        """
        if state_dir is not None and resume and os.fspath(state_dir) not in self._resumed_from:
            self._resumed_from.add(os.fspath(state_dir))
            if checkpoint.resolve(state_dir) is not None:
                self.load_state(state_dir, model, optimizer, scheduler)
        metrics: dict[str, float] = {}
        if self.global_step >= steps:
            return metrics
        model.train()
        bar = self._progress_bar()
        task = bar.add_task("training", total=steps, completed=self.global_step)
        last_time, last_step = time.perf_counter(), self.global_step
        with bar, _Preemption() as preemption:
            for batch in self.batches(loader):
                with self.accumulate(model):
                    with self.autocast():
                        loss, extra = split_loss(loss_fn(model, batch))
                    self.backward(loss)
                self.track(loss=loss, **extra)
                if not self.step(optimizer, scheduler):
                    continue
                if profiler is not None:
                    profiler.step()
                bar.advance(task)
                if self.global_step % self.log_every == 0 or self.global_step == steps:
                    metrics = self.read_metrics()
                    now = time.perf_counter()
                    ms = (now - last_time) * 1e3 / (self.global_step - last_step)
                    last_time, last_step = now, self.global_step
                    if self.is_main:
                        bar.console.print(format_log(self.global_step, steps, metrics, ms), highlight=False)
                        self._call_log_hooks(metrics, optimizer, ms)
                if state_dir is not None:
                    stop = self._stop_requested(preemption)
                    if stop or (save_every and self.global_step % save_every == 0):
                        self.save_state(state_dir, model, optimizer, scheduler, keep_last=keep_last)
                    if stop:
                        self.print(f"SIGTERM: state saved at step {self.global_step} in {state_dir}; exiting")
                        raise SystemExit(PREEMPTED_EXIT_CODE)
                if checkpoint_path and checkpoint_every and self.global_step % checkpoint_every == 0:
                    self.save_checkpoint(checkpoint_path, model, optimizer, scheduler)
                if self.global_step >= steps:
                    break
        return metrics

    def _call_log_hooks(self, metrics: dict[str, float], optimizer: torch.optim.Optimizer, ms: float) -> None:
        if not self.on_log:
            return
        values = {**metrics, "lr": float(optimizer.param_groups[0]["lr"]), "ms_per_step": ms}
        for hook in self.on_log:
            hook(self.global_step, values)

    def _stop_requested(self, preemption: _Preemption) -> bool:
        """Whether any rank received SIGTERM: a one-number all-reduce on the host (Gloo), no
        device sync."""
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return preemption.requested
        if self._signal_group is None:
            self._signal_group = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        flag = torch.tensor([int(preemption.requested)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._signal_group)
        return bool(flag.item())

    def profiler(self, trace_dir: str | os.PathLike, *, wait: int = 5, warmup: int = 2, active: int = 3,
                 repeat: int = 1, **kwargs: Any) -> Any:
        """A `torch.profiler.profile` on a schedule counted in optimizer steps, writing one
        trace per rank to `trace_dir` (open it in Perfetto or TensorBoard):

            with trainer.profiler("traces") as prof:
                trainer.fit(..., profiler=prof)
        """
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        return profile(activities=activities,
                       schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
                       on_trace_ready=tensorboard_trace_handler(os.fspath(trace_dir),
                                                                worker_name=f"rank{self.placement.rank}"),
                       **kwargs)

    def _progress_bar(self):
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        except ImportError:  # the runtime without perflint's own dependencies: log lines, no bar
            return _PlainProgress()

        console = Console()
        show = self.progress and self.is_main and console.is_terminal
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=console, disable=not show)

    # -- state: exact resumption ---------------------------------------------------------

    def save_state(self, directory: str | os.PathLike, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   scheduler: Any = None, *, keep_last: int | None = None, **extra: Any) -> Path:
        """Save everything a run needs to continue exactly as if it had not stopped, in
        `directory/step_N/` (see `perflint_runtime.checkpoint`); return that path.

        Model and optimizer in `torch.distributed.checkpoint` format (each rank writes its
        shards under FSDP); scheduler, GradScaler, step, epoch, the position in the epoch and
        this rank's random states in a file per rank.  Written to a temporary directory and
        renamed, then the `latest` pointer is replaced; `keep_last` (None: all) older steps are
        kept.  Every rank must call it, between optimizer steps.  `extra` values are plain
        data (numbers, strings, lists, dicts, tensors)."""
        if self._micro_batches:
            raise RuntimeError("save_state in the middle of an accumulation window: call it after `step` "
                               "returned True")
        local_state = {
            "global_step": self.global_step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "skipped_steps": self.skipped_steps,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": checkpoint.capture_rng(self.device),
            "world_size": self.placement.world_size,
            "extra": extra,
        }
        return checkpoint.save(directory, self.global_step, model, optimizer, local_state, keep_last)

    def load_state(self, directory: str | os.PathLike, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   scheduler: Any = None) -> dict[str, Any]:
        """Restore what `save_state` wrote (the latest step in `directory`, or the step
        directory given); return its `extra` values.  Every rank must call it, after
        `setup_model` and `setup_optimizer`.  The next batch is the one the saved run would
        have taken next; the same number of processes is needed."""
        path = checkpoint.resolve(directory)
        if path is None:
            raise FileNotFoundError(f"no saved state in {directory}")
        state = checkpoint.load(path, model, optimizer)
        if scheduler is not None and state["scheduler"] is not None:
            scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.global_step = state["global_step"]
        self.epoch = state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        self.skipped_steps = state["skipped_steps"]
        self._micro_batches = 0
        self._stream = None
        checkpoint.restore_rng(state["rng"], self.device)
        return state["extra"]

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's weights on the CPU, unsharded, on rank 0 (an empty dict on the
        other ranks), with the names of the unwrapped module: for export
        (`torch.save(trainer.full_state_dict(model), "model.pt")` under `if trainer.is_main`).
        Every rank must call it (FSDP gathers the shards)."""
        if not (dist.is_initialized() and dist.get_world_size() > 1) and not is_fsdp(model):
            return {name: value.detach().cpu().clone() for name, value in unwrap(model).state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return state if self.is_main else {}

    # -- single-file checkpoints (DDP or one process) --------------------------------------

    def save_checkpoint(self, path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        scheduler: Any = None, **extra: Any) -> None:
        """Write weights, optimizer, scaler, scheduler, step count and rank 0's random states
        to one file, atomically (rank 0 writes; other ranks return at once).  No collective:
        it may be called on every rank or under `if trainer.is_main:`.  Other ranks that
        read the file right away should `barrier()` first.  Not for FSDP; for an exact
        resumption (position in the epoch, every rank's random states) use `save_state`.

        `extra` values must be plain data (numbers, strings, lists, dicts, tensors):
        `load_checkpoint` reads with `weights_only=True`, which refuses arbitrary objects
        such as an `argparse.Namespace` (save `vars(args)` instead)."""
        if is_fsdp(model):
            raise ValueError("save_checkpoint keeps whole weights in one file: under FSDP use save_state")
        if not self.is_main:
            return
        state = {
            "model": unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "global_step": self.global_step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
                "python": random.getstate(),
            },
            "extra": extra,
        }
        tmp = f"{path}.tmp"
        torch.save(state, tmp)
        os.replace(tmp, path)

    def load_checkpoint(self, path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        scheduler: Any = None) -> dict[str, Any]:
        """Restore what `save_checkpoint` wrote; return its `extra` values.  No collective.

        Every rank restores rank 0's random states; the data continues from the saved
        position in the epoch."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        if scheduler is not None and state["scheduler"] is not None:
            scheduler.load_state_dict(state["scheduler"])
        self.global_step = state["global_step"]
        self.epoch = state["epoch"]
        self.batch_in_epoch = state.get("batch_in_epoch", 0)
        self._micro_batches = 0
        self._stream = None
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


class _PlainProgress:
    """What `fit` uses of rich's Progress, printing the log lines only."""

    class console:  # noqa: N801 (rich's attribute name)
        @staticmethod
        def print(text: str, **kwargs: Any) -> None:
            print(text, flush=True)

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, task: int) -> None:
        pass

    def __enter__(self) -> "_PlainProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def format_log(step: int, steps: int, metrics: dict[str, float], ms_per_step: float) -> str:
    values = " ".join(f"{name} {value:.4g}" for name, value in metrics.items())
    return f"step {step}/{steps} {values} ({ms_per_step:.1f} ms/step)"
