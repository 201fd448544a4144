"""What rules of several families share: whether a file trains and whether code runs once
(`is_training_file`, `updates_weights`, `runs_once`), the script's device (`script_device`),
the model's forward pass (`forward_range`, `is_model_call`), and fixes that add statements
(`insert_after_imports`, `wrap_in_with`)."""

from __future__ import annotations

import libcst as cst

from perflint.edits import parse_expr
from perflint.analysis import NOT_LITERAL, Binding, Facts, call_name, get_arg, has_splat, iter_nodes, literal_value
from perflint.names import dotted
from perflint.analysis.vocab import Kind
from perflint.analysis.summary import _symbol_of
from perflint.analysis.syntax import is_cli_command


def words(facts: Facts):
    return facts.filewide.words


def torch_module_name(facts: Facts, top_level: bool = False) -> str | None:
    """The local name the `torch` module is bound to (`torch`, or an alias such as `th`)."""
    names = facts.tree.imports.local_names_for("torch")
    if top_level:
        bound = set()
        for stmt in facts.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            full = dotted(alias.name) or ""
                            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                                if full == "torch":
                                    bound.add(alias.asname.name.value)
                            elif full == "torch" or full.startswith("torch."):
                                bound.add("torch")
        names = [n for n in names if n in bound]
    if "torch" in names:
        return "torch"
    return sorted(names)[0] if names else None


def is_setting_line(facts: Facts, stmt: cst.CSTNode) -> bool:
    """`torch.backends.… = …` or `torch.set_float32_matmul_precision(…)` on its own line."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        q = facts.tree.qualname(small.targets[0].target) or ""
        return q.startswith("torch.backends.")
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return (facts.tree.qualname(small.value.func) or "") == "torch.set_float32_matmul_precision"
    return False


def insert_after_imports(facts: Facts, code_line: str, after_settings: bool = True) -> dict | None:
    """A replacement that adds `code_line` once, after the last top-level import (and, with
    `after_settings`, after any settings lines that directly follow it, so inserted settings
    stay together)."""
    body = list(facts.module.body)
    last = None
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            last = i
    if last is None:
        return None
    while after_settings and last + 1 < len(body) and is_setting_line(facts, body[last + 1]):
        last += 1
    anchor = body[last]
    new = cst.parse_statement(code_line + "\n")
    return {anchor: cst.FlattenSentinel([anchor, new])}


def optimizes_inputs_only(facts: Facts) -> bool:
    """Every optimizer the file builds updates free tensors (`Adam([latent] + noises)`: GAN
    inversion, adversarial inputs, style transfer), none a module's `.parameters()`: the
    loop with `backward()`/`step()` trains no model."""
    ctors = [c for c in facts.tree.calls() if (facts.tree.qualname(c.func) or "").startswith("torch.optim.")
             and (facts.tree.qualname(c.func) or "").count(".") == 2 and call_name(c)[:1].isupper()]
    if not ctors:
        return False
    for c in ctors:
        params = get_arg(c, "params", 0)
        if params is None:
            return False
        value = params.value
        if isinstance(value, cst.Name):
            bs = facts.bindings.lookup(value.value, value)
            value = bs[0].node if len(bs) == 1 and bs[0].how == "expr" else value
        nodes = list(iter_nodes(value))
        if not isinstance(nodes[0], (cst.List, cst.BinaryOperation, cst.Tuple)):
            return False
        if isinstance(nodes[0], cst.List) and not nodes[0].elements:
            return False  # `filtered = []`, filled later (`for p in model.parameters(): filtered.append(p)`)
        if any(isinstance(n, cst.Call) for n in nodes) or any(isinstance(n, (cst.Dict, cst.Attribute)) for n in nodes):
            return False  # `.parameters()`, param groups, `model.weight`: may be a module's weights
    return True


def is_training_file(facts: Facts) -> bool:
    """A file that trains: a training loop that updates weights (not a profiling helper that
    times `.backward()` in a loop), or a per-step training function of its own."""
    if optimizes_inputs_only(facts):
        return False  # GAN inversion and the like: the optimizer updates inputs, not a model
    if any(updates_weights(facts, loop, wrapping=True) for loop in facts.loops.training_loops()):
        return True
    # A helper called once per step from another file's loop is per-step code, but its file
    # is not a training file: file-wide settings belong in the file that trains.
    return any(facts.loops.step_function_kind(fn) == "train" and fn not in facts.step_callers
               for fn in facts.tree.index[cst.FunctionDef])


def updates_weights(facts: Facts, step: cst.CSTNode, wrapping: bool = False) -> bool:
    """An optimizer step in the iteration, or an optimizer built in the file: a training step,
    not a saliency map, an adversarial attack that only needs input gradients, or a timing
    helper.  With `wrapping`, a `DistributedOptimizer` counts too (its model may run in
    another process: enough for a file-wide setting, not for rewriting the step)."""
    if any(facts.steps.is_optimizer_step(c) for c in facts.tree.calls_within(step)):
        return True
    if wrapping:
        # For a file-wide setting: the loop calls some `.step()` (a remote optimizer's,
        # `opt_rref.rpc_sync().step()`), the file steps an optimizer somewhere (a helper it
        # calls), or drives a DistributedOptimizer; an optimizer it only builds and returns
        # (a utility module's factory) does not make it a file that trains.
        if any(call_name(c) == "step" for c in facts.tree.calls_within(step)):
            return True
        return any(facts.steps.is_optimizer_step(c) or facts.tree.qualname(c.func) in _WRAPPING_OPTIMIZERS
                   for c in facts.tree.calls())
    return any(
        (facts.tree.qualname(c.func) or "").startswith("torch.optim.") and Kind.OPTIMIZER in facts.kinds.of(c)
        for c in facts.tree.calls()
    )


# Optimizers that take an optimizer class rather than being one (`DistributedOptimizer(optim.SGD, ...)`).
_WRAPPING_OPTIMIZERS = {"torch.distributed.optim.DistributedOptimizer", "torch.distributed.optim.ZeroRedundancyOptimizer"}


def enclosing_block(facts: Facts, node: cst.CSTNode) -> tuple[cst.CSTNode, int] | None:
    """(the IndentedBlock or Module whose body holds `node`'s statement, its index)."""
    return facts.tree.block_of(node)


def is_model_call(facts: Facts, call: cst.Call) -> bool:
    if isinstance(call.func, cst.Name) and call.func.value == "self":
        return False
    ks = facts.kinds.of(call.func)
    return bool(ks & {Kind.MODEL, Kind.NAMED_MODEL}) and not (ks & {Kind.CRITERION, Kind.NAMED_CRITERION, Kind.OPTIMIZER, Kind.DATALOADER})


def _contains(facts: Facts, stmt: cst.CSTNode, pred) -> bool:
    for n in iter_nodes(stmt):
        if isinstance(n, cst.Call) and pred(n):
            return True
    return False


def wrap_in_with(stmts: list[cst.BaseStatement], item_code: str) -> cst.With:
    """`with <item_code>:` around `stmts`; the first statement's comments move above it."""
    first = stmts[0]
    lead = getattr(first, "leading_lines", ())
    inner = [first.with_changes(leading_lines=[])] + list(stmts[1:]) if lead else list(stmts)
    return cst.With(
        items=[cst.WithItem(item=parse_expr(item_code))],
        body=cst.IndentedBlock(body=inner),
        leading_lines=lead,
    )


# The script's own device (`--device`, `args.device`, `device = torch.device(...)`), for
# unsafe fixes that only make sense on CUDA (bf16 autocast, fused optimizers).
_CUDA = "cuda"  # the device is CUDA for sure: the fix may say "cuda" outright


def _device_like(facts: Facts, expr: cst.BaseExpression) -> bool:
    """An expression that names a device: a device literal or `torch.device(...)`, a name
    bound only to those, or a name/attribute spelled like a device (`device`, `args.device`,
    `self.dev`)."""
    if facts.kinds.of(expr) & {Kind.TENSOR, Kind.OUTPUT, Kind.BATCH, Kind.LOSS, Kind.MODEL, Kind.NUMBER, Kind.INT}:
        return False
    if isinstance(expr, cst.Call):
        return facts.tree.qualname(expr.func) == "torch.device" and bool(expr.args) and not has_splat(expr)
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if not isinstance(expr, (cst.Name, cst.Attribute)) or dotted(expr) is None:
        return False
    if isinstance(expr, cst.Attribute) and facts.kinds.of(expr.value) & {Kind.TENSOR, Kind.OUTPUT, Kind.BATCH, Kind.LOSS}:
        return False  # `x.device` of a tensor made in the step
    if facts.devices.is_device_expr(expr):
        return True
    last = (expr.value if isinstance(expr, cst.Name) else expr.attr.value).lower()
    return last == "dev" or "device" in last


def _device_args(facts: Facts, call: cst.Call) -> list[object]:
    """What a call says about the device: `.cuda()` → _CUDA; `.to(D)` / `device=D` → D."""
    out: list[object] = []
    name = call_name(call)
    if name == "cuda" and isinstance(call.func, cst.Attribute) and facts.tree.qualname(call.func) is None:
        out.append(_CUDA)
    elif name == "to" and isinstance(call.func, cst.Attribute) and not has_splat(call):
        dev = get_arg(call, "device", 0)
        if dev is not None and _device_like(facts, dev.value):
            out.append(dev.value)
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "device" and name != "to" and _device_like(facts, a.value):
            out.append(a.value)
    return out


def _read_names(expr: cst.BaseExpression) -> list[cst.Name]:
    """The names an expression reads (not attribute names or keywords)."""
    skip = set()
    for n in iter_nodes(expr):
        if isinstance(n, cst.Attribute):
            skip.add(id(n.attr))
        elif isinstance(n, cst.Arg) and n.keyword is not None:
            skip.add(id(n.keyword))
    return [n for n in iter_nodes(expr) if isinstance(n, cst.Name) and id(n) not in skip]


def _names_reach(facts: Facts, expr: cst.BaseExpression, at: cst.CSTNode, used_at: cst.CSTNode) -> bool:
    """Every name `expr` reads is bound where `at` runs: in `at`'s scope before it, or in an
    enclosing scope (a parameter, or a module name bound before `at`, or one that `used_at`,
    a read in `at`'s own scope, already relies on)."""
    scope = facts.tree.scope_of(at)
    for n in _read_names(expr):
        if n.value in facts.tree.imports.aliases:
            continue  # an imported module (`torch`)
        bs = facts.bindings.lookup(n.value, at)
        if not bs:
            return False
        if any(b.how == "param" or facts.bindings._reaches(b, at) for b in bs):  # type: ignore[attr-defined]
            continue
        outer = all(b.site is not None and facts.tree.scope_of(b.site) is not scope for b in bs)
        if outer and facts.tree.scope_of(used_at) is scope and facts.bindings.lookup(n.value, used_at) == bs:
            continue  # a global the step itself reads when it runs
        return False
    return True


def _device_type_test(facts: Facts, expr: cst.BaseExpression, tn: str) -> str:
    """Source of a test that the device `expr` is CUDA, right for a string or a torch.device."""
    text = cst.Module(body=[]).code_for_node(expr)
    if isinstance(expr, cst.Call):
        return f'{text}.type == "cuda"'
    bindings: list[Binding] = []
    if isinstance(expr, cst.Name):
        bindings = facts.bindings.lookup(expr.value, expr)
    elif isinstance(expr, cst.Attribute):
        bindings = facts.bindings.self_attr_bindings(expr)
    values = [b.node for b in bindings if b.how == "expr"]
    if bindings and len(values) == len(bindings):
        if all(isinstance(v, cst.Call) and facts.tree.qualname(v.func) == "torch.device" for v in values):
            return f'{text}.type == "cuda"'
        strings: list[object] = []
        for v in values:
            parts = [v.body, v.orelse] if isinstance(v, cst.IfExp) else [v]
            strings.extend(literal_value(p) for p in parts)
        if all(s in ("cuda", "cpu") for s in strings):
            return f'{text} == "cuda"'
    return f'{tn}.device({text}).type == "cuda"'


def script_device(facts: Facts, at: cst.CSTNode, region: cst.CSTNode | None = None,
                  models_only: bool = False) -> tuple[str | None, cst.Call | None]:
    """How an unsafe CUDA-only fix at `at` should tell whether the script runs on CUDA.

    The device is the first one the training step (`region`) moves data or the model to,
    else the first one a model is moved to in the file (same scope as `at` first). Returns
    None when that device is CUDA for sure (`.cuda()`, `"cuda"`, `torch.device("cuda")`) or
    when no device expression reaches `at` (the fix then says "cuda", as before); else the
    source of a test such as `device.type == "cuda"`. With it, the call that moves data or
    the model to that device.
    """
    tn = torch_module_name(facts)
    if tn is None:
        return None, None
    dev, call = _script_device_expr(facts, at, region, models_only)
    if dev is None or dev is _CUDA:
        return None, call
    assert isinstance(dev, cst.BaseExpression)
    return _device_type_test(facts, dev, tn), call


def _script_device_expr(facts: Facts, at: cst.CSTNode, region: cst.CSTNode | None,
                        models_only: bool) -> tuple[object, cst.Call | None]:
    """The device expression `script_device` goes by (`_CUDA` for one that is CUDA for sure,
    None for none) and the call that moves to it."""
    found: list[tuple[object, cst.Call]] = []
    if region is not None:
        for call in facts.tree.calls_within(region):
            if models_only and not facts.kinds.has_kind(call, Kind.MODEL):
                continue
            found.extend((d, call) for d in _device_args(facts, call))
    if not found:
        scope = facts.tree.scope_of(at)
        moves = []
        for call in facts.tree.calls():
            if call_name(call) in ("to", "cuda") and (facts.kinds.has_kind(call, Kind.MODEL) or facts.kinds.has_kind(
                    call.func.value if isinstance(call.func, cst.Attribute) else None, Kind.MODEL)):
                moves.extend((d, call) for d in _device_args(facts, call))
        moves.sort(key=lambda m: (facts.tree.scope_of(m[1]) is not scope, facts.tree.order[m[1]]))
        found = moves
    for dev, call in found:
        if dev is _CUDA:
            return _CUDA, call
        assert isinstance(dev, cst.BaseExpression)
        ks = facts.devices.device_kinds(dev)
        if ks == {Kind.DEVICE_CUDA}:
            return _CUDA, call
        if ks == {Kind.DEVICE_CPU} or (ks and ks <= {Kind.DEVICE_CPU, Kind.DEVICE_OTHER}):
            continue  # a CPU copy (logging, checkpoints), not the training device
        if not _names_reach(facts, dev, at, call):
            continue
        return dev, call
    return None, None


def runs_on_cpu_by_default(facts: Facts, at: cst.CSTNode, region: cst.CSTNode | None = None) -> bool:
    """The device `script_device` goes by is an option whose default is the CPU
    (`add_argument('--device', default='cpu')`, then `.to(args.device)`, also through
    `device = torch.device(args.device)`): the run as written trains on the CPU."""
    dev, _ = _script_device_expr(facts, at, region, False)
    if not isinstance(dev, cst.BaseExpression):
        return False
    default = _option_default_device(facts, dev, 0)
    return isinstance(default, str) and default.strip().lower() == "cpu"


def _option_default_device(facts: Facts, expr: cst.BaseExpression, depth: int) -> object:
    if depth > 3:
        return None
    if isinstance(expr, cst.Call) and facts.tree.qualname(expr.func) == "torch.device" and len(expr.args) == 1 \
            and expr.args[0].keyword is None and not expr.args[0].star:
        return _option_default_device(facts, expr.args[0].value, depth + 1)
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr" and isinstance(bs[0].node, cst.BaseExpression):
            return _option_default_device(facts, bs[0].node, depth + 1)
        return None
    if isinstance(expr, cst.Attribute):
        found, default = facts.cross.option_default(expr)
        return default if found else None
    return None


def _is_step_boundary(facts: Facts, call: cst.Call) -> bool:
    return facts.steps.is_backward_call(call) or facts.steps.is_optimizer_step(call)


def _backward_tensor_name(call: cst.Call) -> str | None:
    recv = call.func.value if isinstance(call.func, cst.Attribute) else None
    while isinstance(recv, cst.BinaryOperation):
        recv = recv.left
    return recv.value if isinstance(recv, cst.Name) else None


def forward_range(facts: Facts, backward: cst.Call, include_backward: bool = False):
    """The statements of one training step to wrap: from the first model call to the statement
    that produces the tensor passed to `.backward()` (or the backward statement itself).

    Returns (block, start, end, first model call) with `block.body[start:end + 1]` the range,
    or (None, None, None, first model call) when the step has no such simple shape.
    """
    where = enclosing_block(facts, backward)
    if where is None or isinstance(where[0], cst.Module):
        return None, None, None, None
    block, bi = where
    body = list(block.body)
    if include_backward:
        end = bi
    else:
        name = _backward_tensor_name(backward)
        end = None
        if name is not None:
            bs = facts.bindings.lookup(name, backward)
            if len(bs) == 1 and bs[0].how in ("expr", "unpack") and bs[0].site is not None:
                stmt = facts.tree.parent(bs[0].site)
                for i in range(bi):
                    if body[i] is stmt:
                        end = i
            if end is not None:
                # `loss += aux` / `loss = loss / k` style updates between binding and backward.
                for k in range(end + 1, bi):
                    st = body[k]
                    if isinstance(st, cst.SimpleStatementLine) and any(
                        isinstance(s, cst.AugAssign) and isinstance(s.target, cst.Name) and s.target.value == name
                        for s in st.body
                    ):
                        end = k
    lo = 0
    for i in range(bi - 1, -1, -1):
        if _contains(facts, body[i], lambda c: _is_step_boundary(facts, c)):
            lo = i + 1
            break
    first_call = None
    start = None
    for i in range(lo, bi + 1):
        for n in iter_nodes(body[i]):
            if isinstance(n, cst.Call) and is_model_call(facts, n) and facts.tree.scope_of(n) is facts.tree.scope_of(backward):
                if first_call is None or facts.tree.order[n] < facts.tree.order[first_call]:
                    first_call = n
        if first_call is not None:
            start = i
            break
    if first_call is None or end is None or start is None or start > end:
        return None, None, None, first_call
    for st in body[start:end + 1]:
        if _contains(facts, st, lambda c: _is_step_boundary(facts, c)) and not include_backward:
            return None, None, None, first_call
        if any(isinstance(n, (cst.Yield, cst.Await)) for n in iter_nodes(st)):
            return None, None, None, first_call
    return block, start, end, first_call


COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def throttled_in_loop(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode) -> bool | None:
    """None when `node` is in no loop of `scope`; True when it sits in a loop but not on every
    iteration (`if step % N == 0:`); False when it runs on every iteration of a loop."""
    cur = node
    seen_loop = False
    own = facts.tree.parent(node) if isinstance(node, cst.CompFor) else None
    for anc in facts.tree.ancestors(node):
        if anc is scope:
            break
        if isinstance(anc, cst.CompFor) or (isinstance(anc, COMPREHENSIONS) and anc is not own):
            if not (isinstance(anc, cst.CompFor) and anc.iter is cur):
                return False  # inside another comprehension's loop
        if isinstance(anc, (cst.For, cst.While)) and cur is anc.body:
            seen_loop = True
            if facts.loops.runs_each_time(node, anc, nested_functions=False):
                return False
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            return False  # a nested function: may run any number of times
        cur = anc
    return True if seen_loop else None


def file_trains(facts: Facts) -> bool:
    return facts.hotpath.trains


def trains_in(facts: Facts, node: cst.CSTNode) -> bool:
    """Whether the code under `node` runs a training step: backward, an optimizer step, or a
    call of a function of this file that is a training step."""
    return _steps_in(facts, node, None, 0)


def _steps_in(facts: Facts, node: cst.CSTNode, fn: cst.FunctionDef | None, depth: int) -> bool:
    """A training step under `node` (the body of `fn`, when given): backward or an optimizer
    step, or a call of a function of this file that runs one itself. At the top (`fn` None)
    the function must also be called per training step; a helper such a step calls
    (`accuracy(preds, labels)`, a metric) runs none, so a test loop that also calls it
    trains nothing."""
    for c in facts.tree.calls_within(node):
        if facts.steps.is_backward_call(c) or facts.steps.is_optimizer_step(c) or facts.steps.is_scaler_call_step(c):
            return True
        f = c.func
        name = f.value if isinstance(f, cst.Name) else (
            f.attr.value if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self"
            else None)
        if name and depth < 3 and any(
                g is not fn and (fn is not None or facts.loops.step_function_kind(g) == "train")
                and _steps_in(facts, g, g, depth + 1) for g in facts.tree.functions_by_name.get(name, ())):
            return True
    return False


def runs_once(facts: Facts, scope: cst.CSTNode, depth: int = 0) -> bool:
    """`scope` (the module, or the function that builds the loader) runs once per run: the
    module, a `main` function, or a top-level function every call of which in this file sits
    outside any loop, in code that itself runs once (or such a method: `_method_runs_once`)."""
    if not isinstance(scope, cst.FunctionDef):
        return True
    if depth > 3 or facts.loops.step_function_kind(scope) is not None:
        return False
    if facts.tree.enclosing_class(scope) is not None:
        return _method_runs_once(facts, scope, depth)
    name = scope.name.value
    if facts.project is not None and facts.tree.parent(scope) is facts.module and not file_trains(facts) \
            and facts.project.called_from_training(name):
        return False  # a training script elsewhere calls it (an evaluation every epoch)
    if facts.project is not None and facts.tree.parent(scope) is facts.module and not file_trains(facts) \
            and facts.project.called_only_outside_training(name):
        return True  # every caller in the project is code that does not train (an evaluation script)
    calls = facts.tree.calls_named(name)
    if not calls:
        # an entry point: `main()` by convention, or a command-line (sub)command (`@cli.command()`)
        return name in ("main", "run", "_main") or is_cli_command(scope)
    for c in calls:
        host = facts.tree.enclosing_function(c) or facts.module
        if throttled_in_loop(facts, c, host) is not None or not runs_once(facts, host, depth + 1):
            return False
    return True


def _method_runs_once(facts: Facts, method: cst.FunctionDef, depth: int) -> bool:
    """A method of a top-level class of a script that does not train and that no other project
    file imports (so every call of it is in this file), every call `obj.<method>(...)` of
    which sits outside any loop, in code that runs once (`evaluator.eval()` at the end of
    an evaluation script)."""
    cls = facts.tree.enclosing_class(method)
    if cls is None or facts.tree.parent(method) is not cls.body or facts.tree.parent(cls) is not facts.module \
            or file_trains(facts) or facts.project is None or facts.project.settings_near().get("imported"):
        return False
    name = method.name.value
    calls = []
    for c in facts.tree.calls():
        if not (isinstance(c.func, cst.Attribute) and c.func.attr.value == name):
            continue
        recv = c.func.value
        if isinstance(recv, cst.Name) and recv.value == "self":
            if facts.tree.enclosing_class(c) is not cls:
                return False
        elif facts.cross.instance_class(recv) != f"#{cls.name.value}":
            if facts.kinds.of(recv) or facts.cross.instance_class(recv) is not None:
                continue  # another object's method of that name (`model.eval()`)
            return False  # an object of unknown class: it may be this one
        calls.append(c)
    if not calls:
        return False
    for c in calls:
        host = facts.tree.enclosing_function(c) or facts.module
        if throttled_in_loop(facts, c, host) is not None or not runs_once(facts, host, depth + 1):
            return False
    return True


def param_for(fn: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> str | None:
    """The parameter of `fn` that receives `arg` at `call`."""
    params = [*fn.params.posonly_params, *fn.params.params]
    if arg.keyword is not None:
        names = {p.name.value for p in (*params, *fn.params.kwonly_params)}
        return arg.keyword.value if arg.keyword.value in names else None
    if any(a.star for a in call.args):
        return None
    positional = [a for a in call.args if a.keyword is None]
    i = positional.index(arg)
    return params[i].name.value if i < len(params) else None


def local_function(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> cst.FunctionDef | cst.Lambda | None:
    """The function of this file that `expr` names: a lambda, a function defined once, or
    one of those through names bound once and `functools.partial(f, ...)` (a collate_fn,
    diffusers' `compute_embeddings_fn`); None when it is not known."""
    if expr is None or depth > 4:
        return None
    if isinstance(expr, cst.Call) and call_name(expr) == "partial" and expr.args:
        return local_function(facts, expr.args[0].value, depth + 1)
    if isinstance(expr, cst.Name):
        if expr.value in facts.tree.functions_by_name:
            fns = facts.tree.functions_by_name[expr.value]
            return fns[0] if len(fns) == 1 else None
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return local_function(facts, bs[0].node, depth + 1)
        return None
    return expr if isinstance(expr, cst.Lambda) else None


def uses_of_bound_name(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode) -> list[cst.Name] | None:
    """When `node` is the whole value of `name = node`: the uses of `name` after it in
    `scope`; else None."""
    stmt = facts.tree.parent(node)
    if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name)):
        return None
    target = stmt.targets[0].target
    return list(facts.tree.later_uses(target.value, scope, facts.tree.order.get(target, 0)))


def off_by_default(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` sits in a branch that a run with every option at its default does not take:
    `if args.n_gpu > 1:` with `add_argument('--n_gpu', default=1)` (in this file or a project
    module), `if self.args.use_multi_gpu and self.args.use_gpu:` with a `store_true` flag,
    `nb_gpus = len(args.gpu.split(','))` … `if nb_gpus > 1:` with `default='0'`, `if use_amp:`
    on a parameter every caller passes `use_amp=args.use_amp` (`_passed_value`), `if
    config.TRAIN.ACCUMULATION_STEPS > 1:` on a yacs tree's default (`config_tree_value`); or in the
    `else:` of a test such a run passes."""
    cur = node
    for anc in facts.tree.ancestors(node):
        if isinstance(anc, cst.If):
            if cur is anc.body and _truth(facts, anc.test) is False:
                return True
            if cur is anc.orelse and _truth(facts, anc.test) is True:
                return True
        cur = anc
    return False


_UNKNOWN = object()
_COMPARE = {cst.GreaterThan: lambda a, b: a > b, cst.GreaterThanEqual: lambda a, b: a >= b,
            cst.LessThan: lambda a, b: a < b, cst.LessThanEqual: lambda a, b: a <= b,
            cst.Equal: lambda a, b: a == b, cst.NotEqual: lambda a, b: a != b}


def _truth(facts: Facts, test: cst.BaseExpression, depth: int = 0) -> bool | None:
    """Whether `test` holds with every option at its default (None: not known)."""
    if isinstance(test, cst.BooleanOperation):
        left, right = _truth(facts, test.left, depth + 1), _truth(facts, test.right, depth + 1)
        if isinstance(test.operator, cst.And):
            return False if False in (left, right) else (True if left is True and right is True else None)
        return True if True in (left, right) else (False if left is False and right is False else None)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _truth(facts, test.expression, depth + 1)
        return None if inner is None else not inner
    value = _default_value(facts, test, depth)
    if value is _UNKNOWN or not isinstance(value, (bool, int, float, str, list, type(None))):
        return None
    return bool(value)


def _default_value(facts: Facts, expr: cst.BaseExpression, depth: int = 0):
    """The value of `expr` with every option at its default: a literal, an option
    (`args.n_gpu`, through `facts.cross.option_default`) whose default is not None, that the
    file never assigns and no documented command line passes (`--n_gpu 4`), a name bound
    once to such a value, `<str>.split(sep)`, `len(...)` of those, one comparison of such
    values; else `_UNKNOWN`."""
    if depth > 8:
        return _UNKNOWN
    v = literal_value(expr)
    if v is not NOT_LITERAL:
        return v
    if isinstance(expr, cst.Attribute):
        if len([p for p in (dotted(expr) or "").split(".") if p != "self"]) >= 3:
            return config_tree_value(facts, expr)  # `config.TRAIN.ACCUMULATION_STEPS`
        if _assigned_in_file(facts, expr.attr.value):
            return _UNKNOWN  # `args.n_gpu = torch.cuda.device_count()`: not the default any more
        found, default = facts.cross.option_default(expr, callers=True)
        if not found or default is None:
            return _UNKNOWN  # `use_amp: bool = None`: a field the run's config sets, not a default
        name = expr.attr.value
        if facts.project is not None and facts.project.documented_option(name, anywhere=True):
            return _UNKNOWN  # a documented command line passes `--use_multi_gpu`: some run turns it on
        return default
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr" and bs[0].node is not None:
            return _default_value(facts, bs[0].node, depth + 1)
        if len(bs) == 1 and bs[0].how == "param":
            return _passed_value(facts, expr)
        return _UNKNOWN
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        op = _COMPARE.get(type(expr.comparisons[0].operator))
        left = _default_value(facts, expr.left, depth + 1)
        right = _default_value(facts, expr.comparisons[0].comparator, depth + 1)
        if op is None or _UNKNOWN in (left, right) or isinstance(left, bool) or isinstance(right, bool):
            return _UNKNOWN
        try:
            return op(left, right)
        except TypeError:
            return _UNKNOWN
    if isinstance(expr, cst.Call) and call_name(expr) == "len" and isinstance(expr.func, cst.Name) \
            and len(expr.args) == 1 and not facts.bindings.lookup("len", expr.func):
        got = _default_value(facts, expr.args[0].value, depth + 1)
        return len(got) if isinstance(got, (str, list)) else _UNKNOWN
    if isinstance(expr, cst.Call) and call_name(expr) == "split" and isinstance(expr.func, cst.Attribute) \
            and len(expr.args) == 1 and not expr.args[0].keyword:
        text, sep = _default_value(facts, expr.func.value, depth + 1), literal_value(expr.args[0].value)
        if isinstance(text, str) and isinstance(sep, str) and sep:
            return text.split(sep)
    return _UNKNOWN


def config_tree_value(facts: Facts, expr: cst.BaseExpression):
    """The default of `config.TRAIN.ACCUMULATION_STEPS` set on a yacs config tree of the
    project (`_C.TRAIN.ACCUMULATION_STEPS = 1`), when no YAML file of the project sets
    `ACCUMULATION_STEPS` and no documented run of this script passes
    `--accumulation-steps` (a script no document runs: no document passes it); else
    `_UNKNOWN`. Swin-Transformer's `get_started.md` passes `--accumulation-steps 2` to
    `main.py` only: its other scripts run with the default."""
    parts = [p for p in (dotted(expr) or "").split(".") if p != "self"]
    if len(parts) < 3 or parts[0].lstrip("_").lower() not in ("config", "cfg", "conf", "c") or facts.project is None:
        return _UNKNOWN
    found, value = facts.project.cfgtree_default(".".join(parts[1:]))
    if not found or facts.project.yaml_sets(parts[-1]):
        return _UNKNOWN
    flag = parts[-1].lower()
    runs = facts.project.documented_option(flag)
    if (any(v is not None for v in runs) if runs else facts.project.documented_option(flag, anywhere=True)):
        return _UNKNOWN
    return value


def _passed_value(facts: Facts, name: cst.Name):
    """The value the callers in the project pass by keyword for the parameter `name` of the
    top-level function it belongs to, with every option at its default (`use_amp=args.use_amp`,
    `default=False`, no documented command line passing `--use_amp`); else `_UNKNOWN`."""
    fn = facts.tree.enclosing_function(name)
    if facts.project is None or fn is None or "." in (symbol := _symbol_of(facts, fn) or "."):
        return _UNKNOWN
    got = facts.project.param_value(symbol, name.value)
    if not got or (got[0] == "o" and (got[2] is None or facts.project.documented_option(
            got[1].rsplit(".", 1)[-1], anywhere=True))):
        return _UNKNOWN
    return got[1] if got[0] == "v" else got[2]


def _assigned_in_file(facts: Facts, attr: str) -> bool:
    """Whether the file assigns `<something>.<attr>` (`args.n_gpu = …`, `+=`, `: int =`) or
    sets it with `setattr(…, "<attr>", …)`."""
    targets = [t.target for a in facts.tree.index[cst.Assign] for t in a.targets]
    targets += [a.target for a in (*facts.tree.index[cst.AugAssign], *facts.tree.index[cst.AnnAssign])]
    if any(isinstance(n, cst.Attribute) and n.attr.value == attr for t in targets for n in iter_nodes(t)):
        return True
    return any(call_name(c) == "setattr" and len(c.args) > 1 and literal_value(c.args[1].value) == attr
               for c in facts.tree.calls())
