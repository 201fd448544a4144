"""Hot paths: the evidence that a node runs once per optimizer step (or once per evaluation
batch), kept as a chain a user can check.

`hot_path(node)` answers with the steps that lead from a loop to the node — the loop and what
makes it a training or evaluation loop, the call that reaches a per-step helper, the inner
loops and branches the node sits in — or None when the node does not run on every
iteration (a throttled branch, code after `if step % every: return`, an exception handler,
code that runs once). Each step names one node, so the engine can print its line:

    line 40: `for it, (x, y) in enumerate(loader)` is a training loop
    line 43: `loss.backward()` runs on each of its iterations
    line 47: it calls `log_metrics(it, loss)` on each iteration
    line 12: in `if args.amp:` (not a step-count test)

Rules that claim a per-step cost (PF201–PF204) report only with such a chain and attach it
to the finding (`Violation.why`); JSON output carries it as `why`, the language server shows
it on hover, and `perflint check --show-why` prints it under each finding.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import call_name, is_cli_command
from perflint.analysis.tree import iter_nodes
from perflint.analysis.vocab import Kind

_EMPTY = cst.Module(body=[])
_CHECK_NAME = re.compile(r"^_*(check|verify|compare|assert)(_|$)|parity|equivalen|^_*(measure|benchmark|profile)|"
                         r"^_*time_|_time$|throughput", re.I)
_CLOSENESS = {"torch.allclose", "torch.testing.assert_close", "torch.testing.assert_allclose", "numpy.allclose",
              "numpy.testing.assert_allclose"}


@dataclass(frozen=True)
class WhyStep:
    """One link of the chain: a node (its line is printed) and what it shows. `where` is
    an already-known place in another file ("train.py:212"), used when `node` is None."""

    node: cst.CSTNode | None
    text: str
    where: str | None = None


def snippet(node: cst.CSTNode, limit: int = 60) -> str:
    """The first line of `node`'s code, shortened to `limit` characters."""
    if isinstance(node, cst.For):
        text = f"for {_EMPTY.code_for_node(node.target)} in {_EMPTY.code_for_node(node.iter)}"
    elif isinstance(node, cst.While):
        text = f"while {_EMPTY.code_for_node(node.test)}"
    elif isinstance(node, cst.If):
        text = f"if {_EMPTY.code_for_node(node.test)}"
    elif isinstance(node, cst.FunctionDef):
        text = f"def {node.name.value}(...)"
    else:
        try:
            text = _EMPTY.code_for_node(node)
        except Exception:  # noqa: BLE001 - a node libcst cannot render alone
            return "…"
    text = " ".join(text.strip().splitlines()[0].split()) if text.strip() else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HotPath(Component):
    needs = ("tree", "bindings", "cross", "kinds", "throttles", "loops", "steps")

    def hot_path(self, node: cst.CSTNode) -> list[WhyStep] | None:
        """The chain of evidence that `node` runs on every training step, or on every batch
        of an evaluation that runs during training; None when it does not (see
        `iteration_context`), or when the evaluation is not part of training (an inference
        script, a prediction or visualisation tool, an export, a parity check)."""
        info = self.loops.iteration_context(node)
        if info is None:
            return None
        region = info.node
        memo = self.__dict__.setdefault("_region_memo", {})  # one answer per loop: a loop of n findings
        if (region, info.kind) not in memo:
            memo[region, info.kind] = self._region_evidence(region, info.kind)
        head = memo[region, info.kind]
        return None if head is None else head + self._inner_context(node, region)

    def _region_evidence(self, region: cst.CSTNode, kind: str) -> list[WhyStep] | None:
        if self.once_only(region) or self.checks_parity(region) or self.optimizes_inputs(region) \
                or self.test_code:
            return None
        steps: list[WhyStep] = []
        if kind == "eval":
            if self.over_one_batch(region):
                return None
            during = self.during_training(region)
            if during is None:
                return None
            steps += during
        if isinstance(region, (cst.For, cst.While)):
            steps += self._loop_evidence(region, kind)
        else:
            steps += self._step_function_evidence(region, kind)
        return steps

    @cached_property
    def test_code(self) -> bool:
        """The module is test code found by its content: it imports pytest or unittest (a
        test helper module, a conftest-like fixture file). Test files by name are handled by
        the runner; their helpers run a few steps on tiny inputs on purpose."""
        roots = {v.split(".", 1)[0] for v in self.tree.imports.aliases.values()}
        return bool(roots & {"pytest", "unittest", "_pytest"})

    @cached_property
    def trains(self) -> bool:
        """The file trains: a training loop, or a per-step training function."""
        return bool(self.loops.training_loops()) or any(k == "train" for k in self.loops._step_functions.values())

    def during_training(self, region: cst.CSTNode) -> list[WhyStep] | None:
        """For an evaluation loop or step: the evidence that it runs while a model trains —
        the file trains too, Lightning's `validation_step`, or a file that trains calls
        the function it sits in. None when nothing shows it (an inference or prediction
        script, a tool run on its own)."""
        fn = region if isinstance(region, cst.FunctionDef) else self.tree.enclosing_function(region)
        if fn is not None and fn.name.value == "validation_step":
            return [WhyStep(fn, "Lightning runs `validation_step` during `fit`")]
        if self.trains and (self.runs_instead_of_training(region) or self.after_training(region)):
            return None
        if self.trains:
            loop = next(iter(self.loops.training_loops()), None)
            if loop is not None:
                return [WhyStep(loop, "this file trains (its training loop), so its evaluation runs during training")]
            return [WhyStep(None, "this file trains (a per-step training function)")]
        if self.project is None:
            return None
        from perflint.analysis.summary import _outer_function, _symbol_of

        top = _outer_function(self.facts, region) if not isinstance(region, cst.FunctionDef) or _symbol_of(self.facts, region) is None else region
        symbol = _symbol_of(self.facts, top)
        if symbol is None:
            return None
        if self.project.called_from_training(symbol):
            return [WhyStep(top, f"`{symbol}` is called by a module that trains")]
        cls = symbol.split(".")[0] if "." in symbol else None
        if cls is not None and self.project.called_from_training(cls):
            return [WhyStep(top, f"`{cls}` is used by a module that trains")]
        return None

    def optimizes_inputs(self, region: cst.CSTNode) -> bool:
        """Every optimizer the region steps was built over plain tensors, not a model's
        parameters (`Adam([latent] + noises)`): a GAN inversion, a style transfer, an
        adversarial search — the loop fits inputs to a fixed model; it does not train one."""
        steps = [c for c in self.tree.calls_within(region) if self.steps.is_optimizer_step(c) and isinstance(c.func, cst.Attribute)]
        if not steps:
            return False
        for c in steps:
            recv = c.func.value
            bindings = self.bindings.lookup(recv.value, recv) if isinstance(recv, cst.Name) else []
            if len(bindings) != 1 or bindings[0].how != "expr" or not isinstance(bindings[0].node, cst.Call):
                return False
            built = bindings[0].node
            if not built.args or not (self.tree.qualname(built.func) or "").startswith("torch.optim."):
                return False
            params = built.args[0].value
            if not isinstance(params, (cst.List, cst.BinaryOperation)):
                return False
            for n in iter_nodes(params):
                if isinstance(n, (cst.Call, cst.Dict)):
                    return False  # `.parameters()`, param groups
        return True

    def over_one_batch(self, loop: cst.CSTNode) -> bool:
        """A loop over the samples of one batch drawn with `next(iter(loader))` (a sample
        grid saved every N steps): it does not run once per batch of anything."""
        if not isinstance(loop, cst.For):
            return False
        for n in iter_nodes(loop.iter):
            if isinstance(n, cst.Name):
                for b in self.bindings.lookup(n.value, n):
                    if b.how == "expr" and isinstance(b.node, cst.Call) and call_name(b.node) == "next":
                        return True
        return False

    def after_training(self, region: cst.CSTNode) -> bool:
        """See `analysis.afterruns.after_training`."""
        from perflint.analysis.afterruns import after_training

        return after_training(self.facts, region)

    def runs_instead_of_training(self, region: cst.CSTNode) -> bool:
        """`region` is in a run mode of its own, which never runs while the model trains:
        an arm of an `if` on an option that trains nothing (`_run_mode_arm`), or a top-level
        function that trains nothing and every use of whose name in the file is a call in one
        arm of an `if` whose other arm calls a function of the file that trains (`if not
        args.eval: train(args) else: test(args)`)."""
        if self._run_mode_arm(region):
            return True
        top = region if isinstance(region, cst.FunctionDef) else self.tree.enclosing_function(region)
        while top is not None and self.tree.parent(top) is not self.facts.module:
            top = self.tree.enclosing_function(top)
        if top is None or any(self.tree.is_inside(loop, top) for loop in self.loops.training_loops()):
            return False
        name = top.name.value
        calls = self.tree.calls_named(name)
        if not calls and self._command_of_its_own(top):
            return True  # `@cli.command() def test(...)`: its own invocation, which trains nothing
        uses = [n for n in self.tree.index[cst.Name] if n.value == name and n is not top.name]
        if not calls or len(uses) != len(calls):
            return False  # never called here, or handed around by name
        return all(self._other_arm_trains(c) for c in calls)

    def _command_of_its_own(self, fn: cst.FunctionDef) -> bool:
        """A command-line subcommand (`@main.command()`, click or typer) of a file that trains,
        which calls none of the file's functions that train: the program runs it instead of
        the training command."""
        if not self.loops.training_loops():
            return False
        if not is_cli_command(fn):
            return False
        trainers = {self.tree.enclosing_function(loop) for loop in self.loops.training_loops()}
        names = {t.name.value for t in trainers if t is not None and t is not fn}
        return not any((call_name(c) or "") in names for c in self.tree.calls_within(fn))

    def _run_mode_arm(self, region: cst.CSTNode) -> bool:
        """`region` sits in an arm of `if args.test_only:` / `if args.train: ... else: ...` /
        `if args.mode == "eval":` that trains nothing, in a file that trains: the other arm
        trains, or this arm ends the program (`sys.exit(0)`), so the training in the file
        never runs in the same process as it."""
        if not self.loops.training_loops():
            return False
        cur: cst.CSTNode = region
        for anc in self.tree.ancestors(region):
            if isinstance(anc, cst.If) and (cur is anc.body or cur is anc.orelse) and self._option_test(anc.test) \
                    and not self._arm_trains(cur):
                other = anc.orelse if cur is anc.body else anc.body
                if (other is not None and self._arm_trains(other)) or _ends_program(self.tree, cur):
                    return True
            cur = anc
        return False

    def _option_test(self, test: cst.BaseExpression) -> bool:
        """`args.test_only`, `not args.train`, `args.mode == "eval"`: a run-wide option."""
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                and isinstance(test.comparisons[0].operator, (cst.Equal, cst.NotEqual)) \
                and isinstance(test.comparisons[0].comparator, cst.SimpleString):
            test = test.left
        return self.throttles.is_option_test(test)

    def _arm_trains(self, arm: cst.CSTNode) -> bool:
        """A training loop in `arm`, or a call there of a top-level function that has one."""
        loops = self.loops.training_loops()
        if any(self.tree.is_inside(loop, arm) for loop in loops):
            return True
        for c in self.tree.calls_within(arm):
            if isinstance(c.func, cst.Name):
                for fn in self.tree.functions_by_name.get(c.func.value, ()):
                    if self.tree.parent(fn) is self.facts.module and any(self.tree.is_inside(loop, fn) for loop in loops):
                        return True
        return False

    def _other_arm_trains(self, call: cst.Call) -> bool:
        """The `if` arm holding `call` has a sibling arm that calls a function of the file
        with a training loop in it."""
        cur: cst.CSTNode = call
        for anc in self.tree.ancestors(call):
            if isinstance(anc, cst.FunctionDef):
                return False
            if isinstance(anc, cst.If) and (cur is anc.body or cur is anc.orelse):
                other = anc.orelse if cur is anc.body else anc.body
                if other is None:
                    return False
                for c in self.tree.calls_within(other):
                    if isinstance(c.func, cst.Name):
                        for fn in self.tree.functions_by_name.get(c.func.value, ()):
                            if self.tree.parent(fn) is self.facts.module and any(self.tree.is_inside(loop, fn)
                                                                      for loop in self.loops.training_loops()):
                                return True
                return False
            cur = anc
        return False

    def once_only(self, loop: cst.CSTNode) -> bool:
        """A loop whose body always ends in `return` or `break`: it runs one iteration
        (a throughput probe that times the first batch and returns)."""
        if not isinstance(loop, (cst.For, cst.While)):
            return False
        body = getattr(loop.body, "body", ())
        if not body:
            return False
        last = body[-1]
        if isinstance(last, cst.SimpleStatementLine) and last.body:
            return isinstance(last.body[-1], (cst.Return, cst.Break))
        return False

    def checks_parity(self, region: cst.CSTNode) -> bool:
        """Code that compares two implementations or checks a result rather than trains or
        evaluates: the enclosing function is named like a check (`test_*`, `check_*`,
        `verify_*`, `compare_*`, `*_parity`), or the region asserts closeness
        (`torch.allclose`, `torch.testing.assert_close`, `np.testing.assert_*`)."""
        fn = region if isinstance(region, cst.FunctionDef) else self.tree.enclosing_function(region)
        while fn is not None:
            if _CHECK_NAME.search(fn.name.value):
                return True
            fn = self.tree.enclosing_function(fn)
        for c in self.tree.calls_within(region):
            q = self.tree.qualname(c.func) or ""
            if q in _CLOSENESS or q.startswith("numpy.testing.") or q.startswith("torch.testing."):
                return True
        return False

    # -- the loop ----------------------------------------------------------------------------
    def _loop_evidence(self, loop: cst.CSTNode, kind: str) -> list[WhyStep]:
        memo = self.__dict__.setdefault("_loop_evidence_memo", {})  # asked per step function too
        if (loop, kind) not in memo:
            memo[loop, kind] = self._loop_evidence_once(loop, kind)
        return list(memo[loop, kind])

    def _loop_evidence_once(self, loop: cst.CSTNode, kind: str) -> list[WhyStep]:
        what = "a training loop" if kind == "train" else "an evaluation loop"
        steps = [WhyStep(loop, f"`{snippet(loop)}` is {what}")]
        calls = self.loops.direct_body_calls(loop)
        if kind == "train":
            for c in calls:
                if self.steps.is_backward_call(c) or self.steps.is_optimizer_step(c) or self.steps.is_scaler_call_step(c):
                    steps.append(WhyStep(c, f"`{snippet(c)}` runs on each of its iterations"))
                    return steps
            for c in calls:  # a local function that runs backward
                name = call_name(c)
                for fn in self.tree.functions_by_name.get(name or "", ()):
                    if any(self.steps.is_backward_call(x) for x in self.loops.direct_body_calls(fn)):
                        steps.append(WhyStep(c, f"it calls `{snippet(c)}`, which runs `.backward()`, on each iteration"))
                        return steps
            return steps
        if isinstance(loop, cst.For) and self.loops.iterates_loader(loop):
            steps[0] = WhyStep(loop, f"`{snippet(loop)}` is {what} over batches of a data loader")
        for c in calls:
            ks = self.kinds.of(c.func)
            if Kind.MODEL in ks or Kind.NAMED_MODEL in ks:
                steps.append(WhyStep(c, f"`{snippet(c)}` runs the model on each batch"))
                break
        return steps

    # -- per-step functions ----------------------------------------------------------------------
    def _step_function_evidence(self, fn: cst.FunctionDef, kind: str) -> list[WhyStep]:
        name = fn.name.value
        caller = self.facts.step_callers.get(fn)
        if caller is not None:
            path, line = caller[0], caller[1]
            loop = "a training loop" if caller[2] == "train" else "an evaluation loop"
            return [
                WhyStep(None, f"{loop} calls `{name}` on each iteration", where=f"{_short(self.facts, path)}:{line}"),
                WhyStep(fn, f"`{name}` runs once per step"),
            ]
        if name == "training_step":
            return [WhyStep(fn, "Lightning runs `training_step` once per optimizer step")]
        if name in ("validation_step", "test_step", "predict_step"):
            return [WhyStep(fn, f"Lightning runs `{name}` once per evaluation batch")]
        for loop, loop_kind in self.loops._loops.items():
            for c in self.loops.direct_body_calls(loop):
                if call_name(c) == name and self.loops.iteration_context_plain(c, loop) is not False \
                        and self._may_call(c, fn):
                    steps = self._loop_evidence(loop, loop_kind)
                    if not any(st.node is c for st in steps):
                        steps.append(WhyStep(c, f"it calls `{snippet(c)}` on each iteration"))
                    return steps
        for c in self.loops.direct_body_calls(fn):
            if self.steps.is_backward_call(c) or self.steps.is_optimizer_step(c):
                return [WhyStep(fn, f"`{name}` is a training step"),
                        WhyStep(c, f"`{snippet(c)}` runs once per call")]
        return [WhyStep(fn, f"`{name}` runs once per step")]

    def _may_call(self, call: cst.Call, fn: cst.FunctionDef) -> bool:
        """`call` may call `fn`: a plain name, `self.name(...)` in the same class, or a method
        of a class of this file."""
        if isinstance(call.func, cst.Name):
            return self.tree.scope_of(fn) is self.facts.module or self.tree.enclosing_function(fn) is not None
        return isinstance(call.func, cst.Attribute)

    # -- what lies between ----------------------------------------------------------------------
    def _inner_context(self, node: cst.CSTNode, region: cst.CSTNode) -> list[WhyStep]:
        """Inner loops and branches between the region and `node`, outermost first."""
        out: list[WhyStep] = []
        cur = node
        for parent in self.tree.ancestors(node):
            if parent is region:
                break
            if isinstance(parent, cst.If) and cur is parent.body:
                out.append(WhyStep(parent, f"in `{snippet(parent)}:`, which is not a step-count test"))
            elif isinstance(parent, cst.If) and cur is parent.orelse:
                out.append(WhyStep(parent, f"in the `else` of `{snippet(parent)}:`"))
            elif isinstance(parent, (cst.For, cst.While)) and cur is parent.body:
                out.append(WhyStep(parent, f"in the inner loop `{snippet(parent)}`, on every step"))
            cur = parent
        out.reverse()
        return out


_EXITS = frozenset({"sys.exit", "os._exit", "exit", "quit"})


def _ends_program(tree, arm: cst.CSTNode) -> bool:
    """The last statement of an `if` arm ends the program: `sys.exit(0)`, `exit()`,
    `raise SystemExit`."""
    block = arm.body if isinstance(arm, cst.Else) else arm
    body = getattr(block, "body", ())
    if not body or not isinstance(body[-1], cst.SimpleStatementLine) or not body[-1].body:
        return False
    last = body[-1].body[-1]
    if isinstance(last, cst.Expr) and isinstance(last.value, cst.Call):
        q = tree.qualname(last.value.func) or (last.value.func.value if isinstance(last.value.func, cst.Name) else "")
        return q in _EXITS
    if isinstance(last, cst.Raise) and last.exc is not None:
        exc = last.exc.func if isinstance(last.exc, cst.Call) else last.exc
        return isinstance(exc, cst.Name) and exc.value == "SystemExit"
    return False


def _short(facts, path: str) -> str:
    import os
    from pathlib import Path

    root = getattr(getattr(facts.project, "index", None), "root", None)
    shown = os.path.relpath(path, root) if root else os.path.basename(path)
    return Path(shown).as_posix()


def render_why(steps, offsets: dict, lines, notebook=None) -> tuple[str, ...]:
    """The chain as short lines ("line 40: `for ...` is a training loop"), for a finding.
    `offsets` maps nodes to character ranges (see `perflint.positions.node_offsets`)."""
    out = []
    for step in steps or ():
        if step.node is None:
            out.append(f"{step.where}: {step.text}" if step.where else step.text)
            continue
        span = offsets.get(step.node)
        if span is None:
            out.append(step.text)
            continue
        row, _ = lines.row_col(span[0])
        if notebook is not None:
            cell, row = notebook.locate(row)
            out.append(f"cell {cell}, line {row}: {step.text}")
        else:
            out.append(f"line {row}: {step.text}")
    return tuple(out)
