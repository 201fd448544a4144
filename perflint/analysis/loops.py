"""Loops and iteration contexts: training and evaluation loops, per-step functions, which
statements run on every iteration (grad mode: `analysis.gradmode`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import call_name
from perflint.analysis.tree import _iter_expr, iter_nodes
from perflint.analysis.vocab import Kind, _STEP_NAME
from perflint.names import dotted


@dataclass
class LoopInfo:
    node: cst.CSTNode  # For / While, or a FunctionDef for a per-step function
    kind: str  # "train" | "eval"



def updates_parameters(facts) -> bool:
    """Whether anything in the file can update parameters from their gradients: a
    `.step(...)` call (an optimizer, a scaler, a DeepSpeed engine), a name that speaks of an
    optimizer, or a manual update from `.grad` (`p.data -= lr * p.grad`, `p.add_(p.grad,
    ...)`).  A file with `.backward()` and none of these computes gradients for analysis."""
    got = facts.__dict__.get("_updates_parameters")
    if got is None:
        got = facts.__dict__["_updates_parameters"] = _updates_parameters(facts)
    return got


def _updates_parameters(facts) -> bool:
    if facts.filewide.words.name_contains("optim"):
        return True
    for c in facts.tree.calls():
        name = call_name(c)
        if name == "step":
            return True
        if name in ("add_", "sub_", "copy_", "addcmul_", "addcdiv_") and any(
                isinstance(n, cst.Attribute) and n.attr.value == "grad" for a in c.args for n in iter_nodes(a.value)):
            return True
    for aug in facts.tree.index[cst.AugAssign]:
        # `p.data -= lr * p.grad`, `w -= lr * w.grad` (not `importance += mask.grad.abs()`)
        descends = isinstance(aug.operator, cst.SubtractAssign) or (
            isinstance(aug.target, cst.Attribute) and aug.target.attr.value == "data")
        if descends and any(isinstance(n, cst.Attribute) and n.attr.value == "grad" for n in iter_nodes(aug.value)):
            return True
    return False


class Loops(Component):
    needs = ("tree", "kinds", "steps", "throttles", "cross")

    @cached_property
    def _calls_by_container(self) -> dict[cst.CSTNode, list[cst.Call]]:
        """Each call under its innermost loop/def/lambda/class/comprehension, when it sits in
        that container's body (not in a loop's `iter`, `else`, or a def's decorators)."""
        out: dict[cst.CSTNode, list[cst.Call]] = {}
        containers = (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.CompFor)
        for call in self.tree.index[cst.Call]:
            cur: cst.CSTNode = call
            for a in self.tree.ancestors(call):
                if isinstance(a, containers):
                    if getattr(a, "body", None) is cur:
                        out.setdefault(a, []).append(call)
                    break
                cur = a
        return out

    def direct_body_calls(self, container: cst.CSTNode) -> list[cst.Call]:
        """Calls inside `container`'s body, not inside a nested loop, def, lambda or class."""
        return self._calls_by_container.get(container, [])

    @cached_property
    def _step_functions(self) -> dict[cst.FunctionDef, str]:
        """Functions whose body is one training (or eval) step: Lightning hooks, functions
        named like a step (`train_step`, `_run_batch`, `training_step`), and functions this
        file calls on every iteration of a training/eval loop. A function that merely
        calls `.backward()` once (a test, a one-off) is not a step."""
        out: dict[cst.FunctionDef, str] = {}
        for fn in self.tree.index[cst.FunctionDef]:
            name = fn.name.value
            if name.startswith("test"):
                continue
            if name == "training_step":
                out[fn] = "train"
            elif name in ("validation_step", "test_step", "predict_step"):
                out[fn] = "eval"
            elif _STEP_NAME.match(name) and not self.direct_loops_in(fn):
                calls = self.direct_body_calls(fn)
                if any(self.steps.is_backward_call(c) or self.steps.is_optimizer_step(c) for c in calls):
                    out[fn] = "train"
        # Functions called every iteration of a training loop in this file are steps too.
        for loop, kind in list(self._loops.items()):
            for call in self.direct_body_calls(loop):
                if self.iteration_context_plain(call, loop) is False:
                    continue
                target = None
                if isinstance(call.func, cst.Name):
                    target = call.func.value
                elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value == "self":
                    target = call.func.attr.value
                elif isinstance(call.func, cst.Attribute):
                    # `self.policy.evaluate(...)`, `agent.act(obs)`: a method of a class of this file
                    cls_ref = self.cross.instance_class(call.func.value)
                    cls = self.tree.classes_by_name.get(cls_ref[1:]) if cls_ref and cls_ref.startswith("#") else None
                    if cls is not None:
                        for fn in self.tree.functions_by_name.get(call.func.attr.value, []):
                            if self.tree.parent(self.tree.parent(fn)) is cls and fn not in out and not self.direct_loops_in(fn):
                                out[fn] = kind
                    continue
                for fn in self.tree.functions_by_name.get(target or "", []):
                    if fn in out or fn.name.value.startswith("test"):
                        continue
                    if not self.direct_loops_in(fn) or (self._runs_backward(fn) and not self._loops_over_steps(fn)):
                        out[fn] = kind  # (a step that loops over parameter groups is still a step)
        # Functions that a loop in another file of the project calls on every iteration.
        if self.project is not None:
            for fn in self.tree.index[cst.FunctionDef]:
                if fn in out or fn.name.value.startswith("test"):
                    continue  # (a loop inside a per-step helper still runs on every step)
                caller = self.cross.project_step_caller(fn)
                if caller is not None:
                    out[fn] = caller[2]
                    self.facts.step_callers[fn] = caller
        return out

    def iteration_context_plain(self, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """Whether `node` runs on every iteration of `loop` (not in a throttled branch)."""
        return self.runs_each_time(node, loop, nested_functions=True)

    def _scaler_steps_when(self, guard: cst.If) -> bool:
        """A callable scaler's call before `guard`, in its block, steps the optimizer exactly
        when `guard`'s test holds (MAE's and ConvNeXt's `loss_scaler(loss, optimizer,
        update_grad=(i + 1) % k == 0)`, then `if (i + 1) % k == 0: optimizer.zero_grad()`):
        the guarded code runs with each optimizer step."""
        if not self._update_grad_calls:
            return False  # (asked for every `if` around every node: most files have no such call)
        where = self.tree.block_of(guard)
        if where is None:
            return False
        test = _squeezed(guard.test)
        for stmt in list(where[0].body)[:where[1]]:
            for c in iter_nodes(stmt):
                if isinstance(c, cst.Call) and c in self._update_grad_calls and any(
                        a.keyword is not None and a.keyword.value == "update_grad"
                        and _squeezed(a.value) == test for a in c.args):
                    return True
        return False

    @cached_property
    def _update_grad_calls(self) -> frozenset[cst.Call]:
        """The file's callable-scaler steps that pass `update_grad=`."""
        return frozenset(c for c in self.tree.index[cst.Call]
                         if any(a.keyword is not None and a.keyword.value == "update_grad" for a in c.args)
                         and self.steps.is_scaler_call_step(c))

    def runs_each_time(self, node: cst.CSTNode, container: cst.CSTNode, nested_functions: bool) -> bool:
        """Whether `node` runs each time `container` (a loop body, a function) runs: not in a
        throttled branch, a branch that leaves, or an exception handler; with
        `nested_functions=False`, not in a nested function or lambda either."""
        cur = node
        for parent in self.tree.ancestors(node):
            if parent is container:
                return self.throttles.behind_throttle_guard(node, container) is None
            if isinstance(parent, cst.If) and cur is parent.body:
                if self.throttles.is_throttled_test(parent.test) or _leaves(parent.body):
                    return False
            if isinstance(parent, cst.ExceptHandler):
                return False
            if not nested_functions and isinstance(parent, (cst.Lambda, cst.FunctionDef)):
                return False
            cur = parent
        return False

    def _runs_backward(self, fn: cst.FunctionDef) -> bool:
        return any(self.steps.is_backward_call(c) for c in self.direct_body_calls(fn))

    def _loops_over_steps(self, fn: cst.FunctionDef) -> bool:
        """`fn` has a loop of its own that steps an optimizer (an epoch function, not a step);
        a small loop over parameter groups or heads in a step does not make it one."""
        for loop in self._loops_of_function.get(fn, ()):
            if any(self.steps.is_backward_call(c) or self.steps.is_optimizer_step(c) or self.steps.is_scaler_call_step(c)
                   for c in self.tree.calls_within(loop)):
                return True
        return False

    @cached_property
    def _loops_of_function(self) -> dict[cst.CSTNode | None, list[cst.CSTNode]]:
        """Each function's own loops (`for`, then `while`, each in source order), found in one
        pass: asking every function would visit every loop once per function."""
        out: dict[cst.CSTNode | None, list[cst.CSTNode]] = {}
        for cls in (cst.For, cst.While):
            for loop in self.tree.index[cls]:
                out.setdefault(self.tree.enclosing_function(loop), []).append(loop)
        return out

    def direct_loops_in(self, fn: cst.FunctionDef) -> bool:
        return bool(self._loops_of_function.get(fn))

    def step_function_kind(self, fn: cst.FunctionDef) -> str | None:
        return self._step_functions.get(fn)

    @cached_property
    def _loops(self) -> dict[cst.CSTNode, str]:
        out: dict[cst.CSTNode, str] = {}
        local_step_fns = {}
        for fn in self.tree.index[cst.FunctionDef]:
            calls = self.direct_body_calls(fn)
            if any(self.steps.is_backward_call(c) for c in calls):
                local_step_fns[fn.name.value] = True
        for loop in (*self.tree.index[cst.For], *self.tree.index[cst.While]):
            calls = self.direct_body_calls(loop)
            train = any(self.steps.is_backward_call(c) or self.steps.is_optimizer_step(c) or self.steps.is_scaler_call_step(c)
                        for c in calls)
            if not train:
                for c in calls:
                    n = c.func.value if isinstance(c.func, cst.Name) else (
                        c.func.attr.value if isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name) and c.func.value.value == "self" else None)
                    if n in local_step_fns:
                        train = True
                        break
            if train and not updates_parameters(self.facts) and not any(
                    self.steps.is_optimizer_step(c) or self.steps.is_scaler_call_step(c) for c in calls):
                train = False  # gradients for analysis (saliency, pruning scores, a perturbation), not training
            if train:
                out[loop] = "train"
                continue
            if isinstance(loop, cst.For) and self.iterates_loader(loop):
                if self._calls_a_model(calls) or self.iterates_loader(loop, weak=False):
                    out[loop] = "eval"
            elif isinstance(loop, cst.For) and self._runs_an_evaluated_model(loop, calls):
                out[loop] = "eval"  # `model.eval()` then `for path in files: model(load(path))`
        return out

    def _runs_an_evaluated_model(self, loop: cst.For, calls: list[cst.Call]) -> bool:
        """The loop body calls a model that was put in `.eval()` mode earlier in the same
        function (or module), before the loop."""
        if isinstance(loop.iter, cst.Call) and call_name(loop.iter) == "range" and not any(
                call_name(c) == "next" or "batch" in (call_name(c) or "").lower() for c in calls):
            return False  # `for k in range(n)` counts steps only when it draws batches (`get_batch()`, `next(it)`)
        models = {self.tree.receiver_text(c.func) for c in calls if Kind.MODEL in self.kinds.of(c.func)}
        models.discard(None)
        if not models:
            return False
        scope = self.tree.enclosing_function(loop) or self.facts.module
        start = self.tree.order.get(loop, 0)
        for c in self.tree.calls_within(scope):
            if call_name(c) == "eval" and not c.args and isinstance(c.func, cst.Attribute) \
                    and self.tree.order.get(c, 0) < start and self.tree.receiver_text(c.func.value) in models \
                    and self.tree.enclosing_function(c) is self.tree.enclosing_function(loop):
                return True
        return False

    def iterates_loader(self, loop: cst.For, weak: bool = True) -> bool:
        it = loop.iter
        # `for i, batch in enumerate(loader)`: the loop still walks the loader.
        while isinstance(it, cst.Call) and (self.tree.qualname(it.func) or call_name(it)) == "enumerate" and it.args:
            it = it.args[0].value
        ks = self.kinds._element_kinds(it, ())
        if Kind.BATCH in ks and Kind.NAMED_BATCH not in ks:
            return True
        return weak and Kind.NAMED_BATCH in ks

    def _calls_a_model(self, calls: Iterable[cst.Call]) -> bool:
        for c in calls:
            ks = self.kinds.of(c.func)
            if Kind.MODEL in ks or Kind.NAMED_MODEL in ks:
                return True
            if isinstance(c.func, cst.Name) and c.func.value == "self":
                return True
        return False

    def loop_kind(self, loop: cst.CSTNode) -> str | None:
        return self._loops.get(loop)

    def training_loops(self) -> list[cst.CSTNode]:
        return list(self._loops_by_kind.get("train", ()))

    def eval_loops(self) -> list[cst.CSTNode]:
        return list(self._loops_by_kind.get("eval", ()))

    @cached_property
    def _loops_by_kind(self) -> dict[str, tuple[cst.CSTNode, ...]]:
        out: dict[str, list[cst.CSTNode]] = {}
        for loop, kind in self._loops.items():
            out.setdefault(kind, []).append(loop)
        return {k: tuple(v) for k, v in out.items()}

    # -- per-iteration code ------------------------------------------------------------------
    def iteration_context(self, node: cst.CSTNode) -> LoopInfo | None:
        """The training/eval loop (or per-step function) `node` runs in on every iteration.

        None when the node is outside any such loop, or only runs in a throttled branch
        (`if step % N == 0`, `if i == 0`, `if is_last`), in an exception handler, in a
        branch that leaves the loop (ends in break/return/raise), or in a nested function.
        """
        cur = node
        type_guarded = False
        for parent in self.tree.ancestors(node):
            if isinstance(parent, cst.If):
                if cur is parent.body:
                    if self.throttles.is_throttled_test(parent.test) and self.throttles._steps_after(list(parent.body.body)) \
                            and self.throttles._is_step_call_or_after(node, parent):
                        pass  # `if (i + 1) % accum == 0: optimizer.step(); optimizer.zero_grad()`: the optimizer step
                    elif self._scaler_steps_when(parent):
                        pass  # `loss_scaler(..., update_grad=(i + 1) % k == 0)`, then `if (i + 1) % k == 0:`
                    elif self.throttles.is_throttled_test(parent.test) or _leaves(parent.body) or _capped_branch(parent):
                        return None
                    type_guarded = type_guarded or _is_type_test(parent.test)
                elif cur is parent.test and after_latch(node, parent):
                    return None
            elif isinstance(parent, cst.ExceptHandler):
                return None
            elif isinstance(parent, (cst.For, cst.While)):
                if cur is parent.body:
                    kind = self._loops.get(parent)
                    if kind is not None:
                        if self.throttles.behind_throttle_guard(node, parent) is not None:
                            return None
                        return LoopInfo(parent, kind)
                elif cur is getattr(parent, "orelse", None):
                    return None
            elif isinstance(parent, cst.FunctionDef):
                kind = self._step_functions.get(parent)
                if kind is not None and cur is parent.body:
                    if type_guarded and parent in self.facts.step_callers:
                        # `if isinstance(v, torch.Tensor): v = v.item()` in a helper another
                        # file calls: whether it runs depends on what the callers pass.
                        return None
                    if self.throttles.behind_throttle_guard(node, parent) is not None:
                        return None  # `if step % every: return` earlier in the helper
                    return LoopInfo(parent, kind)
                return None
            elif isinstance(parent, (cst.Lambda, cst.ClassDef)):
                return None
            cur = parent
        return None

    # -- per-call execution ---------------------------------------------------------------
    def runs_on_every_call(self, node: cst.CSTNode, host: cst.FunctionDef) -> bool:
        """Whether `node` runs each time `host` runs (not in a throttled or leaving branch,
        an exception handler or a nested function)."""
        return self.runs_each_time(node, host, nested_functions=False)


_EXITS = {"sys.exit", "exit", "quit", "os._exit", "os.abort"}


def _ends_the_run(stmt: cst.BaseSmallStatement) -> bool:
    """`break`, `return`, `raise`, or `sys.exit(...)`/`exit()`: nothing after it iterates."""
    if isinstance(stmt, (cst.Break, cst.Return, cst.Raise)):
        return True
    if isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call):
        return (dotted(stmt.value.func) or "") in _EXITS
    return False


def _leaves(block: cst.BaseSuite) -> bool:
    body = getattr(block, "body", ())
    if not body:
        return False
    last = body[-1]
    if isinstance(last, cst.SimpleStatementLine) and last.body:
        return _ends_the_run(last.body[-1])
    if isinstance(block, cst.SimpleStatementSuite):
        return _ends_the_run(body[-1])
    return False


def _is_type_test(test: cst.BaseExpression) -> bool:
    """`isinstance(x, ...)` / `not isinstance(...)` / `type(x) is ...`, alone or in a boolean."""
    for n in _iter_expr(test):
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in ("isinstance", "type", "hasattr"):
            return True
    return False


def _capped_branch(branch: cst.If) -> bool:
    """`if shown < 3: ...; shown += 1`: a branch whose test caps a counter the branch itself
    increments runs a bounded number of times, not on every iteration."""
    bumped = set()
    for n in _iter_expr(branch.body):
        if isinstance(n, cst.AugAssign) and isinstance(n.operator, cst.AddAssign):
            target = dotted(n.target)
            if target is not None:
                bumped.add(target)
    if not bumped:
        return False
    for n in _iter_expr(branch.test):
        if isinstance(n, cst.Comparison) and len(n.comparisons) == 1:
            comp = n.comparisons[0]
            if isinstance(comp.operator, (cst.LessThan, cst.LessThanEqual)) and dotted(n.left) in bumped:
                return True
    return False


def after_latch(node: cst.CSTNode, branch: cst.If) -> bool:
    """`if seen or torch.all(q == 0): seen = True`: once the branch has run, the flag
    short-circuits the test, so what follows the `or` stops running."""
    latched = set()
    for n in _iter_expr(branch.body):
        if isinstance(n, cst.Assign) and isinstance(n.value, cst.Name) and n.value.value == "True":
            latched |= {dotted(t.target) for t in n.targets}
    if not latched:
        return False
    for n in _iter_expr(branch.test):
        if isinstance(n, cst.BooleanOperation) and isinstance(n.operator, cst.Or) and dotted(n.left) in latched:
            if n is node or any(x is node for x in _iter_expr(n.right)):
                return True
    return False


def _squeezed(node: cst.CSTNode) -> str:
    """`node`'s source without whitespace (`(i + 1) % k == 0` as `(i+1)%k==0`)."""
    return "".join(cst.Module([]).code_for_node(node).split())
