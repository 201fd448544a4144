"""PF102 dataloader-no-pin-memory: DataLoader without pin_memory in CUDA code."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, make_kwarg
from perflint.analysis import Facts, call_name, has_splat
from perflint.analysis.crossmodule import literal_or_default
from perflint.analysis.syntax import NOT_LITERAL, get_arg, literal_value
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import local_function, param_for, trains_in
from perflint.rules.data_loading.pf101_dataloader_no_workers import in_memory_tensors, tokenised_text
from perflint.rules.data_loading.helpers import (
    function_node,
    index_loader,
    loader_comments,
    collate_origin,
    dataloaders,
    dataset_origin,
    graph_collator,
    loader_options,
    facts_literal_values,
    token_collator,
    worker_count,
)
from perflint.rules.data_loading.reads import read_cheaply, read_sites


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
    parent = facts.tree.parent(call)
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
        return False
    target = parent.targets[0].target
    scope = facts.tree.enclosing_function(call) or facts.module
    sites = read_sites(facts, target.value, scope, facts.tree.order.get(target, 0), 0)
    if not sites:
        return False
    for site in _flat_sites(sites):
        loop = site[1]
        if not isinstance(loop, cst.For) or facts.loops.loop_kind(loop) == "train" or trains_in(facts, loop):
            return False
        for c in facts.tree.calls_within(loop.body):
            name = (call_name(c) or "").lower()
            if name in ("cuda", "to", "pin_memory") or "device" in name or "cuda" in name:
                return False
    return True


_COMMENTED_PIN = re.compile(r"\bpin_memory\s*=")


def _pinning_commented_out(facts: Facts, call: cst.Call) -> bool:
    """A comment among the loader's arguments, or after its statement, holds a `pin_memory=`
    argument (`# pin_memory=True,`): the author turned pinning off on purpose."""
    return any(_COMMENTED_PIN.search(c) for c in loader_comments(facts, call))


class DataLoaderNoPinMemory(Rule):
    """
    ## What it does
    Flags `DataLoader(...)` calls without `pin_memory` in files that move data to CUDA. For a
    loader handed to `accelerator.prepare(...)`, Accelerate makes the copy (with
    `non_blocking=False` unless told otherwise), so the message asks for its
    `DataLoaderConfiguration(non_blocking=True)` instead of a `non_blocking` argument.

    ## Why is this bad?
    Copies from pageable host memory to the GPU are staged and synchronous: the CUDA runtime
    synchronises before a pageable copy starts, so `non_blocking=True` cannot overlap it
    with compute. Batches in pinned (page-locked) memory copy by DMA and can overlap with
    the previous step's kernels. On an H100 80GB (torch 2.11, `python
    benchmarks/rule_effects.py`; results in `benchmarks/results/h100/rule_effects/`), four
    bf16 conv-net steps each copying a 37 MiB batch first took 96.0 ms from pageable memory
    with blocking copies and 81.3 ms from pinned memory with `non_blocking=True` (1.18×);
    the gain depends on batch size and step time. It holds without worker processes too,
    where the loader pins each batch in the training process: on an H200 (torch 2.11,
    `python benchmarks/pin_zero_workers.py --steps 50 --repeats 5`, results in
    `benchmarks/results/h200/pin_zero_workers/`), a `num_workers=0` loader of 12 MiB batches
    into a small bf16 conv net took 3.06 ms a step pageable and blocking, 2.55 ms pinned with
    a blocking copy (Accelerate's default, 1.20×), 2.13 ms pinned with `non_blocking=True`
    (1.44×); with 24 MiB batches 1.72× and 1.99×.

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
    (`torch.randn(n, d, device=device)`) or by a CUDA tensor type (`torch.cuda.FloatTensor(x)`,
    also through `T = torch.cuda.FloatTensor if cuda else torch.FloatTensor`): there is no
    host-to-device copy to speed up. Not
    reported either for a loader read once or rarely (one batch, a final test after
    training — also one written in the training function after its epoch or step loop, and
    in no loop that holds training: `for split in ("dev", "test"):` after `for step in
    range(max_steps):` —, a sample every N steps, a function every caller of which in the project is
    code that does not train, a loader handed to an object that lives only inside a function
    run once: `evaluator = MscEval(net, dl)`, `evaluator.evaluate()`, a one-off pass of a
    script that trains nothing; see PF101), nor for the loader of one arm of an `if` on
    the number of workers whose other arm pins (`if num_workers > 0: DataLoader(...,
    pin_memory=True) else: DataLoader(...)`: the author pins only where workers load), nor
    for a loader whose arguments hold a commented-out `pin_memory` (`# pin_memory=True,`:
    the author turned it off), nor when the `collate_fn` batches DGL graphs, which
    `pin_memory` cannot pin, nor when it builds (itself or through the functions it calls,
    in this file or across the project) a batch object the DataLoader cannot pin: an instance
    of a class that copies itself with `to`/`cuda` and has no `pin_memory()` method (DETR's
    `NestedTensor`). Nor for a loader with no worker processes whose float32 batches are not
    known to exceed 4 MiB: without workers the training thread pins each batch itself (one
    more host copy), and the gains measured above start at 12 MiB. The size is known for
    torchvision's fixed-size image datasets (MNIST and its variants, CIFAR10/100, SVHN, STL10,
    CelebA) and for an `ImageFolder` whose transform fixes it (a crop, or a two-sided resize;
    counted with four channels), with the batch size and any resize or crop a literal, a name
    bound to literals or an option's default: 2048 MNIST digits (6 MiB) or 64 CIFAR images
    resized to 224 (37 MiB) are reported. When loading is the cost (files decoded in the
    training process), PF101 reports the loader, and its fix adds workers and
    `pin_memory=True`. Strict reviews counted 2 right of 42 such findings (wrong: MNIST-,
    OGB- and tutorial-sized batches, token ids, cached features, DALLE-pytorch's images;
    right: StyleGAN2's 12 MiB images, now silent for want of a known size, and SimCLR's
    STL10 notebook, whose 27 MiB batches are known and still reported). With worker
    processes, a loader whose batches are known (the same way) to be at most 4 MiB is not
    reported either: CIFAR at batch 128 is 1.5 MiB, whose pageable copy takes a fraction of
    a millisecond (estimated from PCIe rates; not measured) against a step of several
    milliseconds. Strict reviews had split on that case (pytorch-cifar's loaders right,
    pytorch-cifar100's false).
    Nor, in a file that tokenises text (a tokenizer, transformers), for a loader of the
    tokenised features as tensors: a `TensorDataset`, what a function of the file that builds
    one returns (`load_and_cache_examples`, also through transformers'
    `squad_convert_examples_to_features(..., return_dataset="pt")`), or the parameter every
    caller in the file hands such a dataset (`train(args, train_dataset, ...)`). A batch is
    a few rows of token ids, masks and labels, tens to hundreds of kilobytes; strict reviews
    counted 5 of 5 such findings false (the copied Hugging Face example scripts in LoRA).

    **Off by default** (`extend-select = ["PF102"]` turns it on). On the three sets of public
    repositories reviewed last (AJ, AK, AL: 43 repositories), each sampled before any change
    it prompted and with the earlier narrowings in, 4 of 30 findings were right (0.13); over
    all reviewed sheets 18 right of 49 still reported (0.37). Pinning pays when the copy is a
    real share of the step: the right findings were image batches of 12 MiB and more
    (Wav2Lip, DeepLabV3+, RetinaNet, latent diffusion, SimCLR at 224 pixels); the false ones
    were small or cached batches, loaders of points, graphs or latents, evaluation and
    metric loaders, and loops that wait on the GPU every step anyway. Requiring a batch size
    known to exceed 4 MiB would keep 1 of the 18 right findings: sizes are rarely stated in
    the code.

    ## References
    - PyTorch tutorial "A guide on good usage of non_blocking and pin_memory() in PyTorch"
    - CUDA Runtime API, "API synchronization behavior"
    """

    code = "PF102"
    name = "dataloader-no-pin-memory"
    summary = "DataLoader without pin_memory in CUDA code"
    fix_class = FixClass.SAFE_OR_UNSAFE
    tokens = (b"DataLoader",)
    default = False  # held-out whole-repository reviews: 4 right of 30 at sampling (see "Applies to")
    # Shares a fix pass with: the worker options PF101 and PF103 add to the same loader are not
    # read by this fix, nor `pin_memory` by theirs.
    fix_commutes_with = frozenset({"PF101", "PF103"})

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.devices.is_cuda_code:
            return
        for call in dataloaders(facts):
            opts = loader_options(facts, call)
            if opts is None or "pin_memory" in opts or "pin_memory_device" in opts:
                continue
            collate = collate_origin(facts, call, opts.get("collate_fn"))
            dataset = dataset_origin(facts, opts.get("dataset"))
            if collate == "device" or dataset == "device":
                continue
            if read_cheaply(facts, call) or token_collator(facts, opts.get("collate_fn")) or index_loader(facts, call):
                continue  # one batch, a final test, a sample every N steps; token-id or index batches
            if _batches_never_copied(facts, call):
                continue  # an evaluation loop that hands the batch on as is (to numpy, per slice)
            if _unpinned_branch(facts, call):
                continue  # `if num_workers > 0: DataLoader(..., pin_memory=True) else: DataLoader(...)`
            if graph_collator(facts, opts.get("collate_fn")):
                continue  # the batch is a DGL graph: pinning leaves it (and its features) pageable
            if _pinning_commented_out(facts, call):
                continue  # `# pin_memory=True,` among the arguments: the author turned it off
            if _unpinnable_batch(facts, opts.get("collate_fn")):
                continue  # the collate_fn may build a batch object `pin_memory` leaves pageable
            if _small_batches_in_training_thread(facts, call, opts):
                continue  # MNIST/CIFAR-sized batches pinned by the training thread itself: nothing to gain
            if tokenised_text(facts, opts) and _holds_token_tensors(facts, opts.get("dataset"), 0):
                continue  # token ids: a batch is a few rows of integers, copied in microseconds either way
            new = add_arg(call, make_kwarg("pin_memory", "True"))
            plan_msg = "Add `pin_memory=True`"
            if collate == "cpu" and dataset == "cpu" and not has_splat(call):
                fix = self.safe(plan_msg, {call: new})
            else:
                fix = self.unsafe(plan_msg, {call: new})
            if _prepared_by_accelerate(facts, call):
                message = ("DataLoader without `pin_memory` in CUDA code: Accelerate copies its batches to the GPU "
                           "from pageable memory, blocking; pass `pin_memory=True` and build the `Accelerator` with "
                           "`dataloader_config=DataLoaderConfiguration(non_blocking=True)`")
            else:
                message = ("DataLoader without `pin_memory` in CUDA code: batches are copied to the GPU from "
                           "pageable memory, which blocks; pass `pin_memory=True` and copy with `non_blocking=True`")
            yield Violation(call.func, message, fix)


def _holds_token_tensors(facts: Facts, expr: cst.BaseExpression | None, depth: int) -> bool:
    """In a file that tokenises (`tokenised_text`), the dataset is the tokenised features as
    tensors: a `TensorDataset`, what a function of this file that builds one returns
    (`load_and_cache_examples(...)`, also unpacked), or a parameter every call of its function
    in this file passes such a dataset (`train(args, train_dataset, model, tokenizer)`).  A
    batch is then a few rows of token ids, masks and labels, tens or hundreds of kilobytes."""
    if expr is None or depth > 3:
        return False
    if in_memory_tensors(facts, expr):
        return True
    if isinstance(expr, cst.Call):
        fn = local_function(facts, expr.func)
        return isinstance(fn, cst.FunctionDef) and any(_makes_token_dataset(facts, c) for c in facts.tree.calls_within(fn))
    if not isinstance(expr, cst.Name):
        return False
    bs = facts.bindings.lookup(expr.value, expr)
    if not bs:
        return False
    for b in bs:
        if b.how in ("expr", "unpack") and isinstance(b.node, cst.Call):
            if not _holds_token_tensors(facts, b.node, depth + 1):
                return False
        elif b.how == "param" and isinstance(b.site, cst.FunctionDef):
            if not _every_caller_passes_tokens(facts, b.site, expr.value, depth):
                return False
        else:
            return False
    return True


def _makes_token_dataset(facts: Facts, call: cst.Call) -> bool:
    """`TensorDataset(...)`, or a transformers feature converter asked for one
    (`squad_convert_examples_to_features(..., return_dataset="pt")`)."""
    q = facts.tree.qualname(call.func) or ""
    if q == "torch.utils.data.TensorDataset":
        return True
    arg = get_arg(call, "return_dataset")
    return q.startswith("transformers.") and arg is not None and literal_value(arg.value) == "pt"


def _every_caller_passes_tokens(facts: Facts, fn: cst.FunctionDef, param: str, depth: int) -> bool:
    calls = [c for c in facts.tree.calls() if isinstance(c.func, cst.Name) and c.func.value == fn.name.value]
    if not calls:
        return False
    for c in calls:
        arg = next((a for a in c.args if not a.star and param_for(fn, c, a) == param), None)
        if arg is None or not _holds_token_tensors(facts, arg.value, depth + 1):
            return False
    return True


def _unpinnable_batch(facts: Facts, collate_fn: cst.BaseExpression | None) -> bool:
    """The collate_fn builds a batch container that the DataLoader cannot pin: an instance of
    a class that copies itself to a device (`to`/`cuda`) and has no `pin_memory()` method
    (DETR's `NestedTensor`). `pin_memory=True` leaves it in pageable memory. A collate
    function of this file counts when it, or a function of this file it calls, builds such a
    class of this file; one of another module when the project shows that it does."""
    if collate_fn is None:
        return False
    fn = function_node(facts, collate_fn)
    if isinstance(fn, (cst.FunctionDef, cst.Lambda)):
        return _builds_unpinnable_here(facts, fn, _unpinnable_classes(facts), 0)
    ref = facts.cross.project_ref(collate_fn)
    return ref is not None and not ref.startswith("#") and facts.project is not None \
        and facts.project.builds_unpinnable(ref)


def _builds_unpinnable_here(facts: Facts, fn: cst.CSTNode, classes: set[str], depth: int) -> bool:
    for c in facts.tree.calls_within(fn):
        if not isinstance(c.func, cst.Name):
            continue
        if c.func.value in classes:
            return True
        helpers = facts.tree.functions_by_name.get(c.func.value, ())
        if depth < 2 and len(helpers) == 1 and helpers[0] is not fn \
                and _builds_unpinnable_here(facts, helpers[0], classes, depth + 1):
            return True
    return False


def _unpinnable_classes(facts: Facts) -> set[str]:
    out = set()
    for cls in facts.tree.index[cst.ClassDef]:
        methods = {f.name.value for f in getattr(cls.body, "body", ()) if isinstance(f, cst.FunctionDef)}
        if "pin_memory" not in methods and methods & {"to", "cuda"}:
            out.add(cls.name.value)
    return out


def _prepared_by_accelerate(facts: Facts, call: cst.Call) -> bool:
    """The loader is handed to `accelerator.prepare(...)` of an Accelerator that copies batches
    itself, blocking (`host_sync.waits.blocking_accelerator`): the copy is Accelerate's, so
    `non_blocking` is its `DataLoaderConfiguration`'s, not an argument the script passes."""
    from perflint.rules.host_sync.waits import blocking_accelerator

    parent = facts.tree.parent(call)
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
        return False
    name = parent.targets[0].target.value
    scope = facts.tree.enclosing_function(call) or facts.module
    for c in facts.tree.calls_within(scope):
        f = c.func
        if isinstance(f, cst.Attribute) and f.attr.value in ("prepare", "prepare_data_loader") \
                and any(isinstance(a.value, cst.Name) and a.value.value == name and a.keyword is None for a in c.args) \
                and blocking_accelerator(facts, f.value):
            return True
    return False


def _unpinned_branch(facts: Facts, call: cst.Call) -> bool:
    """`call` sits in one arm of an `if` on the number of workers whose other arm builds a
    DataLoader with `pin_memory`: the author pins only where workers load the batches."""
    for node in facts.tree.ancestors(call):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            return False
        if not isinstance(node, cst.If) or "worker" not in facts.module.code_for_node(node.test):
            continue
        in_body = facts.tree.is_inside(call, node.body)
        other = node.orelse if in_body else node.body
        if other is None:
            return False
        return any(q is not call and "pin_memory" in (loader_options(facts, q) or {})
                   for q in dataloaders(facts) if facts.tree.is_inside(q, other))
    return False



# torchvision's small-image datasets: (channels, side) of a sample as it comes.
_SMALL_IMAGES = {f"torchvision.datasets.{name}": shape for name, shape in (
    ("MNIST", (1, 28)), ("FashionMNIST", (1, 28)), ("KMNIST", (1, 28)), ("EMNIST", (1, 28)), ("QMNIST", (1, 28)),
    ("CIFAR10", (3, 32)), ("CIFAR100", (3, 32)), ("SVHN", (3, 32)), ("STL10", (3, 96)), ("CelebA", (3, 218)))}
_RESIZES = ("Resize", "RandomResizedCrop", "CenterCrop", "RandomCrop", "Scale")
# Below this many bytes a batch's transfer takes a few hundred microseconds at most (estimated
# from PCIe rates; the H200 measurement of pinning without workers starts at 12 MiB), and with
# no workers the training thread would pin it itself: one more host copy for next to nothing.
_SMALL_BATCH = 4 << 20


def _small_batches_in_training_thread(facts: Facts, call: cst.Call, opts: dict) -> bool:
    """A loader with no worker processes whose float32 batches are not known to exceed
    `_SMALL_BATCH`: with no workers the training thread pins each batch itself, one more
    host copy, and the measured gain starts with batches of several MiB (12 MiB on an H200).
    The size is known for torchvision's fixed-size image datasets (MNIST, CIFAR, STL10, …) and
    for an `ImageFolder` whose transform fixes it, with the batch size and any resize or crop
    a literal, a name bound to literals or an option's default."""
    size = _batch_bytes(facts, opts)
    if worker_count(facts, call)[0] != "zero":
        return size is not None and size <= _SMALL_BATCH
    return size is None or size <= _SMALL_BATCH


def _batch_bytes(facts: Facts, opts: dict) -> int | None:
    """The bytes of one float32 batch of the loader's dataset, when known."""
    dataset = opts.get("dataset")
    if isinstance(dataset, cst.Name):
        bindings = facts.bindings.lookup(dataset.value, dataset)
        dataset = bindings[0].node if len(bindings) == 1 and bindings[0].how == "expr" else None
    if not isinstance(dataset, cst.Call):
        return None
    q = facts.tree.qualname(dataset.func) or ""
    batch = opts.get("batch_size")
    size = _largest(facts, batch) if batch is not None else 1
    if size is None or size < 1:
        return None
    if q == "torchvision.datasets.ImageFolder":
        side = _cropped_side(facts, get_arg(dataset, "transform", 1))
        return None if side is None else size * 4 * side * side * 4  # at most 4 channels (RGBA)
    shape = _SMALL_IMAGES.get(q)
    if shape is None:
        return None
    channels, side = shape
    transform = get_arg(dataset, "transform")
    for c in facts.tree.calls_within(transform.value) if transform is not None else ():
        if call_name(c) not in _RESIZES:
            continue
        arg = get_arg(c, "size", 0)
        v = _largest(facts, arg.value) if arg is not None else None
        if v is None:
            return None  # a size that is not known
        side = max(side, v) if call_name(c) != "Resize" else v
    return size * channels * side * side * 4


def _cropped_side(facts: Facts, transform: cst.Arg | None) -> int | None:
    """The longest side of the images a transform of files of any size hands out, when its last
    resize or crop fixes it: `Resize(128), CenterCrop(128)`, `RandomResizedCrop(224)`,
    `Resize((h, w))`.  `Resize(n)` alone scales the shorter side only: unknown."""
    if transform is None:
        return None
    side = None
    own = [transform.value] if isinstance(transform.value, cst.Call) else []  # `transform=RandomResizedCrop(224)`
    for c in [*own, *facts.tree.calls_within(transform.value)]:
        if call_name(c) not in _RESIZES:
            continue
        arg = get_arg(c, "size", 0)
        v = _largest(facts, arg.value) if arg is not None else None
        if v is None:
            return None
        pair = isinstance(arg.value, (cst.Tuple, cst.List))
        side = v if call_name(c) not in ("Resize", "Scale") or pair else None
    return side


def _param_values(facts: Facts, name: cst.Name) -> list[cst.BaseExpression] | None:
    """What a parameter may hold, when `name` is one (`def loaders(batch_size=256)`): its
    default and what every call of its function in this file passes for it; None when it
    is not a parameter, or a call hides its arguments."""
    bs = facts.bindings.lookup(name.value, name)
    if len(bs) != 1 or bs[0].how != "param" or not isinstance(bs[0].site, cst.FunctionDef):
        return None
    fn, param = bs[0].site, bs[0].node
    out = [param.default] if isinstance(param, cst.Param) and param.default is not None else []
    for c in facts.tree.calls():
        if not (isinstance(c.func, cst.Name) and c.func.value == fn.name.value):
            continue
        if has_splat(c):
            return None
        arg = next((a for a in c.args if param_for(fn, c, a) == name.value), None)
        if arg is not None:
            out.append(arg.value)
        elif not (isinstance(param, cst.Param) and param.default is not None):
            return None
    return out or None


def _largest(facts: Facts, node: cst.BaseExpression) -> int | None:
    """The largest whole number `node` may hold: a literal (or a pair of them, a size), a name
    bound only to such literals, or an option's default; None when not known."""
    values = facts_literal_values(facts, node)
    if values is None and isinstance(node, cst.Name):
        passed = _param_values(facts, node)
        if passed is not None:
            sides = [_largest(facts, v) for v in passed]
            return max(sides) if sides and None not in sides else None
    if values is None and isinstance(node, (cst.Tuple, cst.List)):
        sides = [_largest(facts, e.value) for e in node.elements]  # `Resize((256, 256))`
        return max(sides) if sides and None not in sides else None
    if values is None:
        v = literal_or_default(facts, node)
        values = None if v is NOT_LITERAL else [v]
    out = []
    for v in values or ():
        if isinstance(v, (tuple, list)) and len(v) == 2:
            v = max(v, key=lambda x: x if isinstance(x, int) else 0)
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        out.append(v)
    return max(out) if out else None
