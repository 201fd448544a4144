"""Where calling a function or a layer waits for the GPU: the bodies (and `forward`s) that
read a value back each time they run — `.item()`, `.cpu()`, `torch.cuda.synchronize()`, a
branch on a tensor, a boolean mask — and, through the project, the functions and classes of
other modules that do (their summaries' `syncs`, and the layers a `forward` calls)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.component import Component
from perflint.analysis.syntax import call_name
from perflint.analysis.tree import iter_nodes
from perflint.analysis.vocab import Kind

_SYNC_READS = {"item", "cpu", "numpy", "tolist"}
_REDUCTIONS = {"min", "max", "any", "all", "isnan", "isinf", "isfinite", "equal", "allclose", "count_nonzero"}
# Kinds of a value that may be a tensor on the GPU (not a layer's parameter, not a number).
_TENSOR_KINDS = frozenset({Kind.TENSOR, Kind.DEVICE_TENSOR, Kind.LOSS, Kind.OUTPUT})
_HOST_KINDS = frozenset({Kind.NUMPY, Kind.CPU_TENSOR, Kind.MODEL})


def _tensor_value(facts, expr: cst.BaseExpression) -> bool:
    ks = facts.kinds.of(expr)
    return bool(ks & _TENSOR_KINDS) and not ks & _HOST_KINDS


def _compares_tensors(facts, expr: cst.BaseExpression) -> bool:
    """`expr` holds a value comparison (`<`, `>`, `==` …, not `is` / `in`) one side of which
    is a tensor: its truth is read back from the device (`if loss[k] > self.thresh:`)."""
    for n in iter_nodes(expr):
        if isinstance(n, cst.Comparison) and all(
                isinstance(t.operator, (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual,
                                        cst.Equal, cst.NotEqual)) for t in n.comparisons) \
                and any(_tensor_value(facts, x) for x in (n.left, *(t.comparator for t in n.comparisons))):
            return True
    return False


def _boolean_mask(facts, sub: cst.Subscript) -> bool:
    """`x[x > t]`: indexing with a comparison of tensors, whose result is as long as the mask
    has true elements (the host waits to learn how many)."""
    return len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index) \
        and isinstance(sub.slice[0].slice.value, cst.Comparison) and _compares_tensors(facts, sub.slice[0].slice.value)


class Syncs(Component):
    needs = ("tree", "cross", "kinds", "loops")

    def function_syncs(self, fn: cst.FunctionDef) -> bool:
        """`fn` waits for the GPU each time it runs: `.item()`, `.cpu()`, `.numpy()` or
        `.tolist()` of a value not known to be on the host, or `torch.cuda.synchronize()`,
        outside throttled branches and nested functions."""
        memo = self.__dict__.setdefault("_function_syncs_memo", {})
        if fn in memo:
            return memo[fn]
        memo[fn] = False
        found = False
        for call in self.tree.calls_within(fn):
            if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                    and call.func.value.value == "self" and self.loops.runs_each_time(call, fn, nested_functions=False):
                cls = self.tree.enclosing_class(fn)
                method = next((m for m in self.tree.functions_by_name.get(call.func.attr.value, ())
                               if self.tree.enclosing_class(m) is cls and m is not fn), None)
                if method is not None and self.function_syncs(method):
                    found = True  # `self.expand(x)`: a method of the same class that reads back
                    break
                if method is None and self._local_layer_syncs(call):
                    found = True  # `self.loss(x, y)`: a layer of a class of this file whose forward reads back
                    break
            if isinstance(call.func, cst.Attribute) and call_name(call) in _SYNC_READS and not call.args:
                recv = call.func.value
                ks = self.kinds.of(recv)
                if (ks & {Kind.NUMBER, Kind.NUMPY, Kind.INT, Kind.CPU_TENSOR} and not ks & _TENSOR_KINDS) \
                        or Kind.MODEL in ks or (Kind.BATCH in ks and Kind.DEVICE_TENSOR not in ks):
                    continue
            elif self.tree.qualname(call.func) != "torch.cuda.synchronize":
                continue
            if self.loops.runs_each_time(call, fn, nested_functions=False):
                found = True
                break
        if not found:
            # `if torch.min(y) < -1.:` — a branch on a tensor reduction reads it back
            for cls in (cst.If, cst.While, cst.Assert):
                for node in self.tree.nodes_within(fn, cls):
                    if self.tree.enclosing_function(node) is fn and (
                            self._tensor_test(node.test) or _compares_tensors(self.facts, node.test)) \
                            and self.loops.runs_each_time(node, fn, nested_functions=False):
                        found = True
                        break
                if found:
                    break
        if not found:
            # `loss = loss[loss > self.thresh]`: a boolean mask sizes its result by the data
            for sub in self.tree.nodes_within(fn, cst.Subscript):
                if self.tree.enclosing_function(sub) is fn and _boolean_mask(self.facts, sub) \
                        and self.loops.runs_each_time(sub, fn, nested_functions=False):
                    found = True
                    break
        memo[fn] = found
        return found

    def _local_layer_syncs(self, call: cst.Call) -> bool:
        ref = self.cross.instance_class(call.func)
        cls = self.tree.classes_by_name.get(ref[1:]) if ref is not None and ref.startswith("#") else None
        if cls is None:
            return False
        forwards = self.__dict__.get("_forward_of_class")
        if forwards is None:  # each class's first `forward`, found once per file (not once per call)
            forwards = self.__dict__["_forward_of_class"] = {}
            for m in self.tree.functions_by_name.get("forward", ()):
                forwards.setdefault(self.tree.enclosing_class(m), m)
        forward = forwards.get(cls)
        return forward is not None and self.function_syncs(forward)

    def forward_layers(self, fn: cst.FunctionDef) -> list[str]:
        """The project classes (references, not this file's) whose instances, held in `self.`
        attributes, `fn` calls each time it runs (`self.criterion(out, y)`)."""
        out = set()
        for call in self.tree.calls_within(fn):
            if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                    and call.func.value.value == "self" and self.loops.runs_each_time(call, fn, nested_functions=False):
                ref = self.cross.instance_class(call.func)
                if ref is not None and not ref.startswith("#"):
                    out.add(ref)
        return sorted(out)

    def _tensor_test(self, test: cst.BaseExpression) -> bool:
        for n in iter_nodes(test):
            if isinstance(n, cst.Call):
                q = self.tree.qualname(n.func) or ""
                last = q.rsplit(".", 1)[-1] if q.startswith("torch.") else None
                if last is None and isinstance(n.func, cst.Attribute) and not isinstance(n.func.value, cst.Name):
                    last = n.func.attr.value  # `(x > 0).any()`, `y.abs().max()`
                if last in _REDUCTIONS:
                    return True
        return False

    def callee_syncs(self, call: cst.Call) -> bool:
        """Calling `call` waits for the GPU inside: a function or a model class of the project
        whose body (its `forward`) reads a value back each time."""
        if self.project is None:
            return False
        ref = self.cross.project_ref(call.func)
        if ref is None:
            ref = self.cross.instance_class(call.func)  # `model(x)` on an instance of a project class
        if ref is None or ref.startswith("#"):
            return False
        return self.project.call_syncs(ref)
