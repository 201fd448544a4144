"""PF410 model-not-compiled: static-shape model trained without torch.compile."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.analysis import Binding, Facts, call_name
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import is_model_call, is_training_file, torch_module_name, words
from perflint.rules.precision.helpers import uses_training_framework, variable_input_shapes


_NOT_TORCH_COMPILE = {"re.compile", "regex.compile"}
# Statements right after a model is built that still set it up: the compile goes after them.
_SETUP_METHODS = {"to", "cuda", "cpu", "train", "apply", "float", "half", "bfloat16", "double",
                  "load_state_dict", "requires_grad_", "init_weights", "reset_parameters"}
_CHECKPOINT_METHODS = {"state_dict", "load_state_dict", "save_pretrained"}
_NOT_MODEL_WORDS = ("loss", "criterion", "metric")


def mentions_compile(facts: Facts) -> bool:
    """Any sign that the file compiles (or decides about compiling) its model: a
    `torch.compile` call or decorator, `model.compile()`, a `compile`/`dynamo` option or
    identifier. `re.compile` and the builtin `compile(source, …)` do not count."""
    w = words(facts)
    if w.contains("dynamo", "inductor") or any("compile" in s.lower() for s in w.strings):
        return True
    for name, nodes in w.name_nodes.items():
        if "compile" not in name.lower():
            continue
        for node in nodes:
            parent = facts.tree.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                if facts.tree.qualname(parent) in _NOT_TORCH_COMPILE:
                    continue
            elif name == "compile" and isinstance(parent, cst.Call) and parent.func is node and not facts.bindings.lookup(name, node):
                continue  # the builtin
            elif isinstance(parent, cst.ImportAlias) and facts.tree.qualname(node) in _NOT_TORCH_COMPILE:
                continue
            return True
    return False


def _model_binding(facts: Facts, call: cst.Call) -> tuple[str, Binding] | None:
    """The one assignment `name = <expr>` the called model comes from, outside any loop
    (inside `if __name__ == "__main__":`, a `with` or a `try` is fine: the compile goes
    into the same block)."""
    if not isinstance(call.func, cst.Name):
        return None
    name = call.func.value
    bs = facts.bindings.lookup(name, call.func)
    if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].site, cst.Assign):
        return None
    site = bs[0].site
    if len(site.targets) != 1 or not isinstance(site.targets[0].target, cst.Name) or not isinstance(site.value, cst.Call):
        return None
    scope = facts.tree.scope_of(site)
    if any(isinstance(a, (cst.For, cst.While)) for a in facts.tree.ancestors(site) if a is not scope and facts.tree.is_inside(a, scope)):
        return None  # a model built per fold or per run: each new model would compile again
    if facts.tree.qualname(site.value.func) in ("torch.compile", "torch.jit.script", "torch.jit.trace"):
        return None
    return name, bs[0]


def _setup_statement(stmt: cst.CSTNode, name: str) -> bool:
    """`model.to(device)`, `model.apply(init)`, `model = model.cuda()` …"""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    value = None
    if isinstance(small, cst.Expr):
        value = small.value
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
            and small.targets[0].target.value == name:
        value = small.value
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
        return False
    recv = value.func.value
    while isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute):
        recv = recv.func.value
    return isinstance(recv, cst.Name) and recv.value == name and value.func.attr.value in _SETUP_METHODS


class ModelNotCompiled(Rule):
    """
    ## What it does
    Flags a model that a training loop (or training step) calls with autograd on (not a
    target network run under `no_grad`, not a loss module) and that is never compiled:
    the file has no `torch.compile` call or decorator, no `model.compile()`, no
    `compile`/dynamo option. Reported at the statement that builds the model, once per
    model. Silent when input shapes may vary (`pad_sequence`, packed sequences, random-size
    crops or resizes, a custom `collate_fn`/`batch_sampler`, detection models,
    `mark_dynamic`), under training frameworks that own compilation (Lightning, Accelerate,
    DeepSpeed, the transformers Trainer …), for models built inside a loop (one compile per
    model) or bound differently on different branches,
    and when the target torch is older than 2.0. Off by default.

    ## Why is this bad?
    `torch.compile` fuses the model's element-wise work into generated kernels and cuts
    Python overhead per step, but it pays a compile on the first step (and on every new
    input shape) and does not speed up every model. The PyTorch 2.0 announcement reported
    43 % faster training on average over 163 open-source models on an A100 (cited, not
    measured here).
    Measured on this project's 2-core CPU (torch 2.13, CPU inductor, one thread, AdamW
    training step; `python benchmarks/compile_break_even.py`; eager and compiled steps
    timed in alternating blocks, median of 100 each), no GPU being available:

    | model | eager step | compiled step | compile (empty cache) | break-even | compile (warm cache) | break-even |
    |---|---|---|---|---|---|---|
    | small conv net, batch 16 × 1×64×64 | 51.9 ms | 31.8 ms (1.63×) | 18.0 s | 900 steps | 0.3 s | 13 steps |
    | 6-layer MLP (256, GELU, LayerNorm), batch 64 | 8.0 ms | 8.2 ms (0.98×) | 24.6 s | never | 0.2 s | never |

    Over three runs on the shared machine (load average 2–8) the conv net gained 1.49–1.63×
    and the MLP 0.98–1.00×; a cold compile took 18–61 s depending on the load.
    The compile costs tens of seconds once per process (a fraction of a second when the
    inductor cache on disk already holds the graphs): worth it for runs of thousands of
    steps, and only for models that actually run faster compiled — measure with
    `perflint verify` before keeping it.

    ## Example
    ```python
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Use instead
    ```python
    model = Net().to(device)
    model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Fix safety
    **Unsafe.** The fix inserts `model = torch.compile(model)` right after the statement
    that builds the model and the set-up statements that directly follow it
    (`model.to(device)`, `model.apply(init)`, `model.load_state_dict(...)` …), at the same
    indentation. The first step then takes seconds to minutes; every new input shape
    recompiles (past 8 recompiles torch falls back to eager), including shapes the same
    model sees outside training (an evaluation on full-length utterances: after the first
    recompile torch marks the changing dimension dynamic); graph breaks, unsupported
    Python, or a missing C++ compiler on CPU can raise; numerics differ from eager by
    rounding (fused kernels); and `torch.compile` returns a wrapper: `isinstance(model,
    Net)` becomes false and `model.state_dict()` keys gain an `_orig_mod.` prefix
    (verified on 2.13), which breaks loading checkpoints into an uncompiled model. So no
    fix is offered where the file reads or loads the model's state dict or saves the model
    (`state_dict`, `load_state_dict`, `save_pretrained`, `torch.save`):
    there compile in place with `model.compile()`, which keeps the keys. (Every
    `state_dict`/`load_state_dict` call and `torch.save` outside the model's set-up counts,
    since checkpoint helpers take the model as an argument.)

    ## Applies to
    Target torch ≥ 2.0 (CUDA and CPU; the inductor CPU backend needs a C++ compiler).
    Off by default: the gain depends on the model and the hardware, and the compile time
    only pays back on long runs.

    ## References
    - `torch.compile` documentation and the PyTorch 2.0 release announcement (training
      speed-up over 163 models on A100)
    - Measured: `python benchmarks/compile_break_even.py` (figures above)
    """

    code = "PF410"
    name = "model-not-compiled"
    summary = "static-shape model trained without torch.compile"
    severity = Severity.INFO
    fix_class = FixClass.UNSAFE
    default = False
    min_torch = (2, 0)
    # Shares a fix pass with: `inplace=True` (PF401) in the model built here changes nothing
    # of the `torch.compile` line.
    fix_commutes_with = frozenset({"PF401"})

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not is_training_file(facts) or uses_training_framework(facts) or mentions_compile(facts):
            return
        if variable_input_shapes(facts) or words(facts).name_contains("mark_dynamic"):
            return
        seen: dict[cst.CSTNode, str] = {}
        containers = list(facts.loops.training_loops())
        containers += [fn for fn in facts.tree.index[cst.FunctionDef] if facts.loops.step_function_kind(fn) == "train"]
        for container in containers:
            for call in facts.tree.calls_within(container):
                if not is_model_call(facts, call) or facts.grad.grad_context(call) == "off":
                    continue  # a model only run without grad (a target network) is not trained here
                if isinstance(call.func, cst.Name) and any(w in call.func.value.lower() for w in _NOT_MODEL_WORDS):
                    continue  # a loss module with parameters (AAM-softmax): not what users compile
                found = _model_binding(facts, call)
                if found is not None and found[1].site not in seen:
                    seen[found[1].site] = found[0]
        tn = torch_module_name(facts)
        for site, name in sorted(seen.items(), key=lambda kv: facts.tree.order.get(kv[0], 0)):
            fix = self._fix(facts, site, name, tn)
            note = "" if fix is not None else (
                " (no fix: the file saves or loads the model's state dict, whose keys `torch.compile` "
                "prefixes with `_orig_mod.`; compile in place with `model.compile()`)"
            )
            yield Violation(
                site.value,  # type: ignore[attr-defined]
                f"`{name}` is trained without `torch.compile`: with static input shapes, "
                f"`{name} = torch.compile({name})` can make each step faster after a one-off compile "
                "(measured on a CPU: 1.5–1.6× for a small conv net, no gain for a small MLP, 18–61 s to "
                "compile; verify on your hardware)" + note,
                fix,
            )

    def _fix(self, facts: Facts, site: cst.CSTNode, name: str, tn: str | None):
        if tn is None:
            return None
        where = facts.tree.block_of(site)
        if where is None:
            return None
        block, i = where
        body = list(block.body)
        while i + 1 < len(body) and _setup_statement(body[i + 1], name):
            i += 1
        anchor = body[i]
        setup = body[where[1]:i + 1]
        saves = facts.__dict__.get("_pf410_saves")
        if saves is None:  # found once per file, not once per model
            saves = facts.__dict__["_pf410_saves"] = [
                call for call in facts.tree.calls()
                if call_name(call) in _CHECKPOINT_METHODS or facts.tree.qualname(call.func) == "torch.save"]
        for call in saves:
            if not any(facts.tree.is_inside(call, st) for st in setup):
                return None  # checkpoints: their keys would change (any receiver: helpers take the model as an argument)
        # A name used before the insertion point but bound elsewhere is fine; the same name
        # rebound later (a DDP wrap) keeps the compiled module inside.
        new = cst.parse_statement(f"{name} = {tn}.compile({name})\n")
        return self.unsafe(f"Compile `{name}` with `torch.compile`", {anchor: cst.FlattenSentinel([anchor, new])})
