"""PF406 cudnn-benchmark-not-enabled: conv net trained on CUDA without cudnn.benchmark (or
benchmark with determinism)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg, iter_nodes, literal_value
from perflint.analysis.summary import WIDE_CONV
from perflint.analysis.syntax import patch_embedding
from perflint.names import dotted
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import is_model_call, is_training_file, torch_module_name, words
from perflint.rules.precision.helpers import (
    CONV_APIS,
    TORCHVISION_CLASSIFIER,
    first_torch_import,
    has_conv_layers,
    insert_setting,
    layer_qualnames,
    settings_near,
    variable_input_shapes,
)


def _frozen(facts: Facts, call: cst.Call) -> bool:
    """The model built by `call` is frozen: `.requires_grad_(False)` chained on it or called on
    the name it is bound to, or `p.requires_grad = False` over that name's parameters."""
    node: cst.CSTNode = call
    while True:  # up the chain `vgg16(...).features[:16].cuda().eval()`
        parent = facts.tree.parent(node)
        if isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is node:
            node = parent
            continue
        if isinstance(parent, cst.Call) and parent.func is node:
            if call_name(parent) == "requires_grad_" and parent.args and literal_value(parent.args[0].value) is False:
                return True
            node = parent
            continue
        break
    assign = facts.tree.parent(node)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
        return False
    target = dotted(assign.targets[0].target)
    return bool(target) and target in _frozen_names(facts)


def _frozen_names(facts: Facts) -> frozenset[str]:
    """The names whose parameters the file freezes: `name.requires_grad_(False)`, or
    `p.requires_grad = False` in a loop over `name.parameters()` (computed once a file)."""
    memo = facts.__dict__.get("_frozen_names_memo")
    if memo is not None:
        return memo
    names: set[str] = set()
    for c in facts.tree.calls():
        if call_name(c) == "requires_grad_" and isinstance(c.func, cst.Attribute) \
                and c.args and literal_value(c.args[0].value) is False:
            name = dotted(c.func.value)
            if name:
                names.add(name)
    for loop in facts.tree.index[cst.For]:
        it = loop.iter
        if isinstance(it, cst.Call) and call_name(it) == "parameters" and isinstance(it.func, cst.Attribute):
            name = dotted(it.func.value)
            if name and name not in names and any(
                    isinstance(n, cst.Assign) and literal_value(n.value) is False and any(
                        isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                        for t in n.targets)
                    for n in iter_nodes(loop.body)):
                names.add(name)
    memo = frozenset(names)
    facts.__dict__["_frozen_names_memo"] = memo
    return memo


def _first_conv_call(facts: Facts) -> cst.Call | None:
    """The first convolution layer (or torchvision classifier) the file builds or calls, a
    trained one before a frozen one (a perceptual-loss feature network)."""
    candidates = [c for c in facts.tree.calls()
                  if (facts.tree.qualname(c.func) or "") in CONV_APIS or TORCHVISION_CLASSIFIER.match(facts.tree.qualname(c.func) or "")]
    best = min(candidates, key=lambda c: (_frozen(facts, c), facts.tree.order[c])) if candidates else None
    if best is None:
        # A model picked by name (`ARCHS[args.arch](...)`, `models.__dict__[arch]()`).
        for call in facts.tree.calls():
            if isinstance(call.func, (cst.Subscript, cst.Call)) and any(
                    q in CONV_APIS or TORCHVISION_CLASSIFIER.match(q) for q in facts.kinds.calls.factory_layer_apis(call.func)):
                return call
    if best is None and facts.project is not None:
        # The layers are built in another module: point at the model the file builds there.
        for call in facts.tree.calls():
            ref = facts.cross.project_ref(call.func)
            if ref is not None and not ref.startswith("#") and _builds_convs(facts.project.layer_apis(ref)):
                return call
    return best


def _first_trained_model_call(facts: Facts) -> cst.Call | None:
    """The first model call of a training loop: where a model handed in by the callers
    (`train_one_epoch(model, ...)`) runs its convolutions."""
    loops = facts.loops.training_loops()
    calls = [c for loop in loops for c in facts.tree.calls_within(loop) if is_model_call(facts, c)]
    return min(calls, key=lambda c: facts.tree.order[c]) if calls else None


def _builds_convs(apis) -> bool:
    """The same test as `has_conv_layers`: a convolution API, or a torchvision classifier."""
    return bool(set(apis) & CONV_APIS) or any(TORCHVISION_CLASSIFIER.match(q) for q in apis)


_CONV1D_APIS = {"torch.nn.Conv1d", "torch.nn.ConvTranspose1d", "torch.nn.LazyConv1d", "torch.nn.LazyConvTranspose1d",
                 "torch.nn.functional.conv1d", "torch.nn.functional.conv_transpose1d", "torch.conv1d"}
_SEQUENCE_WORDS = ("lengths", "seq_len", "src_len", "tgt_len", "max_len", "padding_mask", "attention_mask",
                   "key_padding_mask", "x_mask", "src_mask", "mel_len", "text_len")


def _sequence_convs(facts: Facts) -> bool:
    """The convolutions are 1-D over sequences whose length changes per batch (the file keeps
    per-batch lengths or padding masks), or all pointwise (kernel size 1, like the 1×1 convs
    of a TTS or ASR model or a point-cloud network's shared MLPs, here or in the project's
    model classes): `cudnn.benchmark` would re-tune for every new length and gain
    nothing on a pointwise GEMM."""
    convs = [c for c in facts.tree.calls() if (facts.tree.qualname(c.func) or "") in CONV_APIS]
    if any(TORCHVISION_CLASSIFIER.match(q) for q in layer_qualnames(facts)):
        return False  # a library model: no view of its kernels
    pointwise = all(literal_value((get_arg(c, "kernel_size", 2) or cst.Arg(cst.Name("x"))).value)
                    in (1, (1, 1), (1, 1, 1))
                    or patch_embedding(c, (facts.tree.qualname(c.func) or "").rsplit(".", 1)[-1].lower())
                    for c in convs)
    elsewhere = facts.kinds.calls.project_layer_apis
    one_d = all((facts.tree.qualname(c.func) or "") in _CONV1D_APIS for c in convs)
    if elsewhere & CONV_APIS:
        # The project's model classes record whether any of their convolutions is wider than 1,
        # and which convolution APIs they use (a LoRA layer's grouped `F.conv1d`).
        if pointwise and WIDE_CONV not in elsewhere:
            return True
        return one_d and elsewhere & CONV_APIS <= _CONV1D_APIS and words(facts).name_contains(*_SEQUENCE_WORDS)
    if not convs:
        return False
    if pointwise:
        return True
    return one_d and words(facts).name_contains(*_SEQUENCE_WORDS)


def _cudnn_flag_assignments(facts: Facts, flag: str) -> list[cst.Assign]:
    out = []
    for node in facts.tree.index[cst.Assign]:
        for t in node.targets:
            if isinstance(t.target, cst.Attribute) and facts.tree.qualname(t.target) == f"torch.backends.cudnn.{flag}":
                out.append(node)
    return out


class CudnnBenchmarkNotEnabled(Rule):
    """
    ## What it does
    Flags, once per file, a CUDA training file with convolution layers that never sets
    `torch.backends.cudnn.benchmark`, reported at the first convolution layer (or
    torchvision classifier) the file builds: the layers the setting speeds up (when the
    layers are built in another module of the project, at the model the file builds from
    it, e.g. `model = Net()`). Also flags
    `cudnn.benchmark = True` set in the same block as `cudnn.deterministic = True` or
    `torch.use_deterministic_algorithms(True)` (reported at the `benchmark = True`
    assignment).

    ## Why is this bad?
    With `benchmark = False` (the default) cuDNN picks convolution algorithms by heuristic;
    with `True` it times the candidates once per input shape and keeps the fastest. For
    fixed input shapes that is a one-off cost for faster convolutions; the gain is
    workload-dependent. On an H100 80GB (torch 2.11, `python benchmarks/rule_effects.py`;
    results in `benchmarks/results/h100/rule_effects/`), a fp32 6-layer conv net training
    step took 9.64 ms either way (1.00×): the heuristic already chose well there. Setting it
    together with determinism flags is contradictory: the PyTorch reproducibility notes say
    reproducible runs need `benchmark = False`, since the timed choice can differ from run
    to run.

    ## Example
    ```python
    import torch
    model = torchvision.models.resnet50().cuda()
    ```

    ## Use instead
    ```python
    import torch
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda()
    ```

    ## Fix safety
    **Unsafe.** Benchmarking makes algorithm choice, and so results, vary between runs, and
    every new input shape triggers a new round of timing (slow with variable shapes). The fix
    inserts `torch.backends.cudnn.benchmark = True` once, after the file's imports, set off
    by a blank line (as for PF405).
    The rule is silent when the file shows signs of variable input shapes (`pad_sequence`,
    packed sequences, random-size crops or resizes, custom `collate_fn`/`batch_sampler`,
    detection models, 1-D convolutions next to per-batch lengths or padding masks, also when
    they are all in the project's model classes: litgpt's LoRA layers apply a grouped
    `F.conv1d` to token sequences, and its fine-tuning scripts name `max_seq_length`;
    Opacus's private training, whose batches are Poisson-sampled by default and split into
    pieces of varying size by `BatchMemoryManager`), when
    every convolution is pointwise (kernel size 1) or a patch embedding (stride equal to the
    kernel size, a vision transformer's: disjoint patches projected, a matrix product), or any
    determinism setting. No fix for the benchmark/deterministic
    conflict: which of the two the user wants is unknown. The conflict is reported in a file
    that trains, or in a function the file never calls (a seeding helper a training script
    imports); not in an inference or evaluation script (`demo.py`, `test.py` setting both
    before their forward passes).

    ## Applies to
    All torch versions; CUDA code only. A model picked by name (`ARCHS[args.arch](...)`,
    `torchvision.models.__dict__[arch]()`) counts with the layers of every choice.
    Off by default (`extend-select = ["PF406"]`): the only measured effect is 1.00× (above),
    and on whole public repositories no rule change had seen, strict reviews counted 9 right
    of 37 findings at sampling (sets AJ to AS: 5 of 11, 1 of 1, 3 of 17, 0 of 8). The layers
    it finds are mostly 3×3 convolutions at common sizes, the case measured above, and
    which shapes the heuristic gets wrong cannot be told from the code.

    ## References
    - PyTorch performance tuning guide, "Enable cuDNN auto-tuner"
    - PyTorch reproducibility notes (`docs/source/notes/randomness.rst`)
    """

    code = "PF406"
    name = "cudnn-benchmark-not-enabled"
    summary = "conv net trained on CUDA without cudnn.benchmark (or benchmark with determinism)"
    fix_class = FixClass.UNSAFE
    default = False  # whole-repository reviews: 9 right of 37 at sampling (see "Applies to")
    tokens = (b"cuda", b"accelerator", b"device", b"benchmark")  # CUDA code, or the benchmark/deterministic conflict

    def check(self, facts: Facts) -> Iterator[Violation]:
        yield from self._conflicts(facts)
        anchor = first_torch_import(facts)
        if anchor is None or not facts.devices.is_cuda_code or not is_training_file(facts):
            return
        w = words(facts)
        if w.name_contains("deterministic") or any("CUBLAS_WORKSPACE_CONFIG" in v for v in w.strings) or _cudnn_flag_assignments(facts, "benchmark"):
            return
        if any(
            isinstance(a.value, cst.Name) and a.value.value == "cudnn" or
            (isinstance(a.value, cst.Attribute) and a.value.attr.value == "cudnn")
            for a in facts.tree.index[cst.Attribute] if a.attr.value == "benchmark"
        ) or "cudnn" in {s.lower() for s in w.strings} or w.name_contains("cudnn_benchmark"):
            return
        if any(a.keyword is not None and a.keyword.value == "benchmark" for c in facts.tree.calls() for a in c.args):
            return  # e.g. Lightning's Trainer(benchmark=...)
        if not has_conv_layers(facts) or variable_input_shapes(facts) or _sequence_convs(facts):
            return
        near, imported = settings_near(facts)
        if near & {"cudnn_benchmark", "deterministic"}:
            return  # set (or ruled out) by the entry point or a base class's module
        tn = torch_module_name(facts, top_level=True)
        fix = None
        if tn is not None and not imported:  # file-wide settings go into the entry point only
            r = insert_setting(facts, f"{tn}.backends.cudnn.benchmark = True", tn)
            if r is not None:
                fix = self.unsafe("Add `torch.backends.cudnn.benchmark = True`", r)
        conv = _first_conv_call(facts) or _first_trained_model_call(facts)
        what = "the convolution layers of the models it trains" if conv is None \
            else "this convolution layer" if facts.tree.qualname(conv.func) in CONV_APIS \
            else "the convolution layers of this model"
        if conv is not None and _frozen(facts, conv):
            what = "this frozen network's convolutions (it is not trained, but its forward runs every step)"
        yield Violation(
            conv or anchor,
            f"CUDA training runs {what} without `torch.backends.cudnn.benchmark = True`: with fixed "
            "input shapes the autotuner picks faster convolution algorithms ("
            + ("a process-wide setting: add it once in the script that runs training, which imports this module)"
               if imported else "a file-wide setting: add it once after the imports)"),
            fix,
        )

    def _conflicts(self, facts: Facts) -> Iterator[Violation]:
        det_stmts = [facts.tree.statement_of(a) for a in _cudnn_flag_assignments(facts, "deterministic")
                     if literal_value(a.value) is True]
        for call in facts.tree.calls_to("torch.use_deterministic_algorithms"):
            arg = get_arg(call, "mode", 0)
            if arg is not None and literal_value(arg.value) is True:
                det_stmts.append(facts.tree.statement_of(call))
        if not det_stmts:
            return
        det_blocks = {id(facts.tree.parent(s)) for s in det_stmts}
        trains = None
        for assign in _cudnn_flag_assignments(facts, "benchmark"):
            if literal_value(assign.value) is True and id(facts.tree.parent(facts.tree.statement_of(assign))) in det_blocks:
                if trains is None:
                    trains = is_training_file(facts)
                if not trains and not _for_importers(facts, assign):
                    continue  # an inference or evaluation script: forward-only, nothing to slow down
                yield Violation(
                    assign,
                    "`cudnn.benchmark = True` next to a determinism setting: the determinism flag keeps "
                    "cuDNN to its slower deterministic algorithms while benchmarking makes runs differ anyway; "
                    "drop the determinism flag for speed, or set `benchmark = False` if reproducibility is the goal",
                )


def _for_importers(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` sits in a function the file itself never calls (`utils.set_seed`): it is there
    for the files that import it, and one of them may train."""
    fn = facts.tree.enclosing_function(node)
    while fn is not None and facts.tree.enclosing_function(fn) is not None:
        fn = facts.tree.enclosing_function(fn)
    return fn is not None and not facts.tree.calls_named(fn.name.value)
