"""PF5 — data pipelines and distributed training."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.edits import code, parse_expr, remove_arg
from perflint.analysis import Facts, call_name, get_arg, has_splat, iter_nodes, literal_value
from perflint.rules import register
from perflint.rules.base import Rule, Violation
from perflint.rules.precision import (
    enclosing_block,
    forward_range,
    insert_after_imports,
    is_model_call,
    words,
    wrap_in_with,
)

# ----------------------------------------------------------------------------------------
# PF501 — slow-convolution
# ----------------------------------------------------------------------------------------

_SHORT_KERNEL = 64  # taps; below this, direct convolution is as fast as FFT or faster
_WINDOW_FUNCS = {
    "numpy.ones", "numpy.zeros", "numpy.full", "numpy.hanning", "numpy.hamming", "numpy.bartlett",
    "numpy.blackman", "numpy.kaiser", "numpy.arange", "numpy.linspace", "numpy.empty",
    "scipy.signal.get_window",
}


def _short_literal(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether `expr` is provably a short array: a small list literal, `np.array([...])`,
    `np.ones(5) / 5`, a window of literal length …"""
    if depth > 4:
        return False
    if isinstance(expr, (cst.List, cst.Tuple)):
        return len(expr.elements) <= _SHORT_KERNEL
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.Multiply) and isinstance(expr.left, (cst.List, cst.Tuple)):
            n = literal_value(expr.right)
            return isinstance(n, int) and len(expr.left.elements) * n <= _SHORT_KERNEL
        return _short_literal(facts, expr.left, depth + 1) or _short_literal(facts, expr.right, depth + 1)
    if isinstance(expr, cst.Call) and expr.args:
        q = facts.qualname(expr.func) or ""
        first = expr.args[0].value
        if q in ("numpy.array", "numpy.asarray"):
            return _short_literal(facts, first, depth + 1)
        if q in _WINDOW_FUNCS:
            n = literal_value(expr.args[-1].value if q == "scipy.signal.get_window" else first)
            if isinstance(n, (int, float)) and not isinstance(n, bool):
                return n <= _SHORT_KERNEL
            if isinstance(first, (cst.Tuple, cst.List)) and len(first.elements) == 1:
                m = literal_value(first.elements[0].value)
                return isinstance(m, int) and m <= _SHORT_KERNEL
        return False
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        return bool(bs) and all(b.how == "expr" and _short_literal(facts, b.node, depth + 1) for b in bs)  # type: ignore[arg-type]
    return False


_PIPELINE_ROOTS = {
    "torch", "torchaudio", "torchvision", "librosa", "soundfile", "audiomentations", "torch_audiomentations",
    "pedalboard", "pyroomacoustics", "tensorflow", "datasets", "webdataset", "speechbrain", "nemo", "espnet",
    "lhotse", "audiotools",
}
_PIPELINE_WORDS = re.compile(
    r"(^|_)(rirs?|irs?|impulse|reverb\w*|audio|wavs?|waveform|speech|echo|room|augment\w*|__getitem__|"
    r"__call__|__iter__|dataset|transform|collate)(_|s|$)"
)


def _in_data_pipeline(facts: Facts, call: cst.Call) -> bool:
    """A training-data file (imports torch, an audio or data library) or an audio/augmentation
    context (names of the enclosing function, class or arguments)."""
    if any(v.split(".", 1)[0] in _PIPELINE_ROOTS for v in facts.imports.aliases.values()):
        return True
    names = [code(a.value) for a in call.args[:2]]
    fn = facts.enclosing_function(call)
    if fn is not None:
        names.append(fn.name.value)
    cls = facts.enclosing_class(call)
    if cls is not None:
        names.append(cls.name.value)
    return any(_PIPELINE_WORDS.search(part) for n in names for part in re.split(r"\W+", n.lower()) if part)


def _fftconvolve_name(facts: Facts) -> tuple[str, bool]:
    """How to spell `scipy.signal.fftconvolve` here, and whether `import scipy.signal` is needed."""
    aliases = facts.imports.aliases
    for local, full in sorted(aliases.items()):
        if full == "scipy.signal.fftconvolve":
            return local, False
    for local, full in sorted(aliases.items()):
        if full == "scipy.signal":
            return f"{local}.fftconvolve", False
    if _top_level_imports(facts, "scipy.signal"):
        return "scipy.signal.fftconvolve", False
    return "scipy.signal.fftconvolve", True


def _top_level_imports(facts: Facts, module: str) -> bool:
    """Whether a top-level `import <module>` (no alias) binds it."""
    for stmt in facts.module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if alias.asname is None and code(alias.name) == module:
                            return True
    return False


@register
class SlowConvolution(Rule):
    """
    ## What it does
    Flags `np.convolve(x, ir)` and `scipy.signal.convolve(..., method="direct")`: direct
    (O(N·M)) convolution, typically of a signal with a long impulse response in an audio
    augmentation pipeline. `scipy.signal.convolve` with its default `method="auto"` is never
    flagged: it already switches to FFT for long kernels. Only data-pipeline code is
    checked: files that import torch, torchaudio, librosa, soundfile, audiomentations … or
    calls inside audio/augmentation code (`__getitem__`, `__call__`, a function, class or
    argument named after audio, waveforms, impulse responses, reverb, augmentation), so
    numerical code such as polynomial products stays quiet. Kernels that are provably short
    (list literals, `np.ones(5)`, windows of at most 64 taps) are left alone.

    ## Why is this bad?
    Measured (float32, 64 000-sample signal, 16 000-sample IR — 1 s at 16 kHz):
    `np.convolve` 113 ms and `scipy.signal.convolve(method="direct")` 111 ms against 2.0 ms
    for `scipy.signal.fftconvolve` and 2.7 ms for `scipy.signal.convolve` (auto), with
    identical output up to rounding. In a DataLoader worker that is the difference between a
    data-bound and a GPU-bound run.

    ## Example
    ```python
    wet = np.convolve(audio, rir)[: len(audio)]
    ```

    ## Use instead
    ```python
    wet = scipy.signal.fftconvolve(audio, rir)[: len(audio)]
    ```

    ## Fix safety
    **Unsafe.** For `mode="full"` (the default) the call becomes `scipy.signal.fftconvolve`
    (adding `import scipy.signal` when needed, and dropping `method=`). The result equals
    the direct one only up to FFT rounding (`numpy.allclose`, not bit-identical), integer
    inputs now give a float array, and N-d inputs that `np.convolve` rejects are accepted.
    `mode="same"`/`"valid"` are never rewritten: `np.convolve(..., "same")` returns
    max(M, N) samples while scipy returns len(in1) (verified: 8 vs 5). A file that did not
    import scipy before now needs it installed: add it to the project's dependencies.

    ## Applies to
    Any file (torch or not) that uses NumPy or SciPy convolution.

    ## References
    - SciPy `scipy.signal.convolve` / `choose_conv_method` documentation
    - Measured (SciPy, float32, a 1 s signal and a 1 s impulse response at 16 kHz):
      `scipy.signal.convolve` (auto → FFT) 2.7 ms, `fftconvolve` 2.0 ms, `numpy.convolve`
      113.2 ms, `convolve(method="direct")` 111.3 ms; FFT on float64 8.5 ms
    """

    code = "PF501"
    name = "slow-convolution"
    summary = "direct O(N·M) convolution where FFT convolution is much faster"
    fix_class = "unsafe"
    tokens = (b"convolve",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        found: list[tuple[cst.Call, str, bool]] = []
        for call in facts.calls():
            q = facts.qualname(call.func)
            if q == "numpy.convolve":
                kind = "np"
            elif q == "scipy.signal.convolve":
                method = get_arg(call, "method", 3)
                if method is None or literal_value(method.value) != "direct":
                    continue
                kind = "direct"
            else:
                continue
            if has_splat(call) or not _in_data_pipeline(facts, call):
                continue
            a, v = get_arg(call, "a" if kind == "np" else "in1", 0), get_arg(call, "v" if kind == "np" else "in2", 1)
            if a is None or v is None or _short_literal(facts, a.value) or _short_literal(facts, v.value):
                continue
            mode = get_arg(call, "mode", 2)
            fixable = mode is None or literal_value(mode.value) == "full"
            found.append((call, kind, fixable))
        if not found:
            return
        name, needs_import = _fftconvolve_name(facts)
        replacements: dict = {}
        for call, kind, fixable in found:
            if not fixable:
                continue
            new = call
            if kind == "direct":
                new = remove_arg(new, get_arg(new, "method", 3))  # type: ignore[arg-type]
            replacements[call] = new.with_changes(func=parse_expr(name))
        if replacements and needs_import:
            extra = insert_after_imports(facts, "import scipy.signal", after_settings=False)
            if extra is None:
                replacements = {}
            else:
                replacements.update(extra)
        plan = self.unsafe("Use `scipy.signal.fftconvolve`", replacements) if replacements else None
        for call, kind, fixable in found:
            what = "`np.convolve`" if kind == "np" else '`scipy.signal.convolve(method="direct")`'
            yield Violation(
                call,
                f"{what} convolves directly in O(N·M): for long kernels such as impulse responses use "
                "`scipy.signal.fftconvolve` (or `scipy.signal.convolve`, which picks FFT itself); "
                "measured 111 ms → 2 ms for a 1 s IR at 16 kHz",
                plan if fixable else None,
            )


# ----------------------------------------------------------------------------------------
# PF502 — accumulation-without-no-sync
# ----------------------------------------------------------------------------------------

DDP = "torch.nn.parallel.DistributedDataParallel"
_PURE_CALLS = {"len", "int", "min", "max", "abs"}


def _ddp_binding(facts: Facts, expr: cst.BaseExpression) -> cst.Call | None:
    """The `DistributedDataParallel(...)` call `expr` is unconditionally bound to."""
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
    elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        bs = facts.self_attr_bindings(expr)
    else:
        return None
    if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].node, cst.Call):
        return None
    node = bs[0].node
    if facts.qualname(node.func) != DDP or bs[0].site is None:
        return None
    scope = facts.scope_of(bs[0].site)
    for a in facts.ancestors(bs[0].site):
        if a is scope:
            break
        if isinstance(a, (cst.If, cst.Try, cst.For, cst.While, cst.With, cst.Match)):
            return None  # only wrapped on some runs: `no_sync` would not exist on the others
    return node


def _static_graph_possible(call: cst.Call) -> bool:
    if any(a.star == "**" for a in call.args):
        return True
    arg = get_arg(call, "static_graph")
    return arg is not None and literal_value(arg.value) is not False


def _pure(expr: cst.BaseExpression) -> bool:
    for n in iter_nodes(expr):
        if isinstance(n, cst.Call):
            if not (isinstance(n.func, cst.Name) and n.func.value in _PURE_CALLS):
                return False
        elif isinstance(n, (cst.Lambda, cst.NamedExpr, cst.Await, cst.Yield, cst.Subscript, cst.ListComp,
                            cst.GeneratorExp, cst.DictComp, cst.SetComp)):
            return False
    return True


def _read_names(expr: cst.BaseExpression) -> set[str]:
    out = set()
    for n in iter_nodes(expr):
        if isinstance(n, (cst.Name, cst.Attribute)):
            text = code(n)
            out.add(text.split(".", 1)[0])
    return out


def _assigned_names(stmt: cst.CSTNode) -> set[str]:
    out = set()
    for n in iter_nodes(stmt):
        targets = []
        if isinstance(n, cst.Assign):
            targets = [t.target for t in n.targets]
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr)):
            targets = [n.target]
        elif isinstance(n, cst.AsName):
            targets = [n.name]
        for t in targets:
            for m in iter_nodes(t):
                if isinstance(m, cst.Name):
                    out.add(m.value)
        if isinstance(n, (cst.Global, cst.Nonlocal)):
            out.add("*")
    return out


@register
class AccumulationWithoutNoSync(Rule):
    """
    ## What it does
    Flags the `.backward()` call of a gradient-accumulation loop on a DistributedDataParallel
    model — backward on every iteration, the optimizer step only under a `% k` condition — in
    a file that never uses `no_sync()`.

    ## Why is this bad?
    DDP all-reduces gradients after every backward. With accumulation over k micro-batches,
    k − 1 of those all-reduces are wasted: all-reduce is linear, so reducing once at the step
    gives the same gradients. The performance tuning guide: "`no_sync()` should be applied to
    first N-1 iterations of gradient accumulation". Not measured yet (no multi-GPU
    measurement); the saving is (k − 1)/k of the gradient communication.

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / k
        loss.backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        with contextlib.nullcontext() if (i + 1) % k == 0 else model.no_sync():
            loss = criterion(model(x), y) / k
            loss.backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Fix safety
    **Unsafe.** The fix wraps the forward *and* the backward (the DDP docstring: "The forward
    pass should be included inside the context manager, or else gradients will still be
    synchronized") in `model.no_sync()` on the steps that do not call the optimizer, adding
    `import contextlib` if needed. It is only offered when:
    the model name is bound unconditionally to `DistributedDataParallel(...)` in this file
    (a model wrapped only on multi-GPU runs has no `no_sync` on the others); that call has no
    `static_graph` argument and no `**kwargs` (`static_graph=True` with `no_sync()` fails with
    "expect_autograd_hooks_ INTERNAL ASSERT FAILED", and once unblocked silently stops
    all-reducing, pytorch #143580); the step condition is a side-effect-free expression whose
    names are not reassigned between the forward and the condition (it is evaluated twice);
    and forward, loss and backward sit in the same block as the condition. Parameters can
    still differ from the original by all-reduce rounding (one reduction of a sum instead of a
    sum of reductions). FSDP needs `set_requires_gradient_sync` instead and is not handled.

    ## Applies to
    All torch versions with DDP; multi-process training (the file constructs
    `torch.nn.parallel.DistributedDataParallel`).

    ## References
    - PyTorch performance tuning guide, "Skip unnecessary all-reduce if training with
      DistributedDataParallel and gradient accumulation"
    - `torch.nn.parallel.DistributedDataParallel.no_sync` docstring
    - pytorch issue #143580 (`static_graph=True` with `no_sync()`)
    """

    code = "PF502"
    name = "accumulation-without-no-sync"
    summary = "DDP gradient accumulation all-reduces on every micro-batch"
    fix_class = "unsafe"
    tokens = (b"DistributedDataParallel",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.calls_to(DDP) or words(facts).name_contains("no_sync", "set_requires_gradient_sync"):
            return
        found = []
        for call in facts.calls():
            if call_name(call) != "backward" or not facts.is_backward_call(call):
                continue
            ctx = facts.iteration_context(call)
            if ctx is None or ctx.kind != "train" or not isinstance(ctx.node, (cst.For, cst.While)):
                continue
            guard = self._accumulation_guard(facts, ctx.node)
            if guard is None or not self._loop_uses_ddp(facts, ctx.node):
                continue
            found.append((call, ctx.node, guard))
        if not found:
            return
        ctx_name, needs_import = self._nullcontext(facts)
        for call, loop, guard in found:
            plan = None
            repl = self._rewrite(facts, call, guard, ctx_name)
            if repl is not None and needs_import:
                extra = insert_after_imports(facts, "import contextlib", after_settings=False)
                repl = None if extra is None or set(extra) & set(repl) else {**repl, **extra}
            if repl is not None:
                plan = self.unsafe("Skip the all-reduce on accumulation steps with `no_sync()`", repl)
            yield Violation(
                call,
                "gradient accumulation on a DDP model all-reduces after every backward; run the "
                "forward and backward of the non-step iterations under `model.no_sync()`",
                plan,
            )

    @staticmethod
    def _loop_uses_ddp(facts: Facts, loop: cst.CSTNode) -> bool:
        """A model called in the loop is the DDP model, or may be (a parameter, unresolved)."""
        for c in facts.calls_within(loop):
            if not is_model_call(facts, c):
                continue
            if _ddp_binding(facts, c.func) is not None:
                return True
            if isinstance(c.func, cst.Name):
                bs = facts.lookup(c.func.value, c.func)
                if not bs or all(b.how == "param" for b in bs):
                    return True
                if any(b.how == "expr" and isinstance(b.node, cst.Call) and facts.qualname(b.node.func) == DDP for b in bs):
                    return True
        return False

    @staticmethod
    def _accumulation_guard(facts: Facts, loop: cst.CSTNode) -> cst.If | None:
        """The `if step % k …:` that holds the loop's optimizer step (and no unguarded step)."""
        guard = None
        for c in facts.calls_within(loop):
            if not facts.is_optimizer_step(c):
                continue
            ctx = facts.iteration_context(c)
            if ctx is not None and ctx.node is loop:
                return None  # a step every iteration: no accumulation
            outer_if = None
            for a in facts.ancestors(c):
                if a is loop or isinstance(a, (cst.FunctionDef, cst.Lambda, cst.For, cst.While)):
                    break
                if isinstance(a, cst.If):
                    outer_if = a
            if outer_if is None or not any(
                isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo)
                for n in iter_nodes(outer_if.test)
            ):
                continue
            if guard is not None and guard is not outer_if:
                return None
            guard = outer_if
        return guard

    @staticmethod
    def _nullcontext(facts: Facts) -> tuple[str, bool]:
        for local, full in sorted(facts.imports.aliases.items()):
            if full == "contextlib.nullcontext":
                return f"{local}()", False
        for local, full in sorted(facts.imports.aliases.items()):
            if full == "contextlib":
                return f"{local}.nullcontext()", False
        return "contextlib.nullcontext()", True

    @staticmethod
    def _rewrite(facts: Facts, backward: cst.Call, guard: cst.If, ctx_name: str) -> dict | None:
        block, start, end, first = forward_range(facts, backward, include_backward=True)
        if block is None or first is None:
            return None
        model = first.func
        ddp = _ddp_binding(facts, model)
        if ddp is None or _static_graph_possible(ddp):
            return None
        where = enclosing_block(facts, guard)
        if where is None or where[0] is not block or where[1] <= end:
            return None
        body = list(block.body)
        test = guard.test
        if not _pure(test):
            return None
        reads = _read_names(test)
        for st in body[start:where[1]]:
            changed = _assigned_names(st)
            if "*" in changed or changed & reads:
                return None
        # Every backward of the loop must be inside the wrapped range.
        for c in facts.calls_within(block):
            if facts.is_backward_call(c) and not any(facts.is_inside(c, st) for st in body[start:end + 1]):
                return None
        test_code = code(test.with_changes(lpar=[], rpar=[])) if not isinstance(test, (cst.BooleanOperation, cst.IfExp)) else f"({code(test)})"
        item = f"{ctx_name} if {test_code} else {code(model)}.no_sync()"
        new_body = body[:start] + [wrap_in_with(body[start:end + 1], item)] + body[end + 1:]
        return {block: block.with_changes(body=new_body)}


# ----------------------------------------------------------------------------------------
# PF503 — data-parallel
# ----------------------------------------------------------------------------------------


@register
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
    All torch versions; multi-GPU CUDA code.

    ## References
    - `torch.nn.DataParallel` documentation
    - PyTorch performance tuning guide, "Use DistributedDataParallel instead of DataParallel"
    """

    code = "PF503"
    name = "data-parallel"
    summary = "nn.DataParallel instead of DistributedDataParallel"
    tokens = (b"DataParallel",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in facts.calls_to("torch.nn.DataParallel"):
            yield Violation(
                call,
                "`nn.DataParallel` runs all GPUs from one process (GIL-bound, replicates the model "
                "every step); use `DistributedDataParallel` launched with `torchrun`",
            )
