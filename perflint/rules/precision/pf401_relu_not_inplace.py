"""PF401 relu-not-inplace: ReLU on a fresh activation could run in place (saves memory, not
time)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, make_kwarg
from perflint.analysis import Binding, Facts, get_arg, has_splat, literal_value
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import words


_NN = "torch.nn."
_F = "torch.nn.functional."
# Ops that return a new tensor and save only their *inputs* (never their output) for backward:
# an in-place ReLU on their output is safe (verified: linear, conv, conv→bn(train), layer_norm,
# gelu, dropout).
_PRODUCER_FUNCS = {
    _F + n for n in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                     "conv_transpose3d", "batch_norm", "layer_norm", "group_norm", "gelu")
} | {"torch.conv1d", "torch.conv2d", "torch.conv3d"}
_PRODUCER_MODULES = {
    _NN + n for n in ("Linear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
                      "ConvTranspose2d", "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d",
                      "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
                      "LazyBatchNorm3d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "GELU")
}
# Dropout returns its input itself in eval mode and for p=0 (verified), so it is transparent:
# what feeds it decides.
_TRANSPARENT_FUNCS = {_F + n for n in ("dropout", "dropout1d", "dropout2d", "dropout3d")}
_TRANSPARENT_MODULES = {_NN + n for n in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d")}
_RELU_FUNCS = {_F + "relu", "torch.relu"}


def _not_inplace(call: cst.Call, pos: int | None) -> bool:
    arg = get_arg(call, "inplace", pos)
    return arg is None or literal_value(arg.value) is False


def _is_store(facts: Facts, name: cst.Name) -> bool:
    """Whether a Name node is a binding target (not a read)."""
    child: cst.CSTNode = name
    parent = facts.tree.parent(name)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        child, parent = parent, facts.tree.parent(parent)
    if isinstance(parent, cst.AssignTarget) and parent.target is child:
        return True
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is child:
        return True
    if isinstance(parent, (cst.AnnAssign, cst.NamedExpr)) and parent.target is child:
        return True
    if isinstance(parent, cst.AsName):
        return True
    return False


def _is_variable_name(facts: Facts, name: cst.Name) -> bool:
    parent = facts.tree.parent(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is name:
        return False
    if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias)):
        return False
    return True


def _other_reads(facts: Facts, binding: Binding, name: str, except_node: cst.CSTNode) -> bool:
    """Whether the value bound by `binding` is read anywhere but at `except_node`."""
    scope = facts.tree.scope_of(except_node)
    for n in words(facts).name_nodes.get(name, ()):
        if n is except_node or not facts.tree.is_inside(n, scope) or not _is_variable_name(facts, n):
            continue
        if _is_store(facts, n):
            continue
        if facts.tree.scope_of(n) is not scope:
            return True  # read from a nested function or lambda: assume the worst
        if any(b is binding for b in facts.bindings.lookup(name, n)):
            return True
    return False


def _module_constructor(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> cst.Call | None:
    """The `nn.X(...)` call an expression is (or is bound to, by a single assignment)."""
    if depth > 4:
        return None
    if isinstance(expr, cst.Call):
        return expr
    bindings: list[Binding] = []
    if isinstance(expr, cst.Name):
        bindings = facts.bindings.lookup(expr.value, expr)
    elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        bindings = facts.bindings.self_attr_bindings(expr)
    if len(bindings) == 1 and bindings[0].how == "expr":
        return _module_constructor(facts, bindings[0].node, depth + 1)  # type: ignore[arg-type]
    return None


def _module_kind(facts: Facts, ctor: cst.Call | None, depth: int = 0) -> tuple[str, cst.Call | None] | None:
    """("producer", None) or ("transparent", None) for an allow-listed module constructor."""
    if ctor is None or depth > 4 or has_splat(ctor):
        return None
    q = facts.tree.qualname(ctor.func) or ""
    if q in _PRODUCER_MODULES:
        return "producer", None
    if q in _TRANSPARENT_MODULES:
        return ("transparent", None) if _not_inplace(ctor, 1) else None
    if q == _NN + "Sequential":
        positional = [a for a in ctor.args if a.keyword is None]
        if positional:
            return _sequential_output_kind(facts, positional, len(positional), depth + 1)
    return None


def _sequential_output_kind(facts: Facts, args: list[cst.Arg], upto: int, depth: int) -> tuple[str, None] | None:
    """Whether the element before position `upto` of a Sequential yields a fresh tensor."""
    i = upto - 1
    while i >= 0:
        if args[i].star:
            return None
        kind = _module_kind(facts, _module_constructor(facts, args[i].value), depth)
        if kind is None:
            return None
        if kind[0] == "producer":
            return kind
        i -= 1  # transparent: the element before it decides
    return None


def fresh_activation(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether `expr` is a new tensor made by an allow-listed op that nothing else reads."""
    if depth > 6:
        return False
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].node, cst.Call):
            return False
        if bs[0].site is None or facts.tree.scope_of(bs[0].site) is not facts.tree.scope_of(expr):
            return False  # bound in an enclosing scope: its other readers are out of view
        if _other_reads(facts, bs[0], expr.value, expr):
            return False
        return fresh_activation(facts, bs[0].node, depth + 1)  # type: ignore[arg-type]
    if not isinstance(expr, cst.Call) or has_splat(expr):
        return False
    q = facts.tree.qualname(expr.func)
    if q is not None:
        if q in _PRODUCER_FUNCS:
            return True
        if q in _TRANSPARENT_FUNCS:
            inner = get_arg(expr, "input", 0)
            return _not_inplace(expr, 3) and inner is not None and fresh_activation(facts, inner.value, depth + 1)
        return False
    if isinstance(expr.func, (cst.Name, cst.Attribute)):
        kind = _module_kind(facts, _module_constructor(facts, expr.func))
        if kind is None:
            return False
        if kind[0] == "producer":
            return True
        inner = get_arg(expr, "input", 0)
        return inner is not None and len(expr.args) == 1 and fresh_activation(facts, inner.value, depth + 1)
    return False


class ReluNotInplace(Rule):
    """
    ## What it does
    Flags `F.relu(x)`, `torch.relu(x)` and `nn.ReLU()` whose input is a fresh activation that
    nothing else reads: the output of a convolution, linear layer, batch/layer/group norm or
    GELU (directly, or through dropout), as a module called in `forward` (`self.conv(x)`), a
    functional call, or the element before `nn.ReLU()` in `nn.Sequential(...)`. The input
    value must have no other read, and an `nn.ReLU` module must be called exactly once.

    ## Why is this bad?
    An out-of-place ReLU allocates a second activation-sized tensor. The gain of
    `inplace=True` is that one transient buffer — memory, not speed: the PyTorch autograd
    notes say "there are very few occasions when in-place operations actually lower memory
    usage by any significant amount". Not measured yet; expect a negligible change in step
    time. The rule is off by default for that reason.

    ## Example
    ```python
    def forward(self, x):
        x = self.bn(self.conv(x))
        return F.relu(x)
    ```

    ## Use instead
    ```python
    def forward(self, x):
        x = self.bn(self.conv(x))
        return F.relu(x, inplace=True)
    ```

    ## Fix safety
    **Unsafe.** `inplace=True` (`torch.relu` becomes `torch.relu_`). Wrong producers raise at
    `backward()` — sigmoid, tanh, exp, softmax and relu save their output (verified:
    "one of the variables needed for gradient computation has been modified by an inplace
    operation"), leaves and views of leaves refuse in-place ops — and a value read again later
    (a residual) silently changes. The rule only fires when the dataflow in this file rules all
    of that out, but it cannot see forward hooks or other code that holds the producer's output
    (files that call `register_forward_hook` are skipped), so the fix stays opt-in.

    ## Applies to
    All torch versions; CPU and CUDA. Not the default rule set.

    ## References
    - PyTorch notes, "In-place operations with autograd" (`docs/source/notes/autograd.rst`)
    - Measured (torch 2.13, CPU): `relu_` after sigmoid, tanh, exp, softmax or relu raises
      "one of the variables needed for gradient computation has been modified by an
      inplace operation"; after linear, conv, batch/layer norm, GELU or dropout it does not
    """

    code = "PF401"
    name = "relu-not-inplace"
    summary = "ReLU on a fresh activation could run in place (saves memory, not time)"
    fix_class = FixClass.UNSAFE
    default = False
    tokens = (b"relu", b"ReLU")
    # Shares a fix pass with: `torch.compile` (PF410) around the model built here changes
    # nothing of `inplace=True`.
    fix_commutes_with = frozenset({"PF410"})

    def check(self, facts: Facts) -> Iterator[Violation]:
        if words(facts).name_contains("register_forward_hook", "register_module_forward_hook"):
            return
        for call in facts.tree.calls():
            q = facts.tree.qualname(call.func)
            if q in _RELU_FUNCS:
                yield from self._functional(facts, call, q)
            elif q == _NN + "ReLU" and not call.args:
                yield from self._module(facts, call)

    def _functional(self, facts: Facts, call: cst.Call, q: str) -> Iterator[Violation]:
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return
        if not fresh_activation(facts, call.args[0].value):
            return
        fix = None
        if q == _F + "relu":
            fix = self.unsafe("Pass `inplace=True`", {call: add_arg(call, make_kwarg("inplace", "True"))})
        elif isinstance(call.func, cst.Attribute):
            new = call.with_changes(func=call.func.with_changes(attr=cst.Name("relu_")))
            fix = self.unsafe("Use `torch.relu_`", {call: new})
        yield Violation(call, self._message(), fix)

    def _module(self, facts: Facts, ctor: cst.Call) -> Iterator[Violation]:
        parent = facts.tree.parent(ctor)
        ok = False
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            seq = facts.tree.parent(parent)
            if isinstance(seq, cst.Call) and facts.tree.qualname(seq.func) == _NN + "Sequential":
                args = list(seq.args)
                i = next(k for k, a in enumerate(args) if a is parent)
                ok = _sequential_output_kind(facts, args, i, 0) is not None
        elif isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            site = self._single_call_site(facts, parent.targets[0].target, parent)
            if site is not None and len(site.args) == 1 and site.args[0].keyword is None and not site.args[0].star:
                ok = fresh_activation(facts, site.args[0].value)
        if ok:
            fix = self.unsafe("Pass `inplace=True`", {ctor: add_arg(ctor, make_kwarg("inplace", "True"))})
            yield Violation(ctor, self._message(), fix)

    @staticmethod
    def _single_call_site(facts: Facts, target: cst.BaseExpression, assign: cst.Assign) -> cst.Call | None:
        """The one place a module bound to `target` is used, when that is a call."""
        uses: list[cst.CSTNode] = []
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            attr = target.attr.value
            if len(facts.bindings.self_attr_bindings(target)) != 1 or attr in words(facts).strings:
                return None  # rebound, or reached by name (getattr, setattr, state-dict keys)
            for a in facts.tree.index[cst.Attribute]:
                if a.attr.value == attr and a is not target:
                    if not (isinstance(a.value, cst.Name) and a.value.value == "self"):
                        return None  # reached from outside the class
                    uses.append(a)
        elif isinstance(target, cst.Name):
            scope = facts.tree.scope_of(assign)
            for n in words(facts).name_nodes.get(target.value, ()):
                if n is target or not facts.tree.is_inside(n, scope) or not _is_variable_name(facts, n):
                    continue
                if _is_store(facts, n):
                    return None
                uses.append(n)
        else:
            return None
        if len(uses) != 1:
            return None
        site = facts.tree.parent(uses[0])
        if isinstance(site, cst.Call) and site.func is uses[0]:
            return site
        return None

    @staticmethod
    def _message() -> str:
        return (
            "ReLU on a fresh activation nothing else reads: `inplace=True` saves one "
            "activation-sized buffer (transient memory, not speed)"
        )
