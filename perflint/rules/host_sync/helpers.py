"""What several PF2 rules (host-device synchronisation) share: which calls and conditions wait
for the device, which waits an earlier one in the same step has already paid for, and
whether the host needs the data anyway (an environment step, a timer, a file or a plot)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg, iter_nodes
from perflint.analysis.loops import after_latch
from perflint.names import dotted
from perflint.rules.host_sync.values import (
    _HOST_ROOTS,
    blocking_host_copy,
    collected_for_host,
    consumed_on_host,
    fetch_copies_blocking,
    computed_from_device,
    copied_to_host,
    cpu_factory,
    device_tensor,
    host_value,
    maybe_on_device,
    of_data_sized,
    sized_by_data,
)
from perflint.analysis.vocab import Kind


_SYNC_METHODS = {"item", "cpu", "numpy", "tolist"}
_ON_DEVICE_HINT = (
    "accumulate on the device (`running += loss.detach()`) and read it once per log "
    "interval (`if step % 50 == 0: print(running.item() / 50)`)"
)


def outer_chain(facts: Facts, call: cst.Call) -> Iterator[cst.Call]:
    """Calls that use `call` as their method receiver: `call.cpu().numpy()` → cpu, numpy."""
    cur: cst.CSTNode = call
    while True:
        attr = facts.tree.parent(cur)
        if not (isinstance(attr, cst.Attribute) and attr.value is cur):
            return
        outer = facts.tree.parent(attr)
        if not (isinstance(outer, cst.Call) and outer.func is attr):
            return
        yield outer
        cur = outer


def inner_chain(expr: cst.BaseExpression) -> Iterator[cst.Call]:
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
    if facts.steps.is_optimizer_step(call) or facts.steps.is_scaler_step(call):
        return False
    recv = facts.tree.receiver_text(call.func.value) or ""
    last = recv.rsplit(".", 1)[-1].lower()
    return "env" in last and not (facts.kinds.of(call.func.value) & {Kind.OPTIMIZER, Kind.SCALER, Kind.MODEL})


def feeds_environment(facts: Facts, call: cst.Call) -> bool:
    """The host value `call` reads is what the next step needs from the host: an action sent
    to `env.step(...)`, directly (`env.step(a.cpu().numpy())`) or through a name assigned
    from it (`actions = q.argmax(1).cpu().numpy()` ... `envs.step(actions)`).  Such a sync is
    inherent to the algorithm (the environment runs on the CPU), so it is not reported."""
    outer: cst.CSTNode = call
    for c in outer_chain(facts, call):
        outer = c
    return _value_feeds_environment(facts, outer, 0)


def _value_feeds_environment(facts: Facts, value: cst.CSTNode, depth: int) -> bool:
    if depth > 3:
        return False
    parent = facts.tree.parent(value)
    if isinstance(parent, cst.Arg):
        return _env_call(facts, facts.tree.parent(parent))
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        fn = facts.tree.enclosing_function(parent) or facts.module
        for node in facts.tree.later_uses(name, fn, facts.tree.order.get(parent.targets[0].target, 0)):
            arg = facts.tree.parent(node)
            if isinstance(arg, cst.Arg) and _env_call(facts, facts.tree.parent(arg)):
                return True
        return False
    if isinstance(parent, cst.Return):
        # `def select_action(...): return q(obs).argmax(1).item()` whose result is sent to
        # `env.step(...)` at a call site.
        fn = facts.tree.enclosing_function(parent)
        if fn is None:
            return False
        return any(
            isinstance(c.func, cst.Name) and c.func.value == fn.name.value
            and _value_feeds_environment(facts, c, depth + 1)
            for c in facts.tree.calls()
        )
    return False


CLOCKS = _CLOCKS = {"time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
           "time.monotonic_ns", "timeit.default_timer"}


def _brackets_a_timer(facts: Facts, call: cst.Call) -> bool:
    """`torch.cuda.synchronize()` in the statement just before or after a clock read, in a
    block that adds up elapsed time every iteration (`t_model += time.perf_counter() - t0`):
    measuring is the loop's purpose, and the sync is what makes the figure mean anything.
    A sync that feeds a time printed only every N steps is still reported."""
    where = facts.tree.block_of(call)
    if where is None:
        return False
    block, i = where
    line = facts.tree.statement_of(call)
    body = list(block.body)
    accumulates = any(
        isinstance(st, cst.SimpleStatementLine) and any(_records_elapsed(facts, small) for small in st.body)
        for st in body
    ) or any(_prints_elapsed(facts, body, j) for j in range(max(i - 1, 0), min(i + 2, len(body))))
    if not accumulates:
        return False
    for st in body[max(i - 1, 0):i + 2]:
        if st is not line and any(facts.tree.qualname(c.func) in _CLOCKS for c in facts.tree.calls_within(st)):
            return True
    # `synchronize()`, then the step's values read and logged, then the clock: nothing is
    # queued on the GPU before the clock is read.
    for st in body[i + 2:i + 10]:
        calls = list(facts.tree.calls_within(st))
        if any(_heavy_call(facts, c, 0) for c in calls):
            return False
        if any(facts.tree.qualname(c.func) in _CLOCKS for c in calls):
            return True
    return False


def _prints_elapsed(facts: Facts, body: list, j: int) -> bool:
    """`end = time.time()` (or `start = …`) at `body[j]`, and `end - start` printed or logged by
    a later statement of the block on every iteration (not under a throttle such as `if i % 50 == 0:`):
    the per-step time the loop reports."""
    st = body[j]
    if not (isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.Assign)
            and len(st.body[0].targets) == 1 and isinstance(st.body[0].targets[0].target, cst.Name)
            and isinstance(st.body[0].value, cst.Call) and facts.tree.qualname(st.body[0].value.func) in _CLOCKS):
        return False
    name = st.body[0].targets[0].target.value
    for later in body[j + 1:]:
        for c in facts.tree.calls_within(later):
            if call_name(c) not in _LOG_CALLS:
                continue
            if not any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Subtract)
                       and any(isinstance(side, cst.Name) and side.value == name for side in (n.left, n.right))
                       for n in iter_nodes(c)):
                continue
            if not any(isinstance(a, cst.If) and facts.throttles.is_throttled_test(a.test)
                       for a in facts.tree.ancestors(c) if facts.tree.is_inside(a, later) or a is later):
                return True
    return False


_LOG_CALLS = {"print", "info", "log", "debug", "write", "set_postfix", "set_description", "add_scalar"}


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
    return any(isinstance(c, cst.Call) and facts.tree.qualname(c.func) in _CLOCKS for c in iter_nodes(value))


def item_sync(facts: Facts, call: cst.CSTNode) -> bool:
    """`.item()` of a value that may be on the accelerator."""
    if not isinstance(call, cst.Call) or call_name(call) != "item" or call.args or not isinstance(call.func, cst.Attribute):
        return False
    recv = call.func.value
    # `x.detach().cpu().item()`: the `.cpu()` is where it waits, for the tensor before it
    while isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute) \
            and call_name(recv) in ("cpu", "detach", "float", "double") and not recv.args:
        recv = recv.func.value
    return not (host_value(facts, recv) or isinstance(recv, (cst.Integer, cst.Float)) or cpu_factory(facts, recv)
                or of_data_sized(facts, recv) or copied_to_host(facts, recv))


def call_sync(facts: Facts, call: cst.Call) -> tuple[str, str] | None:
    """("report", message) for a call PF202 reports when it runs every step, ("forced", "")
    for a sync the code needs (`torch.cuda.synchronize()` that brackets a timer, actions
    sent to an environment), None for no sync."""
    name = call_name(call)
    q = facts.tree.qualname(call.func)
    if q == "torch.distributed.barrier":
        return "forced", ""  # the host waits for every rank, and NCCL waits for the device
    if q == "torch.cuda.synchronize":
        if _brackets_a_timer(facts, call):
            return "forced", ""  # timing a region needs the GPU idle at both ends
        return "report", ("`torch.cuda.synchronize()` on every iteration stalls the CPU until the GPU is idle; "
                          "synchronize only where you time or read results")
    if isinstance(call.func, cst.Attribute) and name in ("cpu", "numpy", "tolist") and not call.args:
        recv = call.func.value
        if any(call_name(c) in _SYNC_METHODS for c in inner_chain(recv)):
            return None  # reported at the first sync of the chain
        if any(call_name(c) == "item" for c in outer_chain(facts, call)):
            return None  # PF201 reports the chain
        if not device_tensor(facts, recv):
            return None
        if name == "cpu" and facts.kinds.has_kind(recv, Kind.MODEL):
            return None
        if feeds_environment(facts, call):
            return "forced", ""
        return "report", (f"`.{name}()` of a device tensor on every iteration copies it to the host and waits for the "
                          "GPU; collect on the device and copy once after the loop (or every N steps)")
    if isinstance(call.func, cst.Name) and name in ("float", "int", "bool") and q is None and len(call.args) == 1:
        arg = call.args[0].value
        if device_tensor(facts, arg) and not any(call_name(c) in _SYNC_METHODS for c in inner_chain(arg)):
            return "report", f"`{name}()` of a tensor on every iteration reads it back from the GPU; " + _ON_DEVICE_HINT
        return None
    if isinstance(call.func, cst.Attribute) and name in ("add_scalar", "add_histogram") and _writer(facts, call.func.value):
        value = get_arg(call, "scalar_value" if name == "add_scalar" else "values", 1)
        if value is not None and device_tensor(facts, value.value) \
                and not any(call_name(c) in _SYNC_METHODS for c in inner_chain(value.value)):
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
        for b in facts.bindings.lookup(recv.value, recv):
            if b.how == "expr" and isinstance(b.node, cst.Call) and \
                    (facts.tree.qualname(b.node.func) or dotted(b.node.func) or "").endswith("SummaryWriter"):
                return True
    text = (facts.tree.receiver_text(recv) or "").rsplit(".", 1)[-1].lower()
    return "writer" in text or text in ("tb", "tb_logger", "tblogger", "summary")


def condition_sync(facts: Facts, node: cst.CSTNode) -> bool:
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
    for call in facts.tree.calls_within(region):
        ctx = facts.loops.iteration_context(call)
        if ctx is None or ctx.node is not region:
            continue
        if item_sync(facts, call) or call_sync(facts, call) is not None:
            points.append(call)
            continue
        if _callee_waits(facts, call, region):
            points.append(call)
            waits_inside.add(call)
    for cls in (cst.If, cst.While, cst.Assert):
        for node in facts.tree.nodes_within(region, cls):
            ctx = facts.loops.iteration_context(node)
            if ctx is not None and ctx.node is region and condition_sync(facts, node):
                points.append(node)
    points.sort(key=lambda n: facts.tree.order.get(n, 0))
    # `to_cpu(loss).item()`: a helper that reads inside a read is that read, not another one
    if waits_inside:
        inner = facts.tree.inside_another(points)
        points = [p for p in points if p not in waits_inside or p not in inner]
    memo[region] = points
    return points


def _unseen_reads(facts: Facts, region: cst.CSTNode) -> list[cst.CSTNode]:
    """Waits in one iteration of `region` that no rule reports, but that make a read of the
    same wait cost nothing more:

    * host copies (`.cpu()`, `.numpy()`, `.tolist()`) of values whose kind is unknown but that
      a call computed from a device tensor (`tp = metric(out, y)`; `tp.cpu()`);
    * TensorBoard's `add_scalar`/`add_scalars`/`add_histogram` of a value that may be on the
      device (it is converted with `.cpu()`);
    * ops whose output size depends on the data: `.nonzero()`, `torch.nonzero`,
      `torch.argwhere`, `masked_select`, `torch.unique`, one-argument `torch.where`;
    * an `if`/`while` test on a name or `self.` attribute the iteration accumulates from a
      device tensor (`self.tokens += (y >= 0).sum()` … `if self.tokens < warmup:`);
    * a blocking copy to the GPU of a tensor made on the host (`torch.from_numpy(a).cuda()`,
      `torch.tensor(buf).to(device)`): from pageable memory it waits for the whole queue;
    * the fetch of a loop over a torchtext iterator built with `device=` (`BucketIterator`),
      which makes each batch on the device with such a copy."""
    memo = facts.__dict__.setdefault("_unseen_reads_memo", {})
    if region in memo:
        return memo[region]
    out: list[cst.CSTNode] = []
    memo[region] = out
    if fetch_copies_blocking(facts, region):
        out.append(region.iter)  # each batch is copied to the device, blocking, as it is fetched
    accumulated = None
    for call in facts.tree.calls_within(region):
        ctx = facts.loops.iteration_context(call)
        if ctx is None or ctx.node is not region or call_sync(facts, call) is not None or item_sync(facts, call):
            continue
        if _logs_device_value(facts, call) or sized_by_data(facts, call) or blocking_host_copy(facts, call):
            out.append(call)
            continue
        if call_name(call) not in ("cpu", "numpy", "tolist") or call.args or not isinstance(call.func, cst.Attribute):
            continue
        recv = call.func.value
        while isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute) and call_name(recv) in ("detach", "cpu"):
            recv = recv.func.value
        if not facts.kinds.of(recv) and computed_from_device(facts, recv, 0):
            out.append(call)
    for cls in (cst.If, cst.While):
        for node in facts.tree.nodes_within(region, cls):
            ctx = facts.loops.iteration_context(node)
            if ctx is None or ctx.node is not region or condition_sync(facts, node):
                continue
            if accumulated is None:
                accumulated = _accumulated_on_device(facts, region)
            if accumulated and any(dotted(n) in accumulated for n in iter_nodes(node.test)
                                   if isinstance(n, (cst.Name, cst.Attribute))):
                out.append(node)
    if len(out) > 1:
        out.sort(key=lambda n: facts.tree.order.get(n, 0))
    return out


def _logs_device_value(facts: Facts, call: cst.Call) -> bool:
    """A TensorBoard writer's `add_scalar`/`add_scalars`/`add_histogram` of a value that may be
    on the device (not a number, numpy or a CPU tensor)."""
    name = call_name(call)
    if name not in ("add_scalar", "add_scalars", "add_histogram") or not isinstance(call.func, cst.Attribute) \
            or not _writer(facts, call.func.value):
        return False
    value = get_arg(call, {"add_scalar": "scalar_value", "add_scalars": "tag_scalar_dict"}.get(name, "values"), 1)
    if value is None or any(call_name(c) in _SYNC_METHODS for c in inner_chain(value.value)):
        return False
    return maybe_on_device(facts, value.value)


def _accumulated_on_device(facts: Facts, region: cst.CSTNode) -> set[str]:
    """Names and `self.` attributes that `region`'s iterations accumulate from a device tensor
    (`self.tokens += (y >= 0).sum()`)."""
    out = set()
    for node in facts.tree.nodes_within(region, cst.AugAssign):
        text = dotted(node.target)
        if text is not None and device_tensor(facts, node.value):
            out.add(text)
    return out


def _callee_waits(facts: Facts, call: cst.Call, region: cst.CSTNode) -> bool:
    """The call waits for the GPU inside: a per-step function of this file that syncs
    (reported there), or a function or model class of the project that does."""
    for fn in _local_callees(facts, call):
        if fn is not region and facts.loops.step_function_kind(fn) is not None and _sync_points(facts, fn):
            return True
    return facts.syncs.callee_syncs(call)


def _local_callees(facts: Facts, call: cst.Call) -> list[cst.FunctionDef]:
    if isinstance(call.func, cst.Name):
        return list(facts.tree.functions_by_name.get(call.func.value, ()))
    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value == "self":
        return list(facts.tree.functions_by_name.get(call.func.attr.value, ()))
    return []


def waited_before(facts: Facts, region: cst.CSTNode, node: cst.CSTNode, collected: bool = False) -> cst.CSTNode | None:
    """The wait of the same iteration that makes `node` free, or None when `node` is the
    wait its iteration reports. Reads with no real GPU work queued between them form one
    wait (see `_gpu_work_between`); it is reported once, at its first unconditional read
    (else its first read), and not at all when one of its reads is needed anyway: a timing
    `synchronize()`, an action for an environment, a host copy a CPU metric or a file needs,
    a helper or model that reads back itself; with `collected`, also a host copy appended to a
    list that numpy joins after the loop (as written it waits; PF202 reports that copy)."""
    group = _group_of(facts, region).get(node)
    if group is None:
        return None
    if any(_forced(facts, p, region, collected) for p in group):
        return next((p for p in group if _forced(facts, p, region, collected)), group[0])
    rep = _representative(facts, region, group)
    return None if rep is node else rep


def _stops_inner_loop(facts: Facts, node: cst.If) -> bool:
    """The `if` leaves a loop that is not itself a training or evaluation loop (a solver's
    iterations, a decode): a NaN guard that breaks out of the training loop is still a read
    to throttle."""
    if not _exits_loop(node.body):
        return False
    for anc in facts.tree.ancestors(node):
        if isinstance(anc, (cst.For, cst.While)):
            return facts.loops.loop_kind(anc) not in ("train", "eval")
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            return False
    return False


def _exits_loop(block: cst.BaseSuite) -> bool:
    """The branch leaves the loop: a `break` or `return` among its statements."""
    if isinstance(block, cst.SimpleStatementSuite):  # `if done: break`
        return any(isinstance(s, (cst.Break, cst.Return)) for s in block.body)
    return any(isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, (cst.Break, cst.Return)) for s in stmt.body)
               for stmt in block.body)


def decides_exit(facts: Facts, point: cst.CSTNode) -> bool:
    """The value read back decides whether the loop stops (`if residual < tol: break`, a decode
    that stops at its end token): the algorithm needs it on the host every iteration."""
    if isinstance(point, cst.If):
        return _stops_inner_loop(facts, point)
    if not isinstance(point, cst.Call):
        return False
    cur: cst.CSTNode = point
    for c in outer_chain(facts, point):
        cur = c
    parent = facts.tree.parent(cur)
    while isinstance(parent, (cst.Subscript, cst.SubscriptElement, cst.Index)):
        cur, parent = parent, facts.tree.parent(parent)
    return _value_decides_exit(facts, cur, parent, 0)


def _value_decides_exit(facts: Facts, cur: cst.CSTNode, parent: cst.CSTNode | None, depth: int) -> bool:
    """`cur` (a value whose parent is `parent`), or a name assigned from it (or from a host
    computation on it: `action = int(np.random.choice(n, p=probs))`), is tested by an `if`
    that leaves the loop."""
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        target = parent.targets[0].target
        scope = facts.tree.enclosing_function(parent) or facts.module
        uses = list(facts.tree.later_uses(target.value, scope, facts.tree.order.get(target, 0)))[:8]
    else:
        uses = [cur]
    for use in uses:
        for anc in facts.tree.ancestors(use):
            if isinstance(anc, cst.If):
                if facts.tree.is_inside(use, anc.test) and _stops_inner_loop(facts, anc):
                    return True
                break
            if isinstance(anc, cst.Assign) and depth < 2 and use is not cur and facts.tree.is_inside(use, anc.value):
                if _value_decides_exit(facts, anc.value, anc, depth + 1):
                    return True
                break
            if isinstance(anc, (cst.SimpleStatementLine, cst.For, cst.While, cst.FunctionDef)):
                break
    return False


def _forced(facts: Facts, point: cst.CSTNode, region: cst.CSTNode, collected: bool = False) -> bool:
    if decides_exit(facts, point):
        return True  # the loop's stopping test needs the value
    if point in _unseen_reads(facts, region):
        return True  # the iteration waits there anyway
    if isinstance(point, cst.Call):
        got = call_sync(facts, point)
        if got is not None and got[0] == "forced":
            return True
        if not item_sync(facts, point) and got is None:
            return True  # a call that waits inside (a helper, a model's forward)
        if got is not None and (host_data_needed(facts, point) or (collected and collected_for_host(facts, point))):
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
    for a in facts.tree.ancestors(node):
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
    unseen = _unseen_reads(facts, region)
    points = sorted([*_sync_points(facts, region), *unseen], key=lambda n: facts.tree.order.get(n, 0)) if unseen \
        else _sync_points(facts, region)
    for i, p in enumerate(points):
        # the latest earlier wait that can run in the same iteration (not the other arm of an `if`)
        prev = next((q for q in reversed(points[:i]) if not exclusive(facts, q, p)), None)
        copies = prev is not None and any(x in unseen and (x is getattr(region, "iter", None) or (
            isinstance(x, cst.Call) and blocking_host_copy(facts, x))) for x in (prev, p))
        if prev is not None and not _gpu_work_between(facts, region, prev, p, strict=copies):
            leader[p] = leader.get(prev, prev)
        else:
            leader[p] = p
    _wrap_around(facts, region, points, leader, unseen)
    groups: dict = {}
    for p in points:
        groups.setdefault(leader[p], []).append(p)
    out = {p: groups[leader[p]] for p in points}
    memo[region] = out
    return out


def _host_only_call(facts: Facts, call: cst.Call) -> bool:
    """A call that queues no GPU work: bookkeeping (`len`, `range`, container methods, more
    copies), numpy, the clock, printing."""
    q = facts.tree.qualname(call.func) or ""
    return call_name(call) in _TRIVIAL_BETWEEN or q.startswith(_HOST_ROOTS) or q.startswith(("time.", "math.")) \
        or call_name(call) in ("print", "append", "astype", "from_numpy", "update", "set_description", "set_postfix")


def _wrap_around(facts: Facts, region: cst.CSTNode, points: list, leader: dict, unseen: list) -> None:
    """A loop whose iteration starts, before any GPU work, with a blocking copy of a host
    tensor (`x, y = loader.next_batch(); x = x.to(device)`): the reads after the last GPU work
    of one iteration wait together with that copy of the next."""
    if not isinstance(region, (cst.For, cst.While)) or len(points) < 2:
        return
    first, last = points[0], points[-1]
    fetch = isinstance(region, cst.For) and first is region.iter
    if first not in unseen or not (fetch or (isinstance(first, cst.Call) and blocking_host_copy(facts, first))):
        return
    where = None if fetch else facts.tree.block_of(first)
    if not fetch and (where is None or where[0] is not region.body):
        return  # the copy runs on some iterations only (`if buf_device != device:`)
    lo, hi = facts.tree.order.get(first, 0), (facts.tree._range(last) or (facts.tree.order.get(last, 0),) * 2)[1]
    test = region.iter if isinstance(region, cst.For) else region.test
    if fetch:
        lo = (facts.tree._range(first) or (lo, lo))[1]
    for c in facts.tree.calls_within(region):
        o = facts.tree.order.get(c, 0)
        if (o < lo or o > hi) and not facts.tree.is_inside(c, test) and not facts.tree.is_inside(c, first) \
                and not _host_only_call(facts, c):
            return  # work that may queue GPU kernels before the copy or after the last read
    tail = leader[last]
    if tail is leader[first]:
        return
    for p in points:
        if leader[p] is tail:
            leader[p] = leader[first]


def exclusive(facts: Facts, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """`a` and `b` sit in different arms of one `if`/`else`."""
    set_b = set(facts.tree.ancestors(b))
    cur = a
    for node in facts.tree.ancestors(a):
        if node in set_b:
            if isinstance(node, cst.If):
                in_body_a = facts.tree.is_inside(a, node.body)
                in_body_b = facts.tree.is_inside(b, node.body)
                in_test = facts.tree.is_inside(a, node.test) or facts.tree.is_inside(b, node.test)
                return not in_test and in_body_a != in_body_b
            if isinstance(node, cst.Else):
                return False
            return False
        cur = node
    return False


def _gpu_work_between(facts: Facts, region: cst.CSTNode, prev: cst.CSTNode, node: cst.CSTNode,
                      strict: bool = False) -> bool:
    """Whether anything between the end of `prev` and `node` (its own operand included)
    queues real GPU work: a model's forward, `.backward()`, an optimizer or scaler step, or
    a call of a function of this file that does one of those. Small elementwise and
    reduction kernels (`out.argmax(1)`, `(p == y).sum()`, an accuracy helper) finish in
    microseconds once the queue has drained: a read after them waits for almost nothing.
    `strict` (a blocking copy at either end, a wait only by its side effect): any call but
    host bookkeeping counts (`self.model(x)` of a model of unknown kind)."""
    if facts.tree.is_inside(node, prev):
        return False  # a print inside the `if` on a tensor: waited for by the test
    lo = facts.tree.order.get(prev, 0)
    end = (facts.tree._range(prev) or (lo, lo))[1]
    hi = facts.tree.order.get(node, 0)
    for c in facts.tree.calls_in_window(region, min(end, hi - 1), node):
        o = facts.tree.order.get(c, 0)
        if c is node or not (end < o < hi or facts.tree.is_inside(c, node)):
            continue  # (what `node` itself computes before reading counts too: `model(x).cpu()`)
        if _heavy_call(facts, c, 0) or (strict and not _host_only_call(facts, c) and not _small_kernel(facts, c)):
            return True
    return False


def _small_kernel(facts: Facts, call: cst.Call) -> bool:
    """A torch op or tensor method (elementwise, reduction, view): microseconds of GPU work."""
    q = facts.tree.qualname(call.func) or ""
    return q.startswith("torch.") or (isinstance(call.func, cst.Attribute) and Kind.TENSOR in facts.kinds.of(call.func.value))


def _heavy_call(facts: Facts, call: cst.Call, depth: int) -> bool:
    if facts.steps.is_backward_call(call) or facts.steps.is_optimizer_step(call) or facts.steps.is_scaler_call_step(call):
        return True
    ks = facts.kinds.of(call.func)
    if Kind.MODEL in ks or Kind.NAMED_MODEL in ks or (isinstance(call.func, cst.Name) and call.func.value == "self"):
        return True
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("forward", "generate"):
        return True
    if depth < 2:
        for fn in _local_callees(facts, call):
            if any(_heavy_call(facts, c, depth + 1) for c in facts.tree.calls_within(fn)):
                return True
    return False


def waits_at_once(facts: Facts, region: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether the iteration of `region` waits for the GPU right after `node` (a copy to the
    device): its next wait in source order (a read, or a call that reads inside, such as a
    `sequence_mask(lengths)` helper doing `int(lengths.max())`) comes before any real GPU
    work (a model call, backward, an optimizer step).  A copy that is waited for at once
    overlaps with nothing, made asynchronous or not."""
    for a in facts.tree.ancestors(node):
        if isinstance(a, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            break
        if isinstance(a, cst.Call) and _heavy_call(facts, a, 0):
            return False  # `model(x.to(device))`: the model's work is queued right after the copy
    # From the end of the copy: a blocking copy of a host tensor later in the same statement
    # (`data, onehot = data.to(d), torch.from_numpy(a).to(d)`) already waits.
    start = (facts.tree._range(node) or (facts.tree.order.get(node, 0),) * 2)[1]
    points = [p for p in [*_sync_points(facts, region), *_unseen_reads(facts, region)]
              if facts.tree.order.get(p, 0) > start and not exclusive(facts, node, p)]
    if not points:
        return False
    first = min(points, key=lambda p: facts.tree.order.get(p, 0))
    if _optional(facts, first, region) or _gpu_work_between(facts, region, node, first):
        return False
    # Nothing else runs in between but more copies and container bookkeeping: a call of
    # unknown kind there (`model(batch.x)` on a model handed in by name only) may queue the
    # work the copy would overlap with.
    lo, hi = start, facts.tree.order.get(first, 0)
    return all(call_name(c) in _TRIVIAL_BETWEEN for c in facts.tree.calls_within(region) if lo < facts.tree.order.get(c, 0) < hi)


# Calls that queue no GPU work and do next to no host work: more copies to the device, the
# containers a batch comes in, and the test of `if torch.cuda.is_available():`.
_TRIVIAL_BETWEEN = {"to", "cuda", "items", "keys", "values", "list", "tuple", "dict", "zip", "len", "enumerate",
                    "range", "get", "is_available"}


def later_syncs(facts: Facts, region: cst.CSTNode, first: cst.CSTNode) -> list:
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


def host_data_needed(facts: Facts, node: cst.CSTNode) -> bool:
    """The host copy feeds host-only work in the same iteration: a numpy / scikit-learn /
    SciPy call (a CPU metric), any function other than torch's handed the copy as a numpy
    array (a project's `accuracy(out.cpu().numpy(), y)`), an image, audio or array file, a
    drawing. Deferring the copy past the loop would not remove it."""
    if not isinstance(node, cst.Call):
        return False
    outer: cst.CSTNode = node
    for c in outer_chain(facts, node):
        outer = c
    values = [outer]
    parent = facts.tree.parent(outer)
    if isinstance(parent, cst.Attribute) and parent.value is outer:
        grand = facts.tree.parent(parent)
        if isinstance(grand, cst.Call) and grand.func is parent:
            return True  # `.cpu().numpy().astype(np.uint8)`: numpy work on the copy
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        name = parent.targets[0].target.value
        fn = facts.tree.enclosing_function(parent) or facts.module
        values = list(facts.tree.later_uses(name, fn, facts.tree.order.get(parent.targets[0].target, 0)))[:20]
    for v in values:
        if consumed_on_host(facts, v):
            return True
    return False


def _prints_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.ConcatenatedString):  # `f"epoch {e}" f" | loss {loss:.2f}"`
        return _prints_tensor(facts, expr.left) or _prints_tensor(facts, expr.right)
    if isinstance(expr, cst.FormattedString):
        for part in expr.parts:
            if isinstance(part, cst.FormattedStringExpression) and _bare_tensor(facts, part.expression):
                return True
        return False
    return _bare_tensor(facts, expr)


def _bare_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    if any(call_name(c) in _SYNC_METHODS for c in inner_chain(expr)):
        return False  # `.item()` is PF201's
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("float", "int", "len", "str", "round"):
        return False
    return device_tensor(facts, expr) and not facts.kinds.has_kind(expr, Kind.MODEL)


def _tensor_condition(facts: Facts, test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if isinstance(test, cst.BooleanOperation):
        return _tensor_condition(facts, test.left) or _tensor_condition(facts, test.right)
    if any(call_name(c) in _SYNC_METHODS for c in inner_chain(test)):
        return False
    if isinstance(test, cst.Comparison):
        if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in test.comparisons):
            return False
        sides = [test.left] + [c.comparator for c in test.comparisons]
        return any(_strong_tensor(facts, s) for s in sides)
    if isinstance(test, cst.Call):
        q = facts.tree.qualname(test.func) or ""
        if q.startswith("torch.") and q.rsplit(".", 1)[-1] in ("isnan", "isinf", "isfinite", "any", "all", "equal", "allclose", "is_nonzero"):
            return any(device_tensor(facts, a.value) for a in test.args) or q.endswith(("equal", "allclose"))
        if isinstance(test.func, cst.Attribute) and call_name(test) in ("any", "all", "isnan", "isinf", "is_nonzero", "equal", "allclose"):
            return _strong_tensor(facts, test.func.value)
        return False
    return _strong_tensor(facts, test)


def _strong_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    ks = facts.kinds.of(expr)
    if host_value(facts, expr):
        return False
    return bool(ks & {Kind.LOSS, Kind.DEVICE_TENSOR}) or (Kind.TORCH_OP in ks and Kind.CPU_TENSOR not in ks)
