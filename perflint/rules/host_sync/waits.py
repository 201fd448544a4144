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


def forward_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A call on every iteration of `region` of a layer or loss of the project whose `forward`
    waits for the GPU each time it runs (`crit(out, y)` where the loss branches on a tensor or
    indexes with a boolean mask: `loss[loss > self.thresh]`), outside `node`'s own wait.  No
    rule reports a wait inside a forward, so the iteration waits there whatever is fixed, and
    the host never runs ahead of the GPU by more than that: one more read back costs next to
    nothing (as with `copy_waits_elsewhere`)."""
    own = _group_of(facts, region).get(node, [node])
    for call in facts.tree.calls_within(region):
        if call in own or not isinstance(call.func, (cst.Name, cst.Attribute)):
            continue
        ctx = facts.loops.iteration_context(call)
        if ctx is None or ctx.node is not region or not _forward_syncs(facts, call):
            continue
        if facts.tree.is_inside(call, node) or facts.tree.is_inside(node, call) or exclusive(facts, call, node):
            continue
        if _optional(facts, call, region) or not _every_iteration(facts, call, region):
            continue
        return call
    return None


def _forward_syncs(facts: Facts, call: cst.Call) -> bool:
    """`call` calls an instance of a class (of this file or the project) whose `forward`
    waits for the GPU each time it runs."""
    ref = facts.cross.instance_class(call.func)
    if ref is None:
        return False
    if ref.startswith("#"):
        cls = facts.tree.classes_by_name.get(ref[1:])
        forward = next((fn for fn in facts.tree.functions_by_name.get("forward", ())
                        if cls is not None and facts.tree.enclosing_class(fn) is cls), None)
        return forward is not None and facts.syncs.function_syncs(forward)
    return facts.project is not None and facts.project.call_syncs(ref)


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
