"""Call kinds: what a call returns (a DataLoader, a model, an optimizer …): torch and
library constructors, wrappers that return what they are given, factories, this file's
functions and methods, and project functions (see `analysis.kinds`)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.syntax import call_name, get_arg
from perflint.analysis.devices import _device_kinds_of
from perflint.analysis.vocab import (
    DATALOADER, LOSS_FUNCTIONS, MODEL_FACTORIES, OPTIMIZER_CLASSES, SCALERS, _CALLEE_VERB, _CONSTRUCTORS,
    _NON_TENSOR_TORCH, _PASS_THROUGH_METHODS, _THIRD_PARTY_OPTIMIZERS,
)

# Calls that return the model they are given, wrapped or converted.
_MODEL_WRAPPERS = frozenset({
    "torch.compile", "torch.nn.SyncBatchNorm.convert_sync_batchnorm", "apex.parallel.convert_syncbn_model",
})

_BATCH_CONVERTERS = {"LongTensor", "FloatTensor", "IntTensor", "DoubleTensor", "HalfTensor", "BoolTensor",
                     "ByteTensor", "Tensor", "tensor", "as_tensor", "from_numpy", "stack", "cat"}


class CallKindsMixin:
    """What a call returns; part of `Facts` (`KindsMixin._kinds` asks it of every call)."""

    def _call_kinds(self, node: cst.Call) -> set[str]:
        q = self.qualname(node.func)
        name = call_name(node)
        if isinstance(node.func, (cst.Subscript, cst.Call)) and self.factory_choices(node.func):
            return {"model"}  # a model picked by name: `ARCHS[args.arch](...)`, `models.__dict__[arch]()`
        if q is not None:
            if q == DATALOADER:
                return {"dataloader"}
            if q.rsplit(".", 1)[-1] in ("tqdm", "track") and node.args and node.args[0].keyword is None:
                # `pbar = tqdm(loader)`: iterating the bar iterates the loader.
                return set(self.kinds(node.args[0].value)) & {"dataloader", "~dataloader"}
            if q in SCALERS:
                return {"scaler"}
            if q.startswith("torch.optim.") and q.rsplit(".", 1)[-1] in OPTIMIZER_CLASSES:
                return {"optimizer"}
            if _THIRD_PARTY_OPTIMIZERS.match(q):
                return {"optimizer"}
            if q == "torch.device":
                if node.args:
                    return _device_kinds_of(self, node.args[0].value)
                return {"device_other"}
            if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper():
                last = q.rsplit(".", 1)[-1]
                if last.endswith("Loss"):
                    return {"criterion"}
                if last in ("DataParallel", "DistributedDataParallel") or q.endswith("DistributedDataParallel"):
                    return {"model"}
                return {"model", "layer"}
            if q.startswith("torch.nn.functional."):
                fname = q.rsplit(".", 1)[-1]
                if fname in LOSS_FUNCTIONS:
                    return {"loss", "tensor"}
                return {"tensor"}
            if q in _MODEL_WRAPPERS and node.args:
                return set(self.kinds(node.args[0].value)) & {"model"} or {"model"}
            if MODEL_FACTORIES.match(q) and not q.endswith(("Tokenizer", "Config", "Processor")):
                if ".from_pretrained" in q or q.startswith(("torchvision.models", "timm", "torch.hub", "torchaudio.models")):
                    return {"model"}
            if q.startswith("torch.") and not _NON_TENSOR_TORCH.match(q):
                short = q.rsplit(".", 1)[-1]
                if short in _CONSTRUCTORS and q.count(".") == 1:
                    dev = get_arg(node, "device")
                    if dev is None or self.device_kinds(dev.value) == {"device_cpu"}:
                        return {"tensor", "torch_op", "cpu_tensor"}
                    return {"tensor", "torch_op", "device_tensor"}
                if short in _BATCH_CONVERTERS and q.count(".") == 1 and get_arg(node, "device") is None \
                        and node.args and "batch" in self.kinds(node.args[0].value):
                    # `torch.LongTensor(labels)`: still the batch, on the host
                    return {"tensor", "torch_op", "cpu_tensor", "batch"}
                if short in ("from_numpy", "as_tensor") and get_arg(node, "device") is None:
                    return {"tensor", "torch_op", "cpu_tensor"}
                return {"tensor", "torch_op"}
            if q in ("numpy.array", "numpy.asarray") or q.startswith("numpy."):
                return {"numpy"}
            return self.project_call_kinds(node)
        if isinstance(node.func, cst.Name):
            fname = node.func.value
            if fname in self.module_classes:
                if fname in self.loss_classes:
                    return {"criterion"}
                return {"model"}
            if fname in self.dataset_classes:
                return {"dataset"}
            if fname in ("float", "int", "bool", "len", "round", "sum", "abs"):
                return {"number"} if fname != "sum" else set()
            if fname in ("iter",) and node.args:
                return set(self.kinds(node.args[0].value))
            if fname == "next" and node.args:
                return self._element_kinds(node.args[0].value, ())
            # A call of a local function that returns a DataLoader or a model.
            if fname in self.functions_by_name:
                out = set()
                for fn in self.functions_by_name[fname]:
                    for ret in self.nodes_within(fn, cst.Return):
                        if ret.value is not None and self.enclosing_function(ret) is fn:
                            out |= set(self.kinds(ret.value)) & {"dataloader", "model", "optimizer", "loss", "tensor"}
                return out
            if fname not in self.classes_by_name and self.lookup(fname, node) == []:
                got = self.project_call_kinds(node)  # imported relatively or through a star import
                if got:
                    return got
        base = self.kinds(node.func)
        callee = (call_name(node) or "").lower()
        if "model" in base or ("~model" in base and not _CALLEE_VERB.match(callee)):
            return {"tensor", "output"}
        if "criterion" in base or ("~criterion" in base and not _CALLEE_VERB.match(callee)):
            return {"loss", "tensor"}
        if isinstance(node.func, cst.Attribute):
            rk = self.kinds(node.func.value)
            if name in ("item", "tolist"):
                return {"number"}
            if name in ("detach", "detach_"):
                return {"tensor", "detached"} if ("tensor" in rk or "loss" in rk or "output" in rk) else set()
            if name == "numpy":
                return {"numpy"}
            if name in ("to", "cuda") and ("batch" in rk or "tensor" in rk) and "model" not in rk:
                out = {"batch"} if "batch" in rk else set()
                out |= {"tensor"} & rk | ({"loss", "tensor"} if "loss" in rk else set())
                dev = None if name == "cuda" else get_arg(node, "device", 0)
                if name == "cuda" or (dev is not None and self.device_kinds(dev.value) - {"device_cpu"}
                                      and not (self.kinds(dev.value) & {"tensor"})):
                    out.add("device_tensor")
                elif "cpu_tensor" in rk:
                    out.add("cpu_tensor")
                if "device_tensor" in rk:
                    out.add("device_tensor")
                return out
            if name == "cpu":
                return ({"tensor", "cpu_tensor"} if rk & {"tensor", "loss", "output", "batch"} else set())
            if name in _PASS_THROUGH_METHODS:
                out = set()
                if "model" in rk and name in ("to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "type", "requires_grad_"):
                    return {"model"}
                if "~model" in rk and name in ("to", "cuda", "train", "eval"):
                    return {"~model"}
                if "batch" in rk:
                    out.add("batch")
                if "loss" in rk:
                    out |= {"loss", "tensor"}
                if "tensor" in rk or "output" in rk or "parameter" in rk:
                    out.add("tensor")
                out |= rk & {"cpu_tensor", "device_tensor", "numpy"}
                if "dataloader" in rk:
                    out.add("dataloader")
                return out
            if name in ("parameters", "named_parameters") and ("model" in rk or "~model" in rk):
                return {"parameters"}
            if name in ("forward",) and ("model" in rk or "~model" in rk):
                return {"tensor", "output"}
            return self._method_call_kinds(node.func)
        return set()

    def helper_runs_model(self, call: cst.Call) -> bool:
        """`loss = step_loss(model, batch, device)`: a call of a top-level function of this
        file that calls (or calls `.forward` of) the parameter this call gives a model."""
        if not isinstance(call.func, cst.Name):
            return False
        fns = self.functions_by_name.get(call.func.value, [])
        if len(fns) != 1 or self.parent(fns[0]) is not self.module or self.lookup(call.func.value, call):
            return False
        fn = fns[0]
        params = [*fn.params.posonly_params, *fn.params.params]
        names = set()
        for i, a in enumerate(a for a in call.args if not a.star):
            if not self.kinds(a.value) & {"model", "~model"}:
                continue
            if a.keyword is not None:
                names.add(a.keyword.value)
            elif i < len(params):
                names.add(params[i].name.value)
        if not names:
            return False
        for c in self.calls_within(fn):
            f = c.func
            if isinstance(f, cst.Attribute) and f.attr.value == "forward":
                f = f.value
            if isinstance(f, cst.Name) and f.value in names and any(
                    b.how == "param" for b in self.lookup(f.value, f)):
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
        _METHOD_KINDS = {"dataloader", "model", "optimizer", "scaler", "criterion", "dataset"}
        if recv.value == "self":
            cls = self.enclosing_class(func)
            memo = self.__dict__.setdefault("_self_method_memo", {})
            key = (cls, method)
            if key not in memo:
                memo[key] = self._self_method_kinds(cls, method, _METHOD_KINDS)
            return set(memo[key])
        if self.project is None:
            return set()
        bs = self.lookup(recv.value, recv)
        if len(bs) != 1 or bs[0].how != "param" or not isinstance(bs[0].site, cst.FunctionDef):
            return set()
        pos = self._param_position(bs[0].node, bs[0].site)  # type: ignore[arg-type]
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
                for ret in self.nodes_within(fns[0], cst.Return):
                    if ret.value is not None and self.enclosing_function(ret) is fns[0]:
                        out |= set(self.kinds(ret.value)) & wanted
                return frozenset(out)
            if self.project is not None:
                for base in cls.bases:
                    ref = self.project_ref(base.value)
                    if ref is not None and not ref.startswith("#"):
                        got = self.project.inherited_method_kinds(ref, method)
                        if got:
                            return frozenset(got & wanted)
            cls = self._local_base_class(cls)
        return frozenset()

