"""Step calls: which calls run a backward pass or step an optimizer (an optimizer, a
GradScaler, a callable scaler that does both), from the kinds of their receivers."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.kinds import name_hints
from perflint.analysis.syntax import call_name
from perflint.analysis.vocab import Kind


class Steps(Component):
    needs = ("kinds",)

    def is_backward_call(self, call: cst.Call) -> bool:
        name = call_name(call)
        return name in ("backward", "manual_backward") and isinstance(call.func, cst.Attribute)

    def is_optimizer_step(self, call: cst.Call) -> bool:
        if call_name(call) != "step" or not isinstance(call.func, cst.Attribute):
            return False
        rk = self.kinds.of(call.func.value)
        if Kind.SCALER in rk or Kind.NAMED_SCALER in rk:
            return True
        if Kind.OPTIMIZER in rk:
            return True
        if Kind.NAMED_OPTIMIZER in rk and not ({Kind.MODEL, Kind.DATALOADER} & rk):
            return True
        return False

    def is_scaler_call_step(self, call: cst.Call) -> bool:
        """`loss_scaler(loss, optimizer, ...)`: a callable scaler object (timm's and MAE's
        NativeScaler) that runs backward and the optimizer step for the loop."""
        if not isinstance(call.func, (cst.Name, cst.Attribute)) or call_name(call) in ("step", "scale", "update"):
            return False
        if Kind.NAMED_SCALER not in name_hints(call_name(call) or "") and Kind.SCALER not in self.kinds.of(call.func):
            return False
        return any(a.keyword is None and self.kinds.has_kind(a.value, Kind.OPTIMIZER) for a in call.args)

    def is_scaler_step(self, call: cst.Call) -> bool:
        return (
            call_name(call) == "step"
            and isinstance(call.func, cst.Attribute)
            and self.kinds.has_kind(call.func.value, Kind.SCALER)
        )
