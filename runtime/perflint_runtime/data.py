"""Loading batches fast: a DataLoader with the options perflint's PF1 rules ask for.

* worker processes from the CPU count (shared between the processes of one machine),
  so that decoding and augmentation run beside the training step (PF101);
* pinned memory when the batches go to CUDA, so that the copies can be asynchronous
  (PF102), and `non_blocking=True` copies (PF105);
* persistent workers and a deeper prefetch, so that workers are not restarted every
  epoch (PF103); the options are only passed with workers (PF104).

Persistent workers keep their own copy of the dataset: a dataset that changes between
epochs (a curriculum, `set_epoch` on an IterableDataset) needs `persistent_workers=False`.
An IterableDataset must shard itself with `torch.utils.data.get_worker_info()`, or every
worker yields every sample.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from perflint_runtime.distributed import Placement

MAX_WORKERS = 8
PREFETCH_FACTOR = 4


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_num_workers(processes_per_machine: int = 1) -> int:
    """Workers per training process: this process's share of the CPUs, less one for itself."""
    share = available_cpus() // max(1, processes_per_machine)
    return max(1, min(MAX_WORKERS, share - 1))


def build_dataloader(dataset: Dataset, batch_size: int, placement: Placement, *, shuffle: bool = False,
                     num_workers: int | None = None, **kwargs: Any) -> DataLoader:
    """A DataLoader for `placement`'s device; `kwargs` (any DataLoader option) override the defaults."""
    workers = default_num_workers(_processes_per_machine(placement)) if num_workers is None else num_workers
    options: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": placement.device.type == "cuda",
        "persistent_workers": workers > 0,
        "prefetch_factor": PREFETCH_FACTOR if workers > 0 else None,
    }
    if isinstance(dataset, IterableDataset):
        options["shuffle"] = None  # an IterableDataset orders itself
    elif placement.distributed:
        options["sampler"] = DistributedSampler(dataset, num_replicas=placement.world_size, rank=placement.rank,
                                                shuffle=shuffle)
    else:
        options["shuffle"] = shuffle
    options.update(kwargs)
    return DataLoader(dataset, batch_size=batch_size, **options)


def _processes_per_machine(placement: Placement) -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", placement.world_size))


def move_to_device(batch: Any, device: torch.device, channels_last: bool = False) -> Any:
    """`batch` (tensors in tuples, lists and dicts) on `device`, copied without blocking the host.

    With `channels_last`, 4-D floating-point tensors (image batches) are also laid out
    channels-last, to match a channels-last model.
    """
    if isinstance(batch, torch.Tensor):
        moved = batch.to(device, non_blocking=True)
        if channels_last and moved.dim() == 4 and moved.is_floating_point():
            moved = moved.contiguous(memory_format=torch.channels_last)
        return moved
    if isinstance(batch, dict):
        return {k: move_to_device(v, device, channels_last) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved_items = [move_to_device(v, device, channels_last) for v in batch]
        if hasattr(batch, "_fields"):  # a namedtuple
            return type(batch)(*moved_items)
        return type(batch)(moved_items)
    return batch
