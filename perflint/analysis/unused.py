"""Code nothing runs: a top-level function of a helper module that the project imports for
other names and never calls (see `ProjectIndex.never_used`), or any function of a module
that nothing imports (see `analysis.orphans`).  A finding inside it costs no time, so the
engine drops it, as it drops one in a branch no run takes."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.syntax import is_main_guard

# Names whose use in a file means its functions may be found by name at run time.
_DISPATCH = frozenset({"globals", "locals", "vars", "Fire", "import_module", "__import__", "modules"})


def nothing_runs(facts, node: cst.CSTNode) -> bool:
    """`node` sits in code nothing in the project runs (either kind above)."""
    return in_unused_function(facts, node) or in_orphan_module(facts, node)


def in_orphan_module(facts, node: cst.CSTNode) -> bool:
    """`node` sits in a function (or method) of a module that nothing in the project imports
    (`ProjectView.never_imported`) and whose top-level code, run as a script, calls none of
    its own functions or classes: not a script (`if __name__ == "__main__":`, a call of its
    `main()`), and no name looked up at run time (`globals()`, `fire.Fire()`)."""
    project = facts.project
    if project is None or (facts.tree.enclosing_function(node) is None and not isinstance(node, cst.FunctionDef)):
        return False  # top-level code (or a class body) runs when the file is run as a script
    if _runs_by_name(facts) or _runs_own_code(facts):
        return False
    return project.never_imported()


def _runs_own_code(facts) -> bool:
    """The file's top-level code (class bodies included) names one of its top-level
    functions or classes: run as a script, it runs them (once per file)."""
    got = facts.__dict__.get("_runs_own_code")
    if got is None:
        got = False
        tree = facts.tree
        names = {s.name.value for s in facts.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
        for name in names:
            for n in facts.filewide.words.name_nodes.get(name, ()):
                parent = tree.parent(n)
                if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is n:
                    continue  # its own `def`
                if not any(isinstance(a, (cst.FunctionDef, cst.Lambda)) for a in tree.ancestors(n)):
                    got = True
                    break
            if got:
                break
        facts.__dict__["_runs_own_code"] = got
    return got


def in_unused_function(facts, node: cst.CSTNode) -> bool:
    """`node` sits in a top-level function (no decorator) that nothing in the project runs
    (`ProjectView.never_used`): its module is imported by other files for other names, and
    this file names it nowhere but in its `def`, not even in a string.  Not in a file that is
    also a script (`if __name__ == "__main__":`, where `fire.Fire()` or a dispatch on
    `sys.argv` may run any function) or that looks names up at run time (`globals()`)."""
    project = facts.project
    if project is None:
        return False
    tree = facts.tree
    top = node if isinstance(node, cst.FunctionDef) else tree.enclosing_function(node)
    while top is not None and tree.parent(top) is not facts.module:
        top = tree.enclosing_function(top)
    if top is None or top.decorators:
        return False
    name = top.name.value
    words = facts.filewide.words
    if len(tree.functions_by_name.get(name, ())) != 1 or name in words.strings or _runs_by_name(facts):
        return False
    for n in words.name_nodes.get(name, ()):
        parent = tree.parent(n)
        if n is not top.name and not (isinstance(parent, cst.Attribute) and parent.attr is n):
            return False  # used in the file (`fn=train`, a call the summary does not resolve)
    return project.never_used(name)


def _runs_by_name(facts) -> bool:
    """The file is also a script, or looks names up at run time (once per file)."""
    got = facts.__dict__.get("_runs_by_name")
    if got is None:
        got = facts.__dict__["_runs_by_name"] = any(is_main_guard(s) for s in facts.module.body) \
            or bool(facts.filewide.words.names & _DISPATCH)
    return got
