"""What a value is, for the PF2 rules: on the host already (numbers, numpy, CPU tensors, a
torch factory's tensor made without `device=`), on the device (or possibly: a value a call
computed from device tensors), and the ops whose output size depends on the data, which
make the host wait for the values (`.nonzero()`, `torch.unique`, one-argument `torch.where`)."""

from __future__ import annotations

import re

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg, literal_value
from perflint.analysis.vocab import Kind, SIZE_FACTORIES, _DTYPE_NAMES


DATA_SIZED = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}


def cpu_factory(facts: Facts, expr: cst.BaseExpression) -> bool:
    """`torch.randn(1).clip(-2, 2)`: a tensor a torch factory made with no `device=` (so on the
    CPU, unless the file changes the default device), through methods of it."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not facts.tree.qualname(expr.func):
        expr = expr.func.value
    if not isinstance(expr, cst.Call):
        return False
    q = facts.tree.qualname(expr.func) or ""
    if not (q.startswith("torch.") and q.count(".") == 1 and q[6:] in SIZE_FACTORIES) or get_arg(expr, "device") is not None:
        return False
    return not facts.tree.calls_to("torch.set_default_device") and not facts.tree.calls_to("torch.set_default_tensor_type")


def copied_to_host(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A name bound (once) to a chain of tensor methods that went through `.cpu()` with no
    copy back after it (`correct = pred.eq(y).cpu().sum()`): a CPU tensor, so reading it later
    costs nothing; the wait was that earlier `.cpu()`."""
    if not isinstance(expr, cst.Name):
        return False
    bs = facts.bindings.lookup(expr.value, expr)
    if len(bs) != 1 or bs[0].how != "expr":
        return False
    node = bs[0].node
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not facts.tree.qualname(node.func):
        name = call_name(node)
        if name in ("to", "cuda"):
            return False
        if name == "cpu" and not node.args:
            return True
        node = node.func.value
    return False


def of_data_sized(facts: Facts, expr: cst.BaseExpression) -> bool:
    """An element of what `.nonzero()`, `torch.unique(...)`, one-argument `torch.where` …
    returned (`idx = mask.nonzero(); idx[k].item()`): sizing that output already waited for
    the values, so reading one costs nothing more."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) != 1 or bs[0].how != "expr":
            return False
        expr = bs[0].node
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    if not isinstance(expr, cst.Call):
        return False
    name = call_name(expr)
    return name in DATA_SIZED or (name == "where" and len(expr.args) == 1
                                  and (facts.tree.qualname(expr.func) or "").startswith("torch."))


def maybe_on_device(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A device tensor, or a value of unknown kind that a call computed from one."""
    return device_tensor(facts, expr) or (not facts.kinds.of(expr) and computed_from_device(facts, expr, 0))


def sized_by_data(facts: Facts, call: cst.Call) -> bool:
    """An op whose output size depends on the values (the host waits for them to size it):
    `.nonzero()`, `torch.unique(x)`, `torch.where(cond)` with one argument …, of a value that
    may be on the device."""
    name = call_name(call)
    q = facts.tree.qualname(call.func) or ""
    if q.startswith("torch.") and (name in DATA_SIZED or (name == "where" and len(call.args) == 1)):
        return bool(call.args) and maybe_on_device(facts, call.args[0].value)
    if isinstance(call.func, cst.Attribute) and name in DATA_SIZED and not q.startswith(("numpy.", "np.")):
        return maybe_on_device(facts, call.func.value)
    return False


def host_value(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A value known to live on the host already: numbers, numpy, CPU tensors."""
    ks = facts.kinds.of(expr)
    if not ks:
        return False
    if ks & {Kind.NUMBER, Kind.NUMPY, Kind.INT} and not ks & {Kind.TENSOR, Kind.LOSS, Kind.OUTPUT}:
        return True
    if Kind.CPU_TENSOR in ks and Kind.DEVICE_TENSOR not in ks:
        return True
    if Kind.BATCH in ks and Kind.DEVICE_TENSOR not in ks and not ks & {Kind.LOSS, Kind.OUTPUT}:
        return True  # straight from the DataLoader: still on the CPU
    return False


def device_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A tensor that is (or may be) on the accelerator: losses, model outputs, torch results
    that are not known CPU tensors, batches after `.to(device)`."""
    ks = facts.kinds.of(expr)
    if host_value(facts, expr):
        return False
    return bool(ks & {Kind.LOSS, Kind.OUTPUT, Kind.DEVICE_TENSOR}) or (Kind.TENSOR in ks and Kind.CPU_TENSOR not in ks)


def computed_from_device(facts: Facts, expr: cst.BaseExpression, depth: int) -> bool:
    """`expr` (a name, or an element or attribute of one) was returned by a call given a
    device tensor."""
    while isinstance(expr, (cst.Subscript, cst.Attribute)):
        expr = expr.value
    if not isinstance(expr, cst.Name) or depth > 3:
        return False
    bindings = facts.bindings.lookup(expr.value, expr)
    if not bindings:
        return False
    for b in bindings:
        if b.how not in ("expr", "unpack") or not isinstance(b.node, cst.Call):
            return False
        if not any(device_tensor(facts, a.value) or unpacked_device(facts, a.value)
                   or computed_from_device(facts, a.value, depth + 1) for a in b.node.args):
            return False
    return True


def unpacked_device(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A name bound by unpacking a tuple written out, whose element is a device tensor:
    `x, lengths = batch["x"].cuda(), batch["len"].cuda()`."""
    if not isinstance(expr, cst.Name):
        return False
    bs = facts.bindings.lookup(expr.value, expr)
    if len(bs) != 1 or bs[0].how != "unpack" or len(bs[0].index) != 1 or not isinstance(bs[0].node, (cst.Tuple, cst.List)):
        return False
    elements = bs[0].node.elements
    i = bs[0].index[0]
    return 0 <= i < len(elements) and not isinstance(elements[i], cst.StarredElement) \
        and device_tensor(facts, elements[i].value)


_HOST_ROOTS = ("numpy.", "sklearn.", "scipy.", "PIL.", "cv2.", "imageio.", "soundfile.", "matplotlib.", "skimage.",
               "librosa.", "pandas.", "nibabel.", "SimpleITK.", "json.", "pickle.", "csv.")


def blocking_host_copy(facts: Facts, call: cst.Call) -> bool:
    """`x.cuda()` / `x.to(device)` without `non_blocking=True` of a tensor a torch factory made
    on the host (`torch.tensor(...)`, `torch.from_numpy(...)`): not pinned, so the copy waits
    for everything queued before it.  Not a loader's batch (`torch.LongTensor(labels)`): that
    copy is PF105's to make asynchronous."""
    if _legacy_cuda_copy(facts, call):
        return True
    name = call_name(call)
    if name not in ("to", "cuda") or not isinstance(call.func, cst.Attribute) or get_arg(call, "non_blocking") \
            or any(a.star for a in call.args):
        return False
    if name == "to":
        if not call.args or len(call.args) > 1 or not _may_be_gpu(facts, call.args[0].value):
            return False
    elif call.args:
        return False
    recv = call.func.value
    while isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute) and call_name(recv) in ("fill_", "zero_"):
        recv = recv.func.value  # `torch.LongTensor(b, n).fill_(0)`: still the host tensor
    kinds = facts.kinds.of(recv)
    if Kind.BATCH in kinds:
        return False  # a loader's batch: PF105 asks to pin it and copy without blocking
    if _from_factory(facts, recv, 0):
        return False  # `torch.randn(n).to(device)`: PF409 makes it on the device, with no copy
    if _tokenized(facts, recv, 0):
        return True  # `tokenizer(texts, return_tensors="pt").to(device)`: every tensor copied, blocking
    if isinstance(recv, cst.Call) and (facts.tree.qualname(recv.func) or "") in _HOST_TENSOR_TYPES:
        return True
    return Kind.CPU_TENSOR in kinds


def _may_be_gpu(facts: Facts, device: cst.BaseExpression) -> bool:
    q = facts.tree.qualname(device) or ""
    if q.startswith("torch.") and q.rsplit(".", 1)[-1] in _DTYPE_NAMES:
        return False  # `x.to(torch.float16)`: a cast, not a copy
    dev = facts.devices.device_kinds(device)
    return bool(dev) and not dev <= {Kind.DEVICE_CPU} and bool(dev & {Kind.DEVICE_CUDA, Kind.DEVICE_UNKNOWN, "device"})


def blocking_batch_copy(facts: Facts, call: cst.Call, batches: bool = True, made: bool = True) -> bool:
    """`x.to(device)` / `x.cuda()` / `x.cuda(gpu)` with no `non_blocking`, of a loader's batch
    (with `batches`) or of a tensor a torch factory made on the host (with `made`:
    `torch.rand(n, 1).to(device)`): the two copies `blocking_host_copy` leaves to PF105 and
    PF409.  Blocking, the copy waits for everything queued before it, pinned or not (`copy_`
    synchronizes the stream when `non_blocking` is false)."""
    name = call_name(call)
    if name not in ("to", "cuda") or not isinstance(call.func, cst.Attribute) or get_arg(call, "non_blocking") \
            or any(a.star for a in call.args):
        return False
    positional = [a for a in call.args if a.keyword is None]
    if name == "to":
        device = positional[0].value if len(positional) == 1 else get_arg(call, "device")
        device = device.value if isinstance(device, cst.Arg) else device
        if device is None or len(positional) > 1 or not _may_be_gpu(facts, device):
            return False
    elif len(positional) > 1:
        return False  # `x.cuda(0, True)`: non_blocking by position
    recv = call.func.value
    if batches and (Kind.BATCH in facts.kinds.of(recv) or _named_loader_element(facts, recv)):
        return True
    return made and _from_factory(facts, recv, 0)


# A loader by its name (`train_loader`, `val_dataloader`, `dl`), for a loop over one whose
# construction the analysis cannot see (`_, train_loader = self._get_data(flag="TRAIN")`).
_LOADER_NAME = re.compile(r"(^|_)(data)?loader$|(^|_)dl$", re.I)


def _fetched_from(call: cst.Call) -> cst.BaseExpression | None:
    """What `call` takes the next batch from: `next(loader)`, `loader.next_batch()`."""
    if call_name(call) == "next" and isinstance(call.func, cst.Name) and call.args:
        return call.args[0].value
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("next_batch", "get_batch", "next"):
        return call.func.value
    return None


def _iterated(facts: Facts, it: cst.BaseExpression) -> cst.BaseExpression:
    """What a loop iterates, through `enumerate`/`tqdm`/`iter` and names bound once to them
    (`with tqdm(data_loader) as bar: for x, y in bar:`)."""
    for _ in range(4):
        if isinstance(it, cst.Name):
            bs = facts.bindings.lookup(it.value, it)
            if len(bs) != 1 or bs[0].how not in ("expr", "with") or not isinstance(bs[0].node, cst.Call) \
                    or call_name(bs[0].node) not in ("enumerate", "tqdm", "iter"):
                return it  # the loader itself (`loader = GraphSAINTRandomWalkSampler(...)`), by its name
            it = bs[0].node
        if not (isinstance(it, cst.Call) and call_name(it) in ("enumerate", "tqdm", "iter") and it.args):
            return it
        it = it.args[0].value
    return it


def _named_loader_element(facts: Facts, recv: cst.BaseExpression) -> bool:
    """`recv` (through tensor methods: `batch_x.float()`) is what a `for` loop takes from an
    iterable named like a loader, directly or through `enumerate`/`tqdm`/`iter`, or what is
    fetched from one (`next(train_dl)`, llm.c's `val_loader.next_batch()`)."""
    while isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute) and not recv.args:
        recv = recv.func.value
    if not isinstance(recv, cst.Name):
        return False
    bs = facts.bindings.lookup(recv.value, recv)
    if not bs:
        return False
    for b in bs:
        if b.how in ("expr", "unpack") and isinstance(b.node, cst.Call):
            it = _fetched_from(b.node)  # `x, y = val_loader.next_batch()`, `batch = next(train_dl)`
            if it is None:
                return False
        elif b.how in ("iter", "iter_unpack") and isinstance(b.node, cst.BaseExpression):
            it = _iterated(facts, b.node)
        else:
            return False
        name = it.attr.value if isinstance(it, cst.Attribute) else it.value if isinstance(it, cst.Name) else ""
        if not _LOADER_NAME.search(name):
            return False
    return True


# The legacy tensor types of the CPU (`torch.cuda.LongTensor` is the GPU's).
_HOST_TENSOR_TYPES = frozenset(f"torch.{t}Tensor" for t in ("Float", "Double", "Half", "BFloat16", "Byte", "Char",
                                                            "Short", "Int", "Long", "Bool"))
_CUDA_TENSOR_TYPES = frozenset("torch.cuda." + t[len("torch."):] for t in _HOST_TENSOR_TYPES)


def _legacy_cuda_copy(facts: Facts, call: cst.Call) -> bool:
    """A copy of host data to the GPU through a legacy CUDA tensor type, which blocks:
    `Tensor(np.random.normal(0, 1, shape))` (a numpy array) or `imgs.type(Tensor)` (a loader's
    batch, a CPU tensor), where `Tensor` is `torch.cuda.FloatTensor` or a name bound once to
    `torch.cuda.FloatTensor if cuda else torch.FloatTensor` (PyTorch-GAN's scripts: on the CPU
    arm nothing runs on a GPU at all).  No rule reports these copies."""
    if isinstance(call.func, cst.Attribute) and call_name(call) == "type":
        if len(call.args) != 1 or call.args[0].keyword is not None or not _cuda_tensor_type(facts, call.args[0].value):
            return False
        kinds = facts.kinds.of(call.func.value)
        return bool(kinds & {Kind.BATCH, Kind.CPU_TENSOR, Kind.NUMPY}) and Kind.DEVICE_TENSOR not in kinds
    if not _cuda_tensor_type(facts, call.func) or len(call.args) != 1 or call.args[0].keyword is not None:
        return False
    arg = call.args[0].value
    return Kind.NUMPY in facts.kinds.of(arg) or (
        isinstance(arg, cst.Call) and (facts.tree.qualname(arg.func) or "").startswith("numpy."))


def _cuda_tensor_type(facts: Facts, expr: cst.BaseExpression) -> bool:
    """`expr` names a legacy CUDA tensor type, itself or through a name bound once to one, or
    to a conditional choice between it and a CPU type."""
    if (facts.tree.qualname(expr) or "") in _CUDA_TENSOR_TYPES:
        return True
    if not isinstance(expr, cst.Name):
        return False
    bindings = facts.bindings.lookup(expr.value, expr)
    if len(bindings) != 1 or bindings[0].how != "expr":
        return False
    made = bindings[0].node
    arms = [made.body, made.orelse] if isinstance(made, cst.IfExp) else [made]
    types = [facts.tree.qualname(a) or "" for a in arms]
    return all(t in _CUDA_TENSOR_TYPES or t in _HOST_TENSOR_TYPES or t == "torch.Tensor" for t in types) \
        and any(t in _CUDA_TENSOR_TYPES for t in types)


def collected_for_host(facts: Facts, node: cst.CSTNode) -> bool:
    """`preds.append(out.cpu().numpy())` with the list joined by numpy after the loop
    (`np.concatenate(preds)`): as written, the iteration waits for this copy anyway (one copy
    after the loop would not, which PF202 is for)."""
    outer = node
    while True:
        parent = facts.tree.parent(outer)
        if isinstance(parent, cst.Attribute) and parent.value is outer and isinstance(facts.tree.parent(parent), cst.Call):
            outer = facts.tree.parent(parent)
            continue
        break
    arg = facts.tree.parent(outer)
    call = facts.tree.parent(arg) if isinstance(arg, cst.Arg) else None
    return isinstance(call, cst.Call) and call_name(call) == "append" and isinstance(call.func, cst.Attribute) \
        and isinstance(call.func.value, cst.Name) and _list_goes_to_host(facts, call.func.value)


def _tokenized(facts: Facts, expr: cst.BaseExpression, depth: int) -> bool:
    """`tokenizer(texts, padding=..., return_tensors="pt")`, a name bound only to one, or
    one of its fields (`.input_ids`): a tokenizer's (or processor's) output, tensors it made
    on the host."""
    if isinstance(expr, cst.Call):
        arg = get_arg(expr, "return_tensors")
        return arg is not None and literal_value(arg.value) == "pt"
    if isinstance(expr, cst.Name) and depth < 2:
        bs = facts.bindings.lookup(expr.value, expr)
        return bool(bs) and all(b.how == "expr" and b.node is not expr and _tokenized(facts, b.node, depth + 1)
                                for b in bs)
    if isinstance(expr, cst.Attribute) and expr.attr.value in _TOKENIZER_FIELDS:
        return _tokenized(facts, expr.value, depth)  # `text_inputs.input_ids`
    return False


# The tensors a tokenizer's output holds.
_TOKENIZER_FIELDS = frozenset({"input_ids", "attention_mask", "token_type_ids"})


def _from_factory(facts: Facts, expr: cst.BaseExpression, depth: int) -> bool:
    """`torch.ones(n).long()`, or a name bound to one (`labels = torch.ones(n).long();
    labels = labels.unsqueeze(1)`): a tensor a torch factory made without `device=`."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not facts.tree.qualname(expr.func):
        expr = expr.func.value
    if isinstance(expr, cst.Call):
        return cpu_factory(facts, expr)
    if isinstance(expr, cst.Name) and depth < 3:
        return any(b.how == "expr" and isinstance(b.node, cst.BaseExpression) and b.node is not expr
                   and _from_factory(facts, b.node, depth + 1) for b in facts.bindings.lookup(expr.value, expr))
    return False


def _list_goes_to_host(facts: Facts, name: cst.Name) -> bool:
    """The list `name` (bound to `[]`) is later handed to a numpy / scikit-learn / SciPy
    call (`np.concatenate(preds)`, `accuracy_score(trues, preds)`) in the same function."""
    fn = facts.tree.enclosing_function(name) or facts.module
    bindings = facts.bindings.lookup(name.value, name)
    if not bindings:
        return False
    for b in bindings:
        value = b.value()  # (`trues, preds = [], []` too)
        if not (isinstance(value, cst.List) and not value.elements):
            return False
    for use in list(facts.tree.later_uses(name.value, fn, facts.tree.order.get(name, 0)))[:20]:
        parent = facts.tree.parent(use)
        call = facts.tree.parent(parent) if isinstance(parent, cst.Arg) else None
        if isinstance(call, cst.Call) and (facts.tree.qualname(call.func) or "").startswith(_HOST_ROOTS):
            return True
    return False


def fetch_copies_blocking(facts: Facts, region: cst.CSTNode) -> bool:
    """`for batch in it:` over a torchtext iterator built with `device=` (`BucketIterator(...,
    device=device)`, or one of `BucketIterator.splits(..., device=device)`): torchtext makes
    each batch with `torch.tensor(data, device=device)`, a blocking copy from pageable memory."""
    if not isinstance(region, cst.For):
        return False
    it = region.iter
    while isinstance(it, cst.Call) and call_name(it) in ("enumerate", "tqdm", "iter") and it.args:
        it = it.args[0].value
    return _torchtext_iterator(facts, it, 0)


def _torchtext_iterator(facts: Facts, name: cst.BaseExpression, depth: int) -> bool:
    """`name` is bound to a torchtext iterator made with `device=`; for a parameter, every
    call of its function in the file passes one (`train(model, train_iterator, ...)`)."""
    if not isinstance(name, cst.Name) or depth > 2:
        return False
    bindings = facts.bindings.lookup(name.value, name)
    if not bindings:
        return False
    for b in bindings:
        value = b.node
        if b.how == "param":
            if not _passed_iterators(facts, b, name.value, depth):
                return False
        elif not (isinstance(value, cst.Call) and (facts.tree.qualname(value.func) or "").startswith("torchtext.")
                  and call_name(value) in _TORCHTEXT_ITERATORS and get_arg(value, "device") is not None):
            return False
    return True


def _passed_iterators(facts: Facts, binding, pname: str, depth: int) -> bool:
    fn = binding.site  # a parameter's binding site is its function
    if not isinstance(fn, cst.FunctionDef):
        return False
    params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
    if pname not in params:
        return False
    index = params.index(pname)
    calls = facts.tree.calls_named(fn.name.value)
    if not calls:
        return False
    for c in calls:
        arg = get_arg(c, pname, index)
        if arg is None or not _torchtext_iterator(facts, arg.value, depth + 1):
            return False
    return True


_TORCHTEXT_ITERATORS = {"BucketIterator", "BPTTIterator", "Iterator", "splits"}


_HOST_CALLS = {"imsave", "imwrite", "savefig", "save_image", "write", "writerow", "dump", "fromarray", "save", "savez",
               "imshow", "plot", "draw", "rectangle", "putText"}


_NOT_HOST_WORK = frozenset({"list", "tuple", "set", "dict", "len", "id", "type", "isinstance", "iter", "next"})


def _host_function(call: cst.Call, qualname: str) -> bool:
    """The call is a function other than torch's: a plain name (`accuracy(...)`) or one
    reached through an import (`metrics.accuracy(...)`), not a method of an object
    (`losses.append(...)` collects the copy; `collected_for_host` judges that) nor a builtin
    that only holds it."""
    if qualname.startswith("torch"):
        return False
    if isinstance(call.func, cst.Name):
        return call.func.value not in _NOT_HOST_WORK
    return bool(qualname)


def consumed_on_host(facts: Facts, value: cst.CSTNode) -> bool:
    """`value` (a host copy, or a name bound to one) is used by host-only work where it
    stands: an argument of a numpy / SciPy / file / drawing call, or of a function that takes a
    numpy copy; the iterable of a Python loop; a numpy method's receiver."""
    cur = value
    for a in facts.tree.ancestors(value):
        if isinstance(a, cst.Arg):
            call = facts.tree.parent(a)
            if isinstance(call, cst.Call):
                q = facts.tree.qualname(call.func) or ""
                if q.startswith(_HOST_ROOTS) or (call_name(call) or "") in _HOST_CALLS:
                    return True
                if a.value is value and isinstance(value, cst.Call) and call_name(value) == "numpy" \
                        and _host_function(call, q):
                    return True  # `accuracy(out.cpu().numpy(), ...)`: the callee works on a numpy array
            return False
        if isinstance(a, cst.For) and cur is a.iter:
            return True  # a Python loop over the host values
        if isinstance(a, cst.Attribute) and a.value is cur and isinstance(facts.tree.parent(a), cst.Call):
            q = facts.tree.qualname(a) or ""
            if a.attr.value in ("astype", "transpose", "squeeze", "reshape") and not q.startswith("torch."):
                return Kind.NUMPY in facts.kinds.of(cur) or isinstance(value, cst.Call) and call_name(value) == "numpy"
            return False
        if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return False
        cur = a
    return False


_GATHERS = frozenset({"torch.distributed.all_gather", "torch.distributed.all_gather_into_tensor"})


def gathered_size(facts: Facts, call: cst.Call) -> bool:
    """`size_list = [int(s.item()) for s in size_list]` after `dist.all_gather(size_list, n)`,
    then `max(size_list)`: the sizes every rank sends in a gather of Python objects (the
    pickle-based `all_gather` helper), which the host needs to allocate the receive buffers
    and cut the payloads; no variant of that helper keeps them on the device."""
    recv = call.func.value if isinstance(call.func, cst.Attribute) else None
    arg = facts.tree.parent(call)
    wrap = facts.tree.parent(arg) if isinstance(arg, cst.Arg) else None
    comp = facts.tree.parent(wrap) if isinstance(wrap, cst.Call) and call_name(wrap) == "int" else None
    assign = facts.tree.parent(comp) if isinstance(comp, cst.ListComp) and comp.elt is wrap else None
    if not isinstance(recv, cst.Name) or not isinstance(assign, cst.Assign) or len(assign.targets) != 1 \
            or not isinstance(assign.targets[0].target, cst.Name):
        return False
    sizes = assign.targets[0].target.value
    scope = facts.tree.enclosing_function(call) or facts.module
    calls = facts.tree.calls_within(scope)
    if not any(call_name(c) == "max" and c.args and isinstance(c.args[0].value, cst.Name)
               and c.args[0].value.value == sizes for c in calls):
        return False
    for b in facts.bindings.lookup(recv.value, recv):
        if b.how != "iter" or not isinstance(b.node, cst.Name):
            continue
        for c in calls:
            if facts.tree.qualname(c.func) in _GATHERS and c.args and isinstance(c.args[0].value, cst.Name) \
                    and c.args[0].value.value == b.node.value:
                return True
    return False
