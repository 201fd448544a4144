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
        self._escaped: set[tuple[str, str]] = set()

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
        """Folders an absolute import of `importer` may start from: its own folder, the
        project root and `src/`, then the folders between (scripts in `code/` that import
        `networks.unet` put `code/` on the path for every module below it)."""
        here = os.path.dirname(importer)
        out = [here, self.root, os.path.join(self.root, "src")]
        up = os.path.dirname(here)
        while len(up) > len(self.root) and up.startswith(self.root + os.sep):
            out.append(up)
            up = os.path.dirname(up)
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
        escaped: set[tuple[str, str]] = set()
        for path in sorted(self.summaries):
            for ref in self.summaries[path].get("refs", ()):
                where = self.resolve(path, ref)
                if where is not None and where[1]:
                    escaped.add(where)
        self._escaped = escaped

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

    def star_aliases(self, path: str, depth: int = 0) -> dict[str, str]:
        """Library names (`torch`, `nn`, `np` …) that `path`'s star imports of project modules
        bind: each module's top-level library imports, as its `__all__` lets them through,
        and what its own star imports bind in turn."""
        key = ("stars", path)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = {}
        out: dict[str, str] = {}
        for star in (self.summaries.get(path) or {}).get("stars", ()):
            target = self._module_ref(path, star)
            if target is None or target == path or depth > MAX_DEPTH:
                continue
            summary = self.summaries.get(target) or {}
            names = dict(self.star_aliases(target, depth + 1))
            names.update(summary.get("libs", {}))
            exported = summary.get("all")
            for k, v in names.items():
                if (exported is None or k in exported) and not k.startswith("_"):
                    out.setdefault(k, v)
        self._memo[key] = out
        return out

    # -- what flows into a function from its callers ---------------------------------------
    def _sites(self, where: tuple[str, str]) -> list | None:
        """Every call site of a top-level function, or None when some caller is unknown: the
        function is never called in the project (a public API, a script's entry point), is
        named other than by a call (`fn=train_step`, `map(step, ...)`: called from where
        it is handed to), or a call passes `*args` or a `**kwargs` that is not a known dict."""
        if self._calls_to is None:
            self._index_calls()
        if where in self._escaped or "." in where[1]:
            return None
        sites = self._calls_to.get(where)  # type: ignore[union-attr]
        if not sites or any(c.get("splat") for _, c in sites):
            return None
        return sites

    @staticmethod
    def _key(c: dict, index: int, name: str) -> str | None:
        """Where a call site passes a parameter: its keyword, its position, or None."""
        if name in c.get("kw", {}):
            return name
        if index < len(c.get("args", ())):
            return str(index)
        return None

    def _host_param(self, caller: str, c: dict, pname: str) -> tuple[tuple[str, str], int] | None:
        """The function a call sits in and the position of its parameter `pname`, for an
        argument that forwards that parameter (`step_loss(model, batch, device)` inside
        `train_one_epoch(model, loader, optimizer, device)`)."""
        host = c.get("in")
        if not host or "." in host:
            return None
        fn = (self.summaries.get(caller) or {}).get("functions", {}).get(host)
        if fn is None:
            return None
        pos = fn.get("sig", {}).get("pos", [])
        return (caller, host), (pos.index(pname) if pname in pos else 10_000)

    def param_kinds(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> frozenset[str]:
        """Kinds every known call site of `where` passes for a parameter (empty unless all
        agree, or when a caller is unknown); an argument that is the caller's own parameter
        takes what that one receives."""
        key = ("pk", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()
        sites = self._sites(where)
        agreed: set[str] | None = None
        for caller, c in sites or ():
            k = self._key(c, index, name)
            if k is None:
                agreed = set()
                break
            ks = set(c["kw"][k]) if k == name else set(c["args"][index])
            via = c.get("via", {}).get(k)
            if not ks and via is not None:
                ks = set(self._via_kinds(caller, via))
            fwd = c.get("fwd", {}).get(k)
            if not ks and fwd is not None and depth < MAX_DEPTH:
                hp = self._host_param(caller, c, fwd)
                if hp is not None:
                    ks = set(self.param_kinds(hp[0], hp[1], fwd, depth + 1))
            agreed = ks if agreed is None else agreed & ks
            if not agreed:
                break
        got = frozenset((agreed or set()) & PARAM_KINDS)
        self._memo[key] = got
        return got

    def _param_device(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> tuple[frozenset, bool]:
        """(device kinds the call sites pass, whether every one of them passes CUDA among
        its possibilities); see `param_device`."""
        key = ("pd", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = (frozenset(), False)
        sites = self._sites(where)
        if sites is None:
            return self._memo[key]
        per_site: list[frozenset] = []
        all_cuda = True
        for caller, c in sites:
            k = self._key(c, index, name)
            d = c.get("dev", {}).get(k) if k is not None else None
            fwd = c.get("fwd", {}).get(k) if k is not None else None
            if d:
                ks, cuda = frozenset(d), "device_cuda" in d
            elif fwd is not None and depth < MAX_DEPTH and self._host_param(caller, c, fwd) is not None:
                hp = self._host_param(caller, c, fwd)
                ks, cuda = self._param_device(hp[0], hp[1], fwd, depth + 1)  # type: ignore[index]
                ks = ks or frozenset({"device_unknown"})
            else:
                ks, cuda = frozenset({"device_unknown"}), False
            if (self.summaries.get(caller) or {}).get("framework"):
                # Accelerate/Lightning place batches (prepared loaders yield them on the
                # device) and set precision for the callee: no device fact, no CUDA claim.
                ks, cuda = frozenset({"device_unknown"}), False
            per_site.append(ks)
            all_cuda = all_cuda and cuda
        union: set[str] = set().union(*per_site)
        if len({("device_cuda" in ks) for ks in per_site}) > 1:
            union.add("device_unknown")  # CUDA from some callers, not from others: no fact
        got = (frozenset(union), all_cuda)
        self._memo[key] = got
        return got

    def param_device(self, where: tuple[str, str], index: int, name: str) -> frozenset[str]:
        """Device kinds a parameter receives: of the device argument, or of the device a model
        argument was moved to, at every call site (following arguments that forward the
        caller's own parameter); "device_unknown" among them when a site passes something
        unknown or the sites disagree on CUDA; empty when nothing is known."""
        got = self._param_device(where, index, name)[0]
        return frozenset() if got <= {"device_unknown"} else got

    def receives_cuda(self, path: str) -> bool:
        """Whether the functions of `path` run only in CUDA programs: a parameter gets CUDA
        (a device, a model moved there) from every caller, or a function returning a
        DataLoader is called only from CUDA code."""
        key = ("rc", path)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False
        found = False
        for name, fn in ((self.summaries.get(path) or {}).get("functions") or {}).items():
            where = (path, name)
            sites = self._sites(where)
            if sites is None:
                continue
            pos = fn.get("sig", {}).get("pos", [])
            for i, p in enumerate([*pos, *fn.get("sig", {}).get("kwonly", [])]):
                if self._param_device(where, i if i < len(pos) else 10_000, p)[1]:
                    found = True
                    break
            if not found and "dataloader" in self.result_kinds(where) \
                    and all((self.summaries.get(caller) or {}).get("cuda")
                            and not (self.summaries.get(caller) or {}).get("framework") for caller, _ in sites):
                found = True
            if found:
                break
        self._memo[key] = found
        return found

    def kwargs_of(self, where: tuple[str, str]) -> dict | None:
        """What a function's `**kwargs` holds, over every call site: keyword → ["v", literal]
        when every site passes that literal, ["o", "args.workers", default] when every site
        passes that option with the same known default (["o", text] when the default is not
        known), ["?"] otherwise; ["some", state] for a keyword some sites leave out.  None when
        a caller is unknown (see `_sites`)."""
        key = ("kwargs", where)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None
        got = self.entry(where)
        sites = self._sites(where)
        if got is None or got[0] != "function" or sites is None:
            return None
        sig = got[1].get("sig", {})
        named = set(sig.get("pos", ())) | set(sig.get("kwonly", ()))
        per_site: list[dict] = []
        for caller, c in sites:
            vals = {}
            for k in c.get("kw", {}):
                if k in named:
                    continue
                v = c.get("kwv", {}).get(k)
                if v is not None and v[0] == "o" and len(v) == 2:
                    name = v[1].rsplit(".", 1)[-1]
                    try:
                        v = ["o", v[1], self.option_default(caller, name)]
                    except KeyError:
                        pass
                vals[k] = list(v) if v is not None else ["?"]
            per_site.append(vals)
        out: dict = {}
        for k in sorted(set().union(*per_site)):
            states = [vals.get(k) for vals in per_site]
            present = [st for st in states if st is not None]
            state = present[0] if all(st == present[0] for st in present) else ["?"]
            out[k] = state if len(present) == len(states) else ["some", state]
        self._memo[key] = out
        return out

    def param_class(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> tuple[str, str] | None:
        """The project class (file, name) whose instance every call site passes for a
        parameter (`train(model, Corpus(path), ...)`); None unless all agree."""
        key = ("pc", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None
        found: set = set()
        for caller, c in self._sites(where) or [(None, None)]:
            if c is None:
                return None
            k = self._key(c, index, name)
            ref = c.get("cls", {}).get(k) if k is not None else None
            fwd = c.get("fwd", {}).get(k) if k is not None else None
            if ref is not None:
                w = self.resolve(caller, ref)
            elif fwd is not None and depth < MAX_DEPTH and self._host_param(caller, c, fwd) is not None:
                hp = self._host_param(caller, c, fwd)
                w = self.param_class(hp[0], hp[1], fwd, depth + 1)  # type: ignore[index]
            else:
                return None
            if w is None or not w[1] or "." in w[1] or self.entry(w) is None or self.entry(w)[0] != "class":
                return None
            found.add(tuple(w))
        got = found.pop() if len(found) == 1 else None
        self._memo[key] = got
        return got

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

    def param_layer_apis(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> frozenset[str]:
        """torch layer APIs of the model every known call site of `where` passes for a
        parameter, when each site passes a name bound to a project class or factory
        (`model = TabularNet(...)`; `fit(model, ...)`), or its own parameter that receives
        one; empty when any site is unknown."""
        key = ("pla", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()
        sites = self._sites(where) or []
        out: set[str] = set()
        for caller, c in sites:
            k = self._key(c, index, name)
            via = c.get("via", {}).get(k) if k is not None else None
            fwd = c.get("fwd", {}).get(k) if k is not None else None
            if via is None and fwd is not None and depth < MAX_DEPTH:
                hp = self._host_param(caller, c, fwd)
                got = self.param_layer_apis(hp[0], hp[1], fwd, depth + 1) if hp is not None else frozenset()
                if not got:
                    out = set()
                    break
                out |= got
                continue
            if via is None or via[1]:
                out = set()
                break
            w = self.resolve(caller, via[0])
            if w is None or not w[1]:
                out = set()
                break
            out |= self.layer_apis(w)
        res = frozenset(out)
        self._memo[key] = res
        return res

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

    def star_aliases(self) -> dict[str, str]:
        return self._ask(("stars",), lambda: self.index.star_aliases(self.path) or None) or {}  # type: ignore[union-attr]

    def receives_cuda(self) -> bool:
        return bool(self._ask(("rcuda",), lambda: self.index.receives_cuda(self.path) or None))  # type: ignore[union-attr]

    def kwargs_of(self, symbol: str) -> dict | None:
        return self._ask(("kwargs", symbol), lambda: self.index.kwargs_of((self.path, symbol)))  # type: ignore[union-attr]

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
                  "trained": view.called_from_training, "pdev": view.param_device,
                  "rcuda": view.receives_cuda, "kwargs": view.kwargs_of, "stars": view.star_aliases,
                  "pmeth": view.param_method_kinds, "imeth": view.inherited_method_kinds}.get(kind)
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
