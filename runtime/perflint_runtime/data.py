"""Loading batches fast: a DataLoader with the options perflint's PF1 rules ask for.

* worker processes from the CPU count (shared between the processes of one machine),
  so that decoding and augmentation run beside the training step (PF101);
* pinned memory when the batches go to CUDA, so that the copies can be asynchronous
  (PF102), and `non_blocking=True` copies (PF105);
* persistent workers and a deeper prefetch, so that workers are not restarted every
  epoch (PF103); the options are only passed with workers (PF104).

Under several processes each rank reads its own part of the data: a map-style dataset
through `ResumableSampler` (a `DistributedSampler` that can also start part-way into an
epoch), an IterableDataset through `RankShard` (every world-size-th item of each loader
worker's stream).  The loader's generator is seeded per rank, so that workers draw
different augmentations on every rank, and per epoch, so that a resumed run draws the
same ones as an uninterrupted run.

Persistent workers keep their own copy of the dataset: a dataset that changes between
epochs (a curriculum, `set_epoch` on an IterableDataset) needs `persistent_workers=False`.
An IterableDataset must shard itself between loader workers with
`torch.utils.data.get_worker_info()`, or every worker yields every sample.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Iterator

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


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from `parts` (a base seed, a rank, a purpose...): stable across runs and
    machines, and unrelated for neighbouring inputs (seed 1 on rank 0 is not seed 0 on rank 1)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class ResumableSampler(DistributedSampler):
    """`DistributedSampler` (same order, same padding) that can start part-way into an epoch.

    `start_at(n)` makes the next pass skip its first `n` indices, so a run resumed after
    `k` batches of size `b` continues with the batch it would have drawn next
    (`n = k * b`).  With one process it shuffles (or not) the whole dataset, seeded by
    `seed` and the epoch, instead of from the global random state."""

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, *, shuffle: bool, seed: int = 0,
                 drop_last: bool = False) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self._start = 0

    def start_at(self, index: int) -> None:
        self._start = index

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        start, self._start = self._start, 0
        return iter(indices[start:])

    def real_samples(self) -> int:
        """How many of this rank's indices are real (the rest repeat others' samples as padding)."""
        if self.drop_last:
            return self.num_samples
        return max(0, -(-(len(self.dataset) - self.rank) // self.num_replicas))  # ceil((N - rank) / world)


class RankShard(IterableDataset):
    """This rank's part of an IterableDataset: of every `world_size` consecutive items of a
    loader worker's stream, the `rank`-th.

    With `even=True` (for training) an incomplete last group is dropped, so that every
    rank yields the same number of items and no rank waits at a collective for one that
    ran out of data; with `even=False` (for evaluation) every item is yielded exactly once
    over the ranks.  The dataset is read in full on every rank: a dataset that can read
    only its own part should do so itself (and not be wrapped)."""

    def __init__(self, dataset: IterableDataset, rank: int, world_size: int, *, even: bool = True) -> None:
        self.dataset, self.rank, self.world_size, self.even = dataset, rank, world_size, even

    def __iter__(self) -> Iterator[Any]:
        group: list[Any] = []
        for item in self.dataset:
            group.append(item)
            if len(group) == self.world_size:
                yield group[self.rank]
                group = []
        if group and not self.even and self.rank < len(group):
            yield group[self.rank]

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)


def build_dataloader(dataset: Dataset, batch_size: int, placement: Placement, *, shuffle: bool = False,
                     num_workers: int | None = None, seed: int = 0, worker_seed: int | None = None,
                     evaluation: bool = False, **kwargs: Any) -> DataLoader:
    """A DataLoader for `placement`'s device; `kwargs` (any DataLoader option) override the defaults.

    `seed` orders the shuffling (the same on every rank); `worker_seed` (default: from
    torch's initial seed) seeds the workers, differently on each rank.  `evaluation`
    shards an IterableDataset without dropping its uneven tail."""
    workers = default_num_workers(_processes_per_machine(placement)) if num_workers is None else num_workers
    if worker_seed is None:
        worker_seed = torch.initial_seed()
    generator = torch.Generator()
    generator.manual_seed(derive_seed(worker_seed, placement.rank, "loader"))
    options: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": placement.device.type == "cuda",
        "persistent_workers": workers > 0,
        "prefetch_factor": PREFETCH_FACTOR if workers > 0 else None,
        "generator": generator,
    }
    if isinstance(dataset, IterableDataset):
        if shuffle:
            raise ValueError("an IterableDataset orders itself: shuffle=True needs a map-style dataset")
        if placement.distributed and not isinstance(dataset, RankShard):
            dataset = RankShard(dataset, placement.rank, placement.world_size, even=not evaluation)
    elif "sampler" not in kwargs and "batch_sampler" not in kwargs:
        options["sampler"] = ResumableSampler(dataset, placement.world_size, placement.rank, shuffle=shuffle,
                                              seed=seed)
    options.update(kwargs)
    loader = DataLoader(dataset, batch_size=batch_size, **options)
    loader._perflint_worker_seed = derive_seed(worker_seed, placement.rank, "loader")  # re-seeded per epoch
    return loader


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
