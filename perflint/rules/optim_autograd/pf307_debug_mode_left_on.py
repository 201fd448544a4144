"""PF307 debug-mode-left-on: anomaly detection or the autograd profiler left on."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, get_arg, literal_value
from perflint.rules.base import Rule, Violation


_DEBUG_APIS = {
    "torch.autograd.set_detect_anomaly": "anomaly",
    "torch.autograd.detect_anomaly": "anomaly",
    "torch.autograd.profiler.profile": "profiler",
    "torch.autograd.profiler.emit_nvtx": "profiler",
    "torch.autograd.profiler.record_function": None,
}


class DebugModeLeftOn(Rule):
    """
    ## What it does
    Flags autograd debugging switched on unconditionally: `torch.autograd.set_detect_anomaly(True)`,
    `torch.autograd.detect_anomaly()`, and (in files with a training loop)
    `torch.autograd.profiler.profile(...)` / `emit_nvtx()`. Calls guarded by a flag — under an
    `if`, or with a non-literal argument such as `set_detect_anomaly(args.debug)` or
    `profile(enabled=args.profile)` — are left alone, as is a profiler whose report the code
    reads (`with profile(...) as prof:`, then `prof.export_chrome_trace(...)`,
    `prof.key_averages()` or `print(prof)`): a profiling run, not a switch left on.

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
        has_training = bool(facts.loops.training_loops()) or any(
            facts.loops.step_function_kind(fn) == "train" for fn in facts.tree.index[cst.FunctionDef]
        )
        for call in facts.tree.calls():
            q = facts.tree.qualname(call.func)
            kind = _DEBUG_APIS.get(q or "")
            if kind is None:
                continue
            if kind == "profiler" and not has_training:
                continue
            if self._guarded(facts, call, q) or (kind == "profiler" and self._report_read(facts, call)):
                continue
            what = "anomaly detection" if kind == "anomaly" else "the autograd profiler"
            yield Violation(
                call,
                f"{what} is switched on unconditionally (anomaly detection measured 5.3× slower per step); "
                "guard it with a debug flag",
            )

    @staticmethod
    def _report_read(facts: Facts, call: cst.Call) -> bool:
        """`with profile(...) as prof:`, then `prof.export_chrome_trace(...)`, `print(prof)` or
        `prof.key_averages()`: a profiling run whose report the code reads, not a leftover
        (MVSNet's `--mode profile`)."""
        item = facts.tree.parents.get(call)
        if not (isinstance(item, cst.WithItem) and item.asname is not None
                and isinstance(item.asname.name, cst.Name)):
            return False
        name = item.asname.name
        scope = facts.tree.enclosing_function(call) or facts.tree.module
        return any(n is not name for n in facts.tree.names_in(scope, name.value)
                   if not isinstance(facts.tree.parents.get(n), cst.Attribute)
                   or facts.tree.parents[n].value is n)

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
        for a in facts.tree.ancestors(call):
            if isinstance(a, (cst.If, cst.IfExp)):
                return True
            if isinstance(a, cst.FunctionDef):
                break
        return False
