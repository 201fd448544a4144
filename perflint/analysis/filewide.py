"""File-wide facts: the words of a file, references to torch settings, autocast and
GradScaler use."""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import call_name, get_arg
from perflint.analysis.vocab import Kind, _DTYPE_NAMES, AUTOCASTS, SCALERS

if TYPE_CHECKING:
    from perflint.analysis.facts import Facts


class FileWide(Component):
    needs = ("tree", "kinds", "devices")

    @cached_property
    def words(self) -> "Words":
        """Every identifier and string literal of the file, for name-based guards."""
        return Words(self.facts)

    def references(self, *prefixes: str) -> list[cst.CSTNode]:
        """Name/Attribute nodes (outermost) whose qualified name starts with one of `prefixes`."""
        out = []
        for a in self.tree.index[cst.Attribute]:
            parent = self.tree.parents.get(a)
            if isinstance(parent, cst.Attribute) and parent.value is a:
                continue
            q = self.tree.qualname(a)
            if q is not None and q.startswith(prefixes):
                out.append(a)
        for call in self.tree.index[cst.Call]:
            if isinstance(call.func, cst.Name):
                q = self.tree.qualname(call.func)
                if q is not None and q.startswith(prefixes):
                    out.append(call.func)
        return out

    @cached_property
    def uses_autocast(self) -> bool:
        return bool(self.references(*AUTOCASTS)) or any(
            (self.tree.qualname(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "") in AUTOCASTS
            for d in self.tree.index[cst.Decorator]
        )

    @cached_property
    def uses_grad_scaler(self) -> bool:
        return bool(self.references(*SCALERS))

    @cached_property
    def may_use_accelerator(self) -> bool:
        """Whether tensors in this file may live on an accelerator: CUDA code, data moved
        with `.to(<device>)` where the device is not provably the CPU, a `device=` argument
        that is not the CPU, or a training framework that places data itself."""
        if self.devices.is_cuda_code:
            return True
        for call in self.tree.index[cst.Call]:
            name = call_name(call)
            if name in ("to",) and isinstance(call.func, cst.Attribute) and call.args:
                dev = get_arg(call, "device", 0)
                if dev is None:
                    continue
                q = self.tree.qualname(dev.value) or ""
                if q.startswith("torch.") and q.rsplit(".", 1)[-1] in _DTYPE_NAMES:
                    continue
                if self.kinds.of(dev.value) & {Kind.TENSOR, Kind.OUTPUT, Kind.BATCH}:
                    continue
                if self.devices.device_kinds(dev.value) - {Kind.DEVICE_CPU}:
                    return True
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "device":
                    if self.devices.device_kinds(arg.value) - {Kind.DEVICE_CPU}:
                        return True
            q = self.tree.qualname(call.func) or ""
            if q in ("torch.set_default_device", "torch.cuda.set_device"):
                return True
        frameworks = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "transformers", "fabric")
        if any(self.tree.imports.imports_module(f) for f in frameworks):
            return True
        # A per-step helper runs wherever the loop that calls it runs.
        return any(len(c) > 3 and c[3] for c in self.devices._cross_step_callers())


class Words:
    """Every identifier (names, attribute names, keyword names) and string literal of a
    file, collected from the facts walk's index, plus whether the `@` operator appears."""

    def __init__(self, facts: Facts) -> None:
        self.name_nodes: dict[str, list[cst.Name]] = {}
        for node in facts.tree.index[cst.Name]:
            self.name_nodes.setdefault(node.value, []).append(node)  # type: ignore[attr-defined]
        strings = set(facts.tree.string_values)
        self.names = frozenset(self.name_nodes)
        self.strings = frozenset(strings)
        self.matmul_operator = any(
            isinstance(n.operator, cst.MatrixMultiply) for n in facts.tree.index[cst.BinaryOperation]  # type: ignore[attr-defined]
        ) or any(isinstance(n.operator, cst.MatrixMultiplyAssign) for n in facts.tree.index[cst.AugAssign])  # type: ignore[attr-defined]
        self._lower = tuple(w.lower() for w in (*self.names, *self.strings))
        self._lower_names = tuple(w.lower() for w in self.names)

    def contains(self, *fragments: str) -> bool:
        """Whether any identifier or string contains one of `fragments` (case-insensitive)."""
        frags = tuple(f.lower() for f in fragments)
        return any(f in w for w in self._lower for f in frags)

    def name_contains(self, *fragments: str) -> bool:
        """Whether any identifier (not string) contains one of `fragments` (case-insensitive)."""
        frags = tuple(f.lower() for f in fragments)
        return any(f in w for w in self._lower_names for f in frags)

    def matches(self, rx: "re.Pattern") -> bool:
        return any(rx.search(w) for w in self._lower)

