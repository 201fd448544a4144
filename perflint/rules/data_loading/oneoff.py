"""A loader handed to an object that lives only inside the function that built it
(`evaluator = MscEval(net, dl)`, then `evaluator.evaluate()`): every read of it happens
during that one call of the function."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts


def consumed_in_call(facts: Facts, name: str, scope: cst.CSTNode, after: int) -> bool:
    """Every later use of the loader `name` in the function `scope` is an argument of a call
    whose result is dropped or bound to a local name that is only ever the receiver of
    method calls (`ev = Evaluator(net, loader)`; `ev.run()`): neither the loader nor that
    object is returned, stored or handed on, so nothing reads the loader after `scope`
    returns."""
    if not isinstance(scope, cst.FunctionDef):
        return False
    uses = list(facts.tree.later_uses(name, scope, after))
    if not uses:
        return False
    for use in uses:
        arg = facts.tree.parent(use)
        call = facts.tree.parent(arg) if isinstance(arg, cst.Arg) else None
        if not isinstance(call, cst.Call) or arg not in call.args or not isinstance(call.func, cst.Name):
            return False
        holder = facts.tree.parent(call)
        if isinstance(holder, cst.Expr):
            continue  # `Evaluator(net, loader)` run for its effect
        if not (isinstance(holder, cst.Assign) and len(holder.targets) == 1 and holder.value is call
                and isinstance(holder.targets[0].target, cst.Name)):
            return False
        target = holder.targets[0].target
        for u in facts.tree.later_uses(target.value, scope, facts.tree.order.get(target, 0)):
            attr = facts.tree.parent(u)
            if not (isinstance(attr, cst.Attribute) and attr.value is u and isinstance(facts.tree.parent(attr), cst.Call)
                    and facts.tree.parent(attr).func is attr):
                return False  # the object is returned, stored or handed on: it may outlive the call
    return True
