"""A loop's other waits: whether every iteration already waits for the GPU at a point that no
finding removes, so that a fix elsewhere in it gains next to nothing."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts
from perflint.rules.host_sync.helpers import _group_of, _optional, _unseen_reads, exclusive
from perflint.rules.host_sync.values import blocking_host_copy


def copy_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A blocking copy to the GPU of a tensor made on the host that runs on every iteration of
    `region`, outside `node`'s own wait (`tokenizer(texts, return_tensors="pt").to(device)`,
    `torch.from_numpy(a).cuda()`): from pageable memory it waits for everything queued before
    it, and no rule reports it (it is not a loader's batch).  The host then never runs ahead
    of the GPU in this loop, and one more read back costs next to nothing."""
    own = _group_of(facts, region).get(node, [node])
    for p in _unseen_reads(facts, region):
        if p in own or not isinstance(p, cst.Call) or not blocking_host_copy(facts, p):
            continue
        if facts.tree.is_inside(p, node) or facts.tree.is_inside(node, p) or exclusive(facts, p, node):
            continue
        if _optional(facts, p, region) or not _every_iteration(facts, p, region):
            continue
        return p
    return None


def _every_iteration(facts: Facts, node: cst.CSTNode, region: cst.CSTNode) -> bool:
    """`node` runs once on every iteration of `region`: no `if`, inner loop or nested function
    between them."""
    for a in facts.tree.ancestors(node):
        if a is region:
            return True
        if isinstance(a, (cst.If, cst.IfExp, cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ExceptHandler,
                          cst.BooleanOperation, cst.CompFor)):
            return False
    return False
