"""Grad mode: whether code runs with autograd off (`torch.no_grad()` / `inference_mode()`
contexts, decorators and decorator factories that apply them) and whether a value was
computed that way."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import literal_value
from perflint.analysis.tree import _iter_expr
from perflint.analysis.vocab import Kind, _PASS_THROUGH_METHODS
from perflint.names import dotted


class GradMode(Component):
    needs = ("tree", "bindings", "cross")

    GRAD_OFF = ("torch.no_grad", "torch.inference_mode")

    def grad_mode_of(self, expr: cst.BaseExpression) -> str | None:
        """"off" for no_grad()/inference_mode()/set_grad_enabled(False), "on" for
        enable_grad()/set_grad_enabled(True), else None."""
        target = expr.func if isinstance(expr, cst.Call) else expr
        q = self.tree.qualname(target)
        if q is None and self.tree.imports.stars:
            q = dotted(target)  # `torch` from a star import (`from .utils import *`)
        if q in self.GRAD_OFF:
            if isinstance(expr, cst.Call) and q == "torch.inference_mode" and expr.args:
                if literal_value(expr.args[0].value) is False:
                    return "on"
            return "off"
        if q == "torch.enable_grad":
            return "on"
        if isinstance(expr, cst.Call) and self._grad_off_factory_call(expr):
            return "off"  # `@smart_inference_mode()`: a decorator that applies inference_mode
        if isinstance(expr, cst.Name):
            fns = self.tree.functions_by_name.get(expr.value, [])
            if len(fns) == 1 and self.tree.scope_of(fns[0]) is self.facts.module and self.is_grad_off_decorator(fns[0]):
                return "off"  # `@nograd` with `def nograd(f)` running `f` under `torch.no_grad()`
        if q == "torch.set_grad_enabled" and isinstance(expr, cst.Call) and expr.args:
            v = literal_value(expr.args[0].value)
            if v is False:
                return "off"
            if v is True:
                return "on"
            return "unknown"
        return None

    def _grad_off_factory_call(self, call: cst.Call) -> bool:
        """A call of a function of this file or the project that returns a decorator
        applying `torch.no_grad`/`torch.inference_mode` (yolov5's `smart_inference_mode()`)."""
        if isinstance(call.func, cst.Name):
            fns = self.tree.functions_by_name.get(call.func.value, [])
            if len(fns) == 1 and self.tree.scope_of(fns[0]) is self.facts.module:
                return self.is_grad_off_factory(fns[0])
        return Kind.GRAD_OFF_DECORATOR in self.cross.project_call_kinds(call)

    def is_grad_off_factory(self, fn: cst.FunctionDef) -> bool:
        """`def f(...): def decorate(fn): return torch.no_grad()(fn); return decorate`: every
        return of `f` is a nested function whose returns apply a grad-off context."""
        nested = {s.name.value: s for s in fn.body.body if isinstance(s, cst.FunctionDef)} \
            if isinstance(fn.body, cst.IndentedBlock) else {}
        rets = [r for r in self.tree.nodes_within(fn, cst.Return) if self.tree.enclosing_function(r) is fn]
        if not nested or not rets or not all(isinstance(r.value, cst.Name) and r.value.value in nested for r in rets):
            return False
        for r in rets:
            inner = nested[r.value.value]  # type: ignore[union-attr]
            inner_rets = [x for x in self.tree.nodes_within(inner, cst.Return)
                          if self.tree.enclosing_function(x) is inner and x.value is not None]
            if not inner_rets:
                return False
            for x in inner_rets:
                names = {self.tree.qualname(n) for n in _iter_expr(x.value) if isinstance(n, (cst.Name, cst.Attribute))}
                if not names & set(self.GRAD_OFF) or "torch.enable_grad" in names:
                    return False
        return True

    def is_grad_off_decorator(self, fn: cst.FunctionDef) -> bool:
        """`def nograd(f): def wrapper(*a, **k): with torch.no_grad(): return f(*a, **k); return
        wrapper`: a decorator of this file whose every return is a nested function that calls
        the decorated function only inside a grad-off `with`."""
        params = fn.params
        if len(params.params) != 1 or params.posonly_params or params.kwonly_params \
                or isinstance(params.star_arg, (cst.Param, cst.ParamStar)) or params.star_kwarg is not None \
                or not isinstance(fn.body, cst.IndentedBlock):
            return False
        wrapped = params.params[0].name.value
        nested = {s.name.value: s for s in fn.body.body if isinstance(s, cst.FunctionDef)}
        rets = [r for r in self.tree.nodes_within(fn, cst.Return) if self.tree.enclosing_function(r) is fn]
        if not nested or not rets or not all(isinstance(r.value, cst.Name) and r.value.value in nested for r in rets):
            return False
        for r in rets:
            inner = nested[r.value.value]  # type: ignore[union-attr]
            calls = [c for c in self.tree.calls_within(inner) if isinstance(c.func, cst.Name) and c.func.value == wrapped]
            if not calls or any(self.grad_context(c) != "off" for c in calls):
                return False
        return True

    def grad_context(self, node: cst.CSTNode) -> str | None:
        """"off"/"on"/"unknown" if `node` runs inside a grad-mode context or a function
        decorated with one (innermost wins); None if no such context is visible."""
        for a in self.tree.ancestors(node):
            if isinstance(a, cst.With):
                for item in a.items:
                    mode = self.grad_mode_of(item.item)
                    if mode is not None:
                        return mode
            elif isinstance(a, cst.FunctionDef):
                for d in a.decorators:
                    mode = self.grad_mode_of(d.decorator)
                    if mode is not None:
                        return mode
                return None
            elif isinstance(a, (cst.Lambda, cst.ClassDef)):
                return None
        return None

    def computed_without_grad(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether the value of `expr` was computed with autograd off: `out = model(x)` under
        `with torch.no_grad():`, then `loss = out.loss` outside it."""
        if depth > 4:
            return False
        if self.grad_context(expr) == "off":
            return True
        base = expr
        while isinstance(base, (cst.Attribute, cst.Subscript)):
            base = base.value
        if isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and base.func.attr.value in _PASS_THROUGH_METHODS:
            return self.computed_without_grad(base.func.value, depth + 1)
        if not isinstance(base, cst.Name):
            return False
        bindings = self.bindings.lookup(base.value, expr)
        if not bindings:
            return False
        for b in bindings:
            if b.how not in ("expr", "unpack") or b.site is None:
                return False
            if not (self.grad_context(b.site) == "off" or self.computed_without_grad(b.node, depth + 1)):
                return False
        return True

