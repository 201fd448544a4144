"""Evaluation that runs once per training run, after it: in the code that trains a whole run
(a training loop inside an epoch loop, or one that counts the run's steps), or after a call
of such a function of the file, outside any loop that holds the training (`HotPath` asks)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.syntax import call_name
from perflint.analysis.tree import iter_nodes


def after_training(facts, region: cst.CSTNode) -> bool:
    """An evaluation loop (or a call) that runs once per training run, after it: it sits in
    the function (or module code) that trains over epochs — every training loop there is
    inside an outer loop of its own (`for epoch ...: for batch in train_loader:`) or counts
    the run's steps (`for step in range(max_steps)`) — or that calls such a function of this
    file (`train(); evaluate()` under `__main__`), after the training, and in no loop that
    holds it (`if args.do_test:` after the epochs).  Each run of that code trains to the
    end, then evaluates once."""
    if isinstance(region, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        return False
    spans = _training_spans(facts, facts.tree.enclosing_function(region))
    if not spans:
        return False
    held = {id(a) for a in facts.tree.ancestors(region) if isinstance(a, (cst.For, cst.While))}
    at = facts.tree.order.get(region, 0)
    return all(not (loops & held) and at > end for end, loops in spans)


def _training_spans(facts, scope) -> list | None:
    """For the code of `scope` (a function, or None for the module): where each whole training
    run in it ends, with the loops around it — its training loops' whole-run loops and its
    calls of this file's functions that train a whole run; None when one of its training
    loops is a single pass.  Once per scope: a file's every call asks."""
    memo = facts.__dict__.setdefault("_spans_memo", {})
    if scope in memo:
        return memo[scope]
    memo[scope] = None
    nodes = []
    for loop in _training_loops_of(facts, scope):
        outer = _whole_run(facts, loop, scope)
        if outer is None:
            return None  # one epoch's pass: the function may be called per epoch
        nodes.append(outer)
    for call in facts.tree.calls_within(scope or facts.module):
        if isinstance(call.func, cst.Name) and facts.tree.enclosing_function(call) is scope \
                and _trains_whole_run(facts, call.func.value):
            nodes.append(call)
    spans = []
    for n in nodes:
        loops = {id(a) for a in facts.tree.ancestors(n) if isinstance(a, (cst.For, cst.While))}
        spans.append(((facts.tree._range(n) or (0, 1 << 62))[1], frozenset(loops)))
    memo[scope] = spans
    return spans


def _training_loops_of(facts, scope) -> list:
    """The training loops whose enclosing function is `scope` (None: the module's code), in
    the file's order. The loops are grouped once per file: asking every function of a long
    file in turn would walk every loop for each one (a 40,000-line file's summary spent most
    of its time there)."""
    by_scope = facts.__dict__.get("_training_loops_by_scope")
    if by_scope is None:
        by_scope = facts.__dict__["_training_loops_by_scope"] = {}
        for loop in facts.loops.training_loops():
            by_scope.setdefault(facts.tree.enclosing_function(loop), []).append(loop)
    return by_scope.get(scope, [])


def _whole_run(facts, loop: cst.CSTNode, scope) -> cst.CSTNode | None:
    """The loop that runs `loop`'s whole training: its outermost enclosing loop in `scope`, or
    the loop when it counts the run's steps; None for a single pass (one epoch of a function
    called per epoch)."""
    outer = None
    for a in facts.tree.ancestors(loop):
        if a is scope or isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(a, (cst.For, cst.While)):
            outer = a
    if outer is None and _counts_all_steps(facts, loop):
        outer = loop
    return outer


def _trains_whole_run(facts, name: str) -> bool:
    """`name` is the one top-level function of this file by that name, and it holds the whole
    training: it has training loops, each a whole run (`_whole_run`)."""
    memo = facts.__dict__.setdefault("_whole_run_memo", {})
    if name not in memo:
        fns = facts.tree.functions_by_name.get(name, [])
        loops = _training_loops_of(facts, fns[0]) if len(fns) == 1 and facts.tree.parent(fns[0]) is facts.module else []
        memo[name] = bool(loops) and all(_whole_run(facts, loop, fns[0]) is not None for loop in loops)
    return memo[name]


def _counts_all_steps(facts, loop: cst.CSTNode) -> bool:
    """A training loop that counts the run's steps, not one epoch's: `for it in
    range(max_iter)`, `for step in tqdm(range(num_train_steps))` (also through a name bound
    once), `while global_step < max_steps`."""
    if isinstance(loop, cst.While):
        text = facts.module.code_for_node(loop.test)
    else:
        it = loop.iter
        if isinstance(it, cst.Name):
            bound = facts.bindings.lookup(it.value, it)
            if len(bound) != 1 or bound[0].how != "expr":
                return False
            it = bound[0].node
        if not any(isinstance(n, cst.Call) and call_name(n) == "range" for n in iter_nodes(it)):
            return False
        text = facts.module.code_for_node(it)
    low = text.lower()
    return ("step" in low or "iter" in low) and "epoch" not in low and "len(" not in low
