"""PF301 zero-grad-not-set-to-none: gradients zeroed in place instead of set to None."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, make_kwarg, replace_arg_value
from perflint.analysis import Facts, call_name, get_arg, has_splat, literal_value
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import off_by_default
from perflint.analysis.vocab import Kind


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
    epoch, not in a timing helper or code that does not train; with every optimizer step
    counts, also under the `if (i + 1) % k == 0:` that matches a callable scaler's
    `update_grad=(i + 1) % k == 0`, MAE's and ConvNeXt's step; not in a branch that a run with
    every option at its default does not take, `if args.amp:` with `default=0` and no
    documented command line passing `--amp`). Explicit
    `set_to_none=False`: all versions. Bare `zero_grad()`: target torch 1.7–1.13
    (before 1.7 there is no `set_to_none` to pass; from 2.0 it is the default), and not on
    an instance of a wrapper class of the project (a learning-rate scheduler around the
    optimizer, such as `ScheduledOptim`) whose own `zero_grad` takes no `set_to_none`, nor
    on a parameter of the function (whatever the callers pass) in a file that defines or
    imports such an optimizer wrapper, one with a `step` (fastai's `OptimWrapper`, handed to
    `loss_batch(..., opt)` in DeOldify; a model container's `zero_grad(self)` does not count), nor
    on a name or `self.` attribute that may hold a library wrapper whose `zero_grad` takes no
    `set_to_none` (apex's `LARC`, wrapped around SGD under SimSiam's documented `--lars`; apex's
    `FP16_Optimizer`; fairseq's optimizers), nor on a parameter in a file that builds one, nor
    for `super().zero_grad()` in a class none of whose bases is a torch optimizer or module
    (nanotron's optimizer wrappers calling their base wrapper's). Not in a function named
    for evaluation or inspection (`val`, `evaluate`, `gradcam` …) that steps no optimizer:
    its backward feeds a saliency or Grad-CAM map (ALBEF's grounding evaluation).
    Strict review of whole public repositories (issue 21, three review sheets): 48 right of
    48 reviewed findings still reported (1.00), up from 18 of 28 (0.64).

    ## References
    - pytorch/pytorch PRs #42754 (set_to_none), #92731 (default True in 2.0)
    - PyTorch performance tuning guide, "Use parameter.grad = None instead of model.zero_grad()"
    """

    code = "PF301"
    name = "zero-grad-not-set-to-none"
    summary = "gradients zeroed in place instead of set to None"
    fix_class = FixClass.UNSAFE
    tokens = (b"zero_grad",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        modern = facts.target_torch >= (2, 0)
        for call in facts.tree.calls():
            if call_name(call) != "zero_grad" or not isinstance(call.func, cst.Attribute) or has_splat(call):
                continue
            if facts.hotpath.hot_path(call) is None:
                continue  # not once per step: once per epoch, a timing helper, code that does not train
            if _inspects_gradients(facts, call):
                continue  # `def val(...)`: `model.zero_grad(); loss.backward()` for a Grad-CAM map, no step
            if off_by_default(facts, call):
                continue  # `if use_amp:` with `--use_amp` off by default and in no documented run
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


_EVALUATION_FN = re.compile(r"^_?(val|valid|validate|validation|eval|evaluate|test|visuali[sz]e|grad_?cam|saliency|"
                           r"explain|attribut|ground)", re.I)


def _inspects_gradients(facts: Facts, call: cst.Call) -> bool:
    """`call` sits in a function named for evaluation or inspection (`val`, `evaluate`,
    `gradcam`) that steps no optimizer: the backward it zeroes for is read by hooks or
    from `.grad` (ALBEF's grounding evaluation), not applied to the weights."""
    fn = facts.tree.enclosing_function(call)
    if fn is None or not _EVALUATION_FN.match(fn.name.value):
        return False
    return not any(facts.steps.is_optimizer_step(c) or facts.steps.is_scaler_call_step(c) or call_name(c) == "step"
                   for c in facts.tree.calls_within(fn))


def _wrapper_receiver(facts: Facts, recv: cst.BaseExpression) -> bool:
    """`recv` holds an instance of a class of this file or the project that is neither a
    module nor a torch optimizer (a learning-rate wrapper such as `ScheduledOptim`): its
    `zero_grad` may take no `set_to_none`. A class of this file whose own `zero_grad`
    accepts `set_to_none` (or `**kwargs`) is not such a wrapper."""
    if isinstance(recv, cst.Call) and isinstance(recv.func, cst.Name) and recv.func.value == "super" and not recv.args:
        # `super().zero_grad()` in a class of this file: the parent's, a torch optimizer or
        # module's only when a base is one (nanotron's optimizer wrappers call their base's).
        cls = facts.tree.enclosing_class(recv)
        return cls is not None and not any((facts.tree.qualname(b.value) or "").startswith(("torch.optim.", "torch.nn."))
                                           for b in cls.bases)
    if _builds_library_wrapper(facts) and (_parameter(facts, recv) or _holds_library_wrapper(facts, recv)):
        return True  # apex's `LARC(optimizer)` under `--lars` (SimSiam), passed to `train(..., optimizer)`
    ref = facts.cross.instance_class(recv)
    if ref is None:
        return _parameter(facts, recv) and _a_class_rejects_set_to_none(facts)
    if ref.startswith("#"):
        cls = facts.tree.classes_by_name.get(ref[1:])
        if cls is None:
            return False
        for fn in facts.tree.nodes_within(cls, cst.FunctionDef):
            if fn.name.value == "zero_grad" and facts.tree.enclosing_class(fn) is cls:
                params = fn.params
                names = {p.name.value for p in (*params.params, *params.kwonly_params, *params.posonly_params)}
                return "set_to_none" not in names and not isinstance(params.star_kwarg, cst.Param)
        bases = {facts.tree.qualname(b.value) or "" for b in cls.bases}
        return not any(b.startswith(("torch.optim.", "torch.nn.")) for b in bases) and Kind.MODEL not in facts.kinds.of(recv)
    kinds = facts.project.class_kinds(ref) if facts.project is not None else frozenset()
    return not ({Kind.MODEL, Kind.OPTIMIZER} & set(kinds))


def _library_wrapper(qualname: str) -> bool:
    """A library's optimizer wrapper whose `zero_grad` takes no `set_to_none`: apex's `LARC`
    (`zero_grad(self)`) and `FP16_Optimizer` (`zero_grad(self, set_grads_to_None=False)`),
    fairseq's optimizer classes (`zero_grad(self)`)."""
    return qualname.startswith("apex.") and qualname.rsplit(".", 1)[-1] in ("LARC", "FP16_Optimizer") \
        or qualname.startswith("fairseq.optim.")


def _builds_library_wrapper(facts: Facts) -> bool:
    """The file builds such a wrapper somewhere (once per file)."""
    got = facts.__dict__.get("_pf301_library_wrapper")
    if got is None:
        got = facts.__dict__["_pf301_library_wrapper"] = any(_library_wrapper(q) for q in facts.tree._calls_by_qualname)
    return got


def _holds_library_wrapper(facts: Facts, recv: cst.BaseExpression) -> bool:
    """`recv` may be bound to such a wrapper: a name one of whose bindings reaching it is one
    (`optimizer = LARC(optimizer)` under an option), or `self.optimizer` bound to one in its
    class."""
    if isinstance(recv, cst.Name):
        bindings = facts.bindings.lookup(recv.value, recv)
    elif isinstance(recv, cst.Attribute) and isinstance(recv.value, cst.Name) and recv.value.value == "self":
        cls = facts.tree.enclosing_class(recv)
        bindings = facts.bindings.attr_bindings.get(cls, {}).get(recv.attr.value, []) if cls is not None else []
    else:
        return False
    values = [b.value() for b in bindings]
    return any(isinstance(v, cst.Call) and _library_wrapper(facts.tree.qualname(v.func) or "") for v in values)


def _parameter(facts: Facts, recv: cst.BaseExpression) -> bool:
    """`recv` is a parameter of the function (`def loss_batch(model, xb, yb, loss_func, opt)`):
    what it holds is whatever the callers pass."""
    if not isinstance(recv, cst.Name):
        return False
    bs = facts.bindings.lookup(recv.value, recv)
    return bool(bs) and all(b.how == "param" for b in bs)


def _a_class_rejects_set_to_none(facts: Facts) -> bool:
    """A class of this file, or of a project module it imports, is an optimizer wrapper (it
    has a `step`) whose `zero_grad` takes no `set_to_none` (nor `**kwargs`): fastai's
    `OptimWrapper.zero_grad(self)`, which a parameter may hold and on which the fix would
    raise a TypeError.  (A model container's own `zero_grad(self)`, GrowNet's `DynamicNet`,
    has no `step`: an `optimizer` parameter does not hold one.)"""
    for fn in facts.tree.functions_by_name.get("zero_grad", []):
        cls = facts.tree.enclosing_class(fn)
        if cls is None or not any(f.name.value == "step" and facts.tree.enclosing_class(f) is cls
                                  for f in facts.tree.functions_by_name.get("step", [])):
            continue
        params = fn.params
        names = {p.name.value for p in (*params.params, *params.kwonly_params, *params.posonly_params)}
        if "set_to_none" not in names and not isinstance(params.star_kwarg, cst.Param):
            return True
    return facts.project is not None and facts.project.method_rejects("zero_grad", "set_to_none", "step")
