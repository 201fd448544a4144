"""PF305 clip-without-unscale: gradient clipping on scaled gradients (no scaler.unscale_)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import parse_stmt
from perflint.analysis import Facts, call_name
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import off_by_default
from perflint.rules.optim_autograd.helpers import exclusive, iteration_calls, scaled_backward, step_regions


def _clip_call(facts: Facts, call: cst.Call) -> bool:
    q = facts.tree.qualname(call.func) or ""
    return q in ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm")


def _runs_at_most_with(facts: Facts, stmt: cst.CSTNode, block: cst.CSTNode | None) -> bool:
    """`stmt` sits in `block`, or under conditionals within it, but under no loop or function
    of its own: it runs at most once each time `block` runs."""
    for node in facts.tree.ancestors(stmt):
        if node is block:
            return True
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
    return False


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
    All torch versions with AMP (`torch.amp` and the older `torch.cuda.amp`). Not in a
    branch that a run with every option at its default does not take: `if args.amp:` with
    `--amp` off by default, or `if args.clip > 0:` with a default of 0, the defaults read in
    the file, the project modules it imports, else the scripts that import it and pass
    `args` on (TorchSSL's `models/freematch/freematch.py`, whose entry script parses
    `--amp` with default False and whose documented runs pass `--amp False`); not for an
    option no default settles (None, a field the run's config sets) or that a documented
    command line passes (`--amp`). The bug is
    still there for a run that turns both on; the documented runs never reach it.

    ## References
    - PyTorch AMP examples, "Gradient clipping"
    - Measured (torch 2.13, `GradScaler("cpu")`, scale 65536): `clip_grad_norm_` without
      `unscale_` saw a total norm of 1,781,934; with it, 27.19
    """

    code = "PF305"
    name = "clip-without-unscale"
    summary = "gradient clipping on scaled gradients (no scaler.unscale_)"
    severity = Severity.ERROR
    fix_class = FixClass.SAFE
    tokens = (b"clip_grad",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        seen: set = set()
        for region in step_regions(facts):
            calls = iteration_calls(facts, region)
            scaled = [(c, scaled_backward(facts, c)) for c in calls]
            scaled = [(c, s) for c, s in scaled if s is not None]
            if not scaled:
                continue
            for clip in calls:
                if clip in seen or not _clip_call(facts, clip):
                    continue
                if off_by_default(facts, clip):
                    continue  # `if args.amp:` with `--amp` off by default: the documented runs never clip scaled gradients
                before = [s for c, s in scaled if facts.tree.order[c] < facts.tree.order[clip] and not exclusive(facts, c, clip)]
                if not before:
                    continue
                scaler = before[-1]
                if any(call_name(c) == "unscale_" and facts.tree.receiver_text(c.func.value) == scaler
                       for c in calls if isinstance(c.func, cst.Attribute)):
                    continue
                step = next(
                    (c for c in calls if facts.tree.order[c] > facts.tree.order[clip] and call_name(c) == "step"
                     and isinstance(c.func, cst.Attribute) and facts.tree.receiver_text(c.func.value) == scaler),
                    None,
                )
                if step is None:
                    continue
                seen.add(clip)
                fix = None
                stmt = facts.tree.statement_of(clip)
                opt = step.args[0].value if step.args and not step.args[0].keyword else None
                # Only where clip and step run together: a clip that runs on more steps than
                # the optimizer step (gradient accumulation, `if (i + 1) % k == 0: step`)
                # would call `unscale_` twice before `update()`, which raises.
                step_stmt = facts.tree.statement_of(step)
                if opt is not None and isinstance(stmt, cst.SimpleStatementLine) and isinstance(
                        facts.tree.parent(stmt), (cst.IndentedBlock, cst.Module)) \
                        and _runs_at_most_with(facts, stmt, facts.tree.parent(step_stmt)):
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
