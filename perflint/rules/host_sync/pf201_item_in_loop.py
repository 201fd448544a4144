"""PF201 item-in-loop: `.item()` on every iteration of a training/eval loop (host-device sync)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, iter_nodes
from perflint.rules.base import Rule, Violation
from perflint.rules.common import param_for
from perflint.rules.host_sync.values import gathered_size
from perflint.rules.host_sync.waits import (
    batch_copy_waits_elsewhere,
    copy_waits_elsewhere,
    forward_waits_elsewhere,
    helper_waits_elsewhere,
    library_waits_elsewhere,
    numpy_index_waits_elsewhere,
    scaler_waits_elsewhere,
    synchronize_elsewhere,
)
from perflint.rules.host_sync.helpers import (
    feeds_environment,
    item_sync,
    later_syncs,
    outer_chain,
    waited_before,
)
from perflint.analysis.vocab import Kind


_LOSS_HINT = (
    "accumulate the loss on the device (`running += loss.detach()`) and call `.item()` once per "
    "epoch or log interval (`if step % 50 == 0: print(running.item() / 50)`)"
)
_COUNT_HINT = (
    "accumulate the count on the device (`correct += (pred == y).sum()`, from "
    "`torch.zeros((), dtype=torch.long, device=device)`) and call `.item()` once after the loop"
)
_RATE_HINT = (
    "sum the matches on the device instead (`correct += (pred == y).sum()`) and divide once "
    "after the loop (`correct.item() / total`)"
)
_BRANCH_HINT = (
    "the branch condition needs the value on the host, so as written every iteration waits: "
    "test it only every N steps (`if step % 100 == 0`), or keep the condition on the device as "
    "a tensor flag (`bad |= ~torch.isfinite(value)`) and read the flag once per log interval"
)
_SIZE_HINT = (
    "the value sizes or selects host-side work (a slice, an index, a `range`, a random crop), so it is needed "
    "on the host now: "
    "take it from the batch before it is copied to the device (the loader's CPU tensors), or keep a CPU copy "
    "of the lengths, instead of reading the device tensor back"
)
_GENERIC_HINT = (
    "keep the value on the device (`.detach()`) and convert once per log interval, e.g. collect "
    "the per-step tensors and read them together (`torch.stack(values).tolist()`)"
)
_REDUCTIONS = {"sum", "mean", "count_nonzero", "float", "double", "int", "long", "half", "detach", "nansum", "nanmean"}
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "isclose", "logical_not", "logical_and", "logical_or"}


def _in_condition(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` is read by the test of an `if`/`while`/conditional expression/`assert`."""
    cur = node
    for parent in facts.tree.ancestors(node):
        if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and cur is parent.test:
            return True
        if isinstance(parent, cst.Assert) and cur is parent.test:
            return True
        if isinstance(parent, (cst.BaseSuite, cst.SimpleStatementLine)):
            return False
        cur = parent
    return False


def _feeds_condition(facts: Facts, call: cst.Call) -> bool:
    """The value decides a branch: `if loss.item() > 10:`, or `v = loss.item()` followed in
    the same block by `if not math.isfinite(v):`."""
    outer: cst.CSTNode = call
    for c in outer_chain(facts, call):
        outer = c
    if _in_condition(facts, outer):
        return True
    parent = facts.tree.parent(outer)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        where = facts.tree.block_of(parent)
        if where is None:
            return False
        block, i = where
        for st in list(block.body)[i + 1:]:
            test = st.test if isinstance(st, (cst.If, cst.While)) else None
            if test is not None and any(isinstance(n, cst.Name) and n.value == name for n in iter_nodes(test)):
                return True
    return False


_SIZING_WRAPPERS = {"int", "round", "min", "max", "float", "abs"}


def _sizes_host_work(facts: Facts, call: cst.Call) -> bool:
    """The value read back bounds host-side work: it is used (through `int(...)`,
    arithmetic, `min([...])`, or a name assigned from that) in a slice or index, as a
    `range(...)` bound, or as an argument of `random`/`numpy.random` (StyleTTS2's
    `mel_len = int(lengths.min().item() / 2 - 1)` then `x[:, start:start + mel_len]`)."""
    outer: cst.CSTNode = call
    for c in outer_chain(facts, call):
        outer = c
    cur = outer
    for a in facts.tree.ancestors(outer):
        if isinstance(a, (cst.BinaryOperation, cst.UnaryOperation, cst.Arg, cst.Element, cst.List, cst.Tuple)):
            cur = a
            continue
        if isinstance(a, cst.Call) and isinstance(a.func, cst.Name) and a.func.value in _SIZING_WRAPPERS:
            cur = a
            continue
        break
    if _used_as_size(facts, cur):
        return True
    if _param_used_as_size(facts, cur):
        return True
    parent = facts.tree.parent(cur)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        scope = facts.tree.enclosing_function(parent) or facts.module
        for use in list(facts.tree.later_uses(name, scope, facts.tree.order.get(parent.targets[0].target, 0)))[:12]:
            if _used_as_size(facts, use):
                return True
    return False


def _param_used_as_size(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` is an argument of a call of a function of this file (a nested helper too) whose
    parameter is used as an index or a size there (`pick(x, rot.item())` where `pick` does
    `TRANSFORMS[rot](x)`)."""
    arg = node if isinstance(node, cst.Arg) else facts.tree.parent(node)
    call = facts.tree.parent(arg) if isinstance(arg, cst.Arg) else None
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name) or arg.star:
        return False
    fns = facts.tree.functions_by_name.get(call.func.value) or []
    name = param_for(fns[0], call, arg) if len(fns) == 1 else None
    if name is None:
        return False
    fn = fns[0]
    return any(_used_as_size(facts, use) for use in list(facts.tree.later_uses(name, fn, facts.tree.order.get(fn.body, 0)))[:12])


def _used_as_size(facts: Facts, node: cst.CSTNode) -> bool:
    cur = node
    for a in facts.tree.ancestors(node):
        if isinstance(a, (cst.Slice, cst.SubscriptElement, cst.Index)):
            return True
        if isinstance(a, cst.Call):
            q = facts.tree.qualname(a.func) or ""
            if (isinstance(a.func, cst.Name) and a.func.value == "range") or q.startswith(("numpy.random.", "random.")):
                return True
            if isinstance(a.func, cst.Name) and a.func.value in _SIZING_WRAPPERS:
                cur = a
                continue
            return False
        if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return False
        cur = a
    return False


def _single_value(facts: Facts, expr: cst.BaseExpression) -> cst.BaseExpression:
    """What a name stands for when it is bound once (`acc = (p == y).float().mean()`)."""
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr" and isinstance(bs[0].node, cst.BaseExpression):
            return bs[0].node
    return expr


def _match_count(expr: cst.BaseExpression) -> str | None:
    """"count" for `(p == y).sum()` / `p.eq(y).sum()`, "rate" for `(p == y).float().mean()`."""
    reductions: list[str] = []
    cur = expr
    while isinstance(cur, cst.Call) and isinstance(cur.func, cst.Attribute) and cur.func.attr.value in _REDUCTIONS:
        reductions.append(cur.func.attr.value)
        cur = cur.func.value
    compares = isinstance(cur, cst.Comparison) or (
        isinstance(cur, cst.Call) and isinstance(cur.func, cst.Attribute) and cur.func.attr.value in _COMPARISONS
    )
    if not compares or not ({"sum", "mean", "count_nonzero", "nansum", "nanmean"} & set(reductions)):
        return None
    return "rate" if {"mean", "nanmean"} & set(reductions) else "count"


def _is_loss(facts: Facts, expr: cst.BaseExpression) -> bool:
    cur = expr
    while isinstance(cur, cst.Call) and isinstance(cur.func, cst.Attribute) and cur.func.attr.value in ("detach", "mean", "sum", "float", "cpu"):
        cur = cur.func.value
    while isinstance(cur, cst.Subscript):
        cur = cur.value  # `loss_fn(...)[0]`: the first output of a loss function
    if Kind.LOSS in facts.kinds.of(cur):
        return True
    if isinstance(cur, cst.Call):
        return "loss" in (call_name(cur) or "").lower()
    text = facts.tree.receiver_text(cur) if isinstance(cur, (cst.Name, cst.Attribute)) else None
    return text is not None and "loss" in text.rsplit(".", 1)[-1].lower()


def _advice(facts: Facts, call: cst.Call) -> str:
    """What to do instead, for the value at hand: a branch condition, a count or accuracy,
    a loss, or anything else."""
    recv = call.func.value if isinstance(call.func, cst.Attribute) else call
    if _sizes_host_work(facts, call):
        return _SIZE_HINT
    if _feeds_condition(facts, call):
        return _BRANCH_HINT
    kind = _match_count(_single_value(facts, recv))
    if kind == "count":
        return _COUNT_HINT
    if kind == "rate":
        return _RATE_HINT
    if _is_loss(facts, recv):
        return _LOSS_HINT
    return _GENERIC_HINT


class ItemInLoop(Rule):
    """
    ## What it does
    Flags `.item()` calls that run on every iteration of a training or evaluation loop (or
    of a per-step function such as `training_step`), outside branches throttled by
    `if step % N == 0:`, `if i == 0:` or `if is_last:`.

    ## Why is this bad?
    `.item()` copies a value from the GPU and makes the CPU wait until every queued kernel
    has finished: the CPU can no longer run ahead to queue the next step, and the GPU idles
    while Python catches up. Reported effects vary widely: 4% on a small model (LANfactory
    PR #120, RTX 3090), +5–7% from deferring one of two `.item()` per step
    (fvdb-reality-capture PR #144), 1.18× from removing most host reads (fairchem PR #2193,
    8×B200), and "training loop time divided by 2" in a launch-bound loop (joliGEN PR #374).
    On an H100 80GB (torch 2.11, `python benchmarks/rule_effects.py`; results in
    `benchmarks/results/h100/rule_effects/`), one `.item()` per step of a 5-layer MLP
    changed the time of 20 steps by −2% to +4% (30.7 vs 31.4 ms at width 512, 94.8 vs 90.8
    ms at width 4096), within noise: a single sync per step costs little when the host has
    nothing else to run ahead with. Expect 0–20%, the high end in loops with several syncs
    and host-side work between them. On a CPU-only run `.item()` costs nothing.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    ```

    ## Use instead
    ```python
    running = torch.zeros((), device=device)
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss.detach()
        if step % 50 == 0:
            print(running.item() / 50)
            running.zero_()
    ```
    The message fits the value read: for a loss, accumulate `loss.detach()` and call
    `.item()` once per epoch or log interval; for a count or accuracy (a comparison summed or
    averaged, `(pred == y).sum()`, `pred.eq(y).sum()`), accumulate the count on the device
    and convert once after the loop; for a value that decides a branch
    (`if loss.item() > limit:`, or a name assigned from it and tested next), the branch
    needs the host value, so test it every N steps or keep the condition as a device-side
    flag; anything else: keep it on the device and convert once per log interval.

    ## Fix safety
    No fix. Turning `total += loss.item()` into `total += loss.detach()` changes a float
    into a 0-d tensor, which breaks `json.dump`, `round()` and most loggers. Use
    `torch.cuda.set_sync_debug_mode("warn")` to find the remaining syncs at run time.

    ## Applies to
    All torch versions. Not reported in files where nothing can be on an accelerator (no
    CUDA, no `.to(<device>)` that may be a GPU, no `device=` argument, no Accelerate or
    Lightning): there `.item()` costs nothing. Nor for the sizes a gather of Python objects
    exchanges (`size_list = [int(s.item()) for s in size_list]` after `dist.all_gather(size_list,
    ...)`, then `max(size_list)`): the host needs them to allocate the receive buffers. Nor in a
    loop every iteration of which makes a blocking copy of host data that no rule reports
    (`tokenizer(texts, return_tensors="pt").to(device)`, `torch.from_numpy(a).cuda()`, and
    through a legacy CUDA tensor type: `Tensor(np.random.normal(...))` or `imgs.type(Tensor)`
    with `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`), also
    inside a function of this file the loop calls each time (`compute_embeddings_fn(text)`, a
    `functools.partial` of a function whose `encode_prompt` copies `text_inputs.input_ids`,
    outside any branch or loop of theirs): from
    pageable memory that copy waits for the GPU anyway, and one more read adds next to nothing;
    the same for a loop that fetches its batches from a loader Accelerate prepared (`for batch
    in loader`, `next(self.dl)` through a `cycle()` generator), which copies each batch to the
    device as it hands it out, blocking (its default `non_blocking=False`; not when the
    `Accelerator` gets a `dataloader_config`).
    Nor in a loop every iteration of which copies its batch to the GPU without `non_blocking`
    (`x, y = x.to(device), y.to(device)`, `x.cuda(gpu)`; the batch of a DataLoader, or what a
    loop takes from an iterable named like one, `enumerate(train_loader)` with the loader from
    a helper the analysis cannot see into or `with tqdm(data_loader) as bar: for x, y in bar:`,
    or fetches from one, `val_loader.next_batch()`) or
    copies a tensor made on the host
    (`torch.rand(n, 1).to(device)`) while the rule that reports that copy is not selected:
    PF105 for the batch, PF409 for the tensor, both off by default. Such a copy waits for
    the previous step anyway, whether the batch is pinned or not, and the read only adds the
    host work between the two. Strict reviews counted 16 of 21 reviewed findings of this
    kind false (sets W to AF). With PF105 or PF409 selected, the copy is theirs to fix and
    the read is reported.
    Nor in a loop every iteration of which indexes a GPU tensor with a numpy array or a CPU
    tensor (`b_obs[mb_inds]` with `mb_inds` a slice of `np.arange(n)` or of
    `torch.randperm(n)`, the minibatch loop of PPO implementations): torch copies the index to
    the GPU, blocking, so the iteration waits there anyway. Strict reviews counted 9 of 9 such
    findings false (CleanRL's PPO scripts); a permutation made on the GPU
    (`torch.randperm(n, device=device)`) copies nothing, and the read is reported.
    Nor in a loop that calls, on every iteration, a loss or layer (of the file or the project)
    whose `forward` waits for the GPU each time it runs: branches on a tensor (`if loss[k] >
    self.thresh:`), indexes with a boolean mask (`loss[loss > self.thresh]`, an online
    hard-example loss), reads back or synchronizes, itself or in a layer it holds and calls
    each time (`self.criterion(out, y)`). No rule reports a wait inside a forward, so the step
    waits there whatever is fixed. The same for a function of the file that the loop calls on
    every iteration and that waits each time it runs at a point no rule reports: an op whose
    output size depends on the data (a metric helper's `pred.eq(gold).masked_select(mask)`,
    `torch.nonzero`) or a blocking copy of host data, in its body or one or two calls deeper.
    A helper that only reads back with `.item()` is no excuse: PF201 reports that read.
    Nor in a loop whose every iteration steps a GradScaler (`scaler.step(optimizer)`, or a
    callable scaler such as timm's `NativeScaler` given the optimizer) for an optimizer that is
    not fused and that no rule fuses: GradScaler reads its inf check back before each such
    step (`_maybe_opt_step` in `torch/amp/grad_scaler.py`). That is any optimizer before torch
    1.13, and SGD, RMSprop and the like built without `fused`; not Adam or AdamW from torch
    2.0, whose `fused=True` (PF302) lets the scaler step without reading back, nor a scaler
    built with `enabled=False`. Nor in a loop whose every iteration steps an optimizer wrapped
    in apex's `LARC` (SwAV, SimSiam's `--lars`): `LARC.step` tests each parameter's norm on the
    host (`if param_norm != 0 and grad_norm != 0:`); the optimizer is followed through
    `amp.initialize(model, optimizer)` and into the functions the file calls with it, and one
    wrapped behind a switch (`if args.lars:`) counts. Nor in a loop that calls `torch.cuda.synchronize()` on every
    iteration (MAE's and ConvNeXt's `train_one_epoch`, after the optimizer step): the
    iteration drains the GPU there anyway, and the read alone gains nothing. PF202, when
    selected, reports that synchronize; once it is gone, the read is reported.

    Reported only with evidence that the read runs on every step (the finding's `why`,
    shown by `perflint check --show-why`, in JSON and on hover): the training loop and its
    backward or optimizer step, the call that reaches a per-step helper, the branch. Not
    behind a step-count throttle, including one held in a name (`log_now = it % k == 0`), a
    parameter every caller passes such a flag, or an earlier `if step % every: return`. An
    evaluation loop counts only when it runs during training (the file trains, Lightning's
    `validation_step`, or a module that trains calls it): inference, prediction,
    visualisation and export scripts, parity checks, a throughput probe that returns after
    one batch and a loop that fits inputs to a frozen model (`Adam([latent])`) are not
    reported. Reads with no forward, backward or optimizer step between them are one wait:
    it is reported once, at its first read (or the first that runs every time), the others
    listed in its `why`; not at all when the iteration waits anyway (a timing
    `synchronize()`, a host copy a CPU metric or a file needs (also a project's metric handed `out.cpu().numpy()`), also through a list of copies later joined with numpy, a helper or model that reads
    back itself, TensorBoard's `add_scalar` of a value computed from device tensors, a blocking copy to the GPU of a tensor made on the host, also at the start of the next iteration with no GPU work before it (`x = torch.from_numpy(a).to(device)`, or the fetch from a torchtext iterator built with `device=`), an op
    whose output size depends on the data: `.nonzero()`, `torch.unique`, one-argument
    `torch.where`). Not reported for an element of what such an op returned (sizing it
    already waited), nor for a tensor a torch factory made without `device=` (on the CPU). Strict review of whole public repositories (issue 21; 56 repositories, three
    review sheets): 101 right of 127 reviewed findings still reported (0.80), up from 104 of
    196 (0.53); 14 of the 26 false alarms are reads that size host work, whose message now
    says to take the value from the CPU batch (the fix the review asked for).

    **Off by default** (`extend-select = ["PF201"]` turns it on). On the seven sets of public
    repositories reviewed since (AD to AJ, 68 repositories), each sampled before any change
    it prompted, 9 of 74 findings were right (0.12); after the changes each set prompted,
    0.43 over all reviewed sheets. A read costs time only when nothing else in the iteration
    waits for the GPU, and what waits is spread over code a static reader often cannot see:
    a dataset that copies to the GPU in `__getitem__`, a model whose forward copies host
    tensors or sizes an output by the data, a metric library's NaN check, a blocking copy
    inside a helper of another module; or the model is small and the step launch-bound. The
    right findings were loops whose batches arrive with `non_blocking=True` copies
    (ImageNet-scale training in timm, SwAV, MoCo v3, SimSiam, Swin, ConvNeXt, MAE) and
    per-parameter reads in gradient-clipping helpers (VITS, Glow-TTS, DINO).

    ## References
    - PyTorch performance tuning guide, "Avoid unnecessary CPU-GPU synchronization"
    - torchtune PR #522 (40–50 ms of `cudaStreamSynchronize` per step from `loss.item()`)
    """

    code = "PF201"
    name = "item-in-loop"
    summary = "`.item()` on every iteration of a training/eval loop (host-device sync)"
    tokens = (b".item(",)
    per_step = True
    default = False  # held-out whole-repository reviews: 9 right of 74 at sampling (see "Applies to")

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.filewide.may_use_accelerator:
            return  # everything is on the CPU: `.item()` costs nothing
        for call in facts.tree.calls():
            if not item_sync(facts, call) or gathered_size(facts, call):
                continue
            ctx = facts.loops.iteration_context(call)
            if ctx is None or feeds_environment(facts, call):
                continue
            why = facts.hotpath.hot_path(call)
            if why is None:
                continue  # not part of training: an inference script, a tool, a check
            if waited_before(facts, ctx.node, call, collected=True) is not None:
                continue  # the iteration just waited for the GPU: this read costs nothing more
            if copy_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # a blocking copy of host data waits on every iteration anyway
            if batch_copy_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # so does a blocking copy of the batch (PF105's, off by default)
            if numpy_index_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # and indexing a GPU tensor with a numpy array (its index is copied, blocking)
            if forward_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # a loss or layer called on every iteration waits inside its forward anyway
            if scaler_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # GradScaler reads its inf check back before each step of an unfused optimizer
            if synchronize_elsewhere(facts, ctx.node, call) is not None:
                continue  # the iteration drains the GPU at a `torch.cuda.synchronize()` anyway
            if helper_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # a helper called on every iteration waits inside (`masked_select`) anyway
            if library_waits_elsewhere(facts, ctx.node, call) is not None:
                continue  # apex's LARC step, or a SyncBatchNorm forward, waits on every iteration anyway
            where = "training" if ctx.kind == "train" else "evaluation"
            yield Violation(
                call.func.attr,
                f"`.item()` on every iteration of the {where} loop waits for the GPU; " + _advice(facts, call),
                why=why + later_syncs(facts, ctx.node, call),
            )
