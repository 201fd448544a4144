"""Where a dataset's values come from, as far as the bindings of a name show: what a
binding gives its name, and the CUDA tensor types (`torch.cuda.FloatTensor`)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts


def bound_value(b) -> cst.BaseExpression | None:
    """The value a binding gives its name: the assigned expression, or the element of a
    tuple or list literal that a target tuple takes apart (`X, Y = f(X), f(Y)`)."""
    if b.how == "expr":
        return b.node
    if b.how == "unpack" and len(b.index) == 1 and isinstance(b.node, (cst.Tuple, cst.List)):
        els = b.node.elements
        if b.index[0] < len(els) and not any(isinstance(e, cst.StarredElement) for e in els):
            return els[b.index[0]].value
    return None


def cuda_tensor_type(facts: Facts, func: cst.BaseExpression, depth: int = 0) -> bool:
    """`torch.cuda.FloatTensor`, or a name bound to it in some arm (`T = torch.cuda.FloatTensor
    if cuda else torch.FloatTensor`): its call builds the tensor on the GPU when CUDA is there."""
    if isinstance(func, cst.IfExp) and depth < 4:
        return cuda_tensor_type(facts, func.body, depth + 1) or cuda_tensor_type(facts, func.orelse, depth + 1)
    if isinstance(func, cst.Name) and depth < 4:
        bs = facts.bindings.lookup(func.value, func)
        return bool(bs) and all(b.how == "expr" for b in bs) and any(cuda_tensor_type(facts, b.node, depth + 1) for b in bs)
    q = facts.tree.qualname(func) or ""
    return q.startswith("torch.cuda.") and q.endswith("Tensor")
