"""PF501 slow-convolution: direct O(N·M) convolution where FFT convolution is much faster."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.edits import code, parse_expr, remove_arg
from perflint.analysis import Facts, get_arg, has_splat, literal_value
from perflint.analysis.vocab import DATALOADER
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import insert_after_imports


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
        q = facts.tree.qualname(expr.func) or ""
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
        bs = facts.bindings.lookup(expr.value, expr)
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
    aliases = facts.tree.imports.aliases.values()
    roots = {v.split(".", 1)[0] for v in aliases}
    if any(v.split(".", 1)[0] in _PIPELINE_ROOTS - {"torch"} and not _own_package(facts, v) for v in aliases):
        return True
    if "torch" in roots and not (facts.kinds.module_classes and not facts.kinds.dataset_classes) \
            and not _plots_only(facts, roots):
        return True  # (a file of model layers and no dataset: numpy there builds a layer's constants)
    names = [code(a.value) for a in call.args[:2]]
    fn = facts.tree.enclosing_function(call)
    if fn is not None:
        names.append(fn.name.value)
    cls = facts.tree.enclosing_class(call)
    if cls is not None:
        names.append(cls.name.value)
    return any(_PIPELINE_WORDS.search(part) for n in names for part in re.split(r"\W+", n.lower()) if part)


def _own_package(facts: Facts, full: str) -> bool:
    """`full` (an import) names a module of the project, not the library of that name (a
    repository's own `datasets/` package, not Hugging Face's)."""
    return facts.project is not None and facts.project.has_module(full.split(".", 1)[0])


def _plots_only(facts: Facts, roots: set[str]) -> bool:
    """A script that plots (imports matplotlib) and neither defines a Dataset nor builds a
    DataLoader: the curves it smooths are logs of a run, not training data (KPConv's
    `plot_convergence.py`)."""
    return "matplotlib" in roots and not facts.kinds.dataset_classes and not facts.tree.calls_to(DATALOADER)


def _fftconvolve_name(facts: Facts) -> tuple[str, bool]:
    """How to spell `scipy.signal.fftconvolve` here, and whether `import scipy.signal` is needed."""
    aliases = facts.tree.imports.aliases
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


class SlowConvolution(Rule):
    """
    ## What it does
    Flags `np.convolve(x, ir)` and `scipy.signal.convolve(..., method="direct")`: direct
    (O(N·M)) convolution, typically of a signal with a long impulse response in an audio
    augmentation pipeline. `scipy.signal.convolve` with its default `method="auto"` is never
    flagged: it already switches to FFT for long kernels. Only data-pipeline code is
    checked: files that import torchaudio, librosa, soundfile, audiomentations …, or torch
    (unless the file defines model layers and no dataset: there numpy builds a layer's
    constants, such as multiwavelet filter coefficients, once; nor a script that plots with
    matplotlib and neither defines a Dataset nor builds a DataLoader: KPConv's
    `plot_convergence.py` smooths logged curves; a project's own `datasets/` package is not
    Hugging Face's), or
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
    Any file (torch or not) that uses NumPy or SciPy convolution; not in a class's
    `__init__` (a filter built once with the object), nor in a top-level helper that the
    project calls only from constructors, here or in another module (`get_filter(k)` in a
    layer's `__init__`).

    ## References
    - SciPy `scipy.signal.convolve` / `choose_conv_method` documentation
    - Measured (SciPy, float32, a 1 s signal and a 1 s impulse response at 16 kHz):
      `scipy.signal.convolve` (auto → FFT) 2.7 ms, `fftconvolve` 2.0 ms, `numpy.convolve`
      113.2 ms, `convolve(method="direct")` 111.3 ms; FFT on float64 8.5 ms
    """

    code = "PF501"
    name = "slow-convolution"
    summary = "direct O(N·M) convolution where FFT convolution is much faster"
    fix_class = FixClass.UNSAFE
    tokens = (b"convolve",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        found: list[tuple[cst.Call, str, bool]] = []
        for call in facts.tree.calls():
            q = facts.tree.qualname(call.func)
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
            fn = facts.tree.enclosing_function(call)
            if fn is not None and fn.name.value == "__init__" and facts.tree.enclosing_class(fn) is not None:
                continue  # built once with the object (a filter bank in a module's constructor)
            if fn is not None and facts.project is not None and facts.tree.parent(fn) is facts.module \
                    and facts.project.only_while_building(fn.name.value):
                continue  # a helper that only constructors call, here or in another module
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
