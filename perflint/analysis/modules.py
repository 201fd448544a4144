"""How a project's imports resolve to its own modules (see `analysis.project`): a script's
own folder first, then the project root, then `src/`, then the folders between; packages
through `__init__.py`, relative imports, re-exports and star imports.  Anything outside the
project stays known by name only; unresolved stays unknown.

Answers from module summaries alone (no libcst).
"""

from __future__ import annotations

import os
import re

# An import statement (also in a notebook's JSON strings, after `;` or `:`), continued over
# lines by parentheses or backslashes: `from`'s module and what it imports, or the modules
# (and aliases) `import` lists.
_IMPORT = re.compile(rb"(?:^|[\n;:>\"'])[ \t]*(?:from[ \t]+([\w. \t]+?)[ \t]+import[ \t]+"
                     rb"(\([^)]*\)|(?:[^\n;\"'\\]|\\\r?\n)*)|import[ \t]+((?:[^\n;\"'\\]|\\\r?\n)*))")
_WORD = re.compile(rb"\w+")


def import_words(text: bytes) -> frozenset[bytes]:
    """Every name the import statements of `text` mention (the partial run's search for the
    files that import a checked module; `orphans`' search for any mention of a module)."""
    words: set[bytes] = set()
    for m in _IMPORT.finditer(text):
        for part in m.groups():
            if part:
                words.update(_WORD.findall(part))
    return frozenset(words)


MAX_DEPTH = 4


class ModuleResolver:
    """Where the names a project file imports are defined, and which project files it imports."""

    def __init__(self, root: str, summaries: dict[str, dict]) -> None:
        self.root = root
        self.summaries = summaries  # absolute path → summary
        self._files = set(summaries)
        self._memo: dict = {}

    def _module_file(self, base: str, dotted: str) -> str | None:
        rel = dotted.replace(".", os.sep)
        for cand in (os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")):
            if cand in self._files:
                return cand
        return None

    def search_bases(self, importer: str) -> list[str]:
        """Folders an absolute import of `importer` may start from: its own folder, the
        folders between it and the project root, nearest first (scripts in `code/` that
        import `networks.unet` put `code/` on the path for every module below it; a
        sub-project `FEDformer/` run from its own folder finds its `layers/` before the
        root's), then the project root and `src/`."""
        here = os.path.dirname(importer)
        out = [here]
        up = os.path.dirname(here)
        while len(up) > len(self.root) and up.startswith(self.root + os.sep):
            out.append(up)
            up = os.path.dirname(up)
        out += [self.root, os.path.join(self.root, "src")]
        return list(dict.fromkeys(out))

    def resolve(self, importer: str, ref: str, depth: int = 0) -> tuple[str, str] | None:
        """(file, symbol) that `ref` names as seen from `importer`: "pkg.mod.func",
        ".mod.func" (relative), "#func" (the importer itself), "*func" (via a star import)."""
        if depth > MAX_DEPTH:
            return None
        # Every recursion goes one level deeper, so with the depth in the key no call waits on
        # itself, and an answer never depends on which question was asked first.
        key = ("resolve", importer, ref, depth)
        if key in self._memo:
            return self._memo[key]
        got = self._resolve(importer, ref, depth)
        self._memo[key] = got
        return got

    def _resolve(self, importer: str, ref: str, depth: int) -> tuple[str, str] | None:
        if ref.startswith("#"):
            return self._follow(importer, ref[1:], depth)
        if ref.startswith("*"):
            summary = self.summaries.get(importer) or {}
            for star in summary.get("stars", ()):
                target = self.module_ref(importer, star)
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
        for base in self.search_bases(importer):
            for cut in range(len(parts), 0, -1):
                f = self._module_file(base, ".".join(parts[:cut]))
                if f is not None and f != importer:
                    sym = ".".join(parts[cut:])
                    return (f, "") if not sym else self._follow(f, sym, depth + 1)
        return None

    def module_ref(self, importer: str, ref: str) -> str | None:
        """The project file `ref` names as a module, seen from `importer`."""
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

    # -- the import graph ------------------------------------------------------------------
    def imports_of(self, path: str) -> set[str]:
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
            frontier = [m for p in frontier for m in self.imports_of(p) if m not in down]
            down.update(frontier)
        importers = {p for p in self.summaries if p != path and path in self.imports_of(p)}
        up, frontier = set(importers), list(importers)
        for _ in range(MAX_DEPTH):
            frontier = [q for p in frontier for q in self.summaries if q not in up and q != path and p in self.imports_of(q)]
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
        and what its own star imports bind in turn.  A name the module defines itself (its
        own `class DataLoader`) maps to "": no library name, whatever it is conventionally."""
        key = ("stars", path, depth)
        if key in self._memo:
            return self._memo[key]
        out: dict[str, str] = {}
        for star in (self.summaries.get(path) or {}).get("stars", ()):
            target = self.module_ref(path, star)
            if target is None or target == path or depth > MAX_DEPTH:
                continue
            summary = self.summaries.get(target) or {}
            names = dict(self.star_aliases(target, depth + 1))
            names.update(summary.get("libs", {}))
            for defined in (*summary.get("classes", {}), *summary.get("functions", {})):
                names[defined] = ""
            exported = summary.get("all")
            for k, v in names.items():
                if (exported is None or k in exported) and not k.startswith("_"):
                    out.setdefault(k, v)
        self._memo[key] = out
        return out
