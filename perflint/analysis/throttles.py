"""Throttles: tests that keep code from running on every iteration of a loop (`if step %
args.log_every == 0:`, `if args.debug:`, a flag set on some steps only), and the guard a
node sits behind."""

from __future__ import annotations

import re
from functools import cached_property

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import argparse_dest, call_name, get_arg, literal_value, strip_not
from perflint.analysis.tree import _iter_expr
from perflint.analysis.vocab import _BOUND_NAMES, _OPTION_ROOTS, _THROTTLE_NAMES
from perflint.names import dotted


class Throttles(Component):
    needs = ("tree", "bindings", "steps")

    @cached_property
    def _add_argument_calls(self) -> list[cst.Call]:
        """The file's `parser.add_argument(...)` calls."""
        return [c for c in self.tree.calls() if isinstance(c.func, cst.Attribute) and c.func.attr.value == "add_argument"]

    @cached_property
    def always_true_options(self) -> frozenset[str]:
        """Options of this file's argparse that are true on every run: `type=bool` with a true
        default (argparse's `bool("False")` is True, so no command line makes it false), or
        `action="store_true"` with a true default."""
        out = set()
        for call in self._add_argument_calls:
            default = get_arg(call, "default")
            kind = get_arg(call, "type")
            action = get_arg(call, "action")
            if default is None or literal_value(default.value) is not True:
                continue
            if not ((kind is not None and isinstance(kind.value, cst.Name) and kind.value.value == "bool"
                     and not self.bindings.lookup("bool", call) and action is None)
                    or (action is not None and literal_value(action.value) == "store_true")):
                continue
            dest = argparse_dest(call)
            if dest is not None:
                out.add(dest)
        return frozenset(out)

    @cached_property
    def opt_out_flags(self) -> frozenset[str]:
        """What this file's argparse lets a user switch off: `--no-prefetcher` / `--disable-amp`
        (`action="store_true"`, no true default) gives "prefetcher" / "amp"."""
        out = set()
        for call in self._add_argument_calls:
            action = get_arg(call, "action")
            default = get_arg(call, "default")
            if action is None or literal_value(action.value) != "store_true" \
                    or (default is not None and literal_value(default.value) is not False):
                continue
            flag = argparse_dest(call) or ""
            for prefix in ("no_", "disable_"):
                if flag.startswith(prefix) and len(flag) > len(prefix):
                    out.add(flag[len(prefix):])
        return frozenset(out)

    def never_runs(self, node: cst.CSTNode) -> bool:
        """`node` sits in a branch no run takes: the `else:` of `if args.flag:` (or the body of
        `if not args.flag:`) for an option of `always_true_options`; or in the slow path a user
        opts into: the body of `if not args.prefetcher:` or `if args.no_prefetcher:` where
        `--no-prefetcher` switches it off (`opt_out_flags`)."""
        if not self.always_true_options and not self.opt_out_flags:
            return False
        cur = node
        for anc in self.tree.ancestors(node):
            if isinstance(anc, cst.If):
                test, negated = strip_not(anc.test)
                name = (dotted(test) or "").rsplit(".", 1)[-1] if self.is_option_test(test) else None
                if name is not None and (cur is anc.body or cur is anc.orelse):
                    if name in self.always_true_options and (cur is anc.orelse) != negated:
                        return True
                    opted_out = (negated and name in self.opt_out_flags) or (
                        not negated and any(name == p + f for p in ("no_", "disable_") for f in self.opt_out_flags))
                    if opted_out and cur is anc.body:
                        return True
            cur = anc
        return False

    def is_option_test(self, test: cst.BaseExpression) -> bool:
        """`if args.debug:`, `if not config.fast:`, `if self.args.sync:` — a user option."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        text = dotted(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
        if text is None:
            return False
        parts = text.split(".")
        if parts[0] == "self" and len(parts) > 2:
            parts = parts[1:]
        return len(parts) >= 2 and parts[0] in _OPTION_ROOTS

    def _is_diagnostic_option(self, test: cst.BaseExpression) -> bool:
        """An option test for a switch that turns on extra work (`if args.debug:`,
        `if cfg.log_images:`): the branch is off in a normal run. Other options
        (`if not args.prefetcher:`, `if args.amp:`) choose how every step runs."""
        if not self.is_option_test(test):
            return False
        while isinstance(test, cst.UnaryOperation):
            test = test.expression
        name = (dotted(test) or "").rsplit(".", 1)[-1]
        return _DIAGNOSTIC_OPTIONS.search(name) is not None

    def is_throttled_test(self, test: cst.BaseExpression, depth: int = 0) -> bool:
        if self._is_diagnostic_option(test):
            return True
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            if self._is_diagnostic_option(test.left) or self._is_diagnostic_option(test.right):
                return True
        if isinstance(test, cst.BooleanOperation):
            # `if log_now or last:` — a flag among the operands
            for side in (test.left, test.right):
                if isinstance(side, (cst.Name, cst.UnaryOperation)) and self.is_throttled_test(side, depth):
                    return True
        for n in _iter_expr(test):
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo):
                if self._modulo_by_one(n):
                    continue  # `it % log_interval == 0` with `log_interval = 1`: every step
                return True
            if isinstance(n, cst.Call) and self._is_modulo_helper(n):
                return True  # `divisible_by(step, N)`: a `step % N == 0` in a function
            if isinstance(n, cst.Comparison):
                for comp in n.comparisons:
                    if isinstance(comp.operator, cst.Equal):
                        sides = (n.left, comp.comparator)
                        if any(_modulo(x) for x in sides):
                            continue  # `step % n == 0`: decided by the modulo itself
                        for side in sides:
                            if isinstance(side, cst.Integer):
                                return True
                            for sub in _iter_expr(side):
                                if isinstance(sub, cst.Call) and isinstance(sub.func, cst.Name) and sub.func.value == "len":
                                    return True
                                if isinstance(sub, cst.Name) and _BOUND_NAMES.search(sub.value):
                                    return True
                                if isinstance(sub, cst.Attribute) and _BOUND_NAMES.search(sub.attr.value):
                                    return True
            if isinstance(n, cst.Name) and _THROTTLE_NAMES.search(n.value.lower()):
                return True
            if isinstance(n, cst.Name) and n is test or (isinstance(n, cst.Name) and _negated(test, n)):
                if self._throttle_flag(n, depth):
                    return True
            if isinstance(n, cst.Attribute) and _THROTTLE_NAMES.search(n.attr.value.lower()):
                return True
        return False

    def _modulo_by_one(self, expr: cst.BinaryOperation) -> bool:
        """`x % 1`, or `x % n` where `n` is a name bound only to the literal 1 (lit-llama's
        module-level `log_interval = 1`): true on every step.  Not a module-level name in a
        module that runs `exec(...)` at its top level (nanoGPT's `exec(open('configurator.py')
        .read())`, which sets its globals from a config file and the command line)."""
        right = expr.right
        if isinstance(right, cst.Integer):
            return right.value == "1"
        if isinstance(right, cst.Name):
            bindings = self.bindings.lookup(right.value, right)
            if self._globals_overridden and any(self.tree.enclosing_function(b.node) is None for b in bindings):
                return False
            return bool(bindings) and all(
                b.how == "expr" and isinstance(b.node, cst.Integer) and b.node.value == "1" for b in bindings)
        return False

    @cached_property
    def _globals_overridden(self) -> bool:
        """The module calls `exec(...)` outside any function: its globals may be set there."""
        return any(self.tree.enclosing_function(c) is None for c in self.tree.calls_named("exec"))

    def _throttle_flag(self, name: cst.Name, depth: int) -> bool:
        """A name that holds a throttle test: `log_now = (it % k == 0) or it == last` before
        `if log_now:`, or a parameter that every call in this file passes such a value
        (`report(loss, should_print)` with `should_print = step % 100 == 0`)."""
        if depth > 2:
            return False
        bindings = self.bindings.lookup(name.value, name)
        if not bindings:
            return False
        for b in bindings:
            if b.how == "expr" and isinstance(b.node, cst.BaseExpression):
                if not (self._periodic(b.node, depth + 1) or self.is_throttled_test(b.node, depth + 1)):
                    return False
            elif b.how == "param" and isinstance(b.site, cst.FunctionDef):
                args = self._passed_for(b.site, b.node)
                if not args or not all(self._periodic(a, depth + 1) for a in args):
                    return False
            else:
                return False
        return True

    def _passed_for(self, fn: cst.FunctionDef, param: cst.CSTNode) -> list[cst.BaseExpression]:
        """What the calls of `fn` in this file pass for `param` (empty when any call is
        unclear: a splat, a missing argument, a method whose receiver is not resolved)."""
        if not isinstance(param, cst.Param):
            return []
        positional = [*fn.params.posonly_params, *fn.params.params]
        index = next((i for i, p in enumerate(positional) if p is param), None)
        if index is not None and positional and positional[0].name.value in ("self", "cls"):
            index -= 1
        out: list[cst.BaseExpression] = []
        for call in self.tree.index[cst.Call]:
            target = call.func.value if isinstance(call.func, cst.Name) else (
                call.func.attr.value if isinstance(call.func, cst.Attribute) else None)
            if target != fn.name.value:
                continue
            if any(a.star for a in call.args):
                return []
            kw = [a.value for a in call.args if a.keyword is not None and a.keyword.value == param.name.value]
            pos = [a.value for a in call.args if a.keyword is None]
            if kw:
                out.append(kw[0])
            elif index is not None and 0 <= index < len(pos):
                out.append(pos[index])
            else:
                return []
        return out

    def _periodic(self, test: cst.BaseExpression, depth: int = 0) -> bool:
        """A test that is true on few iterations: `step % k == 0`, `divisible_by(step, k)`,
        a flag named or bound like one (`should_log`, `log_now`) or a call of a predicate so
        named (`metrics.should_log(step)`), a diagnostic option
        (`args.debug`), `not` of a test true on most iterations, `a or b` of such tests."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._mostly(test.expression, depth)
        if isinstance(test, cst.BooleanOperation):
            if isinstance(test.operator, cst.Or):
                return self._periodic(test.left, depth) and self._periodic(test.right, depth)
            return self._periodic(test.left, depth) or self._periodic(test.right, depth)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comp = test.comparisons[0]
            if isinstance(comp.operator, cst.Equal) and (_modulo(test.left) or _modulo(comp.comparator)):
                m = test.left if _modulo(test.left) else comp.comparator
                return not self._modulo_by_one(m)
            if isinstance(comp.operator, cst.Equal):
                return self.is_throttled_test(test, depth)  # `it == last`, `i == 0`
            return False
        if isinstance(test, cst.Call):
            # `divisible_by(step, k)`, or a predicate named like a throttle flag:
            # `self.metrics_processor.should_log(self.step)` (torchtitan's trainers)
            return self._is_modulo_helper(test) or bool(_THROTTLE_CALLS.match((call_name(test) or "").lower()))
        if isinstance(test, cst.Name):
            return bool(_THROTTLE_NAMES.search(test.value.lower())) or self._throttle_flag(test, depth)
        if isinstance(test, cst.Attribute):
            return bool(_THROTTLE_NAMES.search(test.attr.value.lower())) or self._is_diagnostic_option(test)
        return False

    def _mostly(self, test: cst.BaseExpression, depth: int = 0) -> bool:
        """A test that is true on most iterations: `step % k` (not a multiple), `step % k != 0`,
        `not` of a test true on few iterations."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._periodic(test.expression, depth)
        if _modulo(test):
            return True
        if isinstance(test, cst.BooleanOperation):
            if isinstance(test.operator, cst.Or):
                return self._mostly(test.left, depth) or self._mostly(test.right, depth)
            return self._mostly(test.left, depth) and self._mostly(test.right, depth)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comp = test.comparisons[0]
            return isinstance(comp.operator, cst.NotEqual) and (_modulo(test.left) or _modulo(comp.comparator))
        return False

    def behind_throttle_guard(self, node: cst.CSTNode, container: cst.CSTNode) -> cst.If | None:
        """An earlier `if <test>: return` / `continue` in a block between `node` and
        `container` whose test holds on most iterations (`if step % every: return`,
        `if not should_log: return`): what follows runs only on the few others. Returns
        that guard."""
        cur = node
        for parent in self.tree.ancestors(node):
            if parent is container:
                return None
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                guard = self._first_guard_before(parent, cur)
                if guard is not None:
                    return guard
            if isinstance(parent, (cst.Lambda, cst.ClassDef)):
                return None
            cur = parent
        return None

    def _first_guard_before(self, block: cst.CSTNode, stmt: cst.CSTNode) -> cst.If | None:
        """The first throttle guard of `block` before its statement `stmt`. Each block's
        statements are tested once, in order, as far as the questions have reached (a loop of
        n statements asked about each of them was n² tests)."""
        memo = self.__dict__.setdefault("_guards_memo", {})
        state = memo.get(block)
        if state is None:
            body = list(block.body)
            state = memo[block] = [body, {st: i for i, st in enumerate(body)}, 0, None]
        body, index, tested, guard = state
        at = index.get(stmt)
        if at is None:
            return None
        while guard is None and tested < at:
            st = body[tested]
            if isinstance(st, cst.If) and self._rare_exit(st) and not self._steps_after(body[tested + 1:]):
                guard = state[3] = tested
            tested += 1
        state[2] = tested
        return body[guard] if guard is not None and guard < at else None

    def _rare_exit(self, st: cst.If, depth: int = 0) -> bool:
        """Every path through the `if` statement `st` that goes on past it (does not end in
        `return`/`continue`) passed a test that holds on few iterations: `if step % every:
        return`, or a tree of them (`if steps == 0: ... else: if steps % n != 0: return`,
        sd-scripts' sample-image functions)."""
        if depth > 4:
            return False
        body_ok = _skips(st.body) or self._periodic(st.test) or self._guarded(st.body, depth)
        if not body_ok:
            return False
        if self._mostly(st.test):
            return True  # the way past the `if` when its test fails is itself rare
        orelse = st.orelse
        if orelse is None:
            return False
        if isinstance(orelse, cst.If):
            return self._rare_exit(orelse, depth + 1)
        return _skips(orelse.body) or self._guarded(orelse.body, depth)

    def _guarded(self, block: cst.BaseSuite, depth: int) -> bool:
        """A statement of `block` (not nested in a loop) is such a guard: what follows it in
        the block, and so the block's way out, runs on few iterations."""
        return any(isinstance(st, cst.If) and self._rare_exit(st, depth + 1) for st in getattr(block, "body", ()))

    def _is_step_call_or_after(self, node: cst.CSTNode, branch: cst.If) -> bool:
        """`node` is the optimizer's bookkeeping (`zero_grad`, `unscale_`) in a throttled branch
        that steps the optimizer: the branch is the gradient-accumulation step, and these run
        once per optimizer step. Other work in the branch (logging) stays throttled."""
        if isinstance(node, cst.Call):
            if call_name(node) in ("zero_grad", "unscale_"):
                return True
        return False

    def _steps_after(self, stmts) -> bool:
        """The statements run the optimizer step or backward themselves (`if step %
        train_freq: continue` before the update, as in DQN): the guard paces the training
        step, it does not throttle work around it."""
        for st in stmts:
            for c in self.tree.calls_within(st):
                if self.steps.is_backward_call(c) or self.steps.is_optimizer_step(c) or self.steps.is_scaler_call_step(c):
                    return True
        return False

    def _is_modulo_helper(self, call: cst.Call) -> bool:
        name = call_name(call) or ""
        if _MODULO_HELPER_NAMES.search(name):
            return True
        for fn in self.tree.functions_by_name.get(name, ()):
            rets = [r for r in self.tree.nodes_within(fn, cst.Return) if r.value is not None]
            if rets and all(any(isinstance(x, cst.BinaryOperation) and isinstance(x.operator, cst.Modulo)
                                for x in _iter_expr(r.value)) for r in rets):
                return True
        return False


# A predicate whose name says it decides a logging or evaluation step (not `get_last_lr()`,
# which `_THROTTLE_NAMES`' "last" would take for a last-step flag).
_THROTTLE_CALLS = re.compile(r"should_(log|print|eval|save|validate)|(do|is)_(log|print|eval)(_|$)")
_MODULO_HELPER_NAMES = re.compile(r"^(is_)?(divisible(_by)?|every_n\w*|multiple_of|is_multiple\w*)$")
_DIAGNOSTIC_OPTIONS = re.compile(
    r"debug|verbose|log|print|profil|eval|valid|save|vis|plot|check|sanity|anomal|trace|monitor|wandb|"
    r"tensorboard|(^|_)tb(_|$)|report|dump|track|show|display|inspect|stat|synchron|(^|_)sync(_|$)|timing|"
    r"benchmark", re.I)


def _modulo(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo)


def _negated(test: cst.BaseExpression, name: cst.Name) -> bool:
    """`not name` is the whole test."""
    return isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and test.expression is name


def _skips(block: cst.BaseSuite) -> bool:
    """The block ends in `return` or `continue`: the rest of the body is skipped."""
    body = getattr(block, "body", ())
    if not body:
        return False
    last = body[-1]
    smalls = last.body if isinstance(last, cst.SimpleStatementLine) else (body if isinstance(block, cst.SimpleStatementSuite) else ())
    return bool(smalls) and isinstance(smalls[-1], (cst.Return, cst.Continue))
