"""Modules nothing imports: a helper module of a project of scripts that no file of the
project imports, by any spelling (no import statement in any Python file, notebook, README
or shell script names it, no dotted name in them names it, no config file names it, nothing
imports by a computed name), and whose own top-level code calls none of its functions or
classes.  Its functions never run: a finding inside them costs no time (GraphCL's
`train_molecules_graph_regression.py` next to the `train_*.py` modules its entry scripts do
import; the speaker-encoder `train.py` that Speech-Backbones copied without its script).

A module is unsure wherever the project imports by a computed name (`importlib.import_module`,
`__import__`, `exec`, `pydoc.locate`: Time-Series-Library's `exp/` imports every `models/*`
module by name), except from another sub-project: in a repository of several independent projects, a
top-level folder with its own README (Speech-Backbones' SPIRAL beside DiffVC) imports its own
modules by name.

So is every module of a project with no script (no `if __name__ == "__main__":` anywhere):
its modules are there for other code to import.  A project that can be installed (a
`setup.py`, or a `setup.cfg` or `pyproject.toml` that declares a package, at its root) is a
library: its users import its modules from their own code, so none is an orphan.  A test
file (pytest imports it), `conftest.py`, `hubconf.py` (`torch.hub.load` imports it),
`__init__.py` and `__main__.py` never are either.
"""

from __future__ import annotations

import os
import re

from perflint.analysis.launches import _files
from perflint.analysis.modules import import_words

_SETUP_CFG_TABLES = re.compile(rb"^[ \t]*\[(?:metadata|options)\]", re.M)
_PYPROJECT_TABLES = re.compile(rb"^[ \t]*\[(?:project|build-system|tool\.poetry|tool\.setuptools|tool\.flit[\w.]*|tool\.hatch[\w.]*)\]", re.M)
_NEVER_ORPHANS = frozenset({"__init__", "__main__", "conftest", "hubconf", "setup"})
# Importing by a computed name: any of these in the project and no module is sure to be unread.
_DYNAMIC = re.compile(rb"import_module\s*\(|__import__\s*\(|load_source\s*\(|spec_from_file_location\s*\(|\blocate\s*\(|"
                      rb"run_path\s*\(|run_module\s*\(|load_module\s*\(|\bexec\s*\(|SourceFileLoader|"
                      rb"importlib\.import|\bimp\.load")
_WORD = re.compile(rb"\w+")
# A dotted name anywhere in a document or a Python string names modules too (`--model
# mypkg.models.Net` for a CLI that imports by path, `"models.resnet.ResNet"` for `pydoc.locate`).
_DOTTED = re.compile(rb"\b\w+(?:\.\w+)+\b")
_DOTTED_STRING = re.compile(rb"[\"']\s*(\w+(?:\.\w+)+)\s*[\"']")
_FILE_SUFFIXES = frozenset({b"py", b"sh", b"bash", b"md", b"txt", b"yaml", b"yml", b"json", b"toml", b"cfg", b"ini",
                            b"ipynb", b"pt", b"pth", b"ckpt", b"bin", b"npy", b"npz", b"pkl", b"h5", b"csv", b"tsv",
                            b"png", b"jpg", b"jpeg", b"gif", b"wav", b"mp4", b"zip", b"tar", b"gz", b"html", b"log"})
_MAIN_GUARD = re.compile(rb"__name__\s*==\s*['\"]__main__['\"]|['\"]__main__['\"]\s*==\s*__name__")
_CONFIG = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".jsonnet")
_MAX_BYTES = 2_000_000
_MAX_FILES = 5000


def _is_text(low: str) -> bool:
    return low.endswith((".py", ".ipynb", ".md", ".rst", ".sh", ".bash", ".txt") + _CONFIG)


def text_files(root: str) -> list[str] | None:
    """The files `never_imported` reads (None past the most it reads)."""
    out = []
    for path in _files(root, _is_text):
        if len(out) >= _MAX_FILES:
            return None
        out.append(path)
    return out


def _words(index) -> tuple[frozenset[bytes], frozenset[str]] | None:
    """Every word that an import statement of the project's Python files, notebooks or
    documents names, and every word of its config files; and the top-level folders ("" for
    the root) whose Python files or notebooks import by a computed name.  None when the
    project has no script, more files than are read, or a file that cannot be read."""
    memo = index._memo
    if "import words" in memo:
        return memo["import words"]
    words: set[bytes] | None = set()
    dynamic: set[str] = set()
    scripts = False
    root = str(index.root)
    files = text_files(root)
    for path in files if files is not None else ():
        try:
            if os.path.getsize(path) > _MAX_BYTES:
                continue
            with open(path, "rb") as fh:
                text = fh.read()
        except OSError:
            words = None
            break
        low = path.lower()
        if low.endswith(_CONFIG):
            words.update(_WORD.findall(text))
            continue
        if low.endswith((".py", ".ipynb")) and _DYNAMIC.search(text):
            dynamic.add(_top_folder(root, path))
        scripts = scripts or low.endswith(".py") and _MAIN_GUARD.search(text) is not None
        words.update(import_words(text))
        code = low.endswith((".py", ".ipynb"))
        for m in (_DOTTED_STRING if code else _DOTTED).finditer(text):
            parts = m.group(1 if code else 0).split(b".")
            if parts[-1].lower() not in _FILE_SUFFIXES:  # `train.py` names a file, not a module
                words.update(parts)
    # A project with no script (no `if __name__ == "__main__":`) is a set of modules for
    # other code to import: none of them is an orphan.
    got = memo["import words"] = (frozenset(words), frozenset(dynamic)) \
        if files is not None and words is not None and scripts else None
    return got


def _top_folder(root: str, path: str) -> str:
    """The first folder of `path` under `root` ("" for a file at the root)."""
    parts = os.path.relpath(path, root).split(os.sep)
    return parts[0] if len(parts) > 1 else ""


def _installable(root: str) -> bool:
    """The project can be installed: a `setup.py`, a `setup.cfg` with package metadata, or a
    `pyproject.toml` with a `[project]`, `[build-system]` or `[tool.poetry]` table (one that
    only configures tools, `[tool.black]`, does not make a library)."""
    if os.path.isfile(os.path.join(root, "setup.py")):
        return True
    for name, tables in (("setup.cfg", _SETUP_CFG_TABLES), ("pyproject.toml", _PYPROJECT_TABLES)):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as fh:
                text = fh.read(_MAX_BYTES)
        except OSError:
            return True  # unsure
        if tables.search(text):
            return True
    return False


def never_imported(index, path: str) -> bool:
    """Whether no file of `index`'s project imports the module `path` (see the module's
    docstring); its own top-level code is the caller's to check."""
    root = str(index.root)
    if _installable(root):
        return False
    name = os.path.basename(path)
    stem = name[:-3] if name.endswith(".py") else name
    if stem in _NEVER_ORPHANS or stem.startswith("test_") or stem.endswith("_test"):
        return False
    if index._import_uses().get(path) is not None:
        return False
    got = _words(index)
    if got is None:
        return False
    words, dynamic = got
    if stem.encode() in words:
        return False
    top = _top_folder(root, path)
    # A computed import elsewhere may reach this module (Time-Series-Library's `exp/` imports
    # `models/*` by name), unless it sits in another sub-project: a top-level folder with a
    # README of its own (Speech-Backbones' `SPIRAL/` beside `DiffVC/`) imports its own modules.
    return all(d and d != top and _has_readme(os.path.join(root, d)) for d in dynamic)


def _has_readme(folder: str) -> bool:
    try:
        return any(n.lower().startswith("readme") for n in os.listdir(folder))
    except OSError:
        return False
