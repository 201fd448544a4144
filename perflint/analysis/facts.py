"""The facts about one file, computed once and shared by every rule: one object that
combines the analyses of this package (see the package docstring)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis.bindings import Bindings
from perflint.analysis.crossmodule import CrossModule
from perflint.analysis.devices import Devices
from perflint.analysis.filewide import FileWide
from perflint.analysis.gradmode import GradMode
from perflint.analysis.hotpath import HotPath
from perflint.analysis.kinds import Kinds
from perflint.analysis.loops import Loops
from perflint.analysis.steps import Steps
from perflint.analysis.syncs import Syncs
from perflint.analysis.throttles import Throttles
from perflint.analysis.tree import Tree
from perflint.names import ImportTable


class Facts:
    """The analyses of one file, each a component (`analysis.component`) that reads the
    ones before it in `COMPONENTS`:

    * `tree` — the walk: parents, source order, the per-type index, imports; navigation;
    * `bindings` — what each name and `self.` attribute is bound to, and which bindings reach a use;
    * `cross` — what the project's other modules say (a function's callers, a class's
      attributes, option defaults);
    * `devices` — device expressions, and whether the file is CUDA code;
    * `kinds` — what an expression holds (loader, batch, model, optimizer …; `kinds.calls`:
      what a call returns);
    * `steps` — calls that run backward or step an optimizer;
    * `filewide` — the file's words, settings it references, autocast and scaler use;
    * `throttles` — tests that keep code from running every iteration, branches no run takes;
    * `loops` — training and evaluation loops, per-step functions, what runs every iteration;
    * `grad` — code that runs with autograd off;
    * `syncs` — functions and layers that wait for the GPU each time they run;
    * `hotpath` — the evidence that a node runs on every optimizer step.
    """

    COMPONENTS = (("tree", Tree), ("bindings", Bindings), ("cross", CrossModule), ("devices", Devices),
                  ("kinds", Kinds), ("steps", Steps), ("filewide", FileWide), ("throttles", Throttles),
                  ("loops", Loops), ("grad", GradMode), ("syncs", Syncs), ("hotpath", HotPath))

    def __init__(self, module: cst.Module, target_torch: tuple[int, int] = (2, 4), project=None,
                 tree: "Facts | None" = None) -> None:
        self.module = module
        self.target_torch = target_torch
        # A `ProjectView` (analysis.project) when the file is checked as part of a project:
        # the questions about other modules go there; None for a file on its own.
        self.project = project
        # The codes of the rules this analysis runs (set by the engine): a rule that leaves a
        # pattern to another rule asks whether that rule is there to report it.
        self.selected: frozenset[str] = frozenset()
        # Per-step functions called from another file: function → (file, line, loop kind).
        self.step_callers: dict[cst.FunctionDef, tuple[str, int, str]] = {}
        # A second analysis of the same module (its first one only summarised it) takes the
        # walk and the bindings of the first: nothing there depends on the project.
        same = tree if tree is not None and tree.module is module else None
        self.tree = Tree(self, same.tree, same._base_imports) if same is not None else Tree(self)
        self.bindings = Bindings(self, same.bindings if same is not None else None)
        for name, component in self.COMPONENTS[2:]:
            setattr(self, name, component(self))
        self._resolve_imports()
        self.target_torch = min(target_torch, self._code_bound())

    def _resolve_imports(self) -> None:
        """What depends on the project: names a star import binds, then module-level aliases
        (`Loader = DataLoader`) resolved through them.  The imports as the file spells them are
        kept (`_base_imports`) for another analysis of the same tree."""
        base = ImportTable()
        base.aliases, base.relative, base.stars = dict(self.tree.imports.aliases), dict(self.tree.imports.relative), \
            list(self.tree.imports.stars)
        self._base_imports = base
        if self.tree.imports.stars:
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
                        self.tree.imports.add_alias(small.targets[0].target.value, small.value)

    def _code_bound(self) -> tuple[int, int]:
        """The newest torch the file's code allows: `torchtext.legacy` exists only in
        torchtext 0.9–0.11 (torch 1.8–1.10), and `torchtext.data.Field`/`BucketIterator` only
        up to torchtext 0.8 (torch 1.7); `loss.data[0]` indexes a 0-dim tensor, an error since
        torch 0.5. The file runs on an older torch than the project's target, so advice for a
        newer one (`fused=True`, `torch.autocast`) does not apply."""
        bound = (99, 0)
        for node in self.tree.index[cst.Attribute]:
            if node.attr.value == "data" and _loss_name(node.value):
                parent = self.tree.parents.get(node)
                if isinstance(parent, cst.Subscript) and parent.value is node and len(parent.slice) == 1 \
                        and isinstance(parent.slice[0].slice, cst.Index) \
                        and isinstance(parent.slice[0].slice.value, cst.Integer) and parent.slice[0].slice.value.value == "0":
                    bound = (0, 4)
                    break
        for full in self.tree.imports.aliases.values():
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
        bound = {name for names in self.bindings.scopes.values() for name in names} | set(self.tree.functions_by_name) \
            | set(self.tree.classes_by_name)
        for local, full in found.items():
            if full and local not in self.tree.imports.aliases and local not in self.tree.imports.relative and local not in bound:
                self.tree.imports.aliases[local] = full


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

