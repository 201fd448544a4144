"""The facts about one file, computed once and shared by every rule: one object that
combines the analyses of this package (see the package docstring)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.bindings import Binding, BindingsMixin
from perflint.analysis.callkinds import CallKindsMixin
from perflint.analysis.crossmodule import CrossModuleMixin
from perflint.analysis.devices import DevicesMixin
from perflint.analysis.filewide import FileWideMixin
from perflint.analysis.gradmode import GradModeMixin
from perflint.analysis.hotpath import HotPathMixin
from perflint.analysis.kinds import KindsMixin
from perflint.analysis.loops import LoopsMixin
from perflint.analysis.throttles import ThrottlesMixin
from perflint.analysis.tree import _INDEXED, Scope, TreeMixin, _child_fields
from perflint.names import ImportTable


class Facts(TreeMixin, BindingsMixin, KindsMixin, CallKindsMixin, DevicesMixin, FileWideMixin, LoopsMixin,
            GradModeMixin, ThrottlesMixin, HotPathMixin, CrossModuleMixin):
    def __init__(self, module: cst.Module, target_torch: tuple[int, int] = (2, 4), project=None,
                 tree: "Facts | None" = None) -> None:
        self.module = module
        self.target_torch = target_torch
        # A `ProjectView` (analysis.project) when the file is checked as part of a project:
        # the questions about other modules go there; None for a file on its own.
        self.project = project
        # Per-step functions called from another file: function → (file, line, loop kind).
        self.step_callers: dict[cst.FunctionDef, tuple[str, int, str]] = {}
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.order: dict[cst.CSTNode, int] = {}
        self._preorder: list[cst.CSTNode] = []
        self.index: dict[type, list[cst.CSTNode]] = {t: [] for t in _INDEXED}
        self.imports = ImportTable()
        # scope → name → bindings
        self.bindings: dict[Scope, dict[str, list[Binding]]] = {}
        # class → attribute → bindings (from `self.x = …` in any method)
        self.attr_bindings: dict[cst.ClassDef, dict[str, list[Binding]]] = {}
        self.functions_by_name: dict[str, list[cst.FunctionDef]] = {}
        self.classes_by_name: dict[str, cst.ClassDef] = {}
        self._memo_kinds: dict[tuple, frozenset[str]] = {}
        if tree is not None and tree.module is module:
            self._adopt(tree)
        else:
            self._walk()
        self._resolve_imports()
        self.target_torch = min(target_torch, self._code_bound())

    # -- the walk -----------------------------------------------------------------------
    _TREE_PARTS = ("parents", "order", "_preorder", "index", "bindings", "attr_bindings", "functions_by_name",
                   "classes_by_name")
    _TREE_MEMOS = ("_scope_memo", "_subtree_end", "_calls_by_bare_name")

    def _adopt(self, tree: "Facts") -> None:
        """Take the walk of another Facts of the same module (parents, order, the index, the
        bindings: nothing there depends on the project), for a second analysis of a file
        whose first one only summarised it.  `tree` is not used afterwards."""
        for name in self._TREE_PARTS:
            setattr(self, name, getattr(tree, name))
        for name in self._TREE_MEMOS:
            if name in tree.__dict__:
                self.__dict__[name] = tree.__dict__[name]
        base = tree._base_imports
        self.imports.aliases, self.imports.relative, self.imports.stars = \
            dict(base.aliases), dict(base.relative), list(base.stars)

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
            self._bind_params(fn)
        for c in index[cst.ClassDef]:
            self.classes_by_name.setdefault(c.name.value, c)
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

    def _resolve_imports(self) -> None:
        """What depends on the project: names a star import binds, then module-level aliases
        (`Loader = DataLoader`) resolved through them.  The imports as the file spells them are
        kept (`_base_imports`) for another analysis of the same tree."""
        base = ImportTable()
        base.aliases, base.relative, base.stars = dict(self.imports.aliases), dict(self.imports.relative), \
            list(self.imports.stars)
        self._base_imports = base
        if self.imports.stars:
            self._star_library_names()
        # Module-level re-bindings of imported names: `Loader = DataLoader`.
        for stmt in self.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if (
                        isinstance(small, cst.Assign)
                        and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name)
                        and isinstance(small.value, (cst.Name, cst.Attribute))
                    ):
                        self.imports.add_alias(small.targets[0].target.value, small.value)

    def _code_bound(self) -> tuple[int, int]:
        """The newest torch the file's code allows: `torchtext.legacy` exists only in
        torchtext 0.9–0.11 (torch 1.8–1.10), and `torchtext.data.Field`/`BucketIterator` only
        up to torchtext 0.8 (torch 1.7); `loss.data[0]` indexes a 0-dim tensor, an error since
        torch 0.5. The file runs on an older torch than the project's target, so advice for a
        newer one (`fused=True`, `torch.autocast`) does not apply."""
        bound = (99, 0)
        for node in self.index[cst.Attribute]:
            if node.attr.value == "data" and _loss_name(node.value):
                parent = self.parents.get(node)
                if isinstance(parent, cst.Subscript) and parent.value is node and len(parent.slice) == 1 \
                        and isinstance(parent.slice[0].slice, cst.Index) \
                        and isinstance(parent.slice[0].slice.value, cst.Integer) and parent.slice[0].slice.value.value == "0":
                    bound = (0, 4)
                    break
        for full in self.imports.aliases.values():
            if full == "torchtext.legacy" or full.startswith("torchtext.legacy."):
                bound = min(bound, (1, 10))
            elif full in _OLD_TORCHTEXT:
                bound = min(bound, (1, 7))
        return bound

    def _star_library_names(self) -> None:
        """`from .common import *` where common.py imports torch: `torch` here is torch.  The
        project says what each star-imported module binds; without it (a module summarised
        on its own, a module outside the project) the conventional names (`torch`, `nn`,
        `F`, `np`, `optim`, `DataLoader`, `Dataset`) that the file uses but never binds are
        taken for what they conventionally are, unless a star-imported project module
        defines the name itself (a project `class DataLoader`)."""
        found = dict(self.project.star_aliases()) if self.project is not None else {}
        for local, full in _CONVENTIONAL.items():
            found.setdefault(local, full)
        bound = {name for names in self.bindings.values() for name in names} | set(self.functions_by_name) \
            | set(self.classes_by_name)
        for local, full in found.items():
            if full and local not in self.imports.aliases and local not in self.imports.relative and local not in bound:
                self.imports.aliases[local] = full


_CONVENTIONAL = {
    "torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "np": "numpy", "optim": "torch.optim",
    "DataLoader": "torch.utils.data.DataLoader", "Dataset": "torch.utils.data.Dataset",
}
# Names of torchtext's old API (removed from `torchtext.data` in torchtext 0.9, with torch 1.8).
_OLD_TORCHTEXT = frozenset(f"torchtext.data.{n}" for n in ("Field", "BucketIterator", "BPTTIterator", "Iterator",
                                                           "TabularDataset", "LabelField", "ReversibleField"))


def _loss_name(node: cst.BaseExpression) -> bool:
    """`loss`, `self.train_loss`, `loss_g.sum()`: an expression named for a loss."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in ("sum", "mean"):
        node = node.func.value
    name = node.value if isinstance(node, cst.Name) else node.attr.value if isinstance(node, cst.Attribute) else ""
    return "loss" in name.lower()

