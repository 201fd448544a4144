"""A content-hash result cache: `.perflint_cache/<version>/<settings fingerprint>.json`.

An entry maps a file path to the SHA-256 of its bytes and the diagnostics found in it; a
changed file, another perflint version or other settings (rules, target torch) miss.  Files
with errors are never cached, so a fixed problem is seen at once.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from perflint import __version__
from perflint.diagnostics import Diagnostic
from perflint.source import atomic_write


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


class Cache:
    def __init__(self, directory: Path, fingerprint: str) -> None:
        self.directory = directory
        self.path = directory / __version__ / f"{fingerprint}.json"
        self.entries: dict[str, dict] = {}
        self.dirty = False
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                self.entries = data
        except (OSError, ValueError):
            self.entries = {}

    def get(self, key: str, sha: str) -> list[Diagnostic] | None:
        entry = self.entries.get(key)
        if not entry or entry.get("sha") != sha:
            return None
        try:
            return [Diagnostic.from_dict(d) for d in entry["diagnostics"]]
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, sha: str, diagnostics: list[Diagnostic]) -> None:
        self.entries[key] = {"sha": sha, "diagnostics": [d.to_dict() for d in diagnostics]}
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            marker = self.directory / ".gitignore"
            if not marker.exists():
                marker.write_text("# Created by perflint automatically.\n*\n", encoding="utf-8")
                (self.directory / "CACHEDIR.TAG").write_text(
                    "Signature: 8a477f597d28d172789f06886806bc55\n# perflint result cache\n", encoding="utf-8"
                )
            atomic_write(str(self.path), json.dumps(self.entries, separators=(",", ":")).encode("utf-8"))
        except OSError:
            pass  # a read-only tree still gets its results, just not cached


def cache_dir() -> Path:
    env = os.environ.get("PERFLINT_CACHE_DIR")
    return Path(env) if env else Path.cwd() / ".perflint_cache"
