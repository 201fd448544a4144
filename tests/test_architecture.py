"""The shape of the code base (ARCHITECTURE.md): no import circles, libcst's private API in
one module, and size limits on modules and classes, with the known exceptions listed so
that they can only shrink."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "perflint"

MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 400
# Still over the limits: (lines now) — each may shrink, none may grow, no new one may join.
MODULES_OVER: dict[str, int] = {}
CLASSES_OVER: dict[str, int] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def import_graph() -> dict[str, set[str]]:
    """Module → the perflint modules it imports anywhere (functions included: a lazy import
    is still a dependency), leaving out imports made for type checking only."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
                graph[name] |= {t for t in _imported(name, path, node) if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_libcsts_private_api_is_touched_in_one_module():
    offenders = []
    for name, path in _modules().items():
        if name == "perflint.cstprivate":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("libcst._"):
                offenders.append(f"{name}: from {node.module}")
            elif isinstance(node, ast.Import):
                offenders += [f"{name}: import {a.name}" for a in node.names if a.name.startswith("libcst._")]
            elif (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                  and isinstance(node.value, ast.Name) and node.value.id in ("cst", "libcst")):
                offenders.append(f"{name}: {node.value.id}.{node.attr}")
    assert offenders == []


def _lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined,operator]


def test_module_sizes():
    over = {}
    for name, path in _modules().items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_MODULE_LINES:
            over[name] = n
    assert set(over) <= set(MODULES_OVER), f"new modules over {MAX_MODULE_LINES} lines: {sorted(set(over) - set(MODULES_OVER))}"
    grown = {m: (n, MODULES_OVER[m]) for m, n in over.items() if n > MODULES_OVER[m]}
    assert not grown, f"modules over the limit grew (now, was): {grown}"


def test_class_sizes():
    over = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and _lines(node) > MAX_CLASS_LINES:
                over[f"{name}.{node.name}"] = _lines(node)
    assert set(over) <= set(CLASSES_OVER), f"new classes over {MAX_CLASS_LINES} lines: {sorted(set(over) - set(CLASSES_OVER))}"
    grown = {c: (n, CLASSES_OVER[c]) for c, n in over.items() if n > CLASSES_OVER[c]}
    assert not grown, f"classes over the limit grew (now, was): {grown}"


def _component_classes() -> dict[str, ast.ClassDef]:
    out = {}
    for name, path in _modules().items():
        if name.startswith("perflint.analysis."):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "Component" for b in node.bases):
                    out[node.name] = node
    return out


def _declared_needs(cls: ast.ClassDef) -> tuple[str, ...]:
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "needs" for t in stmt.targets):
            return tuple(ast.literal_eval(stmt.value))
    return ()


def test_facts_are_components_that_read_only_what_they_declare():
    """Every analysis is a component (no mixins): it reaches another component only through
    a need it declares, or a collaborator handed to its `__init__`; the needs come before it
    in `Facts.COMPONENTS`, so they form no cycle."""
    from perflint.analysis.facts import Facts

    order = [name for name, _ in Facts.COMPONENTS]
    assert Facts.__bases__ == (object,)
    classes = _component_classes()
    assert {cls.__name__ for _, cls in Facts.COMPONENTS} <= set(classes)
    position = {cls.__name__: order.index(name) for name, cls in Facts.COMPONENTS}
    problems = []
    for cname, cls in classes.items():
        needs = _declared_needs(cls)
        handed = {t.attr for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"
                  for stmt in fn.body if isinstance(stmt, ast.Assign)
                  for t in stmt.targets if isinstance(t, ast.Attribute) and isinstance(stmt.value, ast.Name)}
        used = {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "self" and n.attr in order}
        problems += [f"{cname} reads `self.{u}` without declaring it" for u in sorted(used - set(needs) - handed)]
        if cname in position:
            problems += [f"{cname} needs `{n}`, built after it" for n in needs if order.index(n) >= position[cname]]
    assert problems == []
