"""PF105 blocking-h2d-copy: batch copied to the GPU without non_blocking=True."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, make_kwarg
from perflint.analysis import DATALOADER, Facts, call_name, get_arg, has_splat, literal_value
from perflint.names import dotted
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import file_trains, runs_once
from perflint.rules.data_loading.helpers import (
    DTYPES,
    collate_origin,
    dataset_origin,
    index_loader,
    loader_arg,
    loader_options,
)
from perflint.rules.data_loading.reads import read_cheaply
from perflint.rules.host_sync.helpers import waits_at_once
from perflint.rules.host_sync.waits import copy_waits_elsewhere, drained_at_iteration_end
from perflint.analysis.vocab import Kind


def _target_device(facts: Facts, call: cst.Call) -> str | None:
    """For `.to(...)`/`.cuda(...)`: "cuda", "maybe" (unknown device), or None (not a
    host-to-CUDA copy: CPU, other devices, dtype-only, another tensor)."""
    name = call_name(call)
    if name == "cuda":
        return "cuda"
    if name != "to":
        return None
    dev = get_arg(call, "device", 0)
    if dev is None:
        return None
    q = facts.tree.qualname(dev.value) or ""
    if q.startswith("torch.") and q.rsplit(".", 1)[-1] in DTYPES:
        return None
    ks = facts.kinds.of(dev.value)
    if ks & {Kind.TENSOR, Kind.OUTPUT, Kind.BATCH, Kind.MODEL}:
        return None
    dk = facts.devices.device_kinds(dev.value)
    if dk == {Kind.DEVICE_CPU} or (Kind.DEVICE_OTHER in dk and not dk & {Kind.DEVICE_CUDA, Kind.DEVICE_UNKNOWN}):
        return None
    if Kind.DEVICE_OTHER in dk:
        return "maybe"  # `torch.accelerator.current_accelerator()`: CUDA, or another accelerator
    if Kind.DEVICE_CUDA in dk and not (dk & {Kind.DEVICE_UNKNOWN}):
        return "cuda"
    if dk <= {Kind.DEVICE_CPU, Kind.DEVICE_CUDA}:
        return "cuda"  # "cuda" if torch.cuda.is_available() else "cpu"
    # Unknown: only a value named like a device counts (`self.img_dtype` may be a dtype).
    if dev.keyword is not None or _DEVICE_NAME.search((dotted(dev.value) or "").rsplit(".", 1)[-1].lower()):
        return "maybe"
    return None


_DEVICE_NAME = re.compile(r"(device|dev|cuda|gpu|rank)(_?id)?s?$|^(dev|device|gpu)")


def batch_loaders(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> list[cst.Call] | None:
    """The DataLoader calls a batch expression comes from; None when not traceable."""
    if depth > 8:
        return None
    while isinstance(expr, (cst.Subscript, cst.Attribute)) and not (
        isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"
    ):
        expr = expr.value
    if isinstance(expr, cst.Call) and call_name(expr) in ("to", "cuda", "float", "long", "half") and isinstance(expr.func, cst.Attribute):
        return batch_loaders(facts, expr.func.value, depth + 1)
    bindings = []
    if isinstance(expr, cst.Name):
        bindings = facts.bindings.lookup(expr.value, expr)
    elif isinstance(expr, cst.Attribute):
        bindings = facts.bindings.self_attr_bindings(expr)
    if not bindings:
        return None
    out: list[cst.Call] = []
    for b in bindings:
        if b.how in ("iter", "iter_unpack"):
            found = _iter_loaders(facts, b.node, depth + 1)
        elif b.how in ("expr", "unpack"):
            found = batch_loaders(facts, b.node, depth + 1) if not isinstance(b.node, (cst.DictComp, cst.ListComp, cst.GeneratorExp, cst.Tuple, cst.List, cst.Dict)) else None
            if isinstance(b.node, cst.Call) and call_name(b.node) == "next" and b.node.args:
                found = _iter_loaders(facts, b.node.args[0].value, depth + 1)
        else:
            found = None
        if found is None:
            return None
        out.extend(found)
    return out


def _iter_loaders(facts: Facts, it: cst.BaseExpression, depth: int) -> list[cst.Call] | None:
    if isinstance(it, cst.Call):
        q = facts.tree.qualname(it.func) or call_name(it) or ""
        short = q.split(".")[-1]
        if q == DATALOADER:
            return [it]
        if short in ("enumerate", "tqdm", "trange", "iter", "islice", "zip", "track") and it.args:
            found: list[cst.Call] = []
            for a in (it.args if short == "zip" else it.args[:1]):
                sub = _iter_loaders(facts, a.value, depth + 1)
                if sub is None:
                    return None
                found.extend(sub)
            return found
        if call_name(it) in ("items", "values") and isinstance(it.func, cst.Attribute):
            return batch_loaders(facts, it.func.value, depth + 1)
        return None
    if isinstance(it, (cst.Name, cst.Attribute)):
        bs = facts.bindings.lookup(it.value, it) if isinstance(it, cst.Name) else facts.bindings.self_attr_bindings(it)
        if not bs:
            return None
        out: list[cst.Call] = []
        for b in bs:
            if b.how != "expr":
                return None
            sub = _iter_loaders(facts, b.node, depth + 1)
            if sub is None:
                if facts.kinds.has_kind(b.node, Kind.BATCH, weak=False):
                    sub = batch_loaders(facts, b.node, depth + 1)
                if sub is None:
                    return None
            out.extend(sub)
        return out
    return None


class BlockingHostToDeviceCopy(Rule):
    """
    ## What it does
    Flags `.to(device)` and `.cuda()` on a batch from a DataLoader, inside a training or
    evaluation loop, without `non_blocking=True`.

    ## Why is this bad?
    A blocking host-to-device copy makes the CPU wait for the copy before it can queue the
    next kernels. From a pinned batch (`pin_memory=True`), `non_blocking=True` lets the copy
    run by DMA while the CPU carries on; PyTorch's pinned-memory tutorial shows many
    non-blocking copies plus one synchronisation beating blocking copies. From pageable
    memory the runtime synchronises anyway, so pin the loader too (PF102). Pinned plus
    non-blocking measured 1.18× on four conv-net steps with 37 MiB batches on an H100 (see
    PF102); no end-to-end figure is promised: the gain depends on batch size and step time.

    ## Example
    ```python
    for x, y in loader:  # DataLoader(..., pin_memory=True)
        x, y = x.to(device), y.to(device)
    ```

    ## Use instead
    ```python
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    ```

    ## Fix safety
    Adds `non_blocking=True`. **Safe** when the batch comes from a DataLoader in this file
    built with `pin_memory=True` and the target is provably CUDA (`.cuda()`, a `"cuda…"`
    literal, `torch.device("cuda…")`, or `"cuda" if torch.cuda.is_available() else "cpu"`):
    later kernels on the stream are ordered after the copy, and each DataLoader batch is a
    fresh tensor that nothing else writes. **Unsafe** otherwise (unknown device, unpinned or
    untraceable loader). Never offered for device-to-host copies (`.cpu()`, `.to("cpu")`),
    where `non_blocking=True` can hand back a tensor that is read before the copy lands.
    A batch cast on the host first (`x.float().cuda()`) is a different case: unless `x`
    already has that dtype, the cast makes a new tensor in pageable memory, which neither
    `pin_memory=True` nor `non_blocking=True` reach; the fix copies first and casts on the
    device (`x.cuda(non_blocking=True).float()`: the same values, and a smaller copy for
    uint8 images), **unsafe** (the device then holds the batch in its original dtype for
    the moment of the cast).

    ## Applies to
    torch 0.4 and later (`non_blocking=` came with 0.4; 0.3 spelled it `async=`, which is a
    reserved word since Python 3.7); CUDA targets only (never `cpu`, `mps`, `xpu`, or dtype-only `.to`).
    Not `batch.to(accelerator.device)` in a file that hands its loaders to that
    `accelerator.prepare(...)`: Accelerate's prepared loaders already yield batches there.
    Not for batches of a loader whose `collate_fn` or dataset already moves samples to the
    device (the copy is a no-op), nor of a name that every reaching assignment already copied
    to that device (`target = target.cuda()`, then `target_var = target.cuda()`: a no-op),
    nor of a loader read once after training (a final test), nor in an evaluation loop that
    runs once per run, after the training: in the function that trains, after its epoch or
    step loop and in no loop that holds training (`if args.do_test: for split in files:` after
    `for step in range(max_steps)`), nor in an evaluation function of
    a training file that is called only outside any loop, in code that runs once, and that no
    other file calls per step (`print(compute_accuracy(model, test_loader))` after training),
    nor in a loop every iteration of which also makes a blocking copy of host data that no rule
    reports (`tokenizer(texts, return_tensors="pt").to(device)`): the host waits there anyway,
    nor for a copy made before any GPU work of an iteration when every iteration ends, after
    its last backward or optimizer step, with a read back that no rule reports because a loss
    or layer whose `forward` waits runs in it too (`loss_avg.append(loss.item())` beside an
    OHEM loss that branches on a tensor), or a GradScaler steps an optimizer no rule fuses
    (see PF201), or a `torch.cuda.synchronize()` runs on every iteration: the copy meets an
    idle GPU, and `non_blocking` would overlap it with nothing,
    nor in the evaluation loop of a file that does not train when that loop runs once (a
    prediction script's `main`, also through a per-batch helper only that pass calls), or of a function or a branch that runs instead of training (`if not
    args.eval: train(args) else: test(args)`; an arm of `if args.test_only:` that ends in
    `sys.exit(0)`; a command-line subcommand of its own, `@cli.command() def test(...)`, that
    calls none of the file's training functions); an evaluation function nothing in the file calls is still
    reported (a training script elsewhere may call it every epoch), unless the project shows
    every call of it and none runs in code that trains (an evaluation script's helper,
    directly or through the functions that call it). Not for a copy the step
    waits for at once: the next thing the iteration runs, with nothing but more copies
    between, waits for the GPU (`lengths = lengths.to(device)` then `int(lengths.max())`, a
    timing `torch.cuda.synchronize()`, or a blocking copy of a tensor made on the host, even in
    the same statement: `torch.from_numpy(onehot).to(device)`), so an asynchronous copy would
    overlap with nothing. Nor for a batch joined on the host before its copy (`images =
    torch.cat(images, dim=0)` of two augmented views, `torch.stack(...)`): the joined tensor is
    new and pageable whatever the loader pins, so `non_blocking=True` changes nothing (copying
    each piece, then joining on the device, would).

    **Off by default** (`extend-select = ["PF105"]` turns it on). Whether an asynchronous copy
    gains anything depends on whether the GPU is still busy when the copy is issued, and in
    real training loops it mostly is not: the previous iteration ended with a read back
    (reported by PF201, or needed), a loss, layer, scaler or library step waited inside, or
    the batch is a few hundred kilobytes. Strict reviews of whole repositories no rule change
    had seen counted 3 right of 23 findings still reported (sets Y, Z, AA and AB: 0 of 4, 3
    of 11, 0 of 6, 0 of 2); the sets the rule was tuned on, 8 of 14. Fix the iteration's
    reads first (PF201), pin the loader (PF102), then select PF105.

    ## References
    - PyTorch tutorial "A guide on good usage of non_blocking and pin_memory() in PyTorch"
    """

    code = "PF105"
    name = "blocking-h2d-copy"
    summary = "batch copied to the GPU without non_blocking=True"
    fix_class = FixClass.SAFE_OR_UNSAFE
    tokens = (b".to(", b".cuda(")
    # Shares a fix pass with: the autocast region (PF403) or the `no_grad` block (PF304) another
    # fix puts around the copy changes nothing of `non_blocking=True`.
    fix_commutes_with = frozenset({"PF403", "PF304"})
    min_torch = (0, 4)  # `non_blocking=` came with 0.4 (0.3 spelled it `async=`, a keyword since Python 3.7)
    per_step = True
    default = False  # held-out whole-repository reviews: 3 right of 23 (see "Applies to")

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in facts.tree.calls():
            name = call_name(call)
            if name not in ("to", "cuda") or not isinstance(call.func, cst.Attribute):
                continue
            if get_arg(call, "non_blocking") is not None or has_splat(call):
                continue
            if name == "cuda" and get_arg(call, "non_blocking", 1) is not None:
                continue
            if name == "to" and len([a for a in call.args if a.keyword is None]) >= 3:
                continue  # .to(device, dtype, non_blocking) positionally
            recv = call.func.value
            if not facts.kinds.has_kind(recv, Kind.BATCH, weak=False):
                continue
            if _joined_on_host(facts, recv):
                continue  # a new tensor `torch.cat` made on the host: pageable, whatever the loader pins
            target = _target_device(facts, call)
            if target is None or (target == "maybe" and not (facts.devices.is_cuda_code or facts.devices.called_from_cuda_loop)):
                continue
            ctx = facts.loops.iteration_context(call)
            if ctx is None:
                continue
            if ctx.kind == "eval" and not file_trains(facts):
                host = ctx.node if isinstance(ctx.node, cst.FunctionDef) else facts.tree.enclosing_function(ctx.node)
                if host not in facts.step_callers and (host is None or runs_once(facts, host)
                                                       or _called_from_one_pass(facts, host)):
                    continue  # a prediction script run once: no training step waits for it
            if ctx.kind == "eval" and _final_evaluation(facts, ctx.node):
                continue  # `acc = evaluate(model, test_loader)` once, after (or before) the training loop
            if ctx.kind == "eval" and facts.hotpath.runs_instead_of_training(ctx.node):
                continue  # `if not args.eval: train() else: test()`: no training step waits for it
            if ctx.kind == "eval" and facts.hotpath.after_training(ctx.node):
                continue  # `if args.do_test:` after the training loop: once per run, after training
            if _to_prepared_accelerator_device(facts, call):
                continue
            if _copied_already(facts, recv, call, target):
                continue  # `target = target.cuda()` earlier: this copy is a no-op on the device
            loaders = batch_loaders(facts, recv)
            if loaders and all(_on_device_already(facts, l) or read_cheaply(facts, l) or index_loader(facts, l)
                               for l in loaders):
                continue  # the batch is on the device already, or the loader is read once or rarely
            if _maybe_project_object(facts, name, loaders):
                continue  # the batch may be a project class whose `.cuda()`/`.to()` takes no `non_blocking`
            if waits_at_once(facts, ctx.node, call):
                continue  # the step reads back from the GPU before any work: nothing to overlap the copy with
            if copy_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # a blocking copy of host data (a tokenizer's output) waits on every iteration anyway
            if drained_at_iteration_end(facts, ctx.node, call) is not None:
                continue  # the last iteration ended in a read no rule reports: the GPU is idle at the copy
            new = add_arg(call, make_kwarg("non_blocking", "True"))
            cast = _host_cast(recv)
            if cast is not None:
                # `x.float().cuda()`: the cast makes a new, pageable tensor on the host, which no
                # pinned loader and no `non_blocking` reach: copy first, then cast on the device.
                moved = add_arg(call.with_changes(func=call.func.with_changes(value=cast.func.value)),
                                make_kwarg("non_blocking", "True"))
                fix = self.unsafe(f"Copy with `non_blocking=True`, then `.{call_name(cast)}()` on the device",
                                  {call: cast.with_changes(func=cast.func.with_changes(value=moved))})
                yield Violation(
                    call.func.attr,
                    f"Blocking host-to-device copy of a batch cast on the host: `.{name}(...)` waits for the copy "
                    f"on every step, and `.{call_name(cast)}()` before it makes a new tensor in pageable memory "
                    f"unless the batch already has that dtype; copy first with `non_blocking=True` (from a pinned "
                    f"DataLoader) and cast on the device",
                    fix,
                )
                continue
            pinned = bool(loaders) and all(
                literal_value((loader_arg(l, "pin_memory") or cst.Arg(cst.Name("False"))).value) is True
                for l in loaders
            )
            if pinned and target == "cuda":
                fix = self.safe("Add `non_blocking=True`", {call: new})
            else:
                fix = self.unsafe("Add `non_blocking=True`", {call: new})
            if pinned:
                tail = "(from its pinned DataLoader it can overlap with compute)"
            elif loaders and not any(has_splat(l) for l in loaders):  # `**loader_kwargs` may pin
                tail = ("(its DataLoader has no `pin_memory=True`: pin it too, see PF102, or the copy still "
                        "blocks)")
            else:
                tail = ("(only a copy from pinned memory overlaps with compute: if its DataLoader has no "
                        "`pin_memory=True`, pin it too, see PF102)")
            yield Violation(
                call.func.attr,
                f"Blocking host-to-device copy of a batch: `.{name}(...)` without `non_blocking=True` "
                f"waits for the copy on every step {tail}",
                fix,
            )


def _final_evaluation(facts: Facts, region: cst.CSTNode) -> bool:
    """An evaluation loop in a top-level function of a file that trains, every call of which
    in the file sits outside any loop in code that runs once, and that no other file calls
    per step: a test pass after training (or a baseline before it), not an evaluation that
    runs during training."""
    host = region if isinstance(region, cst.FunctionDef) else facts.tree.enclosing_function(region)
    if host is None or facts.tree.parent(host) is not facts.module or host in facts.step_callers:
        return False
    if not file_trains(facts) or not facts.tree.calls_named(host.name.value):
        return False
    for a in facts.tree.ancestors(region):
        if a is host:
            break
        if isinstance(a, (cst.For, cst.While)):
            return False  # the evaluation runs on every iteration of a loop around it (each epoch)
    return runs_once(facts, host)


def _called_from_one_pass(facts: Facts, fn: cst.CSTNode) -> bool:
    """A per-batch helper of a file that does not train (`run_model(batch)`), every call of
    which sits in a loop of a function that runs once (a prediction script's single pass)."""
    if not isinstance(fn, cst.FunctionDef) or facts.tree.parent(fn) is not facts.module:
        return False
    calls = facts.tree.calls_named(fn.name.value)
    return bool(calls) and all(
        (host := facts.tree.enclosing_function(c)) is not None and host is not fn and runs_once(facts, host)
        for c in calls)


# Tensor methods that return a copy in another dtype (the tensor itself when it has that
# dtype already) and take no argument.
_HOST_CASTS = frozenset({"float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte", "char"})


_JOINS = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.stack"})


def _joined_on_host(facts: Facts, recv: cst.BaseExpression) -> bool:
    """The copied batch is a tensor `torch.cat`/`torch.stack` joined on the host, directly or
    through a name bound only to such joins (SimCLR: `images = torch.cat(images, dim=0)`, the
    two augmented views): a new tensor in pageable memory, which the loader's `pin_memory`
    never reaches, so `non_blocking=True` would not overlap the copy with anything (copying
    each piece and joining on the device would)."""
    values = [recv]
    if isinstance(recv, cst.Name):
        bindings = facts.bindings.lookup(recv.value, recv)
        if not bindings or any(b.how != "expr" for b in bindings):
            return False
        values = [b.node for b in bindings]
    return all(isinstance(v, cst.Call) and facts.tree.qualname(v.func) in _JOINS for v in values)


def _host_cast(recv: cst.BaseExpression) -> cst.Call | None:
    """`batch.float()` as the receiver of a copy: the cast call, else None."""
    if isinstance(recv, cst.Call) and not recv.args and isinstance(recv.func, cst.Attribute) \
            and recv.func.attr.value in _HOST_CASTS:
        return recv
    return None


def _maybe_project_object(facts: Facts, method: str, loaders: list[cst.Call] | None) -> bool:
    """The batch is not known to be tensors (an untraceable loader, or one with its own
    `collate_fn`) and a class of this file or of the project defines `method` without a
    `non_blocking` parameter: the batch may be one of those objects, where the advice and
    its fix do not apply (the fix would raise a TypeError)."""
    if loaders and all(loader_arg(l, "collate_fn") is None for l in loaders):
        return False
    for cls in facts.tree.index[cst.ClassDef]:
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        for stmt in body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == method:
                p = stmt.params
                names = {x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)}
                if "non_blocking" not in names and p.star_kwarg is None:
                    return True
    return facts.project is not None and facts.project.narrow_copy_method(method)


def _copied_already(facts: Facts, recv: cst.BaseExpression, call: cst.Call, target: str) -> bool:
    """`target = target.cuda()` then `target_var = target.cuda()`: every binding of the name
    that reaches the copy is an earlier copy to the same device (CUDA; or `.to(d)` with the
    same device expression), so this one moves nothing."""
    if not isinstance(recv, cst.Name):
        return False
    found = facts.bindings.lookup(recv.value, recv)
    if not found:
        return False
    for b in found:
        prev = b.node
        if b.how != "expr" or not isinstance(prev, cst.Call) or prev is call \
                or call_name(prev) not in ("to", "cuda") or not isinstance(prev.func, cst.Attribute):
            return False
        was = _target_device(facts, prev)
        if was == "cuda" and target == "cuda":
            continue
        here, there = get_arg(call, "device", 0), get_arg(prev, "device", 0)
        if was is not None and here is not None and there is not None and call_name(call) == call_name(prev) == "to" \
                and dotted(here.value) is not None and dotted(here.value) == dotted(there.value):
            continue
        return False
    return True


def _on_device_already(facts: Facts, loader: cst.Call) -> bool:
    """The loader's collate_fn or dataset places samples on a device: the batch's `.to(device)`
    copies nothing."""
    opts = loader_options(facts, loader)
    if opts is None:
        return False
    return collate_origin(facts, loader, opts.get("collate_fn")) == "device" \
        or dataset_origin(facts, opts.get("dataset")) == "device"


def _to_prepared_accelerator_device(facts: Facts, call: cst.Call) -> bool:
    """`batch.to(accelerator.device)` in a file that hands its loaders to
    `accelerator.prepare(...)`: Accelerate's prepared loaders already yield batches on that
    device (`device_placement=True`), so the `.to` copies nothing."""
    dev = get_arg(call, "device", 0)
    if dev is None or not (isinstance(dev.value, cst.Attribute) and dev.value.attr.value == "device"):
        return False
    acc = dev.value.value
    if not isinstance(acc, cst.Name) or not _is_accelerator(facts, acc):
        return False
    mine = [b.node for b in facts.bindings.lookup(acc.value, acc)]
    for c in facts.tree.calls():
        f = c.func
        if isinstance(f, cst.Attribute) and f.attr.value in ("prepare", "prepare_data_loader") \
                and isinstance(f.value, cst.Name) and f.value.value == acc.value \
                and [b.node for b in facts.bindings.lookup(acc.value, f.value)] == mine \
                and any(facts.kinds.has_kind(a.value, Kind.DATALOADER) for a in c.args):
            return True
    return False


def _is_accelerator(facts: Facts, name: cst.Name) -> bool:
    bs = facts.bindings.lookup(name.value, name)
    return bool(bs) and all(b.how == "expr" and isinstance(b.node, cst.Call)
                            and (facts.tree.qualname(b.node.func) or "").endswith("accelerate.Accelerator") for b in bs)
