"""What several PF3 rules (optimizer and autograd) share: the torch prefix, host-only values,
scaled backward calls, and the regions (loops, per-step functions) whose calls are read in
order."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts, call_name, iter_nodes
from perflint.analysis.vocab import Kind


def torch_prefix(facts: Facts) -> str | None:
    names = facts.tree.imports.local_names_for("torch")
    if "torch" in names:
        return "torch"
    return names[0] if names else None


def host_only(facts: Facts, expr: cst.BaseExpression) -> bool:
    """Numbers, strings, host copies (`.item()`, `.tolist()`, `.cpu().numpy()`)."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return True
    ks = facts.kinds.of(expr)
    if ks and ks <= {Kind.NUMBER, Kind.NUMPY, Kind.INT}:
        return True
    for n in iter_nodes(expr):
        if isinstance(n, cst.Call) and call_name(n) in ("item", "tolist", "numpy"):
            return True
    return _python_int(expr)


def _python_int(expr: cst.BaseExpression) -> bool:
    """`y.size(0)`, `x.shape[0]`, `len(batch)`, `t.numel()`, and sums of them: Python ints."""
    if isinstance(expr, cst.BinaryOperation):
        return _python_int(expr.left) and _python_int(expr.right)
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Name) and expr.func.value == "len":
            return True
        return isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("size", "numel", "dim", "ndimension") \
            and (expr.func.attr.value != "size" or len(expr.args) == 1)
    if isinstance(expr, cst.Subscript):
        return isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape"
    return False


def scaled_backward(facts: Facts, call: cst.Call) -> str | None:
    """For `scaler.scale(loss).backward()`, the scaler's text."""
    if call_name(call) != "backward" or not isinstance(call.func, cst.Attribute):
        return None
    inner = call.func.value
    if isinstance(inner, cst.Call) and call_name(inner) == "scale" and isinstance(inner.func, cst.Attribute):
        if facts.kinds.has_kind(inner.func.value, Kind.SCALER):
            return facts.tree.receiver_text(inner.func.value)
    return None


def iteration_calls(facts: Facts, region: cst.CSTNode) -> list[cst.Call]:
    """Calls of one iteration of a loop/step function, in source order."""
    return sorted(
        (c for c in facts.tree.calls_within(region) if not _in_nested_def(facts, c, region)),
        key=lambda c: facts.tree.order.get(c, 0),
    )


def _in_nested_def(facts: Facts, node: cst.CSTNode, region: cst.CSTNode) -> bool:
    for a in facts.tree.ancestors(node):
        if a is region:
            return False
        if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return True
    return False


def step_regions(facts: Facts) -> list[cst.CSTNode]:
    """Where one training iteration's calls can be read in order: training loops, per-step
    functions, and any function that runs a scaled backward outside a loop."""
    regions = list(facts.loops.training_loops())
    for fn in facts.tree.index[cst.FunctionDef]:
        if facts.loops.step_function_kind(fn) == "train" or any(
            scaled_backward(facts, c) for c in facts.loops.direct_body_calls(fn)
        ):
            regions.append(fn)
    return regions


def exclusive(facts: Facts, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether `a` and `b` sit in different arms of one `if`/`else`."""
    set_b = set(facts.tree.ancestors(b))
    for node in facts.tree.ancestors(a):
        if node in set_b:
            if isinstance(node, cst.If):
                return facts.tree.is_inside(a, node.body) != facts.tree.is_inside(b, node.body)
            return False
    return False
