"""PF504 audio-decoded-as-float64: soundfile decodes to float64 and the samples are cast to
float32."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, make_kwarg
from perflint.analysis import Facts, call_name, get_arg, has_splat, literal_value
from perflint.rules.base import FixClass, Rule, Violation


_F32_NAMES = {"numpy.float32", "numpy.single", "torch.float32", "torch.float"}
_F32_STRINGS = {"float32", "f4", "<f4", "=f4", "single"}
# Methods that keep the values and the dtype (views, moves, copies).
_EXACT_METHODS = {
    "reshape", "squeeze", "unsqueeze", "transpose", "swapaxes", "flatten", "ravel", "copy", "permute", "t",
    "contiguous", "clone", "detach", "cpu", "cuda", "pin_memory", "flip",
}
_EXACT_FUNCS = {"numpy.ascontiguousarray", "numpy.squeeze", "numpy.transpose", "numpy.flip", "numpy.copy",
                "numpy.pad", "numpy.expand_dims", "numpy.stack", "numpy.concatenate", "numpy.vstack", "numpy.hstack",
                "torch.from_numpy"}
# Arithmetic before the cast: the fix would run it in float32 instead of float64.
_INEXACT_METHODS = {"mean", "sum"}
_INEXACT_FUNCS = {"numpy.mean", "numpy.sum"}
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)
_SHAPE_ATTRS = {"shape", "ndim", "size"}
# An interactive app reads the file a user uploads, once per request: the decode is not in a
# data pipeline, and tens of microseconds per request are nothing next to the model's run.
_APP_FRAMEWORKS = {"gradio", "streamlit", "flask", "fastapi"}


def _device_arg(facts: Facts, arg: cst.Arg) -> bool:
    """An argument of `.to(...)` that moves without changing the dtype."""
    if arg.keyword is not None:
        return arg.keyword.value in ("device", "non_blocking")
    q = facts.tree.qualname(arg.value.func if isinstance(arg.value, cst.Call) else arg.value) or ""
    return not q.startswith("torch.") or q == "torch.device"


def _is_f32(facts: Facts, expr: cst.BaseExpression) -> bool:
    if literal_value(expr) in _F32_STRINGS:
        return True
    return facts.tree.qualname(expr) in _F32_NAMES


class _Flow:
    """Where the decoded samples go: the float32 conversions they reach (and whether only
    value-preserving steps come before each), and whether they have any other use."""

    def __init__(self) -> None:
        self.conversions: dict[cst.CSTNode, bool] = {}  # conversion node → exact path
        self.other_use = False


def _follow(facts: Facts, node: cst.CSTNode, exact: bool, flow: _Flow, depth: int = 0) -> None:
    """Follow the value of `node` (float64 samples) up the expression tree to a float32
    conversion; anything else is an `other_use`."""
    if depth > 8:
        flow.other_use = True
        return
    parent = facts.tree.parent(node)
    if isinstance(parent, cst.Subscript) and parent.value is node:
        return _follow(facts, parent, exact, flow, depth + 1)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        attr = parent.attr.value
        if attr == "T":
            return _follow(facts, parent, exact, flow, depth + 1)
        call = facts.tree.parent(parent)
        if not isinstance(call, cst.Call) or call.func is not parent:
            flow.other_use = True
            return
        if attr == "astype":
            dt = get_arg(call, "dtype", 0)
            if dt is not None and _is_f32(facts, dt.value):
                flow.conversions[call] = exact
                return
        elif attr == "float" and not call.args:
            flow.conversions[call] = exact
            return
        elif attr in ("to", "type"):
            if any(_is_f32(facts, a.value) or facts.tree.qualname(a.value) == "torch.FloatTensor" for a in call.args):
                flow.conversions[call] = exact
                return
            if attr == "to" and not has_splat(call) and all(_device_arg(facts, a) for a in call.args):
                return _follow(facts, call, exact, flow, depth + 1)  # a device move keeps the dtype
        elif attr in _EXACT_METHODS:
            return _follow(facts, call, exact, flow, depth + 1)
        elif attr in _INEXACT_METHODS:
            return _follow(facts, call, False, flow, depth + 1)
        flow.other_use = True
        return
    if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
        call = facts.tree.parent(parent)
        if isinstance(call, cst.Call) and call.args and call.args[0] is parent:
            q = facts.tree.qualname(call.func) or ""
            if q in ("torch.tensor", "torch.as_tensor", "numpy.asarray", "numpy.array", "numpy.ascontiguousarray"):
                dt = get_arg(call, "dtype", 1)
                if dt is not None and _is_f32(facts, dt.value):
                    flow.conversions[call] = exact
                    return
                if dt is None and not has_splat(call):
                    return _follow(facts, call, exact, flow, depth + 1)
            elif q in ("torch.FloatTensor", "numpy.float32"):
                flow.conversions[call] = exact
                return
            elif q in _EXACT_FUNCS:
                return _follow(facts, call, exact, flow, depth + 1)
            elif q in _INEXACT_FUNCS:
                return _follow(facts, call, False, flow, depth + 1)
        flow.other_use = True
        return
    if isinstance(parent, cst.Element) and isinstance(facts.tree.parent(parent), (cst.List, cst.Tuple)):
        return _follow(facts, facts.tree.parent(parent), exact, flow, depth + 1)  # np.stack([x, …]), torch.tensor([x])
    if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, _ARITHMETIC):
        return _follow(facts, parent, False, flow, depth + 1)
    if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1 \
            and isinstance(parent.targets[0].target, cst.Name):
        return _follow_name(facts, parent.targets[0].target, parent, exact, flow, depth + 1)
    flow.other_use = True


def _follow_name(facts: Facts, target: cst.Name, site: cst.CSTNode, exact: bool, flow: _Flow, depth: int) -> None:
    """Every later use of the name bound at `site`."""
    scope = facts.tree.scope_of(target)
    uses = [n for n in facts.tree.later_uses(target.value, scope, facts.tree.order.get(target, 0))
            if facts.tree.scope_of(n) is scope and _is_variable_read(facts, n)]
    reached = False
    for aug in facts.tree.nodes_within(scope, cst.AugAssign):
        if isinstance(aug.target, cst.Name) and aug.target.value == target.value \
                and any(b.site is site for b in facts.bindings.lookup(target.value, aug)):
            flow.other_use = True  # `x *= gain`: in-place arithmetic, in float32 after the fix
    for use in uses:
        if not any(b.site is site for b in facts.bindings.lookup(use.value, use)):
            continue
        reached = True
        parent = facts.tree.parent(use)
        if isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value in _SHAPE_ATTRS:
            call = facts.tree.parent(parent)
            if not (isinstance(call, cst.Call) and call.func is parent):
                continue  # x.shape, x.ndim, x.size: the same for either dtype
        if isinstance(parent, cst.Arg) and isinstance(facts.tree.parent(parent), cst.Call) and \
                isinstance(facts.tree.parent(parent).func, cst.Name) and facts.tree.parent(parent).func.value == "len" \
                and not facts.bindings.lookup("len", use):
            continue
        _follow(facts, use, exact, flow, depth)
    if not reached:
        flow.other_use = True
    # A name used in another function (a closure, a global) is not followed.
    if any(n.value == target.value and facts.tree.scope_of(n) is not scope
           and target.value not in facts.bindings.scopes.get(facts.tree.scope_of(n), {})
           for n in facts.tree.index[cst.Name] if n is not target and facts.tree.is_inside(n, scope) and _is_variable_read(facts, n)):
        flow.other_use = True


def _is_variable_read(facts: Facts, name: cst.Name) -> bool:
    """A read of a variable: not an attribute's name, a keyword, a parameter or a store."""
    parent = facts.tree.parent(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    if isinstance(parent, (cst.Arg, cst.Param)) and (getattr(parent, "keyword", None) is name or
                                                      getattr(parent, "name", None) is name):
        return False
    if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName)):
        return False
    return not _is_store(facts, name)


def _is_store(facts: Facts, name: cst.Name) -> bool:
    node: cst.CSTNode = name
    parent = facts.tree.parent(node)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.StarredElement)):
        node, parent = parent, facts.tree.parent(parent)
    if isinstance(parent, cst.AssignTarget):
        return parent.target is node
    if isinstance(parent, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr, cst.CompFor)):
        return getattr(parent, "target", None) is node
    if isinstance(parent, cst.AsName):
        return True
    return False


class AudioDecodedAsFloat64(Rule):
    """
    ## What it does
    Flags `soundfile.read(...)` (`sf.read`, `from soundfile import read`) and
    `SoundFile.read(...)` (on `f` from `with sf.SoundFile(path) as f:`) called without
    `dtype` (so they decode to float64, their default) whose samples are then turned into
    float32: `torch.from_numpy(x).float()`, `.to(torch.float32)`, `torch.tensor(x,
    dtype=torch.float32)`, `torch.FloatTensor(x)`, `x.astype(np.float32)`,
    `np.asarray(x, dtype=np.float32)` … directly or after slicing, reshaping, a device move,
    a rename, a mean or arithmetic.

    ## Why is this bad?
    The file is decoded into a float64 array (twice the memory of float32) that is then
    copied once more to float32. libsndfile decodes straight to float32 just as well.
    Measured on this project's 2-core CPU (torch 2.13, soundfile 0.14.0, libsndfile 1.2.2,
    mono 16 kHz, file in the page cache, `python benchmarks/audio_decode_dtype.py`), read
    plus `torch.from_numpy(x).float()`: 16-bit WAV 65 → 59 µs (1 s clip, 1.10×), 143 →
    121 µs (4 s, 1.17×), 1226 → 819 µs (30 s, 1.50×); 16-bit FLAC 1.05–1.17× (the FLAC
    decoder dominates); float WAV 1.6–4.5×. Per example in a DataLoader worker, so it adds
    up over an epoch; no GPU was available to measure end-to-end training.

    ## Example
    ```python
    wav, sr = sf.read(path)
    wav = torch.from_numpy(wav).float()
    ```

    ## Use instead
    ```python
    wav, sr = sf.read(path, dtype="float32")
    wav = torch.from_numpy(wav).float()
    ```

    ## Fix safety
    The fix adds `dtype="float32"` to the call.
    **Safe** when the samples reach exactly one float32 conversion through value-preserving
    steps only (indexing, slicing, `.T`, reshapes, device moves, a rename) and have no other
    use besides `len(x)`, `x.shape`, `x.ndim`, `x.size`. Then the result is bit-identical:
    libsndfile converts integer PCM to float by scaling each sample by a power of two
    (1/2^(bits−1)), which is exact in float32 for 8-, 16- and 24-bit PCM, and for 32-bit
    PCM or float64 files the one rounding to float32 is the same one numpy's cast makes.
    Verified bit for bit (float64 decode cast to float32 against the direct float32 decode)
    for WAV PCM_U8/16/24/32, FLOAT and DOUBLE, FLAC 16/24-bit, Ogg Vorbis and MP3 with
    libsndfile 1.2.2 (`benchmarks/audio_decode_dtype.py` prints the check), and for 16-bit
    WAV in the test suite.
    **Unsafe** otherwise: arithmetic or a mean before the cast now runs in float32 (results
    differ in the last bits), and other uses of the array see float32 instead of float64.

    ## Applies to
    Any file that uses soundfile; no torch version or device condition. Not in an interactive
    app (a file that imports gradio, streamlit, flask or fastapi): it reads the file a user
    uploads, once per request, outside any data pipeline.

    ## References
    - python-soundfile `soundfile.read` documentation (`dtype='float64'` default)
    - libsndfile `sf_read_float` / `sf_read_double` (normalised integer → float conversion)
    - Measured: `python benchmarks/audio_decode_dtype.py` (figures above)
    """

    code = "PF504"
    name = "audio-decoded-as-float64"
    summary = "soundfile decodes to float64 and the samples are cast to float32"
    fix_class = FixClass.SAFE_OR_UNSAFE
    tokens = (b"soundfile",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if _APP_FRAMEWORKS & {full.split(".", 1)[0] for full in facts.tree.imports.aliases.values()}:
            return  # a web UI's handler: one read per request (so-vits-svc's webUI.py)
        reads = [(c, "soundfile.read") for c in facts.tree.calls_to("soundfile.read")]
        reads += [(c, "SoundFile.read") for c in facts.tree.calls() if _soundfile_object_read(facts, c)]
        for call, what in sorted(reads, key=lambda r: facts.tree.order.get(r[0], 0)):
            dtype_pos, out_pos = (4, 7) if what == "soundfile.read" else (1, 4)
            if has_splat(call) or get_arg(call, "dtype", dtype_pos) is not None or get_arg(call, "out", out_pos) is not None:
                continue
            flow = _Flow()
            parent = facts.tree.parent(call)
            if what == "SoundFile.read":
                # `f.read()` returns the array itself.
                if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1 \
                        and isinstance(parent.targets[0].target, cst.Name):
                    _follow_name(facts, parent.targets[0].target, parent, True, flow, 1)
                else:
                    _follow(facts, call, True, flow)
            elif isinstance(parent, cst.Subscript) and parent.value is call:
                if literal_value(_index(parent)) != 0:
                    continue
                _follow(facts, parent, True, flow)
            elif isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1:
                target = parent.targets[0].target
                if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != 2:
                    continue
                first = target.elements[0].value
                if not isinstance(first, cst.Name):
                    continue
                _follow_name(facts, first, parent, True, flow, 1)
            else:
                continue
            if not flow.conversions:
                continue
            safe = not flow.other_use and len(flow.conversions) == 1 and all(flow.conversions.values())
            new = add_arg(call, make_kwarg("dtype", '"float32"'))
            plan = (self.safe if safe else self.unsafe)('Decode to float32 with `dtype="float32"`', {call: new})
            why = ("the same values bit for bit" if safe else
                   "the array is also used as float64 or computed on before the cast: check it in float32")
            yield Violation(
                call,
                f'`{what}` decodes to float64 (its default) and the samples are then cast to '
                f'float32: pass `dtype="float32"` to decode straight to float32 ({why}; measured 1.1–1.5× '
                "faster reads of 16-bit WAV)",
                plan,
            )


def _soundfile_object_read(facts: Facts, call: cst.Call) -> bool:
    """`f.read(...)` on `f` bound to `soundfile.SoundFile(...)` (`with ... as f` or `f = ...`)."""
    if call_name(call) != "read" or not isinstance(call.func, cst.Attribute) or not isinstance(call.func.value, cst.Name):
        return False
    bs = facts.bindings.lookup(call.func.value.value, call.func.value)
    return len(bs) == 1 and bs[0].how in ("expr", "with") and isinstance(bs[0].node, cst.Call) \
        and facts.tree.qualname(bs[0].node.func) == "soundfile.SoundFile"


def _index(sub: cst.Subscript) -> cst.BaseExpression | None:
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    return sub.slice[0].slice.value
