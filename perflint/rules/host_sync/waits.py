"""A loop's other waits: whether every iteration already waits for the GPU at a point that no
finding removes, so that a fix elsewhere in it gains next to nothing."""

from __future__ import annotations

import re

import libcst as cst

from perflint.analysis import Facts, call_name
from perflint.analysis.syntax import get_arg, has_splat, literal_value
from perflint.analysis.vocab import Kind
from perflint.names import dotted
from perflint.rules.common import local_function, param_for
from perflint.rules.host_sync.helpers import (
    _group_of,
    _heavy_call,
    _optional,
    _sync_points,
    _unseen_reads,
    exclusive,
)
from perflint.rules.host_sync.values import blocking_batch_copy, blocking_host_copy, sized_by_data


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
        if _elsewhere_each_time(facts, p, region, node):
            return p
    for call in facts.tree.calls_within(region):
        ctx = facts.loops.iteration_context(call)
        if ctx is not None and ctx.node is region and call not in own \
                and _callee_waits(facts, call, blocking_host_copy, 0) and _elsewhere_each_time(facts, call, region, node):
            return call  # `encoded = compute_embeddings_fn(text)`, whose `encode_prompt` copies token ids
    return _prepared_fetch(facts, region, node)


def helper_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A call on every iteration of `region`, outside `node`'s own wait, of a function of this
    file that waits for the GPU each time it runs at a point no rule reports: an op whose
    output size depends on the data (`pred.eq(gold).masked_select(mask)` in a metric helper,
    `torch.nonzero`), or a blocking copy of host data.  The iteration drains there whatever
    is fixed, and one more read back costs next to nothing (as with
    `forward_waits_elsewhere`).  Not for PF105: a wait in the middle of the step leaves the
    GPU busy at the next iteration's copy (`drained_at_iteration_end` is the case that does
    not)."""
    return _waits_each_time(facts, region, node, lambda call: _callee_waits(facts, call, _unseen_wait, 0))


def _unseen_wait(facts: Facts, call: cst.Call) -> bool:
    return sized_by_data(facts, call) or blocking_host_copy(facts, call)


def _callee_waits(facts: Facts, call: cst.Call, waits, depth: int) -> bool:
    """`call` runs a function of this file (by name, or a `functools.partial` of one bound to
    a name once) with a call that `waits` each time it runs: in its own body, outside any
    branch or loop, or through such a call, two levels deep at most."""
    fn = local_function(facts, call.func)
    if fn is None:
        return False
    for c in facts.tree.calls_within(fn):
        if not _every_iteration(facts, c, fn):
            continue
        if waits(facts, c) or (depth < 2 and _callee_waits(facts, c, waits, depth + 1)):
            return True
    return False


def _elsewhere_each_time(facts: Facts, p: cst.CSTNode, region: cst.CSTNode, node: cst.CSTNode) -> bool:
    """`p` runs once on every iteration of `region`, unconditionally, apart from `node` (not
    inside it, not around it, not in the other arm of an `if`)."""
    if facts.tree.is_inside(p, node) or facts.tree.is_inside(node, p) or exclusive(facts, p, node):
        return False
    return not _optional(facts, p, region) and _every_iteration(facts, p, region)


def _prepared_fetch(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """The fetch of each iteration's batch from a loader that Accelerate prepared (`for batch
    in loader`, `next(self.dl)` where `self.dl = cycle(accelerator.prepare(dl))`): with its
    default `non_blocking=False`, Accelerate copies every batch to the device with a blocking
    copy as it hands it out, which waits for all the work queued before it."""
    if isinstance(region, cst.For) and _prepared_loader(facts, region.iter, 0):
        return region.iter
    for call in facts.tree.calls_within(region):
        if call_name(call) != "next" or not isinstance(call.func, cst.Name) or not call.args:
            continue
        ctx = facts.loops.iteration_context(call)
        if ctx is None or ctx.node is not region or not _elsewhere_each_time(facts, call, region, node):
            continue
        if _prepared_loader(facts, call.args[0].value, 0):
            return call
    return None


def _prepared_loader(facts: Facts, expr: cst.BaseExpression, depth: int) -> bool:
    """`expr` yields the batches of a DataLoader that an Accelerator which copies them itself,
    blocking, prepared: directly, through `iter`/`enumerate`/`tqdm`, through a generator of
    this file that loops over its argument (`def cycle(dl): while True: for d in dl: yield
    d`), or through names and `self.` attributes bound once to one of those."""
    if depth > 3:
        return False
    while isinstance(expr, cst.Call) and call_name(expr) in ("iter", "enumerate", "tqdm") and expr.args:
        expr = expr.args[0].value
    if isinstance(expr, cst.Call):
        f = expr.func
        if isinstance(f, cst.Attribute) and f.attr.value in ("prepare", "prepare_data_loader"):
            args = [a for a in expr.args if a.keyword is None and not a.star]
            return len(args) == 1 and facts.kinds.has_kind(args[0].value, Kind.DATALOADER) \
                and blocking_accelerator(facts, f.value)
        if isinstance(f, cst.Name) and expr.args and _loops_over_argument(facts, f.value):
            return _prepared_loader(facts, expr.args[0].value, depth + 1)
        return False
    bindings = _bindings_of(facts, expr)
    if not bindings:
        return False
    bindings = _past_both_arms(facts, bindings)
    for b in bindings:
        if b.how == "expr":
            if not _prepared_loader(facts, b.node, depth + 1):
                return False
        elif b.how == "unpack" and len(b.index) == 1 and isinstance(b.node, cst.Call) \
                and isinstance(b.node.func, cst.Attribute) and b.node.func.attr.value == "prepare":
            # `model, opt, loader = accelerator.prepare(model, opt, loader)`
            args = [a for a in b.node.args if a.keyword is None and not a.star]
            if b.index[0] >= len(args) or len(args) != len(b.node.args) \
                    or not facts.kinds.has_kind(args[b.index[0]].value, Kind.DATALOADER) \
                    or not blocking_accelerator(facts, b.node.func.value):
                return False
        else:
            return False
    return True


def _bindings_of(facts: Facts, expr: cst.BaseExpression) -> list:
    """What a name, or a `self.` attribute, was bound to (none for anything else)."""
    if isinstance(expr, cst.Name):
        return facts.bindings.lookup(expr.value, expr)
    if isinstance(expr, cst.Attribute):
        return facts.bindings.self_attr_bindings(expr)
    return []


def _past_both_arms(facts: Facts, bindings: list) -> list:
    """The bindings left once those that an `if`/`else` rebinding the name in both arms
    replaces are dropped (`loader = DataLoader(...)`, then `if a: m, opt, loader =
    accelerator.prepare(m, opt, loader) else: m, loader = accelerator.prepare(m, loader)`)."""
    sites = [b.site for b in bindings if b.site is not None]
    for branch in {id(a): a for site in sites for a in facts.tree.ancestors(site) if isinstance(a, cst.If)}.values():
        if not isinstance(branch.orelse, cst.Else):
            continue
        arms = (branch.body, branch.orelse.body)
        if not all(any(facts.tree.is_inside(site, arm) for site in sites) for arm in arms):
            continue
        start = facts.tree.order.get(branch, 0)
        return [b for b in bindings if b.site is None or facts.tree.is_inside(b.site, branch)
                or facts.tree.order.get(b.site, 0) > start]
    return bindings


def _loops_over_argument(facts: Facts, name: str) -> bool:
    """`name` is the one function of this file by that name, a generator that loops over its
    first parameter (`def cycle(dl): while True: for data in dl: yield data`)."""
    fns = facts.tree.functions_by_name.get(name, [])
    if len(fns) != 1:
        return False
    fn = fns[0]
    params = fn.params.params
    if not params or not facts.tree.nodes_within(fn, cst.Yield):
        return False
    first = params[0].name.value
    return any(isinstance(loop.iter, cst.Name) and loop.iter.value == first for loop in facts.tree.nodes_within(fn, cst.For))


def blocking_accelerator(facts: Facts, expr: cst.BaseExpression) -> bool:
    """`expr` holds an `accelerate.Accelerator` made with its defaults for batches: it places
    them on the device (`device_placement`) and copies them blocking (no `dataloader_config`
    that could ask for `non_blocking=True`, no `**kwargs`)."""
    bindings = _bindings_of(facts, expr)
    if not bindings:
        return False
    for b in bindings:
        made = b.node
        if b.how != "expr" or not isinstance(made, cst.Call) \
                or not (facts.tree.qualname(made.func) or "").endswith("accelerate.Accelerator"):
            return False
        if any(a.star or (a.keyword is not None and a.keyword.value in ("dataloader_config", "device_placement",
                                                                       "non_blocking")) for a in made.args):
            return False
    return True


def forward_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A call on every iteration of `region` of a layer or loss of the project whose `forward`
    waits for the GPU each time it runs (`crit(out, y)` where the loss branches on a tensor or
    indexes with a boolean mask: `loss[loss > self.thresh]`), outside `node`'s own wait.  No
    rule reports a wait inside a forward, so the iteration waits there whatever is fixed, and
    the host never runs ahead of the GPU by more than that: one more read back costs next to
    nothing (as with `copy_waits_elsewhere`)."""
    return _waits_each_time(facts, region, node, lambda call: isinstance(call.func, (cst.Name, cst.Attribute))
                            and _forward_syncs(facts, call))


def _waits_each_time(facts: Facts, region: cst.CSTNode, node: cst.CSTNode, waits, own_group: bool = True,
                     on_cuda: bool = False):
    """The first call of `region` that `waits` and runs on every iteration apart from `node`
    (with `own_group`, also outside the reads that wait together with `node`; with
    `on_cuda`, a call under `if args.cuda:` counts as running on every iteration: in a run
    where that test is false nothing is on the GPU and no read waits)."""
    own = _group_of(facts, region).get(node, [node]) if own_group else [node]
    for call in facts.tree.calls_within(region):
        if call in own:
            continue
        ctx = facts.loops.iteration_context(call)
        if ctx is None or ctx.node is not region or not waits(call):
            continue
        if _elsewhere_each_time(facts, _past_cuda_tests(facts, call, region) if on_cuda else call, region, node):
            return call
    return None


_CUDA_SWITCH = re.compile(r"(?:^|_)(?:cuda|gpu|gpus)$|^(?:use|on|has|with)_?(?:cuda|gpu)", re.I)


def _past_cuda_tests(facts: Facts, call: cst.CSTNode, region: cst.CSTNode) -> cst.CSTNode:
    """The outermost `if` whose body holds `call` and tests only whether the run uses CUDA
    (`if args.cuda:`, `if self.use_gpu:`, `if torch.cuda.is_available():`), with nothing
    but such tests between them; `call` itself when there is none."""
    anchor, cur = call, call
    for a in facts.tree.ancestors(call):
        if a is region:
            break
        if isinstance(a, cst.If) and cur is a.body and _tests_cuda(facts, a.test):
            anchor = a
        elif isinstance(a, (cst.If, cst.IfExp, cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ExceptHandler,
                            cst.BooleanOperation, cst.CompFor, cst.Else)):
            break
        cur = a
    return anchor


def _tests_cuda(facts: Facts, test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Call):
        return facts.tree.qualname(test.func) == "torch.cuda.is_available" and not test.args
    text = dotted(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
    return text is not None and bool(_CUDA_SWITCH.search(text.rsplit(".", 1)[-1]))


def batch_copy_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A blocking copy to the GPU on every iteration of `region`, apart from `node`, of the
    loader's batch or of a tensor made on the host (`x = x.to(device)`, `torch.rand(n,
    1).to(device)`): it waits for everything queued before it, so the host never runs more
    than an iteration ahead of the GPU and one more read back costs only the host work
    between the two.  Only the copies that no selected rule reports: PF105 (the batch's) and
    PF409 (the host-made tensor's), both off by default, make them asynchronous or make the
    tensor on the device, and then the read is what waits."""
    batches, made = "PF105" not in facts.selected, "PF409" not in facts.selected
    if not (batches or made):
        return None
    return _waits_each_time(facts, region, node, lambda call: blocking_batch_copy(facts, call, batches, made),
                            own_group=False, on_cuda=True)


def numpy_index_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A GPU tensor indexed with a numpy array or a CPU tensor on every iteration of `region`,
    apart from `node` (`b_obs[mb_inds]` with `mb_inds = b_inds[start:end]` of an `np.arange`
    or a `torch.randperm(n)`, the minibatch loop of PPO implementations): torch copies the
    index to the device with a blocking copy, which waits for everything queued before it.
    No rule reports it, so the iteration waits there whatever is fixed."""
    for sub in facts.tree.nodes_within(region, cst.Subscript):
        if Kind.DEVICE_TENSOR not in facts.kinds.of(sub.value):
            continue
        if not any(isinstance(e.slice, cst.Index) and facts.kinds.of(e.slice.value) & {Kind.NUMPY, Kind.CPU_TENSOR}
                   for e in sub.slice):
            continue
        ctx = facts.loops.iteration_context(sub)
        if ctx is not None and ctx.node is region and _elsewhere_each_time(facts, sub, region, node):
            return sub
    return None


def synchronize_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A `torch.cuda.synchronize()` on every iteration of `region`, apart from `node`: the
    iteration drains the GPU there whatever becomes of `node`, so one more read back costs
    next to nothing (MAE's and ConvNeXt's `train_one_epoch`).  PF202, when selected, reports
    such a synchronize; once it is gone, the read is reported."""
    return _waits_each_time(facts, region, node, lambda call: facts.tree.qualname(call.func) == "torch.cuda.synchronize",
                            own_group=False)


def scaler_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A GradScaler step on every iteration of `region`, outside `node`'s own wait, that reads
    the scaler's inf check back before stepping (`scaler.step(optimizer)`, or a callable
    scaler such as timm's and MAE's NativeScaler given the optimizer): GradScaler waits for
    the GPU there unless the optimizer is fused, and no rule's advice makes it fused (PF302
    advises `fused=True` only for Adam and AdamW, from torch 2.0).  The iteration then waits
    there whatever is fixed, and one more read back costs next to nothing (as with
    `forward_waits_elsewhere`)."""
    return _waits_each_time(facts, region, node, lambda call: _scaler_reads_back(facts, call))


def library_waits_elsewhere(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """A step on every iteration of `region`, outside `node`'s own wait, of an optimizer wrapped
    in apex's `LARC` (`optimizer = LARC(optimizer=sgd)`): its `step` tests each parameter's
    norm on the host (`if param_norm != 0 and grad_norm != 0:`), one wait per parameter, and
    no rule reports it.  The iteration drains there whatever is fixed, so one more read back
    costs next to nothing (as with `scaler_waits_elsewhere`).  Wrapped or passed on
    (`amp.initialize(model, optimizer)`, a parameter of a function this file calls with it),
    the optimizer is followed to where it was made; a wrapper made on one branch (`if
    args.lars:`) counts, as a GradScaler whose `enabled=` is an option does.

    (A model converted to `SyncBatchNorm` also waits in each training forward, where the
    layers drop empty statistics with a boolean mask; that is not used here: the conversion
    is a no-op for a model without batch-norm layers, which the analysis cannot tell apart.)"""
    return _waits_each_time(facts, region, node, lambda call: _larc_step(facts, call))


_LARC = ("apex.parallel.LARC.LARC", "apex.parallel.LARC")


def _larc_step(facts: Facts, call: cst.Call) -> bool:
    return call_name(call) == "step" and not call.args and isinstance(call.func, cst.Attribute) \
        and _made_by(facts, call.func.value, lambda q: q in _LARC, 0)


def _made_by(facts: Facts, expr: cst.BaseExpression, made, depth: int) -> bool:
    """Some binding of the name `expr` is a call whose qualified name `made` accepts, followed
    through `amp.initialize(model, optimizer)` and `accelerator.prepare(...)` (which hand back
    their arguments in order) and through parameters (the argument a call of the function in
    this file passes)."""
    if depth > 6 or not isinstance(expr, cst.Name):
        return False
    for b in facts.bindings.lookup(expr.value, expr):
        value = b.node
        if b.how == "unpack" and len(b.index) == 1 and isinstance(value, cst.Call) \
                and call_name(value) in ("initialize", "prepare"):
            args = [a for a in value.args if a.keyword is None and not a.star]
            if b.index[0] < len(args) and _made_by(facts, args[b.index[0]].value, made, depth + 1):
                return True
            continue
        if b.how == "param" and isinstance(b.site, cst.FunctionDef):
            fn, name = b.site, b.node.name.value
            for site in facts.tree.calls_named(fn.name.value):
                if any(param_for(fn, site, a) == name and _made_by(facts, a.value, made, depth + 1) for a in site.args):
                    return True
            continue
        if b.how == "expr" and isinstance(value, cst.Call) and made(facts.tree.qualname(value.func) or ""):
            return True
    return False


def _scaler_reads_back(facts: Facts, call: cst.Call) -> bool:
    if facts.steps.is_scaler_step(call):
        if _scaler_disabled(facts, call.func.value):  # type: ignore[union-attr]
            return False
    elif facts.steps.is_scaler_call_step(call):
        # `update_grad=(it + 1) % accum == 0`: the step (and its read) on some iterations only
        grad = get_arg(call, "update_grad")
        if grad is not None and literal_value(grad.value) is not True:
            return False
    else:
        return False
    opts = [a.value for a in call.args if a.keyword is None and not a.star
            and facts.kinds.has_kind(a.value, Kind.OPTIMIZER)]
    return len(opts) == 1 and _steps_unfused(facts, opts[0])


# GradScaler leaves the inf check to an optimizer built with `fused=True` (Adam from torch
# 1.13): before that version every optimizer step through a scaler reads it back.
_FIRST_FUSED = (1, 13)
_PF302_FUSES = ("torch.optim.Adam", "torch.optim.AdamW")


def _steps_unfused(facts: Facts, opt: cst.BaseExpression) -> bool:
    """The optimizer `opt` holds is not fused and no finding makes it so: any optimizer when
    the target torch has no fused ones, else one bound once to a `torch.optim` constructor
    without `fused`, other than the Adam and AdamW that PF302 would fuse."""
    if facts.target_torch < _FIRST_FUSED:
        return True
    made = _made_once(facts, opt)
    if made is None:
        return False
    q = facts.tree.qualname(made.func) or ""
    if not q.startswith("torch.optim.") or has_splat(made):
        return False
    fused = get_arg(made, "fused")
    if fused is not None and literal_value(fused.value) is not False:
        return False
    return q not in _PF302_FUSES or facts.target_torch < (2, 0)


def _scaler_disabled(facts: Facts, scaler: cst.BaseExpression) -> bool:
    """`scaler` is bound once to a GradScaler built with `enabled=False`: its step only steps."""
    made = _made_once(facts, scaler)
    enabled = get_arg(made, "enabled") if made is not None else None
    return enabled is not None and literal_value(enabled.value) is False


def _made_once(facts: Facts, expr: cst.BaseExpression) -> cst.Call | None:
    """The call a name (or a `self.` attribute) is bound to, when it is bound once, to a call."""
    bindings = _bindings_of(facts, expr)
    if len(bindings) != 1 or bindings[0].how != "expr" or not isinstance(bindings[0].node, cst.Call):
        return None
    return bindings[0].node


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


def drained_at_iteration_end(facts: Facts, region: cst.CSTNode, copy: cst.CSTNode) -> cst.CSTNode | None:
    """The loop `region` ends each iteration with a read back that stays: after its last
    heavy GPU work (backward, an optimizer step, a model call) it reads a value every time
    (`loss_avg.append(loss.item())`), and a loss or layer whose `forward` waits runs in the
    same iteration (`forward_waits_elsewhere`), or a GradScaler steps an unfused optimizer
    (`scaler_waits_elsewhere`), or an apex LARC optimizer steps (`library_waits_elsewhere`),
    or a `torch.cuda.synchronize()` runs on every iteration (a synchronize after that work
    drains the GPU by itself), so PF201 leaves that read alone
    and no fix removes it.  The next iteration's `copy` to the device, made before any heavy
    work (or as the argument of the first), then meets an idle GPU: `non_blocking=True`
    would overlap it with nothing (BiSeNet's OHEM trainers and `train_amp.py`; Pytorch-UNet's
    AMP loop, RMSprop through a GradScaler)."""
    if not isinstance(region, (cst.For, cst.While)):
        return None
    start = facts.tree.order.get(copy, 0)
    heavy = [c for c in facts.tree.calls_within(region) if _heavy_call(facts, c, 0)]
    if not heavy or any(facts.tree.order.get(c, 0) < start and not facts.tree.is_inside(copy, c) for c in heavy):
        return None  # GPU work queued before the copy: a blocking copy waits for it
    last = max(facts.tree.order.get(c, 0) for c in heavy)
    for p in reversed(_sync_points(facts, region)):
        if facts.tree.order.get(p, 0) <= last:
            return None  # heavy work after the last read: the GPU is busy at the next copy
        if not isinstance(p, cst.Call) or _optional(facts, p, region) or not _every_iteration(facts, p, region):
            continue
        if facts.tree.qualname(p.func) == "torch.cuda.synchronize":
            return p  # the iteration ends by draining the GPU itself
        if call_name(p) != "item":
            continue
        if forward_waits_elsewhere(facts, region, p) is not None or scaler_waits_elsewhere(facts, region, p) is not None \
                or synchronize_elsewhere(facts, region, p) is not None or library_waits_elsewhere(facts, region, p) is not None:
            return p
    return None
