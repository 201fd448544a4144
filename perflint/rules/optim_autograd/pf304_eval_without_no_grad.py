"""PF304 eval-without-no-grad: evaluation loop after `.eval()` with autograd still on."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.edits import parse_expr
from perflint.analysis import Facts, call_name, iter_nodes, literal_value
from perflint.analysis.syntax import comments_in
from perflint.analysis.hotpath import WhyStep, snippet
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.optim_autograd.helpers import host_only, torch_prefix


_EVAL_GUARDS = ("backward", "manual_backward", "requires_grad_", "enable_grad")

# A comment saying the region must keep autograd on: "# no torch.no_grad() here: the
# hooks need gradients", "# don't wrap in no_grad", "# gradients are needed below".
_KEEP_GRAD = re.compile(
    r"(?:\bnot?\b|n't|\bwithout\b|\bnever\b|\bavoid\b|\bcannot\b)[^#]*\b(?:no_grad|inference_mode|set_grad_enabled)"
    r"|\b(?:no_grad|inference_mode)\b[^#]*\b(?:breaks?|would|fails?|must not|cannot|can't)\b"
    r"|\b(?:need|needs|needed|require|requires|required|keep|keeps)\b[^#]*\bgrad(?:ient)?s?\b"
    r"|\bgrad(?:ient)?s?\b[^#]*\b(?:needed|required)\b",
    re.I,
)


class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Flags evaluation loops that run a model after `model.eval()` with autograd still
    recording: no `torch.no_grad()`, `torch.inference_mode()` or
    `torch.set_grad_enabled(False)` around the loop, on the function, or around the calls
    of that function in the same file, where the loop runs while a model trains: the file
    trains, Lightning runs it during `fit`, or a module of the project that trains calls its
    function. One finding per loop, on its `for` line.

    ## Why is this bad?
    `model.eval()` only switches dropout and batch-norm to inference behaviour; autograd
    still records every operation and keeps the activations needed for a backward pass that
    never comes. Measured (torch 2.13, CPU, small MLP): a grad-enabled forward took 145.5 µs
    against 118.1 µs under `no_grad` (~19% on a launch-bound model), and accumulating
    outputs in such a loop retained 3.2 GB over 200 iterations.

    ## Example
    ```python
    model.eval()
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
    ```

    ## Use instead
    ```python
    model.eval()
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
    ```

    ## Fix safety
    Wraps the loop in `with torch.no_grad():` (not `inference_mode`, see PF303). **Safe**
    when results leave the loop only as Python numbers, detached tensors or host data
    (`.item()`, `.tolist()`, `.cpu().numpy()`), so nothing downstream can need a graph;
    **unsafe** otherwise (callers may backpropagate through returned outputs). Not reported
    in scopes that use autograd on purpose (`.backward(`, `autograd.grad(`,
    `requires_grad_(`, `.grad`, `enable_grad` — saliency maps, adversarial examples,
    test-time adaptation), in `forward`/`training_step`, or in Lightning's
    `validation_step`/`test_step`/`predict_step` (Lightning disables gradients there), nor
    in a function decorated by a decorator factory of the file or the project whose decorator
    applies `no_grad`/`inference_mode` (yolov5's `@smart_inference_mode()`) or by a decorator
    of the file whose wrapper calls the function only inside `with torch.no_grad():`
    (`@nograd`), nor after every parameter of the model was frozen in the same function
    (`model.requires_grad_(False)`, or `p.requires_grad = False` in a loop over its
    parameters: autograd records nothing), nor for a loop
    over the samples of one batch drawn with `next(iter(loader))` (a sample grid) or a loop
    that returns after its first pass, nor in an evaluation-only script or a function that runs instead of training (every
    call of it is in one arm of an `if` whose other arm calls the file's training function:
    `if not args.eval: train(args) else: test(args)`) or in a branch that does (the `else:` of
    `if args.train:` whose body trains, an arm of `if args.test_only:` that ends in
    `sys.exit(0)`), nor where a comment in the loop or between `.eval()`
    and the loop says autograd must stay on ("# no no_grad here: the hooks need gradients").

    ## Applies to
    torch 0.4 and later: `torch.no_grad()` came with 0.4 (before it, `Variable(x,
    volatile=True)` turned recording off). Off by default (`extend-select = ["PF304"]`):
    on whole public repositories, under strict review, 3 of 13 reviewed findings were
    right. Recording a graph in an evaluation pass costs memory and some CPU bookkeeping,
    which matters for a large model evaluated every epoch; most evaluation loops the rule
    finds are small next to the training (a final test, a sample grid, a per-epoch pass of
    a small model), run only under an option the shipped configurations leave off, or are
    never called.

    ## References
    - PyTorch tuning guide, "Disable gradient calculation for validation or inference"
    - `torch.no_grad` documentation
    """

    code = "PF304"
    name = "eval-without-no-grad"
    summary = "evaluation loop after `.eval()` with autograd still on"
    fix_class = FixClass.SAFE_OR_UNSAFE
    default = False  # whole-repository reviews: 3 right of 13 (see "Applies to")
    tokens = (b".eval(",)
    min_torch = (0, 4)  # `torch.no_grad()` came with 0.4 (before it: `Variable(x, volatile=True)`)

    def check(self, facts: Facts) -> Iterator[Violation]:
        prefix = torch_prefix(facts)
        reported: set = set()
        for eval_call in facts.tree.calls():
            if call_name(eval_call) != "eval" or eval_call.args or not isinstance(eval_call.func, cst.Attribute):
                continue
            model_text = facts.tree.receiver_text(eval_call.func.value)
            if model_text is None:
                continue
            fn = facts.tree.enclosing_function(eval_call)
            scope: cst.CSTNode = fn if fn is not None else facts.module
            if fn is not None and fn.name.value in ("forward", "training_step", "validation_step", "test_step",
                                                     "predict_step"):
                continue
            if self._callers_disable_grad(facts, fn) or facts.grad.grad_context(eval_call) == "off":
                continue
            loop = self._eval_loop(facts, eval_call, fn, model_text)
            if loop is None or loop in reported:
                continue
            if facts.grad.grad_context(loop) is not None or self._disabled_before(facts, scope, loop):
                continue
            if self._params_frozen(facts, scope, loop, model_text):
                continue  # `for p in model.parameters(): p.requires_grad = False` before the loop: nothing is recorded
            if self._autograd_on_purpose(facts, loop) or self._train_between(facts, scope, eval_call, loop, model_text):
                continue
            if facts.hotpath.over_one_batch(loop) or facts.hotpath.once_only(loop):
                continue  # the samples of one batch (a sample grid), a loop that returns at once
            if self._comment_keeps_grad(facts, eval_call, loop):
                continue  # the author says autograd must stay on here
            during = facts.hotpath.during_training(loop)
            if during is None:
                continue  # nothing shows the loop runs while a model trains (an inference script)
            reported.add(loop)
            fix = None
            if prefix is not None:
                wrapped = cst.With(
                    items=[cst.WithItem(item=parse_expr(f"{prefix}.no_grad()"))],
                    body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=[])]),
                    leading_lines=loop.leading_lines,
                )
                msg = "Wrap the loop in `with torch.no_grad():`"
                safe = self._results_are_host_data(facts, loop, scope)
                fix = (self.safe if safe else self.unsafe)(msg, {loop: wrapped})
            yield Violation(
                loop,
                f"evaluation loop runs `{model_text}` after `.eval()` with autograd recording; wrap it in "
                "`with torch.no_grad():` (eval() only changes dropout/batch-norm)",
                fix,
                why=during + [WhyStep(eval_call, f"`{model_text}.eval()` puts the model in evaluation mode"),
                              WhyStep(loop, f"`{snippet(loop)}` then runs it with autograd on")],
            )

    @staticmethod
    def _eval_loop(facts: Facts, eval_call: cst.Call, fn, model_text: str) -> cst.For | None:
        """The first loop after `eval_call` in the same function that calls the model,
        taking the outermost such loop (loops that also enclose `eval_call` don't count)."""
        start = facts.tree.order.get(eval_call, 0)
        candidates = sorted(
            (l for l in facts.tree.index[cst.For] if facts.tree.order.get(l, 0) > start and facts.tree.enclosing_function(l) is fn),
            key=lambda l: facts.tree.order.get(l, 0),
        )
        for loop in candidates:
            if any(isinstance(a, (cst.For, cst.While)) and facts.tree.order.get(a, 0) > start for a in facts.tree.ancestors(loop)):
                continue
            for call in facts.tree.calls_within(loop.body):
                target = call.func
                if isinstance(target, cst.Attribute) and target.attr.value == "generate":
                    continue  # `generate` runs without autograd (transformers decorates it with `no_grad`)
                if isinstance(target, cst.Attribute) and target.attr.value == "forward":
                    target = target.value
                if facts.tree.receiver_text(target) == model_text and facts.grad.grad_context(call) is None:
                    return loop
        return None

    @staticmethod
    def _comment_keeps_grad(facts: Facts, eval_call: cst.Call, loop: cst.For) -> bool:
        """Whether a comment in the loop, or between `.eval()` and the loop in the same
        block, says autograd must stay on there (`_KEEP_GRAD`)."""
        regions: list[cst.CSTNode] = [loop]
        block = facts.tree.parent(loop)
        body = getattr(block, "body", None)
        if isinstance(body, (list, tuple)) and loop in body:
            start = facts.tree.order.get(eval_call, 0)
            for stmt in body[:body.index(loop)]:
                if any(facts.tree.order.get(n, -1) >= start for n in (stmt, *facts.tree.calls_within(stmt))) or \
                        eval_call in facts.tree.calls_within(stmt):
                    regions.append(stmt)
        return any(_KEEP_GRAD.search(text) for region in regions for text in comments_in(region))

    @staticmethod
    def _train_between(facts: Facts, scope, eval_call, loop, model_text: str) -> bool:
        lo, hi = facts.tree.order.get(eval_call, 0), facts.tree.order.get(loop, 0)
        for call in facts.tree.calls_within(scope):
            if call_name(call) == "train" and isinstance(call.func, cst.Attribute) and \
                    facts.tree.receiver_text(call.func.value) == model_text and lo < facts.tree.order.get(call, 0) < hi:
                return True
        return False

    @staticmethod
    def _params_frozen(facts: Facts, scope: cst.CSTNode, loop: cst.CSTNode, model_text: str) -> bool:
        """Before the loop, in the same scope, the model's parameters were all frozen:
        `model.requires_grad_(False)`, or a loop over `model.parameters()` /
        `model.named_parameters()` that sets `requires_grad = False` on each.  With no input
        that requires grad either, autograd records nothing: `no_grad` would change nothing."""
        start = facts.tree.order.get(loop, 0)
        for call in facts.tree.calls_within(scope):
            if facts.tree.order.get(call, 0) >= start or facts.tree.enclosing_function(call) is not facts.tree.enclosing_function(loop):
                continue
            if not isinstance(call.func, cst.Attribute) or facts.tree.receiver_text(call.func.value) != model_text:
                continue
            name = call_name(call)
            if name == "requires_grad_" and call.args and literal_value(call.args[0].value) is False:
                return True
            if name in ("parameters", "named_parameters"):
                header = facts.tree.parent(call)
                if not (isinstance(header, cst.For) and header.iter is call):
                    continue
                targets = [n.value for n in iter_nodes(header.target) if isinstance(n, cst.Name)]
                for node in iter_nodes(header.body):
                    if isinstance(node, cst.Assign) and literal_value(node.value) is False and any(
                            isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                            and isinstance(t.target.value, cst.Name) and t.target.value.value in targets
                            for t in node.targets):
                        return True
        return False

    @staticmethod
    def _autograd_on_purpose(facts: Facts, scope: cst.CSTNode) -> bool:
        for node in iter_nodes(scope):
            if isinstance(node, cst.Call):
                name = call_name(node)
                if name in _EVAL_GUARDS:
                    return True
                q = facts.tree.qualname(node.func) or ""
                if q in ("torch.autograd.grad", "torch.enable_grad", "torch.autograd.backward"):
                    return True
            if isinstance(node, cst.Attribute) and node.attr.value == "grad":
                return True
        return False

    @staticmethod
    def _callers_disable_grad(facts: Facts, fn: cst.FunctionDef | None) -> bool:
        if fn is None:
            return False
        for call in facts.tree.calls():
            target = call.func.value if isinstance(call.func, cst.Name) else (
                call.func.attr.value if isinstance(call.func, cst.Attribute) else None)
            if target == fn.name.value and facts.grad.grad_context(call) in ("off", "unknown"):
                return True
        for dec in fn.decorators:
            if facts.grad.grad_mode_of(dec.decorator) is not None:
                return True
        # a caller in another module runs it under `torch.no_grad()`
        return facts.project is not None and facts.tree.parent(fn) is facts.module \
            and facts.project.called_without_grad(fn.name.value)

    @staticmethod
    def _disabled_before(facts: Facts, scope: cst.CSTNode, loop: cst.CSTNode) -> bool:
        for call in facts.tree.calls_within(scope):
            q = facts.tree.qualname(call.func)
            if q == "torch.set_grad_enabled" and facts.tree.order.get(call, 0) < facts.tree.order.get(loop, 0):
                if facts.grad.grad_context(call) is None and not isinstance(facts.tree.parent(call), cst.WithItem):
                    return True
        return False

    @staticmethod
    def _results_are_host_data(facts: Facts, loop: cst.For, scope: cst.CSTNode) -> bool:
        """Whether every value leaving the loop is host data (so no graph can be needed)."""
        assigned: set[str] = set()
        for node in iter_nodes(loop.body):
            if isinstance(node, (cst.Return, cst.Yield)):
                return False
            if isinstance(node, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, (cst.Attribute, cst.Subscript)):
                        return False
                    for n in iter_nodes(t):
                        if isinstance(n, cst.Name):
                            assigned.add(n.value)
            if isinstance(node, cst.AugAssign) and not host_only(facts, node.value):
                return False
            if isinstance(node, cst.Call) and call_name(node) in ("append", "extend", "insert", "update"):
                if not all(host_only(facts, a.value) for a in node.args):
                    return False
        end = facts.tree.order.get(loop, 0)
        inside = set(iter_nodes(loop))
        for node in iter_nodes(scope):
            if isinstance(node, cst.Name) and node.value in assigned and node not in inside:
                if facts.tree.order.get(node, 0) > end and not isinstance(facts.tree.parent(node), cst.AssignTarget):
                    return False
        return True
