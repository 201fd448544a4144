"""PF303 no-grad-in-eval: `torch.no_grad()` where `torch.inference_mode()` fits."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import parse_expr
from perflint.analysis import Facts, call_name, iter_nodes
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.optim_autograd.helpers import host_only, torch_prefix
from perflint.analysis.vocab import Kind


def _no_grad_items(facts: Facts, with_node: cst.With) -> list[cst.WithItem]:
    out = []
    for item in with_node.items:
        target = item.item.func if isinstance(item.item, cst.Call) else item.item
        if facts.tree.qualname(target) == "torch.no_grad":
            out.append(item)
    return out


_LAZY_STATE = ("register_buffer",)


class NoGradInEval(Rule):
    """
    ## What it does
    Flags `torch.no_grad()` — as a `with` block or a decorator — around evaluation or
    inference code that could use `torch.inference_mode()` instead.

    ## Why is this bad?
    `inference_mode` also disables view tracking and version-counter bumps. The gain is
    marginal: within noise on CPU (8-layer MLP 118.1 µs vs 121.0 µs per forward, torch 2.13),
    3.7 s → 3.6 s for a
    CIFAR-10 evaluation on a GPU (pytorch-ignite #2193). That is why this rule is off by
    default.

    ## Example
    ```python
    @torch.no_grad()
    def evaluate(model, loader):
        return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)
    ```

    ## Use instead
    ```python
    @torch.inference_mode()
    def evaluate(model, loader):
        ...
    ```

    ## Fix safety
    **Unsafe.** Tensors created under `inference_mode` cannot be saved for backward
    ("Inference tensors cannot be saved for backward"), updated in place outside it, or
    given `requires_grad`. Not reported for a block that runs once while the model is
    built (in `__init__`, a `build*`/`setup` method, or a shape probe that runs the model on
    `torch.zeros(...)` to size a layer). Not reported when a tensor created in the block escapes: it is
    returned or yielded, stored on `self` or another object, appended to or stored in a
    container from outside the block, updated in place, or read after the block; nor when a
    module class in the file creates state lazily in `forward` (buffers, caches). Models
    defined elsewhere may still create such state: review the diff.

    ## Applies to
    Target torch ≥ 1.9 (when `inference_mode` appeared).

    ## References
    - `torch.inference_mode` documentation
    - Measured (torch 2.13): a tensor made under `inference_mode` and then used in autograd
      raises "Inference tensors cannot be saved for backward"
    """

    code = "PF303"
    name = "no-grad-in-eval"
    summary = "`torch.no_grad()` where `torch.inference_mode()` fits"
    severity = Severity.INFO
    fix_class = FixClass.UNSAFE
    default = False
    min_torch = (1, 9)
    tokens = (b"no_grad",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        prefix = torch_prefix(facts)
        if self._lazy_state(facts):
            return
        for node in facts.tree.index[cst.With]:
            items = _no_grad_items(facts, node)
            if not items or not self._is_inference(facts, node.body) or self._escapes(facts, node.body, node):
                continue
            if self._runs_once(facts, node):
                continue
            fix = None
            if prefix is not None:
                repl = {it.item: parse_expr(f"{prefix}.inference_mode()") for it in items}
                fix = self.unsafe("Use `torch.inference_mode()`", repl)
            yield Violation(node, "evaluation under `torch.no_grad()` could use `torch.inference_mode()`", fix)
        for fn in facts.tree.index[cst.FunctionDef]:
            for dec in fn.decorators:
                target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
                if facts.tree.qualname(target) != "torch.no_grad":
                    continue
                if not self._is_inference(facts, fn.body) or self._escapes(facts, fn.body, fn):
                    continue
                fix = None
                if prefix is not None:
                    fix = self.unsafe("Use `torch.inference_mode()`",
                                      {dec: dec.with_changes(decorator=parse_expr(f"{prefix}.inference_mode()"))})
                yield Violation(dec, "evaluation under `@torch.no_grad()` could use `@torch.inference_mode()`", fix)

    @staticmethod
    def _runs_once(facts: Facts, node: cst.With) -> bool:
        """A block that runs once while the model is built: in `__init__` / a `build*` or
        `setup` method, or a shape probe (the model run on `torch.zeros(...)`-like input to
        size a layer). Nothing is gained there."""
        fn = facts.tree.enclosing_function(node)
        if fn is not None and (fn.name.value in ("__init__", "setup", "__post_init__")
                               or fn.name.value.lstrip("_").startswith("build")):
            return True
        calls = [n for n in iter_nodes(node.body) if isinstance(n, cst.Call) and facts.kinds.has_kind(n.func, Kind.MODEL)]
        if not calls:
            return False
        for c in calls:
            args = [a.value for a in c.args]
            if not args or not all(isinstance(a, cst.Call) and (facts.tree.qualname(a.func) or "").rsplit(".", 1)[-1]
                                   in ("zeros", "ones", "randn", "rand", "empty", "zeros_like", "ones_like")
                                   for a in args):
                return False
        return True

    @staticmethod
    def _lazy_state(facts: Facts) -> bool:
        """A module class in the file that creates state in forward: inference tensors would stick."""
        for fn in facts.tree.index[cst.FunctionDef]:
            if fn.name.value != "forward":
                continue
            for node in iter_nodes(fn.body):
                if isinstance(node, cst.Call) and call_name(node) in _LAZY_STATE:
                    return True
                if isinstance(node, (cst.Assign, cst.AugAssign)):
                    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, (cst.Attribute, cst.Subscript)):
                            return True
        return False

    @staticmethod
    def _is_inference(facts: Facts, body: cst.CSTNode) -> bool:
        calls = [n for n in iter_nodes(body) if isinstance(n, cst.Call)]
        has_model = any(facts.kinds.has_kind(c.func, Kind.MODEL) for c in calls)
        return has_model

    @staticmethod
    def _escapes(facts: Facts, body: cst.CSTNode, container: cst.CSTNode) -> bool:
        assigned: set[str] = set()
        for node in iter_nodes(body):
            if isinstance(node, (cst.Return, cst.Yield)) and node.value is not None:
                if not host_only(facts, node.value):
                    return True
            if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                host_value = node.value is not None and host_only(facts, node.value)
                for t in targets:
                    for n in iter_nodes(t):
                        if isinstance(n, (cst.Attribute, cst.Subscript)) and n is t:
                            return True  # stored on an object or into a container
                        if isinstance(n, cst.Name) and not (host_value and n is t):
                            assigned.add(n.value)
                    if isinstance(node, cst.AugAssign) and isinstance(t, cst.Name) and not host_only(facts, node.value):
                        return True  # in-place on an outer tensor
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                name = node.func.attr.value
                if name.endswith("_") and not name.startswith("_") and name not in ("item_",):
                    return True  # in-place update (EMA, copy_, …)
                if name in ("append", "extend", "insert", "update", "add", "put", "setdefault"):
                    if not all(host_only(facts, a.value) for a in node.args):
                        return True
        # Names bound in the block and read after it.
        if assigned:
            scope = facts.tree.enclosing_function(container) or facts.module
            end = facts.tree.order.get(container, 0)
            for node in (n for name in sorted(assigned) for n in facts.tree.names_in(scope, name)):
                if not facts.tree.is_inside(node, container):
                    if facts.tree.order.get(node, 0) > end:
                        if _rebinds(facts, node):
                            continue  # `_, a, _ = line.split()` binds `_` again: no read
                        if _host_only_use(facts, node):
                            continue
                        return True
        return False


def _host_only_use(facts: Facts, node: cst.CSTNode) -> bool:
    kinds = facts.kinds.of(node)
    return bool(kinds) and kinds <= {Kind.NUMBER, Kind.NUMPY, Kind.INT}


def _rebinds(facts: Facts, name: cst.Name) -> bool:
    """The name is (part of) an assignment or loop target: bound there, not read."""
    node: cst.CSTNode = name
    parent = facts.tree.parent(node)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node, parent = parent, facts.tree.parent(parent)
    if isinstance(parent, cst.AssignTarget):
        return True
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is node:
        return True
    return isinstance(parent, cst.AnnAssign) and parent.target is node
