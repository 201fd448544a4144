"""PF306 scaler-misuse: GradScaler used wrongly (bare optimizer.step() or no scaler.update())."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.analysis import Facts, call_name
from perflint.rules.base import Rule, Violation
from perflint.rules.optim_autograd.helpers import exclusive, iteration_calls, scaled_backward, step_regions
from perflint.analysis.vocab import Kind


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
        for region in step_regions(facts):
            calls = iteration_calls(facts, region)
            scaled = [(c, scaled_backward(facts, c)) for c in calls]
            scaled = [(c, s) for c, s in scaled if s is not None]
            if not scaled:
                continue
            scaler_texts = {s for _, s in scaled}
            stepped_via_scaler = {
                facts.tree.receiver_text(c.args[0].value)
                for c in calls
                if call_name(c) == "step" and isinstance(c.func, cst.Attribute)
                and facts.tree.receiver_text(c.func.value) in scaler_texts and c.args
            }
            for c in calls:
                if c in seen or call_name(c) != "step" or not isinstance(c.func, cst.Attribute):
                    continue
                recv = facts.tree.receiver_text(c.func.value)
                if recv in scaler_texts:
                    # scaler.step(opt): is there an update in the iteration?
                    if not any(call_name(u) == "update" and isinstance(u.func, cst.Attribute)
                               and facts.tree.receiver_text(u.func.value) == recv for u in calls):
                        seen.add(c)
                        yield Violation(c, f"`{recv}.step()` without `{recv}.update()` in the iteration: the loss scale "
                                           "never adapts and the next step raises")
                    continue
                if not facts.steps.is_optimizer_step(c) or facts.kinds.has_kind(c.func.value, Kind.SCALER):
                    continue
                if recv in stepped_via_scaler:
                    continue
                if any(facts.tree.receiver_text(a.value) in scaler_texts or facts.kinds.has_kind(a.value, Kind.SCALER)
                       for a in c.args):
                    continue  # a wrapper given the scaler steps through it: `opts.step("g", scaler=scaler)`
                before = [b for b, _ in scaled if facts.tree.order[b] < facts.tree.order[c] and not exclusive(facts, b, c)]
                if not before:
                    continue
                seen.add(c)
                yield Violation(
                    c,
                    f"`{recv}.step()` after a scaled backward steps with gradients still multiplied by the loss scale "
                    "and skips the inf check; use `scaler.step(optimizer)` then `scaler.update()`",
                )
