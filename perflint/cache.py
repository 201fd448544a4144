"""A content-hash result cache, kept in the cache folder's database (`store.Store`).

Its namespace covers perflint's version, a stamp of its own code (so an edited rule never serves
stale results, even without a version bump) and the settings that decide a file's
diagnostics (rules, target torch, whether fix edits are included).  An entry maps a file's
absolute path to the SHA-256 of its bytes and the diagnostics found in it; a changed file
misses.  Files with errors are never cached, so a fixed problem is seen at once.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

from perflint import __version__
from perflint.diagnostics import Diagnostic
from perflint.store import Store


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


@lru_cache(maxsize=1)
def code_stamp() -> str:
    """A hash of the names, sizes and modification times of perflint's own modules."""
    root = os.path.dirname(os.path.realpath(__file__))
    found = []
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(here, root).replace(os.sep, "/")
        found.extend((name if rel == "." else f"{rel}/{name}", os.path.join(here, name))
                     for name in files if name.endswith(".py"))
    h = hashlib.sha256(__version__.encode())
    for rel, full in sorted(found):
        try:
            st = os.stat(full)
        except OSError:
            continue
        h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


class Cache:
    def __init__(self, directory: Path | None, fingerprint: str, store: Store | None = None) -> None:
        self.directory = directory
        key = hashlib.sha256(f"{fingerprint}:{code_stamp()}".encode()).hexdigest()[:20]
        self.namespace = f"results/{__version__}/{key}"
        self.store = store if store is not None else Store(directory)
        self.entries: dict[str, dict] = self.store.load(self.namespace)
        self.changed: dict[str, dict] = {}
        self.used: set[str] = set()
        self.hits = 0

    @property
    def dirty(self) -> bool:
        return bool(self.changed or self.used)

    def get(self, key: str, sha: str, digest_of=None, stamp=None) -> list[Diagnostic] | None:
        """The cached diagnostics of a file whose bytes hash to `sha`, while the answers to the
        questions its analysis asked of its project still hash the same (`digest_of(questions)`).
        `stamp` identifies everything the answers are computed from (the project's files and
        their contents), or computes that from the questions (a callable): when it is the stamp
        the entry was stored with, the answers cannot have changed and are not asked again."""
        entry = self.entries.get(key)
        if not isinstance(entry, dict) or entry.get("sha") != sha:
            return None
        questions = entry.get("q") or []
        if callable(stamp):
            stamp = stamp(questions) if questions else None
        if questions and not (stamp is not None and entry.get("p") == stamp) and (
                digest_of is None or digest_of(questions) != entry.get("a")):
            return None
        try:
            out = [Diagnostic.from_dict(d) for d in entry["diagnostics"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        self.hits += 1
        self.used.add(key)
        return out

    def has(self, key: str, sha: str) -> bool:
        """Whether there is an entry for this content (valid or not once its questions are
        asked again)."""
        entry = self.entries.get(key)
        return isinstance(entry, dict) and entry.get("sha") == sha

    def put(self, key: str, sha: str, diagnostics: list[Diagnostic], questions=(), answers: str | None = None,
            stamp: str | None = None) -> None:
        entry = {"sha": sha, "diagnostics": [d.to_dict() for d in diagnostics]}
        if questions:
            entry["q"], entry["a"] = list(questions), answers
            if stamp is not None:
                entry["p"] = stamp
        self.entries[key] = self.changed[key] = entry

    def save(self) -> None:
        if not self.dirty:
            return
        if self.store.save(self.namespace, "results", self.changed, self.used):
            self.changed, self.used = {}, set()
        # else: a read-only tree still gets its results, just not cached
        self.store.close()


def cache_dir() -> Path:
    """`$PERFLINT_CACHE_DIR`, else `.perflint_cache` in the project root of the current folder
    (the nearest folder at or above it with a `pyproject.toml`, `setup.py`, `setup.cfg` or
    `.git`; the current folder when there is none): a run from a sub-folder shares the
    project's cache."""
    env = os.environ.get("PERFLINT_CACHE_DIR")
    if env:
        return Path(env)
    from perflint.analysis.project import find_root

    return find_root(Path.cwd()) / ".perflint_cache"
