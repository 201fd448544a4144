"""Kinds: what an expression holds (a DataLoader, a batch, a model, an optimizer …)."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from perflint.analysis.callkinds import CallKinds
from perflint.analysis.component import Component

from perflint.analysis.bindings import Binding
from perflint.analysis.syntax import call_name, literal_value
from perflint.analysis.devices import _device_string_kinds
from perflint.analysis.vocab import Kind, GRAPH_BATCH_CALLS, OPTIMIZER_CLASSES, _HINTS, _VERB_PREFIX
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
    "replace", "join", "strip", "lower", "format",  # string edits of a caption (not a file read)
    "size", "numel", "dim", "item",  # a CPU tensor's shape, one of its values (`torch.randint(0, n, (1,)).item()`)
}
_PAD_CALLS = {"pad_sequence", "pad", "sorted", "append", "extend", "max", "fill_", "new_full", "new_zeros",
              "masked_fill", "masked_fill_", "Tensor", "default_collate", "any", "all", "update"}


def cheap_call(facts, call: cst.Call) -> bool:
    """A call a sample costs next to nothing for: indexing, casts, stacking (no file read,
    no decoding, no image or audio library)."""
    name = call_name(call) or ""
    if name not in _CHEAP_CALLS:
        return False
    q = facts.tree.qualname(call.func) or ""
    return not q.startswith(("PIL.", "cv2.", "torchvision.", "torchaudio.", "librosa.", "soundfile."))


def _cheap_body(facts, cls: cst.ClassDef, fn: cst.FunctionDef, depth: int) -> bool:
    """Every call in `fn` costs a sample next to nothing: a cheap call, or a call of a
    function of this file or a method of `cls` whose own calls are (two levels at most:
    `padding_tokens(ids, n, 0, 1)`, a helper that slices and extends a list)."""
    for c in facts.tree.calls_within(fn):
        if cheap_call(facts, c):
            continue
        helper = _helper(facts, cls, c) if depth < 2 else None
        if helper is None or helper is fn or not _cheap_body(facts, cls, helper, depth + 1):
            return False
    return True


def _helper(facts, cls: cst.ClassDef, call: cst.Call) -> cst.FunctionDef | None:
    """The function `call` runs: the one top-level function of this file by that name, or
    the method of `cls` a `self.name(...)` call names."""
    f = call.func
    if isinstance(f, cst.Name):
        fns = [fn for fn in facts.tree.functions_by_name.get(f.value, []) if facts.tree.parent(fn) is facts.module]
        return fns[0] if len(fns) == 1 else None
    if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self":
        return next((m for m in cls.body.body if isinstance(m, cst.FunctionDef) and m.name.value == f.attr.value), None)
    return None


class Kinds(Component):
    """What an expression holds (`of`), with the file's model, loss and dataset classes;
    what calls return is its other half, `self.calls` (`analysis.callkinds.CallKinds`)."""

    needs = ("tree", "bindings", "cross", "devices")

    def __init__(self, facts) -> None:
        super().__init__(facts)
        self._memo_kinds: dict[tuple, frozenset[str]] = {}
        self.calls = CallKinds(facts, self)
    @cached_property
    def module_classes(self) -> set[str]:
        """Names of classes in this file that are nn.Module subclasses (transitively)."""
        result: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, cls in self.tree.classes_by_name.items():
                if name in result:
                    continue
                for base in cls.bases:
                    q = self.tree.qualname(base.value) or ""
                    bname = dotted(base.value) or ""
                    if (
                        q.startswith("torch.nn.")
                        or q.startswith(("pytorch_lightning.", "lightning.", "transformers."))
                        or bname in result
                        or bname.split(".")[-1] in ("LightningModule", "Module", "PreTrainedModel")
                        or Kind.MODEL in self.cross.project_class_kinds(base.value)
                        or Kind.CRITERION in self.cross.project_class_kinds(base.value)
                    ):
                        result.add(name)
                        changed = True
                        break
        return result

    @cached_property
    def loss_classes(self) -> set[str]:
        out = set()
        for name, cls in self.tree.classes_by_name.items():
            if name in self.module_classes and (name.endswith("Loss") or "loss" in name.lower()):
                out.add(name)
        return out

    @cached_property
    def dataset_classes(self) -> set[str]:
        out = set()
        for name, cls in self.tree.classes_by_name.items():
            for base in cls.bases:
                q = self.tree.qualname(base.value) or dotted(base.value) or ""
                if q.endswith("Dataset") or q in out or Kind.DATASET in self.cross.project_class_kinds(base.value):
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
            self.tree.qualname(c.func) == "numpy.memmap"
            or (self.tree.qualname(c.func) == "numpy.load" and any(a.keyword is not None and a.keyword.value == "mmap_mode"
                                                            for a in c.args))
            for c in self.tree.calls())
        if memmap and any(isinstance(f, cst.FunctionDef) and f.name.value in ("__iter__", "__getitem__")
                          for f in cls.body.body):
            return True  # slices of a memory-mapped token file (the iterator may be a helper class)
        getitem = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__getitem__"), None)
        if getitem is None:
            return False
        return _cheap_body(self.facts, cls, getitem, 0)

    def moves_samples_to_device(self, cls: cst.ClassDef) -> bool:
        """A Dataset class whose `__getitem__`/`__iter__` puts samples on a device: `.cuda()`,
        or `.to(x)` with a device that may be a GPU (`self.device`, a "cuda" string)."""
        if not isinstance(cls.body, cst.IndentedBlock):
            return False
        for f in cls.body.body:
            if isinstance(f, cst.FunctionDef) and f.name.value in ("__getitem__", "__iter__", "__getitems__"):
                for c in self.tree.calls_within(f):
                    name = call_name(c)
                    if name == "cuda":
                        return True
                    if name == "to" and c.args:
                        first = c.args[0]
                        if first.keyword is not None and first.keyword.value != "device":
                            continue
                        dk = self.devices.device_kinds(first.value)
                        label = (dotted(first.value) or "").rsplit(".", 1)[-1].lower()
                        if dk & {Kind.DEVICE_CUDA, Kind.DEVICE_OTHER} or "device" in label:
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
                for node in self.tree.nodes_within(fn, cst.Assign):
                    if isinstance(node.value, cst.Call) and call_name(node.value) == "open" and len(node.targets) == 1:
                        t = node.targets[0].target
                        if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                            opened.add(t.attr.value)
        if not opened:
            return False
        for c in self.tree.calls_within(cls):
            f = c.func
            if isinstance(f, cst.Attribute) and f.attr.value == "seek" and isinstance(f.value, cst.Attribute) \
                    and f.value.attr.value in opened:
                return True
        return False

    def pad_only_collate(self, fn: cst.CSTNode, seen: frozenset = frozenset()) -> bool:
        """A collate function that only pads, stacks and casts what the samples hold; also
        one that hands the batch to such a function of this file (diffusers' `collate_fn=lambda
        examples: collate_fn(examples, args.with_prior_preservation)`)."""
        inner = {f.name.value for f in self.tree.nodes_within(fn, cst.FunctionDef)}  # its own helpers
        return all(cheap_call(self.facts, c) or call_name(c) in _PAD_CALLS
                   or (isinstance(c.func, cst.Name) and c.func.value in inner)
                   or self._pad_only_callee(c, seen | {fn}) for c in self.tree.calls_within(fn))

    def _pad_only_callee(self, call: cst.Call, seen: frozenset) -> bool:
        """`call` runs a top-level function of this file (defined once) that only pads."""
        if not isinstance(call.func, cst.Name):
            return False
        fns = self.tree.functions_by_name.get(call.func.value, ())
        if len(fns) != 1 or fns[0] in seen or self.tree.parent(fns[0]) is not self.facts.module:
            return False
        return self.pad_only_collate(fns[0], seen)

    def graph_collate(self, fn: cst.FunctionDef) -> bool:
        """A collate function whose batch is a DGL graph: every value it returns is a graph
        built by `dgl.batch(...)` (or `dgl.graph`, …), or a tuple holding one (`return
        dgl.batch(graphs), labels`), directly or through a name bound once."""
        rets = [r for r in self.tree.nodes_within(fn, cst.Return) if self.tree.enclosing_function(r) is fn]
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
            bs = self.bindings.lookup(node.value, at)
            return len(bs) == 1 and bs[0].how == "expr" and isinstance(bs[0].node, cst.Call) \
                and self.tree.qualname(bs[0].node.func) in GRAPH_BATCH_CALLS
        return isinstance(node, cst.Call) and self.tree.qualname(node.func) in GRAPH_BATCH_CALLS

    # -- kinds ----------------------------------------------------------------------------
    def of(self, node: cst.CSTNode | None) -> frozenset[str]:
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
        ks = self.of(node)
        return kind in ks or (weak and ("~" + kind) in ks)

    def _accumulated_kinds(self, node: cst.Name) -> set[str]:
        """Tensor kinds that `name += <tensor>` statements in `node`'s scope add to the name."""
        scope = self.tree.scope_of(node)
        out: set[str] = set()
        for aug in self.tree.nodes_within(scope, cst.AugAssign):
            if isinstance(aug.target, cst.Name) and aug.target.value == node.value and self.tree.scope_of(aug) is scope \
                    and isinstance(aug.operator, (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign)):
                out |= set(self.of(aug.value)) & {Kind.LOSS, Kind.TENSOR, Kind.DEVICE_TENSOR}
        if Kind.LOSS in out:
            out.add(Kind.TENSOR)
        return out

    def _binding_kinds(self, b: Binding) -> set[str]:
        if b.how == "expr":
            return set(self.of(b.node))
        if b.how == "unpack":
            return self._unpack_kinds(b.node, b.index)
        if b.how in ("iter", "iter_unpack"):
            return self._element_kinds(b.node, b.index)
        if b.how == "with":
            ks = set(self.of(b.node))
            return {Kind.TENSOR} & ks
        if b.how == "param":
            p: cst.Param = b.node  # type: ignore[assignment]
            out: set[str] = set()
            if p.annotation is not None:
                ann = self.tree.qualname(p.annotation.annotation) or dotted(p.annotation.annotation) or ""
                last = ann.rsplit(".", 1)[-1]
                if last == "DataLoader":
                    out.add(Kind.DATALOADER)
                elif last in ("Optimizer",) or last in OPTIMIZER_CLASSES:
                    out.add(Kind.OPTIMIZER)
                elif last in ("Module",) or last in self.module_classes:
                    out.add(Kind.MODEL)
                elif last == "Tensor":
                    out.add(Kind.TENSOR)
                elif last == "GradScaler":
                    out.add(Kind.SCALER)
            if not out:
                # The kinds every call site in the project passes, when they agree.
                fn = b.site if isinstance(b.site, cst.FunctionDef) else None
                if fn is not None:
                    out |= self.cross.project_param_kinds(p, fn)
            if not out:
                out |= name_hints(p.name.value)
            if p.default is not None:
                out |= set(self.of(p.default)) & {Kind.DEVICE_CUDA, Kind.DEVICE_CPU, Kind.DEVICE_OTHER}
            return out
        return set()

    def _unpack_kinds(self, node: cst.CSTNode, index: tuple[int, ...]) -> set[str]:
        # `model, opt, loader = accelerator.prepare(model, opt, loader)`
        if isinstance(node, cst.Call) and call_name(node) in ("prepare", "setup", "setup_dataloaders") and index:
            positional = [a for a in node.args if a.keyword is None and not a.star]
            if index[0] < len(positional):
                return set(self.of(positional[index[0]].value))
        if isinstance(node, (cst.Tuple, cst.List)) and index:
            els = node.elements
            if index[0] < len(els) and not isinstance(els[index[0]], cst.StarredElement):
                inner = els[index[0]].value
                if len(index) == 1:
                    return set(self.of(inner))
                return self._unpack_kinds(inner, index[1:])
        base = set(self.of(node))
        out = set()
        if Kind.BATCH in base or Kind.NAMED_BATCH in base:
            out.add(Kind.BATCH)
        if Kind.OUTPUT in base or Kind.TENSOR in base:
            out |= {Kind.TENSOR, Kind.OUTPUT} & (base | {Kind.TENSOR})
        if Kind.DATALOADER in base:  # e.g. `train_dl, val_dl = make_loaders()`
            out.add(Kind.DATALOADER)
        if Kind.NAMED_DATALOADER in base:
            out.add(Kind.NAMED_DATALOADER)
        return out

    def _element_kinds(self, it: cst.CSTNode, index: tuple[int, ...], depth: int = 0) -> set[str]:
        """Kinds of an element produced by iterating `it`, then unpacked by `index`."""
        if isinstance(it, cst.Name) and depth < 4:
            # `pbar = tqdm(enumerate(loader))` then `for i, batch in pbar:`
            bs = self.bindings.lookup(it.value, it)
            if len(bs) == 1 and bs[0].how == "expr" and isinstance(bs[0].node, cst.Call) \
                    and call_name(bs[0].node) in _ITER_WRAPPERS:
                return self._element_kinds(bs[0].node, index, depth + 1)
        if isinstance(it, cst.Call):
            name = call_name(it)
            q = self.tree.qualname(it.func) or name
            if q in ("enumerate",) and it.args:
                if not index:
                    return set()
                if index[0] == 0:
                    return {Kind.INT}
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
                base = self.of(it.func.value)
                if Kind.BATCH in base and index and index[0] == 1:
                    return {Kind.BATCH}
                return set()
            if name in ("values",) and isinstance(it.func, cst.Attribute):
                base = self.of(it.func.value)
                return {Kind.BATCH} if Kind.BATCH in base else set()
        ks = self.of(it)
        if Kind.DATALOADER in ks or Kind.NAMED_DATALOADER in ks or Kind.BATCH in ks:
            return {Kind.BATCH} if Kind.DATALOADER in ks or Kind.BATCH in ks else {Kind.NAMED_BATCH, Kind.BATCH}
        if Kind.MODEL in ks and isinstance(it, cst.Call) and call_name(it) in ("parameters", "named_parameters"):
            return {Kind.PARAMETER}
        return set()

    def _kinds(self, node: cst.CSTNode) -> set[str]:
        if isinstance(node, cst.Name):
            bs = self.bindings.lookup(node.value, node)
            if bs:
                out: set[str] = set()
                for b in bs:
                    out |= self._binding_kinds(b)
                if Kind.MODEL in out or Kind.CRITERION in out:
                    out.discard(Kind.TENSOR)
                if out & {Kind.NUMBER, Kind.INT} and not out & {Kind.TENSOR, Kind.LOSS}:
                    # `loss = 0` then `loss += criterion(out, y)`: a tensor from the first add.
                    added = self._accumulated_kinds(node)
                    if added:
                        out = (out - {Kind.NUMBER, Kind.INT}) | added
                return out
            q = self.tree.qualname(node)
            if q is not None:
                return set()
            return name_hints(node.value)
        if isinstance(node, cst.Attribute):
            bs = self.bindings.self_attr_bindings(node)
            if bs:
                out = set()
                for b in bs:
                    out |= self._binding_kinds(b)
                return out
            attr = node.attr.value
            inherited = self.cross.project_attr_kinds(node)
            if inherited:
                return inherited - {Kind.DEVICE_CUDA, Kind.DEVICE_CPU, Kind.DEVICE_OTHER}
            base = self.of(node.value)
            if attr == "loss" and (Kind.OUTPUT in base or Kind.TENSOR in base or Kind.NAMED_MODEL in base or not base):
                return {Kind.LOSS, Kind.TENSOR}
            if attr in ("logits", "last_hidden_state", "hidden_states") and Kind.OUTPUT in base:
                return {Kind.TENSOR, Kind.OUTPUT}
            if attr in ("module", "_orig_mod") and (Kind.MODEL in base or Kind.NAMED_MODEL in base):
                return {Kind.MODEL}
            if attr == "forward" and base & {Kind.MODEL, Kind.NAMED_MODEL}:
                return set(base & {Kind.MODEL, Kind.NAMED_MODEL})  # `m.forward(x)` calls the model as `m(x)` does
            if Kind.BATCH in base:
                return {Kind.BATCH}
            if attr in ("grad", "data") and (Kind.PARAMETER in base or Kind.TENSOR in base):
                return {Kind.TENSOR}
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                return name_hints(attr)
            if self.tree.qualname(node) is None:
                return name_hints(attr) & {Kind.NAMED_DATALOADER, Kind.NAMED_OPTIMIZER, Kind.NAMED_MODEL, Kind.NAMED_CRITERION, Kind.NAMED_SCALER}
            return set()
        if isinstance(node, cst.Call):
            return self.calls._call_kinds(node)
        if isinstance(node, cst.Subscript):
            base = self.of(node.value)
            where = base & {Kind.CPU_TENSOR, Kind.DEVICE_TENSOR}  # indexing keeps the device
            if Kind.BATCH in base:
                return {Kind.BATCH} | where
            if Kind.OUTPUT in base:
                return {Kind.TENSOR, Kind.OUTPUT} | where
            if Kind.LOSS in base:
                return {Kind.LOSS, Kind.TENSOR} | where
            if Kind.TENSOR in base:
                return {Kind.TENSOR} | where
            if Kind.NUMPY in base:
                return {Kind.NUMPY}
            return set()
        if isinstance(node, cst.BinaryOperation):
            left, right = self.of(node.left), self.of(node.right)
            out = set()
            for side in (left, right):
                if Kind.LOSS in side:
                    out |= {Kind.LOSS, Kind.TENSOR}
                if Kind.TENSOR in side or Kind.OUTPUT in side:
                    out.add(Kind.TENSOR)
                out |= side & {Kind.DEVICE_TENSOR}
            if not out:
                if left & {Kind.NUMBER, Kind.INT} and right & {Kind.NUMBER, Kind.INT}:
                    return {Kind.NUMBER}
                if (left | right) & {Kind.NUMPY}:
                    return {Kind.NUMPY}
            return out
        if isinstance(node, cst.UnaryOperation):
            return set(self.of(node.expression)) & {Kind.TENSOR, Kind.LOSS}
        if isinstance(node, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in node.comparisons):
                return set()
            left = self.of(node.left)
            if Kind.TENSOR in left or Kind.OUTPUT in left:
                return {Kind.TENSOR}
            for comp in node.comparisons:
                if Kind.TENSOR in self.of(comp.comparator):
                    return {Kind.TENSOR}
            return set()
        if isinstance(node, cst.IfExp):
            return set(self.of(node.body)) | set(self.of(node.orelse))
        if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
            v = literal_value(node)
            if isinstance(v, str):
                return _device_string_kinds(v)
            return set()
        if isinstance(node, (cst.Integer, cst.Float)):
            return {Kind.NUMBER}
        return set()


def _method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    """The method `name` defined in the body of `cls`, or None."""
    if not isinstance(cls.body, cst.IndentedBlock):
        return None
    return next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == name), None)


def one_item_class(tree, cls: cst.ClassDef) -> bool:
    """A Dataset class whose `__len__` only returns the literal 1: an epoch is one sample
    (siren's single-image and single-source datasets), so worker processes have nothing
    to load ahead of the step."""
    fn = _method(cls, "__len__")
    if fn is None:
        return False
    returns = tree.nodes_within(fn, cst.Return)
    return bool(returns) and all(r.value is not None and literal_value(r.value) == 1
                                 and not isinstance(literal_value(r.value), bool) for r in returns)

LENGTH_PARAM = "len_param:"  # class kind: `__len__` returns a constructor parameter ("len_param:size:0")


def length_param(tree, cls: cst.ClassDef) -> str | None:
    """`LENGTH_PARAM` + "name:position" when the Dataset class's `__len__` only returns
    `self.<attr>` and `__init__` sets that attribute from its parameter `name` (at `position`
    after `self`) and nowhere else (torch-ngp's `SDFDataset(path, size=1)`, a dummy
    validation set of one item)."""
    fn, init = _method(cls, "__len__"), _method(cls, "__init__")
    if fn is None or init is None:
        return None
    returns = tree.nodes_within(fn, cst.Return)
    attrs = {r.value.attr.value for r in returns if isinstance(r.value, cst.Attribute)
             and isinstance(r.value.value, cst.Name) and r.value.value.value == "self"}
    if len(attrs) != 1 or len(returns) != sum(1 for r in returns if isinstance(r.value, cst.Attribute)):
        return None
    attr = attrs.pop()
    sets = [n for n in tree.nodes_within(cls, cst.Assign) for t in n.targets
            if isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
            and t.target.value.value == "self" and t.target.attr.value == attr]
    sets += [n for t in (cst.AugAssign, cst.AnnAssign) for n in tree.nodes_within(cls, t)
             if isinstance(n.target, cst.Attribute) and n.target.attr.value == attr]
    if len(sets) != 1 or not isinstance(sets[0], cst.Assign) or not isinstance(sets[0].value, cst.Name) \
            or tree.enclosing_function(sets[0]) is not init:
        return None
    name = sets[0].value.value
    params = [p.name.value for p in init.params.params]
    if name not in params[1:] or any(isinstance(t.target, cst.Name) and t.target.value == name
                                     for n in tree.nodes_within(init, cst.Assign) for t in n.targets):
        return None
    return f"{LENGTH_PARAM}{name}:{params.index(name) - 1}"


def counts_items(tree, cls: cst.ClassDef) -> bool:
    """A Dataset class whose `__getitem__` advances state of its own (`self.counter += 1`,
    a curriculum over the items drawn): in worker processes each copy would count apart
    and the main process would never see the count move."""
    fn = _method(cls, "__getitem__")
    if fn is None:
        return False
    return any(isinstance(n.target, cst.Attribute) and isinstance(n.target.value, cst.Name)
               and n.target.value.value == "self" for n in tree.nodes_within(fn, cst.AugAssign))


def draws_numpy_random(tree, cls: cst.ClassDef) -> bool:
    """A Dataset class whose `__getitem__` draws from NumPy's global random state
    (`np.random.rand(...)`, `np.random.choice(...)`): before torch 1.9 every DataLoader worker
    starts from the same NumPy state, so the workers draw the same "random" samples."""
    fn = _method(cls, "__getitem__")
    return fn is not None and any((tree.qualname(c.func) or "").startswith("numpy.random.")
                                  for c in tree.calls_within(fn))
