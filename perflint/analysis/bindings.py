"""Name bindings: what each name (and `self.` attribute) was bound to, and which bindings
reach a use."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from perflint.analysis.component import Component



@dataclass(frozen=True)
class Binding:
    """What a name was bound to: an expression, an element of one, or a parameter."""

    how: str  # "expr" | "unpack" | "iter" | "iter_unpack" | "param" | "with"
    node: cst.CSTNode
    index: tuple[int, ...] = ()
    site: cst.CSTNode | None = None  # the statement that binds

    def value(self) -> cst.BaseExpression | None:
        """The expression this binding gives its name: the assigned one, or the element of
        a tuple or list literal that a target tuple takes apart (`a, b = f(x), g(y)`);
        None when not known (an unpacked call, a starred literal, a parameter, a loop)."""
        if self.how == "expr":
            return self.node  # type: ignore[return-value]
        if self.how == "unpack" and len(self.index) == 1 and isinstance(self.node, (cst.Tuple, cst.List)):
            els = self.node.elements
            if self.index[0] < len(els) and not any(isinstance(e, cst.StarredElement) for e in els):
                return els[self.index[0]].value
        return None



class Bindings(Component):
    """Every binding of a name in its scope (`scopes`: scope → name → bindings) and of a
    `self.` attribute in its class (`attr_bindings`), from one pass over the tree's index;
    a second analysis of the same module shares them (`other`)."""

    needs = ("tree",)

    def __init__(self, facts, other: "Bindings | None" = None) -> None:
        super().__init__(facts)
        if other is not None:
            self.scopes, self.attr_bindings = other.scopes, other.attr_bindings
            return
        self.scopes: dict[cst.CSTNode, dict[str, list[Binding]]] = {}
        self.attr_bindings: dict[cst.ClassDef, dict[str, list[Binding]]] = {}
        index = self.tree.index
        for fn in index[cst.FunctionDef]:
            self._bind_params(fn)
        for node in index[cst.Assign]:
            for target in node.targets:
                self._bind_target(target.target, Binding("expr", node.value, site=node))
        for node in index[cst.AnnAssign]:
            if node.value is not None:
                self._bind_target(node.target, Binding("expr", node.value, site=node))
        for node in index[cst.NamedExpr]:
            self._bind_target(node.target, Binding("expr", node.value, site=node))
        for node in index[cst.For]:
            self._bind_target(node.target, Binding("iter", node.iter, site=node))
        for node in index[cst.CompFor]:
            self._bind_target(node.target, Binding("iter", node.iter, site=node))
        for node in index[cst.With]:
            for item in node.items:
                if item.asname is not None:
                    self._bind_target(item.asname.name, Binding("with", item.item, site=node))
    def _bind_params(self, fn: cst.FunctionDef) -> None:
        params = fn.params
        for p in (*params.posonly_params, *params.params, *params.kwonly_params):
            self.scopes.setdefault(fn, {}).setdefault(p.name.value, []).append(
                Binding("param", p, site=fn)
            )

    def _bind_target(self, target: cst.BaseExpression, binding: Binding) -> None:
        if isinstance(target, cst.Name):
            scope = self.tree.scope_of(target)
            self.scopes.setdefault(scope, {}).setdefault(target.value, []).append(binding)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, el in enumerate(target.elements):
                if isinstance(el, cst.StarredElement):
                    continue
                how = {"expr": "unpack", "iter": "iter_unpack"}.get(binding.how, binding.how)
                self._bind_target(
                    el.value, Binding(how, binding.node, binding.index + (i,), site=binding.site)
                )
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
            if target.value.value == "self":
                cls = self.tree.enclosing_class(target)
                if cls is not None:
                    self.attr_bindings.setdefault(cls, {}).setdefault(target.attr.value, []).append(binding)

    def lookup(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Bindings of `name` that may reach `at`.

        The scope is the innermost function that binds the name (then enclosing ones, then
        the module; class bodies are skipped, as Python does).  Within it, the binding that
        last precedes `at` wins — a loop's target for code in its body, the assignment before
        a use — unless it sits in a branch that may not run, or a later assignment in an
        enclosing loop can carry over into the next iteration; then every candidate counts.
        """
        scope: cst.CSTNode | None = self.tree.scope_of(at)
        while scope is not None:
            if not isinstance(scope, cst.ClassDef) or scope is self.tree.scope_of(at):
                found = self.scopes.get(scope, {}).get(name)
                if found:
                    return self._reaching(found, at)
            if isinstance(scope, cst.Module):
                break
            scope = self.tree.scope_of(scope)
        return []

    def _reaches(self, b: Binding, at: cst.CSTNode) -> bool:
        site = b.site
        if site is None:
            return True
        if isinstance(site, (cst.For, cst.With, cst.FunctionDef)):
            body = site.body
            return self.tree.is_inside(at, body)
        if isinstance(site, cst.CompFor):
            return self.tree.is_inside(at, self.tree.parents.get(site, site)) and not self.tree.is_inside(at, site.iter)
        return self.tree.order.get(site, 0) < self.tree.order.get(at, 0) and not self.tree.is_inside(at, site)

    def _reaching(self, bindings: list[Binding], at: cst.CSTNode) -> list[Binding]:
        if len(bindings) == 1:
            return bindings
        pre = [b for b in bindings if self._reaches(b, at)]
        if not pre:
            return bindings
        last = max(pre, key=lambda b: self.tree.order.get(b.site, 0) if b.site is not None else -1)
        if last.site is None:
            return pre
        common = set(self.tree.ancestors(at)) | {at}
        for a in self.tree.ancestors(last.site):
            if a in common:
                break
            if isinstance(a, (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally, cst.For, cst.While,
                              cst.IfExp, cst.Match)):
                return pre
        out = [last]
        for loop in self.tree.ancestors(at):
            if not isinstance(loop, (cst.For, cst.While)):
                continue
            if last.site is loop or self.tree.is_inside(last.site, loop):
                break  # re-bound inside this loop before the use, every iteration
            for b in bindings:
                if b.site is not None and b is not last and self.tree.is_inside(b.site, loop) and \
                        self.tree.order.get(b.site, 0) > self.tree.order.get(at, 0):
                    out.append(b)
        return out

    def self_attr_bindings(self, node: cst.Attribute) -> list[Binding]:
        if isinstance(node.value, cst.Name) and node.value.value == "self":
            cls = self.tree.enclosing_class(node)
            while cls is not None:
                found = self.attr_bindings.get(cls, {}).get(node.attr.value)
                if found:
                    return found
                cls = self._local_base_class(cls)
        return []

    def _local_base_class(self, cls: cst.ClassDef) -> cst.ClassDef | None:
        for base in cls.bases:
            if isinstance(base.value, cst.Name) and base.value.value in self.tree.classes_by_name:
                other = self.tree.classes_by_name[base.value.value]
                if other is not cls:
                    return other
        return None

