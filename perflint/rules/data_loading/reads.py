"""Where a DataLoader is read, and whether those reads are cheap: one batch (`next(iter(loader))`,
`it = iter(loader)` then `next(it)`), one pass outside training (a final test), or a read
under a throttle; shared by the PF1 rules that stay silent for such loaders."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts, call_name, iter_nodes
from perflint.analysis.syntax import is_main_guard
from perflint.rules.common import param_for, runs_once, throttled_in_loop, trains_in, uses_of_bound_name
from perflint.rules.data_loading.helpers import _OPAQUE, _lightning_eval_loader_method, _through_wrappers
from perflint.rules.data_loading.oneoff import (
    binding_target,
    consumed_in_call,
    reads_of_this_binding,
    script_trains_nothing,
    stays_in_script,
)


def read_sites(facts: Facts, name: str, scope: cst.CSTNode, after: int, depth: int) -> list | None:
    """Where `name` (a loader bound before order `after`) is read in `scope`: a list of
    ("for", the For/CompFor), ("next", the `next(...)` call) or ("call", the call of a local
    function that reads it, its sites inside); None when it may be read elsewhere too
    (stored, returned, wrapped in an `iter()` kept for later, passed to unknown code)."""
    sites: list = []
    for use in reads_of_this_binding(facts, facts.tree.later_uses(name, scope, after), scope):
        if binding_target(facts, use) is not None:
            continue  # rebound (`batchs = [...]` on another path): not a read
        got = _through_wrappers(facts, use)
        if got is None:
            continue
        if got == _OPAQUE:
            return None
        node, arg, outer = got
        parent = facts.tree.parent(node)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            sites.append(("next", parent) if _breaks_at_once(parent) else ("for", parent))
            continue
        if (node is not use and depth < 2 and call_name(node) in ("tqdm", "enumerate", "track")
                and isinstance(parent, cst.Assign) and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name)):
            # `pbar = tqdm(loader)` … `for x in pbar:`: the wrapper's reads are the loader's.
            target = parent.targets[0].target
            inner = read_sites(facts, target.value, scope, facts.tree.order.get(target, 0), depth + 1)
            if inner is None:
                return None
            sites.extend(inner)
            continue
        if isinstance(outer, cst.Call) and call_name(outer) == "next" and node is not use \
                and call_name(node) in ("iter", "enumerate"):
            sites.append(("next", outer))  # `next(iter(loader))`, `next(enumerate(loader))`: one batch
            continue
        if node is not use and call_name(node) == "iter" and isinstance(parent, cst.Attribute) and parent.value is node \
                and parent.attr.value in ("next", "__next__") and isinstance(facts.tree.parent(parent), cst.Call):
            sites.append(("next", facts.tree.parent(parent)))  # `iter(loader).next()`: one batch
            continue
        if isinstance(outer, cst.Call) and call_name(outer) in ("list", "tuple") and isinstance(outer.func, cst.Name):
            sites.append(("for", outer))  # `list(loader)`: one pass
            continue
        if (node is not use and call_name(node) == "iter" and isinstance(parent, cst.Assign)
                and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
            # `dataiter = iter(loader)`, then `images, labels = next(dataiter)` (or the old
            # `dataiter.next()`): a batch per read of the iterator.
            target = parent.targets[0].target
            inner = _iterator_reads(facts, target.value, scope, facts.tree.order.get(target, 0))
            if inner is None:
                return None
            sites.extend(inner)
            continue
        if (depth < 2 and node is use and isinstance(arg, cst.Arg) and isinstance(outer, cst.Call)
                and isinstance(outer.func, cst.Name)):
            fns = facts.tree.functions_by_name.get(outer.func.value) or []
            param = param_for(fns[0], outer, arg) if len(fns) == 1 else None
            inner = read_sites(facts, param, fns[0], facts.tree.order.get(fns[0].body, 0), depth + 1) \
                if param is not None else None
            if inner is not None:
                sites.append(("call", outer, fns[0], inner))
                continue
        return None
    return sites


def _iterator_reads(facts: Facts, name: str, scope: cst.CSTNode, after: int) -> list | None:
    """The `next(it)` / `it.next()` calls that read the iterator `it`; None when it is used
    any other way (looped over, passed on, stored)."""
    sites: list = []
    for use in reads_of_this_binding(facts, facts.tree.later_uses(name, scope, after), scope):
        if binding_target(facts, use) is not None:
            continue
        parent = facts.tree.parent(use)
        up = facts.tree.parent(parent)
        if isinstance(parent, cst.Arg) and isinstance(up, cst.Call) and call_name(up) == "next" and up.args[0] is parent:
            sites.append(("next", up))
        elif isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in ("next", "__next__") \
                and isinstance(up, cst.Call) and up.func is parent:
            sites.append(("next", up))
        else:
            return None
    return sites


def _breaks_at_once(loop: cst.CSTNode) -> bool:
    """`for batch in loader: …; break`: the body ends in an unconditional `break`, so the loop
    reads one batch (a sanity check, a shape probe)."""
    if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock) or not loop.body.body:
        return False
    last = loop.body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(x, cst.Break) for x in last.body)


def _function_called_rarely(facts: Facts, fn: cst.FunctionDef) -> bool | None:
    """For a top-level function of this file: None when every call of it runs once (outside
    any loop), True when some call runs in a loop but only under a throttle (`if step % N ==
    0: sample_images()`), False when it is called on every iteration, from code that may
    repeat, or from nowhere in view."""
    if facts.tree.parent(fn) is not facts.module:
        return False
    calls = [c for c in facts.tree.calls() if isinstance(c.func, cst.Name) and c.func.value == fn.name.value]
    if not calls:
        return False
    result = None
    for c in calls:
        host = facts.tree.enclosing_function(c) or facts.module
        where = throttled_in_loop(facts, c, host)
        if where is False or (where is None and not runs_once(facts, host)):
            return False
        if where is True:
            result = True
    return result


def _cheap_site(facts: Facts, site: tuple, scope: cst.CSTNode) -> bool:
    kind, node = site[0], site[1]
    reader = facts.tree.enclosing_function(node)
    if reader is not None and reader is not scope and (scope is facts.module or facts.tree.is_inside(reader, scope)):
        # Read inside a function (`def sample_images(): next(iter(val_loader))`): how often
        # that function is called decides.
        if throttled_in_loop(facts, node, reader) is not None:
            return False
        where = _function_called_rarely(facts, reader)
        if where is False:
            return False
        if where is True:
            return _one_batch(site)
        return kind == "next" or (kind == "for" and not trains_in(facts, node))
    where = throttled_in_loop(facts, node, scope)
    if where is False:
        return False
    if where is True:
        # Every N steps: one sample batch is cheap; a whole pass (an evaluation every N
        # iterations during training) is not.
        return _one_batch(site)
    if kind == "next":
        return True  # one batch, once
    if kind == "call":
        fn, inner = site[2], site[3]
        return bool(inner) and all(_cheap_site(facts, s, fn) for s in inner)
    # One pass, not repeated, that is not the training itself: a final test after training,
    # or the whole job of a file that does not train (a prediction or export script, a
    # dataset's `__main__` self-check) — no training step waits for it.
    if isinstance(node, (cst.For, cst.While)) and facts.loops.loop_kind(node) == "train":
        return False
    return not trains_in(facts, node)


def _one_batch(site: tuple) -> bool:
    if site[0] == "next":
        return True
    return site[0] == "call" and bool(site[3]) and all(_one_batch(s) for s in site[3])


def read_cheaply(facts: Facts, call: cst.Call) -> bool:
    """The loader feeds no training pass and no repeated evaluation: every read of it is one
    batch (`next(iter(loader))`), one pass outside any loop that is not itself training (a
    final test), or a read under a throttle inside a loop (a sample batch every N steps), and
    the code that builds it runs once; or it is built in a function that runs once instead
    of training (`if not args.eval: train() else: test()`).  Workers, pinned memory and non-blocking copies then
    have next to nothing to speed up."""
    if _lightning_eval_loader_method(facts, call):
        return True
    parent = facts.tree.parent(call)
    scope = facts.tree.enclosing_function(call) or facts.module
    if isinstance(scope, cst.FunctionDef) and facts.hotpath.trains and facts.hotpath.runs_instead_of_training(scope) \
            and runs_once(facts, scope):
        return True  # built in `test()` of `if not args.eval: train() else: test()`: a one-off run
    if isinstance(parent, cst.Arg):
        outer = facts.tree.parent(parent)
        # `next(iter(DataLoader(...)))`, `for x in DataLoader(...)`
        node: cst.CSTNode = call
        sites: list | None = None
        if isinstance(outer, cst.Call) and call_name(outer) in ("iter", "enumerate", "tqdm"):
            node = outer
            up = facts.tree.parent(outer)
            nxt = facts.tree.parent(up) if isinstance(up, cst.Arg) else None
            if isinstance(nxt, cst.Call) and call_name(nxt) == "next" and call_name(outer) == "iter":
                sites = [("next", nxt)]
        if isinstance(outer, cst.Call) and call_name(outer) in ("list", "tuple") and isinstance(outer.func, cst.Name):
            sites = [("for", outer)]  # `list(DataLoader(...))`: one pass
        if sites is None:
            p = facts.tree.parent(node)
            if isinstance(p, (cst.For, cst.CompFor)) and p.iter is node:
                sites = [("next", p) if _breaks_at_once(p) else ("for", p)]
        if sites is None:
            return False
    elif isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is call:
        sites = [("next", parent) if _breaks_at_once(parent) else ("for", parent)]
    else:
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name)):
            return False
        target = parent.targets[0].target
        sites = read_sites(facts, target.value, scope, facts.tree.order.get(target, 0), 0)
        if sites is None and runs_once(facts, scope) and consumed_in_call(facts, target.value, scope,
                                                                          facts.tree.order.get(target, 0)):
            return True  # handed to an evaluator that lives only in this one-off function
    if sites and all(s[0] == "for" and isinstance(s[1], (cst.For, cst.While)) and facts.hotpath.after_training(s[1])
                     for s in sites):
        return True  # read only in a pass after the whole training (`if args.do_test:`), once per run
    if isinstance(scope, cst.FunctionDef) and script_trains_nothing(facts) and runs_once(facts, scope) \
            and stays_in_script(facts, call, scope):
        return True  # built in a one-off function of a script that trains nothing: an inference pass
    if scope is facts.module and _module_runs_as_script(facts) and script_trains_nothing(facts) \
            and stays_in_script(facts, call, scope) and _read_once_per_build(facts, call):
        return True  # built afresh at the top level of such a script for each setting it sweeps, read once each
    if sites is None or not runs_once(facts, scope):
        return False
    if not sites:
        # Never read: a local loader built and left unused costs nothing; one at module level
        # may be imported and read by another module, unless the module is a script that
        # does its work when it runs (nothing imports that) or the loader is built under
        # `if __name__ == "__main__":` (an importer never sees it).
        return isinstance(scope, cst.FunctionDef) or _module_runs_as_script(facts) \
            or any(is_main_guard(a) for a in facts.tree.ancestors(call))
    if throttled_in_loop(facts, call, scope) is False:
        return False  # the loader itself is rebuilt on every iteration
    return all(_cheap_site(facts, s, scope) for s in sites)


def _read_once_per_build(facts: Facts, call: cst.Call) -> bool:
    """Every later use of the name the loader is bound to sits in no loop that does not also
    build the loader: each loader built is read in one pass (siren's sweep over context
    sparsities builds one per sparsity)."""
    uses = uses_of_bound_name(facts, call, facts.module)
    if not uses:
        return False
    for use in uses:
        for anc in facts.tree.ancestors(use):
            if isinstance(anc, (cst.For, cst.While, cst.CompFor)) and not facts.tree.is_inside(call, anc) \
                    and not (isinstance(anc, cst.For) and facts.tree.is_inside(use, anc.iter)):
                return False
    return True


def _module_runs_as_script(facts: Facts) -> bool:
    """The module parses its command line or loops over data at import time (a script's
    top level, outside any function or class): no other module imports it for its names."""
    for stmt in facts.module.body:
        if isinstance(stmt, (cst.For, cst.While)):
            return True
        if isinstance(stmt, cst.SimpleStatementLine):
            for node in iter_nodes(stmt):
                if isinstance(node, cst.Call) and call_name(node) in ("parse_args", "parse_known_args"):
                    return True
    return False
