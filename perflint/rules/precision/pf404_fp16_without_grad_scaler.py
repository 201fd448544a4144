"""PF404 fp16-without-grad-scaler: float16 autocast in training without a GradScaler."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.analysis import NOT_LITERAL, Facts, call_name, get_arg, has_splat, literal_value
from perflint.names import dotted
from perflint.rules.base import Rule, Violation
from perflint.rules.common import words
from perflint.rules.precision.helpers import grad_scaler_name, settings_near, uses_training_framework


_AUTOCAST_POSITIONS = {
    # qualname: (device, enabled position, dtype position)
    "torch.cuda.amp.autocast": ("cuda", 0, 1),
    "torch.cpu.amp.autocast": ("cpu", 0, 1),
    "torch.amp.autocast": (None, 2, 1),
}


def _dtype_of(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> str | None:
    q = facts.tree.qualname(expr)
    if q in ("torch.float16", "torch.half"):
        return "fp16"
    if q == "torch.bfloat16":
        return "bf16"
    if literal_value(expr) is None:
        return "default"
    if isinstance(expr, cst.Name) and depth < 4:
        bs = facts.bindings.lookup(expr.value, expr)
        kinds = {_dtype_of(facts, b.node, depth + 1) if b.how == "expr" else None for b in bs}  # type: ignore[arg-type]
        if len(kinds) == 1:
            return kinds.pop()
    return None


def autocast_dtype(facts: Facts, call: cst.Call) -> str | None:
    """"fp16", "bf16" or None (unknown or disabled) for an autocast call."""
    q = facts.tree.qualname(call.func)
    if q not in _AUTOCAST_POSITIONS or has_splat(call):
        return None
    device, enabled_pos, dtype_pos = _AUTOCAST_POSITIONS[q]
    enabled = get_arg(call, "enabled", enabled_pos)
    if enabled is not None and literal_value(enabled.value) is False:
        return None
    if device is None:
        dev = get_arg(call, "device_type", 0)
        value = literal_value(dev.value) if dev is not None else NOT_LITERAL
        device = value if isinstance(value, str) else None
    arg = get_arg(call, "dtype", dtype_pos)
    dtype = "default" if arg is None else _dtype_of(facts, arg.value)
    if dtype == "default":
        if any((facts.tree.qualname(c.func) or "") == "torch.set_autocast_dtype" for c in facts.tree.calls()):
            return None
        return {"cuda": "fp16", "cpu": "bf16"}.get(device or "")
    return dtype


class Fp16WithoutGradScaler(Rule):
    """
    ## What it does
    Flags float16 autocast in a training step — `torch.autocast("cuda")` (float16 is the CUDA
    default), `torch.autocast(..., dtype=torch.float16)`, `torch.cuda.amp.autocast()` — in a
    file with no GradScaler. bfloat16 autocast is exempt.

    ## Why is this bad?
    Gradients of float16 ops are float16. Values below float16's range (about 6e-8) flush to
    zero, so small gradients are silently lost and the affected parameters stop learning; the
    AMP documentation makes gradient scaling part of every float16 training recipe. Not a
    speed issue: the step computes the wrong update.

    ## Example
    ```python
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    ...
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```
    or `torch.autocast("cuda", dtype=torch.bfloat16)` on Ampere or newer GPUs.

    ## Fix safety
    No fix: adding a scaler changes three statements of the step, and the right choice
    between a scaler and bf16 depends on the GPU.

    ## Applies to
    All torch versions with autocast; CUDA and CPU. Silent when the file mentions any scaler
    (`GradScaler`, `ShardedGradScaler`, timm's `NativeScaler`, a `loss_scaler` …) or uses
    Accelerate, Lightning, DeepSpeed, apex's amp or the transformers Trainer, which scale losses
    themselves; silent when the dtype cannot be resolved. Silent too when the function that
    enters autocast backpropagates through an optimizer wrapper's own `backward`
    (`self.optim.backward(loss)`, `optimizer.backward(loss)`) and some module of the project
    builds a GradScaler: OpenNMT-py's `Optimizer` and fairseq's `AMPOptimizer` own it and scale
    the loss there (OpenNMT-py builds it inside a function of a module its trainer reaches only
    through `import onmt.utils`). A wrapper's `backward` with no scaler anywhere in the project
    is still reported. Silent for a float16 autocast that is one entry of a dict picked by an
    option (`{"bf16": autocast(dtype=torch.bfloat16), "fp16": autocast(dtype=torch.float16)}
    [args.mixed_precision]`, LlamaGen's trainer) unless the option's default is known and
    picks it: the run as documented takes another entry, or which one is unsure. In a file that shards its model with FSDP's
    `FullyShardedDataParallel` (target torch 1.12 or newer), the message names FSDP's
    shard-aware `ShardedGradScaler` (pytorch PR #76918), not the plain GradScaler; FSDP2's
    `fully_shard` works with the plain one.

    ## References
    - PyTorch AMP documentation, "Gradient Scaling"
    """

    code = "PF404"
    name = "fp16-without-grad-scaler"
    summary = "float16 autocast in training without a GradScaler"
    severity = Severity.ERROR
    tokens = (b"autocast",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if facts.filewide.uses_grad_scaler or words(facts).name_contains("scaler") or uses_training_framework(facts):
            return
        if "scaler" in settings_near(facts)[0]:
            return  # a GradScaler in the modules around (a wrapper optimizer, a trainer base class)
        for call in facts.tree.calls():
            if facts.tree.qualname(call.func) not in _AUTOCAST_POSITIONS:
                continue
            ctx = facts.loops.iteration_context(call)
            if (ctx is None or ctx.kind != "train") and not self._around_training_loop(facts, call):
                continue
            if autocast_dtype(facts, call) != "fp16":
                continue
            if _picked_by_option_elsewhere(facts, call):
                continue  # `{"bf16": autocast(...bfloat16), "fp16": autocast(...float16)}[args.precision]`
            if _wrapper_backward(facts, call) and facts.project is not None and facts.project.sets_up_anywhere("scaler"):
                continue  # `self.optim.backward(loss)`, and a GradScaler in the project: the wrapper scales (OpenNMT, fairseq)
            yield Violation(
                call,
                "float16 autocast in a training step with no GradScaler: small gradients underflow "
                f"to zero; scale the loss with `{grad_scaler_name(facts)}` or use `dtype=torch.bfloat16`",
            )

    @staticmethod
    def _around_training_loop(facts: Facts, call: cst.Call) -> bool:
        """`with autocast(...):` wrapped around a whole training loop."""
        item = facts.tree.parent(call)
        stmt = facts.tree.parent(item) if isinstance(item, cst.WithItem) else None
        if not isinstance(stmt, cst.With):
            return False
        return any(facts.tree.is_inside(loop, stmt.body) for loop in facts.loops.training_loops())


def _picked_by_option_elsewhere(facts: Facts, call: cst.Call) -> bool:
    """`call` is the value of one entry of a dict literal indexed by an option (`{"bf16": …,
    "fp16": autocast(dtype=torch.float16)}[args.mixed_precision]`: LlamaGen's trainer), and
    the option's default does not pick that entry, or is not known: a run takes the entry
    only when told to."""
    entry = facts.tree.parent(call)
    table = facts.tree.parent(entry) if isinstance(entry, cst.DictElement) and entry.value is call else None
    index = facts.tree.parent(table) if isinstance(table, cst.Dict) else None
    if not (isinstance(index, cst.Subscript) and index.value is table and len(index.slice) == 1
            and isinstance(index.slice[0].slice, cst.Index)):
        return False
    found, default = facts.cross.option_default(index.slice[0].slice.value)
    return not found or default != literal_value(entry.key)


_WRAPPER = re.compile(r"optim|scaler|engine|(?:^|_)amp(?:_|$)", re.I)  # `amp` as a word, not in `sample`


def _wrapper_backward(facts: Facts, call: cst.Call) -> bool:
    """The function around `call` passes the loss to a wrapper's `backward`: a call
    `<name>.backward(loss)` with one positional argument whose receiver is named for an
    optimizer, scaler or engine (`self.optim`, `optimizer`, `model_engine`), not a tensor."""
    fn = facts.tree.enclosing_function(call)
    scope = fn if fn is not None else facts.module
    for c in facts.tree.calls_within(scope):
        if call_name(c) != "backward" or not isinstance(c.func, cst.Attribute) or len(c.args) != 1:
            continue
        if c.args[0].keyword is not None or c.args[0].star:
            continue
        name = (dotted(c.func.value) or "").rsplit(".", 1)[-1]
        if name and _WRAPPER.search(name):
            return True
    return False
