"""PF3 — optimizer and autograd: zero_grad, fused optimizers, grad modes, GradScaler order."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import add_arg, make_kwarg, parse_expr, parse_stmt, replace_arg_value
from perflint.analysis import Facts, call_name, get_arg, has_splat, iter_nodes, literal_value
from perflint.analysis.hotpath import WhyStep, snippet
from perflint.rules import register
from perflint.rules.base import Rule, Violation
from perflint.rules.precision.helpers import script_device


def _torch_prefix(facts: Facts) -> str | None:
    names = facts.imports.local_names_for("torch")
    if "torch" in names:
        return "torch"
    return names[0] if names else None


@register
class ZeroGradNotSetToNone(Rule):
    """
    ## What it does
    Flags `zero_grad(set_to_none=False)`, and a bare `zero_grad()` when the target torch is
    older than 2.0.

    ## Why is this bad?
    Zeroing gradients in place runs one memset per parameter and keeps the gradient
    memory allocated between steps; setting them to `None` skips both, and the next
    backward allocates fresh gradients. The PyTorch tuning guide calls the gain modest. Since
    torch 2.0 `set_to_none=True` is the default for both `Optimizer.zero_grad` and
    `nn.Module.zero_grad` (pytorch PR #92731), so a bare `zero_grad()` is already right
    there and is never reported.

    ## Example
    ```python
    optimizer.zero_grad(set_to_none=False)
    ```

    ## Use instead
    ```python
    optimizer.zero_grad()  # torch >= 2.0
    optimizer.zero_grad(set_to_none=True)  # torch 1.7 - 1.13
    ```

    ## Fix safety
    **Unsafe.** Code that reads `.grad` after zeroing (gradient statistics, custom
    clipping, `p.grad.add_(...)`) gets `None` instead of a zero tensor, and optimizers skip
    parameters whose gradient is `None` (which matters for weight decay with a zero
    gradient). An explicit `set_to_none=False` is often deliberate.

    ## Applies to
    Only where the call runs on every training step (the hot path of PF201: not once per
    epoch, not in a timing helper or code that does not train). Explicit
    `set_to_none=False`: all versions. Bare `zero_grad()`: target torch 1.7–1.13
    (before 1.7 there is no `set_to_none` to pass; from 2.0 it is the default), and not on
    an instance of a wrapper class of the project (a learning-rate scheduler around the
    optimizer, such as `ScheduledOptim`) whose own `zero_grad` takes no `set_to_none`.
    Strict review of whole public repositories (issue 21, three review sheets): 48 right of
    48 reviewed findings still reported (1.00), up from 18 of 28 (0.64).

    ## References
    - pytorch/pytorch PRs #42754 (set_to_none), #92731 (default True in 2.0)
    - PyTorch performance tuning guide, "Use parameter.grad = None instead of model.zero_grad()"
    """

    code = "PF301"
    name = "zero-grad-not-set-to-none"
    summary = "gradients zeroed in place instead of set to None"
    fix_class = "unsafe"
    tokens = (b"zero_grad",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        modern = facts.target_torch >= (2, 0)
        for call in facts.calls():
            if call_name(call) != "zero_grad" or not isinstance(call.func, cst.Attribute) or has_splat(call):
                continue
            if facts.hot_path(call) is None:
                continue  # not once per step: once per epoch, a timing helper, code that does not train
            arg = get_arg(call, "set_to_none", 0)
            if arg is not None:
                if literal_value(arg.value) is not False:
                    continue
                if modern:
                    new = call.with_changes(args=[])
                    fix_msg = "Drop `set_to_none=False` (gradients are set to None by default since torch 2.0)"
                else:
                    new = replace_arg_value(call, arg, "True")
                    fix_msg = "Use `set_to_none=True`"
                yield Violation(
                    call.func.attr,
                    "`zero_grad(set_to_none=False)` zeroes every gradient with a memset; set them to None instead "
                    "(unless the code reads `.grad` after zeroing)",
                    self.unsafe(fix_msg, {call: new}),
                )
            elif not modern and call.args == ():
                if facts.target_torch < (1, 7):
                    continue  # `set_to_none` does not exist before 1.7: nothing to pass
                if _wrapper_receiver(facts, call.func.value):
                    continue  # a wrapper class's own zero_grad(): its signature is its own
                fix = self.unsafe("Use `zero_grad(set_to_none=True)`", {call: add_arg(call, make_kwarg("set_to_none", "True"))})
                yield Violation(
                    call.func.attr,
                    "`zero_grad()` zeroes gradients in place before torch 2.0; pass `set_to_none=True`",
                    fix,
                )


def _wrapper_receiver(facts: Facts, recv: cst.BaseExpression) -> bool:
    """`recv` holds an instance of a class of this file or the project that is neither a
    module nor a torch optimizer (a learning-rate wrapper such as `ScheduledOptim`): its
    `zero_grad` may take no `set_to_none`. A class of this file whose own `zero_grad`
    accepts `set_to_none` (or `**kwargs`) is not such a wrapper."""
    ref = facts.instance_class(recv)
    if ref is None:
        return False
    if ref.startswith("#"):
        cls = facts.classes_by_name.get(ref[1:])
        if cls is None:
            return False
        for fn in facts.nodes_within(cls, cst.FunctionDef):
            if fn.name.value == "zero_grad" and facts.enclosing_class(fn) is cls:
                params = fn.params
                names = {p.name.value for p in (*params.params, *params.kwonly_params, *params.posonly_params)}
                return "set_to_none" not in names and not isinstance(params.star_kwarg, cst.Param)
        bases = {facts.qualname(b.value) or "" for b in cls.bases}
        return not any(b.startswith(("torch.optim.", "torch.nn.")) for b in bases) and "model" not in facts.kinds(recv)
    kinds = facts.project.class_kinds(ref) if facts.project is not None else frozenset()
    return not ({"model", "optimizer"} & set(kinds))


_FUSABLE = {"torch.optim.Adam", "torch.optim.AdamW"}


@register
class UnfusedOptimizer(Rule):
    """
    ## What it does
    Flags `torch.optim.Adam(...)` and `torch.optim.AdamW(...)` without `fused` or `foreach`
    in CUDA code.

    ## Why is this bad?
    The default on CUDA is the `foreach` implementation (a few multi-tensor kernels per
    step); `fused=True` does the whole update in one kernel per parameter group and lets a
    GradScaler skip its per-step `.item()` sync. The end-to-end gain on GPUs is small:
    torchtitan PR #355 measured +1.5–2% MFU (Llama-3 8B, 8×A100), deepmd-kit PR #4463 an
    optimizer step of 22 → 8 ms (~3% end to end), and pytorch issue #121857 found fused
    *slower* on an A40. On CPU (torch ≥ 2.4) the step itself is much faster: AdamW over 200
    × 1k parameters took 79 ms with the for-loop, 44 ms foreach, 5.6 ms fused (torch 2.13, 2
    cores). On an H100 80GB (torch
    2.11, `python benchmarks/rule_effects.py`; results in
    `benchmarks/results/h100/rule_effects/`), `AdamW.step()` over 151M parameters in 144
    tensors took 4.70 ms with the default (foreach) and 1.62 ms fused (2.9×) — the optimizer
    step alone; what that is worth end to end is its share of the step. Expect 0–3% on a
    GPU.

    ## Example
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    ```

    ## Fix safety
    **Unsafe.** Results are not bit-identical (max difference 3e-8 after 5 AdamW steps),
    `fused=True` raises for non-floating-point or unsupported-device parameters and with
    `differentiable=True`, and before torch 2.4 it raises for parameters on the CPU. The
    fix is offered for target torch ≥ 2.4, or ≥ 2.0 when the model is moved with
    `.cuda()` or, before the optimizer is built, to the script's device. When the model is moved to the script's own device (`.to(device)`,
    `.to(args.device)`) and that device may not be CUDA, the fix writes
    `fused=device.type == "cuda"` (`fused=torch.device(args.device).type == "cuda"` for a
    string option): fused on CUDA, and on the CPU the same for-loop update as the default
    (`fused=False` is accepted on every device since torch 2.0; on xpu/mtia it also turns
    off the foreach default). `fused=True` stays when the model is moved with `.cuda()` or
    no device expression is bound at the optimizer. SGD is never flagged: fused SGD with a GradScaler reads an uninitialised
    momentum buffer after a skipped first step (reproduced on CPU with torch 2.13; the same
    failure was reported on CUDA in LibreYOLO PR #771). Third-party optimizers are left
    alone.

    ## Applies to
    CUDA code; Adam and AdamW only; target torch ≥ 2.0 (AdamW has no `fused` before 2.0, so a
    project that supports 1.x gets no finding: the advice would break it there). Strict
    review of whole public repositories (issue 21, three review sheets): 16 right of 19
    reviewed findings still reported (0.84), up from 25 of 38 (0.66).

    ## References
    - `torch/optim/adamw.py` (2.13), pytorch PRs #88015, #123074, #124905
    - Measured (torch 2.13, CPU): after a skipped first step, fused SGD with momentum holds a
      momentum buffer of ~2e37 and parameters of ~-6e33, where the default stays at 0.9
    """

    code = "PF302"
    name = "unfused-optimizer"
    summary = "Adam/AdamW without fused=True in CUDA code"
    severity = Severity.INFO
    fix_class = "unsafe"
    # AdamW has `fused` from 2.0 (Adam from 1.13, CUDA only): below that there is nothing to advise.
    min_torch = (2, 0)
    tokens = (b"Adam",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.is_cuda_code:
            return
        for call in facts.calls():
            q = facts.qualname(call.func)
            if q not in _FUSABLE or has_splat(call):
                continue
            if any(get_arg(call, k) is not None for k in ("fused", "foreach")):
                continue
            diff = get_arg(call, "differentiable")
            if diff is not None and literal_value(diff.value) is not False:
                continue
            fix = None
            # The script's own device when it may not be CUDA: fused only there.
            test, move = script_device(facts, call, facts.enclosing_function(call), models_only=True)
            # Before 2.4 `fused=True` needs the parameters on CUDA when the optimizer is built:
            # a model moved to the tested device before this call has them there.
            moved_before = test is not None and move is not None and facts.order[move] < facts.order[call] \
                and facts.scope_of(move) is facts.scope_of(call)
            if facts.target_torch >= (2, 4) or (facts.target_torch >= (2, 0) and (self._model_on_cuda(facts) or moved_before)):
                value = test or "True"
                fix = self.unsafe(f"Add `fused={value}`", {call: add_arg(call, make_kwarg("fused", value))})
            short = q.rsplit(".", 1)[-1]
            yield Violation(
                call,
                f"`{short}` without `fused=True` launches several kernels per step; `fused=True` does the update in "
                "one (small end-to-end gain on GPUs; SGD is not flagged because fused SGD mishandles a "
                "GradScaler-skipped step)",
                fix,
            )

    @staticmethod
    def _model_on_cuda(facts: Facts) -> bool:
        for call in facts.calls():
            if call_name(call) == "cuda" and facts.has_kind(call.func.value if isinstance(call.func, cst.Attribute) else None, "model"):
                return True
        return False


def _no_grad_items(facts: Facts, with_node: cst.With) -> list[cst.WithItem]:
    out = []
    for item in with_node.items:
        target = item.item.func if isinstance(item.item, cst.Call) else item.item
        if facts.qualname(target) == "torch.no_grad":
            out.append(item)
    return out


_LAZY_STATE = ("register_buffer",)


@register
class NoGradInEval(Rule):
    """
    ## What it does
    Flags `torch.no_grad()` — as a `with` block or a decorator — around evaluation or
    inference code that could use `torch.inference_mode()` instead.

    ## Why is this bad?
    `inference_mode` also disables view tracking and version-counter bumps. The gain is
    marginal: within noise on CPU (8-layer MLP 118.1 µs vs 121.0 µs per forward, torch 2.13),
    3.7 s → 3.6 s for a
    CIFAR-10 evaluation on a GPU (pytorch-ignite #2193). That is why this rule is off by
    default.

    ## Example
    ```python
    @torch.no_grad()
    def evaluate(model, loader):
        return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)
    ```

    ## Use instead
    ```python
    @torch.inference_mode()
    def evaluate(model, loader):
        ...
    ```

    ## Fix safety
    **Unsafe.** Tensors created under `inference_mode` cannot be saved for backward
    ("Inference tensors cannot be saved for backward"), updated in place outside it, or
    given `requires_grad`. Not reported for a block that runs once while the model is
    built (in `__init__`, a `build*`/`setup` method, or a shape probe that runs the model on
    `torch.zeros(...)` to size a layer). Not reported when a tensor created in the block escapes: it is
    returned or yielded, stored on `self` or another object, appended to or stored in a
    container from outside the block, updated in place, or read after the block; nor when a
    module class in the file creates state lazily in `forward` (buffers, caches). Models
    defined elsewhere may still create such state: review the diff.

    ## Applies to
    Target torch ≥ 1.9 (when `inference_mode` appeared).

    ## References
    - `torch.inference_mode` documentation
    - Measured (torch 2.13): a tensor made under `inference_mode` and then used in autograd
      raises "Inference tensors cannot be saved for backward"
    """

    code = "PF303"
    name = "no-grad-in-eval"
    summary = "`torch.no_grad()` where `torch.inference_mode()` fits"
    severity = Severity.INFO
    fix_class = "unsafe"
    default = False
    min_torch = (1, 9)
    tokens = (b"no_grad",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        prefix = _torch_prefix(facts)
        if self._lazy_state(facts):
            return
        for node in facts.index[cst.With]:
            items = _no_grad_items(facts, node)
            if not items or not self._is_inference(facts, node.body) or self._escapes(facts, node.body, node):
                continue
            if self._runs_once(facts, node):
                continue
            fix = None
            if prefix is not None:
                repl = {it.item: parse_expr(f"{prefix}.inference_mode()") for it in items}
                fix = self.unsafe("Use `torch.inference_mode()`", repl)
            yield Violation(node, "evaluation under `torch.no_grad()` could use `torch.inference_mode()`", fix)
        for fn in facts.index[cst.FunctionDef]:
            for dec in fn.decorators:
                target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
                if facts.qualname(target) != "torch.no_grad":
                    continue
                if not self._is_inference(facts, fn.body) or self._escapes(facts, fn.body, fn):
                    continue
                fix = None
                if prefix is not None:
                    fix = self.unsafe("Use `torch.inference_mode()`",
                                      {dec: dec.with_changes(decorator=parse_expr(f"{prefix}.inference_mode()"))})
                yield Violation(dec, "evaluation under `@torch.no_grad()` could use `@torch.inference_mode()`", fix)

    @staticmethod
    def _runs_once(facts: Facts, node: cst.With) -> bool:
        """A block that runs once while the model is built: in `__init__` / a `build*` or
        `setup` method, or a shape probe (the model run on `torch.zeros(...)`-like input to
        size a layer). Nothing is gained there."""
        fn = facts.enclosing_function(node)
        if fn is not None and (fn.name.value in ("__init__", "setup", "__post_init__")
                               or fn.name.value.lstrip("_").startswith("build")):
            return True
        calls = [n for n in iter_nodes(node.body) if isinstance(n, cst.Call) and facts.has_kind(n.func, "model")]
        if not calls:
            return False
        for c in calls:
            args = [a.value for a in c.args]
            if not args or not all(isinstance(a, cst.Call) and (facts.qualname(a.func) or "").rsplit(".", 1)[-1]
                                   in ("zeros", "ones", "randn", "rand", "empty", "zeros_like", "ones_like")
                                   for a in args):
                return False
        return True

    @staticmethod
    def _lazy_state(facts: Facts) -> bool:
        """A module class in the file that creates state in forward: inference tensors would stick."""
        for fn in facts.index[cst.FunctionDef]:
            if fn.name.value != "forward":
                continue
            for node in iter_nodes(fn.body):
                if isinstance(node, cst.Call) and call_name(node) in _LAZY_STATE:
                    return True
                if isinstance(node, (cst.Assign, cst.AugAssign)):
                    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, (cst.Attribute, cst.Subscript)):
                            return True
        return False

    @staticmethod
    def _is_inference(facts: Facts, body: cst.CSTNode) -> bool:
        calls = [n for n in iter_nodes(body) if isinstance(n, cst.Call)]
        has_model = any(facts.has_kind(c.func, "model") for c in calls)
        return has_model

    @staticmethod
    def _escapes(facts: Facts, body: cst.CSTNode, container: cst.CSTNode) -> bool:
        assigned: set[str] = set()
        for node in iter_nodes(body):
            if isinstance(node, (cst.Return, cst.Yield)) and node.value is not None:
                if not _host_only(facts, node.value):
                    return True
            if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                host_value = node.value is not None and _host_only(facts, node.value)
                for t in targets:
                    for n in iter_nodes(t):
                        if isinstance(n, (cst.Attribute, cst.Subscript)) and n is t:
                            return True  # stored on an object or into a container
                        if isinstance(n, cst.Name) and not (host_value and n is t):
                            assigned.add(n.value)
                    if isinstance(node, cst.AugAssign) and isinstance(t, cst.Name) and not _host_only(facts, node.value):
                        return True  # in-place on an outer tensor
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                name = node.func.attr.value
                if name.endswith("_") and not name.startswith("_") and name not in ("item_",):
                    return True  # in-place update (EMA, copy_, …)
                if name in ("append", "extend", "insert", "update", "add", "put", "setdefault"):
                    if not all(_host_only(facts, a.value) for a in node.args):
                        return True
        # Names bound in the block and read after it.
        if assigned:
            scope = facts.enclosing_function(container) or facts.module
            end = facts.order.get(container, 0)
            inside = set(iter_nodes(container))
            for node in iter_nodes(scope):
                if isinstance(node, cst.Name) and node.value in assigned and node not in inside:
                    if facts.order.get(node, 0) > end:
                        parent = facts.parent(node)
                        if isinstance(parent, cst.AssignTarget):
                            continue
                        if _host_only_use(facts, node):
                            continue
                        return True
        return False


def _host_only(facts: Facts, expr: cst.BaseExpression) -> bool:
    """Numbers, strings, host copies (`.item()`, `.tolist()`, `.cpu().numpy()`)."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return True
    ks = facts.kinds(expr)
    if ks and ks <= {"number", "numpy", "int"}:
        return True
    for n in iter_nodes(expr):
        if isinstance(n, cst.Call) and call_name(n) in ("item", "tolist", "numpy"):
            return True
    return _python_int(expr)


def _python_int(expr: cst.BaseExpression) -> bool:
    """`y.size(0)`, `x.shape[0]`, `len(batch)`, `t.numel()`, and sums of them: Python ints."""
    if isinstance(expr, cst.BinaryOperation):
        return _python_int(expr.left) and _python_int(expr.right)
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Name) and expr.func.value == "len":
            return True
        return isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("size", "numel", "dim", "ndimension") \
            and (expr.func.attr.value != "size" or len(expr.args) == 1)
    if isinstance(expr, cst.Subscript):
        return isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape"
    return False


def _host_only_use(facts: Facts, node: cst.CSTNode) -> bool:
    kinds = facts.kinds(node)
    return bool(kinds) and kinds <= {"number", "numpy", "int"}


_EVAL_GUARDS = ("backward", "manual_backward", "requires_grad_", "enable_grad")


@register
class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Flags evaluation loops that run a model after `model.eval()` with autograd still
    recording: no `torch.no_grad()`, `torch.inference_mode()` or
    `torch.set_grad_enabled(False)` around the loop, on the function, or around the calls
    of that function in the same file. One finding per loop, on its `for` line.

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
    applies `no_grad`/`inference_mode` (yolov5's `@smart_inference_mode()`), nor for a loop
    over the samples of one batch drawn with `next(iter(loader))` (a sample grid) or a loop
    that returns after its first pass.

    ## Applies to
    All torch versions.

    ## References
    - PyTorch tuning guide, "Disable gradient calculation for validation or inference"
    - `torch.no_grad` documentation
    """

    code = "PF304"
    name = "eval-without-no-grad"
    summary = "evaluation loop after `.eval()` with autograd still on"
    fix_class = "safe or unsafe"
    tokens = (b".eval(",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        prefix = _torch_prefix(facts)
        reported: set = set()
        for eval_call in facts.calls():
            if call_name(eval_call) != "eval" or eval_call.args or not isinstance(eval_call.func, cst.Attribute):
                continue
            model_text = facts.receiver_text(eval_call.func.value)
            if model_text is None:
                continue
            fn = facts.enclosing_function(eval_call)
            scope: cst.CSTNode = fn if fn is not None else facts.module
            if fn is not None and fn.name.value in ("forward", "training_step", "validation_step", "test_step",
                                                     "predict_step"):
                continue
            if self._callers_disable_grad(facts, fn) or facts.grad_context(eval_call) == "off":
                continue
            loop = self._eval_loop(facts, eval_call, fn, model_text)
            if loop is None or loop in reported:
                continue
            if facts.grad_context(loop) is not None or self._disabled_before(facts, scope, loop):
                continue
            if self._autograd_on_purpose(facts, loop) or self._train_between(facts, scope, eval_call, loop, model_text):
                continue
            if facts.over_one_batch(loop) or facts.once_only(loop):
                continue  # the samples of one batch (a sample grid), a loop that returns at once
            during = facts.during_training(loop) or []
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
        start = facts.order.get(eval_call, 0)
        candidates = sorted(
            (l for l in facts.index[cst.For] if facts.order.get(l, 0) > start and facts.enclosing_function(l) is fn),
            key=lambda l: facts.order.get(l, 0),
        )
        for loop in candidates:
            if any(isinstance(a, (cst.For, cst.While)) and facts.order.get(a, 0) > start for a in facts.ancestors(loop)):
                continue
            for call in facts.calls_within(loop.body):
                target = call.func
                if isinstance(target, cst.Attribute) and target.attr.value in ("forward", "generate"):
                    target = target.value
                if facts.receiver_text(target) == model_text and facts.grad_context(call) is None:
                    return loop
        return None

    @staticmethod
    def _train_between(facts: Facts, scope, eval_call, loop, model_text: str) -> bool:
        lo, hi = facts.order.get(eval_call, 0), facts.order.get(loop, 0)
        for call in facts.calls_within(scope):
            if call_name(call) == "train" and isinstance(call.func, cst.Attribute) and \
                    facts.receiver_text(call.func.value) == model_text and lo < facts.order.get(call, 0) < hi:
                return True
        return False

    @staticmethod
    def _autograd_on_purpose(facts: Facts, scope: cst.CSTNode) -> bool:
        for node in iter_nodes(scope):
            if isinstance(node, cst.Call):
                name = call_name(node)
                if name in _EVAL_GUARDS:
                    return True
                q = facts.qualname(node.func) or ""
                if q in ("torch.autograd.grad", "torch.enable_grad", "torch.autograd.backward"):
                    return True
            if isinstance(node, cst.Attribute) and node.attr.value == "grad":
                return True
        return False

    @staticmethod
    def _callers_disable_grad(facts: Facts, fn: cst.FunctionDef | None) -> bool:
        if fn is None:
            return False
        for call in facts.calls():
            target = call.func.value if isinstance(call.func, cst.Name) else (
                call.func.attr.value if isinstance(call.func, cst.Attribute) else None)
            if target == fn.name.value and facts.grad_context(call) in ("off", "unknown"):
                return True
        for dec in fn.decorators:
            if facts.grad_mode_of(dec.decorator) is not None:
                return True
        return False

    @staticmethod
    def _disabled_before(facts: Facts, scope: cst.CSTNode, loop: cst.CSTNode) -> bool:
        for call in facts.calls_within(scope):
            q = facts.qualname(call.func)
            if q == "torch.set_grad_enabled" and facts.order.get(call, 0) < facts.order.get(loop, 0):
                if facts.grad_context(call) is None and not isinstance(facts.parent(call), cst.WithItem):
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
            if isinstance(node, cst.AugAssign) and not _host_only(facts, node.value):
                return False
            if isinstance(node, cst.Call) and call_name(node) in ("append", "extend", "insert", "update"):
                if not all(_host_only(facts, a.value) for a in node.args):
                    return False
        end = facts.order.get(loop, 0)
        inside = set(iter_nodes(loop))
        for node in iter_nodes(scope):
            if isinstance(node, cst.Name) and node.value in assigned and node not in inside:
                if facts.order.get(node, 0) > end and not isinstance(facts.parent(node), cst.AssignTarget):
                    return False
        return True


def _clip_call(facts: Facts, call: cst.Call) -> bool:
    q = facts.qualname(call.func) or ""
    return q in ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm")


def _scaled_backward(facts: Facts, call: cst.Call) -> str | None:
    """For `scaler.scale(loss).backward()`, the scaler's text."""
    if call_name(call) != "backward" or not isinstance(call.func, cst.Attribute):
        return None
    inner = call.func.value
    if isinstance(inner, cst.Call) and call_name(inner) == "scale" and isinstance(inner.func, cst.Attribute):
        if facts.has_kind(inner.func.value, "scaler"):
            return facts.receiver_text(inner.func.value)
    return None


def _iteration_calls(facts: Facts, region: cst.CSTNode) -> list[cst.Call]:
    """Calls of one iteration of a loop/step function, in source order."""
    return sorted(
        (c for c in facts.calls_within(region) if not _in_nested_def(facts, c, region)),
        key=lambda c: facts.order.get(c, 0),
    )


def _in_nested_def(facts: Facts, node: cst.CSTNode, region: cst.CSTNode) -> bool:
    for a in facts.ancestors(node):
        if a is region:
            return False
        if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return True
    return False


def _regions(facts: Facts) -> list[cst.CSTNode]:
    """Where one training iteration's calls can be read in order: training loops, per-step
    functions, and any function that runs a scaled backward outside a loop."""
    regions = list(facts.training_loops())
    for fn in facts.index[cst.FunctionDef]:
        if facts.step_function_kind(fn) == "train" or any(
            _scaled_backward(facts, c) for c in facts.direct_body_calls(fn)
        ):
            regions.append(fn)
    return regions


def _exclusive(facts: Facts, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether `a` and `b` sit in different arms of one `if`/`else`."""
    set_b = set(facts.ancestors(b))
    for node in facts.ancestors(a):
        if node in set_b:
            if isinstance(node, cst.If):
                return facts.is_inside(a, node.body) != facts.is_inside(b, node.body)
            return False
    return False


def _runs_at_most_with(facts: Facts, stmt: cst.CSTNode, block: cst.CSTNode | None) -> bool:
    """`stmt` sits in `block`, or under conditionals within it, but under no loop or function
    of its own: it runs at most once each time `block` runs."""
    for node in facts.ancestors(stmt):
        if node is block:
            return True
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
    return False


@register
class ClipWithoutUnscale(Rule):
    """
    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_`/`clip_grad_value_` between
    `scaler.scale(loss).backward()` and `scaler.step(optimizer)` with no
    `scaler.unscale_(optimizer)` in the iteration.

    ## Why is this bad?
    The gradients are still multiplied by the loss scale (65536 at the start), so the clip
    threshold is compared against scaled norms and clipping is either always on or
    meaningless. Verified (torch 2.13, `GradScaler("cpu")`): the reported total norm was
    1,781,934 without `unscale_` and 27.19 with it. This silently changes training, so it is
    an error.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    **Safe**: inserts `scaler.unscale_(optimizer)` right before the clip, using the
    optimizer passed to the next `scaler.step(...)`. `scaler.step` skips its own unscaling
    when `unscale_` was already called, so the update is the intended one. Not offered when
    that optimizer cannot be found; never when an `unscale_` is already in the iteration
    (a second call raises "unscale_() has already been called on this optimizer since the
    last update()"), nor when the clip may run more often than `scaler.step(...)` (the step under an
    `if` the clip is not under, or the clip in a loop of its own): a clip on every
    micro-batch of gradient accumulation with a step on every k-th would call `unscale_`
    twice before `update()`, which raises the same error.

    ## Applies to
    All torch versions with AMP (`torch.amp` and the older `torch.cuda.amp`).

    ## References
    - PyTorch AMP examples, "Gradient clipping"
    - Measured (torch 2.13, `GradScaler("cpu")`, scale 65536): `clip_grad_norm_` without
      `unscale_` saw a total norm of 1,781,934; with it, 27.19
    """

    code = "PF305"
    name = "clip-without-unscale"
    summary = "gradient clipping on scaled gradients (no scaler.unscale_)"
    severity = Severity.ERROR
    fix_class = "safe"
    tokens = (b"clip_grad",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        seen: set = set()
        for region in _regions(facts):
            calls = _iteration_calls(facts, region)
            scaled = [(c, _scaled_backward(facts, c)) for c in calls]
            scaled = [(c, s) for c, s in scaled if s is not None]
            if not scaled:
                continue
            for clip in calls:
                if clip in seen or not _clip_call(facts, clip):
                    continue
                before = [s for c, s in scaled if facts.order[c] < facts.order[clip] and not _exclusive(facts, c, clip)]
                if not before:
                    continue
                scaler = before[-1]
                if any(call_name(c) == "unscale_" and facts.receiver_text(c.func.value) == scaler
                       for c in calls if isinstance(c.func, cst.Attribute)):
                    continue
                step = next(
                    (c for c in calls if facts.order[c] > facts.order[clip] and call_name(c) == "step"
                     and isinstance(c.func, cst.Attribute) and facts.receiver_text(c.func.value) == scaler),
                    None,
                )
                if step is None:
                    continue
                seen.add(clip)
                fix = None
                stmt = facts.statement_of(clip)
                opt = step.args[0].value if step.args and not step.args[0].keyword else None
                # Only where clip and step run together: a clip that runs on more steps than
                # the optimizer step (gradient accumulation, `if (i + 1) % k == 0: step`)
                # would call `unscale_` twice before `update()`, which raises.
                step_stmt = facts.statement_of(step)
                if opt is not None and isinstance(stmt, cst.SimpleStatementLine) and isinstance(
                        facts.parent(stmt), (cst.IndentedBlock, cst.Module)) \
                        and _runs_at_most_with(facts, stmt, facts.parent(step_stmt)):
                    opt_code = cst.Module(body=[]).code_for_node(opt)
                    new_stmt = parse_stmt(f"{scaler}.unscale_({opt_code})\n")
                    fix = self.safe(
                        f"Insert `{scaler}.unscale_({opt_code})` before clipping",
                        {stmt: cst.FlattenSentinel([new_stmt.with_changes(leading_lines=stmt.leading_lines),
                                                    stmt.with_changes(leading_lines=[])])},
                    )
                yield Violation(
                    clip,
                    f"gradients are clipped while still scaled by `{scaler}`: call `{scaler}.unscale_(optimizer)` "
                    "before clipping, or the threshold is compared with scaled norms",
                    fix,
                )


@register
class ScalerMisuse(Rule):
    """
    ## What it does
    Flags two GradScaler mistakes in a training iteration: `scaler.scale(loss).backward()`
    followed by a bare `optimizer.step()` (instead of `scaler.step(optimizer)`), and
    `scaler.step(optimizer)` with no `scaler.update()` in the iteration.

    ## Why is this bad?
    A bare `optimizer.step()` after a scaled backward updates the weights with gradients
    still multiplied by the loss scale (65536 at the start) and skips the inf/NaN check, so
    one overflow writes infinities into the weights. Without `scaler.update()` the scale
    never adapts, and the next `scaler.step` raises "step() has already been called since
    the last update()". Both are correctness bugs, hence errors.

    ## Example
    ```python
    scaler.scale(loss).backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    No fix: which optimizer steps through the scaler, and where the update belongs (once
    per iteration, after every `scaler.step`), is the author's structure to choose.

    ## Applies to
    All torch versions with AMP.

    ## References
    - PyTorch AMP documentation, "Typical Mixed Precision Training"
    - Measured (torch 2.13): a second `scaler.step` before `update()` raises "step() has
      already been called since the last update()"
    """

    code = "PF306"
    name = "scaler-misuse"
    summary = "GradScaler used wrongly (bare optimizer.step() or no scaler.update())"
    severity = Severity.ERROR
    tokens = (b"scale",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        seen: set = set()
        for region in _regions(facts):
            calls = _iteration_calls(facts, region)
            scaled = [(c, _scaled_backward(facts, c)) for c in calls]
            scaled = [(c, s) for c, s in scaled if s is not None]
            if not scaled:
                continue
            scaler_texts = {s for _, s in scaled}
            stepped_via_scaler = {
                facts.receiver_text(c.args[0].value)
                for c in calls
                if call_name(c) == "step" and isinstance(c.func, cst.Attribute)
                and facts.receiver_text(c.func.value) in scaler_texts and c.args
            }
            for c in calls:
                if c in seen or call_name(c) != "step" or not isinstance(c.func, cst.Attribute):
                    continue
                recv = facts.receiver_text(c.func.value)
                if recv in scaler_texts:
                    # scaler.step(opt): is there an update in the iteration?
                    if not any(call_name(u) == "update" and isinstance(u.func, cst.Attribute)
                               and facts.receiver_text(u.func.value) == recv for u in calls):
                        seen.add(c)
                        yield Violation(c, f"`{recv}.step()` without `{recv}.update()` in the iteration: the loss scale "
                                           "never adapts and the next step raises")
                    continue
                if not facts.is_optimizer_step(c) or facts.has_kind(c.func.value, "scaler"):
                    continue
                if recv in stepped_via_scaler:
                    continue
                if any(facts.receiver_text(a.value) in scaler_texts or facts.has_kind(a.value, "scaler")
                       for a in c.args):
                    continue  # a wrapper given the scaler steps through it: `opts.step("g", scaler=scaler)`
                before = [b for b, _ in scaled if facts.order[b] < facts.order[c] and not _exclusive(facts, b, c)]
                if not before:
                    continue
                seen.add(c)
                yield Violation(
                    c,
                    f"`{recv}.step()` after a scaled backward steps with gradients still multiplied by the loss scale "
                    "and skips the inf check; use `scaler.step(optimizer)` then `scaler.update()`",
                )


_DEBUG_APIS = {
    "torch.autograd.set_detect_anomaly": "anomaly",
    "torch.autograd.detect_anomaly": "anomaly",
    "torch.autograd.profiler.profile": "profiler",
    "torch.autograd.profiler.emit_nvtx": "profiler",
    "torch.autograd.profiler.record_function": None,
}


@register
class DebugModeLeftOn(Rule):
    """
    ## What it does
    Flags autograd debugging switched on unconditionally: `torch.autograd.set_detect_anomaly(True)`,
    `torch.autograd.detect_anomaly()`, and (in files with a training loop)
    `torch.autograd.profiler.profile(...)` / `emit_nvtx()`. Calls guarded by a flag — under an
    `if`, or with a non-literal argument such as `set_detect_anomaly(args.debug)` or
    `profile(enabled=args.profile)` — are left alone.

    ## Why is this bad?
    Anomaly detection records a stack trace for every autograd node and checks every
    backward output for NaN. Measured (torch 2.13, CPU, small MLP forward+backward):
    805 µs → 4304 µs per step, **5.3× slower**. The autograd profiler and
    NVTX ranges add per-operator overhead too.

    ## Example
    ```python
    torch.autograd.set_detect_anomaly(True)
    ```

    ## Use instead
    ```python
    torch.autograd.set_detect_anomaly(args.debug)
    ```

    ## Fix safety
    No fix: whether the switch is a leftover or deliberate is the author's call.

    ## Applies to
    All torch versions.

    ## References
    - PyTorch tuning guide, "Disable debugging APIs"
    - `torch.autograd.detect_anomaly` documentation
    """

    code = "PF307"
    name = "debug-mode-left-on"
    summary = "anomaly detection or the autograd profiler left on"
    tokens = (b"anomaly", b"profiler", b"emit_nvtx")

    def check(self, facts: Facts) -> Iterator[Violation]:
        has_training = bool(facts.training_loops()) or any(
            facts.step_function_kind(fn) == "train" for fn in facts.index[cst.FunctionDef]
        )
        for call in facts.calls():
            q = facts.qualname(call.func)
            kind = _DEBUG_APIS.get(q or "")
            if kind is None:
                continue
            if kind == "profiler" and not has_training:
                continue
            if self._guarded(facts, call, q):
                continue
            what = "anomaly detection" if kind == "anomaly" else "the autograd profiler"
            yield Violation(
                call,
                f"{what} is switched on unconditionally (anomaly detection measured 5.3× slower per step); "
                "guard it with a debug flag",
            )

    @staticmethod
    def _guarded(facts: Facts, call: cst.Call, q: str) -> bool:
        if q == "torch.autograd.set_detect_anomaly":
            arg = get_arg(call, "mode", 0)
            if arg is None or literal_value(arg.value) is not True:
                return True
        elif q != "torch.autograd.detect_anomaly":
            enabled = get_arg(call, "enabled", 0)
            if enabled is not None and literal_value(enabled.value) is not True:
                return True
        for a in facts.ancestors(call):
            if isinstance(a, (cst.If, cst.IfExp)):
                return True
            if isinstance(a, cst.FunctionDef):
                break
        return False
