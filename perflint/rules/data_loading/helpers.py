"""What several PF1 rules (data loading) share: a DataLoader call's options and worker count,
where a dataset, a batch or a collate function's output lives (host or device), and torch's
dtype names. Whether a loader is read once or cheaply: `reads.py`."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import (
    DATALOADER,
    NOT_LITERAL,
    Facts,
    call_name,
    get_arg,
    has_splat,
    iter_nodes,
    literal_value,
)
from perflint.analysis.vocab import _DTYPE_NAMES as DTYPES, Kind, SIZE_FACTORIES
from perflint.rules.common import COMPREHENSIONS, param_for
from perflint.rules.data_loading.origins import cuda_tensor_type
from perflint.analysis.syntax import comments_in


# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
#            pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator, *, …)
POS = {"dataset": 0, "batch_size": 1, "num_workers": 5, "collate_fn": 6, "pin_memory": 7, "multiprocessing_context": 11}


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
        out = facts.cross.call_keywords(call)
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
        bs = facts.bindings.lookup(value.value, value)
        if bs and all(b.how == "expr" for b in bs):
            states = {workers_of(facts, b.node, depth + 1) for b in bs}  # type: ignore[arg-type]
            return states.pop() if len(states) == 1 else "unknown"
    if values is None:
        found, default = facts.cross.option_default(value)  # `args.workers`, `cfg.num_workers`
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
    cls = facts.tree.enclosing_class(value)
    if cls is None or not isinstance(cls.body, cst.IndentedBlock):
        return False, None
    init = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"), None)
    if init is None:
        return False, None
    if plain:
        # `self.workers = num_workers` in `__init__` (and nowhere else): that parameter.
        bs = facts.bindings.self_attr_bindings(value)
        if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].node, cst.Name) \
                or facts.tree.enclosing_function(bs[0].node) is not init:
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
        bindings = facts.bindings.lookup(node.value, node)
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
            if dev is not None and facts.devices.device_kinds(dev.value) - {Kind.DEVICE_CPU}:
                return True
        if isinstance(n, cst.SimpleString) and "cuda" in n.value:
            return True
    return False


_SHAPE_FACTORIES = SIZE_FACTORIES | {"normal", "bernoulli", "multinomial"}
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
        if facts.devices.device_kinds(a.value) == {Kind.DEVICE_CPU}:
            state = "cpu" if state == "none" else state
            continue
        return "device"
    return state


def _is_dtype(facts: Facts, expr: cst.BaseExpression) -> bool:
    q = facts.tree.qualname(expr) or ""
    return q.startswith("torch.") and q.rsplit(".", 1)[-1] in DTYPES and q.count(".") == 1


def _default_device_changed(facts: Facts) -> bool:
    """The file moves tensor creation off the CPU by default (`torch.set_default_device`, a
    CUDA default tensor type, or `with torch.device(...)`)."""
    if facts.tree.calls_to("torch.set_default_device", "torch.set_default_tensor_type"):
        return True
    return any(isinstance(facts.tree.parent(c), cst.WithItem) for c in facts.tree.calls_to("torch.device"))


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
        bs = facts.bindings.lookup(expr.value, expr)
        values = [b.value() for b in bs]
        if not bs or any(v is None for v in values):
            return "unknown"
        return _combine(host_origin(facts, v, depth + 1) for v in values)
    if isinstance(expr, cst.Attribute):
        if _is_dtype(facts, expr):
            return "cpu"
        base = expr.value
        if isinstance(base, cst.Name):
            bs = facts.bindings.lookup(base.value, base)
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
    q = facts.tree.qualname(call.func) or ""
    if cuda_tensor_type(facts, call.func):
        return "device"
    dev = get_arg(call, "device")
    if q.startswith("torch.") and q.count(".") == 1:
        fn = q[len("torch."):]
        if dev is not None:
            return "cpu" if facts.devices.device_kinds(dev.value) == {Kind.DEVICE_CPU} else "device"
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


def function_node(facts: Facts, expr: cst.BaseExpression) -> cst.CSTNode | None:
    if isinstance(expr, cst.Lambda):
        return expr
    if isinstance(expr, cst.Name):
        fns = facts.tree.functions_by_name.get(expr.value)
        if fns:
            return fns[0]
        cls = facts.tree.classes_by_name.get(expr.value)
        if cls is not None:
            return cls
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        cls = facts.tree.classes_by_name.get(expr.func.value)
        if cls is not None:
            return cls
    return None


def dataset_origin(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> str:
    """"cpu" (yields CPU data for sure), "device" (may place data on a device) or "unknown"."""
    if expr is None or depth > 5:
        return "unknown"
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return dataset_origin(facts, bs[0].node, depth + 1)
        return "unknown"
    if isinstance(expr, cst.Attribute):
        bs = facts.bindings.self_attr_bindings(expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return dataset_origin(facts, bs[0].node, depth + 1)
        return "unknown"
    if isinstance(expr, cst.Call):
        q = facts.tree.qualname(expr.func) or ""
        args = _combine(host_origin(facts, a.value) for a in expr.args)
        if q == "torch.utils.data.TensorDataset":
            return args
        if q.startswith(("torchvision.datasets.", "torchaudio.datasets.")):
            # The dataset reads files on the host; only its arguments (a transform that
            # moves samples, say) can put data elsewhere.
            return "device" if any(moves_to_device(facts, resolved(facts, a.value)) for a in expr.args) else "cpu"
        if isinstance(expr.func, cst.Name):
            cls = facts.tree.classes_by_name.get(expr.func.value)
            if cls is not None:
                return "device" if moves_to_device(facts, cls) else args
        if Kind.DEVICE_SAMPLES in facts.cross.project_class_kinds(expr.func):
            return "device"  # a project Dataset class whose samples are put on a device
        if any(a.keyword is not None and a.keyword.value == "device"
               and facts.devices.device_kinds(a.value) - {Kind.DEVICE_CPU} for a in expr.args) \
                and Kind.DATASET in facts.cross.project_class_kinds(expr.func):
            return "device"  # `MyDataset(..., device=device)`: it places its samples there
    return "unknown"


def resolved(facts: Facts, expr: cst.BaseExpression) -> cst.CSTNode:
    """A name's single binding, else the expression itself."""
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
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
        bound = resolved(facts, expr)
        if bound is not expr and isinstance(bound, cst.Call):
            return collate_origin(facts, call, bound, depth + 1)
        bs = facts.bindings.lookup(expr.value, expr)
        if 1 < len(bs) <= 4 and all(b.how == "expr" and isinstance(b.node, cst.Call) for b in bs):
            # One collate per branch (`if masking: fn = partial(a, device=d) else: fn = partial(b, ...)`):
            # the batches are on the device when any branch puts them there.
            got = {collate_origin(facts, call, b.node, depth + 1) for b in bs}
            return "device" if "device" in got else "cpu" if got == {"cpu"} else "unknown"
    if isinstance(expr, cst.Call) and (facts.tree.qualname(expr.func) or call_name(expr)) in ("functools.partial", "partial") \
            and expr.args:
        # `partial(collate, device=device)`: a device bound into the collate moves the batch.
        for a in expr.args[1:]:
            if a.keyword is not None and a.keyword.value in ("device", "dev") \
                    and facts.devices.device_kinds(a.value) - {Kind.DEVICE_CPU}:
                return "device"
            if a.keyword is None and moves_to_device(facts, a.value):
                return "device"
        return collate_origin(facts, call, expr.args[0].value, depth + 1)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value not in facts.tree.classes_by_name:
        # A collator object from another module built with a device (`Collator(device=dev)`).
        for a in expr.args:
            if a.keyword is not None and a.keyword.value in ("device", "dev") \
                    and facts.devices.device_kinds(a.value) - {Kind.DEVICE_CPU}:
                return "device"
    fn = function_node(facts, expr)
    if fn is None:
        return "unknown"
    return "device" if moves_to_device(facts, fn) else "cpu"


def graph_collator(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> bool:
    """`collate_fn` batches DGL graphs (`return dgl.batch(graphs), labels`): a function of
    this file, a project function, `partial(...)` of one, or `dataset.collate` where every
    project method of that name does.  A loader's `pin_memory` pins tensors and objects with
    a `pin_memory()` method; a DGL graph has none, so the graph, which holds the features,
    stays in pageable memory whatever the loader says."""
    if expr is None or depth > 3:
        return False
    if isinstance(expr, cst.Call) and (facts.tree.qualname(expr.func) or call_name(expr)) in ("functools.partial", "partial") \
            and expr.args:
        return graph_collator(facts, expr.args[0].value, depth + 1)
    if isinstance(expr, cst.Name):
        fns = facts.tree.functions_by_name.get(expr.value, [])
        if len(fns) == 1:
            return facts.kinds.graph_collate(fns[0])
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr" and bs[0].node is not expr:
            return graph_collator(facts, bs[0].node, depth + 1)
        ref = facts.cross.project_ref(expr)
        return ref is not None and facts.project is not None and facts.project.graph_collate(ref)
    if isinstance(expr, cst.Attribute):
        name = expr.attr.value
        cls = facts.tree.enclosing_class(expr)
        if isinstance(expr.value, cst.Name) and expr.value.value == "self" and cls is not None:
            own = [f for f in facts.tree.functions_by_name.get(name, []) if facts.tree.enclosing_class(f) is cls]
            if own:
                return all(facts.kinds.graph_collate(f) for f in own)
        ref = facts.cross.project_ref(expr)
        if ref is not None and facts.project is not None and facts.project.graph_collate(ref):
            return True  # `data.collate_graphs` of a project module
        local = [f for f in facts.tree.functions_by_name.get(name, []) if facts.tree.enclosing_class(f) is not None]
        if local and not all(facts.kinds.graph_collate(f) for f in local):
            return False
        return (bool(local) and facts.project is None) or (
            facts.project is not None and facts.project.graph_collate_method(name))
    return False


def token_collator(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> bool:
    """`collate_fn` is a tokenizer-side collator (`DataCollatorForSeq2Seq(tokenizer, ...)`, a
    project `...Collator` in a file that tokenises): the samples are token ids already, and a
    batch is a few kilobytes that pads in microseconds — nothing for workers or pinned memory
    to speed up next to a language-model step."""
    if expr is None or depth > 3:
        return False
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        return bool(bs) and all(b.how == "expr" and token_collator(facts, b.node, depth + 1) for b in bs)
    if isinstance(expr, cst.Call):
        name = call_name(expr) or ""
        if "Collator" not in name:
            return False
        q = facts.tree.qualname(expr.func) or ""
        return q.startswith("transformers.") or any(
            full.split(".", 1)[0] == "transformers" for full in facts.tree.imports.aliases.values()) \
            or words_mention_tokenizer(facts)
    return False


def words_mention_tokenizer(facts: Facts) -> bool:
    return facts.filewide.words.name_contains("tokenizer")


def index_loader(facts: Facts, call: cst.Call) -> bool:
    """`DataLoader(range(n), batch_size, shuffle=True)`: a loader that only batches integer
    indices (`range`, `list(range(...))`, `torch.randperm`) to slice tensors
    the program already holds, often on the GPU.  A batch is a small int tensor: nothing for
    worker processes to load, nothing worth pinning."""
    opts = loader_options(facts, call)
    dataset = opts.get("dataset") if opts else None
    node = resolved(facts, dataset) if dataset is not None else None
    if isinstance(node, cst.Call) and call_name(node) == "list" and isinstance(node.func, cst.Name) and node.args:
        node = resolved(facts, node.args[0].value)
    if not isinstance(node, cst.Call):
        return False
    q = facts.tree.qualname(node.func) or ""
    if isinstance(node.func, cst.Name) and node.func.value == "range" and not q:
        return opts.get("collate_fn") is None
    return q == "torch.randperm" and opts.get("collate_fn") is None


def _lightning_eval_loader_method(facts: Facts, call: cst.Call) -> bool:
    """Built in a DataModule's `test_dataloader` / `predict_dataloader`: Lightning reads those
    once, in `trainer.test()` / `trainer.predict()` after (or without) training."""
    fn = facts.tree.enclosing_function(call)
    return fn is not None and facts.tree.enclosing_class(fn) is not None and fn.name.value.lstrip("_") in (
        "test_dataloader", "predict_dataloader")


_ITER_WRAPPERS = {"enumerate", "tqdm", "trange", "zip", "iter", "track"}


_LOADER_ATTRS = {"dataset", "sampler", "batch_sampler", "batch_size", "num_workers",
                 # a progress bar around the loader (`pbar = tqdm(loader)`): its own methods
                 "set_description", "set_description_str", "set_postfix", "set_postfix_str", "update",
                 "refresh", "close", "write", "clear"}


def iterated_once(facts: Facts, call: cst.Call) -> bool:
    """The loader is bound to a plain name that is read by exactly one loop, not itself
    inside a loop: a test set read once after training, or a loader handed once to a local
    function that reads it once.  Its workers start once either way.

    Reads are `for` loops and comprehensions over the loader, directly or through a wrapper
    (`enumerate`, `tqdm`, `zip`, or any call that is itself the loop's iterable, such as
    `logger.log_every(loader, 10)`); `len(loader)` and `loader.dataset` are not reads.  Any
    other use (stored, returned, passed elsewhere) counts as "maybe more than once"."""
    assign = facts.tree.parent(call)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)):
        return False
    scope = facts.tree.enclosing_function(assign) or facts.module
    return _reads(facts, assign.targets[0].target.value, scope, facts.tree.order.get(assign.targets[0].target, 0), 0) == 1


def _in_a_loop(facts: Facts, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
    """Whether `node` may run more than once per run of `scope`: under a loop, another
    comprehension, or a nested function (a `for` clause's own comprehension does not count)."""
    anc = facts.tree.parent(node)
    own = anc if isinstance(node, cst.CompFor) else None
    while anc is not None and anc is not scope:
        if isinstance(anc, (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.CompFor)):
            return True
        if isinstance(anc, COMPREHENSIONS) and anc is not own:
            return True
        anc = facts.tree.parent(anc)
    return False


_OPAQUE = "opaque"


def _through_wrappers(facts: Facts, use: cst.Name):
    """A use of a loader name, followed up through what iterates it (`enumerate(loader)`,
    `tqdm(...)`, `for … in …`): None when it reads no batch (`len(loader)`, a loader
    attribute such as `.dataset`, `loader.__len__()`), `_OPAQUE` when another attribute may
    read it, else (the outermost node, its Arg parent or None, the call around that)."""
    parent = facts.tree.parent(use)
    if isinstance(parent, cst.Attribute) and parent.value is use:
        if parent.attr.value in _LOADER_ATTRS:
            return None
        if parent.attr.value == "__len__" and isinstance(facts.tree.parent(parent), cst.Call):
            return None  # `loader.__len__()` counts batches; it reads none
        return _OPAQUE
    node: cst.CSTNode = use
    arg = facts.tree.parent(node)
    outer = facts.tree.parent(arg) if isinstance(arg, cst.Arg) else None
    if isinstance(outer, cst.Call) and call_name(outer) == "len":
        return None
    while isinstance(outer, cst.Call) and (
        (call_name(outer) or "") in _ITER_WRAPPERS
        or (isinstance(facts.tree.parent(outer), (cst.For, cst.CompFor)) and facts.tree.parent(outer).iter is outer)
    ):
        node = outer
        arg = facts.tree.parent(node)
        outer = facts.tree.parent(arg) if isinstance(arg, cst.Arg) else None
    return node, arg, outer


def _reads(facts: Facts, name: str, scope: cst.CSTNode, after: int, depth: int) -> int:
    """How many times `name` (bound before order `after`) is iterated in `scope`; 2 stands
    for "more than once, or unknown"."""
    reads = 0
    for use in facts.tree.later_uses(name, scope, after):
        got = _through_wrappers(facts, use)
        if got is None:
            continue
        if got == _OPAQUE:
            return 2
        node, arg, outer = got
        parent = facts.tree.parent(node)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            if _in_a_loop(facts, parent, scope):
                return 2
            reads += 1
            continue
        if (depth < 2 and node is use and isinstance(arg, cst.Arg) and isinstance(outer, cst.Call)
                and isinstance(outer.func, cst.Name) and not _in_a_loop(facts, outer, scope)):
            fns = facts.tree.functions_by_name.get(outer.func.value) or []
            param = param_for(fns[0], outer, arg) if len(fns) == 1 else None
            if param is not None and _reads(facts, param, fns[0], facts.tree.order.get(fns[0].body, 0), depth + 1) == 1:
                reads += 1
                continue
        return 2
    return reads


def dataloaders(facts: Facts) -> list[cst.Call]:
    return facts.tree.calls_to(DATALOADER)


def loader_comments(facts: Facts, call: cst.Call) -> list[str]:
    """The comments among a loader call's arguments and after its statement (`num_workers=0)
    # workers set to 0 because …`, `# pin_memory=True,`): where an author says why."""
    stmt = facts.tree.statement_of(call)
    trailing = stmt.trailing_whitespace.comment if isinstance(stmt, cst.SimpleStatementLine) else None
    return list(comments_in(call)) + ([trailing.value] if trailing is not None else [])

