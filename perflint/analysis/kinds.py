"""Kinds: what an expression holds (a DataLoader, a batch, a model, an optimizer …)."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from perflint.analysis.bindings import Binding
from perflint.analysis.syntax import call_name, literal_value
from perflint.analysis.devices import _device_string_kinds
from perflint.analysis.vocab import GRAPH_BATCH_CALLS, OPTIMIZER_CLASSES, _HINTS, _VERB_PREFIX
from perflint.names import dotted

# Calls whose iteration yields the elements of their first argument: progress bars and
# loggers (`metric_logger.log_every(loader, 10)` in DETR/DeiT/MAE-style code).
_ITER_WRAPPERS = {"tqdm", "trange", "iter", "islice", "track", "progress_bar", "chain", "log_every", "enumerate"}


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
    "toarray", "todense",  # one row of an in-memory sparse matrix made dense
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

    def shares_a_file_offset(self, cls: cst.ClassDef) -> bool:
        """A Dataset class that opens a file once (`self.f = open(...)` in `__init__`) and
        seeks in it per item: worker processes forked from it share that file's offset, so
        their reads interleave (a loader must keep `num_workers=0`, or open per worker)."""
        if not isinstance(cls.body, cst.IndentedBlock):
            return False
        opened: set[str] = set()
        for fn in cls.body.body:
            if isinstance(fn, cst.FunctionDef) and fn.name.value == "__init__":
                for node in self.nodes_within(fn, cst.Assign):
                    if isinstance(node.value, cst.Call) and call_name(node.value) == "open" and len(node.targets) == 1:
                        t = node.targets[0].target
                        if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                            opened.add(t.attr.value)
        if not opened:
            return False
        for c in self.calls_within(cls):
            f = c.func
            if isinstance(f, cst.Attribute) and f.attr.value == "seek" and isinstance(f.value, cst.Attribute) \
                    and f.value.attr.value in opened:
                return True
        return False

    def pad_only_collate(self, fn: cst.CSTNode) -> bool:
        """A collate function that only pads, stacks and casts what the samples hold."""
        inner = {f.name.value for f in self.nodes_within(fn, cst.FunctionDef)}  # its own helpers
        return all(_cheap_call(self, c) or call_name(c) in _PAD_CALLS
                   or (isinstance(c.func, cst.Name) and c.func.value in inner) for c in self.calls_within(fn))

    def graph_collate(self, fn: cst.FunctionDef) -> bool:
        """A collate function whose batch is a DGL graph: every value it returns is a graph
        built by `dgl.batch(...)` (or `dgl.graph`, …), or a tuple holding one (`return
        dgl.batch(graphs), labels`), directly or through a name bound once."""
        rets = [r for r in self.nodes_within(fn, cst.Return) if self.enclosing_function(r) is fn]
        if not rets:
            return False
        for r in rets:
            value = r.value
            items = [e.value for e in value.elements if not isinstance(e, cst.StarredElement)] \
                if isinstance(value, (cst.Tuple, cst.List)) else [value]
            if not any(self._graph_batch(v, r) for v in items if v is not None):
                return False
        return True

    def _graph_batch(self, node: cst.BaseExpression, at: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name):
            bs = self.lookup(node.value, at)
            return len(bs) == 1 and bs[0].how == "expr" and isinstance(bs[0].node, cst.Call) \
                and self.qualname(bs[0].node.func) in GRAPH_BATCH_CALLS
        return isinstance(node, cst.Call) and self.qualname(node.func) in GRAPH_BATCH_CALLS

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
