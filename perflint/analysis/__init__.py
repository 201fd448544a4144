"""What the rules ask about: facts about one file, computed once and shared by every rule.

`facts.Facts` is a set of components (`component.Component`), each one analysis that
declares the components it reads and answers lazily, memoised:

* `tree` — one iterative walk over the libcst tree: each node's parent and source order,
  an index of the node types rules ask about, the import alias table; navigation;
* `bindings` — the name bindings of every scope, and which of them reach a use;
* `cross` — what the project's other modules say (callers, classes, option defaults);
* `devices` — device expressions, and whether the file is CUDA code;
* `kinds` — what kind of value an expression holds: a DataLoader, a batch from one, a
  model, an optimizer, a loss, a GradScaler, a tensor, a CUDA device … (`kinds.of`, a set
  of `vocab.Kind`);
* `steps` — which calls run backward or step an optimizer;
* `filewide` — file-wide facts: the file's words, autocast / GradScaler / TF32 / cudnn
  settings, whether tensors may live on an accelerator;
* `throttles` — tests that keep code from running every iteration (`if step % 50 == 0:`);
* `loops` — which loops train and which evaluate, which functions are per-step functions
  (`loop_kind`, `step_function_kind`), and whether a node runs on every iteration
  (`iteration_context`);
* `grad` — code that runs with autograd off;
* `hotpath` — the evidence that a node runs on every optimizer step.

Kinds that come only from a naming convention (a parameter called `loader`) are *weak*
(`Kind.NAMED_DATALOADER`, "~dataloader"); rules decide whether weak evidence is enough.
"""

# Exports are loaded on first use, so that `perflint.analysis.project` (which a warm run
# needs) does not pull in libcst.
_EXPORTS = {
    "Binding": "bindings", "Facts": "facts", "LoopInfo": "loops", "NOT_LITERAL": "syntax", "call_name": "syntax",
    "get_arg": "syntax", "has_splat": "syntax", "literal_value": "syntax", "Scope": "tree",
    "iter_nodes": "tree", "AUTOCASTS": "vocab", "DATALOADER": "vocab", "OPTIMIZER_CLASSES": "vocab",
    "SCALERS": "vocab", "Kind": "vocab", "name_hints": "kinds",
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
