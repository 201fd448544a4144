"""Devices: which expressions are CUDA / CPU / other devices, and whether a file runs on an
accelerator."""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import literal_value
from perflint.analysis.vocab import Kind

if TYPE_CHECKING:
    from perflint.analysis.facts import Facts


class Devices(Component):
    needs = ("tree", "cross")

    def device_kinds(self, node: cst.CSTNode) -> set[str]:
        return _device_kinds_of(self.facts, node)

    def is_provably_cuda(self, node: cst.CSTNode | None) -> bool:
        """A device expression that is CUDA, or CUDA-or-CPU from `torch.cuda.is_available()`."""
        if node is None:
            return False
        ks = self.device_kinds(node)
        return Kind.DEVICE_CUDA in ks and not (ks & {Kind.DEVICE_OTHER, Kind.DEVICE_UNKNOWN})

    def is_device_expr(self, node: cst.CSTNode | None) -> bool:
        """A device for sure (not a dtype or tensor): literal, torch.device, or names bound only to those."""
        if node is None:
            return False
        ks = self.device_kinds(node)
        return bool(ks) and not (ks & {Kind.DEVICE_UNKNOWN})

    @cached_property
    def is_cuda_code(self) -> bool:
        """CUDA code: the file itself says so (`own_cuda_code`), or its functions run only in
        CUDA programs — every caller in the project hands one of them a CUDA device or a
        model moved to CUDA, or a loader factory's callers are all CUDA code."""
        if self.own_cuda_code:
            return True
        if self.project is None:
            return False
        if self.project.receives_cuda():
            return True
        # A subclass of a project class whose `self.device` is CUDA runs there too.
        for cls in self.tree.index[cst.ClassDef]:
            for base in cls.bases:
                ref = self.cross.project_ref(base.value)
                if ref is not None and not ref.startswith("#"):
                    got = self.project.attr_kinds(ref, "device")
                    if got is not None and Kind.DEVICE_CUDA in got:
                        return True
        return False

    @cached_property
    def own_cuda_code(self) -> bool:
        """The file calls `.cuda()`, names a "cuda" device, uses `torch.cuda` or
        `torch.accelerator`, or builds `torch.device(<option>)` whose default is "cuda"."""
        for call in self.tree.index[cst.Call]:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "cuda":
                return True
        for v in self.tree.string_values:
            if v.startswith("cuda") and re.fullmatch(r"cuda(:\d+)?", v):
                return True
        for a in self.tree.index[cst.Attribute]:
            q = self.tree.qualname(a)
            if q is not None and (q == "torch.cuda.is_available" or q.startswith(("torch.cuda.", "torch.accelerator."))) \
                    and not self._printed(a):
                return True  # `torch.accelerator` (torch >= 2.6) stands for CUDA on NVIDIA machines
        for call in self.tree.calls_to("torch.device"):
            # `torch.device(cfg.device)` with a "cuda" default (argparse, a config field)
            if call.args and not isinstance(call.args[0].value, (cst.SimpleString, cst.Name)):
                found, default = self.cross.option_default(call.args[0].value)
                if found and isinstance(default, str) and _device_string_kinds(default) == {Kind.DEVICE_CUDA}:
                    return True
        return False

    def _printed(self, node: cst.CSTNode) -> bool:
        """`print(torch.cuda.is_available())`: a notebook or script that only reports what the
        machine has, and uses nothing of it, is not CUDA code for that."""
        for a in self.tree.ancestors(node):
            if isinstance(a, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return False
            if isinstance(a, cst.Call) and isinstance(a.func, cst.Name) and a.func.value == "print" \
                    and not self.facts.bindings.lookup("print", a.func):
                return True
        return False

    @cached_property
    def called_from_cuda_loop(self) -> bool:
        """A per-step helper of this file is called from the loop of CUDA code elsewhere, so
        its copies are host-to-CUDA copies (file-wide settings still belong to the caller)."""
        return any(len(c) > 4 and c[4] for c in self._cross_step_callers())

    def _cross_step_callers(self) -> list:
        if self.project is None:
            return []
        out = []
        for fn in self.tree.index[cst.FunctionDef]:
            caller = self.cross.project_step_caller(fn)
            if caller is not None:
                out.append(caller)
        return out


def _device_string_kinds(v: str) -> set[str]:
    if re.fullmatch(r"cuda(:\d+)?", v):
        return {Kind.DEVICE_CUDA}
    if v == "cpu":
        return {Kind.DEVICE_CPU}
    if re.fullmatch(r"(mps|xpu|hpu|mtia|meta|xla|privateuseone|npu)(:\d+)?", v):
        return {Kind.DEVICE_OTHER}
    return set()


def _device_kinds_of(facts: Facts, node: cst.CSTNode, depth: int = 0) -> set[str]:
    """Device kinds of an expression: device_cuda / device_cpu / device_other / device_unknown."""
    if depth > 8:
        return {Kind.DEVICE_UNKNOWN}
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        v = literal_value(node)
        ks = _device_string_kinds(v) if isinstance(v, str) else set()
        return ks or {Kind.DEVICE_UNKNOWN}
    if isinstance(node, cst.Integer):
        return {Kind.DEVICE_CUDA}  # `.to(0)` / `.cuda(0)`
    if isinstance(node, cst.IfExp):
        return _device_kinds_of(facts, node.body, depth + 1) | _device_kinds_of(facts, node.orelse, depth + 1)
    if isinstance(node, cst.Call):
        q = facts.tree.qualname(node.func)
        if q == "torch.device" and node.args:
            return _device_kinds_of(facts, node.args[0].value, depth + 1)
        if q == "torch.cuda.current_device":
            return {Kind.DEVICE_CUDA}
        if q == "torch.accelerator.current_accelerator":
            return {Kind.DEVICE_CUDA, Kind.DEVICE_OTHER}
        return {Kind.DEVICE_UNKNOWN}
    if isinstance(node, cst.Name):
        bs = facts.bindings.lookup(node.value, node)
        if not bs:
            return {Kind.DEVICE_UNKNOWN}
        out: set[str] = set()
        for b in bs:
            if b.how == "expr":
                out |= _device_kinds_of(facts, b.node, depth + 1)
            elif b.how == "param":
                # What every caller in the project passes (unknown when any caller is).
                got = facts.cross.project_param_device(b.node, b.site)
                out |= got or {Kind.DEVICE_UNKNOWN}
            else:
                out.add(Kind.DEVICE_UNKNOWN)
        return out
    if isinstance(node, cst.Attribute):
        bs = facts.bindings.self_attr_bindings(node)
        if bs:
            out = set()
            for b in bs:
                out |= _device_kinds_of(facts, b.node, depth + 1) if b.how == "expr" else {Kind.DEVICE_UNKNOWN}
            return out
        inherited = facts.cross.project_attr_kinds(node)  # `self.device` set in a base class elsewhere
        if inherited is not None:
            got = inherited & {Kind.DEVICE_CUDA, Kind.DEVICE_CPU, Kind.DEVICE_OTHER}
            return set(got) or {Kind.DEVICE_UNKNOWN}
        found, default = facts.cross.option_default(node)  # `args.device`: its default, or what is passed
        if found and isinstance(default, str) and _device_string_kinds(default):
            return _device_string_kinds(default) | {Kind.DEVICE_UNKNOWN}
        return {Kind.DEVICE_UNKNOWN}
    return {Kind.DEVICE_UNKNOWN}
