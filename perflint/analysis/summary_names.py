"""The names a module hands to the modules that import it, as its summary records them
(`analysis.summary`): the library aliases a star import passes on, a literal `__all__`, and
the defaults of a yacs config tree (`_C.TRAIN.ACCUMULATION_STEPS = 1`)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.syntax import call_name, literal_value
from perflint.names import ImportTable, dotted


def top_level_library_aliases(facts, library_roots: frozenset[str]) -> dict:
    """Library names the module binds at its top level by absolute imports (`torch`, `nn`,
    `F`): what a `from <module> import *` hands on."""
    out = {}
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)) and not (
                        isinstance(small, cst.ImportFrom) and small.relative):
                    table = ImportTable()
                    if isinstance(small, cst.Import):
                        table.add_import(small)
                    else:
                        table.add_import_from(small)
                    for k, v in table.aliases.items():
                        if v.split(".", 1)[0] in library_roots and not k.startswith("_"):
                            out[k] = v
    return out


def dunder_all(facts) -> list[str] | None:
    """The names of a literal top-level `__all__` list or tuple."""
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                        and isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == "__all__" \
                        and isinstance(small.value, (cst.List, cst.Tuple)):
                    names = [literal_value(e.value) for e in small.value.elements]
                    return [n for n in names if isinstance(n, str)]
    return None


_CONFIG_NODES = frozenset({"CN", "CfgNode", "ConfigNode"})


def config_tree_defaults(facts) -> dict:
    """The literal defaults a module sets at its top level on a yacs config tree: `_C =
    CN()`, then `_C.TRAIN.ACCUMULATION_STEPS = 1` gives {"TRAIN.ACCUMULATION_STEPS": 1}
    (Swin-Transformer's `config.py`; the key is the path below the root)."""
    roots: set[str] = set()
    out: dict = {}
    for stmt in facts.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                continue
            target = small.targets[0].target
            if isinstance(target, cst.Name) and isinstance(small.value, cst.Call) \
                    and call_name(small.value) in _CONFIG_NODES:
                roots.add(target.value)
                continue
            path = dotted(target) if isinstance(target, cst.Attribute) else None
            parts = path.split(".") if path else []
            if len(parts) >= 3 and parts[0] in roots:
                v = literal_value(small.value)
                if isinstance(v, (int, float, str, bool, type(None))):
                    out[".".join(parts[1:])] = v
    return out
