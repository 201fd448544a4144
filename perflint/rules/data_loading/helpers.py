"""PF1 — data loading: DataLoader options and host-to-device copies."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import add_arg, make_kwarg, parse_expr, parse_stmt, remove_arg, replace_arg_value
from perflint.analysis import DATALOADER, NOT_LITERAL, Facts, call_name, get_arg, has_splat, iter_nodes, literal_value
from perflint.names import dotted
from perflint.rules import register
from perflint.rules.base import Rule, Violation

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
#            pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator, *, …)
POS = {"dataset": 0, "num_workers": 5, "collate_fn": 6, "pin_memory": 7, "multiprocessing_context": 11}


def loader_arg(call: cst.Call, name: str) -> cst.Arg | None:
    return get_arg(call, name, POS.get(name))


def loader_options(facts: Facts, call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """A DataLoader call's options by name (positional ones by their position, `**kw` expanded
    where the dict is known); None when a `*args` or an unknown `**kw` hides some."""
    if not has_splat(call):
        out = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    else:
        if any(a.star == "*" for a in call.args):
            return None
        out = facts.call_keywords(call)
        if out is None:
            return None
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for name, pos in POS.items():
        if pos < len(positional):
            out.setdefault(name, positional[pos].value)
    return out


def worker_count(facts: Facts, call: cst.Call) -> tuple[str, cst.Arg | None]:
    """("zero" | "positive" | "unknown", the argument) for a DataLoader's num_workers."""
    arg = loader_arg(call, "num_workers")
    if arg is None:
        return "zero", None
    return workers_of(facts, arg.value), arg


def workers_of(facts: Facts, value: cst.BaseExpression, depth: int = 0) -> str:
    """"zero" | "positive" | "unknown" for a num_workers expression."""
    values = facts_literal_values(facts, value)
    if values is None and isinstance(value, cst.Name) and depth < 4:
        # `nw = args.workers` … `num_workers=nw`: what every binding resolves to.
        bs = facts.lookup(value.value, value)
        if bs and all(b.how == "expr" for b in bs):
            states = {workers_of(facts, b.node, depth + 1) for b in bs}  # type: ignore[arg-type]
            return states.pop() if len(states) == 1 else "unknown"
    if values is None:
        found, default = facts.option_default(value)  # `args.workers`, `cfg.num_workers`
        if not found:
            found, default = ctor_default(facts, value)  # `self.hparams.num_workers`
        if not found or default is None:
            return "unknown"
        values = [default]
    if all(v == 0 for v in values):
        return "zero"
    if all(isinstance(v, int) and v > 0 for v in values):
        return "positive"
    return "unknown"


def ctor_default(facts: Facts, value: cst.BaseExpression) -> tuple[bool, object]:
    """(True, default) for `self.hparams.X` (Lightning's `save_hyperparameters()`) or `self.X`
    bound only to the `__init__` parameter `X`, when that parameter has a literal default:
    `def __init__(self, ..., num_workers: int = 0)`.  The value a run uses unless the caller
    passes another."""
    if not isinstance(value, cst.Attribute):
        return False, None
    base, name = value.value, value.attr.value
    hparams = isinstance(base, cst.Attribute) and base.attr.value == "hparams" \
        and isinstance(base.value, cst.Name) and base.value.value == "self"
    plain = isinstance(base, cst.Name) and base.value == "self"
    if not (hparams or plain):
        return False, None
    cls = facts.enclosing_class(value)
    if cls is None or not isinstance(cls.body, cst.IndentedBlock):
        return False, None
    init = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"), None)
    if init is None:
        return False, None
    if plain:
        # `self.workers = num_workers` in `__init__` (and nowhere else): that parameter.
        bs = facts.self_attr_bindings(value)
        if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].node, cst.Name) \
                or facts.enclosing_function(bs[0].node) is not init:
            return False, None
        name = bs[0].node.value
    param = next((p for p in (*init.params.params, *init.params.kwonly_params) if p.name.value == name), None)
    if param is None or param.default is None:
        return False, None
    default = literal_value(param.default)
    if default is NOT_LITERAL:
        return False, None
    return True, default


def facts_literal_values(facts: Facts, node: cst.BaseExpression) -> list | None:
    """The literal values an expression can hold: itself, or every binding of a name."""
    v = literal_value(node)
    if v is not NOT_LITERAL:
        return [v]
    if isinstance(node, cst.Name):
        bindings = facts.lookup(node.value, node)
        if not bindings:
            return None
        values = []
        for b in bindings:
            if b.how != "expr":
                return None
            bv = literal_value(b.node)
            if bv is NOT_LITERAL:
                return None
            values.append(bv)
        return values
    return None


def moves_to_device(facts: Facts, node: cst.CSTNode) -> bool:
    """Whether code under `node` may place data on a device: `.cuda()`, `.pin_memory()`,
    `.to(<not provably the CPU>)`, a `device=` argument that is not provably the CPU, or a
    "cuda" string."""
    for n in iter_nodes(node):
        if isinstance(n, cst.Call):
            name = call_name(n)
            if name == "cuda" or name == "pin_memory":
                return True
            if name == "to" and _to_device_state(facts, n) != "none":
                return True
            dev = get_arg(n, "device")
            if dev is not None and facts.device_kinds(dev.value) - {"device_cpu"}:
                return True
        if isinstance(n, cst.SimpleString) and "cuda" in n.value:
            return True
    return False


_DTYPES = {"float", "float32", "float64", "double", "half", "float16", "bfloat16", "int", "int8", "int16", "int32",
           "int64", "long", "short", "uint8", "bool", "complex64", "complex128", "cfloat"}
_SHAPE_FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace",
                    "randint", "randperm", "eye", "normal", "bernoulli", "multinomial"}
_DATA_FACTORIES = {"tensor", "as_tensor", "Tensor", "FloatTensor", "LongTensor", "IntTensor", "DoubleTensor",
                   "HalfTensor", "BoolTensor", "ByteTensor", "stack", "cat", "concat", "concatenate", "hstack",
                   "vstack", "where", "clamp", "abs", "exp", "log", "sigmoid", "softmax", "log_softmax"}
_SAME_DEVICE_METHODS = {"float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte", "char",
                        "view", "reshape", "unsqueeze", "squeeze", "permute", "transpose", "contiguous", "clone",
                        "detach", "flatten", "expand", "expand_as", "repeat", "narrow", "type_as", "view_as",
                        "reshape_as", "t", "numpy", "tolist", "item", "split", "chunk", "unbind", "mean", "sum",
                        "std", "abs", "clamp", "sqrt", "exp", "log", "sign", "round", "floor", "ceil", "astype",
                        "copy", "squeeze_", "unsqueeze_", "mul", "add", "sub", "div", "normal_", "uniform_", "fill_",
                        "zero_", "requires_grad_"}
_HOST_BUILTINS = {"str", "int", "float", "bool", "len", "range", "open", "print", "repr", "format", "hash"}
_COLLECTION_BUILTINS = {"list", "tuple", "sorted", "reversed", "set", "dict", "zip", "enumerate", "map", "filter"}
_HOST_MODULES = ("numpy.", "os.", "pathlib.", "glob.", "json.", "csv.", "pickle.", "random.", "math.", "pandas.",
                 "PIL.", "soundfile.", "librosa.", "scipy.", "h5py.", "torchvision.transforms.",
                 "torchaudio.transforms.", "torchvision.io.", "torchaudio.load", "torch.from_numpy",
                 "torch.load")


def _to_device_state(facts: Facts, call: cst.Call) -> str:
    """For `x.to(...)`: "none" (only dtypes or copy flags), "cpu" or "device" (maybe not the CPU)."""
    state = "none"
    for a in call.args:
        kw = a.keyword.value if a.keyword is not None else None
        if kw in ("non_blocking", "copy", "memory_format"):
            continue
        if kw == "dtype" or _is_dtype(facts, a.value):
            continue
        if a.star:
            return "device"
        if facts.device_kinds(a.value) == {"device_cpu"}:
            state = "cpu" if state == "none" else state
            continue
        return "device"
    return state


def _is_dtype(facts: Facts, expr: cst.BaseExpression) -> bool:
    q = facts.qualname(expr) or ""
    return q.startswith("torch.") and q.rsplit(".", 1)[-1] in _DTYPES and q.count(".") == 1


def _default_device_changed(facts: Facts) -> bool:
    """The file moves tensor creation off the CPU by default (`torch.set_default_device`, a
    CUDA default tensor type, or `with torch.device(...)`)."""
    if facts.calls_to("torch.set_default_device", "torch.set_default_tensor_type"):
        return True
    return any(isinstance(facts.parent(c), cst.WithItem) for c in facts.calls_to("torch.device"))


def _combine(states) -> str:
    states = list(states)
    if "device" in states:
        return "device"
    if "unknown" in states:
        return "unknown"
    return "cpu"


def host_origin(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> str:
    """Where a value handed to a dataset lives: "cpu" (provably host data: literals, option
    values, numpy arrays, CPU tensors), "device" (maybe placed on a device) or "unknown"."""
    if expr is None or depth > 6:
        return "unknown"
    if literal_value(expr) is not NOT_LITERAL:
        if isinstance(expr, cst.SimpleString) and "cuda" in expr.value:
            return "device"
        return "cpu"
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
        return "cpu"
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        if not bs or any(b.how != "expr" for b in bs):
            return "unknown"
        return _combine(host_origin(facts, b.node, depth + 1) for b in bs)
    if isinstance(expr, cst.Attribute):
        if _is_dtype(facts, expr):
            return "cpu"
        base = expr.value
        if isinstance(base, cst.Name):
            bs = facts.lookup(base.value, base)
            if len(bs) == 1 and bs[0].how == "expr" and isinstance(bs[0].node, cst.Call) \
                    and call_name(bs[0].node) in ("parse_args", "parse_known_args"):
                return "cpu"  # an argparse option: a string, a number or a flag
        return "unknown"
    if isinstance(expr, cst.Subscript):
        return host_origin(facts, expr.value, depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        return _combine([host_origin(facts, expr.left, depth + 1), host_origin(facts, expr.right, depth + 1)])
    if isinstance(expr, cst.UnaryOperation):
        return host_origin(facts, expr.expression, depth + 1)
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        return _combine(host_origin(facts, e.value, depth + 1) for e in expr.elements)
    if isinstance(expr, cst.Dict):
        return _combine(host_origin(facts, e.value, depth + 1) for e in expr.elements if isinstance(e, cst.DictElement))
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        return "device" if moves_to_device(facts, expr) else "unknown"
    if isinstance(expr, cst.Call):
        return _call_origin(facts, expr, depth)
    return "unknown"


def _call_origin(facts: Facts, call: cst.Call, depth: int) -> str:
    q = facts.qualname(call.func) or ""
    dev = get_arg(call, "device")
    if q.startswith("torch.") and q.count(".") == 1:
        fn = q[len("torch."):]
        if dev is not None:
            return "cpu" if facts.device_kinds(dev.value) == {"device_cpu"} else "device"
        if fn in _SHAPE_FACTORIES:
            return "unknown" if _default_device_changed(facts) else "cpu"
        if fn.endswith("_like") or fn in _DATA_FACTORIES:
            if not call.args:
                return "unknown"
            first = host_origin(facts, call.args[0].value, depth + 1)
            if first == "cpu" and fn in ("tensor", "as_tensor", "Tensor") and _default_device_changed(facts):
                return "unknown"
            return first
    if q.startswith(_HOST_MODULES) or q in _HOST_BUILTINS:
        if any(moves_to_device(facts, a.value) for a in call.args):
            return "device"
        return "cpu"
    if q in _COLLECTION_BUILTINS:
        return _combine(host_origin(facts, a.value, depth + 1) for a in call.args) if call.args else "cpu"
    if isinstance(call.func, cst.Attribute) and not q:
        method = call.func.attr.value
        if method == "cuda":
            return "device"
        if method in ("cpu", "pin_memory"):
            return "cpu"
        if method == "to":
            state = _to_device_state(facts, call)
            if state == "device":
                return "device"
            return "cpu" if state == "cpu" else host_origin(facts, call.func.value, depth + 1)
        if method in _SAME_DEVICE_METHODS:
            return host_origin(facts, call.func.value, depth + 1)
    return "unknown"


def _function_node(facts: Facts, expr: cst.BaseExpression) -> cst.CSTNode | None:
    if isinstance(expr, cst.Lambda):
        return expr
    if isinstance(expr, cst.Name):
        fns = facts.functions_by_name.get(expr.value)
        if fns:
            return fns[0]
        cls = facts.classes_by_name.get(expr.value)
        if cls is not None:
            return cls
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        cls = facts.classes_by_name.get(expr.func.value)
        if cls is not None:
            return cls
    return None


def dataset_origin(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> str:
    """"cpu" (yields CPU data for sure), "device" (may place data on a device) or "unknown"."""
    if expr is None or depth > 5:
        return "unknown"
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return dataset_origin(facts, bs[0].node, depth + 1)
        return "unknown"
    if isinstance(expr, cst.Attribute):
        bs = facts.self_attr_bindings(expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return dataset_origin(facts, bs[0].node, depth + 1)
        return "unknown"
    if isinstance(expr, cst.Call):
        q = facts.qualname(expr.func) or ""
        args = _combine(host_origin(facts, a.value) for a in expr.args)
        if q == "torch.utils.data.TensorDataset":
            return args
        if q.startswith(("torchvision.datasets.", "torchaudio.datasets.")):
            # The dataset reads files on the host; only its arguments (a transform that
            # moves samples, say) can put data elsewhere.
            return "device" if any(moves_to_device(facts, _resolved(facts, a.value)) for a in expr.args) else "cpu"
        if isinstance(expr.func, cst.Name):
            cls = facts.classes_by_name.get(expr.func.value)
            if cls is not None:
                return "device" if moves_to_device(facts, cls) else args
        if "device_samples" in facts.project_class_kinds(expr.func):
            return "device"  # a project Dataset class whose samples are put on a device
        if any(a.keyword is not None and a.keyword.value == "device"
               and facts.device_kinds(a.value) - {"device_cpu"} for a in expr.args) \
                and "dataset" in facts.project_class_kinds(expr.func):
            return "device"  # `MyDataset(..., device=device)`: it places its samples there
    return "unknown"


def _resolved(facts: Facts, expr: cst.BaseExpression) -> cst.CSTNode:
    """A name's single binding, else the expression itself."""
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return bs[0].node
    return expr


def collate_origin(facts: Facts, call: cst.Call, expr: cst.BaseExpression | None = None, depth: int = 0) -> str:
    if expr is None:
        arg = loader_arg(call, "collate_fn")
        expr = arg.value if arg is not None else None
    if expr is None or literal_value(expr) is None:
        return "cpu"
    if isinstance(expr, cst.Name) and depth < 3:
        bound = _resolved(facts, expr)
        if bound is not expr and isinstance(bound, cst.Call):
            return collate_origin(facts, call, bound, depth + 1)
    if isinstance(expr, cst.Call) and (facts.qualname(expr.func) or call_name(expr)) in ("functools.partial", "partial") \
            and expr.args:
        # `partial(collate, device=device)`: a device bound into the collate moves the batch.
        for a in expr.args[1:]:
            if a.keyword is not None and a.keyword.value in ("device", "dev") \
                    and facts.device_kinds(a.value) - {"device_cpu"}:
                return "device"
            if a.keyword is None and moves_to_device(facts, a.value):
                return "device"
        return collate_origin(facts, call, expr.args[0].value, depth + 1)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value not in facts.classes_by_name:
        # A collator object from another module built with a device (`Collator(device=dev)`).
        for a in expr.args:
            if a.keyword is not None and a.keyword.value in ("device", "dev") \
                    and facts.device_kinds(a.value) - {"device_cpu"}:
                return "device"
    fn = _function_node(facts, expr)
    if fn is None:
        return "unknown"
    return "device" if moves_to_device(facts, fn) else "cpu"


def in_memory_tensors(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> bool:
    """The dataset is a `TensorDataset` (directly or through a name bound once): indexing a
    tensor is all a sample costs, so worker processes only add inter-process copies."""
    if expr is None or depth > 5:
        return False
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        return len(bs) == 1 and bs[0].how == "expr" and in_memory_tensors(facts, bs[0].node, depth + 1)
    if isinstance(expr, cst.Attribute):
        bs = facts.self_attr_bindings(expr)
        return len(bs) == 1 and bs[0].how == "expr" and in_memory_tensors(facts, bs[0].node, depth + 1)
    return isinstance(expr, cst.Call) and facts.qualname(expr.func) == "torch.utils.data.TensorDataset"


def cheap_samples(facts: Facts, opts: dict) -> bool:
    """The loader's samples cost next to nothing: a TensorDataset, or a Dataset class (of this
    file or the project) that only indexes data already in memory or slices a memory-mapped
    token file, with no collate_fn or one that only pads and stacks (a tokenised corpus, a
    replay buffer).  Worker processes would only add inter-process copies."""
    dataset = opts.get("dataset")
    if in_memory_tensors(facts, dataset):
        return True
    node = _resolved(facts, dataset) if dataset is not None else None
    if isinstance(node, cst.Attribute):
        bs = facts.self_attr_bindings(node)
        node = bs[0].node if len(bs) == 1 and bs[0].how == "expr" else node
    if not isinstance(node, cst.Call):
        return False
    cls = facts.classes_by_name.get(node.func.value) if isinstance(node.func, cst.Name) else None
    if cls is not None:
        if cls.name.value not in facts.dataset_classes or not facts.cheap_samples_class(cls):
            return False
        kinds: frozenset = frozenset()
    else:
        kinds = facts.project_class_kinds(node.func)
        if "cheap_samples" not in kinds:
            return False
    collate = opts.get("collate_fn")
    if collate is None or literal_value(collate) is None:
        return True
    if isinstance(collate, cst.Attribute) and collate.attr.value == "collate_fn":
        # `collate_fn=dataset.collate_fn`: the dataset class's own method.
        if cls is not None:
            fn = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "collate_fn"),
                      None) if isinstance(cls.body, cst.IndentedBlock) else None
            return fn is not None and facts.pad_only_collate(fn)
        return "pad_collate" in kinds
    fn = _function_node(facts, collate)
    return isinstance(fn, (cst.FunctionDef, cst.Lambda)) and facts.pad_only_collate(fn)


def token_collator(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> bool:
    """`collate_fn` is a tokenizer-side collator (`DataCollatorForSeq2Seq(tokenizer, ...)`, a
    project `...Collator` in a file that tokenises): the samples are token ids already, and a
    batch is a few kilobytes that pads in microseconds — nothing for workers or pinned memory
    to speed up next to a language-model step."""
    if expr is None or depth > 3:
        return False
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        return bool(bs) and all(b.how == "expr" and token_collator(facts, b.node, depth + 1) for b in bs)
    if isinstance(expr, cst.Call):
        name = call_name(expr) or ""
        if "Collator" not in name:
            return False
        q = facts.qualname(expr.func) or ""
        return q.startswith("transformers.") or any(
            full.split(".", 1)[0] == "transformers" for full in facts.imports.aliases.values()) \
            or words_mention_tokenizer(facts)
    return False


def words_mention_tokenizer(facts: Facts) -> bool:
    return facts.words.name_contains("tokenizer")


def _lightning_eval_loader_method(facts: Facts, call: cst.Call) -> bool:
    """Built in a DataModule's `test_dataloader` / `predict_dataloader`: Lightning reads those
    once, in `trainer.test()` / `trainer.predict()` after (or without) training."""
    fn = facts.enclosing_function(call)
    return fn is not None and facts.enclosing_class(fn) is not None and fn.name.value.lstrip("_") in (
        "test_dataloader", "predict_dataloader")


_ITER_WRAPPERS = {"enumerate", "tqdm", "trange", "zip", "iter", "track"}
_WORKER_ONLY_OPTIONS = ("persistent_workers", "prefetch_factor", "multiprocessing_context", "worker_init_fn")
_LOADER_ATTRS = {"dataset", "sampler", "batch_sampler", "batch_size", "num_workers"}


def iterated_once(facts: Facts, call: cst.Call) -> bool:
    """The loader is bound to a plain name that is read by exactly one loop, not itself
    inside a loop: a test set read once after training, or a loader handed once to a local
    function that reads it once.  Its workers start once either way.

    Reads are `for` loops and comprehensions over the loader, directly or through a wrapper
    (`enumerate`, `tqdm`, `zip`, or any call that is itself the loop's iterable, such as
    `logger.log_every(loader, 10)`); `len(loader)` and `loader.dataset` are not reads.  Any
    other use (stored, returned, passed elsewhere) counts as "maybe more than once"."""
    assign = facts.parent(call)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)):
        return False
    scope = facts.enclosing_function(assign) or facts.module
    return _reads(facts, assign.targets[0].target.value, scope, facts.order.get(assign.targets[0].target, 0), 0) == 1


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _in_a_loop(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    """Whether `node` may run more than once per run of `scope`: under a loop, another
    comprehension, or a nested function (a `for` clause's own comprehension does not count)."""
    anc = facts.parent(node)
    own = anc if isinstance(node, cst.CompFor) else None
    while anc is not None and anc is not scope:
        if isinstance(anc, (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.CompFor)):
            return True
        if isinstance(anc, _COMPREHENSIONS) and anc is not own:
            return True
        anc = facts.parent(anc)
    return False


_OPAQUE = "opaque"


def _through_wrappers(facts: Facts, use: cst.Name):
    """A use of a loader name, followed up through what iterates it (`enumerate(loader)`,
    `tqdm(...)`, `for … in …`): None when it reads no batch (`len(loader)`, a loader
    attribute such as `.dataset`, `loader.__len__()`), `_OPAQUE` when another attribute may
    read it, else (the outermost node, its Arg parent or None, the call around that)."""
    parent = facts.parent(use)
    if isinstance(parent, cst.Attribute) and parent.value is use:
        if parent.attr.value in _LOADER_ATTRS:
            return None
        if parent.attr.value == "__len__" and isinstance(facts.parent(parent), cst.Call):
            return None  # `loader.__len__()` counts batches; it reads none
        return _OPAQUE
    node: cst.CSTNode = use
    arg = facts.parent(node)
    outer = facts.parent(arg) if isinstance(arg, cst.Arg) else None
    if isinstance(outer, cst.Call) and call_name(outer) == "len":
        return None
    while isinstance(outer, cst.Call) and (
        (call_name(outer) or "") in _ITER_WRAPPERS
        or (isinstance(facts.parent(outer), (cst.For, cst.CompFor)) and facts.parent(outer).iter is outer)
    ):
        node = outer
        arg = facts.parent(node)
        outer = facts.parent(arg) if isinstance(arg, cst.Arg) else None
    return node, arg, outer


def _reads(facts: Facts, name: str, scope: cst.CSTNode, after: int, depth: int) -> int:
    """How many times `name` (bound before order `after`) is iterated in `scope`; 2 stands
    for "more than once, or unknown"."""
    reads = 0
    for use in facts.later_uses(name, scope, after):
        got = _through_wrappers(facts, use)
        if got is None:
            continue
        if got == _OPAQUE:
            return 2
        node, arg, outer = got
        parent = facts.parent(node)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            if _in_a_loop(facts, parent, scope):
                return 2
            reads += 1
            continue
        if (depth < 2 and node is use and isinstance(arg, cst.Arg) and isinstance(outer, cst.Call)
                and isinstance(outer.func, cst.Name) and not _in_a_loop(facts, outer, scope)):
            fns = facts.functions_by_name.get(outer.func.value) or []
            param = _param_for(fns[0], outer, arg) if len(fns) == 1 else None
            if param is not None and _reads(facts, param, fns[0], facts.order.get(fns[0].body, 0), depth + 1) == 1:
                reads += 1
                continue
        return 2
    return reads


def _read_sites(facts: Facts, name: str, scope: cst.CSTNode, after: int, depth: int) -> list | None:
    """Where `name` (a loader bound before order `after`) is read in `scope`: a list of
    ("for", the For/CompFor), ("next", the `next(...)` call) or ("call", the call of a local
    function that reads it, its sites inside); None when it may be read elsewhere too
    (stored, returned, wrapped in an `iter()` kept for later, passed to unknown code)."""
    sites: list = []
    for use in facts.later_uses(name, scope, after):
        parent = facts.parent(use)
        if isinstance(parent, cst.AssignTarget) and parent.target is use:
            continue  # rebound (`batchs = [...]` on another path): not a read
        got = _through_wrappers(facts, use)
        if got is None:
            continue
        if got == _OPAQUE:
            return None
        node, arg, outer = got
        parent = facts.parent(node)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            sites.append(("next", parent) if _breaks_at_once(parent) else ("for", parent))
            continue
        if (node is not use and depth < 2 and call_name(node) in ("tqdm", "enumerate", "track")
                and isinstance(parent, cst.Assign) and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name)):
            # `pbar = tqdm(loader)` … `for x in pbar:`: the wrapper's reads are the loader's.
            target = parent.targets[0].target
            inner = _read_sites(facts, target.value, scope, facts.order.get(target, 0), depth + 1)
            if inner is None:
                return None
            sites.extend(inner)
            continue
        if isinstance(outer, cst.Call) and call_name(outer) == "next" and node is not use \
                and call_name(node) == "iter":
            sites.append(("next", outer))  # `next(iter(loader))`: one batch
            continue
        if isinstance(outer, cst.Call) and call_name(outer) in ("list", "tuple") and isinstance(outer.func, cst.Name):
            sites.append(("for", outer))  # `list(loader)`: one pass
            continue
        if (depth < 2 and node is use and isinstance(arg, cst.Arg) and isinstance(outer, cst.Call)
                and isinstance(outer.func, cst.Name)):
            fns = facts.functions_by_name.get(outer.func.value) or []
            param = _param_for(fns[0], outer, arg) if len(fns) == 1 else None
            inner = _read_sites(facts, param, fns[0], facts.order.get(fns[0].body, 0), depth + 1) \
                if param is not None else None
            if inner is not None:
                sites.append(("call", outer, fns[0], inner))
                continue
        return None
    return sites


def _breaks_at_once(loop: cst.CSTNode) -> bool:
    """`for batch in loader: …; break`: the body ends in an unconditional `break`, so the loop
    reads one batch (a sanity check, a shape probe)."""
    if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock) or not loop.body.body:
        return False
    last = loop.body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(x, cst.Break) for x in last.body)


def _throttled_in_loop(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode) -> bool | None:
    """None when `node` is in no loop of `scope`; True when it sits in a loop but not on every
    iteration (`if step % N == 0:`); False when it runs on every iteration of a loop."""
    cur = node
    seen_loop = False
    own = facts.parent(node) if isinstance(node, cst.CompFor) else None
    for anc in facts.ancestors(node):
        if anc is scope:
            break
        if isinstance(anc, cst.CompFor) or (isinstance(anc, _COMPREHENSIONS) and anc is not own):
            if not (isinstance(anc, cst.CompFor) and anc.iter is cur):
                return False  # inside another comprehension's loop
        if isinstance(anc, (cst.For, cst.While)) and cur is anc.body:
            seen_loop = True
            if facts.runs_each_time(node, anc, nested_functions=False):
                return False
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            return False  # a nested function: may run any number of times
        cur = anc
    return True if seen_loop else None


def _function_called_rarely(facts: Facts, fn: cst.FunctionDef) -> bool | None:
    """For a top-level function of this file: None when every call of it runs once (outside
    any loop), True when some call runs in a loop but only under a throttle (`if step % N ==
    0: sample_images()`), False when it is called on every iteration, from code that may
    repeat, or from nowhere in view."""
    if facts.parent(fn) is not facts.module:
        return False
    calls = [c for c in facts.calls() if isinstance(c.func, cst.Name) and c.func.value == fn.name.value]
    if not calls:
        return False
    result = None
    for c in calls:
        host = facts.enclosing_function(c) or facts.module
        where = _throttled_in_loop(facts, c, host)
        if where is False or (where is None and not runs_once(facts, host)):
            return False
        if where is True:
            result = True
    return result


def _cheap_site(facts: Facts, site: tuple, scope: cst.CSTNode) -> bool:
    kind, node = site[0], site[1]
    reader = facts.enclosing_function(node)
    if reader is not None and reader is not scope and (scope is facts.module or facts.is_inside(reader, scope)):
        # Read inside a function (`def sample_images(): next(iter(val_loader))`): how often
        # that function is called decides.
        if _throttled_in_loop(facts, node, reader) is not None:
            return False
        where = _function_called_rarely(facts, reader)
        if where is False:
            return False
        if where is True:
            return _one_batch(site)
        return kind == "next" or (kind == "for" and not _trains_in(facts, node))
    where = _throttled_in_loop(facts, node, scope)
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
    if isinstance(node, (cst.For, cst.While)) and facts.loop_kind(node) == "train":
        return False
    return not _trains_in(facts, node)


def _file_trains(facts: Facts) -> bool:
    return bool(facts.training_loops()) or any(
        facts.step_function_kind(fn) == "train" for fn in facts.index[cst.FunctionDef])


def _rebuilt_each_round(facts: Facts, call: cst.Call) -> bool:
    """The DataLoader is built anew on every iteration of a loop — in the loop body, or in a
    function this file calls from a loop (`run_epoch()` building its own loader): its workers
    die with it, so `persistent_workers` keeps nothing."""
    fn = facts.enclosing_function(call)
    if _throttled_in_loop(facts, call, fn or facts.module) is not None:
        return True
    if fn is None or facts.parent(fn) is not facts.module and facts.enclosing_class(fn) is None:
        return False
    name = fn.name.value
    own_method = facts.enclosing_class(fn) is not None
    for c in facts.calls():
        f = c.func
        hit = (isinstance(f, cst.Name) and f.value == name and not own_method) or (
            own_method and isinstance(f, cst.Attribute) and f.attr.value == name
            and isinstance(f.value, cst.Name) and f.value.value == "self")
        if hit and not facts.is_inside(c, fn) and \
                _throttled_in_loop(facts, c, facts.enclosing_function(c) or facts.module) is False:
            return True
    return False


def _flat_sites(sites: list) -> list:
    out = []
    for site in sites:
        out.extend(_flat_sites(site[3]) if site[0] == "call" else [site])
    return out


def _batches_never_copied(facts: Facts, call: cst.Call) -> bool:
    """Every read of the loader is an evaluation loop (no backward, no optimizer step) whose
    body copies nothing to a device itself — no `.cuda()`, `.to(...)` or `*device*` helper:
    the batch goes on as is (a metric helper that turns it into numpy and copies slices), so
    a pinned batch would never be copied."""
    parent = facts.parent(call)
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
        return False
    target = parent.targets[0].target
    scope = facts.enclosing_function(call) or facts.module
    sites = _read_sites(facts, target.value, scope, facts.order.get(target, 0), 0)
    if not sites:
        return False
    for site in _flat_sites(sites):
        loop = site[1]
        if not isinstance(loop, cst.For) or facts.loop_kind(loop) == "train" or _trains_in(facts, loop):
            return False
        for c in facts.calls_within(loop.body):
            name = (call_name(c) or "").lower()
            if name in ("cuda", "to", "pin_memory") or "device" in name or "cuda" in name:
                return False
    return True


def _one_batch(site: tuple) -> bool:
    if site[0] == "next":
        return True
    return site[0] == "call" and bool(site[3]) and all(_one_batch(s) for s in site[3])


def _trains_in(facts: Facts, node: cst.CSTNode) -> bool:
    """Whether the code under `node` runs a training step: backward, an optimizer step, or a
    call of a function of this file that is a training step."""
    for c in facts.calls_within(node):
        if facts.is_backward_call(c) or facts.is_optimizer_step(c) or facts.is_scaler_call_step(c):
            return True
        f = c.func
        name = f.value if isinstance(f, cst.Name) else (
            f.attr.value if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self"
            else None)
        if name and any(facts.step_function_kind(fn) == "train" for fn in facts.functions_by_name.get(name, ())):
            return True
    return False


def runs_once(facts: Facts, scope: cst.CSTNode, depth: int = 0) -> bool:
    """`scope` (the module, or the function that builds the loader) runs once per run: the
    module, a `main` function, or a top-level function every call of which in this file sits
    outside any loop, in code that itself runs once."""
    if not isinstance(scope, cst.FunctionDef):
        return True
    if depth > 3 or facts.enclosing_class(scope) is not None or facts.step_function_kind(scope) is not None:
        return False
    name = scope.name.value
    if facts.project is not None and facts.parent(scope) is facts.module and not _file_trains(facts) \
            and facts.project.called_from_training(name):
        return False  # a training script elsewhere calls it (an evaluation every epoch)
    calls = facts.calls_named(name)
    if not calls:
        return name in ("main", "run", "_main")
    for c in calls:
        host = facts.enclosing_function(c) or facts.module
        if _throttled_in_loop(facts, c, host) is not None or not runs_once(facts, host, depth + 1):
            return False
    return True


def read_cheaply(facts: Facts, call: cst.Call) -> bool:
    """The loader feeds no training pass and no repeated evaluation: every read of it is one
    batch (`next(iter(loader))`), one pass outside any loop that is not itself training (a
    final test), or a read under a throttle inside a loop (a sample batch every N steps), and
    the code that builds it runs once.  Workers, pinned memory and non-blocking copies then
    have next to nothing to speed up."""
    if _lightning_eval_loader_method(facts, call):
        return True
    parent = facts.parent(call)
    scope = facts.enclosing_function(call) or facts.module
    if isinstance(parent, cst.Arg):
        outer = facts.parent(parent)
        # `next(iter(DataLoader(...)))`, `for x in DataLoader(...)`
        node: cst.CSTNode = call
        sites: list | None = None
        if isinstance(outer, cst.Call) and call_name(outer) in ("iter", "enumerate", "tqdm"):
            node = outer
            up = facts.parent(outer)
            nxt = facts.parent(up) if isinstance(up, cst.Arg) else None
            if isinstance(nxt, cst.Call) and call_name(nxt) == "next" and call_name(outer) == "iter":
                sites = [("next", nxt)]
        if isinstance(outer, cst.Call) and call_name(outer) in ("list", "tuple") and isinstance(outer.func, cst.Name):
            sites = [("for", outer)]  # `list(DataLoader(...))`: one pass
        if sites is None:
            p = facts.parent(node)
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
        sites = _read_sites(facts, target.value, scope, facts.order.get(target, 0), 0)
    if sites is None or not runs_once(facts, scope):
        return False
    if not sites:
        # Never read: a local loader built and left unused costs nothing; one at module level
        # may be imported and read by another module.
        return isinstance(scope, cst.FunctionDef)
    if _throttled_in_loop(facts, call, scope) is False:
        return False  # the loader itself is rebuilt on every iteration
    return all(_cheap_site(facts, s, scope) for s in sites)


def _param_for(fn: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> str | None:
    """The parameter of `fn` that receives `arg` at `call`."""
    params = [*fn.params.posonly_params, *fn.params.params]
    if arg.keyword is not None:
        names = {p.name.value for p in (*params, *fn.params.kwonly_params)}
        return arg.keyword.value if arg.keyword.value in names else None
    if any(a.star for a in call.args):
        return None
    positional = [a for a in call.args if a.keyword is None]
    i = positional.index(arg)
    return params[i].name.value if i < len(params) else None


def _dataloaders(facts: Facts) -> list[cst.Call]:
    return facts.calls_to(DATALOADER)


def _needs_parens(expr: cst.BaseExpression) -> bool:
    return not isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer)) and not expr.lpar


@register
class DataLoaderNoWorkers(Rule):
    """
    ## What it does
    Flags `torch.utils.data.DataLoader(...)` calls whose `num_workers` is missing or a literal
    `0` (by keyword or as the sixth positional argument).

    ## Why is this bad?
    With `num_workers=0` every batch is loaded, decoded and augmented in the training
    process, between optimizer steps: the GPU sits idle while the CPU prepares the next
    batch. The PyTorch performance tuning guide calls this synchronous loading. The size of
    the gain depends on how expensive a sample is to produce; not measured here as a single
    number (see `perflint verify` for a measurement on your own script).

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True,
                        num_workers=min(8, os.cpu_count() or 1))
    ```

    ## Fix safety
    **Unsafe**: sets `num_workers=min(8, os.cpu_count() or 1)` (adding `import os`), adds
    `persistent_workers=True` when the loader is read more than once and the target torch is
    1.7 or newer (workers then start once, not every epoch) and `pin_memory=True` in CUDA code. Worker processes change what
    a program does in ways a reader must check, so the fix is offered only when the file
    shows the dataset is safe in workers: a torchvision/torchaudio dataset, or a map-style
    Dataset class defined at the top level of the file (an IterableDataset only when it
    shards with `torch.utils.data.get_worker_info()`, else every worker yields the whole
    stream), whose `__getitem__` writes no shared state (`self.…` or globals: each worker
    has its own copy), holding no tensors on a device (CUDA cannot be used in forked
    workers), and with no lambda or nested function as dataset argument or `collate_fn`
    (the spawn start method must pickle them). No fix for a dataset from another module or
    a function: its code is not in view. No fix either when importing the file runs a loop
    or one of its own functions outside `if __name__ == "__main__":`: with the spawn or
    forkserver start method (Windows, macOS; Linux from Python 3.14) every worker imports the
    main module again, and the script fails with "An attempt has been made to start a new
    process before the current process has finished its bootstrapping phase" (reproduced
    with forkserver on the CPU). Check yourself, after the fix: random augmentations in
    workers: since torch 1.9 each worker seeds Python's `random`
    and torch from the loader's base seed, and numpy's global generator too as of torch
    2.x (`_worker_loop` seeds `numpy.random` when numpy is importable); older versions gave
    every worker the same numpy state. A seeded map-style dataset read once keeps its loss
    trajectory exactly: the sampler runs in the main process. With `persistent_workers=True`,
    epochs after the first see the same samples in another order: a kept worker pool no
    longer draws a base seed from the global generator before each shuffle (both tested on
    the CPU, `tests/test_dynamic_fixes.py`).

    ## Applies to
    All torch versions; CPU and CUDA. `DataLoader(ds, **kw)` is read through `kw` when it is
    a dict literal, `dict(...)` or `{**a, **b}` updated only with such values in reach (the
    `train_kwargs.update(cuda_kwargs)` shape); an unknown `**kw` is left alone. A
    `num_workers` that is an option (`args.workers`, `cfg.num_workers`) is reported when its
    default (argparse, a config dataclass or dict, in this file or a project module it
    imports) is 0 — unless the call also passes a worker-only option (`persistent_workers`,
    `prefetch_factor`, `multiprocessing_context`, `worker_init_fn`): the author runs with
    workers, and what the default 0 breaks is PF104's finding. Not reported for a loader that
    feeds no training pass and no repeated evaluation: one batch read once
    (`next(iter(DataLoader(ds, batch_size=len(ds))))`, a loop that ends in `break`), one pass
    that is not itself training (a final test after training, `list(loader)`, a prediction
    script or a dataset's `__main__` self-check run once), a sample batch read under `if step
    % N == 0:`, or a local loader never read; `len(loader)` and `loader.__len__()` are not
    reads. A loader that is returned, stored or handed to unknown code may feed training and
    is still reported. A local name bound to 0 is the user's choice and left alone. So are loaders over
    a `TensorDataset`: a sample is a tensor index, and workers only add inter-process copies (measured: an epoch of 100,000 × 64 floats at
    batch 512 took 0.47–0.75 s with no workers and 0.66–0.90 s with 2, five alternating
    runs; torch 2.13, 2-core CPU, `python benchmarks/tensor_dataset_workers.py --repeats 5`).

    ## References
    - PyTorch performance tuning guide, "Enable asynchronous data loading"
    - TorchFix TOR401 (the same check, without a message on what to use)
    """

    code = "PF101"
    name = "dataloader-no-workers"
    summary = "DataLoader loads data in the main process (num_workers missing or 0)"
    fix_class = "unsafe"
    tokens = (b"DataLoader",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in _dataloaders(facts):
            opts = loader_options(facts, call)
            if opts is None:
                continue
            value = opts.get("num_workers")
            why = ""
            if value is not None:
                v = literal_value(value)
                if v is NOT_LITERAL:
                    # A name bound to 0 in the file is the user's choice; an option whose
                    # default is 0 (argparse, a config field) loads in-process unless changed.
                    found, default = facts.option_default(value)
                    if not found or default != 0:
                        continue
                    why = f"`num_workers={dotted(value)}` (default 0)" if dotted(value) else "`num_workers` (default 0)"
                elif v != 0:
                    continue
            if cheap_samples(facts, opts) or token_collator(facts, opts.get("collate_fn")):
                continue  # in-memory, memory-mapped or tokenised samples: workers only add copies
            if why and any(k in opts for k in _WORKER_ONLY_OPTIONS):
                # `num_workers=args.workers` with `persistent_workers=True`/`prefetch_factor`:
                # the author runs with workers; what the default 0 breaks is PF104's finding.
                continue
            if read_cheaply(facts, call):
                continue  # one batch, a final test, a sample every N steps: nothing to overlap
            arg = next((a for a in call.args if a.value is value), None) if value is not None else None
            what = why or ("`num_workers=0`" if value is not None else "no `num_workers`")
            yield Violation(
                arg if arg is not None else call,
                f"DataLoader with {what} loads every batch in the training process; use worker "
                "processes, e.g. `num_workers=min(8, os.cpu_count() or 1)` (an IterableDataset "
                "must shard with get_worker_info(), or each worker repeats the data)",
                self._fix(facts, call, arg) if not why else None,
            )

    def _fix(self, facts: Facts, call: cst.Call, arg: cst.Arg | None):
        """Workers from the machine's core count, `persistent_workers=True` for a loader read
        more than once, `pin_memory=True` in CUDA code; only when the dataset and collate_fn
        are known to be safe in worker processes (see `workers_safe`)."""
        if has_splat(call) or (arg is not None and arg.keyword is None):
            return None
        dataset = loader_arg(call, "dataset")
        if dataset is None or workers_safe(facts, call, dataset.value) is not None:
            return None
        if runs_loaders_on_import(facts):
            return None
        value = parse_expr("min(8, os.cpu_count() or 1)")
        new = replace_arg_value(call, arg, value) if arg is not None else add_arg(call, make_kwarg("num_workers", value))
        added = ["`num_workers=min(8, os.cpu_count() or 1)`"]
        if loader_arg(call, "persistent_workers") is None and not iterated_once(facts, call) \
                and facts.target_torch >= (1, 7):
            new = add_arg(new, make_kwarg("persistent_workers", "True"))
            added.append("`persistent_workers=True`")
        if facts.is_cuda_code and loader_arg(call, "pin_memory") is None and get_arg(call, "pin_memory_device") is None:
            new = add_arg(new, make_kwarg("pin_memory", "True"))
            added.append("`pin_memory=True`")
        replacements: dict = {call: new}
        if not _imports_os(facts):
            anchor = _first_import(facts)
            if anchor is None:
                return None
            replacements[anchor] = cst.FlattenSentinel([
                parse_stmt("import os\n").with_changes(leading_lines=anchor.leading_lines),
                anchor.with_changes(leading_lines=[]),
            ])
        return self.unsafe("Add " + ", ".join(added), replacements)


def runs_loaders_on_import(facts: Facts) -> bool:
    """Whether importing the file runs code that may iterate a loader: a loop, or a call of
    one of its own functions, at the top level outside `if __name__ == "__main__":`.  With
    the spawn or forkserver start method (macOS, Windows; Linux from Python 3.14) each worker
    imports the main module again, and such a script then fails with "An attempt has been
    made to start a new process before the current process has finished its bootstrapping
    phase"."""
    local = set(facts.functions_by_name)
    for stmt in facts.module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(stmt, cst.If) and _is_main_guard(stmt.test):
            continue
        for n in iter_nodes(stmt):
            if isinstance(n, (cst.For, cst.While, cst.CompFor)):
                return True
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in local:
                return True
    return False


def _is_main_guard(test: cst.BaseExpression) -> bool:
    return isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and {
        dotted(test.left), literal_value(test.comparisons[0].comparator)} == {"__name__", "__main__"}


def _imports_os(facts: Facts) -> bool:
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import) and any(
                        dotted(a.name) == "os" and a.asname is None for a in small.names):
                    return True
    return False


def _first_import(facts: Facts) -> cst.SimpleStatementLine | None:
    """The first top-level import after any `from __future__` imports."""
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            if any(isinstance(s, cst.ImportFrom) and dotted(s.module) == "__future__" for s in stmt.body
                   if isinstance(s, cst.ImportFrom) and s.module is not None):
                continue
            return stmt
    return None


_MUTATORS = {"append", "extend", "update", "pop", "add", "insert", "remove", "clear", "setdefault", "__setitem__"}


def workers_safe(facts: Facts, call: cst.Call, dataset: cst.BaseExpression) -> str | None:
    """None when worker processes provably read this loader's dataset as the main process
    would, else the reason they may not: an IterableDataset that does not shard with
    `get_worker_info()`, data on a device, a dataset or collate_fn that spawn cannot pickle
    (a lambda, a class or function defined inside a function), a `__getitem__` that writes
    shared state, or a dataset this file cannot see."""
    collate = loader_arg(call, "collate_fn")
    if collate is not None and literal_value(collate.value) is not None:
        fn = _function_node(facts, collate.value)
        if fn is None or isinstance(fn, cst.Lambda) or facts.enclosing_function(fn) is not None:
            return "collate_fn"
    for opt in ("worker_init_fn", "sampler", "batch_sampler"):
        a = loader_arg(call, opt)
        if a is not None and isinstance(a.value, cst.Lambda):
            return opt
    node = _resolved(facts, dataset)
    if not isinstance(node, cst.Call):
        return "unknown dataset"
    if any(isinstance(n, cst.Lambda) for n in iter_nodes(node)):
        return "lambda"
    if dataset_origin(facts, node) == "device":
        return "device"
    q = facts.qualname(node.func) or ""
    if q.startswith(("torchvision.datasets.", "torchaudio.datasets.")):
        return None
    if not isinstance(node.func, cst.Name):
        return "unknown dataset"
    cls = facts.classes_by_name.get(node.func.value)
    if cls is None or node.func.value not in facts.dataset_classes or facts.parent(cls) is not facts.module:
        return "unknown dataset"
    iterable = any((facts.qualname(b.value) or dotted(b.value) or "").endswith("IterableDataset") for b in cls.bases)
    if iterable and not any(call_name(c) == "get_worker_info" for c in facts.calls_within(cls)):
        return "unsharded IterableDataset"
    for item in cls.body.body:
        if isinstance(item, cst.FunctionDef) and item.name.value in ("__getitem__", "__iter__", "__getitems__"):
            if _writes_shared_state(item):
                return "mutating __getitem__"
    return None


def _writes_shared_state(fn: cst.FunctionDef) -> bool:
    for n in iter_nodes(fn.body):
        if isinstance(n, (cst.Global, cst.Nonlocal)):
            return True
        targets = []
        if isinstance(n, cst.Assign):
            targets = [t.target for t in n.targets]
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            targets = [n.target]
        for t in targets:
            for sub in iter_nodes(t):
                if isinstance(sub, cst.Attribute) and isinstance(sub.value, cst.Name) and sub.value.value == "self":
                    return True
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _MUTATORS:
            base = n.func.value
            if isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name) and base.value.value == "self":
                return True
    return False


@register
class DataLoaderNoPinMemory(Rule):
    """
    ## What it does
    Flags `DataLoader(...)` calls without `pin_memory` in files that move data to CUDA.

    ## Why is this bad?
    Copies from pageable host memory to the GPU are staged and synchronous: the CUDA runtime
    synchronises before a pageable copy starts, so `non_blocking=True` cannot overlap it
    with compute. Batches in pinned (page-locked) memory copy by DMA and can overlap with
    the previous step's kernels. On an H100 80GB (torch 2.11, `python
    benchmarks/rule_effects.py`; results in `benchmarks/results/h100/rule_effects/`), four
    bf16 conv-net steps each copying a 37 MiB batch first took 96.0 ms from pageable memory
    with blocking copies and 81.3 ms from pinned memory with `non_blocking=True` (1.18×);
    the gain depends on batch size and step time.

    ## Example
    ```python
    loader = DataLoader(ds, batch_size=256, num_workers=4)
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
    ```

    ## Use instead
    ```python
    loader = DataLoader(ds, batch_size=256, num_workers=4, pin_memory=True)
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    ```

    ## Fix safety
    Adds `pin_memory=True`. **Safe** only when the facts prove the batches are host memory:
    a `TensorDataset` whose tensors are provably CPU tensors (created by a torch factory
    with no `device=` or `device="cpu"`, from numpy, or from literals, with no default
    device set in the file), a torchvision/torchaudio dataset, or a Dataset class in the
    same file that never places data on a device and whose constructor arguments are
    provably host values; and any `collate_fn` is a function in the file that does not
    move data either. **Unsafe** when any of this is unknown (a tensor returned by a
    function, a dataset from another module), because pinning a batch that is already on
    the GPU raises `RuntimeError: cannot pin 'torch.cuda.FloatTensor'`. Without an
    accelerator, `pin_memory=True` is a no-op with a warning.

    ## Applies to
    All torch versions; CUDA code only (the file calls `.cuda()`, names a `"cuda"` device or
    uses `torch.cuda`). Not reported when the `collate_fn` or the dataset already moves data
    to the device, or the dataset's tensors are created with a `device=` that may be a GPU
    (`torch.randn(n, d, device=device)`): there is no host-to-device copy to speed up. Not
    reported either for a loader read once or rarely (one batch, a final test after
    training, a sample every N steps; see PF101).

    ## References
    - PyTorch tutorial "A guide on good usage of non_blocking and pin_memory() in PyTorch"
    - CUDA Runtime API, "API synchronization behavior"
    """

    code = "PF102"
    name = "dataloader-no-pin-memory"
    summary = "DataLoader without pin_memory in CUDA code"
    fix_class = "safe or unsafe"
    tokens = (b"DataLoader",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.is_cuda_code:
            return
        for call in _dataloaders(facts):
            opts = loader_options(facts, call)
            if opts is None or "pin_memory" in opts or "pin_memory_device" in opts:
                continue
            collate = collate_origin(facts, call, opts.get("collate_fn"))
            dataset = dataset_origin(facts, opts.get("dataset"))
            if collate == "device" or dataset == "device":
                continue
            if read_cheaply(facts, call) or token_collator(facts, opts.get("collate_fn")):
                continue  # one batch, a final test, a sample every N steps; token-id batches
            if _batches_never_copied(facts, call):
                continue  # an evaluation loop that hands the batch on as is (to numpy, per slice)
            new = add_arg(call, make_kwarg("pin_memory", "True"))
            plan_msg = "Add `pin_memory=True`"
            if collate == "cpu" and dataset == "cpu" and not has_splat(call):
                fix = self.safe(plan_msg, {call: new})
            else:
                fix = self.unsafe(plan_msg, {call: new})
            yield Violation(
                call.func,
                "DataLoader without `pin_memory` in CUDA code: batches are copied to the GPU from "
                "pageable memory, which blocks; pass `pin_memory=True` and copy with `non_blocking=True`",
                fix,
            )


@register
class DataLoaderNoPersistentWorkers(Rule):
    """
    ## What it does
    Flags `DataLoader(...)` calls with worker processes (`num_workers` a non-zero literal or
    a value not known to be 0) and no `persistent_workers`.

    ## Why is this bad?
    Without persistent workers, every epoch (every `iter(loader)`) shuts the worker
    processes down and starts new ones, each re-creating its copy of the dataset. Measured
    with 2 workers on 2000 small samples (torch 2.13, CPU): an epoch took 0.14–0.18 s with
    `fork` and 4.8–6.4 s with `spawn`; with `persistent_workers=True` the later epochs took
    0.03–0.07 s with every start method. The gain matters when epochs are short or the
    start method is `spawn`/`forkserver` (the default on macOS and Windows, and on Linux
    from Python 3.14).

    ## Example
    ```python
    loader = DataLoader(ds, batch_size=64, num_workers=8)
    ```

    ## Use instead
    ```python
    loader = DataLoader(ds, batch_size=64, num_workers=8, persistent_workers=True)
    ```

    ## Fix safety
    **Unsafe.** Persistent workers keep the dataset object they were started with: a
    dataset changed between epochs (a curriculum, `IterableDataset.set_epoch`, re-sampling
    done on the dataset) is silently not seen by the workers (reproduced: epoch 2 still
    yielded epoch 1's values). `sampler.set_epoch` on a map-style dataset is fine. For a
    non-literal `num_workers` the fix writes `persistent_workers=<num_workers> > 0`, never
    a bare `True`, which would raise when the value is 0. `DataLoader(ds, **kw)` is read
    through `kw` when its keys are known (a dict literal, `dict(...)`, `.update({...})`) and
    reported without a fix: the dict may get its `num_workers` only on some paths.

    ## Applies to
    Target torch ≥ 1.7 (`persistent_workers` does not exist before); CPU and CUDA. Not reported for a loader bound to a name that is
    read by one loop that is not inside another loop — directly, through `enumerate`,
    `tqdm` or a logging wrapper such as `log_every(loader, 10)`, or by a local function it
    is handed to once (a test set read once, features extracted once): its workers start
    once either way; nor for one batch read once, or a sample batch read under `if step %
    N == 0:`. `len(loader)`, `loader.__len__()` and `loader.dataset` do not count as reads.

    ## References
    - `torch.utils.data.DataLoader` documentation, `persistent_workers`
    - Measured (torch 2.13, CPU): a dataset attribute changed between epochs reaches fresh
      workers (epoch 2 `[0, 10, 20, 30]`) but not persistent ones (`[0, 1, 2, 3]` again);
      epoch times with 2 workers and 2,000 small samples, not persistent → persistent after
      the first epoch: fork 0.18 s → 0.03–0.07 s, spawn 4.8–6.4 s → 0.03 s
    """

    code = "PF103"
    name = "dataloader-no-persistent-workers"
    summary = "DataLoader with workers but without persistent_workers"
    severity = Severity.INFO
    fix_class = "unsafe"
    min_torch = (1, 7)  # `persistent_workers` is a TypeError before 1.7
    tokens = (b"DataLoader",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in _dataloaders(facts):
            if has_splat(call):
                # `DataLoader(ds, **kw)`: read through `kw` when its keys are known.
                opts = loader_options(facts, call)
                if opts is None or "persistent_workers" in opts or "num_workers" not in opts:
                    continue
                if workers_of(facts, opts["num_workers"]) == "zero" or iterated_once(facts, call) \
                        or read_cheaply(facts, call) or _rebuilt_each_round(facts, call):
                    continue
                # No fix: the dict may get its `num_workers` only on some paths (`if use_cuda:
                # kw.update(...)`), and `persistent_workers=True` without workers raises.
                yield Violation(
                    call.func,
                    "DataLoader restarts its worker processes every epoch; pass `persistent_workers=True` "
                    "if the dataset does not change between epochs",
                    None,
                )
                continue
            if get_arg(call, "persistent_workers") is not None:
                continue
            state, arg = worker_count(facts, call)
            if state == "zero" or arg is None:
                continue
            if iterated_once(facts, call) or read_cheaply(facts, call) or _rebuilt_each_round(facts, call):
                continue  # the workers start once per loader either way
            if state == "positive" and literal_value(arg.value) is not NOT_LITERAL:
                value: cst.BaseExpression = cst.Name("True")
            else:
                nw = arg.value
                left = nw.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if _needs_parens(nw) else nw
                value = cst.Comparison(
                    left=left.deep_clone(),
                    comparisons=[cst.ComparisonTarget(cst.GreaterThan(), cst.Integer("0"))],
                )
            new = add_arg(call, make_kwarg("persistent_workers", value))
            yield Violation(
                call.func,
                "DataLoader restarts its worker processes every epoch; pass `persistent_workers=True` "
                "if the dataset does not change between epochs",
                self.unsafe("Add `persistent_workers`", {call: new}),
            )


@register
class DataLoaderInvalidWorkerOptions(Rule):
    """
    ## What it does
    Flags `persistent_workers=True`, `prefetch_factor=…` or `multiprocessing_context=…` on
    a `DataLoader` whose `num_workers` is missing or 0.

    ## Why is this bad?
    The constructor raises (verified on torch 2.13):

    - `ValueError: persistent_workers option needs num_workers > 0`
    - `ValueError: prefetch_factor option could only be specified in multiprocessing.let
      num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.`
    - `ValueError: multiprocessing_context can only be used with multi-process loading
      (num_workers > 0), but got num_workers=0`

    Before torch 2.0 `prefetch_factor` defaulted to 2 and only other values raised, so on a
    target below 2.0 only `prefetch_factor` values other than 2 are reported.

    ## Example
    ```python
    DataLoader(ds, batch_size=32, persistent_workers=True)
    ```

    ## Use instead
    ```python
    DataLoader(ds, batch_size=32)
    # or, with workers:
    DataLoader(ds, batch_size=32, num_workers=4, persistent_workers=True)
    ```

    ## Fix safety
    **Safe**: the code raises at construction as written. With `num_workers` missing or a
    literal 0 the option is removed; with a name that is only ever bound to 0 the option is
    made conditional on it (`persistent_workers=nw > 0`, `prefetch_factor=4 if nw > 0 else
    None`), so raising the worker count later still works.

    ## Applies to
    All torch versions (see above for `prefetch_factor` before 2.0).

    ## References
    - `torch/utils/data/dataloader.py` (2.13), the checks in `DataLoader.__init__`
    - Measured (torch 2.13): `DataLoader(ds, num_workers=0, persistent_workers=True)` raises
      "ValueError: persistent_workers option needs num_workers > 0"; with `prefetch_factor=2`
      it raises "prefetch_factor option could only be specified in multiprocessing"
    """

    code = "PF104"
    name = "dataloader-invalid-worker-options"
    summary = "worker-only DataLoader options with num_workers=0 (raises ValueError)"
    severity = Severity.ERROR
    fix_class = "safe"
    tokens = (b"DataLoader",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in _dataloaders(facts):
            if has_splat(call):
                continue
            state, nw_arg = worker_count(facts, call)
            if state != "zero":
                continue
            for opt in ("persistent_workers", "prefetch_factor", "multiprocessing_context"):
                arg = loader_arg(call, opt)
                if arg is None:
                    continue
                v = literal_value(arg.value)
                if v is None or v is False or isinstance(arg.value, cst.IfExp):
                    continue  # harmless, or already conditional
                if opt == "persistent_workers" and v is not True:
                    continue  # a variable: raises only when it is truthy
                if opt == "prefetch_factor" and facts.target_torch < (2, 0) and v == 2:
                    continue
                if nw_arg is None or literal_value(nw_arg.value) is not NOT_LITERAL:
                    new = remove_arg(call, arg)
                    fix_msg = f"Remove `{opt}`"
                else:
                    nw = nw_arg.value.deep_clone()
                    cond = cst.Comparison(left=nw, comparisons=[cst.ComparisonTarget(cst.GreaterThan(), cst.Integer("0"))])
                    if opt == "persistent_workers":
                        new_value: cst.BaseExpression = cond
                    else:
                        new_value = cst.IfExp(test=cond, body=arg.value.deep_clone(), orelse=cst.Name("None"))
                    new = replace_arg_value(call, arg, new_value)
                    fix_msg = f"Make `{opt}` conditional on `num_workers > 0`"
                if nw_arg is not None and literal_value(nw_arg.value) is NOT_LITERAL and dotted(nw_arg.value):
                    message = (f"`{opt}` needs `num_workers > 0`: with the default `{dotted(nw_arg.value)}` "
                               "(0) this DataLoader raises ValueError when it is built")
                else:
                    message = f"`{opt}` needs `num_workers > 0`: this DataLoader raises ValueError when it is built"
                yield Violation(arg, message, self.safe(fix_msg, {call: new}))


def _target_device(facts: Facts, call: cst.Call) -> str | None:
    """For `.to(...)`/`.cuda(...)`: "cuda", "maybe" (unknown device), or None (not a
    host-to-CUDA copy: CPU, other devices, dtype-only, another tensor)."""
    name = call_name(call)
    if name == "cuda":
        return "cuda"
    if name != "to":
        return None
    dev = get_arg(call, "device", 0)
    if dev is None:
        return None
    q = facts.qualname(dev.value) or ""
    if q.startswith("torch.") and q.rsplit(".", 1)[-1] in _DTYPES:
        return None
    ks = facts.kinds(dev.value)
    if ks & {"tensor", "output", "batch", "model"}:
        return None
    dk = facts.device_kinds(dev.value)
    if dk == {"device_cpu"} or ("device_other" in dk and not dk & {"device_cuda", "device_unknown"}):
        return None
    if "device_other" in dk:
        return "maybe"  # `torch.accelerator.current_accelerator()`: CUDA, or another accelerator
    if "device_cuda" in dk and not (dk & {"device_unknown"}):
        return "cuda"
    if dk <= {"device_cpu", "device_cuda"}:
        return "cuda"  # "cuda" if torch.cuda.is_available() else "cpu"
    # Unknown: only a value named like a device counts (`self.img_dtype` may be a dtype).
    if dev.keyword is not None or _DEVICE_NAME.search((dotted(dev.value) or "").rsplit(".", 1)[-1].lower()):
        return "maybe"
    return None


_DEVICE_NAME = re.compile(r"(device|dev|cuda|gpu|rank)(_?id)?s?$|^(dev|device|gpu)")


_DTYPES = {
    "float", "float32", "float16", "half", "bfloat16", "float64", "double", "int", "int32", "int64",
    "long", "int8", "uint8", "bool", "int16", "short", "complex64", "complex128", "cfloat",
    "float8_e4m3fn", "float8_e5m2",
}


def batch_loaders(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> list[cst.Call] | None:
    """The DataLoader calls a batch expression comes from; None when not traceable."""
    if depth > 8:
        return None
    while isinstance(expr, (cst.Subscript, cst.Attribute)) and not (
        isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"
    ):
        expr = expr.value
    if isinstance(expr, cst.Call) and call_name(expr) in ("to", "cuda", "float", "long", "half") and isinstance(expr.func, cst.Attribute):
        return batch_loaders(facts, expr.func.value, depth + 1)
    bindings = []
    if isinstance(expr, cst.Name):
        bindings = facts.lookup(expr.value, expr)
    elif isinstance(expr, cst.Attribute):
        bindings = facts.self_attr_bindings(expr)
    if not bindings:
        return None
    out: list[cst.Call] = []
    for b in bindings:
        if b.how in ("iter", "iter_unpack"):
            found = _iter_loaders(facts, b.node, depth + 1)
        elif b.how in ("expr", "unpack"):
            found = batch_loaders(facts, b.node, depth + 1) if not isinstance(b.node, (cst.DictComp, cst.ListComp, cst.GeneratorExp, cst.Tuple, cst.List, cst.Dict)) else None
            if isinstance(b.node, cst.Call) and call_name(b.node) == "next" and b.node.args:
                found = _iter_loaders(facts, b.node.args[0].value, depth + 1)
        else:
            found = None
        if found is None:
            return None
        out.extend(found)
    return out


def _iter_loaders(facts: Facts, it: cst.BaseExpression, depth: int) -> list[cst.Call] | None:
    if isinstance(it, cst.Call):
        q = facts.qualname(it.func) or call_name(it) or ""
        short = q.split(".")[-1]
        if q == DATALOADER:
            return [it]
        if short in ("enumerate", "tqdm", "trange", "iter", "islice", "zip", "track") and it.args:
            found: list[cst.Call] = []
            for a in (it.args if short == "zip" else it.args[:1]):
                sub = _iter_loaders(facts, a.value, depth + 1)
                if sub is None:
                    return None
                found.extend(sub)
            return found
        if call_name(it) in ("items", "values") and isinstance(it.func, cst.Attribute):
            return batch_loaders(facts, it.func.value, depth + 1)
        return None
    if isinstance(it, (cst.Name, cst.Attribute)):
        bs = facts.lookup(it.value, it) if isinstance(it, cst.Name) else facts.self_attr_bindings(it)
        if not bs:
            return None
        out: list[cst.Call] = []
        for b in bs:
            if b.how != "expr":
                return None
            sub = _iter_loaders(facts, b.node, depth + 1)
            if sub is None:
                if facts.has_kind(b.node, "batch", weak=False):
                    sub = batch_loaders(facts, b.node, depth + 1)
                if sub is None:
                    return None
            out.extend(sub)
        return out
    return None


@register
class BlockingHostToDeviceCopy(Rule):
    """
    ## What it does
    Flags `.to(device)` and `.cuda()` on a batch from a DataLoader, inside a training or
    evaluation loop, without `non_blocking=True`.

    ## Why is this bad?
    A blocking host-to-device copy makes the CPU wait for the copy before it can queue the
    next kernels. From a pinned batch (`pin_memory=True`), `non_blocking=True` lets the copy
    run by DMA while the CPU carries on; PyTorch's pinned-memory tutorial shows many
    non-blocking copies plus one synchronisation beating blocking copies. From pageable
    memory the runtime synchronises anyway, so pin the loader too (PF102). Pinned plus
    non-blocking measured 1.18× on four conv-net steps with 37 MiB batches on an H100 (see
    PF102); no end-to-end figure is promised: the gain depends on batch size and step time.

    ## Example
    ```python
    for x, y in loader:  # DataLoader(..., pin_memory=True)
        x, y = x.to(device), y.to(device)
    ```

    ## Use instead
    ```python
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    ```

    ## Fix safety
    Adds `non_blocking=True`. **Safe** when the batch comes from a DataLoader in this file
    built with `pin_memory=True` and the target is provably CUDA (`.cuda()`, a `"cuda…"`
    literal, `torch.device("cuda…")`, or `"cuda" if torch.cuda.is_available() else "cpu"`):
    later kernels on the stream are ordered after the copy, and each DataLoader batch is a
    fresh tensor that nothing else writes. **Unsafe** otherwise (unknown device, unpinned or
    untraceable loader). Never offered for device-to-host copies (`.cpu()`, `.to("cpu")`),
    where `non_blocking=True` can hand back a tensor that is read before the copy lands.

    ## Applies to
    All torch versions; CUDA targets only (never `cpu`, `mps`, `xpu`, or dtype-only `.to`).
    Not `batch.to(accelerator.device)` in a file that hands its loaders to that
    `accelerator.prepare(...)`: Accelerate's prepared loaders already yield batches there.
    Not for batches of a loader whose `collate_fn` or dataset already moves samples to the
    device (the copy is a no-op), nor of a loader read once after training (a final test),
    nor in the evaluation loop of a file that does not train when that loop runs once (a
    prediction script's `main`); an evaluation function nothing in the file calls is still
    reported (a training script elsewhere may call it every epoch).

    ## References
    - PyTorch tutorial "A guide on good usage of non_blocking and pin_memory() in PyTorch"
    """

    code = "PF105"
    name = "blocking-h2d-copy"
    summary = "batch copied to the GPU without non_blocking=True"
    fix_class = "safe or unsafe"
    tokens = (b".to(", b".cuda(")

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in facts.calls():
            name = call_name(call)
            if name not in ("to", "cuda") or not isinstance(call.func, cst.Attribute):
                continue
            if get_arg(call, "non_blocking") is not None or has_splat(call):
                continue
            if name == "cuda" and get_arg(call, "non_blocking", 1) is not None:
                continue
            if name == "to" and len([a for a in call.args if a.keyword is None]) >= 3:
                continue  # .to(device, dtype, non_blocking) positionally
            recv = call.func.value
            if not facts.has_kind(recv, "batch", weak=False):
                continue
            target = _target_device(facts, call)
            if target is None or (target == "maybe" and not (facts.is_cuda_code or facts.called_from_cuda_loop)):
                continue
            ctx = facts.iteration_context(call)
            if ctx is None:
                continue
            if ctx.kind == "eval" and not _file_trains(facts):
                host = ctx.node if isinstance(ctx.node, cst.FunctionDef) else facts.enclosing_function(ctx.node)
                if host not in facts.step_callers and (host is None or runs_once(facts, host)):
                    continue  # a prediction script run once: no training step waits for it
            if _to_prepared_accelerator_device(facts, call):
                continue
            loaders = batch_loaders(facts, recv)
            if loaders and all(_on_device_already(facts, l) or read_cheaply(facts, l) for l in loaders):
                continue  # the batch is on the device already, or the loader is read once or rarely
            new = add_arg(call, make_kwarg("non_blocking", "True"))
            pinned = bool(loaders) and all(
                literal_value((loader_arg(l, "pin_memory") or cst.Arg(cst.Name("False"))).value) is True
                for l in loaders
            )
            if pinned and target == "cuda":
                fix = self.safe("Add `non_blocking=True`", {call: new})
            else:
                fix = self.unsafe("Add `non_blocking=True`", {call: new})
            yield Violation(
                call.func.attr,
                f"Blocking host-to-device copy of a batch: `.{name}(...)` without `non_blocking=True` "
                "waits for the copy on every step (from a pinned DataLoader it can overlap with compute)",
                fix,
            )


def _on_device_already(facts: Facts, loader: cst.Call) -> bool:
    """The loader's collate_fn or dataset places samples on a device: the batch's `.to(device)`
    copies nothing."""
    opts = loader_options(facts, loader)
    if opts is None:
        return False
    return collate_origin(facts, loader, opts.get("collate_fn")) == "device" \
        or dataset_origin(facts, opts.get("dataset")) == "device"


def _to_prepared_accelerator_device(facts: Facts, call: cst.Call) -> bool:
    """`batch.to(accelerator.device)` in a file that hands its loaders to
    `accelerator.prepare(...)`: Accelerate's prepared loaders already yield batches on that
    device (`device_placement=True`), so the `.to` copies nothing."""
    dev = get_arg(call, "device", 0)
    if dev is None or not (isinstance(dev.value, cst.Attribute) and dev.value.attr.value == "device"):
        return False
    acc = dev.value.value
    if not isinstance(acc, cst.Name) or not _is_accelerator(facts, acc):
        return False
    mine = [b.node for b in facts.lookup(acc.value, acc)]
    for c in facts.calls():
        f = c.func
        if isinstance(f, cst.Attribute) and f.attr.value in ("prepare", "prepare_data_loader") \
                and isinstance(f.value, cst.Name) and f.value.value == acc.value \
                and [b.node for b in facts.lookup(acc.value, f.value)] == mine \
                and any(facts.has_kind(a.value, "dataloader") for a in c.args):
            return True
    return False


def _is_accelerator(facts: Facts, name: cst.Name) -> bool:
    bs = facts.lookup(name.value, name)
    return bool(bs) and all(b.how == "expr" and isinstance(b.node, cst.Call)
                            and (facts.qualname(b.node.func) or "").endswith("accelerate.Accelerator") for b in bs)


@register
class SpawnContextForSpeed(Rule):
    """
    ## What it does
    Flags `DataLoader(..., multiprocessing_context="spawn")` (or `"forkserver"`, or a
    `get_context("spawn")` object) without `persistent_workers`.

    ## Why is this bad?
    `spawn` is not faster: every spawned worker starts a fresh interpreter and re-imports
    torch, every epoch. Measured with 2 workers on 2000 small samples (torch 2.13, CPU):
    4.8–6.4 s per epoch with `spawn`, 4.8–5.2 s with `forkserver`, 0.14–0.18 s with `fork`.
    The PyTorch docs use spawn for correctness (CUDA inside workers), not speed.

    ## Example
    ```python
    DataLoader(ds, num_workers=4, multiprocessing_context="spawn")
    ```

    ## Use instead
    ```python
    DataLoader(ds, num_workers=4)  # the platform default
    # or, if spawn is needed: keep the workers alive across epochs
    DataLoader(ds, num_workers=4, multiprocessing_context="spawn", persistent_workers=True)
    ```

    ## Fix safety
    No fix: removing `spawn` breaks code that uses CUDA in workers, and adding persistent
    workers has its own caveat (PF103).

    ## Applies to
    All torch versions. Not reported when the dataset class in the file uses CUDA itself.

    ## References
    - PyTorch docs, `notes/multiprocessing.rst` ("The CUDA runtime does not support the fork
      start method")
    - Measured (torch 2.13, CPU, 2 workers, 2,000 small samples, epochs without persistent
      workers): fork 0.14–0.18 s, forkserver 4.8–5.2 s, spawn 4.8–6.4 s — each spawned
      worker imports torch again
    """

    code = "PF106"
    name = "spawn-context-for-speed"
    summary = "DataLoader workers started with spawn/forkserver without persistent_workers"
    tokens = (b"spawn", b"forkserver")

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in _dataloaders(facts):
            if has_splat(call) or get_arg(call, "persistent_workers") is not None:
                continue
            arg = loader_arg(call, "multiprocessing_context")
            if arg is None:
                continue
            method = _start_method(facts, arg.value)
            if method not in ("spawn", "forkserver"):
                continue
            if worker_count(facts, call)[0] == "zero":
                continue  # PF104's business
            if dataset_origin(facts, (loader_arg(call, "dataset") or cst.Arg(cst.Name("None"))).value) == "device":
                continue
            yield Violation(
                arg,
                f"DataLoader workers started with '{method}' re-import torch every epoch (measured "
                "4.8-6.4 s per epoch vs 0.14-0.18 s with fork); use the default start method, or add "
                "`persistent_workers=True` if spawn is needed for CUDA in workers",
            )


def _start_method(facts: Facts, expr: cst.BaseExpression) -> str | None:
    v = literal_value(expr)
    if isinstance(v, str):
        return v
    if isinstance(expr, cst.Call) and call_name(expr) == "get_context" and expr.args:
        v = literal_value(expr.args[0].value)
        return v if isinstance(v, str) else None
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return _start_method(facts, bs[0].node)
    return None
