"""Kinds: what an expression holds (a DataLoader, a batch, a model, an optimizer …)."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from perflint.analysis.bindings import Binding
from perflint.analysis.syntax import call_name, get_arg, literal_value
from perflint.analysis.devices import _device_kinds_of, _device_string_kinds
from perflint.analysis.vocab import (
    DATALOADER, LOSS_FUNCTIONS, MODEL_FACTORIES, OPTIMIZER_CLASSES, SCALERS, _CALLEE_VERB, _CONSTRUCTORS, _HINTS,
    _NON_TENSOR_TORCH, _PASS_THROUGH_METHODS, _THIRD_PARTY_OPTIMIZERS, _VERB_PREFIX,
)
from perflint.names import dotted

# Calls that return the model they are given, wrapped or converted.
_MODEL_WRAPPERS = frozenset({
    "torch.compile", "torch.nn.SyncBatchNorm.convert_sync_batchnorm", "apex.parallel.convert_syncbn_model",
})


# Calls whose iteration yields the elements of their first argument: progress bars and
# loggers (`metric_logger.log_every(loader, 10)` in DETR/DeiT/MAE-style code).
_ITER_WRAPPERS = {"tqdm", "trange", "iter", "islice", "track", "progress_bar", "chain", "log_every", "enumerate"}


_BATCH_CONVERTERS = {"LongTensor", "FloatTensor", "IntTensor", "DoubleTensor", "HalfTensor", "BoolTensor",
                     "ByteTensor", "Tensor", "tensor", "as_tensor", "from_numpy", "stack", "cat"}


def name_hints(name: str) -> set[str]:
    """Kinds suggested by a naming convention alone (weak evidence)."""
    low = name.lower()
    if _VERB_PREFIX.match(low):
        return set()  # `get_model`, `build_loader`: functions, not the thing itself
    return {kind for kind, rx in _HINTS if rx.search(low)}



# Calls a cheap `__getitem__` may make: indexing helpers, casts, building a tensor from what
# is in memory, index arithmetic and random choices of a window.
_CHEAP_CALLS = {
    "type", "long", "int", "float", "half", "bool", "to", "tensor", "as_tensor", "from_numpy", "LongTensor",
    "FloatTensor", "IntTensor", "BoolTensor", "stack", "cat", "clone", "len", "min", "max", "range", "dict", "list",
    "tuple", "zip", "slice", "astype", "copy", "reshape", "view", "squeeze", "unsqueeze", "array", "asarray", "get",
    "randint", "randrange", "choice", "random", "ones_like", "zeros_like", "full_like", "contiguous", "numpy", "items",
    "keys", "values", "isinstance", "str", "abs", "round", "sum", "ones", "zeros", "full", "arange", "enumerate",
    "int64", "int32", "float32", "where", "nonzero", "flatten", "permute", "transpose", "clamp", "clip",
}
_PAD_CALLS = {"pad_sequence", "pad", "sorted", "append", "extend", "max", "fill_", "new_full", "new_zeros",
              "masked_fill", "masked_fill_", "Tensor", "default_collate"}


def _cheap_call(facts, call: cst.Call) -> bool:
    name = call_name(call) or ""
    if name not in _CHEAP_CALLS:
        return False
    q = facts.qualname(call.func) or ""
    return not q.startswith(("PIL.", "cv2.", "torchvision.", "torchaudio.", "librosa.", "soundfile."))


class KindsMixin:
    @cached_property
    def module_classes(self) -> set[str]:
        """Names of classes in this file that are nn.Module subclasses (transitively)."""
        result: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, cls in self.classes_by_name.items():
                if name in result:
                    continue
                for base in cls.bases:
                    q = self.qualname(base.value) or ""
                    bname = dotted(base.value) or ""
                    if (
                        q.startswith("torch.nn.")
                        or q.startswith(("pytorch_lightning.", "lightning.", "transformers."))
                        or bname in result
                        or bname.split(".")[-1] in ("LightningModule", "Module", "PreTrainedModel")
                        or "model" in self.project_class_kinds(base.value)
                        or "criterion" in self.project_class_kinds(base.value)
                    ):
                        result.add(name)
                        changed = True
                        break
        return result

    @cached_property
    def loss_classes(self) -> set[str]:
        out = set()
        for name, cls in self.classes_by_name.items():
            if name in self.module_classes and (name.endswith("Loss") or "loss" in name.lower()):
                out.add(name)
        return out

    @cached_property
    def dataset_classes(self) -> set[str]:
        out = set()
        for name, cls in self.classes_by_name.items():
            for base in cls.bases:
                q = self.qualname(base.value) or dotted(base.value) or ""
                if q.endswith("Dataset") or q in out or "dataset" in self.project_class_kinds(base.value):
                    out.add(name)
        return out

    def cheap_samples_class(self, cls: cst.ClassDef) -> bool:
        """A Dataset class whose samples cost next to nothing to produce: `__getitem__` only
        indexes data already in memory (tokenised tensors, a replay buffer, trajectories) with
        dtype casts and index arithmetic — no file reads, decoding, transforms or tokenizers —
        or the class reads a `numpy.memmap` of packed token ids.  Worker processes would only
        add inter-process copies, as for a TensorDataset."""
        if not isinstance(cls.body, cst.IndentedBlock):
            return False
        memmap = any(
            self.qualname(c.func) == "numpy.memmap"
            or (self.qualname(c.func) == "numpy.load" and any(a.keyword is not None and a.keyword.value == "mmap_mode"
                                                            for a in c.args))
            for c in self.calls())
        if memmap and any(isinstance(f, cst.FunctionDef) and f.name.value in ("__iter__", "__getitem__")
                          for f in cls.body.body):
            return True  # slices of a memory-mapped token file (the iterator may be a helper class)
        getitem = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__getitem__"), None)
        if getitem is None:
            return False
        return all(_cheap_call(self, c) for c in self.calls_within(getitem))

    def moves_samples_to_device(self, cls: cst.ClassDef) -> bool:
        """A Dataset class whose `__getitem__`/`__iter__` puts samples on a device: `.cuda()`,
        or `.to(x)` with a device that may be a GPU (`self.device`, a "cuda" string)."""
        if not isinstance(cls.body, cst.IndentedBlock):
            return False
        for f in cls.body.body:
            if isinstance(f, cst.FunctionDef) and f.name.value in ("__getitem__", "__iter__", "__getitems__"):
                for c in self.calls_within(f):
                    name = call_name(c)
                    if name == "cuda":
                        return True
                    if name == "to" and c.args:
                        first = c.args[0]
                        if first.keyword is not None and first.keyword.value != "device":
                            continue
                        dk = self.device_kinds(first.value)
                        label = (dotted(first.value) or "").rsplit(".", 1)[-1].lower()
                        if dk & {"device_cuda", "device_other"} or "device" in label:
                            return True
        return False

    def pad_only_collate(self, fn: cst.CSTNode) -> bool:
        """A collate function that only pads, stacks and casts what the samples hold."""
        return all(_cheap_call(self, c) or call_name(c) in _PAD_CALLS for c in self.calls_within(fn))

    # -- kinds ----------------------------------------------------------------------------
    def kinds(self, node: cst.CSTNode | None) -> frozenset[str]:
        """What `node` holds; see the module docstring. Memoised, cycle-safe."""
        if node is None:
            return frozenset()
        key = (node,)
        got = self._memo_kinds.get(key)
        if got is not None:
            return got
        self._memo_kinds[key] = frozenset()  # cycle guard
        result = frozenset(self._kinds(node))
        self._memo_kinds[key] = result
        return result

    def has_kind(self, node: cst.CSTNode | None, kind: str, weak: bool = True) -> bool:
        ks = self.kinds(node)
        return kind in ks or (weak and ("~" + kind) in ks)

    def _accumulated_kinds(self, node: cst.Name) -> set[str]:
        """Tensor kinds that `name += <tensor>` statements in `node`'s scope add to the name."""
        scope = self.scope_of(node)
        out: set[str] = set()
        for aug in self.nodes_within(scope, cst.AugAssign):
            if isinstance(aug.target, cst.Name) and aug.target.value == node.value and self.scope_of(aug) is scope \
                    and isinstance(aug.operator, (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign)):
                out |= set(self.kinds(aug.value)) & {"loss", "tensor", "device_tensor"}
        if "loss" in out:
            out.add("tensor")
        return out

    def _binding_kinds(self, b: Binding) -> set[str]:
        if b.how == "expr":
            return set(self.kinds(b.node))
        if b.how == "unpack":
            return self._unpack_kinds(b.node, b.index)
        if b.how in ("iter", "iter_unpack"):
            return self._element_kinds(b.node, b.index)
        if b.how == "with":
            ks = set(self.kinds(b.node))
            return {"tensor"} & ks
        if b.how == "param":
            p: cst.Param = b.node  # type: ignore[assignment]
            out: set[str] = set()
            if p.annotation is not None:
                ann = self.qualname(p.annotation.annotation) or dotted(p.annotation.annotation) or ""
                last = ann.rsplit(".", 1)[-1]
                if last == "DataLoader":
                    out.add("dataloader")
                elif last in ("Optimizer",) or last in OPTIMIZER_CLASSES:
                    out.add("optimizer")
                elif last in ("Module",) or last in self.module_classes:
                    out.add("model")
                elif last == "Tensor":
                    out.add("tensor")
                elif last == "GradScaler":
                    out.add("scaler")
            if not out:
                # The kinds every call site in the project passes, when they agree.
                fn = b.site if isinstance(b.site, cst.FunctionDef) else None
                if fn is not None:
                    out |= self.project_param_kinds(p, fn)
            if not out:
                out |= name_hints(p.name.value)
            if p.default is not None:
                out |= set(self.kinds(p.default)) & {"device_cuda", "device_cpu", "device_other"}
            return out
        return set()

    def _unpack_kinds(self, node: cst.CSTNode, index: tuple[int, ...]) -> set[str]:
        # `model, opt, loader = accelerator.prepare(model, opt, loader)`
        if isinstance(node, cst.Call) and call_name(node) in ("prepare", "setup", "setup_dataloaders") and index:
            positional = [a for a in node.args if a.keyword is None and not a.star]
            if index[0] < len(positional):
                return set(self.kinds(positional[index[0]].value))
        if isinstance(node, (cst.Tuple, cst.List)) and index:
            els = node.elements
            if index[0] < len(els) and not isinstance(els[index[0]], cst.StarredElement):
                inner = els[index[0]].value
                if len(index) == 1:
                    return set(self.kinds(inner))
                return self._unpack_kinds(inner, index[1:])
        base = set(self.kinds(node))
        out = set()
        if "batch" in base or "~batch" in base:
            out.add("batch")
        if "output" in base or "tensor" in base:
            out |= {"tensor", "output"} & (base | {"tensor"})
        if "dataloader" in base:  # e.g. `train_dl, val_dl = make_loaders()`
            out.add("dataloader")
        if "~dataloader" in base:
            out.add("~dataloader")
        return out

    def _element_kinds(self, it: cst.CSTNode, index: tuple[int, ...], depth: int = 0) -> set[str]:
        """Kinds of an element produced by iterating `it`, then unpacked by `index`."""
        if isinstance(it, cst.Name) and depth < 4:
            # `pbar = tqdm(enumerate(loader))` then `for i, batch in pbar:`
            bs = self.lookup(it.value, it)
            if len(bs) == 1 and bs[0].how == "expr" and isinstance(bs[0].node, cst.Call) \
                    and call_name(bs[0].node) in _ITER_WRAPPERS:
                return self._element_kinds(bs[0].node, index, depth + 1)
        if isinstance(it, cst.Call):
            name = call_name(it)
            q = self.qualname(it.func) or name
            if q in ("enumerate",) and it.args:
                if not index:
                    return set()
                if index[0] == 0:
                    return {"int"}
                return self._element_kinds(it.args[0].value, index[1:], depth + 1)
            if q == "zip" and it.args:
                if not index:
                    return set()
                if index[0] < len(it.args):
                    return self._element_kinds(it.args[index[0]].value, index[1:], depth + 1)
                return set()
            if (q or "").split(".")[-1] in _ITER_WRAPPERS and it.args:
                return self._element_kinds(it.args[0].value, index, depth + 1)
            if name in ("items",) and isinstance(it.func, cst.Attribute):
                base = self.kinds(it.func.value)
                if "batch" in base and index and index[0] == 1:
                    return {"batch"}
                return set()
            if name in ("values",) and isinstance(it.func, cst.Attribute):
                base = self.kinds(it.func.value)
                return {"batch"} if "batch" in base else set()
        ks = self.kinds(it)
        if "dataloader" in ks or "~dataloader" in ks or "batch" in ks:
            return {"batch"} if "dataloader" in ks or "batch" in ks else {"~batch", "batch"}
        if "model" in ks and isinstance(it, cst.Call) and call_name(it) in ("parameters", "named_parameters"):
            return {"parameter"}
        return set()

    def _kinds(self, node: cst.CSTNode) -> set[str]:
        if isinstance(node, cst.Name):
            bs = self.lookup(node.value, node)
            if bs:
                out: set[str] = set()
                for b in bs:
                    out |= self._binding_kinds(b)
                if "model" in out or "criterion" in out:
                    out.discard("tensor")
                if out & {"number", "int"} and not out & {"tensor", "loss"}:
                    # `loss = 0` then `loss += criterion(out, y)`: a tensor from the first add.
                    added = self._accumulated_kinds(node)
                    if added:
                        out = (out - {"number", "int"}) | added
                return out
            q = self.qualname(node)
            if q is not None:
                return set()
            return name_hints(node.value)
        if isinstance(node, cst.Attribute):
            bs = self.self_attr_bindings(node)
            if bs:
                out = set()
                for b in bs:
                    out |= self._binding_kinds(b)
                return out
            attr = node.attr.value
            inherited = self.project_attr_kinds(node)
            if inherited:
                return inherited - {"device_cuda", "device_cpu", "device_other"}
            base = self.kinds(node.value)
            if attr == "loss" and ("output" in base or "tensor" in base or "~model" in base or not base):
                return {"loss", "tensor"}
            if attr in ("logits", "last_hidden_state", "hidden_states") and "output" in base:
                return {"tensor", "output"}
            if attr in ("module", "_orig_mod") and ("model" in base or "~model" in base):
                return {"model"}
            if attr == "forward" and base & {"model", "~model"}:
                return set(base & {"model", "~model"})  # `m.forward(x)` calls the model as `m(x)` does
            if "batch" in base:
                return {"batch"}
            if attr in ("grad", "data") and ("parameter" in base or "tensor" in base):
                return {"tensor"}
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                return name_hints(attr)
            if self.qualname(node) is None:
                return name_hints(attr) & {"~dataloader", "~optimizer", "~model", "~criterion", "~scaler"}
            return set()
        if isinstance(node, cst.Call):
            return self._call_kinds(node)
        if isinstance(node, cst.Subscript):
            base = self.kinds(node.value)
            where = base & {"cpu_tensor", "device_tensor"}  # indexing keeps the device
            if "batch" in base:
                return {"batch"} | where
            if "output" in base:
                return {"tensor", "output"} | where
            if "loss" in base:
                return {"loss", "tensor"} | where
            if "tensor" in base:
                return {"tensor"} | where
            if "numpy" in base:
                return {"numpy"}
            return set()
        if isinstance(node, cst.BinaryOperation):
            left, right = self.kinds(node.left), self.kinds(node.right)
            out = set()
            for side in (left, right):
                if "loss" in side:
                    out |= {"loss", "tensor"}
                if "tensor" in side or "output" in side:
                    out.add("tensor")
                out |= side & {"device_tensor"}
            if not out:
                if left & {"number", "int"} and right & {"number", "int"}:
                    return {"number"}
                if (left | right) & {"numpy"}:
                    return {"numpy"}
            return out
        if isinstance(node, cst.UnaryOperation):
            return set(self.kinds(node.expression)) & {"tensor", "loss"}
        if isinstance(node, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in node.comparisons):
                return set()
            left = self.kinds(node.left)
            if "tensor" in left or "output" in left:
                return {"tensor"}
            for comp in node.comparisons:
                if "tensor" in self.kinds(comp.comparator):
                    return {"tensor"}
            return set()
        if isinstance(node, cst.IfExp):
            return set(self.kinds(node.body)) | set(self.kinds(node.orelse))
        if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
            v = literal_value(node)
            if isinstance(v, str):
                return _device_string_kinds(v)
            return set()
        if isinstance(node, (cst.Integer, cst.Float)):
            return {"number"}
        return set()

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

