"""A module's summary: what one file offers the other files of its project (see
`analysis.project`), computed once from the file's own facts and kept as plain JSON.

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

from perflint.analysis.project import PARAM_KINDS, RESULT_KINDS
from perflint.analysis.syntax import NOT_LITERAL, call_name, get_arg, has_splat, literal_value
from perflint.analysis.vocab import DATALOADER, _OPTION_ROOTS
from perflint.names import dotted

SUMMARY_VERSION = 4
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
    r"torchvision\.models\.[\w.]+|timm\.create_model|torch\.hub\.load|transformers\.[\w.]+\.from_pretrained)$"
)
_DEVICE_KINDS = {"device_cuda", "device_cpu", "device_other"}
_JSON_SCALARS = (int, float, str, bool, type(None))


def reference(facts, expr: cst.BaseExpression) -> str | None:
    """How `expr` (a callee or a base class) names something that may live in the project."""
    name = dotted(expr)
    if name is None:
        return None
    head, _, tail = name.partition(".")
    if head == "self":
        return None
    if head in facts.functions_by_name or head in facts.classes_by_name:
        return "#" + name
    imports = facts.imports
    if head in imports.aliases:
        target = imports.aliases[head]
        if target.split(".", 1)[0] in LIBRARY_ROOTS:
            return None
        return target + ("." + tail if tail else "")
    if head in imports.relative:
        return imports.relative[head] + ("." + tail if tail else "")
    if imports.stars and not tail and not _is_builtin(head) and facts.lookup(head, expr) == []:
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
    parent = facts.parent(fn)
    if isinstance(parent, cst.Module):
        return fn.name.value
    if isinstance(parent, cst.IndentedBlock):
        cls = facts.parent(parent)
        if isinstance(cls, cst.ClassDef) and isinstance(facts.parent(cls), cst.Module):
            return f"{cls.name.value}.{fn.name.value}"
    return None


def _outer_function(facts, node: cst.CSTNode) -> cst.FunctionDef | None:
    fn = facts.enclosing_function(node)
    while fn is not None:
        if _symbol_of(facts, fn) is not None:
            return fn
        fn = facts.enclosing_function(fn)
    return None


def _body_info(facts, container: cst.CSTNode) -> dict:
    apis: set[str] = set()
    uses: set[str] = set()
    for call in facts.calls_within(container):
        q = facts.qualname(call.func)
        if q is not None and _API.match(q):
            apis.add(q)
            continue
        ref = reference(facts, call.func)
        if ref is not None:
            uses.add(ref)
    if any(isinstance(n.operator, cst.MatrixMultiply) for n in facts.nodes_within(container, cst.BinaryOperation)):
        apis.add("operator.matmul")
    return {"apis": sorted(apis), "uses": sorted(uses)}


def _function_info(facts, fn: cst.FunctionDef) -> dict:
    returns: set[str] = set()
    ret_calls: set[str] = set()
    loader_options = None
    for ret in facts.nodes_within(fn, cst.Return):
        if ret.value is None or facts.enclosing_function(ret) is not fn:
            continue
        returns |= set(facts.kinds(ret.value))
        returns |= _all_loaders(facts, ret.value)
        returns |= facts.device_kinds(ret.value) & _DEVICE_KINDS if _looks_like_device(facts, ret.value) else set()
        value = ret.value
        if isinstance(value, cst.Name):
            bs = facts.lookup(value.value, ret)
            if len(bs) == 1 and bs[0].how == "expr":
                value = bs[0].node
        if isinstance(value, cst.Call):
            ref = reference(facts, value.func)
            if ref is not None:
                ret_calls.add(ref)
            if facts.qualname(value.func) == DATALOADER:
                loader_options = _loader_options(facts, value)
    if facts.is_grad_off_factory(fn):
        returns.add("grad_off_decorator")
    info = {"returns": _strong(returns, RESULT_KINDS), "ret_calls": sorted(ret_calls)}
    if facts.function_syncs(fn):
        info["syncs"] = True  # waits for the GPU each time it runs (`.item()`, `.cpu()`, ...)
    if loader_options is not None:
        info["loader"] = loader_options
    info.update(_body_info(facts, fn))
    return info


def _all_loaders(facts, value: cst.BaseExpression) -> set[str]:
    """{"dataloader"} for `return train_loader, val_loader` when every element is a
    DataLoader (callers unpack it: `train_loader, val_loader = get_loaders(...)`); a tuple
    mixing kinds (a loader and its sampler) says nothing."""
    if not isinstance(value, (cst.Tuple, cst.List)) or not value.elements:
        return set()
    for el in value.elements:
        if isinstance(el, cst.StarredElement) or "dataloader" not in facts.kinds(el.value):
            return set()
    return {"dataloader"}


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
    return isinstance(node, cst.Call) and facts.qualname(node.func) == "torch.device" or isinstance(
        node, (cst.SimpleString, cst.IfExp))


def _class_info(facts, cls: cst.ClassDef) -> dict:
    name = cls.name.value
    kinds = []
    if name in facts.loss_classes:
        kinds.append("criterion")
    elif name in facts.module_classes:
        kinds.append("model")
    if name in facts.dataset_classes:
        kinds.append("dataset")
        if facts.cheap_samples_class(cls):
            kinds.append("cheap_samples")  # in-memory or memory-mapped samples (PF101)
        if facts.moves_samples_to_device(cls):
            kinds.append("device_samples")  # its samples are on a device: nothing to pin (PF102/PF105)
        collate = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "collate_fn"),
                       None) if isinstance(cls.body, cst.IndentedBlock) else None
        if collate is not None and facts.pad_only_collate(collate):
            kinds.append("pad_collate")
        if any((facts.qualname(b.value) or dotted(b.value) or "").endswith("IterableDataset") for b in cls.bases):
            kinds.append("iterable_dataset")
    bases = [r for r in (reference(facts, b.value) for b in cls.bases) if r is not None]
    attrs: dict[str, list[str]] = {}
    for attr, bindings in facts.attr_bindings.get(cls, {}).items():
        ks: set[str] = set()
        for b in bindings:
            ks |= facts._binding_kinds(b)
            if b.how == "expr" and facts.is_device_expr(b.node):
                ks |= facts.device_kinds(b.node) & _DEVICE_KINDS
        strong = _strong(ks, RESULT_KINDS | {"batch"})
        if strong:
            attrs[attr] = strong
    methods = {}
    for stmt in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ():
        if isinstance(stmt, cst.FunctionDef):
            methods[stmt.name.value] = _function_info(facts, stmt)
    info = {"bases": bases, "kinds": kinds, "attrs": attrs, "methods": methods}
    info.update(_body_info(facts, cls))
    return info


def _defaults(facts) -> dict:
    out: dict[str, object] = {}
    for call in facts.calls():
        if call_name(call) == "add_argument" and isinstance(call.func, cst.Attribute):
            dest = None
            d = get_arg(call, "dest")
            if d is not None and isinstance(literal_value(d.value), str):
                dest = literal_value(d.value)
            else:
                for a in call.args:
                    if a.keyword is None and isinstance(literal_value(a.value), str) and literal_value(a.value).startswith("--"):
                        dest = literal_value(a.value).lstrip("-").replace("-", "_")
                        break
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
    for cls in facts.index[cst.ClassDef]:
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
    for node in facts.index[cst.Assign]:
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
                    if v is not NOT_LITERAL and len(facts.bindings.get(facts.module, {}).get(name, [])) == 1:
                        out[name] = v
    return out


def _calls(facts, lines) -> list[dict]:
    out = []
    for call in facts.calls():
        ref = reference(facts, call.func)
        if ref is None and isinstance(call.func, cst.Attribute) and not _plain_receiver(facts, call.func.value):
            cls = facts.instance_class(call.func.value)  # `agent.act(obs)` on a project class
            if cls is not None:
                ref = f"{cls}.{call.func.attr.value}"
        if ref is None:
            continue
        host = _outer_function(facts, call)
        ctx = facts.iteration_context(call)
        rec: dict = {"ref": ref, "in": _symbol_of(facts, host)}
        if ctx is not None:
            rec["step"] = ctx.kind
            rec["line"] = lines(call)
        rec["every"] = host is not None and facts.runs_on_every_call(call, host)
        rec["args"] = [_arg_kinds(facts, a.value) for a in call.args if a.keyword is None and not a.star]
        rec["kw"] = {a.keyword.value: _arg_kinds(facts, a.value) for a in call.args if a.keyword is not None}
        # Arguments bound to a call of another module's function (`train_loader, val_loader =
        # get_loaders(...)`): their kinds are known only once the project is indexed.
        via = {}
        positional = [a for a in call.args if a.keyword is None and not a.star]
        for key, a in [*enumerate(positional), *((a.keyword.value, a) for a in call.args if a.keyword is not None)]:
            got = _bound_to_project_call(facts, a.value)
            if got is not None:
                via[str(key)] = got
        if via:
            rec["via"] = via
        if has_splat(call):
            rec["splat"] = True
        out.append(rec)
    return out


def _plain_receiver(facts, value: cst.BaseExpression) -> bool:
    """`self.f()`, `torch.cat()`, `"".join()`: a receiver that is no instance of a project
    class bound to a name."""
    if isinstance(value, cst.Name):
        return value.value in ("self", "cls") or value.value in facts.imports.aliases
    return not isinstance(value, (cst.Attribute, cst.Call))


# Arguments that are literals: no kind a parameter could take from them.
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _arg_kinds(facts, value: cst.BaseExpression) -> list[str]:
    if isinstance(value, _LITERALS) or (isinstance(value, cst.Name) and value.value in ("True", "False", "None")):
        return []
    return _strong(facts.kinds(value), PARAM_KINDS)


def _bound_to_project_call(facts, value: cst.BaseExpression) -> list | None:
    """[reference, unpacked] when `value` is a name bound once to a call of a project
    function of another module (`loader = get_loader(...)`; unpacked: `a, b = get_loaders()`)."""
    if not isinstance(value, cst.Name):
        return None
    bs = facts.lookup(value.value, value)
    if len(bs) != 1 or bs[0].how not in ("expr", "unpack") or not isinstance(bs[0].node, cst.Call):
        return None
    if bs[0].how == "unpack" and len(bs[0].index) != 1:
        return None
    ref = reference(facts, bs[0].node.func)
    if ref is None or ref.startswith("#"):
        return None
    return [ref, bs[0].how == "unpack"]


_PRECISION_FLAG = re.compile(r"^(bf16|16|fp16|mixed|amp|fp8)$|^(bf16|16)-(mixed|true)$|-mixed$")
_TF32_ATTRS = {"allow_tf32", "fp32_precision"}


def _in_main_guard(facts, node) -> bool:
    for a in facts.ancestors(node):
        if isinstance(a, cst.If) and isinstance(a.test, cst.Comparison) and len(a.test.comparisons) == 1 \
                and {dotted(a.test.left), literal_value(a.test.comparisons[0].comparator)} == {"__name__", "__main__"}:
            return True
    return False


def _settings(facts) -> dict:
    """What the file sets up — "tf32", "cudnn_benchmark", "deterministic" (assignments and
    calls that set them, not reads), "amp" (autocast, a framework precision flag), "scaler"
    (a GradScaler), "cuda_ext" (builds C++/CUDA extension ops) — split into what runs on
    import ("settings") and what runs only when the
    file is the script (`if __name__ == "__main__":`, "main_settings")."""
    found: dict[str, set] = {"settings": set(), "main_settings": set()}

    def add(node, what):
        found["main_settings" if _in_main_guard(facts, node) else "settings"].add(what)

    for node in facts.index[cst.Assign]:
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
    for call in facts.calls():
        q = facts.qualname(call.func) or ""
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
    if facts.uses_autocast:
        found["settings"].add("amp")
    if facts.uses_grad_scaler or facts.words.name_contains("gradscaler", "grad_scaler", "loss_scaler"):
        found["settings"].add("scaler")
    return {k: sorted(v) for k, v in found.items() if v}


def summarise(facts, lines) -> dict:
    """The summary of the file behind `facts`; `lines(node)` gives a node's 1-based line."""
    imports = facts.imports
    summary = {
        "v": SUMMARY_VERSION,
        "imports": {k: v for k, v in imports.aliases.items() if v.split(".", 1)[0] not in LIBRARY_ROOTS},
        "relative": dict(imports.relative),
        "stars": list(imports.stars),
        "classes": {},
        "functions": {},
        "defaults": _defaults(facts),
        "constants": _constants(facts),
        "calls": [],
        "accel": bool(facts.may_use_accelerator),
        "cuda": bool(facts.is_cuda_code),
        # File-wide settings the file makes (TF32, cudnn.benchmark, determinism) and whether
        # it sets up mixed precision: the modules around it need not repeat them.
        **_settings(facts),
        # The file trains (a training loop or a per-step training function): evaluation it
        # calls runs during training.
        "trains": bool(facts.trains),
    }
    for stmt in facts.module.body:
        if isinstance(stmt, cst.ClassDef):
            summary["classes"][stmt.name.value] = _class_info(facts, stmt)
        elif isinstance(stmt, cst.FunctionDef):
            summary["functions"][stmt.name.value] = _function_info(facts, stmt)
    summary["calls"] = _calls(facts, lines)
    return summary
