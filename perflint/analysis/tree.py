"""The tree: one iterative walk (parents, source order, a per-type index) and the
navigation every analysis uses (ancestors, scopes, statements, blocks)."""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right
from functools import cached_property
from typing import Iterator

import libcst as cst

from perflint.analysis.component import Component
from perflint.names import ImportTable, dotted

Scope = cst.CSTNode  # a Module, FunctionDef, Lambda or ClassDef


# Fields that hold only whitespace, punctuation or comments: never needed by the facts.
_SKIP_FIELDS = {
    "whitespace_before", "whitespace_after", "whitespace_before_args", "whitespace_after_func",
    "whitespace_before_colon", "whitespace_after_colon", "whitespace_after_star",
    "whitespace_after_param", "whitespace_before_params", "whitespace_after_def",
    "whitespace_after_class", "whitespace_before_as", "whitespace_after_as",
    "whitespace_after_import", "whitespace_before_import", "whitespace_after_from",
    "whitespace_after_in", "whitespace_before_in", "whitespace_after_for",
    "whitespace_after_if", "whitespace_before_if", "whitespace_before_else",
    "whitespace_after_else", "whitespace_after_while", "whitespace_after_with",
    "whitespace_after_await", "whitespace_after_return", "whitespace_after_lambda",
    "whitespace_after_del", "whitespace_after_assert", "whitespace_after_raise",
    "whitespace_after_global", "whitespace_after_nonlocal", "whitespace_after_async",
    "whitespace_after_indicator", "whitespace_before_indicator", "whitespace_before_expression",
    "whitespace_after_expression", "whitespace_after_case", "whitespace_after_match",
    "whitespace_before_value", "whitespace_after_value", "whitespace_before_from",
    "whitespace", "lpar", "rpar", "comma", "leading_lines", "lines_after_decorators",
    "header", "footer", "trailing_whitespace", "semicolon", "equal", "colon", "dot",
    "lbracket", "rbracket", "lbrace", "rbrace", "star", "asynchronous", "await",
    "first_line", "empty_lines", "newline", "star_tok",
}
_FIELDS_CACHE: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    fields = _FIELDS_CACHE.get(cls)
    if fields is None:
        fields = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in _SKIP_FIELDS and not f.name.startswith("whitespace")
        )
        _FIELDS_CACHE[cls] = fields
    return fields


_INDEXED = (
    cst.Call, cst.For, cst.While, cst.With, cst.If, cst.FunctionDef, cst.ClassDef,
    cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Import, cst.ImportFrom, cst.Lambda,
    cst.Return, cst.SimpleString, cst.Attribute, cst.Decorator, cst.Assert, cst.Yield,
    cst.Del, cst.CompFor, cst.NamedExpr, cst.Name, cst.BinaryOperation, cst.Subscript,
)

# ----------------------------------------------------------------------------------------


def _iter_expr(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for name in _child_fields(type(n)):
            v = getattr(n, name)
            if isinstance(v, cst.CSTNode):
                stack.append(v)
            elif isinstance(v, (list, tuple)):
                stack.extend(x for x in v if isinstance(x, cst.CSTNode))


def iter_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node under `node` (whitespace and punctuation skipped), node included."""
    return _iter_expr(node)




_SCOPE_TYPES = frozenset({cst.FunctionDef, cst.Lambda, cst.Module, cst.ClassDef})


class Tree(Component):
    """One iterative walk of the module (parents, source order, a per-type index, the
    file's functions, classes and imports as it spells them) and the navigation over it.
    Nothing here depends on the project: a second analysis of the same module takes the
    walk of the first (`other`) instead of walking again; its imports start afresh from
    the spelled ones (`spelled`), since names from star imports depend on the project."""

    # What another Tree of the same module hands over, and the memos that hold with it.
    _PARTS = ("parents", "order", "_preorder", "index", "functions_by_name", "classes_by_name")
    _MEMOS = ("_scope_memo", "_subtree_end", "_calls_by_bare_name", "string_values", "_attribute_names")

    def __init__(self, facts, other: "Tree | None" = None, spelled: ImportTable | None = None) -> None:
        super().__init__(facts)
        self.module: cst.Module = facts.module
        self.imports = ImportTable()
        if other is not None:
            for name in self._PARTS:
                setattr(self, name, getattr(other, name))
            for name in self._MEMOS:
                if name in other.__dict__:
                    self.__dict__[name] = other.__dict__[name]
            self.imports.aliases, self.imports.relative, self.imports.stars = \
                dict(spelled.aliases), dict(spelled.relative), list(spelled.stars)
            return
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.order: dict[cst.CSTNode, int] = {}
        self._preorder: list[cst.CSTNode] = []
        self.index: dict[type, list[cst.CSTNode]] = {t: [] for t in _INDEXED}
        self.functions_by_name: dict[str, list[cst.FunctionDef]] = {}
        self.classes_by_name: dict[str, cst.ClassDef] = {}
        self._walk()

    def _walk(self) -> None:
        parents = self.parents
        order = self.order
        index = self.index
        indexed = set(_INDEXED)
        stack: list[cst.CSTNode] = [self.module]
        counter = 0
        preorder = self._preorder
        while stack:
            node = stack.pop()
            order[node] = counter
            preorder.append(node)
            counter += 1
            cls = type(node)
            if cls in indexed:
                index[cls].append(node)
            children: list[cst.CSTNode] = []
            for name in _child_fields(cls):
                value = getattr(node, name)
                if isinstance(value, cst.CSTNode):
                    children.append(value)
                elif isinstance(value, (list, tuple)):
                    for item in value:
                        if isinstance(item, cst.CSTNode):
                            children.append(item)
            for child in children:
                parents[child] = node
            stack.extend(reversed(children))
        for imp in index[cst.Import]:
            self.imports.add_import(imp)
        for imp in index[cst.ImportFrom]:
            self.imports.add_import_from(imp)
        for fn in index[cst.FunctionDef]:
            self.functions_by_name.setdefault(fn.name.value, []).append(fn)
        for c in index[cst.ClassDef]:
            self.classes_by_name.setdefault(c.name.value, c)

    @cached_property
    def _scope_memo(self) -> dict[cst.CSTNode, Scope]:
        return {}

    @cached_property
    def string_values(self) -> list[str]:
        """The value of each plain string literal of the file that is text (not bytes, not
        an f-string), in source order, evaluated once for every question that reads them."""
        from perflint.analysis.syntax import literal_value

        out = []
        for node in self.index[cst.SimpleString]:
            v = literal_value(node)
            if isinstance(v, str):
                out.append(v)
        return out

    @cached_property
    def _attribute_names(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.index[cst.Attribute]:
            out[a.attr.value] = out.get(a.attr.value, 0) + 1  # type: ignore[attr-defined]
        return out

    def unread_self_attribute(self, value: cst.CSTNode) -> bool:
        """Whether `value` is only stored as `self.<name> = value` and the file reads no
        `.<name>` anywhere, nor names it in a string (`getattr(self, "name")`): an object
        built and never used (PyTorch-YOLOv3's `self.bce_loss = nn.BCELoss()`)."""
        stmt = self.parents.get(value)
        if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and stmt.value is value):
            return False
        target = stmt.targets[0].target
        if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                and target.value.value == "self"):
            return False
        name = target.attr.value
        return self._attribute_names.get(name, 0) == 1 and not any(name in s for s in self.string_values)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        p = self.parents.get(node)
        while p is not None:
            yield p
            p = self.parents.get(p)

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The innermost function, lambda, class or module that holds `node` (not `node`
        itself).  Memoised along the way up: the nodes passed on the way share the answer."""
        memo = self._scope_memo
        got = memo.get(node)
        if got is not None:
            return got
        passed = [node]
        parents = self.parents
        scope = self.module
        p = parents.get(node)
        while p is not None:
            if type(p) in _SCOPE_TYPES:
                scope = p
                break
            got = memo.get(p)
            if got is not None:
                scope = got
                break
            passed.append(p)
            p = parents.get(p)
        for n in passed:
            memo[n] = scope
        return scope

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost function holding `node` (not `node` itself; None past a class or a
        lambda). Memoised along the way up, as `scope_of` (an `elif` chain of n arms is n
        levels deep: asking of each of its nodes was n² steps)."""
        memo = self.__dict__.setdefault("_enclosing_function_memo", {})
        if node in memo:
            return memo[node]
        passed = [node]
        found = None
        p = self.parents.get(node)
        while p is not None:
            if isinstance(p, cst.FunctionDef):
                found = p
                break
            if isinstance(p, (cst.ClassDef, cst.Lambda)):
                break
            if p in memo:
                found = memo[p]
                break
            passed.append(p)
            p = self.parents.get(p)
        for n in passed:
            memo[n] = found
        return found

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for a in self.ancestors(node):
            if isinstance(a, cst.ClassDef):
                return a
        return None

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The smallest enclosing statement (simple statement line or compound statement)."""
        cur = node
        while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parents.get(cur)
        return cur if cur is not None else node

    def block_of(self, node: cst.CSTNode) -> tuple[cst.CSTNode, int] | None:
        """(the IndentedBlock or Module whose body holds `node`'s statement, its index)."""
        stmt = self.statement_of(node)
        parent = self.parents.get(stmt)
        if isinstance(parent, (cst.IndentedBlock, cst.Module)):
            for i, s in enumerate(parent.body):
                if s is stmt:
                    return parent, i
        return None

    def names_in(self, scope: cst.CSTNode, name: str) -> list[cst.Name]:
        """Every `Name` node spelled `name` under `scope` (attributes' and keywords' names
        included), in source order; one index per scope: a question per name of a long loop
        scanning the whole scope was n²."""
        memo = self.__dict__.setdefault("_names_by_scope", {})
        by_value = memo.get(scope)
        if by_value is None:
            by_value = memo[scope] = {}
            for n in self.nodes_within(scope, cst.Name):  # type: ignore[misc]
                by_value.setdefault(n.value, []).append(n)
        return by_value.get(name, [])

    def later_uses(self, name: str, scope: cst.CSTNode, after: int) -> list[cst.Name]:
        """Every `Name` node spelled `name` inside `scope` whose source order is past `after`
        (an order from `self.order`, e.g. that of the assignment target that binds it); not
        an attribute's name (`torch.utils.data.DataLoader`) nor a keyword (`f(loader=...)`),
        which read no variable."""
        out = []
        for n in self.names_in(scope, name):
            if self.order.get(n, -1) <= after:
                continue
            parent = self.parents.get(n)
            if isinstance(parent, cst.Attribute) and parent.attr is n:
                continue
            if isinstance(parent, cst.Arg) and parent.keyword is n:
                continue
            out.append(n)
        return out

    @cached_property
    def _subtree_end(self) -> dict[cst.CSTNode, int]:
        """The walk's order is a preorder: a node's subtree is the contiguous order range
        [order[node], end[node]]."""
        end: dict[cst.CSTNode, int] = {}
        parents = self.parents
        preorder = self._preorder  # type: ignore[attr-defined]
        for o in range(len(preorder) - 1, -1, -1):
            node = preorder[o]
            e = end.setdefault(node, o)
            p = parents.get(node)
            if p is not None and end.get(p, -1) < e:
                end[p] = e
        return end

    def _range(self, container: cst.CSTNode) -> tuple[int, int] | None:
        lo = self.order.get(container)
        if lo is None:
            return None
        return lo, self._subtree_end.get(container, lo)

    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        if node is container:
            return True
        rng = self._range(container)
        o = self.order.get(node)
        if rng is not None and o is not None:
            return rng[0] <= o <= rng[1]
        return any(a is container for a in self.ancestors(node))

    def _index_orders(self, cls: type) -> list[int]:
        memo = self.__dict__.setdefault("_index_order_memo", {})
        got = memo.get(cls)
        if got is None or len(got) != len(self.index[cls]):
            got = [self.order.get(n, -1) for n in self.index[cls]]
            if any(a >= b for a, b in zip(got, got[1:])):
                got = []  # not in walk order: callers fall back to ancestor walks
            memo[cls] = got
        return got

    def nodes_within(self, container: cst.CSTNode, cls: type) -> list[cst.CSTNode]:
        rng = self._range(container)
        nodes = self.index[cls]
        if rng is None:
            return [n for n in nodes if self.is_inside(n, container)]
        orders = self._index_orders(cls)
        if len(orders) != len(nodes):
            return [n for n in nodes if self.is_inside(n, container)]
        return nodes[bisect_left(orders, rng[0]):bisect_right(orders, rng[1])]

    def calls(self) -> list[cst.Call]:
        return self.index[cst.Call]  # type: ignore[return-value]

    def qualname(self, node: cst.BaseExpression) -> str | None:
        """What `node` names through the file's imports (`nn.Linear` → "torch.nn.Linear"),
        resolved once a node: the imports are complete once the facts are built."""
        memo = self._qualnames
        try:
            return memo[node]
        except KeyError:
            got = memo[node] = self.imports.resolve(node)  # type: ignore[attr-defined]
            return got

    @cached_property
    def _qualnames(self) -> dict[cst.CSTNode, str | None]:
        return {}

    @cached_property
    def _calls_by_qualname(self) -> dict[str, list[cst.Call]]:
        """Every call, by what its callee resolves to: one resolution a call per file (a
        rule asking `calls_to` once per finding made that quadratic on large files)."""
        out: dict[str, list[cst.Call]] = {}
        resolve = self.imports.resolve  # type: ignore[attr-defined]
        for c in self.index[cst.Call]:  # type: ignore[attr-defined]
            q = resolve(c.func)
            if q is not None:
                out.setdefault(q, []).append(c)
        return out

    @cached_property
    def _calls_by_bare_name(self) -> dict[str, list[cst.Call]]:
        out: dict[str, list[cst.Call]] = {}
        for c in self.index[cst.Call]:  # type: ignore[attr-defined]
            if isinstance(c.func, cst.Name):
                out.setdefault(c.func.value, []).append(c)
        return out

    def calls_named(self, name: str) -> list[cst.Call]:
        """The calls `name(...)` of a plain name, in source order."""
        return list(self._calls_by_bare_name.get(name, ()))

    def calls_to(self, *qualnames: str) -> list[cst.Call]:
        """The calls of any of `qualnames`, in source order."""
        by = self._calls_by_qualname
        found = [by[q] for q in dict.fromkeys(qualnames) if q in by]
        if not found:
            return []
        if len(found) == 1:
            return list(found[0])
        wanted = {id(c) for calls in found for c in calls}
        return [c for c in self.index[cst.Call] if id(c) in wanted]  # type: ignore[attr-defined]

    def calls_within(self, container: cst.CSTNode) -> list[cst.Call]:
        """Every call under `container`, nested defs included, in source order."""
        return [c for c in self.nodes_within(container, cst.Call) if c is not container]  # type: ignore[misc]

    def calls_in_window(self, region: cst.CSTNode, after: int, node: cst.CSTNode) -> list[cst.Call]:
        """The calls of `region`, in source order, after position `after` and no later than
        the end of `node`'s subtree (all of `region`'s calls when positions cannot bound
        them), found by bisection: scanning every call of a loop for each pair of its waits
        was quadratic."""
        memo = self.__dict__.setdefault("_region_calls_memo", {})
        got = memo.get(region)
        if got is None:
            calls = self.calls_within(region)
            orders = [self.order.get(c, 0) for c in calls]
            got = memo[region] = (calls, orders if all(a < b for a, b in zip(orders, orders[1:])) else None)
        calls, orders = got
        rng = self._range(node)
        if orders is None or rng is None:
            return calls
        return calls[bisect_right(orders, after):bisect_right(orders, rng[1])]

    def inside_another(self, nodes: list) -> set:
        """Those of `nodes` (in source order) that lie inside another of them; with positions
        in one pass: a node is inside an earlier one exactly when an earlier subtree reaches it."""
        ranges = [self._range(n) for n in nodes]
        if any(r is None for r in ranges) or any(a[0] >= b[0] for a, b in zip(ranges, ranges[1:])):  # type: ignore[index]
            return {n for n in nodes if any(m is not n and self.is_inside(n, m) for m in nodes)}
        out, reach = set(), -1
        for n, (start, end) in zip(nodes, ranges):  # type: ignore[misc]
            if reach >= start:
                out.add(n)
            reach = max(reach, end)
        return out

    def receiver_text(self, expr: cst.BaseExpression | None) -> str | None:
        """`self.scaler` → "self.scaler"; used to match the same object across calls."""
        return dotted(expr) if expr is not None else None
