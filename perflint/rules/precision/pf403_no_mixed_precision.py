"""PF403 no-mixed-precision: CUDA training step without autocast."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.rules.host_sync.helpers import CLOCKS
from perflint.analysis import Facts, call_name, iter_nodes
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import (
    enclosing_block,
    forward_range,
    is_model_call,
    optimizes_inputs_only,
    runs_on_cpu_by_default,
    script_device,
    torch_module_name,
    updates_weights,
    words,
    wrap_in_with,
)
from perflint.rules.precision.helpers import (
    FRAMEWORK_PRECISION,
    casts_to_low_precision,
    grad_scaler_name,
    layer_qualnames,
    settings_near,
    uses_training_framework,
)


def _helper_forward_call(facts: Facts, backward: cst.Call) -> cst.Call | None:
    """The nearest call before `backward`, in its block, of a function of this file that runs
    the model it is handed (`loss = step_loss(model, batch, device)`)."""
    where = enclosing_block(facts, backward)
    if where is None or isinstance(where[0], cst.Module):
        return None
    block, bi = where
    scope = facts.tree.scope_of(backward)
    for st in reversed(list(block.body)[:bi + 1]):
        found = [n for n in iter_nodes(st) if isinstance(n, cst.Call) and facts.tree.scope_of(n) is scope
                 and n is not backward and facts.kinds.calls.helper_runs_model(n)]
        if found:
            return found[0]
    return None


def script_device_test(facts: Facts, at: cst.CSTNode, region: cst.CSTNode | None = None,
                       models_only: bool = False) -> str | None:
    """See `script_device`; only the test."""
    return script_device(facts, at, region, models_only)[0]


def _bf16_reaches_numpy(facts: Facts, block: cst.IndentedBlock, start: int, end: int) -> bool:
    """A statement after the wrapped range hands a tensor the range computes to numpy
    (`np.argmax(output.detach().cpu().numpy())`, `np.mean(output)`): under bf16 autocast that
    tensor is bfloat16, which numpy has no type for ("Got unsupported ScalarType BFloat16"),
    so the rewrite would break the step (Opacus's image-classifier tutorial). A `.float()` or
    `.item()` on the way is fine."""
    body = list(block.body)
    bound = {n.value for st in body[start:end + 1] for a in iter_nodes(st) if isinstance(a, (cst.Assign, cst.AugAssign, cst.AnnAssign))
             for t in (a.targets if isinstance(a, cst.Assign) else [a]) for n in iter_nodes(t.target) if isinstance(n, cst.Name)}

    def tensor_of_range(expr: cst.BaseExpression) -> bool:
        while True:  # down a chain of `.detach()`, `.cpu()`, `.data`, `[...]`
            if isinstance(expr, cst.Name):
                return expr.value in bound
            if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
                if expr.func.attr.value in ("float", "double", "item", "tolist", "to", "type", "long", "int", "argmax"):
                    return False
                expr = expr.func.value
            elif isinstance(expr, (cst.Attribute, cst.Subscript)):
                expr = expr.value
            else:
                return False

    for st in body[end + 1:]:
        for c in iter_nodes(st):
            if not isinstance(c, cst.Call):
                continue
            if isinstance(c.func, cst.Attribute) and c.func.attr.value == "numpy" and tensor_of_range(c.func.value):
                return True
            if (facts.tree.qualname(c.func) or "").startswith("numpy.") and any(tensor_of_range(a.value) for a in c.args):
                return True
    return False


def _moves_to_a_device(facts: Facts, loop: cst.CSTNode) -> bool:
    """The function that holds the training loop moves something to a device (`.to(...)`,
    `.cuda()`, a `device=` argument), itself, in a function of this file it calls in the
    loop, or in the code of this file that calls it (`train(model, opt, loader)` after
    `model.to(device)`); a loop at module level counts as moving. A helper of which none of
    this holds trains on whatever device its model and batches come on: on the CPU, in a
    file whose other helpers use CUDA (Dive-into-DL-PyTorch's `train_ch3` beside `train_ch5`)."""
    fn = facts.tree.enclosing_function(loop)
    if fn is None:
        return True

    def moves(scope: cst.CSTNode | None) -> bool:
        for c in facts.tree.calls_within(scope or facts.module):
            if scope is None and facts.tree.enclosing_function(c) is not None:
                continue  # the module's own code, not its functions'
            if call_name(c) in ("to", "cuda") or any(a.keyword is not None and a.keyword.value == "device"
                                                      for a in c.args):
                return True
        return False

    def called_name(c: cst.Call) -> str | None:  # `helper(...)`, `self.helper(...)`
        f = c.func
        return f.value if isinstance(f, cst.Name) else f.attr.value if isinstance(f, cst.Attribute) else None

    if moves(fn):
        return True
    for c in facts.tree.calls_within(loop):
        if any(g is not fn and moves(g) for g in facts.tree.functions_by_name.get(called_name(c) or "", ())):
            return True
    return any(moves(facts.tree.enclosing_function(c)) for c in facts.tree.calls()
               if called_name(c) == fn.name.value and not facts.tree.is_inside(c, fn))


# Graph learning libraries: sparse message passing and host-side graph batching.
_GRAPH_LIBRARIES = frozenset({"torch_geometric", "torch_scatter", "torch_sparse", "torch_cluster", "pyg_lib", "dgl",
                              "ogb"})
# Environment libraries of reinforcement learning (`import gymnasium as gym`).
_RL_ENVIRONMENTS = frozenset({"gym", "gymnasium", "envpool", "procgen", "pettingzoo", "isaacgym", "dm_control",
                              "ale_py", "atari_py", "minigrid", "vizdoom"})
_PRECISION_WORDS = re.compile(
    r"(^|[_-])(fp16|bf16|mixed_precision|half_precision)([_-]|$)"
    r"|^(--?)?((use|enable|enabled|with|no|disable|apply|do|native|torch|cuda)[_-])?amp([_-](dtype|enabled|level|mode|"
    r"scaler|backend|opt_level|type))?$")


# Calls before the first recognised model call that are not themselves a forward pass.
_DATA_PREP_CALLS = {"cuda", "to", "float", "long", "half", "int", "bool", "double", "tensor", "as_tensor", "from_numpy",
                    "randn", "rand", "randint", "zeros", "ones", "full", "arange", "zeros_like", "ones_like",
                    "randn_like", "rand_like", "empty", "get", "item", "len", "range", "next", "min", "max", "train",
                    "eval", "zero_grad", "unsqueeze", "squeeze", "view", "reshape", "permute", "contiguous",
                    "detach", "clone", "cat", "stack", "split", "chunk", "size", "print", "int", "float", "str"}


def _forward_starts_earlier(facts: Facts, block: cst.IndentedBlock, start: int, end: int) -> bool:
    """A statement before the wrapped range binds, from a call that is not data preparation
    (`outputs = net(x)` with `net` not recognised as a model), a name the range reads: the
    forward pass begins before the first recognised model call, and wrapping from there would
    leave that part in fp32 (SSL4MIS: the segmentation net before the discriminator)."""
    body = list(block.body)
    used = {n.value for st in body[start:end + 1] for n in iter_nodes(st) if isinstance(n, cst.Name)}
    for st in body[:start]:
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if not isinstance(small, cst.Assign):
                continue
            names = {n.value for t in small.targets for n in iter_nodes(t.target) if isinstance(n, cst.Name)}
            if not names & used:
                continue
            calls = [n for n in iter_nodes(small.value) if isinstance(n, cst.Call)]
            if any((call_name(c) or "") not in _DATA_PREP_CALLS and not is_model_call(facts, c)
                   and not (facts.tree.qualname(c.func) or "").startswith(
                       ("torch.nn.functional.", "torch.softmax", "torch.sigmoid", "numpy.")) for c in calls):
                return True  # (a recognised model call there is an earlier step's range)
    return False


def _timed_on_fixed_inputs(facts: Facts, loop: cst.CSTNode, first: cst.Call) -> bool:
    """`start = time.time()`, then `for i in range(1000):` stepping a layer on the same
    tensors every time, then `time.time() - start`: a timing benchmark of the step
    (Pyraformer's attention tests time float32 layers against each other); autocast would
    change what it measures. A timed loop that takes new data each iteration still trains."""
    where = facts.tree.block_of(loop)
    if not isinstance(loop, cst.For) or where is None or not first.args:
        return False
    block, i = where
    body = list(block.body)
    clocks = {t.target.value for st in body[max(i - 3, 0):i] if isinstance(st, cst.SimpleStatementLine)
              for small in st.body if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)
              and facts.tree.qualname(small.value.func) in CLOCKS
              for t in small.targets if isinstance(t.target, cst.Name)}
    if not clocks or not any(
        isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Subtract)
        and isinstance(n.right, cst.Name) and n.right.value in clocks
        for st in body[i + 1:i + 4] for n in iter_nodes(st)
    ):
        return False
    bound: set[str] = set()
    for n in iter_nodes(loop):
        targets: list[cst.CSTNode] = []
        if isinstance(n, cst.Assign):
            targets = [t.target for t in n.targets]
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For)):
            targets = [n.target]
        for t in targets:
            bound |= {m.value for m in iter_nodes(t) if isinstance(m, cst.Name)}
    return all(isinstance(a.value, cst.Name) and a.value.value not in bound for a in first.args)


def _stops_after_a_few(loop: cst.CSTNode) -> bool:
    """`for ii, (x, y) in enumerate(loader): …; if ii == 3: break`: a probe of a few batches (a
    course's CPU-against-GPU timing demo), not a training run."""
    if not (isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call) and call_name(loop.iter) == "enumerate"
            and isinstance(loop.target, cst.Tuple) and loop.target.elements
            and isinstance(loop.target.elements[0].value, cst.Name) and isinstance(loop.body, cst.IndentedBlock)):
        return False
    counter = loop.target.elements[0].value.value
    for st in loop.body.body:
        test = st.test if isinstance(st, cst.If) and st.orelse is None else None
        if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value == counter
                and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, (cst.Equal, cst.GreaterThan, cst.GreaterThanEqual))
                and isinstance(test.comparisons[0].comparator, cst.Integer)
                and int(test.comparisons[0].comparator.value) <= 20):
            continue
        body = st.body.body if isinstance(st.body, cst.IndentedBlock) else ()
        if any(isinstance(b, cst.SimpleStatementLine) and any(isinstance(x, cst.Break) for x in b.body) for b in body):
            return True
    return False


def rebuild_block(block: cst.IndentedBlock, ranges: list[tuple[int, int, str]]) -> cst.IndentedBlock:
    """`block` with each `body[start:end + 1]` wrapped in `with <item>:`."""
    body = list(block.body)
    out: list[cst.BaseStatement] = []
    i = 0
    for start, end, item in sorted(ranges):
        out.extend(body[i:start])
        out.append(wrap_in_with(body[start:end + 1], item))
        i = end + 1
    out.extend(body[i:])
    return block.with_changes(body=out)


_BCE = {"torch.nn.BCELoss", "torch.nn.functional.binary_cross_entropy"}
_CUDNN_RNNS = {"torch.nn.LSTM", "torch.nn.GRU", "torch.nn.RNN"}


def _no_bf16_autocast_fix(facts: Facts) -> str | None:
    """Why wrapping the step in bf16 autocast would break this file, or None."""
    called = layer_qualnames(facts)
    if called & _BCE:
        return ("`BCELoss`/`binary_cross_entropy` raise under CUDA autocast (\"unsafe to autocast\"); "
                "compute the loss from logits with `BCEWithLogitsLoss` inside it")
    if any(q.startswith("torch.fft.") for q in called):
        return ("the model runs FFTs (`torch.fft`), and cuFFT takes no bfloat16 (float16 only for "
                "power-of-two sizes, from torch 1.12): under autocast a matmul's half-precision output "
                "reaching them raises; cast it with `.float()` before the FFT first")
    if called & _CUDNN_RNNS:
        return ("under CUDA autocast cuDNN LSTM/GRU/RNN layers run in float16 whatever the dtype asked, "
                f"so the step needs float16 with a `{grad_scaler_name(facts)}`")
    if "torch.nn.DataParallel" in called:
        if "torch.nn.parallel.DistributedDataParallel" in called:
            # DP only as the fallback of a DDP script (AdaBins: `--distributed` in its configs)
            return ("its `nn.DataParallel` fallback runs the replicas in threads that enter autocast without "
                    f"its dtype, so they would run float16 without a `{grad_scaler_name(facts)}`; enable "
                    "autocast on the `DistributedDataParallel` path")
        return ("`nn.DataParallel` runs its replicas in threads that enter autocast without its dtype, "
                f"so they would run float16 without a `{grad_scaler_name(facts)}`; move to DDP first (PF503)")
    return None


class NoMixedPrecision(Rule):
    """
    ## What it does
    Flags a CUDA training step (a loop or step function that calls `.backward()`) whose
    forward pass runs in full fp32, in a file that never uses `torch.autocast` or any other
    mixed-precision mechanism. Reported once per training loop (a GAN's discriminator and
    generator updates count as one step), at its first model call.

    ## Why is this bad?
    Tensor cores run bf16/fp16 matmuls and convolutions far faster than fp32: the PyTorch
    performance tuning guide says mixed precision "offers up to 3x overall speedup on Volta
    and newer GPU architectures". On an H100 80GB (torch 2.11, `python
    benchmarks/rule_effects.py`; results in `benchmarks/results/h100/rule_effects/`): an
    8-layer transformer training step (d 1024, 16 × 512 tokens) took 130.0 ms in fp32 and
    22.8 ms under bf16 autocast (5.7×), while a small BatchNorm conv net went only from 18.5
    to 16.6 ms (1.11×) in NCHW — 7.2 ms once it is also channels_last (PF408). The gain
    depends on how much of the step is matmul/conv work.

    ## Example
    ```python
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = criterion(out, y)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    **Unsafe.** It changes numerics (bf16 has an 8-bit mantissa), and bf16 is only fast on
    compute capability ≥ 8.0 (Ampere and newer); on older GPUs use
    `torch.autocast("cuda", dtype=torch.float16)` with a GradScaler instead (the message names
    `torch.amp.GradScaler` from torch 2.3, `torch.cuda.amp.GradScaler` before)
    (note `torch.cuda.is_bf16_supported()` returns True on pre-Ampere GPUs by default, through
    emulation). The fix wraps the statements from the first model call to the statement that
    produces the tensor passed to `.backward()`, when they sit in the same block as the
    backward call; `backward()` and the optimizer step stay outside, comments stay in place.
    No fix when a later statement of the step hands a tensor of the wrapped range to numpy
    (`np.argmax(output.cpu().numpy())`: numpy has no bfloat16, "Got unsupported ScalarType
    BFloat16", checked on the CPU; a `.float()` or `.item()` on the way is fine).
    No fix when the loss is computed in the backward statement itself, or across blocks, nor
    when the forward runs in a helper of the file (`loss = step_loss(model, batch)`, reported
    at that call).
    No fix either in files whose loss uses `acos`/`asin` (ArcFace / additive-angular-margin
    losses): they clamp the cosine to `1 - 1e-7`, which bf16 rounds to 1.0, so under autocast
    `acos` has an infinite gradient (NaN gradients, reproduced under CPU bf16 autocast), and
    leaving the loss outside autocast feeds a bf16 embedding to fp32 margin weights
    (`expected m1 and m2 to have the same dtype`). No fix, and a message that says why, when
    the file calls `BCELoss`/`binary_cross_entropy` (CUDA autocast raises "unsafe to
    autocast" for them: use `BCEWithLogitsLoss` on logits; a `self.bce = nn.BCELoss()` whose
    attribute the file never reads is not a call), runs FFTs itself or in the project's layers
    (`torch.fft`: cuFFT takes no bfloat16, and float16 only for power-of-two sizes from torch
    1.12; state-spaces' S4), builds `nn.LSTM`/`GRU`/`RNN`
    layers (torch's autocast wrapper for cuDNN RNNs casts them to float16 whatever the dtype
    asked, `aten/src/ATen/cudnn/AutocastRNN.cpp`, so they need a GradScaler), or uses
    `nn.DataParallel` (its replica threads enter `autocast(enabled=...)` without the dtype,
    `torch/nn/parallel/parallel_apply.py`, so they run float16; the message says to move to
    DDP first, or, in a script whose DataParallel is only the fallback of a
    `DistributedDataParallel` path, to enable autocast on that path), or builds custom C++/CUDA ops
    (`torch.utils.cpp_extension`, in the file or a module it imports): kernels dispatched with
    `AT_DISPATCH_FLOATING_TYPES_AND_HALF` raise "not implemented for 'BFloat16'" under bf16
    autocast (stylegan2's fused_bias_act/upfirdn2d). bf16 needs no GradScaler:
    it has fp32's exponent range. When the step runs on the script's own device (`x.to(device)`,
    `.to(args.device)`, a `device` parameter) and that device may not be CUDA, the autocast
    is enabled only there: `enabled=device.type == "cuda"` for a `torch.device`,
    `enabled=torch.device(args.device).type == "cuda"` for a string option (right for either).
    A `--device cpu` run then keeps fp32 — CPU bf16 autocast is its own trade-off: a small
    MLP step ran 3–5× slower than in fp32 on a 2-core CPU without native bf16 (torch 2.13,
    `python benchmarks/cpu_bf16_autocast.py`) — and gets no "CUDA is not available …
    Disabling autocast" warning. The device expression must
    be bound where the `with` goes (in its scope or an enclosing one, before it); a device
    that is CUDA for sure (`.cuda()`, `"cuda"`), or none in reach, gives plain
    `torch.autocast("cuda", …)`, which warns and disables itself on a CPU-only run.

    ## Applies to
    Target torch ≥ 1.10 (`torch.autocast`); CUDA code only. From 1.6 to 1.9, which have
    `torch.cuda.amp` but neither `torch.autocast` nor bfloat16 autocast, the advice is float16
    under `torch.cuda.amp.autocast()` with a `torch.cuda.amp.GradScaler`, with no rewrite (the
    scaler changes the backward and the step too), and none where float16 autocast would not run
    as written (BCELoss, an `acos` margin loss, FFTs, custom C++/CUDA ops, `nn.DataParallel` on 1.6,
    whose replica threads enter autocast only from 1.7). Silent in files that use
    autocast, a GradScaler, Accelerate/Lightning/DeepSpeed/apex's amp or the transformers Trainer,
    precision flags (`amp`, `fp16`, `bf16`, `mixed_precision`), or cast models to
    half/bfloat16. Silent in reinforcement-learning code, files that import an environment
    library (gym, gymnasium, envpool, procgen, pettingzoo, Isaac Gym, dm_control, ALE): their
    policies and value functions are MLPs a few hundred units wide or Atari-sized CNNs, updated
    on minibatches of a few hundred between environment steps, so a step is bound by kernel
    launches and the environment, not by the matrix products autocast speeds up. Strict reviews
    counted 9 of 9 such findings false (CleanRL's DQN, PPO, SAC, TD3 and PQN scripts).
    Not reported for a training loop in a function that moves nothing to a device (no
    `.to(...)`, `.cuda()` or `device=`, nor in a helper it calls in the loop, nor in the code of
    the file that calls it): it trains on the CPU even in a file whose other helpers use
    CUDA (Dive-into-DL-PyTorch's `train_ch3` beside `train_ch5`). Nor when the step's device
    is an option whose default is the CPU (`add_argument('--device', default='cpu')`, then
    `.to(args.device)`, also through `device = torch.device(args.device)`): the run as written
    trains on the CPU (makemore, whose README trains on a laptop).
    Silent too in graph learning, files that import PyG (`torch_geometric`, `torch_scatter`,
    `torch_sparse`), DGL or OGB: a step is sparse gathers and scatters over the graph, small
    node or edge predictors, and host-side sampling and batching of subgraphs, none of which
    autocast speeds up, and scatter kernels of older PyG releases take no half inputs. Strict
    review of OGB's examples counted 9 of 12 such findings false (negligible, or the advice
    would break the loss); the 3 right were full-graph GCNs over millions of nodes.
    Nor in quantization-aware training (a file that uses `torch.quantization`,
    `torch.ao.quantization` or NVIDIA's `pytorch_quantization`): fake quantization simulates
    an int8 grid, and under bfloat16 autocast the fake-quantized values land off that grid
    (RepVGG's QAT script), which defeats what the training is for. Measured on the CPU
    (`python benchmarks/qat_bf16_grid.py`): after a bfloat16 round trip 99.5 % of values
    fake-quantized with scale 0.0123 are off the grid, 72–76 % with 0.05 or 0.1; a
    power-of-two scale keeps them all.
    Nor for a timing benchmark of a step: a clock read just before the loop, the elapsed time
    taken just after it, and the model fed the same tensors on every iteration (Pyraformer's
    tests of its attention layers' time and memory in float32): autocast would change what is
    measured. A timed loop that takes new data each iteration is training, and is reported.
    Nor for a loop that stops after a few batches (`for ii, (x, y) in enumerate(loader):` …
    `if ii == 3: break`): a probe, such as a course's CPU-against-GPU timing demo.

    **Off by default** (`extend-select = ["PF403"]` turns it on). Strict reviews of whole
    public repositories counted 36 right of 98 findings at sampling (sets AJ to BA, each
    sampled before the changes it prompted): most false findings are bf16 advice for models
    and batches too small for autocast to shorten the step (a three-layer CIFAR CNN, a
    ResNet-18 on 32×32 crops, a 200K-parameter character model, a 256-unit LSTM), which
    the code does not state; the right ones are ImageNet-scale and transformer training.
    The gain is real where it applies (5.7× on the transformer step above); where it does
    not, the advice is noise.

    ## References
    - PyTorch performance tuning guide, "Use mixed precision and AMP"
    - PyTorch AMP documentation (`torch.amp`), autocast and GradScaler examples
    """

    code = "PF403"
    name = "no-mixed-precision"
    summary = "CUDA training step without autocast"
    severity = Severity.INFO
    fix_class = FixClass.UNSAFE
    default = False  # whole-repository reviews: 36 right of 98 at sampling (see "Applies to")
    min_torch = (1, 6)  # `torch.cuda.amp`; `torch.autocast` and bf16 autocast from 1.10
    tokens = (b"backward",)
    # Shares a fix pass with: `non_blocking=True` on a copy inside the step (PF105) changes
    # nothing of the autocast region around it.
    fix_commutes_with = frozenset({"PF105"})

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.devices.is_cuda_code or self._has_precision_setup(facts) or optimizes_inputs_only(facts):
            return
        if _RL_ENVIRONMENTS & {full.split(".", 1)[0] for full in facts.tree.imports.aliases.values()}:
            return  # reinforcement learning: small networks between environment steps
        if _GRAPH_LIBRARIES & {full.split(".", 1)[0] for full in facts.tree.imports.aliases.values()}:
            return  # graph learning: sparse message passing, host-side graph batching
        if facts.filewide.references("torch.quantization.", "torch.ao.quantization.", "pytorch_quantization."):
            return  # quantization-aware training: fake quantization simulates an int8 grid that autocast would blur
        near = settings_near(facts)[0]
        if near & {"amp", "scaler"}:
            return  # autocast or a scaler in the modules around (a trainer base class, a wrapper optimizer)
        tn = torch_module_name(facts)
        steps: list[tuple[cst.Call, object, int | None, int | None, cst.Call | None]] = []
        loop_of: dict[cst.Call, cst.CSTNode] = {}
        device_test: dict[cst.Call, str | None] = {}
        for call in facts.tree.calls():
            if not facts.steps.is_backward_call(call) or call_name(call) != "backward":
                continue
            ctx = facts.loops.iteration_context(call)
            if ctx is None or ctx.kind != "train" or not self._updates_weights(facts, ctx.node):
                continue
            if not _moves_to_a_device(facts, ctx.node):
                continue  # a helper that never moves its model or data: it trains on the CPU
            block, start, end, first = forward_range(facts, call)
            if first is None:
                # `loss = step_loss(model, batch, device)`: the forward runs in a helper of
                # this file; reported at that call, without a rewrite.
                first, block = _helper_forward_call(facts, call), None
            if first is None or _timed_on_fixed_inputs(facts, ctx.node, first) or _stops_after_a_few(ctx.node):
                continue
            if runs_on_cpu_by_default(facts, first, ctx.node):
                continue  # `--device` defaults to "cpu": the run as written trains on the CPU
            if block is not None and _forward_starts_earlier(facts, block, start, end):
                block = None  # reported, but the rewrite would leave part of the forward in fp32
            if block is not None and _bf16_reaches_numpy(facts, block, start, end):
                block = None  # reported, but a bf16 tensor would reach numpy
            steps.append((call, block, start, end, first))
            loop_of[first] = ctx.node
            device_test[first] = script_device_test(facts, first, ctx.node)
        if not steps:
            return
        if facts.target_torch < (1, 10):
            yield from _float16_advice(facts, steps, loop_of)
            return
        if words(facts).name_contains("acos", "asin", "arccos", "arcsin"):
            # Margin losses (ArcFace/AAM) clamp to 1 - 1e-7, which bf16 rounds to 1: under
            # autocast acos gets an infinite gradient, and outside it a bf16 embedding meets
            # fp32 margin weights. Report, but offer no rewrite.
            steps = [(c, None, s, e, f) for c, b, s, e, f in steps]
        why_not = _no_bf16_autocast_fix(facts)
        if not why_not and ("cuda_ext" in near or facts.filewide.references("torch.utils.cpp_extension")):
            why_not = ("the model runs custom C++/CUDA extension ops (`torch.utils.cpp_extension`), which often "
                       "dispatch only float32/float16 and raise on bfloat16: check them, or use float16 with a "
                       f"`{grad_scaler_name(facts)}`")
        if why_not:
            steps = [(c, None, s, e, f) for c, b, s, e, f in steps]
        per_block: dict[cst.CSTNode, list[tuple[int, int, str]]] = {}
        for _, block, start, end, first in steps:
            if block is not None and tn is not None:
                # On the script's own device when it may not be CUDA: enabled only on CUDA, so
                # a CPU run keeps fp32 (CPU bf16 autocast is a different trade-off) and gets no
                # "CUDA is not available" warning.
                test = device_test[first]
                enabled = f", enabled={test}" if test else ""
                item = f'{tn}.autocast("cuda", dtype={tn}.bfloat16{enabled})'
                per_block.setdefault(block, []).append((start, end, item))  # type: ignore[arg-type]
        replacements = {b: rebuild_block(b, rs) for b, rs in per_block.items()}  # type: ignore[arg-type]
        plan = self.unsafe("Run forward and loss under bf16 autocast", replacements) if replacements else None
        # One finding per training step (a GAN's discriminator and generator updates share
        # one), at the step's first model call; its fix wraps every forward range.
        seen: set[cst.CSTNode] = set()
        for call, block, start, end, first in sorted(steps, key=lambda s: facts.tree.order[s[4]]):
            if loop_of[first] in seen:
                continue
            seen.add(loop_of[first])
            has_plan = any(b is not None for _, b, _, _, f in steps if loop_of[f] is loop_of[first])
            test = device_test[first]
            enabled = f", enabled={test}" if test else ""
            other = ", so a run on another device keeps fp32" if test else ""
            message = ("CUDA training step without mixed precision: run the forward pass and loss under "
                       f'`torch.autocast("cuda", dtype=torch.bfloat16{enabled})`{other} (Ampere or newer; '
                       f"pre-Ampere GPUs should use float16 with a `{grad_scaler_name(facts)}` instead)")
            if why_not:
                message = ("CUDA training step without mixed precision: run the forward pass under "
                           f"`torch.autocast` — not as a plain rewrite here: {why_not}")
            yield Violation(first, message, plan if has_plan else None)

    @staticmethod
    def _updates_weights(facts: Facts, step: cst.CSTNode) -> bool:
        return updates_weights(facts, step)

    @staticmethod
    def _has_precision_setup(facts: Facts) -> bool:
        w = words(facts)
        return (
            facts.filewide.uses_autocast
            or facts.filewide.uses_grad_scaler
            or w.name_contains("autocast", "gradscaler", "grad_scaler", "loss_scale")
            or uses_training_framework(facts)
            or w.matches(_PRECISION_WORDS)
            or casts_to_low_precision(facts)
            or any(a.keyword is not None and a.keyword.value in ("precision", "mixed_precision")
                   for c in facts.tree.calls() for a in c.args)
            or any(FRAMEWORK_PRECISION.search(v) for v in w.strings)
        )


def _float16_advice(facts: Facts, steps: list, loop_of: dict) -> Iterator[Violation]:
    """Torch 1.6–1.9 has `torch.cuda.amp` but neither `torch.autocast` nor bf16 autocast: the
    advice is float16 with a GradScaler, with no rewrite (the scaler changes the backward and
    the step too).  Silent where float16 autocast would not run as written: a margin loss's
    `acos` (its clamp to 1 - 1e-7 rounds to 1 in float16 as well), `BCELoss` ("unsafe to
    autocast"), FFTs (cuFFT takes float16 only from 1.12), custom C++/CUDA ops, and
    `nn.DataParallel` on 1.6 (its replica threads enter autocast from 1.7 on, pytorch PR
    #43102).  cuDNN RNNs are fine: float16 is what they run."""
    called = layer_qualnames(facts)
    if words(facts).name_contains("acos", "asin", "arccos", "arcsin") or called & _BCE \
            or any(q.startswith("torch.fft.") for q in called) \
            or ("torch.nn.DataParallel" in called and facts.target_torch < (1, 7)) \
            or "cuda_ext" in settings_near(facts)[0] or facts.filewide.references("torch.utils.cpp_extension"):
        return
    seen: set[cst.CSTNode] = set()
    v = "%d.%d" % facts.target_torch[:2]
    for _, _, _, _, first in sorted(steps, key=lambda s: facts.tree.order[s[4]]):
        if loop_of[first] in seen:
            continue
        seen.add(loop_of[first])
        yield Violation(first, "CUDA training step without mixed precision: run the forward pass and loss under "
                               "`torch.cuda.amp.autocast()` and scale the loss with a `torch.cuda.amp.GradScaler` "
                               f"(float16; torch {v} has neither `torch.autocast` nor bfloat16 autocast, which came "
                               "with 1.10)")
