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

Module resolution follows Python for the layout: a script's own folder first (`python
train.py` next to `models/`), then the project root, then `src/`; packages through
`__init__.py`, relative imports, re-exports and star imports.  Anything outside the project
(torch, timm …) stays known by name only.  Unresolved stays unknown.

This module never imports libcst: a warm run answers from summaries alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_SKIP_DIRS = {
    ".git", ".hg", ".svn", ".venv", "venv", "env", ".env", "node_modules", "__pycache__", "build", "dist",
    "site-packages", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".perflint_cache", ".eggs",
}
MAX_DEPTH = 4
MAX_PROJECT_FILES = 5000
# Kinds an argument may lend a parameter (strong evidence only).
PARAM_KINDS = frozenset({"dataloader", "model", "optimizer", "scaler", "criterion", "batch", "device_tensor", "tensor",
                         "output", "loss"})
# Kinds a function's result may carry to its callers.
RESULT_KINDS = frozenset({"dataloader", "model", "optimizer", "scaler", "criterion", "loss", "tensor", "dataset",
                          "grad_off_decorator",
                          "device_cuda", "device_cpu", "device_other"})


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
    """The summaries of one project's files, and the questions asked of them."""

    def __init__(self, root: Path, summaries: dict[str, dict], all_files: set[str] | None = None) -> None:
        self.root = str(root.absolute())
        self.summaries = summaries  # absolute path → summary
        self._files = set(summaries)
        # Every Python file of the project (summarised or not), for finding what to summarise.
        self.all_files = all_files if all_files is not None else set(summaries)
        self._memo: dict = {}
        self._incoming: dict[tuple[str, str], list] | None = None
        self._calls_to: dict[tuple[str, str], list] | None = None

    # -- module resolution -------------------------------------------------------------
    def _module_file(self, base: str, dotted: str) -> str | None:
        rel = dotted.replace(".", os.sep)
        for cand in (os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")):
            if cand in self._files:
                return cand
        return None

    def search_bases(self, importer: str) -> list[str]:
        return self._bases(importer)

    def _bases(self, importer: str) -> list[str]:
        here = os.path.dirname(importer)
        out = [here, self.root, os.path.join(self.root, "src")]
        return list(dict.fromkeys(out))

    def resolve(self, importer: str, ref: str, depth: int = 0) -> tuple[str, str] | None:
        """(file, symbol) that `ref` names as seen from `importer`: "pkg.mod.func",
        ".mod.func" (relative), "#func" (the importer itself), "*func" (via a star import)."""
        if depth > MAX_DEPTH:
            return None
        key = ("resolve", importer, ref)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None
        got = self._resolve(importer, ref, depth)
        self._memo[key] = got
        return got

    def _resolve(self, importer: str, ref: str, depth: int) -> tuple[str, str] | None:
        if ref.startswith("#"):
            return self._follow(importer, ref[1:], depth)
        if ref.startswith("*"):
            summary = self.summaries.get(importer) or {}
            for star in summary.get("stars", ()):
                target = self._module_ref(importer, star)
                if target is not None:
                    got = self._follow(target, ref[1:], depth + 1)
                    if got is not None:
                        return got
            return None
        if ref.startswith("."):
            level = len(ref) - len(ref.lstrip("."))
            rest = ref[level:]
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            parts = rest.split(".") if rest else []
            for cut in range(len(parts), 0, -1):
                f = self._module_file(base, ".".join(parts[:cut]))
                if f is not None:
                    sym = ".".join(parts[cut:])
                    return (f, "") if not sym else self._follow(f, sym, depth + 1)
            return None
        parts = ref.split(".")
        for base in self._bases(importer):
            for cut in range(len(parts), 0, -1):
                f = self._module_file(base, ".".join(parts[:cut]))
                if f is not None and f != importer:
                    sym = ".".join(parts[cut:])
                    return (f, "") if not sym else self._follow(f, sym, depth + 1)
        return None

    def _module_ref(self, importer: str, ref: str) -> str | None:
        got = self.resolve(importer, ref)
        return got[0] if got is not None and got[1] == "" else None

    def _follow(self, path: str, symbol: str, depth: int) -> tuple[str, str] | None:
        """`symbol` defined in `path`, or re-exported there by an import (an `__init__.py`)."""
        summary = self.summaries.get(path)
        if summary is None:
            return None
        head, _, tail = symbol.partition(".")
        if head in summary.get("classes", {}) or head in summary.get("functions", {}) or head in summary.get("constants", {}):
            return path, symbol
        target = summary.get("imports", {}).get(head) or summary.get("relative", {}).get(head)
        if target is not None:
            ref = target + ("." + tail if tail else "")
            got = self.resolve(path, ref, depth + 1)
            if got is not None:
                return got
        if summary.get("stars"):
            return self.resolve(path, "*" + symbol, depth + 1)
        return None

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
            if "criterion" in out:
                out.discard("model")
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
                if "criterion" in ck:
                    out.add("criterion")
                elif "model" in ck:
                    out.add("model")
                if "dataset" in ck:
                    out.add("dataset")
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
            out |= set(data.get("apis", ()))
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

    # -- calls between modules ------------------------------------------------------------
    def _index_calls(self) -> None:
        incoming: dict[tuple[str, str], list] = {}
        calls_to: dict[tuple[str, str], list] = {}
        step_fns: dict[tuple[str, str], tuple] = {}
        records = []
        for path in sorted(self.summaries):
            for c in self.summaries[path].get("calls", ()):
                where = self.resolve(path, c["ref"])
                if where is None or not where[1]:
                    continue
                records.append((path, c, where))
                calls_to.setdefault(where, []).append((path, c))
                if c.get("step"):
                    caller = self.summaries[path]
                    step_fns.setdefault(where, (path, c["line"], c["step"], bool(caller.get("accel")),
                                                bool(caller.get("cuda"))))
        # A function called on every run of a per-step function is per-step too.
        for _ in range(MAX_DEPTH):
            grew = False
            for path, c, where in records:
                if where in step_fns or not c.get("every") or not c.get("in"):
                    continue
                host = step_fns.get((path, c["in"]))
                if host is not None:
                    step_fns[where] = host
                    grew = True
            if not grew:
                break
        for where, host in step_fns.items():
            incoming[where] = [host]
        self._incoming = incoming
        self._calls_to = calls_to

    def step_caller(self, where: tuple[str, str]) -> tuple | None:
        """(caller file, line, "train"/"eval", the caller may use an accelerator, the caller
        is CUDA code) when `where` runs once per step of a loop in another file (directly or
        through per-step functions)."""
        if self._incoming is None:
            self._index_calls()
        got = self._incoming.get(where)  # type: ignore[union-attr]
        if not got:
            return None
        if got[0][0] == where[0]:
            return None  # the file's own analysis sees its own loops
        return tuple(got[0])

    def syncs(self, where: tuple[str, str]) -> bool:
        """Calling `where` waits for the GPU: a function whose body does each time, or a
        class whose `forward` (what calling an instance runs) does."""
        got = self.entry(where)
        if got is None:
            return False
        what, data = got
        if what == "class":
            return bool((data.get("methods") or {}).get("forward", {}).get("syncs"))
        return bool(data.get("syncs"))

    def called_from_training(self, where: tuple[str, str], depth: int = 0) -> bool:
        """Whether a file that trains calls `where` (directly, or through functions such a
        file calls): an evaluation loop in it runs during training."""
        if self._incoming is None:
            self._index_calls()
        for path, c in self._calls_to.get(where, ()):  # type: ignore[union-attr]
            if self.summaries[path].get("trains"):
                return True
            if depth < 2 and c.get("in") and (path, c["in"]) != where \
                    and self.called_from_training((path, c["in"]), depth + 1):
                return True
        return False

    def _imports_of(self, path: str) -> set[str]:
        """The project files `path` imports (any import form)."""
        key = ("imports_of", path)
        if key not in self._memo:
            summary = self.summaries.get(path) or {}
            refs = list(summary.get("imports", {}).values()) + list(summary.get("relative", {}).values())
            refs += list(summary.get("stars", ()))
            out = set()
            for ref in refs:
                w = self.resolve(path, ref)
                if w is not None and w[0] != path:
                    out.add(w[0])
            self._memo[key] = out
        return self._memo[key]

    def settings_near(self, path: str) -> dict | None:
        """What the modules around `path` set up: {"settings": the settings (TF32,
        cudnn_benchmark, deterministic, amp) made by the project files `path` imports
        (transitively: a base class's module) or that import it (transitively: the entry
        point), "imported": whether another project file imports `path` (a library module,
        not an entry point)}."""
        found: set[str] = set()
        down, frontier = {path}, [path]
        for _ in range(MAX_DEPTH):
            frontier = [m for p in frontier for m in self._imports_of(p) if m not in down]
            down.update(frontier)
        importers = {p for p in self.summaries if p != path and path in self._imports_of(p)}
        up, frontier = set(importers), list(importers)
        for _ in range(MAX_DEPTH):
            frontier = [q for p in frontier for q in self.summaries if q not in up and q != path and p in self._imports_of(q)]
            up.update(frontier)
        for p in (down | up) - {path}:
            summary = self.summaries.get(p) or {}
            found.update(summary.get("settings", ()))
            if p in up:  # an entry point's `if __name__ == "__main__":` block runs too
                found.update(summary.get("main_settings", ()))
        if not found and not importers:
            return None  # nothing around: the file's own analysis decides
        return {"settings": sorted(found), "imported": bool(importers)}

    def param_kinds(self, where: tuple[str, str], index: int, name: str) -> frozenset[str]:
        """Kinds every known call site of `where` passes for a parameter (empty unless all agree)."""
        if self._calls_to is None:
            self._index_calls()
        sites = self._calls_to.get(where) or []  # type: ignore[union-attr]
        agreed: set[str] | None = None
        for caller, c in sites:
            if c.get("splat"):
                return frozenset()
            ks = None
            key = None
            if name in c.get("kw", {}):
                ks, key = set(c["kw"][name]), name
            elif index < len(c.get("args", ())):
                ks, key = set(c["args"][index]), str(index)
            if ks is None:
                return frozenset()
            via = c.get("via", {}).get(key)
            if not ks and via is not None:
                ks = set(self._via_kinds(caller, via))
            agreed = ks if agreed is None else agreed & ks
        return frozenset((agreed or set()) & PARAM_KINDS)

    def param_layer_apis(self, where: tuple[str, str], index: int, name: str) -> frozenset[str]:
        """torch layer APIs of the model every known call site of `where` passes for a
        parameter, when each site passes a name bound to a project class or factory
        (`model = TabularNet(...)`; `fit(model, ...)`); empty when any site is unknown."""
        if self._calls_to is None:
            self._index_calls()
        sites = self._calls_to.get(where) or []  # type: ignore[union-attr]
        out: set[str] = set()
        for caller, c in sites:
            if c.get("splat"):
                return frozenset()
            key = name if name in c.get("kw", {}) else str(index) if index < len(c.get("args", ())) else None
            via = c.get("via", {}).get(key) if key is not None else None
            if via is None or via[1]:
                return frozenset()
            w = self.resolve(caller, via[0])
            if w is None or not w[1]:
                return frozenset()
            out |= self.layer_apis(w)
        return frozenset(out)

    def _via_kinds(self, caller: str, via: list) -> frozenset[str]:
        """Kinds of an argument bound to a call of a project function: its result kinds; an
        element unpacked from the result keeps only "dataloader" (a function returning
        nothing but loaders, see the summary)."""
        ref, unpacked = via
        w = self.resolve(caller, ref)
        if w is None or not w[1] or (caller, ref) == w:
            return frozenset()
        got = self.result_kinds(w)
        return got & {"dataloader"} if unpacked else got

    def constant(self, importer: str, ref: str):
        """The value of a project module's top-level literal constant; KeyError when unknown."""
        got = self.resolve(importer, ref)
        if got is None:
            raise KeyError(ref)
        path, symbol = got
        consts = (self.summaries.get(path) or {}).get("constants", {})
        return consts[symbol]

    def option_default(self, importer: str, name: str):
        """The default of an option (argparse dest, config field) in the modules `importer`
        imports (transitively), or KeyError when none or several differing ones are known."""
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
        if not values or any(v != values[0] for v in values):
            raise KeyError(name)
        return values[0]


class ProjectView:
    """One file's window on its project; every question and its answer is recorded."""

    def __init__(self, index: ProjectIndex | None, path: str) -> None:
        self.index = index
        self.path = os.path.abspath(path)
        self.asked: dict[str, object] = {}

    def _ask(self, key: tuple, compute):
        k = json.dumps(key)
        if k in self.asked:
            return self.asked[k]
        value = compute() if self.index is not None else None
        self.asked[k] = _plain(value)
        return value

    def resolve(self, ref: str) -> tuple[str, str] | None:
        return self._ask(("resolve", ref), lambda: self.index.resolve(self.path, ref))  # type: ignore[union-attr]

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

    def settings_near(self) -> dict:
        """See `ProjectIndex.settings_near`."""
        got = self._ask(("settings",), lambda: self.index.settings_near(self.path))  # type: ignore[union-attr]
        return got or {"settings": [], "imported": False}

    def option_default(self, name: str):
        """(True, value) for a known project-wide default, else (False, None)."""
        return self._found(("default", name), lambda: self.index.option_default(self.path, name))  # type: ignore[union-attr]

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
                  "trained": view.called_from_training}.get(kind)
        if method is not None:
            method(*args)
        h.update(k.encode())
        h.update(json.dumps(view.asked.get(k)).encode())
    return h.hexdigest()[:20]


def _plain(value):
    if isinstance(value, (frozenset, set)):
        return sorted(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
