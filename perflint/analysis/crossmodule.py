"""Questions that reach beyond one function or one file: what a project function returns,
what a project class is, which layers it builds, the kinds a parameter receives at its call
sites, whether a function runs once per step of a loop in another file, option defaults
(argparse, config fields) and keyword arguments passed through `**kwargs`.

Every cross-file answer comes from the file's `ProjectView` (None when the file is checked
on its own: then everything here stays unknown, as before).  Unresolved stays unknown.
"""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from perflint.analysis.component import Component

from perflint.analysis.syntax import NOT_LITERAL, call_name, literal_value
from perflint.analysis.vocab import _OPTION_ROOTS
from perflint.names import dotted


class CrossModule(Component):
    """What the other modules of the project say about this file's names, calls and parameters."""

    needs = ("tree", "bindings")

    # -- references into the project ------------------------------------------------------
    def project_ref(self, expr: cst.BaseExpression) -> str | None:
        from perflint.analysis.summary import reference

        return reference(self.facts, expr)

    def instance_class(self, expr: cst.BaseExpression, depth: int = 0) -> str | None:
        """The class (as a reference: "#Local" or an import path) whose instance `expr`
        holds, when it is bound once to a call of a class of this file or the project:
        `agent = PPO(...)`, `self.policy = ActorCritic(...).to(device)`."""
        if depth > 3:
            return None
        if isinstance(expr, cst.Call):
            f = expr.func
            if isinstance(f, cst.Attribute) and f.attr.value in ("to", "cuda", "cpu", "train", "eval", "float", "half"):
                return self.instance_class(f.value, depth + 1)
            name = dotted(f)
            if name is None:
                return None
            head = name.split(".", 1)[0]
            if "." not in name and name in self.tree.classes_by_name:
                return "#" + name
            if head in self.tree.classes_by_name or head in self.tree.functions_by_name:
                return None
            ref = self.project_ref(f)
            last = name.rsplit(".", 1)[-1]
            return ref if ref is not None and last[:1].isupper() else None
        bindings = []
        if isinstance(expr, cst.Name):
            bindings = self.bindings.lookup(expr.value, expr)
        elif isinstance(expr, cst.Attribute):
            bindings = self.bindings.self_attr_bindings(expr)
        if len(bindings) == 1 and bindings[0].how == "expr":
            return self.instance_class(bindings[0].node, depth + 1)
        return None

    def project_call_kinds(self, call: cst.Call) -> set[str]:
        if self.project is None:
            return set()
        ref = self.project_ref(call.func)
        if ref is None or ref.startswith("#"):
            return set()
        return set(self.project.call_kinds(ref))

    def project_class_kinds(self, base: cst.BaseExpression) -> frozenset[str]:
        if self.project is None:
            return frozenset()
        ref = self.project_ref(base)
        if ref is None or ref.startswith("#"):
            return frozenset()
        return self.project.class_kinds(ref)

    def project_attr_kinds(self, node: cst.Attribute) -> set[str] | None:
        """`self.device` / `self.model` set in a base class of another module."""
        if self.project is None or not (isinstance(node.value, cst.Name) and node.value.value == "self"):
            return None
        cls = self.tree.enclosing_class(node)
        seen = 0
        while cls is not None and seen < 5:
            seen += 1
            for base in cls.bases:
                ref = self.project_ref(base.value)
                if ref is None or ref.startswith("#"):
                    continue
                got = self.project.attr_kinds(ref, node.attr.value)
                if got is not None:
                    return set(got)
            cls = self.bindings._local_base_class(cls)
        return None

    def _param_position(self, param: cst.Param, fn: cst.FunctionDef) -> tuple[str, int] | None:
        """(symbol, index among a call's positional arguments) of a parameter of a top-level
        function or of a method of a top-level class ("Class.method"; its callers pass the
        arguments after `self`); index 10000 for a keyword-only one; None for `self` and for
        nested functions."""
        from perflint.analysis.summary import _symbol_of

        symbol = _symbol_of(self.facts, fn)
        if symbol is None:
            return None
        params = fn.params
        positional = [*params.posonly_params, *params.params]
        index = next((i for i, p in enumerate(positional) if p is param), 10_000)
        if "." in symbol and index < 10_000 and not any(dotted(d.decorator) == "staticmethod" for d in fn.decorators):
            index -= 1  # a call on an instance fills the parameters after `self`
        return (symbol, index) if index >= 0 else None

    def project_param_kinds(self, param: cst.Param, fn: cst.FunctionDef) -> set[str]:
        """Kinds every call site in the project passes for `param` (empty unless they agree)."""
        if self.project is None:
            return set()
        pos = self._param_position(param, fn)
        if pos is None:
            return set()
        return set(self.project.param_kinds(pos[0], pos[1], param.name.value))

    def project_param_device(self, param: cst.CSTNode, fn: cst.CSTNode | None) -> set[str]:
        """Device kinds the call sites in the project pass for a device parameter (or for a
        model parameter: where the model was moved): empty when nothing is known,
        "device_unknown" among them when a caller passes something else or is unknown."""
        if self.project is None or not isinstance(param, cst.Param) or not isinstance(fn, cst.FunctionDef):
            return set()
        pos = self._param_position(param, fn)
        if pos is None:
            return set()
        return set(self.project.param_device(pos[0], pos[1], param.name.value))

    def project_kwargs(self, fn: cst.FunctionDef, at: cst.CSTNode) -> dict | None:
        """The `**kwargs` of a top-level function as every call site in the project fills it
        (see `ProjectIndex.kwargs_of`), as expressions: a literal, an option (`args.workers`,
        with the default its caller knows), `__perflint_unknown__` for a value not known, and
        a key some callers leave out as either.  None when a caller is unknown."""
        if self.project is None or fn.params.star_kwarg is None:
            return None
        from perflint.analysis.summary import _symbol_of

        symbol = _symbol_of(self.facts, fn)
        if symbol is None or "." in symbol:
            return None
        got = self.project.kwargs_of(symbol)
        if got is None:
            return None
        out: dict = {}
        for key, state in got.items():
            node = self._kwarg_node(state[1] if state[0] == "some" else state, at)
            if state[0] == "some":
                node = cst.IfExp(test=cst.Name("__perflint_unknown__"), body=node,
                                 orelse=cst.Name("__perflint_missing__"))
                self.tree.parents[node] = at
            out[key] = node
        return out

    def _kwarg_node(self, state: list, at: cst.CSTNode) -> cst.BaseExpression:
        node: cst.BaseExpression
        if state[0] == "v":
            node = cst.parse_expression(repr(state[1]))
        elif state[0] == "o":
            node = cst.parse_expression(state[1])
            self._passed_options[node] = (len(state) > 2, state[2] if len(state) > 2 else None)
        else:
            node = cst.Name("__perflint_unknown__")
        self.tree.parents[node] = at
        return node

    @cached_property
    def _passed_options(self) -> dict:
        """Option expressions a caller passes through `**kwargs` → (found, its default there)."""
        return {}

    def project_step_caller(self, fn: cst.FunctionDef) -> tuple[str, int, str] | None:
        """(file, line, loop kind) when `fn` runs once per step of a loop in another file."""
        if self.project is None:
            return None
        from perflint.analysis.summary import _symbol_of

        symbol = _symbol_of(self.facts, fn)
        if symbol is None:
            return None
        return self.project.step_caller(symbol)

    # -- options --------------------------------------------------------------------------
    @cached_property
    def own_option_defaults(self) -> dict:
        from perflint.analysis.summary import _defaults

        return _defaults(self.facts)

    def option_default(self, node: cst.BaseExpression, callers: bool = False) -> tuple[bool, object]:
        """(True, value) when `node` is an option such as `args.workers`, `cfg.num_workers`
        or `self.args.workers` whose default is known (argparse, a dataclass field, a config
        literal: this file's first, else the project's; with `callers`, also the scripts that
        import this module, where the modules it imports define none); else (False, None)."""
        passed = self._passed_options.get(node) if self._passed_options else None
        if passed is not None:
            return passed  # passed by the callers through `**kwargs`: the default they know
        from perflint.analysis.configfiles import config_value

        got = config_value(self.facts, node)  # `cfg["num_workers"]` of a YAML/JSON file of the project
        if got is not None:
            return got
        if isinstance(node, cst.Name) and self.project is not None and not self.bindings.lookup(node.value, node):
            ref = self.project_ref(node)  # `num_workers=NUM_WORKERS` imported from a project module
            if ref is not None and not ref.startswith("#"):
                return self.project.constant(ref)
            return False, None
        text = dotted(node) if isinstance(node, cst.Attribute) else None
        if text is None:
            return False, None
        parts = text.split(".")
        if parts[0] == "self":
            parts = parts[1:]
        if len(parts) != 2 or not (parts[0] in _OPTION_ROOTS or parts[0].endswith(("args", "cfg", "config", "opt"))):
            return False, None
        name = parts[1]
        own = self.own_option_defaults
        if name in own:
            return True, own[name]
        if self.project is not None:
            return self.project.option_default(name, callers)
        return False, None

    def call_keywords(self, call: cst.Call) -> dict[str, cst.BaseExpression] | None:
        """The keyword arguments of `call` with `**kw` expanded where `kw` is a dict literal,
        `dict(...)`, `{**a, **b}` or a name bound once to one of those and then only
        `.update(...)`d with such values in the same function; None when unknown."""
        out: dict[str, cst.BaseExpression] = {}
        for arg in call.args:
            if arg.star == "**":
                got = self._dict_value(arg.value, call, 0)
                if got is None:
                    return None
                out.update(got)
            elif arg.star == "*":
                return None
            elif arg.keyword is not None:
                out[arg.keyword.value] = arg.value
        return out

    def _dict_value(self, node: cst.BaseExpression, at: cst.CSTNode, depth: int) -> dict | None:
        if depth > 4:
            return None
        if isinstance(node, cst.Dict):
            out: dict = {}
            for el in node.elements:
                if isinstance(el, cst.DictElement):
                    k = literal_value(el.key)
                    if not isinstance(k, str):
                        return None
                    out[k] = el.value
                else:  # `**other`
                    inner = self._dict_value(el.value, at, depth + 1)
                    if inner is None:
                        return None
                    out.update(inner)
            return out
        if isinstance(node, cst.Call) and dotted(node.func) == "dict" and not self.bindings.lookup("dict", node):
            out = {}
            for a in node.args:
                if a.keyword is not None:
                    out[a.keyword.value] = a.value
                elif a.star == "**" or (a.star == "" and a.keyword is None):
                    inner = self._dict_value(a.value, at, depth + 1)
                    if inner is None:
                        return None
                    out.update(inner)
                else:
                    return None
            return out
        if isinstance(node, cst.Name):
            return self._dict_name(node, at, depth)
        return None

    def _dict_name(self, node: cst.Name, at: cst.CSTNode, depth: int) -> dict | None:
        scope = self.tree.scope_of(node)
        bindings = self.bindings.scopes.get(scope, {}).get(node.value, [])
        star = scope.params.star_kwarg if isinstance(scope, cst.FunctionDef) else None
        if not bindings and star is not None and star.name.value == node.value:
            # `def make_loader(root, bs, **kw): return DataLoader(..., **kw)`: what the
            # callers pass.
            base = self.project_kwargs(scope, at)
            site: cst.CSTNode = scope.params
        elif len(bindings) != 1 or bindings[0].how != "expr" or bindings[0].site is None:
            return None
        else:
            site = bindings[0].site
            base = self._dict_value(bindings[0].node, site, depth + 1)
        if base is None:
            return None
        out = dict(base)
        site_order = self.tree.order.get(site, 0)
        at_order = self.tree.order.get(at, 0)
        for use in self.tree.later_uses(node.value, scope, site_order):
            if self.tree.order.get(use, 0) >= at_order:
                break
            if self.tree.is_inside(use, site):
                continue  # the binding's own target
            parent = self.tree.parent(use)
            if isinstance(parent, cst.Attribute) and parent.value is use:
                call = self.tree.parent(parent)
                if not (isinstance(call, cst.Call) and call.func is parent):
                    return None
                if parent.attr.value == "update" and len(call.args) == 1 and not call.args[0].keyword:
                    inner = self._dict_value(call.args[0].value, call, depth + 1)
                    if inner is None:
                        return None
                    if self._maybe_skipped(call, site):
                        # `if use_cuda: kw.update(cuda_kwargs)`: either may hold
                        for k, v in inner.items():
                            out[k] = cst.IfExp(test=cst.Name("__perflint_unknown__"), body=v,
                                               orelse=out.get(k, cst.Name("__perflint_missing__")))
                    else:
                        out.update(inner)
                elif parent.attr.value in ("get", "items", "keys", "values", "copy"):
                    continue
                else:
                    return None
            elif isinstance(parent, cst.Subscript):
                return None
            elif isinstance(parent, cst.Arg) and parent.star == "**":
                continue
            else:
                return None
        return out

    def _maybe_skipped(self, node: cst.CSTNode, since: cst.CSTNode) -> bool:
        for a in self.tree.ancestors(node):
            if a is since or self.tree.is_inside(since, a):
                return False
            if isinstance(a, (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.For, cst.While, cst.IfExp)):
                return True
        return False


def literal_or_default(facts, node: cst.BaseExpression):
    """A literal's value, or an option's known default; NOT_LITERAL otherwise."""
    v = literal_value(node)
    if v is not NOT_LITERAL:
        return v
    found, value = facts.cross.option_default(node)
    return value if found else NOT_LITERAL


__all__ = ["CrossModule", "literal_or_default", "call_name"]
