"""What the rules ask about: facts about one file, computed once and shared by every rule.

One iterative walk over the libcst tree records each node's parent, indexes the node types
rules ask about, collects the name bindings of every scope and the import alias table.  On
top of that, small, memoised analyses answer the questions rules ask:

* what kind of value an expression holds — a DataLoader, a batch from one, a model, an
  optimizer, a loss, a GradScaler, a tensor, a CUDA device … (`kinds`);
* which loops are training loops and which are evaluation loops, and which functions are
  per-step functions (`loop_kind`, `step_function_kind`);
* whether a node runs on every iteration of such a loop, or only in a throttled branch such
  as `if step % 50 == 0:` (`iteration_context`);
* file-wide facts: CUDA code or not, autocast / GradScaler / TF32 / cudnn settings present.

Kinds that come only from a naming convention (a parameter called `loader`) are *weak* and
carry a leading "~"; rules decide whether weak evidence is enough for them.
"""

# Exports are loaded on first use, so that `perflint.analysis.project` (which a warm run
# needs) does not pull in libcst.
_EXPORTS = {
    "Binding": "bindings", "Facts": "facts", "LoopInfo": "loops", "NOT_LITERAL": "syntax", "call_name": "syntax",
    "get_arg": "syntax", "has_splat": "syntax", "literal_value": "syntax", "receiver": "syntax", "Scope": "tree",
    "iter_nodes": "tree", "AUTOCASTS": "vocab", "DATALOADER": "vocab", "OPTIMIZER_CLASSES": "vocab",
    "SCALERS": "vocab", "name_hints": "kinds",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'perflint.analysis' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"perflint.analysis.{module}"), name)
    globals()[name] = value
    return value
