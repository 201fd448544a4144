"""Training state on disk, resumable exactly: `Trainer.save_state` and `Trainer.load_state`.

A state directory holds one subdirectory per saved step and a `latest` pointer:

    state/
      latest                  "step_000001200" (replaced atomically, after the step is complete)
      step_000001000/         torch.distributed.checkpoint: model and optimizer (sharded under
        .metadata             FSDP, written once for DDP's replicated tensors), and per rank:
        __0_0.distcp ...
        rank0.pt rank1.pt     step, epoch, position in the epoch, scheduler, GradScaler,
                              random states (torch, CUDA, numpy, random) and `extra`
      step_000001200/

A step is written to `step_N.tmp/` and renamed once every rank has finished, so a
process killed while saving leaves the previous step and pointer intact.  Every rank
takes part in saving and loading (they are collectives), and every rank writes to the
same directory: on several machines it must be on a shared file system.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist

LATEST = "latest"
PREFIX = "step_"


def step_name(step: int) -> str:
    return f"{PREFIX}{step:09d}"


def capture_rng(device: torch.device) -> dict[str, Any]:
    """This process's random states, as plain data (loadable with `weights_only=True`)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached)]
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"], device)
    if state.get("numpy") is not None:
        import numpy as np

        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))


@contextlib.contextmanager
def _single_process_quiet() -> Iterator[None]:
    """Without a process group, torch.distributed.checkpoint warns that it assumes one process: it is one."""
    with warnings.catch_warnings():
        if not dist.is_initialized():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _rank_world() -> tuple[int, int]:
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def resolve(directory: str | os.PathLike) -> Path | None:
    """The step directory that `directory` points to: through its `latest` pointer, or
    `directory` itself when it is one step's checkpoint; None when there is none yet."""
    directory = Path(directory)
    pointer = directory / LATEST
    if pointer.is_file():
        return directory / pointer.read_text().strip()
    if (directory / ".metadata").is_file():
        return directory
    return None


def save(directory: str | os.PathLike, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         local_state: dict[str, Any], keep_last: int | None) -> Path:
    """Write one step's state under `directory` (every rank calls this); return its path."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    rank, _ = _rank_world()
    directory = Path(directory)
    final = directory / step_name(step)
    tmp = directory / f"{step_name(step)}.tmp"
    if rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a process killed while saving
        tmp.mkdir()
    _barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    with _single_process_quiet():
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(tmp),
                 no_dist=not dist.is_initialized())
    torch.save(local_state, tmp / f"rank{rank}.pt")
    _barrier()
    if rank == 0:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        pointer_tmp = directory / f"{LATEST}.tmp"
        pointer_tmp.write_text(final.name + "\n")
        os.replace(pointer_tmp, directory / LATEST)
        if keep_last is not None:
            steps = sorted(p for p in directory.glob(f"{PREFIX}*") if p.is_dir() and not p.name.endswith(".tmp"))
            for old in steps[:-keep_last]:
                if old != final:
                    shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore the model and optimizer from `path` (every rank calls this); return this rank's
    own state (counters, scheduler, scaler, random states)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    rank, world = _rank_world()
    local_file = path / f"rank{rank}.pt"
    if not local_file.is_file():
        raise ValueError(f"{path} has no state for rank {rank}: it was saved by a different number of processes "
                         f"than {world}; exact resumption needs the same number")
    local_state = torch.load(local_file, map_location="cpu", weights_only=True)
    if local_state["world_size"] != world:
        raise ValueError(f"{path} was saved by {local_state['world_size']} processes, not {world}: exact "
                         "resumption needs the same number")
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    with _single_process_quiet():
        dcp.load(state, checkpoint_id=str(path), no_dist=not dist.is_initialized())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return local_state
