"""The CUDA tensor types (`torch.cuda.FloatTensor`): a dataset built from their calls holds
GPU tensors when CUDA is there."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts


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
