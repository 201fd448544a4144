"""A module's summary: what one file offers the other files of its project (see
`analysis.project`), computed once from the file's own facts and kept as plain JSON (its
shape, key by key: `analysis.summary_types`).

* `imports` / `relative` / `stars`: the file's import table (library roots left out);
* `classes`: each top-level class — its bases (as references), whether it is a model, a loss
  or a Dataset, the torch layer APIs it builds (`apis`), the project names it calls
  (`uses`), the kinds of the `self.` attributes it sets, and its methods;
* `functions`: each top-level function — the kinds it returns, the calls whose result it
  returns (`ret_calls`, resolved later), `apis` and `uses`, and `syncs` when it waits for
  the GPU each time it runs;
* `defaults`: option defaults — argparse `add_argument('--workers', default=4)`, dataclass
  fields, config dict / SimpleNamespace literals;
* `calls`: calls of project-level names with the kinds of their arguments, the function
  they sit in, whether they run on every call of it, and — where the call runs on every
  iteration of a training or evaluation loop — that loop's kind and line;
* `trains`: whether the file has a training loop or a per-step training function.

A reference is a dotted name as the file spells it through its imports ("utils.accuracy",
".engine.train_one_epoch"), "#name" for the file's own top-level names and "*name" for a
name that can only come from a star import.
"""

from __future__ import annotations

import re

import libcst as cst

from perflint.analysis.callers import PARAM_KINDS
from perflint.analysis.project import RESULT_KINDS
from perflint.analysis.summary_names import config_tree_defaults, dunder_all, top_level_library_aliases
from perflint.analysis.summary_types import CallRecord, ClassInfo, FunctionInfo, ModuleSummary, Signature
from perflint.analysis.devices import _device_string_kinds
from perflint.analysis.syntax import (NOT_LITERAL, argparse_dest, call_name, get_arg, has_splat, is_main_guard,
                                      literal_value, patch_embedding)
from perflint.analysis.kinds import counts_items, draws_numpy_random, length_param, one_item_class
from perflint.analysis.vocab import Kind, DATALOADER, _OPTION_ROOTS, loads_model
from perflint.names import dotted

SUMMARY_VERSION = 16
# Import roots that are never the project's own modules.
LIBRARY_ROOTS = frozenset({
    "torch", "numpy", "np", "scipy", "torchvision", "torchaudio", "transformers", "accelerate", "timm", "os", "sys",
    "math", "time", "json", "random", "re", "argparse", "logging", "collections", "itertools", "functools",
    "typing", "dataclasses", "pathlib", "copy", "pickle", "glob", "shutil", "subprocess", "warnings", "datetime",
    "tqdm", "pandas", "sklearn", "matplotlib", "PIL", "cv2", "yaml", "wandb", "einops", "lightning",
    "pytorch_lightning", "deepspeed", "apex", "soundfile", "librosa", "h5py", "omegaconf", "hydra", "gym",
    "gymnasium", "contextlib", "abc", "enum", "io", "struct", "socket", "threading", "multiprocessing", "queue",
    "inspect", "string", "textwrap", "traceback", "types", "uuid", "hashlib", "tempfile", "csv", "zipfile",
})
# torch APIs worth carrying across modules: layers and matmul/conv work (rules decide which count).
_API = re.compile(
    r"^(torch\.nn\.[A-Z]\w*|torch\.nn\.functional\.(conv\w*|linear|bilinear|scaled_dot_product_attention|"
    r"multi_head_attention_forward)|torch\.(matmul|mm|bmm|addmm|baddbmm|addbmm|einsum|chain_matmul|conv[123]d)|"
    r"torchvision\.models\.[\w.]+|timm\.create_model|torch\.hub\.load|transformers\.[\w.]+\.from_pretrained|"
    r"torch\.nn\.parallel\.DistributedDataParallel|torch\.distributed\.fsdp\.(FullyShardedDataParallel|fully_shard)|"
    r"torch\.fft\.\w+)$"
)  # the multi-process wrappers: a helper that builds one gives its callers a DDP path (PF503);
# FFTs: cuFFT takes no bfloat16, so a model that runs one breaks under bf16 autocast (PF403)
# Among a body's APIs: it builds or calls a convolution whose kernel is not known to be 1
# (what a conv layer of kernel size 1 does is a plain matrix product: PF406's autotuner has
# nothing to choose for it).
WIDE_CONV = "conv:wide"


def _wide_conv(call: cst.Call, q: str) -> bool:
    last = q.rsplit(".", 1)[-1].lower()
    if not (last.startswith("conv") or last.startswith("lazyconv")):
        return False
    if not q.startswith("torch.nn.") or q.startswith("torch.nn.functional."):
        return True  # `F.conv2d(x, weight)`: the kernel is the weight's
    arg = get_arg(call, "kernel_size", 1 if last.startswith("lazyconv") else 2)
    return arg is None or not (literal_value(arg.value) in (1, (1,), (1, 1), (1, 1, 1)) or patch_embedding(call, last))


_DDP = "torch.nn.parallel.DistributedDataParallel"
_DEVICE_KINDS = {Kind.DEVICE_CUDA, Kind.DEVICE_CPU, Kind.DEVICE_OTHER}
_FRAMEWORKS = {"accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "colossalai", "composer"}
_JSON_SCALARS = (int, float, str, bool, type(None))


def reference(facts, expr: cst.BaseExpression) -> str | None:
    """How `expr` (a callee or a base class) names something that may live in the project."""
    name = dotted(expr)
    if name is None:
        return None
    head, _, tail = name.partition(".")
    if head == "self":
        return None
    if head in facts.tree.functions_by_name or head in facts.tree.classes_by_name:
        return "#" + name
    imports = facts.tree.imports
    if head in imports.aliases:
        target = imports.aliases[head]
        if target.split(".", 1)[0] in LIBRARY_ROOTS:
            return None
        return target + ("." + tail if tail else "")
    if head in imports.relative:
        return imports.relative[head] + ("." + tail if tail else "")
    if imports.stars and not tail and not _is_builtin(head) and facts.bindings.lookup(head, expr) == []:
        return "*" + name
    return None


def _is_builtin(name: str) -> bool:
    import builtins

    return hasattr(builtins, name)


def _json_literal(node: cst.BaseExpression | None):
    v = literal_value(node)
    if v is NOT_LITERAL or not isinstance(v, _JSON_SCALARS):
        return NOT_LITERAL
    return v


def _strong(kinds, allowed) -> list[str]:
    return sorted(k for k in kinds if k in allowed)


def _symbol_of(facts, fn: cst.FunctionDef | None) -> str | None:
    """"func" for a top-level function, "Class.method" for a method of a top-level class."""
    if fn is None:
        return None
    parent = facts.tree.parent(fn)
    if isinstance(parent, cst.Module):
        return fn.name.value
    if isinstance(parent, cst.IndentedBlock):
        cls = facts.tree.parent(parent)
        if isinstance(cls, cst.ClassDef) and isinstance(facts.tree.parent(cls), cst.Module):
            return f"{cls.name.value}.{fn.name.value}"
    return None


def _outer_function(facts, node: cst.CSTNode) -> cst.FunctionDef | None:
    fn = facts.tree.enclosing_function(node)
    while fn is not None:
        if _symbol_of(facts, fn) is not None:
            return fn
        fn = facts.tree.enclosing_function(fn)
    return None


def _body_info(facts, container: cst.CSTNode) -> dict:
    apis: set[str] = set()
    uses: set[str] = set()
    for call in facts.tree.calls_within(container):
        q = facts.tree.qualname(call.func)
        if q is not None and _API.match(q) and (not q.endswith(".from_pretrained") or loads_model(q)):
            if q.endswith("Loss") and facts.tree.unread_self_attribute(call):
                # A loss this file stores and never reads: recorded with its attribute name, so
                # the project counts it only where another module reads that name (`model.bce(...)`).
                apis.add(f"{q}@{facts.tree.parent(call).targets[0].target.attr.value}")
                continue
            apis.add(q)
            if _wide_conv(call, q):
                apis.add(WIDE_CONV)
            continue
        if isinstance(call.func, (cst.Subscript, cst.Call)):
            for v in facts.kinds.calls.factory_choices(call.func) or ():  # `ARCHS[name](...)`: every choice
                ref = None if isinstance(v, str) else reference(facts, v)
                if ref is not None:
                    uses.add(ref)
                    continue
                vq = v if isinstance(v, str) else facts.tree.qualname(v)
                if vq is not None:
                    apis.add(vq)
        ref = reference(facts, call.func)
        if ref is not None:
            uses.add(ref)
    if any(isinstance(n.operator, cst.MatrixMultiply) for n in facts.tree.nodes_within(container, cst.BinaryOperation)):
        apis.add("operator.matmul")
    return {"apis": sorted(apis), "uses": sorted(uses)}


def _function_info(facts, fn: cst.FunctionDef) -> FunctionInfo:
    returns: set[str] = set()
    ret_calls: set[str] = set()
    loader_options = None
    for ret in facts.tree.nodes_within(fn, cst.Return):
        if ret.value is None or facts.tree.enclosing_function(ret) is not fn:
            continue
        returns |= set(facts.kinds.of(ret.value))
        returns |= _all_loaders(facts, ret.value)
        returns |= facts.devices.device_kinds(ret.value) & _DEVICE_KINDS if _looks_like_device(facts, ret.value) else set()
        values = [ret.value]
        if isinstance(ret.value, cst.Name):
            bs = facts.bindings.lookup(ret.value.value, ret)
            if bs and all(b.how == "expr" for b in bs):
                values = [b.node for b in bs]  # `if ...: model = A() elif ...: model = B()`; `return model`
        for value in values:
            if isinstance(value, cst.Call):
                ref = reference(facts, value.func)
                if ref is not None:
                    ret_calls.add(ref)
                if facts.tree.qualname(value.func) == DATALOADER and len(values) == 1:
                    loader_options = _loader_options(facts, value)
    if facts.grad.is_grad_off_factory(fn):
        returns.add(Kind.GRAD_OFF_DECORATOR)
    info = {"returns": _strong(returns, RESULT_KINDS), "ret_calls": sorted(ret_calls), "sig": _signature(fn)}
    if facts.syncs.function_syncs(fn):
        info["syncs"] = True  # waits for the GPU each time it runs (`.item()`, `.cpu()`, ...)
    elif fn.name.value == "forward":
        layers = facts.syncs.forward_layers(fn)
        if layers:
            info["layers"] = layers  # project layers it calls each time: it waits if one of them does
    if loader_options is not None:
        info["loader"] = loader_options
    if facts.kinds.graph_collate(fn):
        info["graph"] = True  # returns a DGL graph batch: a loader's pin_memory leaves it as is
    info.update(_body_info(facts, fn))
    return info


def _signature(fn: cst.FunctionDef) -> Signature:
    """The parameters a call binds: positional names (with `self` for a method), keyword-only
    names, whether there is a `*args`, and the name of a `**kwargs`."""
    p = fn.params
    sig: dict = {"pos": [x.name.value for x in (*p.posonly_params, *p.params)]}
    if p.kwonly_params:
        sig["kwonly"] = [x.name.value for x in p.kwonly_params]
    if isinstance(p.star_arg, cst.Param):
        sig["varargs"] = True
    if p.star_kwarg is not None:
        sig["varkw"] = p.star_kwarg.name.value
    return sig


def _all_loaders(facts, value: cst.BaseExpression) -> set[str]:
    """{"dataloader"} for `return train_loader, val_loader` when every element is a
    DataLoader (callers unpack it: `train_loader, val_loader = get_loaders(...)`); a tuple
    mixing kinds (a loader and its sampler) says nothing."""
    if not isinstance(value, (cst.Tuple, cst.List)) or not value.elements:
        return set()
    for el in value.elements:
        if isinstance(el, cst.StarredElement) or Kind.DATALOADER not in facts.kinds.of(el.value):
            return set()
    return {Kind.DATALOADER}


def _loader_options(facts, call: cst.Call) -> dict:
    """The keyword options of a returned DataLoader call: literal values, "?" otherwise."""
    out: dict[str, object] = {}
    for a in call.args:
        if a.keyword is not None:
            v = _json_literal(a.value)
            out[a.keyword.value] = "?" if v is NOT_LITERAL else v
        elif a.star:
            out["**"] = "?"
    return out


def _looks_like_device(facts, node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and facts.tree.qualname(node.func) == "torch.device" or isinstance(
        node, (cst.SimpleString, cst.IfExp))


# Method decorators that hand a call's arguments to the method unchanged.
_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod", "torch.no_grad", "torch.inference_mode",
                               "torch.enable_grad", "no_grad", "inference_mode"})


def _class_info(facts, cls: cst.ClassDef) -> ClassInfo:
    name = cls.name.value
    kinds = []
    if name in facts.kinds.loss_classes:
        kinds.append(Kind.CRITERION)
    elif name in facts.kinds.module_classes:
        kinds.append(Kind.MODEL)
    if name in facts.kinds.dataset_classes:
        kinds.append(Kind.DATASET)
        if facts.kinds.cheap_samples_class(cls):
            kinds.append(Kind.CHEAP_SAMPLES)  # in-memory or memory-mapped samples (PF101)
        if facts.kinds.moves_samples_to_device(cls):
            kinds.append(Kind.DEVICE_SAMPLES)  # its samples are on a device: nothing to pin (PF102/PF105)
        if facts.kinds.shares_a_file_offset(cls):
            kinds.append(Kind.SHARED_FILE)  # one open file seeked per item: not for forked workers (PF101)
        # PF101: one sample an epoch; a counter the workers would split; one NumPy state for every worker before 1.9.
        kinds += [kind for test, kind in ((one_item_class, Kind.ONE_ITEM), (counts_items, Kind.COUNTED_ITEMS),
                                          (draws_numpy_random, Kind.NUMPY_RANDOM)) if test(facts.tree, cls)]
        sized = length_param(facts.tree, cls)
        if sized is not None:
            kinds.append(sized)  # PF101: `SDFDataset(path, size=1)` is one sample an epoch
        collate = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "collate_fn"),
                       None) if isinstance(cls.body, cst.IndentedBlock) else None
        if collate is not None and facts.kinds.pad_only_collate(collate):
            kinds.append(Kind.PAD_COLLATE)
        if any((facts.tree.qualname(b.value) or dotted(b.value) or "").endswith("IterableDataset") for b in cls.bases):
            kinds.append(Kind.ITERABLE_DATASET)
    bases = [r for r in (reference(facts, b.value) for b in cls.bases) if r is not None]
    attrs: dict[str, list[str]] = {}
    for attr, bindings in facts.bindings.attr_bindings.get(cls, {}).items():
        ks: set[str] = set()
        for b in bindings:
            ks |= facts.kinds._binding_kinds(b)
            if b.how == "expr" and facts.devices.is_device_expr(b.node):
                ks |= facts.devices.device_kinds(b.node) & _DEVICE_KINDS
        strong = _strong(ks, RESULT_KINDS | {Kind.BATCH})
        if strong:
            attrs[attr] = strong
    methods = {}
    for stmt in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
        if isinstance(stmt, cst.FunctionDef):
            methods[stmt.name.value] = m = _function_info(facts, stmt)
            decorators = {dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
                          for d in stmt.decorators}
            if "staticmethod" in decorators:
                m["static"] = True  # no `self`: a call's arguments fill the parameters from the first
            if decorators - _PLAIN_DECORATORS:
                m["wrapped"] = True  # another decorator: what a call passes is not known
    info = {"bases": bases, "kinds": kinds, "attrs": attrs, "methods": methods}
    info.update(_body_info(facts, cls))
    return info


def _defaults(facts) -> dict:
    out: dict[str, object] = {}
    for call in facts.tree.calls():
        if call_name(call) == "add_argument" and isinstance(call.func, cst.Attribute):
            dest = argparse_dest(call)
            default = get_arg(call, "default")
            if dest and default is not None:
                v = _json_literal(default.value)
                if v is not NOT_LITERAL:
                    out[dest] = v
        elif (dotted(call.func) or "").endswith("SimpleNamespace"):
            for a in call.args:
                if a.keyword is not None:
                    v = _json_literal(a.value)
                    if v is not NOT_LITERAL:
                        out.setdefault(a.keyword.value, v)
    for cls in facts.tree.index[cst.ClassDef]:
        if not any((dotted(d.decorator if not isinstance(d.decorator, cst.Call) else d.decorator.func) or "").endswith("dataclass")
                   for d in cls.decorators):
            continue
        for stmt in cls.body.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None:
                        v = _json_literal(small.value)
                        if v is not NOT_LITERAL:
                            out.setdefault(small.target.value, v)
    for node in facts.tree.index[cst.Assign]:
        if not isinstance(node.value, cst.Dict) or len(node.targets) != 1:
            continue
        target = dotted(node.targets[0].target) or ""
        if target.split(".")[-1].lower().rstrip("s") not in {r.rstrip("s") for r in _OPTION_ROOTS} | {"default", "hyperparam"}:
            continue
        for el in node.value.elements:
            if isinstance(el, cst.DictElement):
                k = literal_value(el.key)
                v = _json_literal(el.value)
                if isinstance(k, str) and v is not NOT_LITERAL:
                    out.setdefault(k, v)
    return out


def _constants(facts) -> dict:
    """Top-level `NAME = <literal>` bound once."""
    out: dict[str, object] = {}
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    name = small.targets[0].target.value
                    v = _json_literal(small.value)
                    if v is not NOT_LITERAL and len(facts.bindings.scopes.get(facts.module, {}).get(name, [])) == 1:
                        out[name] = v
    return out


def _calls(facts, lines) -> list[CallRecord]:
    out = []
    for call in facts.tree.calls():
        ref = reference(facts, call.func)
        inst = False
        if ref is None and isinstance(call.func, cst.Attribute) and not _plain_receiver(facts, call.func.value):
            cls = facts.cross.instance_class(call.func.value)  # `agent.act(obs)` on a project class
            if cls is not None:
                ref, inst = f"{cls}.{call.func.attr.value}", True
        if ref is None:
            continue
        host = _outer_function(facts, call)
        ctx = facts.loops.iteration_context(call)
        rec: dict = {"ref": ref, "in": _symbol_of(facts, host)}
        if inst:
            rec["inst"] = True  # a method called on an instance: its arguments fill the parameters after `self`
        if ctx is not None:
            rec["step"] = ctx.kind
            rec["line"] = lines(call)
        rec["every"] = host is not None and facts.loops.runs_on_every_call(call, host)
        if ctx is None and facts.hotpath.trains and facts.hotpath.after_training(call):
            rec["after"] = True  # once per run, after the training of the function it sits in
        if facts.grad.grad_context(call) == "off":
            rec["nograd"] = True  # under `torch.no_grad()` / `inference_mode()` at the call
        positional = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        splat = any(a.star == "*" for a in call.args)
        if not splat and has_splat(call):
            # `f(x, **loader_kw)` with a dict literal (updated only with such dicts): its keys.
            expanded = facts.cross.call_keywords(call)
            if expanded is None:
                splat = True
            else:
                keywords = expanded
        rec["args"] = [_arg_kinds(facts, a.value) for a in positional]
        rec["kw"] = {k: _arg_kinds(facts, v) for k, v in keywords.items()}
        # Arguments bound to a call of another module's function (`train_loader, val_loader =
        # get_loaders(...)`): their kinds are known only once the project is indexed.
        via, dev, fwd, kwv, cls, ddp = {}, {}, {}, {}, {}, []
        # What a function's parameters receive (a class's constructor takes none of it).
        to_function = not _names_a_class(facts, ref)
        for key, value in [*((str(i), a.value) for i, a in enumerate(positional)), *keywords.items()]:
            got = _bound_to_project_call(facts, value)
            if got is not None:
                via[key] = got
            if not to_function or isinstance(value, (cst.Integer, cst.Float)):
                continue
            if isinstance(value, cst.Name) and any(b.how == "expr" and isinstance(b.node, cst.Call) and facts.tree.qualname(
                    b.node.func) == _DDP for b in facts.bindings.lookup(value.value, value)):
                ddp.append(key)  # `model = DDP(model)` (maybe), then `train(model, ...)`: PF502
            p = _forwarded_param(facts, value, host)
            if p is not None:
                fwd[key] = p
                continue
            ks = facts.kinds.of(value)
            if ks & _NOT_DEVICE_OR_OBJECT:
                continue  # a tensor, a number, a loader …: no device, no project object
            d = _arg_device(facts, value)
            if d:
                dev[key] = d
            c = facts.cross.instance_class(value) if isinstance(value, (cst.Name, cst.Call)) and Kind.MODEL not in ks else None
            if c is not None:
                cls[key] = c  # `train(model, Corpus(path))`: the class of the argument
        if to_function:
            for k, v in keywords.items():
                got = _keyword_value(facts, v)
                if got is not None:
                    kwv[k] = got
        for name, m in (("via", via), ("dev", dev), ("fwd", fwd), ("kwv", kwv), ("cls", cls), ("ddp", ddp)):
            if m:
                rec[name] = m
        if splat:
            rec["splat"] = True
        out.append(rec)
    return out


_NOT_DEVICE_OR_OBJECT = frozenset({Kind.TENSOR, Kind.BATCH, Kind.OUTPUT, Kind.LOSS, Kind.NUMBER, Kind.INT, Kind.NUMPY, Kind.DATALOADER,
                                   Kind.OPTIMIZER, Kind.CRITERION, Kind.DATASET, Kind.SCALER, Kind.DEVICE_TENSOR, Kind.CPU_TENSOR})


def _names_a_class(facts, ref: str) -> bool:
    """A call reference that names a class (`#Net`, `models.ResNet`, `Trainer.__init__` aside)."""
    last = ref.rsplit(".", 1)[-1].lstrip("#*")
    return last in facts.tree.classes_by_name if ref.startswith("#") else last[:1].isupper()


# Calls that return the model or tensor they are called on, placed or converted.
_PLACING = ("to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "type")


def _device_of(facts, node: cst.BaseExpression, depth: int = 0) -> set[str]:
    """Device kinds of an argument that is a device (a device string, `torch.device(...)`, a
    name or `self.` attribute bound only to those, `"cuda" if ... else "cpu"`); an integer is
    not taken for a device here (`fit(model, 10)`).  {"device_unknown"} otherwise."""
    if depth > 6:
        return {Kind.DEVICE_UNKNOWN}
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        v = literal_value(node)
        return _device_string_kinds(v) if isinstance(v, str) and _device_string_kinds(v) else {Kind.DEVICE_UNKNOWN}
    if isinstance(node, cst.IfExp):
        return _device_of(facts, node.body, depth + 1) | _device_of(facts, node.orelse, depth + 1)
    if isinstance(node, cst.Call):
        q = facts.tree.qualname(node.func)
        if q in ("torch.device", "torch.cuda.current_device", "torch.accelerator.current_accelerator"):
            return set(facts.devices.device_kinds(node))
        return {Kind.DEVICE_UNKNOWN}
    bindings = []
    if isinstance(node, cst.Name):
        bindings = facts.bindings.lookup(node.value, node)
    elif isinstance(node, cst.Attribute):
        bindings = facts.bindings.self_attr_bindings(node)
        if not bindings:
            found, default = facts.cross.option_default(node)  # `args.device` defaulting to "cuda"
            if found and isinstance(default, str) and _device_string_kinds(default):
                return _device_string_kinds(default) | {Kind.DEVICE_UNKNOWN}
    if not bindings or any(b.how != "expr" for b in bindings):
        return {Kind.DEVICE_UNKNOWN}
    out: set[str] = set()
    for b in bindings:
        out |= _device_of(facts, b.node, depth + 1)
    return out


def _arg_device(facts, value: cst.BaseExpression) -> list[str] | None:
    """Where an argument is: the device kinds of a device argument, or of the device a model
    argument was moved to (`Net().to(device)`, `model.cuda()` before the call)."""
    if isinstance(value, (cst.Integer, cst.Float)):
        return None
    ks = _device_of(facts, value)
    if ks != {Kind.DEVICE_UNKNOWN}:
        return sorted(ks)
    if Kind.MODEL in facts.kinds.of(value):
        placed = _model_placement(facts, value)
        if placed:
            return sorted(placed)
    return None


def _model_placement(facts, value: cst.BaseExpression) -> set[str]:
    """Device kinds a model argument was moved to: `.cuda()` / `.to(dev)` in the expression
    that binds the name, or as a statement of its own on the name before the call."""
    out: set[str] = set()

    def chain(node, depth=0):
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and depth < 6:
            attr = node.func.attr.value
            if attr == "cuda":
                out.add(Kind.DEVICE_CUDA)
                return
            if attr == "to" and node.args:
                d = _device_of(facts, node.args[0].value)
                if d != {Kind.DEVICE_UNKNOWN}:
                    out.update(d)
                    return
            if attr not in _PLACING:
                return
            node = node.func.value
            depth += 1

    chain(value)
    if isinstance(value, cst.Name):
        bindings = facts.bindings.lookup(value.value, value)
        for b in bindings:
            if b.how == "expr":
                chain(b.node)
        scope = facts.tree.scope_of(value)
        at = facts.tree.order.get(value, 0)
        for use in facts.tree.later_uses(value.value, scope, -1):
            if facts.tree.order.get(use, 0) >= at:
                break
            attr = facts.tree.parent(use)
            call = facts.tree.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is use else None
            if isinstance(call, cst.Call) and call.func is attr and isinstance(facts.tree.parent(call), cst.Expr):
                chain(call)
    return out


def _forwarded_param(facts, value: cst.BaseExpression, host) -> str | None:
    """The name of `host`'s parameter when the argument is that parameter, never rebound."""
    if host is None or not isinstance(value, cst.Name):
        return None
    bs = facts.bindings.lookup(value.value, value)
    if len(bs) == 1 and bs[0].how == "param" and bs[0].site is host:
        return value.value
    return None


def _keyword_value(facts, value: cst.BaseExpression):
    """A keyword argument's value as far as a callee forwarding `**kwargs` needs it: ["v",
    literal], ["o", "args.workers", default] for an option (its default when this file
    declares it; ["o", text] to look it up in the project), None when unknown."""
    v = _json_literal(value)
    if v is not NOT_LITERAL:
        return ["v", v]
    if isinstance(value, cst.Name):
        bs = facts.bindings.lookup(value.value, value)
        if len(bs) == 1 and bs[0].how == "expr":
            v = _json_literal(bs[0].node)
            if v is not NOT_LITERAL:
                return ["v", v]
        return None
    text = dotted(value) if isinstance(value, cst.Attribute) else None
    if text is None:
        return None
    parts = text.split(".")
    if parts[0] == "self":
        parts = parts[1:]
    if len(parts) != 2 or not (parts[0] in _OPTION_ROOTS or parts[0].endswith(("args", "cfg", "config", "opt"))):
        return None
    own = facts.cross.own_option_defaults
    if parts[1] in own and isinstance(own[parts[1]], _JSON_SCALARS):
        return ["o", text, own[parts[1]]]
    return ["o", text]


def _escapes(facts) -> list[str]:
    """Project functions this file names other than by calling them (`fn=train_step`,
    `map(step, ...)`, `hooks = [evaluate]`): they may be called with anything."""
    out: set[str] = set()
    aliases, relative, local = facts.tree.imports.aliases, facts.tree.imports.relative, facts.tree.functions_by_name
    for name in facts.tree.index[cst.Name]:
        v = name.value
        if v not in local and v not in aliases and v not in relative or v[:1].isupper():
            continue  # (a capitalised name is a class: its constructor takes no parameter facts)
        parent = facts.tree.parent(name)
        if isinstance(parent, cst.Call) and parent.func is name:
            continue
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName, cst.Attribute,
                               cst.Decorator, cst.Param, cst.Global, cst.Nonlocal)):
            continue
        if facts.bindings.lookup(v, name) and v not in local:
            continue  # a local variable spelled like an import
        ref = reference(facts, name)
        if ref is not None:
            out.add(ref)
    for attr in facts.tree.index[cst.Attribute]:
        if not isinstance(attr.value, cst.Name) or attr.value.value not in aliases and attr.value.value not in relative:
            continue
        parent = facts.tree.parent(attr)
        if isinstance(parent, cst.Call) and parent.func is attr or isinstance(parent, (cst.Attribute, cst.Decorator)) \
                or attr.attr.value[:1].isupper():
            continue
        ref = reference(facts, attr)
        if ref is not None:
            out.add(ref)
    return sorted(out)


def _blind_attributes(facts, calls: list[dict]) -> list[str]:
    """Attribute names the file uses on a receiver whose class it does not know (`x.fit(...)`,
    `self.fit(...)`, `hooks.append(trainer.fit)`): a project method of that name may be called
    from here with anything, so its parameters take no facts from its known callers.  Calls
    on an instance of a project class (recorded in `calls`) and module attributes
    (`utils.accuracy`) are left out."""
    known = {c["ref"].rsplit(".", 1)[-1] for c in calls if c.get("inst")}
    aliases, relative = facts.tree.imports.aliases, facts.tree.imports.relative
    out: set[str] = set()
    for attr in facts.tree.index[cst.Attribute]:
        name = attr.attr.value
        if name in out or name.startswith("__"):
            continue
        if isinstance(attr.value, cst.Name) and (attr.value.value in aliases or attr.value.value in relative):
            continue
        if name in known:
            parent = facts.tree.parent(attr)
            if isinstance(parent, cst.Call) and parent.func is attr and not _plain_receiver(facts, attr.value) \
                    and facts.cross.instance_class(attr.value) is not None:
                continue
        out.add(name)
    return sorted(out)


def _plain_receiver(facts, value: cst.BaseExpression) -> bool:
    """`self.f()`, `torch.cat()`, `"".join()`: a receiver that is no instance of a project
    class bound to a name."""
    if isinstance(value, cst.Name):
        return value.value in ("self", "cls") or value.value in facts.tree.imports.aliases
    return not isinstance(value, (cst.Attribute, cst.Call))


# Arguments that are literals: no kind a parameter could take from them.
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _arg_kinds(facts, value: cst.BaseExpression) -> list[str]:
    if isinstance(value, _LITERALS) or (isinstance(value, cst.Name) and value.value in ("True", "False", "None")):
        return []
    return _strong(facts.kinds.of(value), PARAM_KINDS)


def _bound_to_project_call(facts, value: cst.BaseExpression) -> list | None:
    """[reference, unpacked] when `value` is a name bound once to a call of a project
    function of another module (`loader = get_loader(...)`; unpacked: `a, b = get_loaders()`)."""
    if not isinstance(value, cst.Name):
        return None
    bs = facts.bindings.lookup(value.value, value)
    if len(bs) != 1 or bs[0].how not in ("expr", "unpack") or not isinstance(bs[0].node, cst.Call):
        return None
    if bs[0].how == "unpack" and len(bs[0].index) != 1:
        return None
    node = bs[0].node
    while bs[0].how == "expr" and isinstance(node.func, cst.Attribute) and node.func.attr.value in _PLACING \
            and isinstance(node.func.value, cst.Call):
        node = node.func.value  # `model = Net(...).to(device)`
    ref = reference(facts, node.func)
    if ref is None or ref.startswith("#"):
        return None
    return [ref, bs[0].how == "unpack"]


_PRECISION_FLAG = re.compile(r"^(bf16|16|fp16|mixed|amp|fp8)$|^(bf16|16)-(mixed|true)$|-mixed$")
_TF32_ATTRS = {"allow_tf32", "fp32_precision"}


def _in_main_guard(facts, node) -> bool:
    return any(is_main_guard(a) for a in facts.tree.ancestors(node))


def _settings(facts) -> dict:
    """What the file sets up — "tf32", "cudnn_benchmark", "deterministic" (assignments and
    calls that set them, not reads), "amp" (autocast, a framework precision flag), "scaler"
    (a GradScaler), "cuda_ext" (builds C++/CUDA extension ops) — split into what runs on
    import ("settings") and what runs only when the
    file is the script (`if __name__ == "__main__":`, "main_settings")."""
    found: dict[str, set] = {"settings": set(), "main_settings": set()}

    def add(node, what):
        found["main_settings" if _in_main_guard(facts, node) else "settings"].add(what)

    for node in facts.tree.index[cst.Assign]:
        for t in node.targets:
            if not isinstance(t.target, cst.Attribute):
                continue
            attr, base = t.target.attr.value, t.target.value
            on_cudnn = (isinstance(base, cst.Name) and base.value == "cudnn") or (
                isinstance(base, cst.Attribute) and base.attr.value == "cudnn")
            if attr in ("benchmark", "deterministic") and on_cudnn:
                add(node, "cudnn_benchmark" if attr == "benchmark" else "deterministic")
            elif attr in _TF32_ATTRS:
                add(node, "tf32")
    for call in facts.tree.calls():
        q = facts.tree.qualname(call.func) or ""
        if q == "torch.set_float32_matmul_precision":
            add(call, "tf32")
        elif q == "torch.use_deterministic_algorithms":
            add(call, "deterministic")
        elif q.startswith("torch.utils.cpp_extension."):
            add(call, "cuda_ext")  # builds C++/CUDA ops: their dtype support is their own
        for a in call.args:
            if a.keyword is not None and a.keyword.value in ("precision", "mixed_precision"):
                v = literal_value(a.value)
                if isinstance(v, str) and _PRECISION_FLAG.search(v):
                    add(call, "amp")
    if facts.filewide.uses_autocast:
        found["settings"].add("amp")
    if facts.filewide.uses_grad_scaler or facts.filewide.words.name_contains("gradscaler", "grad_scaler", "loss_scaler"):
        found["settings"].add("scaler")
    return {k: sorted(v) for k, v in found.items() if v}


def summarise(facts, lines) -> ModuleSummary:
    """The summary of the file behind `facts`; `lines(node)` gives a node's 1-based line."""
    imports = facts.tree.imports
    summary = {
        "v": SUMMARY_VERSION,
        "imports": {k: v for k, v in imports.aliases.items() if v.split(".", 1)[0] not in LIBRARY_ROOTS},
        "relative": dict(imports.relative),
        "stars": list(imports.stars),
        # Library names the module binds at its top level (`torch`, `nn`, `F`): what a
        # `from <module> import *` hands on.
        "libs": top_level_library_aliases(facts, LIBRARY_ROOTS),
        "classes": {},
        "functions": {},
        "defaults": _defaults(facts),
        "constants": _constants(facts),
        "calls": [],
        "accel": bool(facts.filewide.may_use_accelerator),
        "cuda": bool(facts.devices.own_cuda_code),
        # Accelerate, Lightning, DeepSpeed … place models and batches and set precision
        # themselves: what such a file hands other modules makes no CUDA claim there.
        "framework": any(v.split(".", 1)[0] in _FRAMEWORKS for v in imports.aliases.values()),
        # File-wide settings the file makes (TF32, cudnn.benchmark, determinism) and whether
        # it sets up mixed precision: the modules around it need not repeat them.
        **_settings(facts),
        # The file trains (a training loop or a per-step training function): evaluation it
        # calls runs during training.
        "trains": bool(facts.hotpath.trains),
    }
    for stmt in facts.module.body:
        if isinstance(stmt, cst.ClassDef):
            summary["classes"][stmt.name.value] = _class_info(facts, stmt)
        elif isinstance(stmt, cst.FunctionDef):
            summary["functions"][stmt.name.value] = _function_info(facts, stmt)
    exported = dunder_all(facts)
    if exported is not None:
        summary["all"] = exported
    tree = config_tree_defaults(facts)
    if tree:
        summary["cfgtree"] = tree
    summary["calls"] = _calls(facts, lines)
    summary["attrs"] = _blind_attributes(facts, summary["calls"])
    refs = _escapes(facts)
    if refs:
        summary["refs"] = refs
    return summary
