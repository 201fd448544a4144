"""PF302 unfused-optimizer: Adam/AdamW without fused=True in CUDA code."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import add_arg, make_kwarg
from perflint.analysis import Facts, call_name, get_arg, has_splat, literal_value
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import script_device
from perflint.analysis.vocab import Kind


_FUSABLE = {"torch.optim.Adam", "torch.optim.AdamW"}
# What an optimizer is read for without stepping it.
_NOT_A_STEP = {"param_groups", "load_state_dict", "state_dict", "zero_grad", "add_param_group", "defaults"}


def _never_stepped(facts: Facts, call: cst.Call) -> bool:
    """`opt = AdamW(...)` whose every read that this binding reaches only looks at it (its
    `param_groups`, `load_state_dict`, `zero_grad` …): never stepped, passed on, stored or
    returned — a learning-rate schedule plotted, a checkpoint's optimizer rebuilt and left.
    Its step costs nothing, so there is nothing to fuse.  One that nothing here reads at all
    is still reported: another module or a framework may step it."""
    assign = facts.tree.parent(call)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)):
        return False
    target = assign.targets[0].target
    scope = facts.tree.enclosing_function(call) or facts.module
    read = False  # an optimizer no line reads may be read elsewhere (imported, a framework's)
    for use in facts.tree.nodes_within(scope, cst.Name):
        if use.value != target.value or use is target:
            continue
        parent = facts.tree.parent(use)
        if isinstance(parent, cst.Attribute) and parent.attr is use or isinstance(parent, cst.Arg) and parent.keyword is use:
            continue  # an attribute's or a keyword's name, not a read of the variable
        if isinstance(parent, (cst.AssignTarget, cst.Param)):
            continue  # bound again
        if not any(b.site is assign for b in facts.bindings.lookup(use.value, use)):
            continue  # another binding's read
        if not (isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in _NOT_A_STEP):
            return False
        read = True
    return read


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
    project that supports 1.x gets no finding: the advice would break it there). Not reported
    for an optimizer whose every read only looks at it (`param_groups`, `zero_grad()`,
    `load_state_dict(...)`: a learning-rate schedule traced, a checkpoint's optimizer rebuilt
    and left): it is never stepped. Strict
    review of whole public repositories (issue 21, three review sheets): 16 right of 19
    reviewed findings still reported (0.84), up from 25 of 38 (0.66).

    **Off by default** (`extend-select = ["PF302"]` turns it on). On the sets of repositories
    reviewed since, which no change to it had seen (Y to AF), 5 of 19 findings still
    reported were right: the fused update saves a fraction of a millisecond a step, and on
    what is trained in practice (LoRA and adapter weights, a linear probe, models of a few
    million parameters, an optimizer stepped once per several accumulated micro-batches)
    reviewers judged that under 1 % of the step. It was right for optimizers over the whole
    of a large model stepped every iteration (a 180M-parameter generator, a 650M-parameter
    ViT, diffusion U-Nets).

    ## References
    - `torch/optim/adamw.py` (2.13), pytorch PRs #88015, #123074, #124905
    - Measured (torch 2.13, CPU): after a skipped first step, fused SGD with momentum holds a
      momentum buffer of ~2e37 and parameters of ~-6e33, where the default stays at 0.9
    """

    code = "PF302"
    name = "unfused-optimizer"
    summary = "Adam/AdamW without fused=True in CUDA code"
    severity = Severity.INFO
    fix_class = FixClass.UNSAFE
    default = False  # held-out whole-repository reviews: about 1 right in 4 (see "Applies to")
    # AdamW has `fused` from 2.0 (Adam from 1.13, CUDA only): below that there is nothing to advise.
    min_torch = (2, 0)
    tokens = (b"Adam",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.devices.is_cuda_code:
            return
        for call in facts.tree.calls():
            q = facts.tree.qualname(call.func)
            if q not in _FUSABLE or has_splat(call):
                continue
            if any(get_arg(call, k) is not None for k in ("fused", "foreach")):
                continue
            diff = get_arg(call, "differentiable")
            if diff is not None and literal_value(diff.value) is not False:
                continue
            if _never_stepped(facts, call):
                continue
            fix = None
            # The script's own device when it may not be CUDA: fused only there.
            test, move = script_device(facts, call, facts.tree.enclosing_function(call), models_only=True)
            # Before 2.4 `fused=True` needs the parameters on CUDA when the optimizer is built:
            # a model moved to the tested device before this call has them there.
            moved_before = test is not None and move is not None and facts.tree.order[move] < facts.tree.order[call] \
                and facts.tree.scope_of(move) is facts.tree.scope_of(call)
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
        for call in facts.tree.calls():
            if call_name(call) == "cuda" and facts.kinds.has_kind(call.func.value if isinstance(call.func, cst.Attribute) else None, Kind.MODEL):
                return True
        return False
