"""PF407 compile-misuse: torch.compile in a loop, cudagraph mode on CPU, or graph breaks in
compiled code."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg, literal_value
from perflint.rules.base import Rule, Violation
from perflint.rules.common import words


_OTHER_ACCELERATORS = re.compile(r"^(mps|xpu|hpu|npu|mtia|xla|privateuseone)(:\d+)?$")


def _cpu_only(facts: Facts) -> bool:
    if facts.devices.is_cuda_code:
        return False
    strings = words(facts).strings
    if any(_OTHER_ACCELERATORS.match(s) for s in strings) or words(facts).name_contains("accelerator"):
        return False
    return "cpu" in strings


def compiled_functions(facts: Facts) -> dict[cst.FunctionDef, cst.Call | None]:
    """Functions compiled with `torch.compile` in this file → the compile call (None for a
    bare `@torch.compile` decorator)."""
    out: dict[cst.FunctionDef, cst.Call | None] = {}
    for fn in facts.tree.index[cst.FunctionDef]:
        for d in fn.decorators:
            dec = d.decorator
            target = dec.func if isinstance(dec, cst.Call) else dec
            if facts.tree.qualname(target) == "torch.compile":
                out[fn] = dec if isinstance(dec, cst.Call) else None
    for call in facts.tree.calls_to("torch.compile"):
        arg = get_arg(call, "model", 0)
        if arg is None:
            continue
        value = arg.value
        if isinstance(value, cst.Name) and value.value in facts.tree.functions_by_name and not facts.bindings.lookup(value.value, value):
            fns = facts.tree.functions_by_name[value.value]
            if len(fns) == 1:
                out.setdefault(fns[0], call)
            continue
        ctor = value
        if isinstance(value, cst.Name):
            bs = facts.bindings.lookup(value.value, value)
            ctor = bs[0].node if len(bs) == 1 and bs[0].how == "expr" else None
        while isinstance(ctor, cst.Call) and isinstance(ctor.func, cst.Attribute) and ctor.func.attr.value in (
            "to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "requires_grad_"
        ):
            ctor = ctor.func.value
        if isinstance(ctor, cst.Call) and isinstance(ctor.func, cst.Name) and ctor.func.value in facts.kinds.module_classes:
            cls = facts.tree.classes_by_name.get(ctor.func.value)
            for stmt in cls.body.body if cls is not None else ():
                if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "forward":
                    out.setdefault(stmt, call)
    return out


class CompileMisuse(Rule):
    """
    ## What it does
    Flags three `torch.compile` mistakes:
    1. `torch.compile(...)` called on every iteration of a training/evaluation loop (or of a
       loop around one), outside any `if`;
    2. `mode="reduce-overhead"` in CPU-only code;
    3. `.item()` or `print(...)` inside a compiled function (decorated with `@torch.compile`,
       or passed to `torch.compile` in this file, including a local `nn.Module`'s `forward`).

    ## Why is this bad?
    1. Compilation is expensive (measured on CPU: 40 s for the first call of a small MLP,
       9.7 s for a recompile) and each call wraps the model again; past the recompile limit
       (8) torch falls back to eager.
    2. `reduce-overhead` means CUDA graphs (`{'triton.cudagraphs': True}`), which only apply
       to CUDA graphs: on CPU it buys nothing.
    3. Both are graph breaks (verified with `torch._dynamo.explain`: one break each), which
       split the compiled region; `.item()` also forces a device-to-host sync.

    ## Example
    ```python
    for epoch in range(epochs):
        model = torch.compile(model)
        ...

    @torch.compile
    def step(x):
        loss = model(x).sum()
        print(loss.item())
        return loss
    ```

    ## Use instead
    ```python
    model = torch.compile(model)
    for epoch in range(epochs):
        ...

    @torch.compile
    def step(x):
        return model(x).sum()
    loss = step(x)   # log outside, every N steps
    ```

    ## Fix safety
    No fix: moving a compile call or a print changes program structure.

    ## Applies to
    Target torch ≥ 2.0; CPU and CUDA (check 2 only in CPU-only files: no CUDA evidence, a
    `"cpu"` device string, and no other accelerator). With `fullgraph=True`, `.item()` is
    captured (torch 2.13 turns on `capture_scalar_outputs`), so only `print` is reported.

    ## References
    - `torch.compile` docstring and `torch._inductor.list_mode_options()` (2.13)
    - Measured (torch 2.13, CPU inductor, 6 × Linear(256) + GELU): first call 40.0 s, then
      1.9 ms a call; a new batch size recompiled in 9.7 s
    """

    code = "PF407"
    name = "compile-misuse"
    summary = "torch.compile in a loop, cudagraph mode on CPU, or graph breaks in compiled code"
    min_torch = (2, 0)
    tokens = (b"compile",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in facts.tree.calls_to("torch.compile"):
            if self._in_loop(facts, call):
                yield Violation(
                    call,
                    "`torch.compile` runs on every iteration of the loop; compile once, before it",
                )
            mode = get_arg(call, "mode", 2)
            if mode is not None and literal_value(mode.value) == "reduce-overhead" and _cpu_only(facts):
                yield Violation(
                    mode,
                    '`mode="reduce-overhead"` uses CUDA graphs, which do nothing for CPU-only code',
                )
        print_shadowed = "print" in facts.tree.functions_by_name
        for fn, compile_call in compiled_functions(facts).items():
            fullgraph = False
            if compile_call is not None:
                fg = get_arg(compile_call, "fullgraph", 1)
                fullgraph = fg is not None and literal_value(fg.value) is True
            for call in facts.tree.calls_within(fn):
                if facts.tree.enclosing_function(call) is not fn:
                    continue
                if call_name(call) == "item" and isinstance(call.func, cst.Attribute) and not call.args and not fullgraph:
                    yield Violation(call, "`.item()` inside a compiled function is a graph break and a host sync")
                elif isinstance(call.func, cst.Name) and call.func.value == "print" and not print_shadowed \
                        and not facts.bindings.lookup("print", call):
                    yield Violation(call, "`print` inside a compiled function is a graph break")

    @staticmethod
    def _in_loop(facts: Facts, call: cst.Call) -> bool:
        loops = []
        for a in facts.tree.ancestors(call):
            if isinstance(a, (cst.If, cst.Try, cst.IfExp)):
                if not loops:
                    return False  # compiled under a condition (once, lazily): fine
            if isinstance(a, (cst.For, cst.While)):
                loops.append(a)
            if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                break
        for loop in loops:
            if facts.loops.loop_kind(loop) is not None:
                return True
            if any(facts.tree.is_inside(inner, loop) for inner in (*facts.loops.training_loops(), *facts.loops.eval_loops())):
                return True
        return False
