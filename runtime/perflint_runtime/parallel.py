"""How the trainer spreads a model over processes: DDP or FSDP2, and activation checkpointing.

    "ddp"   every process holds the whole model; gradients are all-reduced (bucketed, during
            backward).  `ddp_kwargs` go to `DistributedDataParallel` as they are
            (`find_unused_parameters=True`, `static_graph=True`, `gradient_as_bucket_view=True`...).
    "fsdp"  FSDP2 (`torch.distributed.fsdp.fully_shard`): parameters, gradients and optimizer
            state sharded over the processes; each layer gathered for its forward and backward.
            Layers are the modules held in an `nn.ModuleList` (transformer blocks), else the
            model's direct children that have parameters; `fsdp_layers` (classes) overrides.
            The mixed-precision policy follows the trainer's precision (bf16 parameters for
            compute, fp32 gradient reduction).

Both start every process from rank 0's weights.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist
import torch.utils.checkpoint
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STRATEGIES = ("ddp", "fsdp")


def find_layers(model: nn.Module, layer_classes: Iterable[type] | None = None) -> list[nn.Module]:
    """The layers to shard and to checkpoint, outermost first; never the model itself."""
    if layer_classes:
        classes = tuple(layer_classes)
        named = [(name, m) for name, m in model.named_modules() if name and isinstance(m, classes)]
    else:
        named = [(f"{name}.{i}" if name else str(i), m) for name, parent in model.named_modules()
                 if isinstance(parent, nn.ModuleList) for i, m in enumerate(parent)]
        if not named:
            named = [(name, m) for name, m in model.named_children() if any(True for _ in m.parameters())]
    outermost = []
    for name, module in named:  # a block inside a block is part of its parent's unit
        if not any(name.startswith(other + ".") for other, _ in named):
            outermost.append(module)
    return outermost


def checkpoint_activations(layers: Iterable[nn.Module]) -> None:
    """Recompute each layer's forward during backward instead of keeping its activations
    (non-reentrant `torch.utils.checkpoint`, random state preserved, so dropout draws the
    same mask twice).  The module is patched in place: its parameter names do not change."""
    for layer in layers:
        if getattr(layer, "_perflint_checkpointed", False):
            continue
        forward = layer.forward

        def checkpointed(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return _forward(*args, **kwargs)
            return torch.utils.checkpoint.checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        layer.forward = checkpointed
        layer._perflint_checkpointed = True


def wrap_ddp(model: nn.Module, device: torch.device, ddp_kwargs: dict[str, Any]) -> DistributedDataParallel:
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, **ddp_kwargs)


def wrap_fsdp(model: nn.Module, device: torch.device, precision: str, layers: list[nn.Module]) -> nn.Module:
    """Shard each layer, then the root (which keeps what is left: embeddings, heads)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def is_fsdp(model: nn.Module) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        return False
    return isinstance(getattr(model, "_orig_mod", model), FSDPModule)


def local_value(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's value as a plain tensor (a replicated norm, for instance); others as they are."""
    full_tensor = getattr(tensor, "full_tensor", None)
    return full_tensor() if full_tensor is not None else tensor
