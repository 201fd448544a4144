"""Process placement under `torchrun`: read the environment, start the process group.

`torchrun --nproc_per_node N train.py` sets WORLD_SIZE, RANK and LOCAL_RANK (and the
rendezvous address) for each process; a plain `python train.py` sets none of them and
runs as a world of one.  Multi-GPU training uses PyTorch's own DistributedDataParallel
over NCCL; on CPUs the same code runs over Gloo.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Placement:
    """Where this process runs."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def placement_from_env(device: str | torch.device | None = None) -> Placement:
    """Read torchrun's variables; choose this process's device.

    `device` None picks CUDA when available; a CUDA device without an index gets this
    process's LOCAL_RANK.
    """
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return Placement(rank, local_rank, world_size, device)


def init_process_group(placement: Placement) -> bool:
    """Join the process group when there is more than one process; True if this call started it."""
    if not placement.distributed or dist.is_initialized():
        return False
    if placement.device.type == "cuda":
        torch.cuda.set_device(placement.device)
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")
    return True


def all_reduce_mean(tensor: torch.Tensor, placement: Placement) -> torch.Tensor:
    """The mean of `tensor` over all processes (the tensor itself in a world of one)."""
    if placement.distributed:
        tensor = tensor.clone()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        tensor /= placement.world_size
    return tensor


def barrier(placement: Placement) -> None:
    if placement.distributed:
        dist.barrier()


def init_single_process_group(placement: Placement) -> bool:
    """A process group of one (for FSDP in a plain `python train.py`); True if this call started it."""
    if dist.is_initialized():
        return False
    if placement.device.type == "cuda":
        torch.cuda.set_device(placement.device)
    backend = "nccl" if placement.device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return True


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of `tensor` over all processes (the tensor itself without a process group)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        tensor = tensor.clone()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_from_rank0(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every process (as DDP does when it wraps a model)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)
