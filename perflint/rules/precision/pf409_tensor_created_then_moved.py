"""PF409 tensor-created-then-moved: tensor built on the CPU, then moved to a device."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, make_kwarg
from perflint.analysis import Facts, call_name, get_arg, literal_value
from perflint.analysis.syntax import strip_not
from perflint.names import dotted
from perflint.rules.base import FixClass, FixPlan, Rule, Violation
from perflint.analysis.vocab import Kind


# Constructors whose values do not depend on where they are computed.  Not `tensor`,
# `as_tensor` or `from_numpy`: their data starts in host memory, and with `device=` torch
# builds the same host tensor and copies it the same way (`torch/csrc/utils/tensor_new.h`:
# the data is moved into a CPU tensor, then `.to(device)`), so there is nothing to save.
_EXACT_CTORS = {"zeros", "ones", "full", "empty", "eye"}
# Same values only in integer arithmetic: CPU kernels accumulate float ranges in double
# (`acc_type<scalar_t, false>`), CUDA kernels in float (`acc_type<scalar_t, true>`).
_RANGE_CTORS = {"arange", "linspace"}
_RANDOM_CTORS = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "poisson", "multinomial"}
_TO_KEYWORDS = {"device", "dtype", "non_blocking", "copy"}
_CAST_METHODS = {"float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte", "contiguous",
                 "unsqueeze", "view", "reshape", "t"}
_DEVICE_NAME = re.compile(r"(^|_)(device|dev)$")


def _int_literals_only(call: cst.Call) -> bool:
    positional = [a for a in call.args if a.keyword is None]
    return all(isinstance(a.value, cst.Integer) for a in positional) and not any(
        a.keyword is not None and a.keyword.value == "dtype" for a in call.args
    )


# Functions that run once per model or per run: what they build is not rebuilt per step.
_ONCE_FUNCTIONS = {"__init__", "__post_init__", "setup", "reset_parameters", "_reset_parameters", "init_weights",
                   "_init_weights", "build_model", "configure_optimizers", "on_fit_start", "on_train_start"}
_REPEATED_METHODS = {"forward", "__call__", "training_step", "validation_step", "test_step", "predict_step"}


_INFERENCE_FLAGS = re.compile(r"^(reverse|inference|is_inference|generate|generation|infer|sampling|export|onnx)$")
_TRAINING_FLAGS = re.compile(r"^(training|is_training|train|is_train)$")
_INFERENCE_NAMES = re.compile(r"(^|_)(pred|predict|prediction|infer|inference|detect|export|onnx|ort|trt|warmup|"
                              r"generate|generation)(_|$)", re.I)


def _inference_only(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` runs only on a path that does not train: a branch taken when a flag says
    inference (`if reverse:`, the `else` of `if not reverse:`, `if not self.training:`), or a
    function or class named for prediction, export or generation (`detect`, `predict_3D`,
    `export_onnx`, `warmup`)."""
    cur = node
    for anc in facts.tree.ancestors(node):
        if isinstance(anc, cst.If):
            test, negated = strip_not(anc.test)
            name = (dotted(test) or "").rsplit(".", 1)[-1] if isinstance(test, (cst.Name, cst.Attribute)) else ""
            in_body = cur is anc.body
            in_else = cur is anc.orelse
            if _INFERENCE_FLAGS.match(name) and ((in_body and not negated) or (in_else and negated)):
                return True
            if _TRAINING_FLAGS.match(name) and ((in_body and negated) or (in_else and not negated)):
                return True
        if isinstance(anc, (cst.FunctionDef, cst.ClassDef)) and _INFERENCE_NAMES.search(anc.name.value):
            return True
        cur = anc
    return False


def runs_repeatedly(facts: Facts, node: cst.CSTNode, depth: int = 0) -> bool:
    """Whether `node` runs many times in a run: on every iteration of a training/eval loop or
    per-step function, in an unthrottled loop inside a function, in a model's `forward`, or in
    a function that this file calls from such code.  Module-level setup, `__init__`, code
    before the loop and helpers called once (or from nowhere in view) run once."""
    if facts.loops.iteration_context(node) is not None:
        return True
    fn = facts.tree.enclosing_function(node)
    if depth > 4 or (fn is not None and fn.name.value in _ONCE_FUNCTIONS):
        return False
    cur = node
    for anc in facts.tree.ancestors(node):
        if anc is fn or isinstance(anc, (cst.ClassDef, cst.Lambda)):
            break
        if isinstance(anc, (cst.For, cst.While)) and cur is anc.body:
            if facts.loops.runs_each_time(node, anc, nested_functions=False):
                return True
        cur = anc
    if fn is None:
        return False
    cls = facts.tree.enclosing_class(fn)
    if cls is not None and fn.name.value in ("forward", "backward") and any(
            (facts.tree.qualname(b.value) or dotted(b.value) or "").endswith("autograd.Function") for b in cls.bases):
        # A custom autograd Function runs when something calls `Name.apply(...)`; one nothing
        # in the file applies may be dead code (yolov7's unused ranking losses).
        return any(isinstance(a.value, cst.Name) and a.value.value == cls.name.value and a.attr.value == "apply"
                   for a in facts.tree.index[cst.Attribute])
    if fn.name.value in _REPEATED_METHODS or facts.loops.step_function_kind(fn) is not None:
        return True
    own_method = cls is not None and facts.tree.parent(facts.tree.parent(fn)) is cls
    for c in facts.tree.calls():
        f = c.func
        if isinstance(f, cst.Name) and f.value == fn.name.value and not own_method:
            pass
        elif (own_method and isinstance(f, cst.Attribute) and f.attr.value == fn.name.value
              and isinstance(f.value, cst.Name) and f.value.value == "self"):
            pass
        else:
            continue
        if facts.tree.is_inside(c, fn):
            continue  # recursion
        if runs_repeatedly(facts, c, depth + 1):
            return True
    return False


class TensorCreatedThenMoved(Rule):
    """
    ## What it does
    Flags `torch.zeros/ones/full/empty/eye/arange/linspace(...)` and the random
    constructors (`rand`, `randn`, `randint`, `randperm`, `normal` …) directly followed by
    `.cuda()` or `.to(<device>)`.

    ## Why is this bad?
    The tensor is built in host memory, then copied: a pageable host-to-device copy that
    also synchronizes. The performance tuning guide: "Instead of calling
    `torch.rand(size).cuda()` … produce the output directly on the target device". Measured
    on CPU: `torch.randn(4e6)` takes 26.7 ms before any copy. On an H100 80GB (torch 2.11,
    `python benchmarks/rule_effects.py`; results in
    `benchmarks/results/h100/rule_effects/`): `torch.zeros(4096, 4096).to("cuda")` took 14.8
    ms and `torch.zeros(4096, 4096, device="cuda")` 0.023 ms; with `randn` 115.8 ms against
    0.042 ms (the CPU's random generation included).

    ## Example
    ```python
    mask = torch.zeros(n, n).to(device)
    noise = torch.randn(b, d).cuda()
    ```

    ## Use instead
    ```python
    mask = torch.zeros(n, n, device=device)
    noise = torch.randn(b, d, device="cuda")
    ```

    Not for data that starts in host memory: `torch.tensor(data).to(device)` and
    `torch.from_numpy(arr).to(device)` are left alone. `torch.tensor(data, device=...)` and
    `torch.as_tensor(arr, device=...)` build the same host tensor and copy it the same way
    (torch's `tensor_new.h`: the data goes into a CPU tensor, then `.to(device)`), so the
    rewrite would save nothing. When such data is a constant, build it once, outside the loop.

    ## Fix safety
    **Safe** for `zeros`, `ones`, `full`, `empty`, `eye` and integer `arange`, when the `.to`
    argument is provably a device (a string literal,
    `torch.device(...)`, or a name bound only to those) and the constructor has no
    `requires_grad=True` (moving `device=` into it would turn a non-leaf into a leaf). `.to(dev,
    dtype)` becomes `device=…, dtype=…` (safe for `zeros/ones/empty/eye`; other constructors
    would round once instead of twice). **Unsafe** for random constructors (CUDA has its own
    generator, so seeded runs draw different numbers), float `arange`/`linspace` (CPU kernels
    accumulate in double, CUDA kernels in float), and when the device is only a name such as
    `device` or `self.device`. No fix with `generator=`, `out=`, `pin_memory=`, `**kwargs`,
    `memory_format=` or a dtype given twice; never fires for `.to(dtype)`, `.to(tensor)` or
    `.to("cpu")`.

    ## Applies to
    All torch versions; any device but the CPU. Only code that runs many times: an
    unthrottled loop body, a training or evaluation step, a model's `forward`, or a function
    this file calls from one of those. A buffer built once — at module level, in `__init__`,
    before the loop, in a helper called once, or under `if step % N == 0` — costs one copy
    per run and is not reported; nor is a path that does not train (a branch taken for
    inference, `if reverse:` / `if not self.training:`, a function or class named for
    prediction, export or generation, an autograd Function nothing applies).

    Off by default. In the strict whole-repository reviews of issue 21 (three reviews, 52
    repositories), 63 PF409 findings were read: 24 right, 39 false alarms (0.38). After the
    narrowing above, 31 of them are still reported: 24 right, 7 false (0.77) — below the
    0.80 a default rule must reach. The false alarms left are per-step code of sampling and
    evaluation paths that only a call graph of the whole run could tell from training (a
    diffusion sampler's helper, a tensor per evaluation episode, a KV-cache during
    generation). Select it (`--extend-select PF409`) for code you know runs per step.

    ## References
    - PyTorch performance tuning guide, "Create tensors directly on the target device"
    - Measured (torch 2.13): `torch.zeros(3, requires_grad=True).to(...)` is not a leaf
      (`grad_fn=ToCopyBackward0`), which is why `requires_grad=True` constructors are left alone
    """

    code = "PF409"
    name = "tensor-created-then-moved"
    summary = "tensor built on the CPU, then moved to a device"
    fix_class = FixClass.SAFE_OR_UNSAFE
    default = False  # whole-repository review: 0.77 after narrowing (see "Applies to")
    tokens = (b"zeros", b"ones", b"full", b"empty", b"eye", b"arange", b"linspace", b"rand", b"normal",
              b"bernoulli", b"poisson", b"multinomial")
    per_step = True

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in facts.tree.calls():
            name = call_name(call)
            if name not in ("to", "cuda") or not isinstance(call.func, cst.Attribute):
                continue
            inner = call.func.value
            # `torch.zeros(n).float().cuda()`, `torch.ones(n)[None, :, None].to(dev)`: the
            # same CPU tensor, cast or viewed on the way (reported; no fix is offered).
            through = False
            while True:
                if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and not inner.args \
                        and inner.func.attr.value in _CAST_METHODS:
                    inner, through = inner.func.value, True
                elif isinstance(inner, cst.Subscript):
                    inner, through = inner.value, True
                else:
                    break
            if not isinstance(inner, cst.Call):
                continue
            q = facts.tree.qualname(inner.func) or ""
            if not q.startswith("torch.") or q.count(".") != 1:
                continue
            ctor = q[len("torch."):]
            if ctor not in (_EXACT_CTORS | _RANGE_CTORS | _RANDOM_CTORS):
                continue
            rg = get_arg(inner, "requires_grad")
            if rg is not None and literal_value(rg.value) is not False:
                continue
            if get_arg(inner, "device") is not None:
                continue
            dest = self._destination(facts, call, name)
            if dest is None:
                continue
            device, dtype, strength = dest
            if not runs_repeatedly(facts, call):
                continue  # built once (module level, `__init__`, before the loop): nothing to save
            if _inference_only(facts, call):
                continue  # a prediction, export or generation path: no training step waits for it
            yield Violation(
                inner,
                f"`torch.{ctor}(...)` is built on the CPU and then copied to the device; pass `device=` to create it there",
                None if through else self._fix(facts, call, inner, ctor, device, dtype, strength),
            )

    @staticmethod
    def _destination(facts: Facts, call: cst.Call, name: str):
        """(device expr, dtype expr | None, "proven" | "named" | "nofix") or None (not a move)."""
        if name == "cuda":
            positional = [a for a in call.args if a.keyword is None]
            if any(a.star for a in call.args) or any(
                a.keyword is not None and a.keyword.value not in ("non_blocking", "device") for a in call.args
            ):
                return cst.SimpleString('"cuda"'), None, "nofix"
            dev_arg = get_arg(call, "device", 0)
            if dev_arg is None:
                return cst.SimpleString('"cuda"'), None, "proven"
            if isinstance(dev_arg.value, cst.Integer) and positional:
                return cst.SimpleString(f'"cuda:{dev_arg.value.value}"'), None, "proven"
            return cst.SimpleString('"cuda"'), None, "nofix"
        if any(a.star for a in call.args):
            return None
        positional = [a for a in call.args if a.keyword is None]
        dev_arg = get_arg(call, "device", 0)
        if dev_arg is None:
            return None  # `.to(dtype=...)` only
        dtype_arg = get_arg(call, "dtype", 1)
        ks = facts.devices.device_kinds(dev_arg.value)
        if facts.devices.is_device_expr(dev_arg.value):
            if ks == {Kind.DEVICE_CPU}:
                return None
            strength = "proven"
        else:
            target = dev_arg.value
            label = target.attr.value if isinstance(target, cst.Attribute) else (
                target.value if isinstance(target, cst.Name) else "")
            if not _DEVICE_NAME.search(label.lower()) or facts.kinds.of(target) & {Kind.TENSOR, Kind.OUTPUT, Kind.BATCH}:
                return None
            strength = "named"
        if len(positional) > 2 or any(a.keyword is not None and a.keyword.value not in _TO_KEYWORDS for a in call.args):
            strength = "nofix"
        return dev_arg.value, (dtype_arg.value if dtype_arg is not None else None), strength

    def _fix(self, facts: Facts, call: cst.Call, inner: cst.Call, ctor: str, device, dtype, strength) -> FixPlan | None:
        if strength == "nofix" or any(a.star == "**" for a in inner.args):
            return None
        if any(a.keyword is not None and a.keyword.value in ("generator", "out", "pin_memory", "device") for a in inner.args):
            return None
        has_dtype = get_arg(inner, "dtype") is not None
        if dtype is not None and has_dtype:
            return None
        safe = strength == "proven"
        if ctor in _RANDOM_CTORS:
            safe = False
        elif ctor == "linspace" or (ctor == "arange" and not _int_literals_only(inner) and len([a for a in inner.args if a.keyword is None]) != 1):
            safe = False
        if dtype is not None and ctor not in ("zeros", "ones", "empty", "eye"):
            safe = False
        new = inner
        if dtype is not None:
            new = add_arg(new, make_kwarg("dtype", dtype))
        new = add_arg(new, make_kwarg("device", device))
        new = new.with_changes(lpar=call.lpar, rpar=call.rpar) if call.lpar else new
        return (self.safe if safe else self.unsafe)("Create it with `device=`", {call: new})
