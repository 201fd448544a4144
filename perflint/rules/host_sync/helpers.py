"""PF2 — host-device synchronisation inside training and evaluation loops."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg, iter_nodes
from perflint.analysis.loops import after_latch
from perflint.names import dotted
from perflint.rules import register
from perflint.rules.base import Rule, Violation

_SYNC_METHODS = {"item", "cpu", "numpy", "tolist"}
_ON_DEVICE_HINT = (
    "accumulate on the device (`running += loss.detach()`) and read it once per log "
    "interval (`if step % 50 == 0: print(running.item() / 50)`)"
)
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
    "the value sizes host-side work (a slice, a `range`, a random crop), so it is needed on the host now: "
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
    for parent in facts.ancestors(node):
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
    for c in _outer_chain(facts, call):
        outer = c
    if _in_condition(facts, outer):
        return True
    parent = facts.parent(outer)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        where = facts.block_of(parent)
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
    for c in _outer_chain(facts, call):
        outer = c
    cur = outer
    for a in facts.ancestors(outer):
        if isinstance(a, (cst.BinaryOperation, cst.UnaryOperation, cst.Arg, cst.Element, cst.List, cst.Tuple)):
            cur = a
            continue
        if isinstance(a, cst.Call) and isinstance(a.func, cst.Name) and a.func.value in _SIZING_WRAPPERS:
            cur = a
            continue
        break
    if _used_as_size(facts, cur):
        return True
    parent = facts.parent(cur)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        scope = facts.enclosing_function(parent) or facts.module
        for use in list(facts.later_uses(name, scope, facts.order.get(parent.targets[0].target, 0)))[:12]:
            if _used_as_size(facts, use):
                return True
    return False


def _used_as_size(facts: Facts, node: cst.CSTNode) -> bool:
    cur = node
    for a in facts.ancestors(node):
        if isinstance(a, (cst.Slice, cst.SubscriptElement, cst.Index)):
            return True
        if isinstance(a, cst.Call):
            q = facts.qualname(a.func) or ""
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
        bs = facts.lookup(expr.value, expr)
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
    if "loss" in facts.kinds(cur):
        return True
    if isinstance(cur, cst.Call):
        return "loss" in (call_name(cur) or "").lower()
    text = facts.receiver_text(cur) if isinstance(cur, (cst.Name, cst.Attribute)) else None
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


def _outer_chain(facts: Facts, call: cst.Call) -> Iterator[cst.Call]:
    """Calls that use `call` as their method receiver: `call.cpu().numpy()` → cpu, numpy."""
    cur: cst.CSTNode = call
    while True:
        attr = facts.parent(cur)
        if not (isinstance(attr, cst.Attribute) and attr.value is cur):
            return
        outer = facts.parent(attr)
        if not (isinstance(outer, cst.Call) and outer.func is attr):
            return
        yield outer
        cur = outer


def _inner_chain(expr: cst.BaseExpression) -> Iterator[cst.Call]:
    """Method calls on the receiver side: for `a.cpu().numpy()`, the `.cpu()` call."""
    cur = expr
    while True:
        if isinstance(cur, cst.Call) and isinstance(cur.func, cst.Attribute):
            yield cur
            cur = cur.func.value
        elif isinstance(cur, cst.Attribute):
            cur = cur.value
        elif isinstance(cur, cst.Subscript):
            cur = cur.value
        else:
            return


_ENV_METHODS = {"step", "step_async", "act", "send"}


def _env_call(facts: Facts, call: cst.CSTNode) -> bool:
    """`env.step(...)`: a `step`/`act`/`send` method of something named as an environment
    (`env`, `envs`, `train_env`, `self.env`), never an optimizer, scheduler or GradScaler."""
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
        return False
    if call.func.attr.value not in _ENV_METHODS:
        return False
    if facts.is_optimizer_step(call) or facts.is_scaler_step(call):
        return False
    recv = facts.receiver_text(call.func.value) or ""
    last = recv.rsplit(".", 1)[-1].lower()
    return "env" in last and not (facts.kinds(call.func.value) & {"optimizer", "scaler", "model"})


def _feeds_environment(facts: Facts, call: cst.Call) -> bool:
    """The host value `call` reads is what the next step needs from the host: an action sent
    to `env.step(...)`, directly (`env.step(a.cpu().numpy())`) or through a name assigned
    from it (`actions = q.argmax(1).cpu().numpy()` ... `envs.step(actions)`).  Such a sync is
    inherent to the algorithm (the environment runs on the CPU), so it is not reported."""
    outer: cst.CSTNode = call
    for c in _outer_chain(facts, call):
        outer = c
    return _value_feeds_environment(facts, outer, 0)


def _value_feeds_environment(facts: Facts, value: cst.CSTNode, depth: int) -> bool:
    if depth > 3:
        return False
    parent = facts.parent(value)
    if isinstance(parent, cst.Arg):
        return _env_call(facts, facts.parent(parent))
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        fn = facts.enclosing_function(parent) or facts.module
        for node in facts.later_uses(name, fn, facts.order.get(parent.targets[0].target, 0)):
            arg = facts.parent(node)
            if isinstance(arg, cst.Arg) and _env_call(facts, facts.parent(arg)):
                return True
        return False
    if isinstance(parent, cst.Return):
        # `def select_action(...): return q(obs).argmax(1).item()` whose result is sent to
        # `env.step(...)` at a call site.
        fn = facts.enclosing_function(parent)
        if fn is None:
            return False
        return any(
            isinstance(c.func, cst.Name) and c.func.value == fn.name.value
            and _value_feeds_environment(facts, c, depth + 1)
            for c in facts.calls()
        )
    return False


_CLOCKS = {"time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
           "time.monotonic_ns", "timeit.default_timer"}


def _brackets_a_timer(facts: Facts, call: cst.Call) -> bool:
    """`torch.cuda.synchronize()` in the statement just before or after a clock read, in a
    block that adds up elapsed time every iteration (`t_model += time.perf_counter() - t0`):
    measuring is the loop's purpose, and the sync is what makes the figure mean anything.
    A sync that feeds a time printed only every N steps is still reported."""
    where = facts.block_of(call)
    if where is None:
        return False
    block, i = where
    line = facts.statement_of(call)
    body = list(block.body)
    accumulates = any(
        isinstance(st, cst.SimpleStatementLine) and any(_records_elapsed(facts, small) for small in st.body)
        for st in body
    )
    if not accumulates:
        return False
    for st in body[max(i - 1, 0):i + 2]:
        if st is not line and any(facts.qualname(c.func) in _CLOCKS for c in facts.calls_within(st)):
            return True
    return False


def _records_elapsed(facts: Facts, small: cst.BaseSmallStatement) -> bool:
    """`t_model += time.perf_counter() - t0`, `times.append(time.time() - t0)`,
    `meter.update(time.time() - end)`: a clock reading kept on every iteration."""
    if isinstance(small, cst.AugAssign):
        value: cst.CSTNode = small.value
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and isinstance(small.value.func, cst.Attribute) \
            and small.value.func.attr.value in ("append", "update", "add"):
        value = small.value
    else:
        return False
    return any(isinstance(c, cst.Call) and facts.qualname(c.func) in _CLOCKS for c in iter_nodes(value))


def _host_value(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A value known to live on the host already: numbers, numpy, CPU tensors."""
    ks = facts.kinds(expr)
    if not ks:
        return False
    if ks & {"number", "numpy", "int"} and not ks & {"tensor", "loss", "output"}:
        return True
    if "cpu_tensor" in ks and "device_tensor" not in ks:
        return True
    if "batch" in ks and "device_tensor" not in ks and not ks & {"loss", "output"}:
        return True  # straight from the DataLoader: still on the CPU
    return False


def _device_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A tensor that is (or may be) on the accelerator: losses, model outputs, torch results
    that are not known CPU tensors, batches after `.to(device)`."""
    ks = facts.kinds(expr)
    if _host_value(facts, expr):
        return False
    return bool(ks & {"loss", "output", "device_tensor"}) or ("tensor" in ks and "cpu_tensor" not in ks)


@register
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
    Lightning): there `.item()` costs nothing.

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
    `synchronize()`, a host copy a CPU metric or a file needs, a helper or model that reads
    back itself). Strict review of whole public repositories (issue 21; 56 repositories, three
    review sheets): 101 right of 127 reviewed findings still reported (0.80), up from 104 of
    196 (0.53); 14 of the 26 false alarms are reads that size host work, whose message now
    says to take the value from the CPU batch (the fix the review asked for).

    ## References
    - PyTorch performance tuning guide, "Avoid unnecessary CPU-GPU synchronization"
    - torchtune PR #522 (40–50 ms of `cudaStreamSynchronize` per step from `loss.item()`)
    """

    code = "PF201"
    name = "item-in-loop"
    summary = "`.item()` on every iteration of a training/eval loop (host-device sync)"
    tokens = (b".item(",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.may_use_accelerator:
            return  # everything is on the CPU: `.item()` costs nothing
        for call in facts.calls():
            if not _item_sync(facts, call):
                continue
            ctx = facts.iteration_context(call)
            if ctx is None or _feeds_environment(facts, call):
                continue
            why = facts.hot_path(call)
            if why is None:
                continue  # not part of training: an inference script, a tool, a check
            if _waited_before(facts, ctx.node, call) is not None:
                continue  # the iteration just waited for the GPU: this read costs nothing more
            where = "training" if ctx.kind == "train" else "evaluation"
            yield Violation(
                call.func.attr,
                f"`.item()` on every iteration of the {where} loop waits for the GPU; " + _advice(facts, call),
                why=why + _later_syncs(facts, ctx.node, call),
            )


@register
class HostSyncInLoop(Rule):
    """
    ## What it does
    Flags other host-device synchronisations that run on every iteration of a training or
    evaluation loop: `.cpu()`, `.numpy()` and `.tolist()` of device tensors, `float()`,
    `int()` and `bool()` of a tensor, `print()` of a tensor (directly or in an f-string),
    `torch.cuda.synchronize()`, and `if`/`while`/`assert` on a tensor value.

    ## Why is this bad?
    Each of these waits for the GPU to finish everything queued so far, as `.item()` does
    (PF201): the CPU stops running ahead and the GPU idles at the start of the next step.
    An `if` on a tensor (`if loss.isnan():`) is the easiest to miss. The effect is the same
    range as PF201 (0–20% typical, up to 2× in launch-bound loops).

    ## Example
    ```python
    for x, y in loader:
        out = model(x)
        preds.extend(out.argmax(1).cpu().tolist())
        if torch.isnan(loss):
            break
    ```

    ## Use instead
    ```python
    for x, y in loader:
        out = model(x)
        preds.append(out.argmax(1))          # stays on the device
    preds = torch.cat(preds).cpu().tolist()  # one copy after the loop
    ```

    ## Fix safety
    No fix: moving the read out of the loop changes the program's structure.

    ## Applies to
    All torch versions. Values known to be on the host (Python numbers, numpy arrays,
    batches not yet moved to a device, tensors created without a device) are ignored, as
    are files where nothing can be on an accelerator (see PF201), `torch.cuda.synchronize()`
    next to a clock read in a loop that adds up elapsed time every iteration
    (`t_model += time.perf_counter() - t0`, `times.append(time.time() - t0)`: measuring is
    its purpose), actions read back
    to be sent to an environment's `step()` (reinforcement learning), a branch that caps a
    counter it increments (`if shown < 3: shown += 1; print(out.tolist())`), and a test
    behind a flag that its branch sets (`if full or torch.all(q == 0): full = True`): both
    stop reading after a few iterations. Like PF201 it needs the per-step evidence (its
    `why`), is silent outside training (inference, prediction, drawing and export scripts,
    throughput probes), and reports each wait once: a copy right after another read, with no
    forward, backward or optimizer step between, is part of that wait, and a host copy that
    a CPU metric, a file or a drawing needs in the same iteration is not reported at all.
    Strict review of whole public repositories (issue 21, three review sheets): 11 right of 13
    reviewed findings still reported (0.85), up from 13 of 49 (0.27).

    ## References
    - PyTorch performance tuning guide, "Avoid unnecessary CPU-GPU synchronization"
    - `torch.cuda.set_sync_debug_mode` documentation
    """

    code = "PF202"
    name = "host-sync-in-loop"
    summary = "host-device sync (`.cpu()`, `float(t)`, `print(t)`, `if t:` …) on every iteration"
    tokens = (b".cpu(", b".numpy(", b".tolist(", b"float(", b"int(", b"bool(", b"print(", b"synchronize", b"add_scalar", b"add_histogram",
              b"if ", b"assert ", b"while ")

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.may_use_accelerator:
            return
        for call in facts.calls():
            v = self._call(facts, call)
            if v is not None:
                yield v
        for node in (*facts.index[cst.If], *facts.index[cst.While], *facts.index[cst.Assert]):
            if not _condition_sync(facts, node):
                continue
            v = self._per_step(facts, node, "", node)
            if v is None:
                continue
            kind = {cst.If: "if", cst.While: "while", cst.Assert: "assert"}[type(node)]
            v.message = (f"`{kind}` on a tensor value reads it back to the host on every iteration; keep the check "
                         "on the device (e.g. `torch.nan_to_num`, masking) or do it every N steps")
            yield v

    def _call(self, facts: Facts, call: cst.Call) -> Violation | None:
        got = _call_sync(facts, call)
        if got is None or got[0] == "forced":
            return None  # timing a region, or an action the environment needs: inherent
        return self._per_step(facts, call, got[1], call)

    @staticmethod
    def _per_step(facts: Facts, node: cst.CSTNode, message: str, report: cst.CSTNode) -> Violation | None:
        """The finding for a sync at `node` when it runs on every step of training (or of
        an evaluation during training) and is the first wait of its iteration."""
        ctx = facts.iteration_context(node)
        if ctx is None:
            return None
        why = facts.hot_path(node)
        if why is None:
            return None
        if _waited_before(facts, ctx.node, node) is not None:
            return None  # the iteration just waited for the GPU: this copy costs nothing more
        if _host_data_needed(facts, node):
            return None  # the host copy is what the iteration is for (a CPU metric, a file, a drawing)
        return Violation(report, message, why=why + _later_syncs(facts, ctx.node, node))


def _item_sync(facts: Facts, call: cst.CSTNode) -> bool:
    """`.item()` of a value that may be on the accelerator."""
    if not isinstance(call, cst.Call) or call_name(call) != "item" or call.args or not isinstance(call.func, cst.Attribute):
        return False
    recv = call.func.value
    # `x.detach().cpu().item()`: the `.cpu()` is where it waits, for the tensor before it
    while isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute) \
            and call_name(recv) in ("cpu", "detach", "float", "double") and not recv.args:
        recv = recv.func.value
    return not (_host_value(facts, recv) or isinstance(recv, (cst.Integer, cst.Float)))


def _call_sync(facts: Facts, call: cst.Call) -> tuple[str, str] | None:
    """("report", message) for a call PF202 reports when it runs every step, ("forced", "")
    for a sync the code needs (`torch.cuda.synchronize()` that brackets a timer, actions
    sent to an environment), None for no sync."""
    name = call_name(call)
    q = facts.qualname(call.func)
    if q == "torch.cuda.synchronize":
        if _brackets_a_timer(facts, call):
            return "forced", ""  # timing a region needs the GPU idle at both ends
        return "report", ("`torch.cuda.synchronize()` on every iteration stalls the CPU until the GPU is idle; "
                          "synchronize only where you time or read results")
    if isinstance(call.func, cst.Attribute) and name in ("cpu", "numpy", "tolist") and not call.args:
        recv = call.func.value
        if any(call_name(c) in _SYNC_METHODS for c in _inner_chain(recv)):
            return None  # reported at the first sync of the chain
        if any(call_name(c) == "item" for c in _outer_chain(facts, call)):
            return None  # PF201 reports the chain
        if not _device_tensor(facts, recv):
            return None
        if name == "cpu" and facts.has_kind(recv, "model"):
            return None
        if _feeds_environment(facts, call):
            return "forced", ""
        return "report", (f"`.{name}()` of a device tensor on every iteration copies it to the host and waits for the "
                          "GPU; collect on the device and copy once after the loop (or every N steps)")
    if isinstance(call.func, cst.Name) and name in ("float", "int", "bool") and q is None and len(call.args) == 1:
        arg = call.args[0].value
        if _device_tensor(facts, arg) and not any(call_name(c) in _SYNC_METHODS for c in _inner_chain(arg)):
            return "report", f"`{name}()` of a tensor on every iteration reads it back from the GPU; " + _ON_DEVICE_HINT
        return None
    if isinstance(call.func, cst.Attribute) and name in ("add_scalar", "add_histogram") and _writer(facts, call.func.value):
        value = get_arg(call, "scalar_value" if name == "add_scalar" else "values", 1)
        if value is not None and _device_tensor(facts, value.value) \
                and not any(call_name(c) in _SYNC_METHODS for c in _inner_chain(value.value)):
            return "report", (f"`{name}()` of a device tensor copies it to the host and waits for the GPU on every "
                              "iteration (TensorBoard converts it with `.cpu()`); log every N steps, or accumulate "
                              "on the device and log the mean once per interval")
        return None
    if isinstance(call.func, cst.Name) and name == "print" and q is None:
        if any(_prints_tensor(facts, a.value) for a in call.args if a.keyword is None):
            return "report", ("`print()` of a tensor on every iteration copies it to the host and waits for the GPU; "
                              "print every N steps")
    return None


def _writer(facts: Facts, recv: cst.BaseExpression) -> bool:
    """A TensorBoard `SummaryWriter` (torch's, tensorboardX's) or something named like one."""
    if isinstance(recv, cst.Name):
        for b in facts.lookup(recv.value, recv):
            if b.how == "expr" and isinstance(b.node, cst.Call) and \
                    (facts.qualname(b.node.func) or dotted(b.node.func) or "").endswith("SummaryWriter"):
                return True
    text = (facts.receiver_text(recv) or "").rsplit(".", 1)[-1].lower()
    return "writer" in text or text in ("tb", "tb_logger", "tblogger", "summary")


def _condition_sync(facts: Facts, node: cst.CSTNode) -> bool:
    """`if` / `while` / `assert` on a tensor value (not a latch that stops reading once set)."""
    if not isinstance(node, (cst.If, cst.While, cst.Assert)) or not _tensor_condition(facts, node.test):
        return False
    return not (isinstance(node, cst.If) and after_latch(node.test, node))


def _sync_points(facts: Facts, region: cst.CSTNode) -> list[cst.CSTNode]:
    """Where one iteration of `region` (a training/evaluation loop or a per-step function)
    waits for the GPU, in source order: `.item()`, host copies, `torch.cuda.synchronize()`
    (a timer's too), branches on tensors, and calls of this file's per-step functions that
    wait themselves."""
    memo = facts.__dict__.setdefault("_sync_points_memo", {})
    if region in memo:
        return memo[region]
    memo[region] = []  # recursion guard
    points: list[cst.CSTNode] = []
    waits_inside: set = set()
    for call in facts.calls_within(region):
        ctx = facts.iteration_context(call)
        if ctx is None or ctx.node is not region:
            continue
        if _item_sync(facts, call) or _call_sync(facts, call) is not None:
            points.append(call)
            continue
        if _callee_waits(facts, call, region):
            points.append(call)
            waits_inside.add(call)
    for cls in (cst.If, cst.While, cst.Assert):
        for node in facts.nodes_within(region, cls):
            ctx = facts.iteration_context(node)
            if ctx is not None and ctx.node is region and _condition_sync(facts, node):
                points.append(node)
    points.sort(key=lambda n: facts.order.get(n, 0))
    # `to_cpu(loss).item()`: a helper that reads inside a read is that read, not another one
    points = [p for p in points if p not in waits_inside or not any(q is not p and facts.is_inside(p, q) for q in points)]
    memo[region] = points
    return points


def _callee_waits(facts: Facts, call: cst.Call, region: cst.CSTNode) -> bool:
    """The call waits for the GPU inside: a per-step function of this file that syncs
    (reported there), or a function or model class of the project that does."""
    for fn in _local_callees(facts, call):
        if fn is not region and facts.step_function_kind(fn) is not None and _sync_points(facts, fn):
            return True
    return facts.callee_syncs(call)


def _local_callees(facts: Facts, call: cst.Call) -> list[cst.FunctionDef]:
    if isinstance(call.func, cst.Name):
        return list(facts.functions_by_name.get(call.func.value, ()))
    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value == "self":
        return list(facts.functions_by_name.get(call.func.attr.value, ()))
    return []


def _waited_before(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """The wait of the same iteration that makes `node` free, or None when `node` is the
    wait its iteration reports. Reads with no real GPU work queued between them form one
    wait (see `_gpu_work_between`); it is reported once, at its first unconditional read
    (else its first read), and not at all when one of its reads is needed anyway: a timing
    `synchronize()`, an action for an environment, a host copy a CPU metric or a file needs,
    a helper or model that reads back itself."""
    group = _group_of(facts, region).get(node)
    if group is None:
        return None
    if any(_forced(facts, p, region) for p in group):
        return next((p for p in group if _forced(facts, p, region)), group[0])
    rep = _representative(facts, region, group)
    return None if rep is node else rep


def _forced(facts: Facts, point: cst.CSTNode, region: cst.CSTNode) -> bool:
    if isinstance(point, cst.Call):
        got = _call_sync(facts, point)
        if got is not None and got[0] == "forced":
            return True
        if not _item_sync(facts, point) and got is None:
            return True  # a call that waits inside (a helper, a model's forward)
        if got is not None and _host_data_needed(facts, point):
            return True
    return False


def _representative(facts: Facts, region: cst.CSTNode, group: list) -> cst.CSTNode:
    """The read a wait is reported at: its first read, unless that one only runs when a
    switch is on (`if train_config.save_metrics:`) and a later read runs every time."""
    if not _optional(facts, group[0], region):
        return group[0]
    return next((p for p in group if not _optional(facts, p, region)), group[0])


def _optional(facts: Facts, node: cst.CSTNode, region: cst.CSTNode) -> bool:
    """`node` sits in a branch taken on a switch: `if cfg.save_metrics:`, `if verbose:` (a
    name or an attribute of something other than `self`)."""
    cur = node
    for a in facts.ancestors(node):
        if a is region:
            return False
        if isinstance(a, cst.If) and cur is a.body:
            test = a.test
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test = test.expression
            text = dotted(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
            if text is not None and text.split(".")[0] != "self":
                return True
        cur = a
    return False


def _group_of(facts: Facts, region: cst.CSTNode) -> dict:
    """sync point → the list of sync points that wait together with it (its group)."""
    memo = facts.__dict__.setdefault("_sync_groups_memo", {})
    if region in memo:
        return memo[region]
    leader: dict = {}
    points = _sync_points(facts, region)
    for i, p in enumerate(points):
        # the latest earlier wait that can run in the same iteration (not the other arm of an `if`)
        prev = next((q for q in reversed(points[:i]) if not _exclusive(facts, q, p)), None)
        if prev is not None and not _gpu_work_between(facts, region, prev, p):
            leader[p] = leader.get(prev, prev)
        else:
            leader[p] = p
    groups: dict = {}
    for p in points:
        groups.setdefault(leader[p], []).append(p)
    out = {p: groups[leader[p]] for p in points}
    memo[region] = out
    return out


def _exclusive(facts: Facts, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """`a` and `b` sit in different arms of one `if`/`else`."""
    set_b = set(facts.ancestors(b))
    cur = a
    for node in facts.ancestors(a):
        if node in set_b:
            if isinstance(node, cst.If):
                in_body_a = facts.is_inside(a, node.body)
                in_body_b = facts.is_inside(b, node.body)
                in_test = facts.is_inside(a, node.test) or facts.is_inside(b, node.test)
                return not in_test and in_body_a != in_body_b
            if isinstance(node, cst.Else):
                return False
            return False
        cur = node
    return False


def _gpu_work_between(facts: Facts, region: cst.CSTNode, prev: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether anything between the end of `prev` and `node` (its own operand included)
    queues real GPU work: a model's forward, `.backward()`, an optimizer or scaler step, or
    a call of a function of this file that does one of those. Small elementwise and
    reduction kernels (`out.argmax(1)`, `(p == y).sum()`, an accuracy helper) finish in
    microseconds once the queue has drained: a read after them waits for almost nothing."""
    if facts.is_inside(node, prev):
        return False  # a print inside the `if` on a tensor: waited for by the test
    lo = facts.order.get(prev, 0)
    end = (facts._range(prev) or (lo, lo))[1]
    hi = facts.order.get(node, 0)
    for c in facts.calls_within(region):
        o = facts.order.get(c, 0)
        if c is node or not (end < o < hi or facts.is_inside(c, node)):
            continue  # (what `node` itself computes before reading counts too: `model(x).cpu()`)
        if _heavy_call(facts, c, 0):
            return True
    return False


def _heavy_call(facts: Facts, call: cst.Call, depth: int) -> bool:
    if facts.is_backward_call(call) or facts.is_optimizer_step(call) or facts.is_scaler_call_step(call):
        return True
    ks = facts.kinds(call.func)
    if "model" in ks or "~model" in ks or (isinstance(call.func, cst.Name) and call.func.value == "self"):
        return True
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("forward", "generate"):
        return True
    if depth < 2:
        for fn in _local_callees(facts, call):
            if any(_heavy_call(facts, c, depth + 1) for c in facts.calls_within(fn)):
                return True
    return False


def _first_sync(facts: Facts, region: cst.CSTNode) -> cst.CSTNode | None:
    points = _sync_points(facts, region)
    return points[0] if points else None


def _later_syncs(facts: Facts, region: cst.CSTNode, first: cst.CSTNode) -> list:
    """Why steps for the other reads of the wait `first` reports."""
    from perflint.analysis.hotpath import WhyStep, snippet

    out = []
    for p in _group_of(facts, region).get(first, ()):
        if p is first:
            continue
        text = snippet(p.test if isinstance(p, (cst.If, cst.While, cst.Assert)) else p)
        out.append(WhyStep(p, f"`{text}` reads in the same wait (no forward, backward or step between): "
                              "not reported apart"))
    return out


_HOST_ROOTS = ("numpy.", "sklearn.", "scipy.", "PIL.", "cv2.", "imageio.", "soundfile.", "matplotlib.", "skimage.",
               "librosa.", "pandas.", "nibabel.", "SimpleITK.", "json.", "pickle.", "csv.")
_HOST_CALLS = {"imsave", "imwrite", "savefig", "save_image", "write", "writerow", "dump", "fromarray", "save", "savez",
               "imshow", "plot", "draw", "rectangle", "putText"}


def _host_data_needed(facts: Facts, node: cst.CSTNode) -> bool:
    """The host copy feeds host-only work in the same iteration: a numpy / scikit-learn /
    SciPy call (a CPU metric), an image, audio or array file, a drawing. Deferring the copy
    past the loop would not remove it."""
    if not isinstance(node, cst.Call):
        return False
    outer: cst.CSTNode = node
    for c in _outer_chain(facts, node):
        outer = c
    values = [outer]
    parent = facts.parent(outer)
    if isinstance(parent, cst.Attribute) and parent.value is outer:
        grand = facts.parent(parent)
        if isinstance(grand, cst.Call) and grand.func is parent:
            return True  # `.cpu().numpy().astype(np.uint8)`: numpy work on the copy
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        fn = facts.enclosing_function(parent) or facts.module
        values = list(facts.later_uses(name, fn, facts.order.get(parent.targets[0].target, 0)))[:20]
    for v in values:
        if _consumed_on_host(facts, v):
            return True
    return False


def _consumed_on_host(facts: Facts, value: cst.CSTNode) -> bool:
    cur = value
    for a in facts.ancestors(value):
        if isinstance(a, cst.Arg):
            call = facts.parent(a)
            if isinstance(call, cst.Call):
                q = facts.qualname(call.func) or ""
                if q.startswith(_HOST_ROOTS) or (call_name(call) or "") in _HOST_CALLS:
                    return True
            return False
        if isinstance(a, cst.For) and cur is a.iter:
            return True  # a Python loop over the host values
        if isinstance(a, cst.Attribute) and a.value is cur and isinstance(facts.parent(a), cst.Call):
            q = facts.qualname(a) or ""
            if a.attr.value in ("astype", "transpose", "squeeze", "reshape") and not q.startswith("torch."):
                return "numpy" in facts.kinds(cur) or call_name(value) == "numpy"
            return False
        if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return False
        cur = a
    return False


def _prints_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.FormattedString):
        for part in expr.parts:
            if isinstance(part, cst.FormattedStringExpression) and _bare_tensor(facts, part.expression):
                return True
        return False
    return _bare_tensor(facts, expr)


def _bare_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    if any(call_name(c) in _SYNC_METHODS for c in _inner_chain(expr)):
        return False  # `.item()` is PF201's
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("float", "int", "len", "str", "round"):
        return False
    return _device_tensor(facts, expr) and not facts.has_kind(expr, "model")


def _tensor_condition(facts: Facts, test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if isinstance(test, cst.BooleanOperation):
        return _tensor_condition(facts, test.left) or _tensor_condition(facts, test.right)
    if any(call_name(c) in _SYNC_METHODS for c in _inner_chain(test)):
        return False
    if isinstance(test, cst.Comparison):
        if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in test.comparisons):
            return False
        sides = [test.left] + [c.comparator for c in test.comparisons]
        return any(_strong_tensor(facts, s) for s in sides)
    if isinstance(test, cst.Call):
        q = facts.qualname(test.func) or ""
        if q.startswith("torch.") and q.rsplit(".", 1)[-1] in ("isnan", "isinf", "isfinite", "any", "all", "equal", "allclose", "is_nonzero"):
            return any(_device_tensor(facts, a.value) for a in test.args) or q.endswith(("equal", "allclose"))
        if isinstance(test.func, cst.Attribute) and call_name(test) in ("any", "all", "isnan", "isinf", "is_nonzero", "equal", "allclose"):
            return _strong_tensor(facts, test.func.value)
        return False
    return _strong_tensor(facts, test)


def _strong_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    ks = facts.kinds(expr)
    if _host_value(facts, expr):
        return False
    return bool(ks & {"loss", "device_tensor"}) or ("torch_op" in ks and "cpu_tensor" not in ks)


@register
class EmptyCacheInLoop(Rule):
    """
    ## What it does
    Flags `torch.cuda.empty_cache()` and `gc.collect()` on every iteration of a training or
    evaluation loop.

    ## Why is this bad?
    `empty_cache()` hands cached blocks back to the driver, so the next step has to
    `cudaMalloc` them again, which synchronises; it does not make more memory available to
    PyTorch (the docs: it "doesn't increase the amount of GPU memory available for
    PyTorch"). `gc.collect()` walks every Python object. Measured in peft PR #2894 over 250
    steps: removing a per-step `gc.collect()` went from 108 s to 65 s; calling
    `empty_cache()` every 10 steps instead of every step 65 s → 50 s; never, 45 s (with
    reserved memory 12.0 → 22.1 GB). On an H100 80GB (torch 2.11, `python
    benchmarks/rule_effects.py`; results in `benchmarks/results/h100/rule_effects/`),
    `empty_cache()` after every bf16 conv-net step cost 9.26 ms against 8.47 ms without
    (1.09×; 1.20× in a second run). transformers removed its per-step `empty_cache` (issue
    #31372, PR #31530) and made it opt-in every N steps.

    ## Example
    ```python
    for batch in loader:
        train_step(batch)
        torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    for step, batch in enumerate(loader):
        train_step(batch)
        if step % 100 == 0:
            torch.cuda.empty_cache()  # only if fragmentation is a real problem
    ```

    ## Fix safety
    No fix: removing the call can run out of memory where it was working against
    fragmentation; choosing N is the user's call.

    ## Applies to
    All torch versions.

    ## References
    - `torch.cuda.empty_cache` documentation; PyTorch notes "CUDA semantics", memory management
    - huggingface/peft PR #2894; huggingface/transformers #31372, #31530, #31546
    """

    code = "PF203"
    name = "empty-cache-in-loop"
    summary = "`torch.cuda.empty_cache()` / `gc.collect()` on every iteration"
    tokens = (b"empty_cache", b"collect")

    def check(self, facts: Facts) -> Iterator[Violation]:
        wanted = {"torch.cuda.empty_cache", "torch.accelerator.memory.empty_cache", "torch.mps.empty_cache",
                  "torch.xpu.empty_cache", "gc.collect"}
        for call in facts.calls():
            q = facts.qualname(call.func)
            if q not in wanted:
                continue
            why = facts.hot_path(call)
            if why is None:
                continue  # not on every step of training (or of an evaluation during training)
            if q == "gc.collect":
                what, evidence = "gc.collect()", "peft measured 250 steps at 108 s with it, 65 s without"
            else:
                what, evidence = "empty_cache()", "peft measured 250 steps at 65 s, 50 s calling it every 10 steps"
            yield Violation(
                call,
                f"`{what}` on every iteration slows training ({evidence}); call it every N steps at most",
                why=why,
            )


_LOGGING_CONSUMERS = {"print", "float", "int", "str", "round", "format", "len", "repr", "abs", "max", "min"}


@register
class LossAccumulatedWithGraph(Rule):
    """
    ## What it does
    Flags a loss accumulated with its autograd graph inside a loop: `total += loss`,
    `total = total + loss` or `losses.append(loss)`, where `loss` is a criterion output
    (or a value that is `.backward()`ed) and is not `.detach()`ed, `.item()`ed or
    `float()`ed.

    ## Why is this bad?
    `total` becomes a tensor that keeps every step's graph alive (the PyTorch FAQ, "Don't
    accumulate history across your training loop"). Measured (torch 2.13, CPU, MLP
    1024-4096-1, batch 512, 200 iterations): with `backward()` every step only graph nodes
    pile up (+126 MiB RSS against +110 MiB with `.detach()`); in a loop without backward —
    validation without `no_grad` — the activations are kept too: **+3.2 GB** against +53 MiB.

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss
    ```

    ## Use instead
    ```python
        total_loss += loss.detach()
    ```

    ## Fix safety
    Appends `.detach()`. **Safe** when every later use of the accumulator only reads its
    value (`.item()`, `float()`, `print`, logging): `.detach()` keeps the tensor type and
    adds no synchronisation. **Unsafe** when the accumulator is used in ways the linter
    cannot follow (stored on an object, passed to other functions). Not reported when the
    accumulator is backpropagated (`total.backward()` raises "element 0 of tensors does not
    require grad" after a detach) or returned to callers who could backpropagate, nor
    inside `no_grad`/`inference_mode`, where there is no graph. The sum is followed through
    any assignment (tuple unpacking, containers, arithmetic) to `.backward()`,
    `torch.autograd.grad`, `scaler.scale`, `accelerator.backward`, `manual_backward` or a
    callable scaler given an optimizer: a sum that reaches one of them is never reported,
    so never detached (`tests/test_pf204_gradients.py` compares every gradient before and
    after the fix). Only an accumulator that outlives the step is reported: a loss function
    that sums per-sample or per-head terms in a loop, or a name bound afresh in each
    iteration, holds one step's graph, which the step needs. The FAQ's
    `float(loss)` alternative changes the type and synchronises every step.

    ## Applies to
    All torch versions.

    ## References
    - PyTorch FAQ (`docs/source/notes/faq.rst`), "My model reports cuda runtime error(2): out of memory"
    - Measured (torch 2.13, CPU, MLP 1024-4096-1, batch 512, 200 iterations without
      backward): resident memory grew 3,204.6 MiB with `total += loss`, 52.7 MiB with
      `total += loss.detach()`
    """

    code = "PF204"
    name = "loss-accumulated-with-graph"
    summary = "loss accumulated across iterations with its autograd graph"
    fix_class = "safe or unsafe"
    tokens = (b"+=", b"append", b"+ ")

    def check(self, facts: Facts) -> Iterator[Violation]:
        for node in facts.index[cst.AugAssign]:
            if isinstance(node.operator, cst.AddAssign):
                yield from self._candidate(facts, node, node.target, node.value, node)
        for node in facts.index[cst.Assign]:
            if len(node.targets) != 1 or not isinstance(node.value, cst.BinaryOperation):
                continue
            target = node.targets[0].target
            op = node.value
            if not isinstance(op.operator, cst.Add):
                continue
            tname = facts.receiver_text(target)
            if tname is None:
                continue
            if facts.receiver_text(op.left) == tname:
                yield from self._candidate(facts, node, target, op.right, node)
            elif facts.receiver_text(op.right) == tname:
                yield from self._candidate(facts, node, target, op.left, node)
        for call in facts.calls():
            if call_name(call) != "append" or len(call.args) != 1 or not isinstance(call.func, cst.Attribute):
                continue
            yield from self._candidate(facts, call, call.func.value, call.args[0].value, call)

    def _candidate(self, facts: Facts, stmt, target, value, report) -> Iterator[Violation]:
        if not self._loss_with_graph(facts, value):
            return
        info = facts.iteration_context(stmt)
        if info is None:
            return  # not once per step: a loop inside one step (per-sample or per-head terms)
        loop = info.node
        if facts.grad_context(stmt) == "off":
            return
        acc = facts.receiver_text(target)
        if acc is None:
            return
        if _reset_each_step(facts, target, stmt, loop):
            return  # bound afresh in each step: the graph lives one step, as the step needs
        if reaches_backward(facts, stmt, acc):
            return  # the sum is what is backpropagated: detaching it would drop its gradients
        why = facts.hot_path(stmt)
        if why is None:
            return
        verdict = _accumulator_uses(facts, stmt, acc)
        if verdict == "backprop":
            return
        if verdict == "returned" and not self._backward_each_step(facts, loop, value):
            return  # a total the caller may backpropagate through
        new_value = _detached(value)
        fix_msg = "Accumulate `.detach()`ed values"
        if isinstance(stmt, cst.Call):
            replacements = {stmt: stmt.with_changes(args=[stmt.args[0].with_changes(value=new_value)])}
        else:
            replacements = {value: new_value}
        safe = verdict == "reads" and isinstance(target, cst.Name)
        fix = self.safe(fix_msg, replacements) if safe else self.unsafe(fix_msg, replacements)
        yield Violation(
            report,
            f"`{acc}` accumulates the loss with its autograd graph, which keeps every step's graph alive; "
            "accumulate `loss.detach()` (or `loss.item()` when logging)",
            fix,
            why=why,
        )

    @staticmethod
    def _loop(facts: Facts, node: cst.CSTNode) -> cst.CSTNode | None:
        for a in facts.ancestors(node):
            if isinstance(a, (cst.For, cst.While)):
                return a
            if isinstance(a, cst.FunctionDef):
                return a if facts.step_function_kind(a) is not None else None
            if isinstance(a, (cst.Lambda, cst.ClassDef)):
                return None
        return None

    @staticmethod
    def _backward_each_step(facts: Facts, loop: cst.CSTNode, value: cst.BaseExpression) -> bool:
        name = facts.receiver_text(value)
        for call in facts.calls_within(loop):
            if facts.is_backward_call(call) and isinstance(call.func, cst.Attribute):
                if name is None or facts.receiver_text(call.func.value) == name:
                    return True
        return False

    def _loss_with_graph(self, facts: Facts, value: cst.BaseExpression) -> bool:
        ks = facts.kinds(value)
        if "detached" in ks or "number" in ks:
            return False
        if facts.computed_without_grad(value):
            return False
        for c in _inner_chain(value):
            if call_name(c) in ("detach", "item", "cpu", "tolist", "numpy", "detach_"):
                return False
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("float", "int"):
            return False
        if "loss" in ks:
            return True
        # A name that is `.backward()`ed somewhere in the same function.
        if isinstance(value, cst.Name):
            fn = facts.enclosing_function(value)
            scope = fn if fn is not None else facts.module
            for call in facts.calls_within(scope):
                if facts.is_backward_call(call) and isinstance(call.func, cst.Attribute):
                    if facts.receiver_text(call.func.value) == value.value:
                        return True
        return False


def _reset_each_step(facts: Facts, target: cst.CSTNode, stmt: cst.CSTNode, region: cst.CSTNode) -> bool:
    """The accumulator is a plain name bound afresh on every step before `stmt`: a local of
    a per-step function, or a name assigned in the loop body (`terms = []` then
    `terms.append(...)`). It holds one step's graph, which that step needs anyway."""
    if not isinstance(target, cst.Name):
        return False
    for b in facts.lookup(target.value, stmt):
        site = b.site
        if site is None or site is stmt or facts.is_inside(stmt, site):
            continue
        if b.how == "param":
            continue
        if isinstance(region, cst.FunctionDef):
            if facts.scope_of(target) is region and facts.is_inside(site, region):
                return True
        elif facts.is_inside(site, region.body) and facts.order.get(site, 0) < facts.order.get(stmt, 0):
            return True
    return False


def reaches_backward(facts: Facts, stmt: cst.CSTNode, acc: str) -> bool:
    """Whether the accumulator `acc`, or any name computed from it in the same function
    (through assignments, tuple unpacking, containers, arithmetic), is backpropagated:
    `.backward()` on it, `torch.autograd.grad`/`backward` of it, `scaler.scale(it)`,
    `accelerator.backward(it)`, `manual_backward(it)`, or a callable scaler given it with an
    optimizer (`loss_scaler(loss, optimizer)`). Such a sum must never be detached; PF204
    does not report it (and so never offers the fix)."""
    fn = facts.enclosing_function(stmt)
    scope = fn if fn is not None else facts.module
    tainted = {acc}
    assigns = [n for n in iter_nodes(scope) if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign))]
    for _ in range(6):
        grew = False
        for n in assigns:
            value = n.value
            if value is None or not _mentions(facts, value, tainted):
                continue
            targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            for t in targets:
                for name in iter_nodes(t):
                    text = facts.receiver_text(name) if isinstance(name, (cst.Name, cst.Attribute)) else None
                    if text and text not in tainted and not (isinstance(name, cst.Name) and isinstance(facts.parent(name), cst.Attribute)):
                        tainted.add(text)
                        grew = True
        if not grew:
            break
    for call in facts.calls_within(scope):
        name = call_name(call)
        q = facts.qualname(call.func) or ""
        pieces: list[cst.CSTNode] = [a.value for a in call.args]
        if name in ("backward", "manual_backward") and isinstance(call.func, cst.Attribute):
            pieces.append(call.func.value)
        elif q in ("torch.autograd.grad", "torch.autograd.backward"):
            pass
        elif name == "scale" and isinstance(call.func, cst.Attribute) and facts.has_kind(call.func.value, "scaler"):
            pass
        elif facts.is_scaler_call_step(call):
            pass
        else:
            continue
        if any(_mentions(facts, p, tainted) for p in pieces):
            return True
    return False


def _mentions(facts: Facts, expr: cst.CSTNode, names: set[str]) -> bool:
    for n in iter_nodes(expr):
        if isinstance(n, (cst.Name, cst.Attribute)) and facts.receiver_text(n) in names:
            return True
    return False


_READ_METHODS = {"item", "detach", "cpu", "tolist", "numpy"}
_LOG_METHODS = {"info", "debug", "warning", "log", "add_scalar", "add_scalars", "set_postfix", "set_description",
                "write", "log_metrics", "log_dict"}


def _accumulator_uses(facts: Facts, stmt: cst.CSTNode, acc: str, depth: int = 0) -> str:
    """How an accumulator is used in its function: "backprop" (reaches autograd),
    "returned", "other" (flows somewhere the linter cannot follow) or "reads" (only read)."""
    fn = facts.enclosing_function(stmt)
    scope = fn if fn is not None else facts.module
    worst = "reads"
    rank = {"reads": 0, "other": 1, "returned": 2, "backprop": 3}
    for node in iter_nodes(scope):
        if not isinstance(node, (cst.Name, cst.Attribute)) or facts.receiver_text(node) != acc:
            continue
        parent = facts.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            if facts.receiver_text(parent) is not None and not isinstance(facts.parent(parent), cst.Call):
                continue  # part of a longer dotted name, e.g. `acc.shape`
        use = _classify(facts, node, stmt, depth)
        if rank[use] > rank[worst]:
            worst = use
    return worst


def _classify(facts: Facts, node: cst.CSTNode, stmt: cst.CSTNode, depth: int) -> str:
    parent = facts.parent(node)
    if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is node):
        return "reads"  # a (re)binding or the accumulation itself
    cur: cst.CSTNode = node
    derived = False  # passed through a call the linter cannot see into
    for a in facts.ancestors(node):
        if isinstance(a, cst.Attribute) and a.value is cur:
            continue  # `acc.item` — judged at the call
        if isinstance(a, cst.Call):
            name = call_name(a)
            q = facts.qualname(a.func) or ""
            if name in ("backward", "manual_backward") or q in ("torch.autograd.grad", "torch.autograd.backward"):
                return "backprop"
            if name == "scale" and isinstance(a.func, cst.Attribute) and facts.has_kind(a.func.value, "scaler"):
                return "backprop"
            on_receiver = isinstance(a.func, cst.Attribute) and a.func.value is cur
            if on_receiver and name in _READ_METHODS:
                return "reads"
            if isinstance(a.func, cst.Name) and a.func.value in _LOGGING_CONSUMERS:
                return "reads"
            if not on_receiver and isinstance(a.func, cst.Attribute) and name in _LOG_METHODS:
                return "reads"
            if not (on_receiver or a.func is cur):
                derived = True  # `torch.stack(acc)`, `helper(acc)`: the result may carry the graph
            cur = a
            continue
        if isinstance(a, (cst.Return, cst.Yield)):
            return "returned"
        if isinstance(a, cst.AugAssign):
            return "reads" if a is stmt or a.target is cur else "other"
        if isinstance(a, cst.Assign):
            if a is stmt:
                return "reads"
            targets = [t.target for t in a.targets]
            if len(targets) == 1 and isinstance(targets[0], cst.Name) and depth < 2:
                # `avg = total / n`: judge by how `avg` is used in turn.
                return _accumulator_uses(facts, a, targets[0].value, depth + 1)
            return "other"
        if isinstance(a, cst.FormattedStringExpression):
            return "reads"
        if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
        cur = a
    return "other" if derived else "reads"


def _detached(value: cst.BaseExpression) -> cst.BaseExpression:
    atomic = isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or bool(value.lpar)
    inner = value if atomic else value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(func=cst.Attribute(value=inner, attr=cst.Name("detach")))
