"""Call kinds: what a call returns (a DataLoader, a model, an optimizer …): torch and
library constructors, wrappers that return what they are given, factories, this file's
functions and methods, and project functions (see `analysis.kinds`)."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import call_name, get_arg
from perflint.analysis.devices import _device_kinds_of
from perflint.analysis.vocab import (
    Kind, DATALOADER, LOSS_FUNCTIONS, MODEL_FACTORIES, OPTIMIZER_CLASSES, SCALERS, _CALLEE_VERB, _CONSTRUCTORS, loads_model,
    _NON_TENSOR_TORCH, _PASS_THROUGH_METHODS, _THIRD_PARTY_OPTIMIZERS,
)

# Calls that return the model they are given, wrapped or converted.
_MODEL_WRAPPERS = frozenset({
    "torch.compile", "torch.nn.SyncBatchNorm.convert_sync_batchnorm", "apex.parallel.convert_syncbn_model",
})

_BATCH_CONVERTERS = {"LongTensor", "FloatTensor", "IntTensor", "DoubleTensor", "HalfTensor", "BoolTensor",
                     "ByteTensor", "Tensor", "tensor", "as_tensor", "from_numpy", "stack", "cat"}


class CallKinds(Component):
    """What a call returns: the half of the kinds component (`analysis.kinds.Kinds`) that
    reads calls.  The two ask each other (a call's result depends on its arguments' kinds),
    so `Kinds` builds it and hands itself over as `self.kinds`."""

    needs = ("tree", "bindings", "cross", "devices")

    def __init__(self, facts, kinds) -> None:
        super().__init__(facts)
        self.kinds = kinds

    def _call_kinds(self, node: cst.Call) -> set[str]:
        q = self.tree.qualname(node.func)
        name = call_name(node)
        if isinstance(node.func, (cst.Subscript, cst.Call)) and self.factory_choices(node.func):
            return {Kind.MODEL}  # a model picked by name: `ARCHS[args.arch](...)`, `models.__dict__[arch]()`
        if q is not None:
            if q == DATALOADER:
                return {Kind.DATALOADER}
            if q.rsplit(".", 1)[-1] in ("tqdm", "track") and node.args and node.args[0].keyword is None:
                # `pbar = tqdm(loader)`: iterating the bar iterates the loader.
                return set(self.kinds.of(node.args[0].value)) & {Kind.DATALOADER, Kind.NAMED_DATALOADER}
            if q in SCALERS:
                return {Kind.SCALER}
            if q.startswith("torch.optim.") and q.rsplit(".", 1)[-1] in OPTIMIZER_CLASSES:
                return {Kind.OPTIMIZER}
            if _THIRD_PARTY_OPTIMIZERS.match(q):
                return {Kind.OPTIMIZER}
            if q == "torch.device":
                if node.args:
                    return _device_kinds_of(self.facts, node.args[0].value)
                return {Kind.DEVICE_OTHER}
            if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper():
                last = q.rsplit(".", 1)[-1]
                if last.endswith("Loss"):
                    return {Kind.CRITERION}
                if last in ("DataParallel", "DistributedDataParallel") or q.endswith("DistributedDataParallel"):
                    return {Kind.MODEL}
                return {Kind.MODEL, Kind.LAYER}
            if q.startswith("torch.nn.functional."):
                fname = q.rsplit(".", 1)[-1]
                if fname in LOSS_FUNCTIONS:
                    return {Kind.LOSS, Kind.TENSOR}
                return {Kind.TENSOR}
            if q in _MODEL_WRAPPERS and node.args:
                return set(self.kinds.of(node.args[0].value)) & {Kind.MODEL} or {Kind.MODEL}
            if loads_model(q):
                if ".from_pretrained" in q or q.startswith(("torchvision.models", "timm", "torch.hub", "torchaudio.models")):
                    return {Kind.MODEL}
            if q.startswith("torch.") and not _NON_TENSOR_TORCH.match(q):
                short = q.rsplit(".", 1)[-1]
                if short in _CONSTRUCTORS and q.count(".") == 1:
                    dev = get_arg(node, "device")
                    if dev is None or self.devices.device_kinds(dev.value) == {Kind.DEVICE_CPU}:
                        return {Kind.TENSOR, Kind.TORCH_OP, Kind.CPU_TENSOR}
                    return {Kind.TENSOR, Kind.TORCH_OP, Kind.DEVICE_TENSOR}
                if short in _BATCH_CONVERTERS and q.count(".") == 1 and get_arg(node, "device") is None \
                        and node.args and Kind.BATCH in self.kinds.of(node.args[0].value):
                    # `torch.LongTensor(labels)`: still the batch, on the host
                    return {Kind.TENSOR, Kind.TORCH_OP, Kind.CPU_TENSOR, Kind.BATCH}
                if short in ("from_numpy", "as_tensor") and get_arg(node, "device") is None:
                    return {Kind.TENSOR, Kind.TORCH_OP, Kind.CPU_TENSOR}
                return {Kind.TENSOR, Kind.TORCH_OP}
            if q in ("numpy.array", "numpy.asarray") or q.startswith("numpy."):
                return {Kind.NUMPY}
            return self.cross.project_call_kinds(node)
        if isinstance(node.func, cst.Name):
            fname = node.func.value
            if fname in self.kinds.module_classes:
                if fname in self.kinds.loss_classes:
                    return {Kind.CRITERION}
                return {Kind.MODEL}
            if fname in self.kinds.dataset_classes:
                return {Kind.DATASET}
            if fname in ("float", "int", "bool", "len", "round", "sum", "abs"):
                return {Kind.NUMBER} if fname != "sum" else set()
            if fname in ("iter",) and node.args:
                return set(self.kinds.of(node.args[0].value))
            if fname == "next" and node.args:
                return self.kinds._element_kinds(node.args[0].value, ())
            # A call of a local function that returns a DataLoader or a model.
            if fname in self.tree.functions_by_name:
                out = set()
                for fn in self.tree.functions_by_name[fname]:
                    for ret in self.tree.nodes_within(fn, cst.Return):
                        if ret.value is not None and self.tree.enclosing_function(ret) is fn:
                            out |= set(self.kinds.of(ret.value)) & {Kind.DATALOADER, Kind.MODEL, Kind.OPTIMIZER, Kind.LOSS, Kind.TENSOR}
                return out
            if fname not in self.tree.classes_by_name and self.bindings.lookup(fname, node) == []:
                got = self.cross.project_call_kinds(node)  # imported relatively or through a star import
                if got:
                    return got
        base = self.kinds.of(node.func)
        callee = (call_name(node) or "").lower()
        if Kind.MODEL in base or (Kind.NAMED_MODEL in base and not _CALLEE_VERB.match(callee)):
            return {Kind.TENSOR, Kind.OUTPUT}
        if Kind.CRITERION in base or (Kind.NAMED_CRITERION in base and not _CALLEE_VERB.match(callee)):
            return {Kind.LOSS, Kind.TENSOR}
        if isinstance(node.func, cst.Attribute):
            rk = self.kinds.of(node.func.value)
            if name in ("item", "tolist"):
                return {Kind.NUMBER}
            if name in ("detach", "detach_"):
                return {Kind.TENSOR, Kind.DETACHED} if (Kind.TENSOR in rk or Kind.LOSS in rk or Kind.OUTPUT in rk) else set()
            if name == "numpy":
                return {Kind.NUMPY}
            if name in ("to", "cuda") and (Kind.BATCH in rk or Kind.TENSOR in rk) and Kind.MODEL not in rk:
                out = {Kind.BATCH} if Kind.BATCH in rk else set()
                out |= {Kind.TENSOR} & rk | ({Kind.LOSS, Kind.TENSOR} if Kind.LOSS in rk else set())
                dev = None if name == "cuda" else get_arg(node, "device", 0)
                if name == "cuda" or (dev is not None and self.devices.device_kinds(dev.value) - {Kind.DEVICE_CPU}
                                      and not (self.kinds.of(dev.value) & {Kind.TENSOR})):
                    out.add(Kind.DEVICE_TENSOR)
                elif Kind.CPU_TENSOR in rk:
                    out.add(Kind.CPU_TENSOR)
                if Kind.DEVICE_TENSOR in rk:
                    out.add(Kind.DEVICE_TENSOR)
                return out
            if name == "cpu":
                return ({Kind.TENSOR, Kind.CPU_TENSOR} if rk & {Kind.TENSOR, Kind.LOSS, Kind.OUTPUT, Kind.BATCH} else set())
            if name in _PASS_THROUGH_METHODS:
                out = set()
                if Kind.MODEL in rk and name in ("to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "type", "requires_grad_"):
                    return {Kind.MODEL}
                if Kind.NAMED_MODEL in rk and name in ("to", "cuda", "train", "eval"):
                    return {Kind.NAMED_MODEL}
                if Kind.BATCH in rk:
                    out.add(Kind.BATCH)
                if Kind.LOSS in rk:
                    out |= {Kind.LOSS, Kind.TENSOR}
                if Kind.TENSOR in rk or Kind.OUTPUT in rk or Kind.PARAMETER in rk:
                    out.add(Kind.TENSOR)
                out |= rk & {Kind.CPU_TENSOR, Kind.DEVICE_TENSOR, Kind.NUMPY}
                if Kind.DATALOADER in rk:
                    out.add(Kind.DATALOADER)
                return out
            if name in ("parameters", "named_parameters") and (Kind.MODEL in rk or Kind.NAMED_MODEL in rk):
                return {Kind.PARAMETERS}
            if name in ("forward",) and (Kind.MODEL in rk or Kind.NAMED_MODEL in rk):
                return {Kind.TENSOR, Kind.OUTPUT}
            return self._method_call_kinds(node.func)
        return set()

    def helper_runs_model(self, call: cst.Call) -> bool:
        """`loss = step_loss(model, batch, device)`: a call of a top-level function of this
        file that calls (or calls `.forward` of) the parameter this call gives a model."""
        if not isinstance(call.func, cst.Name):
            return False
        fns = self.tree.functions_by_name.get(call.func.value, [])
        if len(fns) != 1 or self.tree.parent(fns[0]) is not self.facts.module or self.bindings.lookup(call.func.value, call):
            return False
        fn = fns[0]
        params = [*fn.params.posonly_params, *fn.params.params]
        names = set()
        for i, a in enumerate(a for a in call.args if not a.star):
            if not self.kinds.of(a.value) & {Kind.MODEL, Kind.NAMED_MODEL}:
                continue
            if a.keyword is not None:
                names.add(a.keyword.value)
            elif i < len(params):
                names.add(params[i].name.value)
        if not names:
            return False
        for c in self.tree.calls_within(fn):
            f = c.func
            if isinstance(f, cst.Attribute) and f.attr.value == "forward":
                f = f.value
            if isinstance(f, cst.Name) and f.value in names and any(
                    b.how == "param" for b in self.bindings.lookup(f.value, f)):
                return True
        return False

    def _method_call_kinds(self, func: cst.Attribute) -> set[str]:
        """`self.make_optimizer()` (a method of this class, or one it inherits from a project
        class) and `corpus.loader(32)` on a parameter every caller passes an instance of one
        project class for: what the method returns."""
        recv, method = func.value, func.attr.value
        if not isinstance(recv, cst.Name):
            return set()
        # What a training loop is built from; not tensors, whose device a method does not
        # show (a loss computed on a CPU `loss_device`).
        _METHOD_KINDS = {Kind.DATALOADER, Kind.MODEL, Kind.OPTIMIZER, Kind.SCALER, Kind.CRITERION, Kind.DATASET}
        if recv.value == "self":
            cls = self.tree.enclosing_class(func)
            memo = self.__dict__.setdefault("_self_method_memo", {})
            key = (cls, method)
            if key not in memo:
                memo[key] = self._self_method_kinds(cls, method, _METHOD_KINDS)
            return set(memo[key])
        if self.project is None:
            return set()
        bs = self.bindings.lookup(recv.value, recv)
        if len(bs) != 1 or bs[0].how != "param" or not isinstance(bs[0].site, cst.FunctionDef):
            return set()
        pos = self.cross._param_position(bs[0].node, bs[0].site)  # type: ignore[arg-type]
        if pos is None:
            return set()
        return set(self.project.param_method_kinds(pos[0], pos[1], recv.value, method)) & _METHOD_KINDS

    def _self_method_kinds(self, cls, method: str, wanted) -> frozenset[str]:
        """What `self.<method>()` returns: the method of the class (or a base class of this
        file), else one inherited from a project class."""
        seen = 0
        while cls is not None and seen < 5:
            seen += 1
            fns = [f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == method] \
                if isinstance(cls.body, cst.IndentedBlock) else []
            if fns:
                out: set[str] = set()
                for ret in self.tree.nodes_within(fns[0], cst.Return):
                    if ret.value is not None and self.tree.enclosing_function(ret) is fns[0]:
                        out |= set(self.kinds.of(ret.value)) & wanted
                return frozenset(out)
            if self.project is not None:
                for base in cls.bases:
                    ref = self.cross.project_ref(base.value)
                    if ref is not None and not ref.startswith("#"):
                        got = self.project.inherited_method_kinds(ref, method)
                        if got:
                            return frozenset(got & wanted)
            cls = self.bindings._local_base_class(cls)
        return frozenset()

    def factory_choices(self, func: cst.BaseExpression) -> list | None:
        """What a model chosen by name is picked from, when `func(...)` builds one:
        `torchvision.models.__dict__[arch]` and `getattr(torchvision.models, name)` give
        ["torchvision.models.by_name"] (any classifier of that module); `ARCHS[name]` or
        `ARCHS.get(name)` on a dict bound once to a literal whose values are all model
        classes (of this file, the project or torch) gives those values as expressions.
        None otherwise."""
        if isinstance(func, cst.Subscript):
            q = self.tree.qualname(func.value) or ""
            if q.endswith(".__dict__") and q.startswith(("torchvision.models", "timm.models")):
                return [q[: -len(".__dict__")] + ".by_name"]
            return self._model_dict_values(func.value)
        if isinstance(func, cst.Call):
            if isinstance(func.func, cst.Name) and func.func.value == "getattr" and not self.bindings.lookup("getattr", func) \
                    and len(func.args) >= 2:
                q = self.tree.qualname(func.args[0].value) or ""
                if q.startswith(("torchvision.models", "timm.models")) and "." not in q[len("torchvision.models"):].strip("."):
                    return [q + ".by_name"]
                return None
            if isinstance(func.func, cst.Attribute) and func.func.attr.value == "get" and func.args:
                return self._model_dict_values(func.func.value)
        return None

    def factory_layer_apis(self, func: cst.BaseExpression) -> set[str]:
        """Layer APIs of the models a by-name choice (`factory_choices`) may build: library
        names as they are (`torchvision.models.by_name`, `torchvision.models.resnet50`), a
        project class's layers through the project; a class of this file builds its layers
        here (the file's own calls)."""
        out: set[str] = set()
        for v in self.factory_choices(func) or ():
            if isinstance(v, str):
                out.add(v)
                continue
            q = self.tree.qualname(v)
            ref = self.cross.project_ref(v)
            if q is not None and ref is None:
                out.add(q)  # a library model (`torchvision.models.resnet50`)
            elif self.project is not None and ref is not None and not ref.startswith("#"):
                out |= self.project.layer_apis(ref)
        return out

    def _model_dict_values(self, node: cst.BaseExpression) -> list | None:
        if not isinstance(node, cst.Name):
            return None
        bs = self.bindings.lookup(node.value, node)
        if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].node, cst.Dict) or not bs[0].node.elements:
            return None
        values = []
        for el in bs[0].node.elements:
            if not isinstance(el, cst.DictElement) or not isinstance(el.value, (cst.Name, cst.Attribute)):
                return None
            v = el.value
            q = self.tree.qualname(v) or ""
            local = isinstance(v, cst.Name) and v.value in self.kinds.module_classes and v.value not in self.kinds.loss_classes
            lib = bool(MODEL_FACTORIES.match(q)) or (q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper())
            if not (local or lib or Kind.MODEL in self.cross.project_class_kinds(v)):
                return None
            values.append(v)
        return values

    @cached_property
    def project_layer_apis(self) -> frozenset[str]:
        """torch layer APIs built by the project classes and functions this file calls, and
        by the models it picks by name (`ARCHS[name](...)`, `models.__dict__[arch](...)`)."""
        out: set[str] = set()
        for call in self.tree.index[cst.Call]:
            if isinstance(call.func, (cst.Subscript, cst.Call)):
                out |= self.factory_layer_apis(call.func)
        if self.project is None:
            return frozenset(out)
        for call in self.tree.index[cst.Call]:
            ref = self.cross.project_ref(call.func)
            if ref is None or ref.startswith("#"):
                continue
            out |= self.project.layer_apis(ref)
        # A model handed in by every caller (`fit(model, ...)` with `model = Net(...)`).
        for fn in self.tree.index[cst.FunctionDef]:
            for param in [*fn.params.posonly_params, *fn.params.params]:
                pos = self.cross._param_position(param, fn)
                if pos is not None and Kind.MODEL in self.cross.project_param_kinds(param, fn):
                    out |= self.project.param_layer_apis(pos[0], pos[1], param.name.value)
        return frozenset(out)

