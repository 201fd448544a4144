"""PF503 data-parallel: nn.DataParallel instead of DistributedDataParallel."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg, iter_nodes, literal_value
from perflint.names import dotted
from perflint.rules.base import Rule, Violation
from perflint.rules.common import (
    file_trains,
    off_by_default,
    param_for,
    is_training_file,
    runs_once,
    throttled_in_loop,
    trains_in,
    uses_of_bound_name,
)


class DataParallel(Rule):
    """
    ## What it does
    Flags `torch.nn.DataParallel(...)` (through any import path).

    ## Why is this bad?
    `DataParallel` drives every GPU from one Python process: it replicates the module on every
    forward, scatters inputs and gathers outputs through the first GPU, and its threads share
    the GIL. The PyTorch documentation: "It is recommended to use DistributedDataParallel,
    instead of this class, to do multi-GPU training, even if there is only a single node."
    Not measured here (no multi-GPU measurement).

    ## Example
    ```python
    model = nn.DataParallel(model).cuda()
    ```

    ## Use instead
    ```python
    # launched with: torchrun --nproc_per_node=NUM_GPUS train.py
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
    ```
    with a `DistributedSampler` for the DataLoader.

    ## Fix safety
    No fix: moving to DDP changes how the script is launched, how data is sharded and where
    checkpoints and logs are written.

    ## Applies to
    Target torch 0.4 and later (for a target before 1.10, which has no `torchrun`, the message
    names `python -m torch.distributed.launch`; before 0.4 there was no launcher, and code
    written for torch 0.3 has more to port than the wrapper); multi-GPU CUDA code. Not in the `else:` of `if
    torch.cuda.is_available():` (CPU only: nothing is replicated), and not in a file that
    does not train when the wrapper is built at module level or in a function run once (a
    prediction or validation script's `main`), nor when the function put the wrapped model in
    evaluation mode first (`net = net.eval()`, then `nn.DataParallel(net)`: a predictor's
    loader) or right after, in its own body (`net = nn.DataParallel(net)` … `net.eval()`, with
    no `.train()` in the function), or where it is built (`nn.DataParallel(inception).eval()
    .to(device)`, a frozen FID network), nor when the function loads a checkpoint into the
    wrapper right after (`model = nn.DataParallel(model)`, `model.load_state_dict(...)`:
    EasyOCR's model loader, wrapped so a DataParallel checkpoint's `module.` keys load); a
    factory nothing in the file calls is still reported (a training script elsewhere may use it). In a file that trains, not in a
    function named for sampling or evaluation (`sample`, `test`, `evaluate`, `generate` …)
    that runs no training step itself, nor for a wrapper put in evaluation mode where it is
    built (`nn.DataParallel(model).to(device).eval()`) in a function that trains nothing and
    sets no training mode (a metric's feature pass), nor in a run mode that trains nothing (an arm of `if
    args.test_only:` that ends in `sys.exit(0)`, or whose other arm trains). Not in a file that also builds
    `DistributedDataParallel`, itself or through a project function it calls (`model =
    smart_DDP(model)`: DataParallel is then the single-process fallback of a script that
    has the DDP path), nor under `if flag:` with `flag` bound only to False, nor in a branch
    that a run with every option at its default does not take (`if args.n_gpu > 1:` with
    `add_argument('--n_gpu', default=1)`, `if args.use_multi_gpu and args.use_gpu:` with a
    `store_true` flag declared with `default=False`, `nb_gpus = len(args.gpu.split(','))` … `if nb_gpus > 1:` with
    `default='0'`; the option's default read in the file, a project module it
    imports, else the scripts that import it and pass `args` on (TransUNet's `trainer.py`,
    whose `train.py` parses `--n_gpu` with default 1); not when the file assigns the option
    (`args.n_gpu = torch.cuda.device_count()`), when its default is None (a field the run's
    config sets), or when a documented command line passes it (`--n_gpu 4`)), nor for a
    wrapper every later use of which sits under a throttle in a loop (`sampler =
    nn.DataParallel(sampler)` called only `if step % args.sample_step == 0:`), nor for one
    unwrapped before any forward (`net = nn.DataParallel(net)`, `net.load_state_dict(...)`,
    `net = net.module`: it only lets a DataParallel checkpoint load), nor for one handed only
    to functions of the file that train nothing and call it only under `torch.no_grad()`
    (a feature extractor run before the function trains another model), nor for a wrapped
    `nn.ModuleList` or `nn.ModuleDict` (a container has no `forward`: the wrapper is never
    called, and the modules inside run unwrapped; EDSR-style loss classes), nor for a wrapped
    torch loss (`nn.DataParallel(self.criterion)` of an `nn.NLLLoss`: it has no parameters, so
    DDP would refuse it, and moving the model to DDP, its own finding, ends the split;
    lidar-bonnetal), nor for one given a
    single device (`device_ids=[0]`, or a name bound only to a one-element list: DataParallel
    then calls the module directly, with no replicas), nor in a script that every documented
    run starts on one GPU: the project's README/Markdown command lines and shell scripts that
    run it all set `CUDA_VISIBLE_DEVICES` to one device (`CUDA_VISIBLE_DEVICES=0 python
    train.py …`, or an `export` earlier in the script). One run without it, with several
    devices, or through a multi-process launcher (`torchrun`, `torch.distributed.launch`)
    keeps the finding, and so does a script no document runs. These files are read again on
    every run (the cache does not serve the finding without asking).

    **Off by default** (`extend-select = ["PF503"]` turns it on). Strict reviews of whole
    public repositories counted 34 right of 68 findings at sampling (sets AS to BE, each
    sampled before the changes it prompted). Most false findings are wrappers the documented
    run never builds or never trains through, which the code does not settle: a
    multi-GPU branch behind an option whose default is one GPU, set in the entry script of
    another module (`if args.n_gpu > 1:`, `if args.use_multi_gpu:`), evaluation and metric
    scripts started through a launcher callback, and READMEs that time one GPU. The cost of
    the wrapper is not measured here (no multi-GPU machine), so the advice is a guess where
    it fires.

    ## References
    - `torch.nn.DataParallel` documentation
    - PyTorch performance tuning guide, "Use DistributedDataParallel instead of DataParallel"
    """

    code = "PF503"
    name = "data-parallel"
    summary = "nn.DataParallel instead of DistributedDataParallel"
    tokens = (b"DataParallel",)
    default = False  # whole-repository reviews: 34 right of 68 at sampling (see "Applies to")
    min_torch = (0, 4)  # `torch.distributed.launch` came with 0.4 (pytorch PR #5348): before it, no launcher to name

    def check(self, facts: Facts) -> Iterator[Violation]:
        trains = is_training_file(facts) or file_trains(facts)
        if _has_distributed_path(facts):
            return  # DataParallel is the single-process fallback next to a DDP path the file has
        for call in facts.tree.calls_to("torch.nn.DataParallel"):
            if _cpu_only_branch(facts, call) or _dead_branch(facts, call) or off_by_default(facts, call):
                continue  # `else:` of `if torch.cuda.is_available():`, `parallel = False; if parallel:`, `if args.n_gpu > 1:`
            fn = facts.tree.enclosing_function(call)
            if not trains:
                if fn is None or runs_once(facts, fn) or _used_outside_training(facts, fn):
                    continue  # a prediction, indexing or validation tool: no training step
                if _wraps_an_evaluated_model(facts, call, fn):
                    continue  # `net = net.eval()` then `nn.DataParallel(net)`: an inference wrapper
                if _loads_a_checkpoint_into(facts, call, fn):
                    continue  # wrapped to load a DataParallel checkpoint, in a file that trains nothing
            elif fn is not None and _NOT_TRAINING_FN.search(fn.name.value) and not trains_in(facts, fn):
                continue  # `def sample(self):` wraps the model to sample or evaluate, not to train
            elif fn is not None and _evaluated_in_chain(facts, call) and not trains_in(facts, fn) \
                    and not _sets_training_mode(facts, fn) and _only_called_here(facts, call, fn):
                continue  # `p = nn.DataParallel(model).to(device).eval()` run only in a function that trains nothing
            if _used_only_now_and_then(facts, call, fn or facts.module):
                continue  # `sampler = nn.DataParallel(sampler)` used only under `if step % N == 0:`
            if _unwrapped_before_use(facts, call, fn or facts.module):
                continue  # wrapped to load a DataParallel checkpoint, then `net = net.module`
            if _one_device(facts, call):
                continue  # `nn.DataParallel(net, device_ids=[0])`: one GPU, nothing replicated
            if facts.project is not None and facts.project.documented_on_one_gpu():
                continue  # every documented run: `CUDA_VISIBLE_DEVICES=0 python train.py …`
            if _wraps_a_container(facts, call):
                continue  # `nn.DataParallel(self.loss_module)` of an `nn.ModuleList`: it has no forward to replicate
            if _wraps_a_loss(facts, call):
                continue  # `nn.DataParallel(self.criterion)` of an `nn.NLLLoss`: no parameters, DDP would refuse it
            if fn is not None and _handed_only_to_inference(facts, call, fn):
                continue  # `net = nn.DataParallel(net)` handed only to a helper that runs it under `no_grad`
            if trains and facts.hotpath.runs_instead_of_training(call):
                continue  # `if args.test_only: net = nn.DataParallel(net); ...; sys.exit(0)`: a run that does not train
            # `torchrun` came with torch 1.10; before it, `torch.distributed.launch` started the ranks.
            launcher = "`torchrun`" if facts.target_torch >= (1, 10) else "`python -m torch.distributed.launch`"
            yield Violation(
                call,
                "`nn.DataParallel` runs all GPUs from one process (GIL-bound, replicates the model "
                f"every step); use `DistributedDataParallel` launched with {launcher}",
            )


def _loads_a_checkpoint_into(facts: Facts, call: cst.Call, fn: cst.FunctionDef) -> bool:
    """`model = nn.DataParallel(model)...` then `model.load_state_dict(...)` in the same
    function: the wrapper is there so a checkpoint saved from DataParallel (its `module.`
    keys) loads, in a function of a file that trains nothing (EasyOCR's `get_recognizer`,
    a library's model loader for inference)."""
    stmt = facts.tree.parent(call)
    while isinstance(stmt, (cst.Attribute, cst.Call)):  # `nn.DataParallel(model).to(device)`
        stmt = facts.tree.parent(stmt)
    if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name)):
        return False
    name = stmt.targets[0].target.value
    start = facts.tree.order.get(call, 0)
    return any(call_name(c) == "load_state_dict" and isinstance(c.func, cst.Attribute)
               and facts.tree.receiver_text(c.func.value) == name and facts.tree.order.get(c, 0) > start
               for c in facts.tree.calls_within(fn))


def _wraps_an_evaluated_model(facts: Facts, call: cst.Call, fn: cst.FunctionDef) -> bool:
    """The model `nn.DataParallel(model)` wraps was put in evaluation mode (`model.eval()`)
    earlier in the same function, on every path to the wrapper (in a block that holds it, not
    in another branch): a predictor that loads weights to run them. Or the wrapper itself is
    put in evaluation mode where it is built (`nn.DataParallel(inception).eval().to(device)`,
    an FID feature extractor) in a function that puts nothing in training mode."""
    if not call.args:
        return False
    if _evaluated_in_chain(facts, call) and not _sets_training_mode(facts, fn):
        return True
    wrapped = facts.tree.receiver_text(call.args[0].value)
    start = facts.tree.order.get(call, 0)
    for c in facts.tree.calls_within(fn):
        if not (call_name(c) == "eval" and not c.args and isinstance(c.func, cst.Attribute)
                and facts.tree.receiver_text(c.func.value) == wrapped and facts.tree.order.get(c, 0) < start
                and facts.tree.enclosing_function(c) is fn and not facts.tree.is_inside(call, c)):
            continue
        where = facts.tree.block_of(c)
        if where is not None and facts.tree.is_inside(call, where[0]):
            return True
    return _evaluated_after(facts, call, fn)


def _only_called_here(facts: Facts, call: cst.Call, fn: cst.FunctionDef) -> bool:
    """The wrapper (with its chained calls) is bound to a local name that `fn` only calls or
    reads attributes of: not returned, stored or handed to other code (a frozen teacher
    handed to the training function replicates on every step)."""
    node: cst.CSTNode = call
    while isinstance(facts.tree.parent(node), cst.Attribute) and isinstance(facts.tree.parent(facts.tree.parent(node)), cst.Call):
        node = facts.tree.parent(facts.tree.parent(node))
    uses = uses_of_bound_name(facts, node, fn)
    if uses is None:
        return False
    for use in uses:
        p = facts.tree.parent(use)
        if isinstance(p, cst.Call) and p.func is use or isinstance(p, cst.Attribute) and p.value is use:
            continue
        if isinstance(p, cst.AssignTarget):
            continue
        return False
    return True


def _sets_training_mode(facts: Facts, fn: cst.FunctionDef) -> bool:
    return any(call_name(c) == "train" and isinstance(c.func, cst.Attribute) for c in facts.tree.calls_within(fn))


def _evaluated_in_chain(facts: Facts, call: cst.Call) -> bool:
    """`nn.DataParallel(net).eval()`, also further chained (`.eval().to(device)`, `.cuda().eval()`)."""
    node: cst.CSTNode = call
    while True:
        attr = facts.tree.parent(node)
        outer = facts.tree.parent(attr) if isinstance(attr, cst.Attribute) and attr.value is node else None
        if not isinstance(outer, cst.Call) or outer.func is not attr:
            return False
        if attr.attr.value == "eval" and not outer.args:
            return True
        if attr.attr.value not in ("to", "cuda", "float", "half", "requires_grad_"):
            return False
        node = outer


def _evaluated_after(facts: Facts, call: cst.Call, fn: cst.FunctionDef) -> bool:
    """`net = nn.DataParallel(net).to(device)` (or `obj.model = …`), then `net.eval()` in a
    statement of the function's own body after it, in a function that puts nothing in
    training mode (`.train()`): the loader of a predictor."""
    stmt = facts.tree.statement_of(call)
    assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return False
    target = facts.tree.receiver_text(assign.targets[0].target)
    start = facts.tree.order.get(call, 0)
    evaluated = False
    for c in facts.tree.calls_within(fn):
        if call_name(c) == "train" and isinstance(c.func, cst.Attribute):
            return False
        if call_name(c) == "eval" and not c.args and isinstance(c.func, cst.Attribute) \
                and facts.tree.receiver_text(c.func.value) == target and facts.tree.order.get(c, 0) > start:
            where = facts.tree.block_of(c)
            evaluated = evaluated or (where is not None and where[0] is fn.body)
    return evaluated


# Methods of a wrapper that run no forward pass (nothing is replicated).
_NO_FORWARD = {"load_state_dict", "eval", "train", "cuda", "to", "state_dict"}


def _one_device(facts: Facts, call: cst.Call) -> bool:
    """`device_ids=[0]` (or a name bound only to a one-element list or tuple, or `range(1)`):
    DataParallel on one GPU calls the module directly, with no replicas and no threads
    (DnCNN-PyTorch's `device_ids = [0]`)."""
    arg = get_arg(call, "device_ids", 1)
    if arg is None:
        return False

    def single(v: cst.BaseExpression | None) -> bool:
        if isinstance(v, (cst.List, cst.Tuple)):
            return len(v.elements) == 1 and not isinstance(v.elements[0], cst.StarredElement)
        return isinstance(v, cst.Call) and call_name(v) == "range" and len(v.args) == 1 \
            and literal_value(v.args[0].value) == 1

    value = arg.value
    if isinstance(value, cst.Name):
        bs = facts.bindings.lookup(value.value, value)
        return bool(bs) and all(b.how == "expr" and single(b.node) for b in bs)
    return single(value)


_CONTAINERS = {"torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.ParameterList", "torch.nn.ParameterDict"}


def _wraps_a_container(facts: Facts, call: cst.Call) -> bool:
    """`self.loss_module = nn.ModuleList()` … `nn.DataParallel(self.loss_module, ...)`: a
    container has no `forward`, so the wrapper can never be called and replicates nothing
    (EDSR-style loss classes, RCAN); the losses inside run unwrapped."""
    values = _wrapped_values(facts, call)
    return bool(values) and all(isinstance(v, cst.Call) and facts.tree.qualname(v.func) in _CONTAINERS for v in values)


def _wraps_a_loss(facts: Facts, call: cst.Call) -> bool:
    """`self.criterion = nn.NLLLoss(weight=w).to(device)` … `nn.DataParallel(self.criterion)`:
    a torch loss has no parameters, so `DistributedDataParallel` would refuse it; the wrapper
    only splits the model's outputs, and moving the model to DDP (its own finding) ends that
    too (lidar-bonnetal)."""
    values = _wrapped_values(facts, call)
    for v in values:
        while isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.func.attr.value in ("to", "cuda"):
            v = v.func.value  # `nn.NLLLoss(...).to(device)`
        q = facts.tree.qualname(v.func) if isinstance(v, cst.Call) else None
        if not (q and q.startswith("torch.nn.") and q.endswith("Loss")):
            return False
    return bool(values)


def _wrapped_values(facts: Facts, call: cst.Call) -> list[cst.BaseExpression]:
    """What the module `call` wraps is bound to: the name's assignments, or a `self.` attribute's
    assignments in the class (the wrapping assignment itself left out)."""
    if not call.args:
        return []
    arg = call.args[0].value
    if isinstance(arg, cst.Name):
        return [b.node for b in facts.bindings.lookup(arg.value, arg) if b.how == "expr"]
    if isinstance(arg, cst.Attribute) and isinstance(arg.value, cst.Name) and arg.value.value == "self":
        cls = facts.tree.enclosing_class(call)
        return [] if cls is None else [
            a.value for a in facts.tree.nodes_within(cls, cst.Assign)
            if any(isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
                   and t.target.value.value == "self" and t.target.attr.value == arg.attr.value for t in a.targets)
            and not facts.tree.is_inside(call, a.value)]
    return []


def _handed_only_to_inference(facts: Facts, call: cst.Call, fn: cst.FunctionDef) -> bool:
    """`training_network = nn.DataParallel(network, devices)`, then the wrapper only handed to
    functions of this file that train nothing and call it only under `torch.no_grad()`
    (incremental_learning.pytorch's `_extract_features`, before the function trains another
    model): the wrapper runs inference, where DistributedDataParallel has nothing to offer."""
    assign = facts.tree.parent(call)
    if not (isinstance(assign, cst.Assign) and assign.value is call and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)):
        return False
    target = assign.targets[0].target
    uses = [u for u in facts.tree.later_uses(target.value, fn, facts.tree.order.get(target, 0))
            if not facts.tree.is_inside(u, call) and not isinstance(facts.tree.parent(u), cst.AssignTarget)]
    if not uses:
        return False
    for u in uses:
        arg, site = facts.tree.parent(u), facts.tree.parent(facts.tree.parent(u))
        if not (isinstance(arg, cst.Arg) and arg.value is u and isinstance(site, cst.Call) and isinstance(site.func, cst.Name)):
            return False
        callees = facts.tree.functions_by_name.get(site.func.value) or []
        param = param_for(callees[0], site, arg) if len(callees) == 1 else None
        if param is None or trains_in(facts, callees[0]):
            return False
        runs = [n for n in facts.tree.names_in(callees[0], param) if n is not callees[0].name]
        calls = [facts.tree.parent(n) for n in runs if isinstance(facts.tree.parent(n), cst.Call)
                 and facts.tree.parent(n).func is n]
        if not calls or len(calls) != len(runs) - 1 or any(facts.grad.grad_context(c) != "off" for c in calls):
            return False  # the parameter itself, then only calls under no_grad
    return True


def _unwrapped_before_use(facts: Facts, call: cst.Call, scope: cst.CSTNode) -> bool:
    """`net = nn.DataParallel(net)`, weights loaded into it (`net.load_state_dict(...)`), then
    `net = net.module...` in the same block before any forward: the wrapper only lets a
    checkpoint saved from a DataParallel model load, and nothing is ever replicated."""
    stmt = facts.tree.statement_of(call)
    assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
            and assign.value is call):
        return False
    name = assign.targets[0].target.value
    home = facts.tree.block_of(stmt)
    uses = sorted((u for u in facts.tree.later_uses(name, scope, facts.tree.order.get(assign.targets[0].target, 0))
                   if not facts.tree.is_inside(u, call)), key=lambda u: facts.tree.order.get(u, 0))
    for u in uses:
        parent = facts.tree.parent(u)
        if isinstance(parent, cst.AssignTarget):
            # `net = net.module...` in the wrapper's own block: unwrapped; anything else rebinds it first.
            rebind = facts.tree.statement_of(u)
            small = rebind.body[0] if isinstance(rebind, cst.SimpleStatementLine) and rebind.body else None
            where = facts.tree.block_of(rebind)
            return (isinstance(small, cst.Assign) and home is not None and where is not None and where[0] is home[0]
                    and any(isinstance(n, cst.Attribute) and n.attr.value == "module" and isinstance(n.value, cst.Name)
                            and n.value.value == name for n in iter_nodes(small.value)))
        if not (isinstance(parent, cst.Attribute) and parent.value is u):
            return False  # called, or handed on: it may run a forward
        if parent.attr.value not in _NO_FORWARD or not isinstance(facts.tree.parent(parent), cst.Call):
            return False
    return False


def _used_only_now_and_then(facts: Facts, call: cst.Call, scope: cst.CSTNode) -> bool:
    """`name = nn.DataParallel(...)` whose every later use in the same scope sits in a loop
    under a throttle (`if step % args.sample_step == 0: x = sampler(z)`): the wrapper
    replicates the model on those steps only (a sampler, an evaluator)."""
    stmt = facts.tree.statement_of(call)
    assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
            and assign.value is call):
        return False
    target = assign.targets[0].target
    uses = [u for u in facts.tree.later_uses(target.value, scope, facts.tree.order.get(target, 0))
            if not isinstance(facts.tree.parent(u), cst.AssignTarget) and not facts.tree.is_inside(u, call)]
    return bool(uses) and all(throttled_in_loop(facts, u, scope) is True for u in uses)


def _has_distributed_path(facts: Facts) -> bool:
    """The file can also wrap the model for multi-process training: torch's, apex's or
    another package's `DistributedDataParallel`, FSDP, or DeepSpeed's `initialize`, built
    here or by a project function it calls (yolov5's `smart_DDP(model)` in
    `utils/torch_utils.py`)."""
    for call in facts.tree.calls():
        q = facts.tree.qualname(call.func) or ""
        last = q.rsplit(".", 1)[-1]
        if last in ("DistributedDataParallel", "FullyShardedDataParallel") or q == "deepspeed.initialize":
            return True
    if facts.project is None:
        return False
    for call in facts.tree.calls():
        ref = facts.cross.project_ref(call.func)
        if ref is not None and not ref.startswith("#") and facts.project.layer_apis(ref) & _DISTRIBUTED_APIS:
            return True
    return False


# What a project helper's summary records when it builds a multi-process wrapper.
_DISTRIBUTED_APIS = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.distributed.fsdp.FullyShardedDataParallel",
                               "torch.distributed.fsdp.fully_shard"})


def _used_outside_training(facts: Facts, fn: cst.FunctionDef) -> bool:
    """In a file that does not train: the top-level function around `fn` is called by this
    file's own code (its tool runs it).  A factory called from nowhere in the file may be
    what a training script builds its model with (score_sde's create_model), and stays."""
    top = fn
    for anc in facts.tree.ancestors(fn):
        if isinstance(anc, (cst.FunctionDef, cst.ClassDef)):
            top = anc
    if not isinstance(top, cst.FunctionDef) or facts.tree.parent(top) is not facts.module:
        return False
    name = top.name.value
    return any(isinstance(c.func, cst.Name) and c.func.value == name and not facts.tree.is_inside(c, top)
               for c in facts.tree.calls())


def _dead_branch(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` sits under `if flag:` where `flag` is a local or module name bound only to False
    (`parallel = False` … `if parallel:`): the branch never runs."""
    cur = node
    for anc in facts.tree.ancestors(node):
        if isinstance(anc, cst.If) and cur is anc.body and isinstance(anc.test, cst.Name):
            bs = facts.bindings.lookup(anc.test.value, anc.test)
            if bs and all(b.how == "expr" and literal_value(b.node) is False for b in bs):
                return True
        cur = anc
    return False


_NOT_TRAINING_FN = re.compile(r"^_?(sample|sampling|test|eval|evaluate|valid|validate|validation|generate|infer|"
                              r"inference|predict|fid|visuali[sz]e|demo)", re.I)


def _cpu_only_branch(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` runs only without CUDA: in the `else:` of `if torch.cuda.is_available():` (or of
    a test on a name such as `use_cuda`), or under `if not torch.cuda.is_available():`."""
    cur = node
    for anc in facts.tree.ancestors(node):
        if isinstance(anc, cst.If):
            test = anc.test
            negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
            inner = test.expression if negated else test
            cuda_test = any(
                (isinstance(n, cst.Call) and call_name(n) == "is_available"
                 and "cuda" in (facts.tree.qualname(n.func) or dotted(n.func) or ""))
                or (isinstance(n, cst.Name) and re.search(r"cuda|gpu", n.value, re.I))
                for n in iter_nodes(inner)
            ) and not isinstance(inner, (cst.BooleanOperation, cst.Comparison))
            if cuda_test and ((cur is anc.orelse and not negated) or (cur is anc.body and negated)):
                return True
        if isinstance(anc, (cst.FunctionDef, cst.ClassDef)):
            break
        cur = anc
    return False
