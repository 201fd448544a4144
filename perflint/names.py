"""Resolve torch names through a module's own import statements.

`import torch.nn.functional as F`, `from torch.nn import functional`, `from torch.utils.data
import DataLoader as DL` and `torch.utils.data.dataloader.DataLoader` all resolve to one
canonical dotted name.  This is a small alias table built from the import statements (plus
simple module-level re-bindings such as `Loader = DataLoader`), not libcst's scope analysis,
which costs several times the parse.
"""

from __future__ import annotations

import re

import libcst as cst

# Re-export paths → the public name rules match on.
_CANONICAL = {
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.utils.data.dataset.TensorDataset": "torch.utils.data.TensorDataset",
    "torch.utils.data.dataset.IterableDataset": "torch.utils.data.IterableDataset",
    "torch.utils.data.dataset.Dataset": "torch.utils.data.Dataset",
    "torch.autocast": "torch.amp.autocast",
    "torch.amp.autocast_mode.autocast": "torch.amp.autocast",
    "torch.GradScaler": "torch.amp.GradScaler",
    "torch.amp.grad_scaler.GradScaler": "torch.amp.GradScaler",
    "torch.cuda.amp.autocast_mode.autocast": "torch.cuda.amp.autocast",
    "torch.cuda.amp.grad_scaler.GradScaler": "torch.cuda.amp.GradScaler",
    "torch.cuda.amp.autocast_mode.custom_fwd": "torch.cuda.amp.custom_fwd",
    "torch.cuda.amp.autocast_mode.custom_bwd": "torch.cuda.amp.custom_bwd",
    "torch.cpu.amp.autocast_mode.autocast": "torch.cpu.amp.autocast",
    "torch.cpu.amp.grad_scaler.GradScaler": "torch.cpu.amp.GradScaler",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.autograd.anomaly_mode.detect_anomaly": "torch.autograd.detect_anomaly",
    "torch.autograd.anomaly_mode.set_detect_anomaly": "torch.autograd.set_detect_anomaly",
    "torch.autograd.grad_mode.no_grad": "torch.no_grad",
    "torch.autograd.no_grad": "torch.no_grad",
    "torch.autograd.grad_mode.enable_grad": "torch.enable_grad",
    "torch.autograd.enable_grad": "torch.enable_grad",
    "torch.autograd.grad_mode.set_grad_enabled": "torch.set_grad_enabled",
    "torch.autograd.set_grad_enabled": "torch.set_grad_enabled",
    "torch.autograd.grad_mode.inference_mode": "torch.inference_mode",
    "torch.autograd.inference_mode": "torch.inference_mode",
    "torch.autograd.profiler.emit_nvtx": "torch.autograd.profiler.emit_nvtx",
    "torch.cuda.nvtx.range": "torch.cuda.nvtx.range",
    "torch.nn.utils.clip_grad.clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "torch.nn.utils.clip_grad_value_",
    "torch.compiler.compile": "torch.compile",
    "scipy.signal._signaltools.convolve": "scipy.signal.convolve",
    "scipy.signal.signaltools.convolve": "scipy.signal.convolve",
    "numpy.core.numeric.convolve": "numpy.convolve",
}
_NN_MODULES = re.compile(r"^torch\.nn\.modules(?:\.[a-z_]+)?\.([A-Z]\w*)$")
_OPTIM_SUB = re.compile(r"^torch\.optim\.(?!lr_scheduler|swa_utils)[a-z_]+\.([A-Z]\w*)$")


def canonical(name: str) -> str:
    name = _CANONICAL.get(name, name)
    m = _NN_MODULES.match(name)
    if m:
        return "torch.nn." + m.group(1)
    m = _OPTIM_SUB.match(name)
    if m:
        return "torch.optim." + m.group(1)
    return name


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` → "a.b.c" for Name/Attribute chains; None for anything else."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _module_name(node: cst.BaseExpression | None) -> str | None:
    if node is None:
        return None
    return dotted(node)


class ImportTable:
    """Local name → the dotted module path it stands for."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        # Imports that can only name the project's own modules, kept apart so that they
        # never resolve as library names: `from .engine import train` → "train":
        # ".engine.train"; `from . import utils` → "utils": ".utils"; star imports.
        self.relative: dict[str, str] = {}
        self.stars: list[str] = []

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.aliases[alias.asname.name.value] = full
            else:
                # `import torch.utils.data` binds `torch`.
                head = full.split(".", 1)[0]
                self.aliases.setdefault(head, head)

    def add_import_from(self, node: cst.ImportFrom) -> None:
        module = _module_name(node.module)
        if node.relative:  # `from . import x`: a project module, never torch
            prefix = "." * len(node.relative) + (module or "")
            if isinstance(node.names, cst.ImportStar):
                self.stars.append(prefix)
                return
            for alias in node.names:
                if isinstance(alias.name, cst.Name):
                    local = alias.name.value
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        local = alias.asname.name.value
                    sep = "." if module else ""
                    self.relative[local] = f"{prefix}{sep}{alias.name.value}"
            return
        if module is None:
            return
        if isinstance(node.names, cst.ImportStar):
            self.stars.append(module)
            return
        for alias in node.names:
            if not isinstance(alias.name, cst.Name):
                continue
            local = alias.name.value
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{module}.{alias.name.value}"

    def add_alias(self, local: str, value: cst.BaseExpression) -> None:
        """`Loader = torch.utils.data.DataLoader` at module level."""
        q = self.resolve(value)
        if q is not None and q.split(".", 1)[0] in _KNOWN_ROOTS:
            self.aliases.setdefault(local, q)

    def resolve(self, node: cst.BaseExpression) -> str | None:
        """The canonical dotted name an expression refers to, if it comes from an import."""
        parts: list[str] = []
        while isinstance(node, cst.Attribute):
            parts.append(node.attr.value)
            node = node.value
        if not isinstance(node, cst.Name):
            return None
        base = self.aliases.get(node.value)
        if base is None:
            return None
        parts.append(base)
        return canonical(".".join(reversed(parts)))

    def imports_module(self, prefix: str) -> bool:
        return any(v == prefix or v.startswith(prefix + ".") for v in self.aliases.values())

    def local_names_for(self, qualified: str) -> list[str]:
        return [k for k, v in self.aliases.items() if canonical(v) == qualified]


_KNOWN_ROOTS = {"torch", "numpy", "scipy", "torchvision", "torchaudio", "transformers", "accelerate"}
