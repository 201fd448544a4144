"""A loader handed to an object that lives only inside the function that built it
(`evaluator = MscEval(net, dl)`, then `evaluator.evaluate()`): every read of it happens
during that one call of the function. And a loader of a one-off function of a script that
trains nothing (a metric's feature pass)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts, call_name
from perflint.rules.common import trains_in, uses_of_bound_name


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


def script_trains_nothing(facts: Facts) -> bool:
    """Neither the file nor any project module whose functions it calls trains: a metric,
    feature-extraction or prediction script (BasicSR's FID scripts). With no project in view,
    a call into another module leaves it unsure."""
    if facts.hotpath.trains or trains_in(facts, facts.module):
        return False  # a training loop or step, or any backward or optimizer step
    for call in facts.tree.calls():
        ref = facts.cross.project_ref(call.func)
        if ref is None or ref.startswith("#"):
            continue
        if facts.project is None or facts.project.file_of_trains(ref):
            return False
    return True


_READERS = {"iter", "enumerate", "tqdm", "len", "next", "list", "zip", "track"}


def stays_in_script(facts: Facts, call: cst.Call, scope: cst.FunctionDef) -> bool:
    """The loader built by `call` is bound to a local name that is only iterated, measured or
    handed to functions of this file or of the project (not returned, stored, or given to a
    library: `trainer.fit(model, loader)` may train)."""
    uses = uses_of_bound_name(facts, call, scope)
    if uses is None:
        return False
    for use in uses:
        p = facts.tree.parent(use)
        fn = facts.tree.enclosing_function(use)
        if isinstance(p, cst.Param) or (fn is not scope and fn is not None and any(
                prm.name.value == use.value for prm in fn.params.params)):
            continue  # a nested function's own parameter of that name (`def batches(data_loader):`)
        if isinstance(p, (cst.For, cst.CompFor)) and p.iter is use:
            continue
        if isinstance(p, cst.Attribute) and p.value is use:
            continue  # `loader.dataset`
        if isinstance(p, cst.Arg):
            outer = facts.tree.parent(p)
            if isinstance(outer, cst.Call):
                name = call_name(outer)
                if isinstance(outer.func, cst.Name) and (name in _READERS or name in facts.tree.functions_by_name):
                    continue
                ref = facts.cross.project_ref(outer.func)
                if ref is not None and not ref.startswith("#"):
                    continue  # a project function: `script_trains_nothing` asked whether its file trains
        return False
    return True


def binding_target(facts: Facts, use: cst.Name) -> cst.AssignTarget | None:
    """The assignment target `use` is (or is an element of: `a, b = ...`), else None."""
    node: cst.CSTNode = use
    parent = facts.tree.parent(node)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List)):
        node, parent = parent, facts.tree.parent(parent)
    return parent if isinstance(parent, cst.AssignTarget) and parent.target is node else None


def reads_of_this_binding(facts: Facts, uses: list, scope: cst.CSTNode) -> list:
    """Of the later uses of a name bound in `scope`, those that can read that binding: not
    the uses inside a nested function that binds the name itself (a parameter, an
    assignment), nor those after a statement of `scope`'s own body that binds it again
    unconditionally (a notebook's `train_loader, test_loader = from_arrays(...)` after the
    image loaders were read once)."""
    body = scope.body.body if isinstance(scope, cst.FunctionDef) and isinstance(scope.body, cst.IndentedBlock) \
        else getattr(scope, "body", ())
    local: dict = {}

    def own(fn: cst.FunctionDef, name: str) -> bool:
        if (fn, name) not in local:
            local[(fn, name)] = any(p.name.value == name for p in fn.params.params) or any(
                binding_target(facts, u) is not None and facts.tree.enclosing_function(u) is fn
                for u in facts.tree.names_in(fn, name))
        return local[(fn, name)]

    out, again = [], None
    for use in uses:
        fn = facts.tree.enclosing_function(use)
        if fn is not None and fn is not scope and own(fn, use.value):
            continue
        if again is not None and not facts.tree.is_inside(use, again):
            continue
        out.append(use)
        if again is None and binding_target(facts, use) is not None and facts.tree.statement_of(use) in body:
            again = facts.tree.statement_of(use)
    return out
