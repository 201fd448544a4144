"""PF204 loss-accumulated-with-graph: loss accumulated across iterations with its autograd graph."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, iter_nodes
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.host_sync.helpers import inner_chain
from perflint.analysis.vocab import Kind, LOSS_FUNCTIONS


_LOGGING_CONSUMERS = {"print", "float", "int", "str", "round", "format", "len", "repr", "abs", "max", "min"}


class LossAccumulatedWithGraph(Rule):
    """
    ## What it does
    Flags a loss accumulated with its autograd graph inside a loop: `total += loss`,
    `total = total + loss` or `losses.append(loss)`, where `loss` is a criterion output
    (or a name that is `.backward()`ed in the same function: a `loss.backward()` inside a
    step function is not the caller's `loss = train_step(...)`) and is not `.detach()`ed,
    `.item()`ed or `float()`ed.

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
    inside `no_grad`/`inference_mode`, where there is no graph, nor for a loss that a torch
    loss without parameters (a functional loss, a `torch.nn.*Loss` module other than
    `AdaptiveLogSoftmaxWithLoss`) computes from a prediction made under `no_grad` (`with
    torch.no_grad(): pred = model(x)`, then `loss = criterion(pred, y)` after the block:
    End-to-end-ASR-Pytorch's validation), which has no graph either. The sum is followed through
    any assignment (tuple unpacking, containers, arithmetic) to `.backward()`,
    `torch.autograd.grad`, `scaler.scale`, `accelerator.backward`, `manual_backward` or a
    callable scaler given an optimizer: a sum that reaches one of them is never reported,
    so never detached (`tests/test_pf204_gradients.py` compares every gradient before and
    after the fix). Only an accumulator that outlives the step is reported: a loss function
    that sums per-sample or per-head terms in a loop, or a name bound afresh in each
    iteration, holds one step's graph, which the step needs (bound before each optimizer
    step, when the loop is the sub-steps of one update: once-for-all's sub-networks,
    gradient-accumulation chunks; bound before each batch, when the loop inside the loop over
    a loader steps one head after another: iBOT's linear heads; also inside a `while` loop
    that draws the next batch from an iterator each time: AttnGAN's discriminators); nor a
    name bound to its
    detached copy just before the sum (`loss_batch = loss_batch.detach().cpu()`, also its
    `.data`: MCD_DA's torch 0.3 `c_loss = c_loss.data[0]`), nor a name
    taken apart from a loss function's result beside the loss and not named for one (`loss,
    sub_size = output`, then `batch_size += sub_size`: a count), nor a value the function
    takes apart as a container (`output["loss"]`, `loss, size = output`: a dict or tuple
    of outputs, which `.detach()` would not apply to). The FAQ's
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
    fix_class = FixClass.SAFE_OR_UNSAFE
    tokens = (b"+=", b"append", b"+ ")
    per_step = True

    def check(self, facts: Facts) -> Iterator[Violation]:
        for node in facts.tree.index[cst.AugAssign]:
            if isinstance(node.operator, cst.AddAssign):
                yield from self._candidate(facts, node, node.target, node.value, node)
        for node in facts.tree.index[cst.Assign]:
            if len(node.targets) != 1 or not isinstance(node.value, cst.BinaryOperation):
                continue
            target = node.targets[0].target
            op = node.value
            if not isinstance(op.operator, cst.Add):
                continue
            tname = facts.tree.receiver_text(target)
            if tname is None:
                continue
            if facts.tree.receiver_text(op.left) == tname:
                yield from self._candidate(facts, node, target, op.right, node)
            elif facts.tree.receiver_text(op.right) == tname:
                yield from self._candidate(facts, node, target, op.left, node)
        for call in facts.tree.calls():
            if call_name(call) != "append" or len(call.args) != 1 or not isinstance(call.func, cst.Attribute):
                continue
            yield from self._candidate(facts, call, call.func.value, call.args[0].value, call)

    def _candidate(self, facts: Facts, stmt, target, value, report) -> Iterator[Violation]:
        if not self._loss_with_graph(facts, value):
            return
        info = facts.loops.iteration_context(stmt)
        if info is None:
            return  # not once per step: a loop inside one step (per-sample or per-head terms)
        loop = info.node
        if facts.grad.grad_context(stmt) == "off":
            return
        acc = facts.tree.receiver_text(target)
        if acc is None:
            return
        if _reset_each_step(facts, target, stmt, loop) or _reset_each_step(facts, target, stmt,
                                                                           _optimizer_step_loop(facts, loop)):
            return  # bound afresh in each step: the graph lives one step, as the step needs
        batch_loop = _batch_loop_around(facts, loop)
        if batch_loop is not None and _reset_each_step(facts, target, stmt, batch_loop):
            return  # `losses = []` per batch, one loss per head the batch trains: it lives one batch
        if reaches_backward(facts, stmt, acc):
            return  # the sum is what is backpropagated: detaching it would drop its gradients
        why = facts.hotpath.hot_path(stmt)
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
        if self._backward_each_step(facts, loop, value):
            # `backward()` frees each step's saved tensors: what the sum keeps is the chain of
            # graph nodes, which grows by one step's nodes per step until the sum is dropped.
            cost = "which keeps every step's graph nodes alive (`backward()` frees their saved tensors)"
        else:
            cost = "which keeps every step's graph alive"
        yield Violation(
            report,
            f"`{acc}` accumulates the loss with its autograd graph, {cost}; "
            "accumulate `loss.detach()` (or `loss.item()` when logging)",
            fix,
            why=why,
        )

    @staticmethod
    def _loop(facts: Facts, node: cst.CSTNode) -> cst.CSTNode | None:
        for a in facts.tree.ancestors(node):
            if isinstance(a, (cst.For, cst.While)):
                return a
            if isinstance(a, cst.FunctionDef):
                return a if facts.loops.step_function_kind(a) is not None else None
            if isinstance(a, (cst.Lambda, cst.ClassDef)):
                return None
        return None

    @staticmethod
    def _backward_each_step(facts: Facts, loop: cst.CSTNode, value: cst.BaseExpression) -> bool:
        name = facts.tree.receiver_text(value)
        for call in facts.tree.calls_within(loop):
            if facts.steps.is_backward_call(call) and isinstance(call.func, cst.Attribute):
                if name is None or facts.tree.receiver_text(call.func.value) == name:
                    return True
        return False

    def _loss_with_graph(self, facts: Facts, value: cst.BaseExpression) -> bool:
        ks = facts.kinds.of(value)
        if Kind.DETACHED in ks or Kind.NUMBER in ks:
            return False
        if facts.grad.computed_without_grad(value) or _loss_of_values_without_grad(facts, value):
            return False
        for c in inner_chain(value):
            if call_name(c) in _DETACHING:
                return False
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("float", "int"):
            return False
        if isinstance(value, cst.Name) and _detached_just_before(facts, value):
            return False
        if isinstance(value, cst.Name) and _taken_apart(facts, value):
            return False  # a dict or tuple of outputs: `.detach()` would not apply to it
        if Kind.LOSS in ks and not _unpacked_beside_the_loss(facts, value):
            return True
        # A name that is `.backward()`ed somewhere in the same function (not in a function
        # nested in it, nor, at module level, in a function: that is another variable).
        if isinstance(value, cst.Name):
            fn = facts.tree.enclosing_function(value)
            scope = fn if fn is not None else facts.module
            for call in facts.tree.calls_within(scope):
                if facts.tree.enclosing_function(call) is not fn:
                    continue
                if facts.steps.is_backward_call(call) and isinstance(call.func, cst.Attribute):
                    if facts.tree.receiver_text(call.func.value) == value.value:
                        return True
        return False


_DETACHING = ("detach", "item", "cpu", "tolist", "numpy", "detach_")
# torch's loss modules with parameters of their own: their loss has a graph whatever its inputs.
_LOSSES_WITH_PARAMETERS = frozenset({"torch.nn.AdaptiveLogSoftmaxWithLoss"})
_GRAPH_KINDS = frozenset({Kind.OUTPUT, Kind.LOSS, Kind.PARAMETER, Kind.MODEL})


def _loss_of_values_without_grad(facts: Facts, value: cst.BaseExpression, depth: int = 0) -> bool:
    """`value` is (a name bound only to) a torch loss without parameters — a functional loss,
    or a `torch.nn.*Loss` module — applied to a prediction computed with autograd off and to
    nothing else that may carry a graph: `with torch.no_grad(): pred = model(x)`, then
    `loss = criterion(pred, y)` (End-to-end-ASR-Pytorch's validation). The loss holds no
    graph."""
    if isinstance(value, cst.Name) and depth < 3:
        bs = facts.bindings.lookup(value.value, value)
        return bool(bs) and all(b.how == "expr" and b.node is not None
                                and _loss_of_values_without_grad(facts, b.node, depth + 1) for b in bs)
    if not isinstance(value, cst.Call) or not _parameter_free_loss(facts, value.func):
        return False
    args = [a for a in value.args if a.star == ""]
    if len(args) != len(value.args) or not args or args[0].keyword is not None \
            or not facts.grad.computed_without_grad(args[0].value):
        return False
    return all(facts.grad.computed_without_grad(a.value) or not facts.kinds.of(a.value) & _GRAPH_KINDS
               for a in args[1:])


def _parameter_free_loss(facts: Facts, func: cst.BaseExpression) -> bool:
    q = facts.tree.qualname(func)
    if q is not None:
        return q.startswith("torch.nn.functional.") and q.rsplit(".", 1)[-1] in LOSS_FUNCTIONS
    if isinstance(func, cst.Attribute):
        bs = facts.bindings.self_attr_bindings(func)
    elif isinstance(func, cst.Name):
        bs = facts.bindings.lookup(func.value, func)
    else:
        return False
    if not bs:
        return False
    for b in bs:
        if b.how != "expr" or not isinstance(b.node, cst.Call):
            return False
        cls = facts.tree.qualname(b.node.func) or ""
        if not (cls.startswith("torch.nn.") and cls.endswith("Loss") and cls.count(".") == 2) \
                or cls in _LOSSES_WITH_PARAMETERS:
            return False
    return True


def _taken_apart(facts: Facts, name: cst.Name) -> bool:
    """The function takes the value `name` holds apart, as a container: `output["loss"]`,
    `loss, size = output` (DeBERTa's trainer appends its loss function's whole result)."""
    fn = facts.tree.enclosing_function(name) or facts.module
    for use in facts.tree.names_in(fn, name.value):
        parent = facts.tree.parent(use)
        if isinstance(parent, cst.Subscript) and parent.value is use and any(
                isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.SimpleString) for e in parent.slice):
            return True
        if isinstance(parent, cst.Assign) and parent.value is use and any(
                isinstance(t.target, (cst.Tuple, cst.List)) for t in parent.targets):
            return True
    return False


def _unpacked_beside_the_loss(facts: Facts, value: cst.BaseExpression) -> bool:
    """A name taken apart from a loss function's result with other names, and not named
    for a loss (`loss, sub_size = output`: DeBERTa's trainer sums `sub_size`, a count)."""
    if not isinstance(value, cst.Name) or "loss" in value.value.lower():
        return False
    bs = facts.bindings.lookup(value.value, value)
    return bool(bs) and all(b.how in ("unpack", "iter_unpack") for b in bs)


def _data_of(expr: cst.BaseExpression) -> bool:
    """`loss.data` or `loss.data[0]` (torch 0.3's scalar read): the tensor's data, which
    autograd does not track."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return isinstance(expr, cst.Attribute) and expr.attr.value == "data"


def _detached_just_before(facts: Facts, name: cst.Name) -> bool:
    """The last assignment of `name` before its use, in the same block, binds a detached
    value: `loss_batch = loss_batch.detach().cpu()` then `loss += loss_batch`
    (facenet-pytorch's `pass_epoch`)."""
    where = facts.tree.block_of(name)
    if where is None:
        return False
    block, i = where
    for st in reversed(list(block.body)[:i]):
        if not isinstance(st, cst.SimpleStatementLine):
            if any(isinstance(n, cst.Name) and n.value == name.value for n in iter_nodes(st)):
                return False  # bound or used in a compound statement: not followed
            continue
        for small in reversed(st.body):
            if isinstance(small, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name.value for t in small.targets):
                return _data_of(small.value) or any(call_name(c) in _DETACHING for c in inner_chain(small.value))
            if isinstance(small, (cst.AugAssign, cst.AnnAssign)) and isinstance(small.target, cst.Name) \
                    and small.target.value == name.value:
                return False
    return False


def _batch_loop_around(facts: Facts, loop: cst.CSTNode) -> cst.CSTNode | None:
    """The loop over a loader's batches around `loop`, when `loop` itself iterates no loader
    (`for classifier, optimizer in zip(classifiers, optimizers):` inside `for x, y in
    loader:`, iBOT's linear heads): what is bound afresh per batch lives one batch."""
    if not isinstance(loop, cst.For) or facts.loops.iterates_loader(loop):
        return None
    outer = next((a for a in facts.tree.ancestors(loop) if isinstance(a, (cst.For, cst.While, cst.FunctionDef))), None)
    if isinstance(outer, cst.For) and facts.loops.iterates_loader(outer):
        return outer
    if isinstance(outer, (cst.For, cst.While)) and facts.loops.loop_kind(outer) == "train" and _next_batch_each_time(facts, outer):
        return outer  # `while step < num_batches: data = data_iter.next()`, then a loop over discriminators (AttnGAN)
    return None


def _next_batch_each_time(facts: Facts, loop: cst.CSTNode) -> bool:
    """The loop's body draws the next batch from an iterator on every iteration (`data =
    data_iter.next()`, `batch = next(it)`), outside any nested loop or branch."""
    for call in facts.loops.direct_body_calls(loop):
        name = call_name(call)
        builtin = isinstance(call.func, cst.Name) and name == "next" and len(call.args) == 1
        method = isinstance(call.func, cst.Attribute) and name in ("next", "__next__") and not call.args
        if (builtin or method) and facts.loops.iteration_context_plain(call, loop) is not False \
                and not any(isinstance(a, cst.If) for a in facts.tree.ancestors(call) if facts.tree.is_inside(a, loop)):
            return True
    return False


def _optimizer_step_loop(facts: Facts, loop: cst.CSTNode) -> cst.CSTNode:
    """The loop one iteration of which is an optimizer step: `loop` itself, or, when `loop`
    steps no optimizer and the loop around it does after it, that outer loop (`loop` then
    runs the sub-steps of one update: gradient-accumulation chunks, DeBERTa's; the sub-networks
    of a supernet, once-for-all's)."""
    if not isinstance(loop, (cst.For, cst.While)):
        return loop
    if any(facts.steps.is_optimizer_step(c) or facts.steps.is_scaler_call_step(c) for c in facts.tree.calls_within(loop)):
        return loop
    outer = next((a for a in facts.tree.ancestors(loop) if isinstance(a, (cst.For, cst.While, cst.FunctionDef))), None)
    if not isinstance(outer, (cst.For, cst.While)):
        return loop
    end = facts.tree.order.get(loop, 0)
    if any((facts.steps.is_optimizer_step(c) or facts.steps.is_scaler_call_step(c)) and facts.tree.order.get(c, 0) > end
           and not facts.tree.is_inside(c, loop) for c in facts.tree.calls_within(outer)):
        return outer
    return loop


def _reset_each_step(facts: Facts, target: cst.CSTNode, stmt: cst.CSTNode, region: cst.CSTNode) -> bool:
    """The accumulator is a plain name bound afresh on every step before `stmt`: a local of
    a per-step function, or a name assigned in the loop body (`terms = []` then
    `terms.append(...)`). It holds one step's graph, which that step needs anyway."""
    if not isinstance(target, cst.Name):
        return False
    for b in facts.bindings.lookup(target.value, stmt):
        site = b.site
        if site is None or site is stmt or facts.tree.is_inside(stmt, site):
            continue
        if b.how == "param":
            continue
        if isinstance(region, cst.FunctionDef):
            if facts.tree.scope_of(target) is region and facts.tree.is_inside(site, region):
                return True
        elif facts.tree.is_inside(site, region.body) and facts.tree.order.get(site, 0) < facts.tree.order.get(stmt, 0):
            return True
    return False


def reaches_backward(facts: Facts, stmt: cst.CSTNode, acc: str) -> bool:
    """Whether the accumulator `acc`, or any name computed from it in the same function
    (through assignments, tuple unpacking, containers, arithmetic), is backpropagated:
    `.backward()` on it, `torch.autograd.grad`/`backward` of it, `scaler.scale(it)`,
    `accelerator.backward(it)`, `manual_backward(it)`, or a callable scaler given it with an
    optimizer (`loss_scaler(loss, optimizer)`). Such a sum must never be detached; PF204
    does not report it (and so never offers the fix)."""
    fn = facts.tree.enclosing_function(stmt)
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
                    text = facts.tree.receiver_text(name) if isinstance(name, (cst.Name, cst.Attribute)) else None
                    if text and text not in tainted and not (isinstance(name, cst.Name) and isinstance(facts.tree.parent(name), cst.Attribute)):
                        tainted.add(text)
                        grew = True
        if not grew:
            break
    for call in facts.tree.calls_within(scope):
        name = call_name(call)
        q = facts.tree.qualname(call.func) or ""
        pieces: list[cst.CSTNode] = [a.value for a in call.args]
        if name in ("backward", "manual_backward") and isinstance(call.func, cst.Attribute):
            pieces.append(call.func.value)
        elif q in ("torch.autograd.grad", "torch.autograd.backward"):
            pass
        elif name == "scale" and isinstance(call.func, cst.Attribute) and facts.kinds.has_kind(call.func.value, Kind.SCALER):
            pass
        elif facts.steps.is_scaler_call_step(call):
            pass
        else:
            continue
        if any(_mentions(facts, p, tainted) for p in pieces):
            return True
    return False


def _mentions(facts: Facts, expr: cst.CSTNode, names: set[str]) -> bool:
    for n in iter_nodes(expr):
        if isinstance(n, (cst.Name, cst.Attribute)) and facts.tree.receiver_text(n) in names:
            return True
    return False


_READ_METHODS = {"item", "detach", "cpu", "tolist", "numpy"}
_LOG_METHODS = {"info", "debug", "warning", "log", "add_scalar", "add_scalars", "set_postfix", "set_description",
                "write", "log_metrics", "log_dict"}


def _accumulator_uses(facts: Facts, stmt: cst.CSTNode, acc: str, depth: int = 0) -> str:
    """How an accumulator is used in its function: "backprop" (reaches autograd),
    "returned", "other" (flows somewhere the linter cannot follow) or "reads" (only read)."""
    fn = facts.tree.enclosing_function(stmt)
    scope = fn if fn is not None else facts.module
    worst = "reads"
    rank = {"reads": 0, "other": 1, "returned": 2, "backprop": 3}
    for node in iter_nodes(scope):
        if not isinstance(node, (cst.Name, cst.Attribute)) or facts.tree.receiver_text(node) != acc:
            continue
        parent = facts.tree.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            if facts.tree.receiver_text(parent) is not None and not isinstance(facts.tree.parent(parent), cst.Call):
                continue  # part of a longer dotted name, e.g. `acc.shape`
        use = _classify(facts, node, stmt, depth)
        if rank[use] > rank[worst]:
            worst = use
    return worst


def _classify(facts: Facts, node: cst.CSTNode, stmt: cst.CSTNode, depth: int) -> str:
    parent = facts.tree.parent(node)
    if isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is node):
        return "reads"  # a (re)binding or the accumulation itself
    cur: cst.CSTNode = node
    derived = False  # passed through a call the linter cannot see into
    for a in facts.tree.ancestors(node):
        if isinstance(a, cst.Attribute) and a.value is cur:
            continue  # `acc.item` — judged at the call
        if isinstance(a, cst.Call):
            name = call_name(a)
            q = facts.tree.qualname(a.func) or ""
            if name in ("backward", "manual_backward") or q in ("torch.autograd.grad", "torch.autograd.backward"):
                return "backprop"
            if name == "scale" and isinstance(a.func, cst.Attribute) and facts.kinds.has_kind(a.func.value, Kind.SCALER):
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
