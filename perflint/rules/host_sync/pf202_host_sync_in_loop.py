"""PF202 host-sync-in-loop: host-device sync (`.cpu()`, `float(t)`, `print(t)`, `if t:` …) on
every iteration."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts
from perflint.rules.base import Rule, Violation
from perflint.rules.host_sync.helpers import (
    call_sync,
    condition_sync,
    host_data_needed,
    later_syncs,
    waited_before,
)


class HostSyncInLoop(Rule):
    """
    ## What it does
    Flags other host-device synchronisations that run on every iteration of a training or
    evaluation loop: `.cpu()`, `.numpy()` and `.tolist()` of device tensors, `float()`,
    `int()` and `bool()` of a tensor, `print()` of a tensor (directly or in an f-string),
    `torch.cuda.synchronize()`, and `if`/`while`/`assert` on a tensor value.

    ## Why is this bad?
    Each of these waits for the GPU to finish everything queued so far, as `.item()` does
    (PF201): the CPU stops running ahead and the GPU idles at the start of the next step.
    An `if` on a tensor (`if loss.isnan():`) is the easiest to miss. The effect is the same
    range as PF201 (0–20% typical, up to 2× in launch-bound loops).

    ## Example
    ```python
    for x, y in loader:
        out = model(x)
        preds.extend(out.argmax(1).cpu().tolist())
        if torch.isnan(loss):
            break
    ```

    ## Use instead
    ```python
    for x, y in loader:
        out = model(x)
        preds.append(out.argmax(1))          # stays on the device
    preds = torch.cat(preds).cpu().tolist()  # one copy after the loop
    ```

    ## Fix safety
    No fix: moving the read out of the loop changes the program's structure.

    ## Applies to
    All torch versions. Values known to be on the host (Python numbers, numpy arrays,
    batches not yet moved to a device, tensors created without a device) are ignored, as
    are files where nothing can be on an accelerator (see PF201), `torch.cuda.synchronize()`
    next to a clock read in a loop that adds up elapsed time every iteration
    (`t_model += time.perf_counter() - t0`, `times.append(time.time() - t0)`) or prints it
    every iteration (`print(..., end - start)` with no throttle): measuring is its purpose,
    actions read back
    to be sent to an environment's `step()` (reinforcement learning), a branch that caps a
    counter it increments (`if shown < 3: shown += 1; print(out.tolist())`), and a test
    behind a flag that its branch sets (`if full or torch.all(q == 0): full = True`): both
    stop reading after a few iterations. Like PF201 it needs the per-step evidence (its
    `why`), is silent outside training (inference, prediction, drawing and export scripts,
    throughput probes), and reports each wait once: a copy right after another read, with no
    forward, backward or optimizer step between, is part of that wait, and a host copy that
    a CPU metric, a file or a drawing needs in the same iteration is not reported at all.
    Strict review of whole public repositories (issue 21, three review sheets): 11 right of 13
    reviewed findings still reported (0.85), up from 13 of 49 (0.27).

    **Off by default** (`extend-select = ["PF202"]` turns it on). On repositories no rule
    change had seen it stays below the 0.80 bar: 0.60 and 0.40 on two earlier held-out sets,
    and 12 right of 19 (0.63) on the 18 repositories of the last review, after this round's
    narrowing (reads that decide when a solver or decode stops, a barrier's wait, a timed
    step). The false alarms left are per-step host copies in loops that already wait for the
    GPU every iteration through code the analysis does not see (an RL agent acting through a
    library's experience source). PF201 (`.item()`) stays on.

    ## References
    - PyTorch performance tuning guide, "Avoid unnecessary CPU-GPU synchronization"
    - `torch.cuda.set_sync_debug_mode` documentation
    """

    code = "PF202"
    name = "host-sync-in-loop"
    summary = "host-device sync (`.cpu()`, `float(t)`, `print(t)`, `if t:` …) on every iteration"
    tokens = (b".cpu(", b".numpy(", b".tolist(", b"float(", b"int(", b"bool(", b"print(", b"synchronize", b"add_scalar", b"add_histogram",
              b"if ", b"assert ", b"while ")
    per_step = True
    default = False  # held-out whole-repository review: 0.60, 0.40, 0.63 (see "Applies to")

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.filewide.may_use_accelerator:
            return
        for call in facts.tree.calls():
            v = self._call(facts, call)
            if v is not None:
                yield v
        for node in (*facts.tree.index[cst.If], *facts.tree.index[cst.While], *facts.tree.index[cst.Assert]):
            if not condition_sync(facts, node):
                continue
            v = self._per_step(facts, node, "", node)
            if v is None:
                continue
            kind = {cst.If: "if", cst.While: "while", cst.Assert: "assert"}[type(node)]
            v.message = (f"`{kind}` on a tensor value reads it back to the host on every iteration; keep the check "
                         "on the device (e.g. `torch.nan_to_num`, masking) or do it every N steps")
            yield v

    def _call(self, facts: Facts, call: cst.Call) -> Violation | None:
        got = call_sync(facts, call)
        if got is None or got[0] == "forced":
            return None  # timing a region, or an action the environment needs: inherent
        return self._per_step(facts, call, got[1], call)

    @staticmethod
    def _per_step(facts: Facts, node: cst.CSTNode, message: str, report: cst.CSTNode) -> Violation | None:
        """The finding for a sync at `node` when it runs on every step of training (or of
        an evaluation during training) and is the first wait of its iteration."""
        ctx = facts.loops.iteration_context(node)
        if ctx is None:
            return None
        why = facts.hotpath.hot_path(node)
        if why is None:
            return None
        if waited_before(facts, ctx.node, node) is not None:
            return None  # the iteration just waited for the GPU: this copy costs nothing more
        if host_data_needed(facts, node):
            return None  # the host copy is what the iteration is for (a CPU metric, a file, a drawing)
        return Violation(report, message, why=why + later_syncs(facts, ctx.node, node))
