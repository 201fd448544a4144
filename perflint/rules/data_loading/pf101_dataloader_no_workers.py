"""PF101 dataloader-no-workers: DataLoader loads data in the main process (num_workers missing
or 0)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, make_kwarg, parse_expr, parse_stmt, replace_arg_value
from perflint.analysis import NOT_LITERAL, Facts, call_name, get_arg, has_splat, iter_nodes, literal_value
from perflint.analysis.configfiles import from_config_file
from perflint.analysis.kinds import (LENGTH_PARAM, cheap_call, counts_items, draws_numpy_random, length_param,
                                    one_item_class)
from perflint.names import dotted
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import local_function
from perflint.rules.data_loading.helpers import (
    collate_origin,
    dataloaders,
    dataset_origin,
    index_loader,
    loader_comments,
    function_node,
    iterated_once,
    loader_arg,
    loader_options,
    resolved,
    token_collator,
    words_mention_tokenizer,
)
from perflint.rules.data_loading.reads import read_cheaply
from perflint.analysis.vocab import Kind


def in_memory_tensors(facts: Facts, expr: cst.BaseExpression | None, depth: int = 0) -> bool:
    """The dataset is a `TensorDataset` (directly or through a name bound once): indexing a
    tensor is all a sample costs, so worker processes only add inter-process copies."""
    if expr is None or depth > 5:
        return False
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)  # every binding (`if ...: ds = TensorDataset(a) else: ds = TensorDataset(b)`)
        return bool(bs) and all(b.how == "expr" and in_memory_tensors(facts, b.node, depth + 1) for b in bs)
    if isinstance(expr, cst.Attribute):
        bs = facts.bindings.self_attr_bindings(expr)
        return len(bs) == 1 and bs[0].how == "expr" and in_memory_tensors(facts, bs[0].node, depth + 1)
    return isinstance(expr, cst.Call) and facts.tree.qualname(expr.func) == "torch.utils.data.TensorDataset"


def cheap_samples(facts: Facts, opts: dict) -> bool:
    """The loader's samples cost next to nothing: a TensorDataset, or a Dataset class (of this
    file or the project) that only indexes data already in memory or slices a memory-mapped
    token file, with no collate_fn or one that only pads and stacks (a tokenised corpus, a
    replay buffer).  Worker processes would only add inter-process copies."""
    dataset = opts.get("dataset")
    if in_memory_tensors(facts, dataset):
        return True
    node = resolved(facts, dataset) if dataset is not None else None
    if isinstance(node, cst.Attribute):
        bs = facts.bindings.self_attr_bindings(node)
        node = bs[0].node if len(bs) == 1 and bs[0].how == "expr" else node
    if not isinstance(node, cst.Call):
        return False
    cls = facts.tree.classes_by_name.get(node.func.value) if isinstance(node.func, cst.Name) else None
    if cls is not None:
        if cls.name.value not in facts.kinds.dataset_classes or not (
                facts.kinds.cheap_samples_class(cls) or cheap_as_built(facts, cls, node)):
            return False
        kinds: frozenset = frozenset()
    else:
        kinds = facts.cross.project_class_kinds(node.func)
        if Kind.CHEAP_SAMPLES not in kinds:
            return False
    collate = opts.get("collate_fn")
    if collate is None or literal_value(collate) is None:
        return True
    if isinstance(collate, cst.Attribute) and collate.attr.value == "collate_fn":
        # `collate_fn=dataset.collate_fn`: the dataset class's own method.
        if cls is not None:
            fn = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "collate_fn"),
                      None) if isinstance(cls.body, cst.IndentedBlock) else None
            return fn is not None and facts.kinds.pad_only_collate(fn)
        return Kind.PAD_COLLATE in kinds
    fn = function_node(facts, collate)
    return isinstance(fn, (cst.FunctionDef, cst.Lambda)) and facts.kinds.pad_only_collate(fn)


def cheap_as_built(facts: Facts, cls: cst.ClassDef, built: cst.Call) -> bool:
    """The Dataset class `cls`, as `built` constructs it, only indexes memory: every costly
    call of its `__getitem__` sits under `if self.attr:` (or `is not None`) for an attribute
    that `__init__` sets only from a parameter this construction leaves None — diffusers'
    DreamBooth datasets preprocess the instance images in `__init__` and open class images
    only with `class_data_root=args.class_data_dir if args.with_prior_preservation else
    None`, an option off by default."""
    methods = {f.name.value: f for f in getattr(cls.body, "body", ()) if isinstance(f, cst.FunctionDef)}
    getitem, init = methods.get("__getitem__"), methods.get("__init__")
    if getitem is None or init is None or has_splat(built):
        return False
    costly = [c for c in facts.tree.calls_within(getitem) if not cheap_call(facts, c)]
    guards = {_guarding_attr(facts, c, getitem) for c in costly}
    return bool(costly) and None not in guards and all(_none_as_built(facts, init, a, built) for a in guards)


def _guarding_attr(facts: Facts, node: cst.CSTNode, fn: cst.FunctionDef) -> str | None:
    """The `attr` of an enclosing `if self.attr:` / `if self.attr is not None:` whose body
    holds `node` (inside `fn`)."""
    cur = node
    for anc in facts.tree.ancestors(node):
        if anc is fn:
            return None
        if isinstance(anc, cst.If) and cur is anc.body:
            test = anc.test
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                    and isinstance(test.comparisons[0].operator, cst.IsNot) \
                    and literal_value(test.comparisons[0].comparator) is None:
                test = test.left
            if isinstance(test, cst.Attribute) and isinstance(test.value, cst.Name) and test.value.value == "self":
                return test.attr.value
        cur = anc
    return None


def _none_as_built(facts: Facts, init: cst.FunctionDef, attr: str, built: cst.Call) -> bool:
    """Every assignment of `self.attr` in `__init__` is `None`, or sits under `if param is
    not None:` for a parameter `built` passes as None (left out with a None default, `None`,
    or `x if args.flag else None` with the option off by default)."""
    found = False
    for assign in facts.tree.nodes_within(init, cst.Assign):
        targets = [t.target for t in assign.targets]
        if not any(isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self"
                   and t.attr.value == attr for t in targets):
            continue
        found = True
        if literal_value(assign.value) is None:
            continue
        param = _param_tested_not_none(facts, assign, init)
        if param is None or not _passed_as_none(facts, init, param, built):
            return False
    return found


def _param_tested_not_none(facts: Facts, node: cst.CSTNode, init: cst.FunctionDef) -> str | None:
    cur = node
    for anc in facts.tree.ancestors(node):
        if anc is init:
            return None
        if isinstance(anc, cst.If) and cur is anc.body and isinstance(anc.test, cst.Comparison) \
                and len(anc.test.comparisons) == 1 and isinstance(anc.test.comparisons[0].operator, cst.IsNot) \
                and literal_value(anc.test.comparisons[0].comparator) is None and isinstance(anc.test.left, cst.Name):
            return anc.test.left.value
        cur = anc
    return None


def _passed_as_none(facts: Facts, init: cst.FunctionDef, param: str, built: cst.Call) -> bool:
    params = [p for p in (*init.params.posonly_params, *init.params.params)]
    names = [p.name.value for p in params]
    if param not in names:
        return False
    index = names.index(param) - 1  # after `self`
    arg = next((a for a in built.args if a.keyword is not None and a.keyword.value == param), None)
    if arg is None and 0 <= index < len(built.args) and all(a.keyword is None and not a.star for a in built.args[:index + 1]):
        arg = built.args[index]
    if arg is None:
        default = params[names.index(param)].default
        return default is not None and literal_value(default) is None
    value = arg.value
    if isinstance(value, cst.IfExp):
        found, default = facts.cross.option_default(value.test)
        return literal_value(value.orelse) is None and found and default is False
    return literal_value(value) is None


def tokenised_text(facts: Facts, opts: dict) -> bool:
    """A loader of token ids: the file tokenises (it uses a tokenizer) and nothing shows work
    per sample (`per_sample_work`, a name the file never binds included).  Text is tokenised
    up front (`.map(tokenize)`, cached features): a sample is a few integers to index and
    pad, nothing for worker processes to take over."""
    return (words_mention_tokenizer(facts) or _imports_transformers(facts)) \
        and not per_sample_work(facts, opts, unbound=False)


def per_sample_work(facts: Facts, opts: dict, unbound: bool = True) -> bool:
    """Evidence that producing a sample or a batch costs CPU time that worker processes could
    take over: a Dataset class of this file or the project whose items do more than index
    memory (file reads, decoding, transforms, tokenising), a torchvision or torchaudio
    dataset, a `transform=` handed to the dataset, or a collate_fn of this file that does more
    than pad and stack.  With `unbound`, a dataset name the file never binds counts as
    evidence (nothing says its samples are cheap)."""
    dataset = opts.get("dataset")
    if unbound and isinstance(dataset, cst.Name) and not facts.bindings.lookup(dataset.value, dataset) \
            and dataset.value not in facts.tree.imports.aliases and dataset.value not in facts.tree.classes_by_name:
        return True  # a name this file never binds (a snippet, a star import): nothing says the samples are cheap
    node = resolved(facts, dataset) if dataset is not None else None
    if isinstance(node, cst.Call):
        cls = facts.tree.classes_by_name.get(node.func.value) if isinstance(node.func, cst.Name) else None
        if (cls is not None and facts.kinds.shares_a_file_offset(cls)) or Kind.SHARED_FILE in facts.cross.project_class_kinds(node.func):
            return False  # workers forked from it would interleave their reads of one file offset
        if cls is not None:
            if cls.name.value in facts.kinds.dataset_classes and not facts.kinds.cheap_samples_class(cls):
                return True
            if any((facts.tree.qualname(b.value) or "").startswith(("torchvision.", "torchaudio.")) for b in cls.bases):
                return True  # a subclass of a dataset that decodes images or audio
        kinds = facts.cross.project_class_kinds(node.func) if cls is None else frozenset()
        if Kind.DATASET in kinds and Kind.CHEAP_SAMPLES not in kinds:
            return True
        if (facts.tree.qualname(node.func) or "").startswith(("torchvision.", "torchaudio.")):
            return True
        if any(a.keyword is not None and "transform" in a.keyword.value for a in node.args):
            return True
    fn = local_function(facts, opts.get("collate_fn"))
    return fn is not None and not facts.kinds.pad_only_collate(fn)


def _imports_transformers(facts: Facts) -> bool:
    return any(full.split(".", 1)[0] == "transformers" for full in facts.tree.imports.aliases.values())


_WORKER_ONLY_OPTIONS = ("persistent_workers", "prefetch_factor", "multiprocessing_context", "worker_init_fn")


def _one_item_or_counted(facts: Facts, dataset: cst.BaseExpression | None) -> bool:
    """The loader's Dataset class (of this file or the project) returns 1 from `__len__`, or
    is built with a literal 1 for the parameter its `__len__` returns (`SDFDataset(path,
    size=1)`), or advances a counter of its own in `__getitem__` (`Kind.ONE_ITEM`,
    `kinds.LENGTH_PARAM`, `Kind.COUNTED_ITEMS`)."""
    return _dataset_kind(facts, dataset, Kind.ONE_ITEM) or _sized_one(facts, dataset) \
        or _dataset_kind(facts, dataset, Kind.COUNTED_ITEMS)


def _sized_one(facts: Facts, dataset: cst.BaseExpression | None) -> bool:
    node = resolved(facts, dataset) if dataset is not None else None
    if not isinstance(node, cst.Call):
        return False
    cls = facts.tree.classes_by_name.get(node.func.value) if isinstance(node.func, cst.Name) else None
    if cls is not None:
        sized = length_param(facts.tree, cls)
    else:
        sized = next((k for k in facts.cross.project_class_kinds(node.func) if k.startswith(LENGTH_PARAM)), None)
    if sized is None:
        return False
    name, position = sized[len(LENGTH_PARAM):].rsplit(":", 1)
    given = get_arg(node, name, int(position))
    value = literal_value(given.value) if given is not None else None
    return value == 1 and not isinstance(value, bool)


_LOCAL_KIND_TESTS = {Kind.ONE_ITEM: one_item_class, Kind.COUNTED_ITEMS: counts_items, Kind.NUMPY_RANDOM: draws_numpy_random}


def _dataset_kind(facts: Facts, dataset: cst.BaseExpression | None, kind: str) -> bool:
    """Whether the loader's Dataset class, of this file or the project, has the trait `kind`."""
    node = resolved(facts, dataset) if dataset is not None else None
    if not isinstance(node, cst.Call):
        return False
    cls = facts.tree.classes_by_name.get(node.func.value) if isinstance(node.func, cst.Name) else None
    if cls is not None:
        return _LOCAL_KIND_TESTS[kind](facts.tree, cls)
    return kind in facts.cross.project_class_kinds(node.func)


def _documented_with_workers(facts: Facts, value: cst.BaseExpression) -> bool:
    """`num_workers=args.workers` where `workers` is this script's own argparse option and
    every documented run of the script (README/Markdown command lines, shell scripts) passes
    it a positive number: the run as documented uses worker processes."""
    name = (dotted(value) or "").split(".")
    if facts.project is None or len(name) != 2 or name[1] not in facts.cross.own_option_defaults:
        return False
    runs = facts.project.documented_option(name[1])
    return bool(runs) and all(v is not None and v.isdigit() and int(v) > 0 for v in runs)


def _built_by_a_dataset(facts: Facts, call: cst.Call) -> bool:
    """The loader is built by a method of a class that defines `__getitem__`: a dataset of
    loaders (CloserLookFewShot's `SetDataset`, one loader per class, each read with
    `next(iter(...))` for an item). It runs while the outer loader loads an item, in that
    loader's worker processes when it has any, where it cannot start workers of its own
    (a daemonic process cannot have children)."""
    cls = next((a for a in facts.tree.ancestors(call) if isinstance(a, cst.ClassDef)), None)
    return cls is not None and any(isinstance(st, cst.FunctionDef) and st.name.value == "__getitem__"
                                   for st in cls.body.body)


def _workers_commented(facts: Facts, call: cst.Call) -> bool:
    """A comment among the loader's arguments, or after its statement, speaks of workers
    (`num_workers=0)  # workers is set to 0 to avoid multiple instances to be modified at
    the same time`, `# num_workers=4,`): the literal 0 is a choice the author explains."""
    return any("worker" in c.lower() for c in loader_comments(facts, call))


class DataLoaderNoWorkers(Rule):
    """
    ## What it does
    Flags `torch.utils.data.DataLoader(...)` calls whose `num_workers` is missing or a literal
    `0` (by keyword or as the sixth positional argument).

    ## Why is this bad?
    With `num_workers=0` every batch is loaded, decoded and augmented in the training
    process, between optimizer steps: the GPU sits idle while the CPU prepares the next
    batch. The PyTorch performance tuning guide calls this synchronous loading. The size of
    the gain depends on how expensive a sample is to produce; not measured here as a single
    number (see `perflint verify` for a measurement on your own script).

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True,
                        num_workers=min(8, os.cpu_count() or 1))
    ```

    ## Fix safety
    **Unsafe**: sets `num_workers=min(8, os.cpu_count() or 1)` (adding `import os`), adds
    `persistent_workers=True` when the loader is read more than once and the target torch is
    1.7 or newer (workers then start once, not every epoch) and `pin_memory=True` in CUDA code. Worker processes change what
    a program does in ways a reader must check, so the fix is offered only when the file
    shows the dataset is safe in workers: a torchvision/torchaudio dataset, or a map-style
    Dataset class defined at the top level of the file (an IterableDataset only when it
    shards with `torch.utils.data.get_worker_info()`, else every worker yields the whole
    stream), whose `__getitem__` writes no shared state (`self.…` or globals: each worker
    has its own copy), holding no tensors on a device (CUDA cannot be used in forked
    workers), and with no lambda or nested function as dataset argument or `collate_fn`
    (the spawn start method must pickle them). No fix for a dataset from another module or
    a function: its code is not in view. No fix either when importing the file runs a loop
    or one of its own functions outside `if __name__ == "__main__":`: with the spawn or
    forkserver start method (Windows, macOS; Linux from Python 3.14) every worker imports the
    main module again, and the script fails with "An attempt has been made to start a new
    process before the current process has finished its bootstrapping phase" (reproduced
    with forkserver on the CPU). Check yourself, after the fix: random augmentations in
    workers: since torch 1.9 each worker seeds Python's `random`
    and torch from the loader's base seed, and numpy's global generator too as of torch
    2.x (`_worker_loop` seeds `numpy.random` when numpy is importable); older versions gave
    every worker the same numpy state. A seeded map-style dataset read once keeps its loss
    trajectory exactly: the sampler runs in the main process. With `persistent_workers=True`,
    epochs after the first see the same samples in another order: a kept worker pool no
    longer draws a base seed from the global generator before each shuffle (both tested on
    the CPU, `tests/test_dynamic_fixes.py`).

    ## Applies to
    All torch versions; CPU and CUDA. Reported only with evidence that a sample costs CPU
    time workers could take over: a Dataset class of this file or the project whose items do
    more than index memory (file reads, decoding, transforms, tokenising), a subclass of a
    torchvision or torchaudio dataset, a `transform=` handed to the dataset, or a collate_fn
    of this file that does more than pad and stack. A dataset nothing is known about (a
    library's, a function's result) is left alone, as are datasets that keep one open file
    and seek in it per item (forked workers would share its offset), loaders that only batch
    integer indices (`DataLoader(range(n), batch_size)`), and, in a file that tokenises,
    loaders of token ids. Strict review of 27 repositories this project had not used: 17 of
    25 sampled findings in NLP repositories were token-id loaders; after this narrowing 5 of
    the 6 reviewed findings still reported on the 18 repositories the work was done on are
    right, and on the 9 sampled later the 2 still reported are false (a module nothing
    imports). `DataLoader(ds, **kw)` is read through `kw` when it is
    a dict literal, `dict(...)` or `{**a, **b}` updated only with such values in reach (the
    `train_kwargs.update(cuda_kwargs)` shape); an unknown `**kw` is left alone. A
    `num_workers` that is an option (`args.workers`, `cfg.num_workers`) is reported when its
    default (argparse, a config dataclass or dict, in this file or a project module it
    imports) is 0 — unless the call also passes a worker-only option (`persistent_workers`,
    `prefetch_factor`, `multiprocessing_context`, `worker_init_fn`): the author runs with
    workers, and what the default 0 breaks is PF104's finding — nor when the option is the
    script's own argparse option and every documented run of the script passes it a number
    of workers (`python tutorial_train.py --dataloader_num_workers=4` in the README, read as
    PF503 reads `CUDA_VISIBLE_DEVICES`; one run without it keeps the finding; IP-Adapter).
    Nor for a Dataset class (of the file or the project) whose `__len__` returns 1 (an epoch
    is one sample: nothing for workers to load ahead; siren's single-image datasets), or
    returns the constructor parameter the call passes a literal 1 (`SDFDataset(path,
    size=1)`, torch-ngp's dummy validation set; judged false in a strict review), or
    whose `__getitem__` advances a counter of its own (`self.counter += 1` driving a
    curriculum: each worker's copy would count apart, and the run would change). For a
    target torch before 1.9 and a Dataset whose `__getitem__` draws from NumPy's global
    random state (`np.random.choice(...)`), the message adds a `worker_init_fn` that seeds
    NumPy per worker and no fix is offered: before 1.9 every worker starts from the same
    NumPy state and draws the same "random" samples (siren's `PointCloud` on torch 1.5).
    Nor for a loader built by a class that defines `__getitem__`, a dataset of loaders
    (CloserLookFewShot's `SetDataset` draws each episode's item from one loader per class):
    it runs while the outer loader loads an item, in that loader's worker processes when it
    has any, and a worker cannot start workers of its own (daemonic processes cannot have
    children). Not reported for a loader that
    feeds no training pass and no repeated evaluation: one batch read once
    (`next(iter(DataLoader(ds, batch_size=len(ds))))`, a loop that ends in `break`), one pass
    that is not itself training (a final test after training, `list(loader)`, a prediction
    script or a dataset's `__main__` self-check run once), a sample batch read under `if step
    % N == 0:`, a local loader never read, or one handed to an object that lives only inside
    the function run once that builds it (`evaluator = MscEval(net, dl)`;
    `evaluator.evaluate()`), or one built in a function run once of a script that trains
    nothing (no backward or optimizer step, no call into a project module that trains) and
    only iterated there or handed to the script's own or the project's functions (BasicSR's
    FID scripts), or built the same way at the top level of such a script, afresh for each
    setting it sweeps and read once each (siren's `test_neural_process.py`, one loader per
    context sparsity); `len(loader)` and `loader.__len__()` are not reads, nor are the uses of
    the name after it is bound again (a notebook's `train_loader = from_arrays(...)` after
    the image loader was read once for features) or a function's own local of that name. A loader that is returned, stored or handed to unknown code may feed training and
    is still reported. A local name bound to 0 is the user's choice and left alone, and so is a literal 0
    beside a comment that speaks of workers (`num_workers=0)  # workers is set to 0 to avoid
    multiple instances to be modified at the same time`, SfmLearner; `# num_workers=4,`).
    So are loaders over
    a `TensorDataset`: a sample is a tensor index, and workers only add inter-process copies (measured: an epoch of 100,000 × 64 floats at
    batch 512 took 0.47–0.75 s with no workers and 0.66–0.90 s with 2, five alternating
    runs; torch 2.13, 2-core CPU, `python benchmarks/tensor_dataset_workers.py --repeats 5`;
    on an H200, a loader of host images that only indexes took 4.43 and 11.04 ms a step with
    4 workers against 2.13 and 2.95 ms with none, both pinned, `python
    benchmarks/pin_zero_workers.py --steps 50 --repeats 5` and the same with `--batch-size 8
    --side 512`, results in `benchmarks/results/h200/pin_zero_workers/`). The same holds for a
    Dataset class that prepares its samples in `__init__` and does costly work in
    `__getitem__` only under `if self.attr:` for an attribute this construction leaves None
    (diffusers' DreamBooth datasets: class images are decoded per sample only with
    `class_data_root=args.class_data_dir if args.with_prior_preservation else None`, an
    option off by default), and a `collate_fn=lambda b: collate_fn(b, flag)` whose function
    only stacks. Editing a caption string (`replace`, `join`) counts as indexing, and so do a
    CPU tensor's shape and one of its values (`torch.randint(0, self.data.size(0) - n,
    (1,)).item()`, a random window of a corpus held in memory) and calls of a function of the
    file or a method of the class that only do such work themselves (a helper that pads a
    list of token ids), two levels deep.

    ## References
    - PyTorch performance tuning guide, "Enable asynchronous data loading"
    - TorchFix TOR401 (the same check, without a message on what to use)
    """

    code = "PF101"
    name = "dataloader-no-workers"
    summary = "DataLoader loads data in the main process (num_workers missing or 0)"
    fix_class = FixClass.UNSAFE
    tokens = (b"DataLoader",)
    # Shares a fix pass with: `pin_memory` (PF102) on the same loader is not read by this fix.
    fix_commutes_with = frozenset({"PF102"})

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in dataloaders(facts):
            opts = loader_options(facts, call)
            if opts is None:
                continue
            value = opts.get("num_workers")
            why = ""
            if value is not None:
                v = literal_value(value)
                if v is NOT_LITERAL:
                    # A name bound to 0 in the file is the user's choice; an option whose
                    # default is 0 (argparse, a config field) loads in-process unless changed.
                    found, default = facts.cross.option_default(value)
                    if not found or default != 0 or _documented_with_workers(facts, value):
                        continue
                    if from_config_file(facts, value):
                        why = f"`num_workers={facts.module.code_for_node(value)}` (0 in the config file it reads)"
                    else:
                        why = f"`num_workers={dotted(value)}` (default 0)" if dotted(value) else "`num_workers` (default 0)"
                elif v != 0:
                    continue
                elif _workers_commented(facts, call):
                    continue  # `num_workers=0,  # workers set to 0 to avoid …`: the author's reasoned choice
            if _built_by_a_dataset(facts, call):
                continue  # read while another loader loads a sample, in its workers when it has them
            if collate_origin(facts, call, opts.get("collate_fn")) == "device" \
                    or dataset_origin(facts, opts.get("dataset")) == "device":
                continue  # samples are put on the GPU while loading: worker processes would fail (CUDA after fork)
            if cheap_samples(facts, opts) or token_collator(facts, opts.get("collate_fn")) or tokenised_text(facts, opts) \
                    or index_loader(facts, call):
                continue  # in-memory, memory-mapped or tokenised samples: workers only add copies
            if not per_sample_work(facts, opts):
                continue  # nothing shows work per sample (an unknown dataset: stay silent)
            if _one_item_or_counted(facts, opts.get("dataset")):
                continue  # one sample an epoch, or a `self.counter += 1` per item that workers would split
            if why and any(k in opts for k in _WORKER_ONLY_OPTIONS):
                # `num_workers=args.workers` with `persistent_workers=True`/`prefetch_factor`:
                # the author runs with workers; what the default 0 breaks is PF104's finding.
                continue
            if read_cheaply(facts, call):
                continue  # one batch, a final test, a sample every N steps: nothing to overlap
            arg = next((a for a in call.args if a.value is value), None) if value is not None else None
            what = why or ("`num_workers=0`" if value is not None else "no `num_workers`")
            # Before torch 1.9 every worker starts from the same NumPy random state.
            seeded = facts.target_torch < (1, 9) and _dataset_kind(facts, opts.get("dataset"), Kind.NUMPY_RANDOM)
            yield Violation(
                arg if arg is not None else call,
                f"DataLoader with {what} loads every batch in the main process; use worker "
                "processes, e.g. `num_workers=min(8, os.cpu_count() or 1)` (an IterableDataset "
                "must shard with get_worker_info(), or each worker repeats the data)"
                + (", with a `worker_init_fn` that seeds NumPy per worker (`np.random.seed(torch.initial_seed() "
                   "% 2**32)`): before torch 1.9 every worker draws the same NumPy random numbers" if seeded else ""),
                self._fix(facts, call, arg) if not why and not seeded else None,
            )

    def _fix(self, facts: Facts, call: cst.Call, arg: cst.Arg | None):
        """Workers from the machine's core count, `persistent_workers=True` for a loader read
        more than once, `pin_memory=True` in CUDA code; only when the dataset and collate_fn
        are known to be safe in worker processes (see `workers_safe`)."""
        if has_splat(call) or (arg is not None and arg.keyword is None):
            return None
        dataset = loader_arg(call, "dataset")
        if dataset is None or workers_safe(facts, call, dataset.value) is not None:
            return None
        if runs_loaders_on_import(facts):
            return None
        value = parse_expr("min(8, os.cpu_count() or 1)")
        new = replace_arg_value(call, arg, value) if arg is not None else add_arg(call, make_kwarg("num_workers", value))
        added = ["`num_workers=min(8, os.cpu_count() or 1)`"]
        if loader_arg(call, "persistent_workers") is None and not iterated_once(facts, call) \
                and facts.target_torch >= (1, 7):
            new = add_arg(new, make_kwarg("persistent_workers", "True"))
            added.append("`persistent_workers=True`")
        if facts.devices.is_cuda_code and loader_arg(call, "pin_memory") is None and get_arg(call, "pin_memory_device") is None:
            new = add_arg(new, make_kwarg("pin_memory", "True"))
            added.append("`pin_memory=True`")
        replacements: dict = {call: new}
        if not _imports_os(facts):
            anchor = _first_import(facts)
            if anchor is None:
                return None
            replacements[anchor] = cst.FlattenSentinel([
                parse_stmt("import os\n").with_changes(leading_lines=anchor.leading_lines),
                anchor.with_changes(leading_lines=[]),
            ])
        return self.unsafe("Add " + ", ".join(added), replacements)


def runs_loaders_on_import(facts: Facts) -> bool:
    """Whether importing the file runs code that may iterate a loader: a loop, or a call of
    one of its own functions, at the top level outside `if __name__ == "__main__":`.  With
    the spawn or forkserver start method (macOS, Windows; Linux from Python 3.14) each worker
    imports the main module again, and such a script then fails with "An attempt has been
    made to start a new process before the current process has finished its bootstrapping
    phase"."""
    local = set(facts.tree.functions_by_name)
    for stmt in facts.module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(stmt, cst.If) and _is_main_guard(stmt.test):
            continue
        for n in iter_nodes(stmt):
            if isinstance(n, (cst.For, cst.While, cst.CompFor)):
                return True
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in local:
                return True
    return False


def _is_main_guard(test: cst.BaseExpression) -> bool:
    return isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and {
        dotted(test.left), literal_value(test.comparisons[0].comparator)} == {"__name__", "__main__"}


def _imports_os(facts: Facts) -> bool:
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import) and any(
                        dotted(a.name) == "os" and a.asname is None for a in small.names):
                    return True
    return False


def _first_import(facts: Facts) -> cst.SimpleStatementLine | None:
    """The first top-level import after any `from __future__` imports."""
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            if any(isinstance(s, cst.ImportFrom) and dotted(s.module) == "__future__" for s in stmt.body
                   if isinstance(s, cst.ImportFrom) and s.module is not None):
                continue
            return stmt
    return None


_MUTATORS = {"append", "extend", "update", "pop", "add", "insert", "remove", "clear", "setdefault", "__setitem__"}


def workers_safe(facts: Facts, call: cst.Call, dataset: cst.BaseExpression) -> str | None:
    """None when worker processes provably read this loader's dataset as the main process
    would, else the reason they may not: an IterableDataset that does not shard with
    `get_worker_info()`, data on a device, a dataset or collate_fn that spawn cannot pickle
    (a lambda, a class or function defined inside a function), a `__getitem__` that writes
    shared state, or a dataset this file cannot see."""
    collate = loader_arg(call, "collate_fn")
    if collate is not None and literal_value(collate.value) is not None:
        fn = function_node(facts, collate.value)
        if fn is None or isinstance(fn, cst.Lambda) or facts.tree.enclosing_function(fn) is not None:
            return "collate_fn"
    for opt in ("worker_init_fn", "sampler", "batch_sampler"):
        a = loader_arg(call, opt)
        if a is not None and isinstance(a.value, cst.Lambda):
            return opt
    node = resolved(facts, dataset)
    if not isinstance(node, cst.Call):
        return "unknown dataset"
    if any(isinstance(n, cst.Lambda) for n in iter_nodes(node)):
        return "lambda"
    if dataset_origin(facts, node) == "device":
        return "device"
    q = facts.tree.qualname(node.func) or ""
    if q.startswith(("torchvision.datasets.", "torchaudio.datasets.")):
        return None
    if not isinstance(node.func, cst.Name):
        return "unknown dataset"
    cls = facts.tree.classes_by_name.get(node.func.value)
    if cls is None or node.func.value not in facts.kinds.dataset_classes or facts.tree.parent(cls) is not facts.module:
        return "unknown dataset"
    iterable = any((facts.tree.qualname(b.value) or dotted(b.value) or "").endswith("IterableDataset") for b in cls.bases)
    if iterable and not any(call_name(c) == "get_worker_info" for c in facts.tree.calls_within(cls)):
        return "unsharded IterableDataset"
    for item in cls.body.body:
        if isinstance(item, cst.FunctionDef) and item.name.value in ("__getitem__", "__iter__", "__getitems__"):
            if _writes_shared_state(item):
                return "mutating __getitem__"
    return None


def _writes_shared_state(fn: cst.FunctionDef) -> bool:
    for n in iter_nodes(fn.body):
        if isinstance(n, (cst.Global, cst.Nonlocal)):
            return True
        targets = []
        if isinstance(n, cst.Assign):
            targets = [t.target for t in n.targets]
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            targets = [n.target]
        for t in targets:
            for sub in iter_nodes(t):
                if isinstance(sub, cst.Attribute) and isinstance(sub.value, cst.Name) and sub.value.value == "self":
                    return True
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in _MUTATORS:
            base = n.func.value
            if isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name) and base.value.value == "self":
                return True
    return False
