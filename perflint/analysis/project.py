"""The project: a checked file's project root, how its imports resolve to the project's own
modules, and what each module offers the others (its *summary*).

Two phases.  First every file that matters is summarised once (`analysis.summary`, from the
file's own facts; JSON, cached by content hash): its classes with their bases, the kinds
they are (model, dataset, loss) and the torch layers they build; its functions with what
they return; its calls to other functions with the kinds of their arguments and whether
they run on every step of a training or evaluation loop; its option defaults (argparse,
dataclass fields, config dicts).  Then each file is checked with a `ProjectView`: the
questions its facts ask about other modules ("what does `get_dataloader()` return?",
"is `accuracy` called once per step from another file?").  The view records every question
with its answer, so a cached result stays valid exactly while the file and those answers
are unchanged.

Module resolution (`analysis.modules`) follows Python for the layout: a script's own folder
first (`python train.py` next to `models/`), then the project root, then `src/`; packages
through `__init__.py`, relative imports, re-exports and star imports.  Anything outside the
project (torch, timm …) stays known by name only.  Unresolved stays unknown.  What flows
into a function from its callers is joined in `analysis.callers`.

This module never imports libcst: a warm run answers from summaries alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path

from perflint.analysis.callers import CallerFacts, only_while_building, param_may_be_ddp, param_value, reached
from perflint.analysis.modules import MAX_DEPTH, ModuleResolver
from perflint.analysis.projectdocs import DocumentQuestions
from perflint.analysis.optiondefaults import caller_defaults, edges_by_target, imported_unused
from perflint.analysis.vocab import Kind
from perflint.analysis.summary_types import SCALER_WORDS, rejects_keyword, rejects_non_blocking, unpinnable

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_SKIP_DIRS = {
    ".git", ".hg", ".svn", ".venv", "venv", "env", ".env", "node_modules", "__pycache__", "build", "dist",
    "site-packages", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".perflint_cache", ".eggs",
}
MAX_PROJECT_FILES = 5000
# Kinds a function's result may carry to its callers.
RESULT_KINDS = frozenset({Kind.DATALOADER, Kind.MODEL, Kind.OPTIMIZER, Kind.SCALER, Kind.CRITERION, Kind.LOSS, Kind.TENSOR, Kind.DATASET,
                          Kind.GRAD_OFF_DECORATOR,
                          Kind.DEVICE_CUDA, Kind.DEVICE_CPU, Kind.DEVICE_OTHER})


def find_root(path: Path, stop: Path | None = None) -> Path:
    """The nearest folder at or above `path`'s folder holding a project marker; the search
    stops at `stop` (the folder named on the command line) when one is given and holds none."""
    here = path if path.is_dir() else path.parent
    here = here.absolute()
    stop_abs = stop.absolute() if stop is not None else None
    for d in (here, *here.parents):
        if any((d / m).exists() for m in ROOT_MARKERS):
            return d
        if stop_abs is not None and d == stop_abs:
            return stop_abs
    return stop_abs if stop_abs is not None else here


def read_regular(path: str) -> bytes | None:
    """The bytes of `path` when it is a regular file (never blocks on a FIFO or a device), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            return fh.read()
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def project_files(root: Path) -> list[Path]:
    """The Python files of a project (virtual environments, caches and hidden folders skipped)."""
    return [Path(p) for p in project_paths(str(root.absolute()))]


def project_paths(root: str) -> list[str]:
    """`project_files` as absolute path strings, in the same order (a folder's files, then
    its sub-folders, each sorted); one `scandir` per folder."""
    out: list[str] = []

    def walk(d: str) -> bool:
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            return True
        files, dirs = [], []
        for e in entries:
            name = e.name
            try:
                if name.endswith(".py"):
                    if e.is_file():
                        files.append(name)
                elif e.is_dir() and not e.is_symlink():
                    if name not in _SKIP_DIRS and not name.startswith(".") and \
                            not os.path.exists(os.path.join(e.path, "pyvenv.cfg")):
                        dirs.append(name)
            except OSError:
                continue
        for name in sorted(files):
            out.append(os.path.join(d, name))
            if len(out) >= MAX_PROJECT_FILES:
                return False
        for name in sorted(dirs):
            if not walk(os.path.join(d, name)):
                return False
        return True

    walk(os.path.normpath(root))
    return out


class ProjectIndex:
    """The summaries of one project's files, and the questions asked of them: where names
    resolve (`modules`, a `ModuleResolver`), what project symbols are (here), and what
    their callers pass them (`callers`, a `CallerFacts`)."""

    def __init__(self, root: Path, summaries: dict[str, dict], all_files: set[str] | None = None) -> None:
        self.root = str(root.absolute())
        self.summaries = summaries  # absolute path → summary
        # Every Python file of the project (summarised or not), for finding what to summarise.
        self.all_files = all_files if all_files is not None else set(summaries)
        self._memo: dict = {}
        self.modules = ModuleResolver(self.root, summaries)
        self.callers = CallerFacts(self)

    # -- module resolution (analysis.modules) --------------------------------------------
    def search_bases(self, importer: str) -> list[str]:
        return self.modules.search_bases(importer)

    def resolve(self, importer: str, ref: str, depth: int = 0) -> tuple[str, str] | None:
        """See `ModuleResolver.resolve`."""
        return self.modules.resolve(importer, ref, depth)

    def settings_near(self, path: str) -> dict | None:
        """See `ModuleResolver.settings_near`."""
        return self.modules.settings_near(path)

    def star_aliases(self, path: str) -> dict[str, str]:
        """See `ModuleResolver.star_aliases`."""
        return self.modules.star_aliases(path)

    # -- what symbols are -----------------------------------------------------------------
    def entry(self, where: tuple[str, str]) -> tuple[str, dict] | None:
        path, symbol = where
        summary = self.summaries.get(path) or {}
        head, _, tail = symbol.partition(".")
        if head in summary.get("classes", {}):
            cls = summary["classes"][head]
            if tail:
                m = cls.get("methods", {}).get(tail)
                return ("function", m) if m is not None else None
            return "class", cls
        if head in summary.get("functions", {}) and not tail:
            return "function", summary["functions"][head]
        return None

    def class_kinds(self, path: str, name: str, depth: int = 0) -> frozenset[str]:
        """model / criterion / dataset / iterable_dataset, through project base classes."""
        key = ("ck", path, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()
        cls = (self.summaries.get(path) or {}).get("classes", {}).get(name)
        out: set[str] = set()
        if cls is not None and depth <= MAX_DEPTH:
            out |= set(cls.get("kinds", ()))
            for base in cls.get("bases", ()):
                where = self.resolve(path, base)
                if where is not None and where[1] and "." not in where[1]:
                    out |= self.class_kinds(where[0], where[1], depth + 1)
            if Kind.CRITERION in out:
                out.discard(Kind.MODEL)
        got = frozenset(out)
        self._memo[key] = got
        return got

    def result_kinds(self, where: tuple[str, str], depth: int = 0) -> frozenset[str]:
        """The kinds of calling `where`: a class's instance, a function's result."""
        key = ("rk",) + where
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()
        got = self.entry(where)
        out: set[str] = set()
        if got is not None and depth <= MAX_DEPTH:
            what, data = got
            if what == "class":
                ck = self.class_kinds(where[0], where[1])
                if Kind.CRITERION in ck:
                    out.add(Kind.CRITERION)
                elif Kind.MODEL in ck:
                    out.add(Kind.MODEL)
                if Kind.DATASET in ck:
                    out.add(Kind.DATASET)
            else:
                out |= set(data.get("returns", ()))
                for ref in data.get("ret_calls", ()):
                    w = self.resolve(where[0], ref)
                    if w is not None:
                        out |= self.result_kinds(w, depth + 1)
        res = frozenset(out & RESULT_KINDS)
        self._memo[key] = res
        return res

    def layer_apis(self, where: tuple[str, str], depth: int = 0) -> frozenset[str]:
        """torch layer/matmul APIs a project class or function builds, through the project
        classes and functions it uses in turn."""
        key = ("la",) + where
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()
        out: set[str] = set()
        got = self.entry(where)
        if got is not None and depth <= MAX_DEPTH:
            _, data = got
            for api in data.get("apis", ()):
                q, _, attr = api.partition("@")
                if not attr or self._attribute_read_elsewhere(attr, where[0]):
                    out.add(q)  # a loss stored as `self.<attr>` counts once another module reads `.<attr>`
            refs = list(data.get("uses", ()))
            if got[0] == "class":
                refs += list(data.get("bases", ()))
            for ref in refs:
                w = self.resolve(where[0], ref)
                if w is not None and w[1]:
                    out |= self.layer_apis(w, depth + 1)
        res = frozenset(out)
        self._memo[key] = res
        return res

    def _attribute_read_elsewhere(self, attr: str, path: str) -> bool:
        """Whether a module other than `path` uses `.<attr>` on an object (its summary's
        `attrs`), or a module's summary is missing (unknown: counted as read)."""
        by_name = self._memo.get(("attr-readers",))
        if by_name is None:
            by_name = {}
            for p, summary in self.summaries.items():
                for name in (summary or {}).get("attrs", ()):
                    by_name.setdefault(name, set()).add(p)
            self._memo[("attr-readers",)] = by_name
        return bool(by_name.get(attr, set()) - {path}) or len(self.summaries) < len(self.all_files)

    def class_attr_kinds(self, where: tuple[str, str], attr: str, depth: int = 0) -> frozenset[str] | None:
        """Kinds of `self.<attr>` set in a project class (or its project bases)."""
        got = self.entry(where)
        if got is None or got[0] != "class" or depth > MAX_DEPTH:
            return None
        _, cls = got
        if attr in cls.get("attrs", {}):
            return frozenset(cls["attrs"][attr])
        for base in cls.get("bases", ()):
            w = self.resolve(where[0], base)
            if w is not None and w[1]:
                found = self.class_attr_kinds(w, attr, depth + 1)
                if found is not None:
                    return found
        return None

    def syncs(self, where: tuple[str, str], depth: int = 0) -> bool:
        """Calling `where` waits for the GPU: a function whose body does each time, or a
        class whose `forward` (what calling an instance runs) does, itself or through a
        project layer it calls each time (`self.criterion(out, y)`)."""
        got = self.entry(where)
        if got is None:
            return False
        what, data = got
        if what != "class":
            return bool(data.get("syncs"))
        forward = (data.get("methods") or {}).get("forward", {})
        if forward.get("syncs"):
            return True
        if depth >= MAX_DEPTH:
            return False
        for ref in forward.get("layers", ()):
            w = self.resolve(where[0], ref)
            if w is not None and w[1] and w != where and self.syncs(w, depth + 1):
                return True
        return False

    def method_kinds(self, cls: tuple[str, str], method: str, depth: int = 0) -> frozenset[str]:
        """The kinds a method of a project class returns, the method looked up in the class
        and then in its project base classes."""
        got = self.entry((cls[0], f"{cls[1]}.{method}"))
        if got is not None:
            return self.result_kinds((cls[0], f"{cls[1]}.{method}"))
        entry = self.entry(cls)
        if entry is None or entry[0] != "class" or depth > MAX_DEPTH:
            return frozenset()
        for base in entry[1].get("bases", ()):
            w = self.resolve(cls[0], base)
            if w is not None and w[1] and "." not in w[1]:
                found = self.method_kinds(w, method, depth + 1)
                if found:
                    return found
        return frozenset()

    def narrow_copy_method(self, name: str) -> bool:
        """Whether some project class defines a method `name` (`cuda`, `to`) that takes no
        `non_blocking` argument (nor `**kwargs`): a batch of that class rejects it."""
        key = ("narrow", name)
        if key not in self._memo:
            self._memo[key] = any(rejects_non_blocking((cls.get("methods") or {}).get(name))
                                  for summary in self.summaries.values()
                                  for cls in (summary.get("classes") or {}).values())
        return self._memo[key]

    def sets_up_anywhere(self, what: str) -> bool:
        """Whether some file of the project sets up `what` (a summary's "settings" or
        "main_settings": "scaler" for a GradScaler built anywhere, even inside a function)."""
        key = ("anyset", what)
        if key not in self._memo:
            found = any(what in (s.get("settings") or ()) or what in (s.get("main_settings") or ())
                        for s in self.summaries.values())
            if not found and what == "scaler":
                found = _mentioned(self.unsummarised_texts() or (), SCALER_WORDS)  # a run on one file summarises only its neighbours
            self._memo[key] = found
        return self._memo[key]

    def method_rejects(self, path: str, name: str, keyword: str, also: str) -> bool:
        """Whether a class of `path` or of a project module it imports defines a method `name`
        that takes no argument `keyword` (nor `**kwargs`), and a method `also`: fastai's
        `OptimWrapper` (`zero_grad(self)` beside `step`), star-imported by `basic_train.py`."""
        key = ("rejects", path, name, keyword, also)
        if key not in self._memo:
            files = {path} | self.modules.imports_of(path)
            self._memo[key] = any(also in (cls.get("methods") or {})
                                  and rejects_keyword((cls.get("methods") or {}).get(name), keyword)
                                  for f in sorted(files)
                                  for cls in ((self.summaries.get(f) or {}).get("classes") or {}).values())
        return self._memo[key]

    def builds_unpinnable(self, where: tuple[str, str], depth: int = 0) -> bool:
        """Whether the project function at `where` builds, itself or through the project
        functions it calls, an instance of a batch container that `pin_memory` cannot pin:
        a class with `to` or `cuda` and no `pin_memory` method (DETR's `collate_fn` →
        `nested_tensor_from_tensor_list` → `NestedTensor`)."""
        got = self.entry(where)
        if got is None or depth > MAX_DEPTH:
            return False
        kind, data = got
        if kind == "class":
            return unpinnable(data.get("methods") or {})
        for ref in data.get("uses", ()):
            w = self.resolve(where[0], ref)
            if w is not None and w[1] and self.builds_unpinnable(w, depth + 1):
                return True
        return False

    def graph_collate_method(self, name: str) -> bool:
        """Whether the project's methods named `name` (some, and every one) return a DGL graph
        batch: `collate_fn=dataset.collate` on a dataset of a project class."""
        key = ("graphm", name)
        if key not in self._memo:
            found = [m.get("graph", False) for summary in self.summaries.values()
                     for cls in (summary.get("classes") or {}).values()
                     for mname, m in (cls.get("methods") or {}).items() if mname == name]
            self._memo[key] = bool(found) and all(found)
        return self._memo[key]

    def constant(self, importer: str, ref: str):
        """The value of a project module's top-level literal constant; KeyError when unknown."""
        got = self.resolve(importer, ref)
        if got is None:
            raise KeyError(ref)
        path, symbol = got
        consts = (self.summaries.get(path) or {}).get("constants", {})
        return consts[symbol]

    def cfgtree_default(self, key: str):
        """The default a yacs config tree of the project sets for `key` ("TRAIN.ACCUMULATION_STEPS");
        KeyError when none or several differing ones."""
        values = [s["cfgtree"][key] for s in self.summaries.values() if key in (s.get("cfgtree") or {})]
        if not values or any(v != values[0] for v in values):
            raise KeyError(key)
        return values[0]

    def option_default(self, importer: str, name: str, callers: bool = False):
        """The default of an option (argparse dest, config field) in the modules `importer`
        imports (transitively; with `callers`, else in the modules that import it), or
        KeyError when none or several differing ones are known."""
        seen = {importer}
        frontier = [importer]
        values = []
        for _ in range(MAX_DEPTH):
            nxt = []
            for path in frontier:
                summary = self.summaries.get(path) or {}
                if path != importer and name in summary.get("defaults", {}):
                    values.append(summary["defaults"][name])
                refs = list(summary.get("imports", {}).values()) + list(summary.get("relative", {}).values())
                refs += list(summary.get("stars", ()))
                for ref in refs:
                    w = self.resolve(path, ref)
                    if w is not None and w[0] not in seen:
                        seen.add(w[0])
                        nxt.append(w[0])
            frontier = nxt
        values = values or (caller_defaults(self, importer, name) if callers else [])
        if not values or any(v != values[0] for v in values):
            raise KeyError(name)
        return values[0]

    # -- what flows into a function from its callers (analysis.callers) --------------------
    def step_caller(self, where: tuple[str, str]) -> tuple | None:
        """See `CallerFacts.step_caller`."""
        return self.callers.step_caller(where)

    def called_from_training(self, where: tuple[str, str]) -> bool:
        """See `CallerFacts.called_from_training`."""
        return self.callers.called_from_training(where)

    def called_only_outside_training(self, where: tuple[str, str]) -> bool:
        """See `CallerFacts.called_only_outside_training`."""
        return self.callers.called_only_outside_training(where)

    def never_used(self, where: tuple[str, str]) -> bool:
        """Whether nothing in the project runs the top-level function `where`: its module is
        imported by another file of the project, each time for other names or for names the
        importer then names nowhere else (`imported_unused`; no import of the module itself,
        no star import), it is not in the module's `__all__`, no call or other
        mention of it (`fn=train`) in any summarised file reaches it, and no other text reads
        it: a Python file with no summary (one that names no torch API) or a notebook that
        imports its module and names it, or the package's entry points (`setup.py`,
        `setup.cfg`, `pyproject.toml`) naming it.  A helper module's leftover
        (`from layers.utils import get_filter`, and `utils.train` never called)."""
        path, name = where
        summary = self.summaries.get(path) or {}
        if "." in name or name not in (summary.get("functions") or {}) or name in (summary.get("all") or ()):
            return False
        if reached(self.callers, where):
            return False
        uses = self._import_uses().get(path)
        if uses is None or "" in uses or name in uses and not imported_unused(self, path, name):
            return False
        texts = self.unsummarised_texts()
        if texts is None:
            return False  # more files than a project is read for: unsure
        word = re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w|\.py\b)")  # `train.py` is a file
        stem = os.path.basename(path)[:-3]
        if stem == "__init__":
            stem = os.path.basename(os.path.dirname(path))
        imports_it = re.compile(r"\b(?:from|import)\s+[\w.]*\b" + re.escape(stem) + r"\b")
        for f in texts:
            try:
                with open(f, "rb") as fh:
                    text = fh.read(2_000_000).decode("utf-8", "replace")
            except OSError:
                return False
            if word.search(text) and (f.endswith((".toml", ".cfg", "setup.py")) or imports_it.search(text)):
                return False
        return True

    def _import_uses(self) -> dict[str, set[str]]:
        """Each project file another file imports → the names imported from it ("" for the
        module itself, an `import` of it or a star import)."""
        return edges_by_target(self, 2)

    def unsummarised_texts(self) -> list[str] | None:
        """What `never_used` reads besides the summaries: the Python files with no summary,
        the notebooks and the entry-point files (None past `MAX_PROJECT_FILES`)."""
        if "unsummarised" not in self._memo:
            got: list[str] | None = sorted(self.all_files - set(self.summaries))
            got += [os.path.join(self.root, n) for n in ("setup.py", "setup.cfg", "pyproject.toml")  # type: ignore[operator]
                    if os.path.isfile(os.path.join(self.root, n))]
            for d, dirs, files in os.walk(self.root):
                dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.startswith("."))
                got += [os.path.join(d, n) for n in sorted(files) if n.endswith(".ipynb")]  # type: ignore[operator]
                if len(got) > MAX_PROJECT_FILES:  # type: ignore[arg-type]
                    got = None
                    break
            self._memo["unsummarised"] = got
        return self._memo["unsummarised"]

    def param_kinds(self, where: tuple[str, str], index: int, name: str) -> frozenset[str]:
        """See `CallerFacts.param_kinds`."""
        return self.callers.param_kinds(where, index, name)

    def param_device(self, where: tuple[str, str], index: int, name: str) -> frozenset[str]:
        """See `CallerFacts.param_device`."""
        return self.callers.param_device(where, index, name)

    def param_class(self, where: tuple[str, str], index: int, name: str) -> tuple[str, str] | None:
        """See `CallerFacts.param_class`."""
        return self.callers.param_class(where, index, name)

    def param_layer_apis(self, where: tuple[str, str], index: int, name: str) -> frozenset[str]:
        """See `CallerFacts.param_layer_apis`."""
        return self.callers.param_layer_apis(where, index, name)

    def receives_cuda(self, path: str) -> bool:
        """See `CallerFacts.receives_cuda`."""
        return self.callers.receives_cuda(path)

    def kwargs_of(self, where: tuple[str, str]) -> dict | None:
        """See `CallerFacts.kwargs_of`."""
        return self.callers.kwargs_of(where)


class ProjectView(DocumentQuestions):
    """One file's window on its project; every question and its answer is recorded (the
    questions about its documents: `DocumentQuestions`)."""

    _read = staticmethod(read_regular)

    def __init__(self, index: ProjectIndex | None, path: str, root: str | None = None) -> None:
        self.index = index
        self.path = os.path.abspath(path)
        self.asked: dict[str, object] = {}
        # The project root, where the index is not built yet (a first pass).
        self.root = root

    def alone(self, summary: dict) -> ProjectView:
        """A fresh view of a project made of this file alone (its summary), for a first pass:
        the questions a file asks about its own functions are answered there, and the
        whole project's answers are compared with these before the file is checked again."""
        root = self.root if self.root is not None else os.path.dirname(self.path)
        return ProjectView(ProjectIndex(Path(root), {self.path: summary}, {self.path}), self.path)

    def _ask(self, key: tuple, compute):
        k = json.dumps(key)
        if k in self.asked:
            return self.asked[k]
        value = compute() if self.index is not None else None
        self.asked[k] = _plain(value)
        return value

    def resolve(self, ref: str) -> tuple[str, str] | None:
        return self._ask(("resolve", ref), lambda: self.index.resolve(self.path, ref))  # type: ignore[union-attr]

    def attribute_read_elsewhere(self, attr: str) -> bool:
        """Whether another module of the project uses `.<attr>` (see `ProjectIndex`)."""
        # True or None (not False): a question answered None counts as asked of nothing.
        return bool(self._ask(("attr-read", attr),
                              lambda: self.index._attribute_read_elsewhere(attr, self.path) or None))  # type: ignore[union-attr]

    def call_kinds(self, ref: str) -> frozenset[str]:
        def compute():
            w = self.index.resolve(self.path, ref)  # type: ignore[union-attr]
            return sorted(self.index.result_kinds(w)) if w is not None and w[1] else []  # type: ignore[union-attr]
        return frozenset(self._ask(("call", ref), compute) or ())

    def class_kinds(self, ref: str) -> frozenset[str]:
        def compute():
            w = self.index.resolve(self.path, ref)  # type: ignore[union-attr]
            if w is None or not w[1] or "." in w[1]:
                return []
            return sorted(self.index.class_kinds(*w))  # type: ignore[union-attr]
        return frozenset(self._ask(("class", ref), compute) or ())

    def layer_apis(self, ref: str) -> frozenset[str]:
        def compute():
            w = self.index.resolve(self.path, ref)  # type: ignore[union-attr]
            return sorted(self.index.layer_apis(w)) if w is not None and w[1] else []  # type: ignore[union-attr]
        return frozenset(self._ask(("layers", ref), compute) or ())

    def attr_kinds(self, class_ref: str, attr: str) -> frozenset[str] | None:
        def compute():
            w = self.index.resolve(self.path, class_ref)  # type: ignore[union-attr]
            if w is None or not w[1]:
                return None
            got = self.index.class_attr_kinds(w, attr)  # type: ignore[union-attr]
            return sorted(got) if got is not None else None
        got = self._ask(("attr", class_ref, attr), compute)
        return frozenset(got) if got is not None else None

    def step_caller(self, symbol: str) -> tuple[str, int, str] | None:
        got = self._ask(("step", symbol), lambda: self.index.step_caller((self.path, symbol)))  # type: ignore[union-attr]
        return tuple(got) if got else None  # type: ignore[return-value]

    def call_syncs(self, ref: str) -> bool:
        def compute():
            w = self.index.resolve(self.path, ref)  # type: ignore[union-attr]
            return bool(w is not None and w[1] and self.index.syncs(w))  # type: ignore[union-attr]
        return bool(self._ask(("syncs", ref), compute))

    def file_of_trains(self, ref: str) -> bool:
        """Whether the project file that `ref` (a call's target) lives in trains."""
        def compute():
            w = self.index.resolve(self.path, ref)  # type: ignore[union-attr]
            return bool(w is not None and (self.index.summaries.get(w[0]) or {}).get("trains"))  # type: ignore[union-attr]
        return bool(self._ask(("trainsin", ref), compute))

    def called_from_training(self, symbol: str) -> bool:
        return bool(self._ask(("trained", symbol),
                              lambda: self.index.called_from_training((self.path, symbol))))  # type: ignore[union-attr]

    def param_kinds(self, symbol: str, index: int, name: str) -> frozenset[str]:
        got = self._ask(("param", symbol, index, name),
                        lambda: sorted(self.index.param_kinds((self.path, symbol), index, name)))  # type: ignore[union-attr]
        return frozenset(got or ())

    def param_layer_apis(self, symbol: str, index: int, name: str) -> frozenset[str]:
        got = self._ask(("playa", symbol, index, name),
                        lambda: sorted(self.index.param_layer_apis((self.path, symbol), index, name)))  # type: ignore[union-attr]
        return frozenset(got or ())

    def param_device(self, symbol: str, index: int, name: str) -> frozenset[str]:
        got = self._ask(("pdev", symbol, index, name),
                        lambda: sorted(self.index.param_device((self.path, symbol), index, name)))  # type: ignore[union-attr]
        return frozenset(got or ())

    def param_method_kinds(self, symbol: str, index: int, name: str, method: str) -> frozenset[str]:
        """Kinds `param.method(...)` returns when every caller passes an instance of one
        project class."""
        def compute():
            cls = self.index.param_class((self.path, symbol), index, name)  # type: ignore[union-attr]
            return sorted(self.index.method_kinds(cls, method)) if cls is not None else []  # type: ignore[union-attr]
        return frozenset(self._ask(("pmeth", symbol, index, name, method), compute) or ())

    def inherited_method_kinds(self, class_ref: str, method: str) -> frozenset[str]:
        """Kinds a method returns that a class of this file inherits from a project class."""
        def compute():
            w = self.index.resolve(self.path, class_ref)  # type: ignore[union-attr]
            if w is None or not w[1] or "." in w[1]:
                return []
            return sorted(self.index.method_kinds(w, method))  # type: ignore[union-attr]
        return frozenset(self._ask(("imeth", class_ref, method), compute) or ())

    def has_module(self, name: str) -> bool:
        """Whether a module or package `name` of the project is where this file's absolute imports look (its own `datasets/`)."""
        return bool(self._ask(("hasmod", name), lambda: any(  # a module, a package, or a folder of modules
            f == os.path.join(b, name + ".py") or f.startswith(os.path.join(b, name, ""))
            for b in self.index.search_bases(self.path) for f in self.index.all_files) or None))  # type: ignore[union-attr]

    def star_aliases(self) -> dict[str, str]:
        return self._ask(("stars",), lambda: self.index.star_aliases(self.path) or None) or {}  # type: ignore[union-attr]

    def receives_cuda(self) -> bool:
        return bool(self._ask(("rcuda",), lambda: self.index.receives_cuda(self.path) or None))  # type: ignore[union-attr]

    def kwargs_of(self, symbol: str) -> dict | None:
        return self._ask(("kwargs", symbol), lambda: self.index.kwargs_of((self.path, symbol)))  # type: ignore[union-attr]

    def called_only_outside_training(self, symbol: str) -> bool:
        """See `CallerFacts.called_only_outside_training`."""
        return bool(self._ask(("outside", symbol),
                              lambda: self.index.called_only_outside_training((self.path, symbol)) or None))  # type: ignore[union-attr]

    def never_used(self, symbol: str) -> bool:
        """See `ProjectIndex.never_used`."""
        return bool(self._ask(("unused", symbol),
                              lambda: self.index.never_used((self.path, symbol)) or None))  # type: ignore[union-attr]

    def only_while_building(self, symbol: str) -> bool:
        """See `callers.only_while_building`."""
        return bool(self._ask(("ctor", symbol),
                              lambda: only_while_building(self.index.callers, (self.path, symbol)) or None))  # type: ignore[union-attr]

    def param_value(self, symbol: str, name: str) -> list | None:
        """See `callers.param_value`."""
        return self._ask(("pval", symbol, name), lambda: param_value(self.index.callers, (self.path, symbol), name))  # type: ignore[union-attr]

    def param_may_be_ddp(self, symbol: str, index: int, name: str) -> bool:
        """See `CallerFacts.param_may_be_ddp`."""
        return bool(self._ask(("ddp", symbol, index, name), lambda: param_may_be_ddp(
            self.index.callers, (self.path, symbol), index, name) or None))  # type: ignore[union-attr]

    def called_without_grad(self, symbol: str) -> bool:
        """See `CallerFacts.called_without_grad`."""
        return bool(self._ask(("nogradc", symbol),
                              lambda: self.index.callers.called_without_grad((self.path, symbol)) or None))  # type: ignore[union-attr]

    def builds_unpinnable(self, ref: str) -> bool:
        """See `ProjectIndex.builds_unpinnable`."""
        def compute():
            w = self.index.resolve(self.path, ref)  # type: ignore[union-attr]
            return bool(w is not None and w[1] and self.index.builds_unpinnable(w)) or None  # type: ignore[union-attr]
        return bool(self._ask(("pinless", ref), compute))

    def narrow_copy_method(self, name: str) -> bool:
        """See `ProjectIndex.narrow_copy_method`."""
        return bool(self._ask(("narrow", name), lambda: self.index.narrow_copy_method(name)))  # type: ignore[union-attr]

    def sets_up_anywhere(self, what: str) -> bool:
        """See `ProjectIndex.sets_up_anywhere` (True or None)."""
        return bool(self._ask(("anyset", what), lambda: self.index.sets_up_anywhere(what) or None))  # type: ignore[union-attr]

    def method_rejects(self, name: str, keyword: str, also: str) -> bool:
        """See `ProjectIndex.method_rejects` (True or None: a class that accepts it says nothing)."""
        return bool(self._ask(("rejects", name, keyword, also),
                              lambda: self.index.method_rejects(self.path, name, keyword, also) or None))  # type: ignore[union-attr]

    def graph_collate_method(self, name: str) -> bool:
        """See `ProjectIndex.graph_collate_method`."""
        return bool(self._ask(("graphm", name), lambda: self.index.graph_collate_method(name) or None))  # type: ignore[union-attr]

    def graph_collate(self, ref: str) -> bool:
        """Whether the project function `ref` names returns a DGL graph batch."""
        def compute():
            w = self.index.resolve(self.path, ref)  # type: ignore[union-attr]
            got = self.index.entry(w) if w is not None and w[1] else None  # type: ignore[union-attr]
            return bool(got and got[0] == "function" and got[1].get("graph")) or None
        return bool(self._ask(("graphf", ref), compute))

    def settings_near(self) -> dict:
        """See `ProjectIndex.settings_near`."""
        got = self._ask(("settings",), lambda: self.index.settings_near(self.path))  # type: ignore[union-attr]
        return got or {"settings": [], "imported": False}

    def option_default(self, name: str, callers: bool = False):
        """(True, value) for a known project-wide default (`callers`: also from the importers), else (False, None)."""
        return self._found(("default", name, *((True,) if callers else ())),
                           lambda: self.index.option_default(self.path, name, callers))  # type: ignore[union-attr]

    def cfgtree_default(self, key: str):
        """(True, value) for a yacs config tree's default (`ProjectIndex.cfgtree_default`)."""
        return self._found(("cfgtree", key), lambda: self.index.cfgtree_default(key))  # type: ignore[union-attr]

    def constant(self, ref: str):
        """(True, value) for a literal constant imported from a project module."""
        return self._found(("const", ref), lambda: self.index.constant(self.path, ref))  # type: ignore[union-attr]

    def _found(self, key: tuple, lookup):
        """(True, value) when `lookup()` finds a value, (False, None) when it raises KeyError."""
        def compute():
            try:
                return [True, lookup()]
            except KeyError:
                return [False, None]
        got = self._ask(key, compute)
        return tuple(got) if got else (False, None)

    def relevant(self) -> bool:
        """Whether any recorded question had an answer (otherwise the file's findings are
        those of a single-file analysis)."""
        return any(v not in (None, [], [False, None]) for v in self.asked.values())


def _mentioned(files, rx: re.Pattern) -> bool:
    """Whether one of the Python `files` (those of a project with no summary) matches `rx`."""
    for f in files:
        if not f.endswith(".py"):
            continue
        try:
            with open(f, "rb") as fh:
                text = fh.read(2_000_000).decode("utf-8", "replace")
        except OSError:
            continue
        if rx.search(text):
            return True
    return False


def answers_digest(index: ProjectIndex | None, path: str, questions: list[str], view: ProjectView | None = None) -> str:
    """Re-ask `questions` (recorded keys) of `index` and hash the answers."""
    view = view if view is not None else ProjectView(index, path)
    h = hashlib.sha256()
    for k in sorted(questions):
        key = json.loads(k)
        kind, args = key[0], key[1:]
        method = {"resolve": view.resolve, "call": view.call_kinds, "class": view.class_kinds,
                  "layers": view.layer_apis, "attr": view.attr_kinds, "step": view.step_caller,
                  "param": view.param_kinds, "default": view.option_default, "const": view.constant,
                  "playa": view.param_layer_apis, "settings": view.settings_near, "syncs": view.call_syncs,
                  "trained": view.called_from_training, "pdev": view.param_device,
                  "rcuda": view.receives_cuda, "kwargs": view.kwargs_of, "stars": view.star_aliases,
                  "pmeth": view.param_method_kinds, "imeth": view.inherited_method_kinds,
                  "narrow": view.narrow_copy_method, "nogradc": view.called_without_grad,
                  "pinless": view.builds_unpinnable,
                  "cfgfile": view.config_data, "outside": view.called_only_outside_training,
                  "unused": view.never_used, "ctor": view.only_while_building,
                  "graphm": view.graph_collate_method, "graphf": view.graph_collate,
                  "trainsin": view.file_of_trains, "attr-read": view.attribute_read_elsewhere,
                  "rejects": view.method_rejects,
                  "launch": lambda *a: {"launched": view.launched_option, "yamlkey": view.yaml_sets,
                                        "each": view.launched_each}.get(
                      a[0], view.documented_option)(*a[1:]) if a else view.documented_on_one_gpu(),
                  "anyset": view.sets_up_anywhere, "hasmod": view.has_module, "ddp": view.param_may_be_ddp,
                  "pval": view.param_value, "cfgtree": view.cfgtree_default,
                  "orphan": view.never_imported}.get(kind)
        if method is not None:
            method(*args)
        h.update(k.encode())
        h.update(json.dumps(view.asked.get(k)).encode())
    return h.hexdigest()[:20]


def _plain(value):
    if isinstance(value, (frozenset, set)):
        return sorted(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value
