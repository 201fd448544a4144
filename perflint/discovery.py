"""Find the files to check: `.py` and `.ipynb`, honouring .gitignore and excludes.

Paths named on the command line are always checked (as in ruff), unless `force_exclude` is
set, which pre-commit hooks use because pre-commit passes every staged file explicitly.
"""

from __future__ import annotations

import os
from functools import lru_cache
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from perflint.config import ConfigError, Resolver, Settings

SUFFIXES = (".py", ".ipynb")


@dataclass
class Discovered:
    files: list[tuple[Path, Settings]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, message)


@lru_cache(maxsize=64)
def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines("gitwildmatch", patterns)


class _Ignores:
    """Stacked .gitignore files, each anchored at its own folder."""

    def __init__(self) -> None:
        self._cache: dict[Path, pathspec.PathSpec | None] = {}

    def _load(self, directory: Path) -> pathspec.PathSpec | None:
        if directory not in self._cache:
            spec = None
            gi = directory / ".gitignore"
            if gi.is_file():
                try:
                    spec = pathspec.GitIgnoreSpec.from_lines(gi.read_text(encoding="utf-8", errors="replace").splitlines())
                except (OSError, ValueError):
                    spec = None
            self._cache[directory] = spec
        return self._cache[directory]

    def ignored(self, path: Path, is_dir: bool, stop: Path) -> bool:
        """Whether a .gitignore in a folder from `stop` down to path's parent ignores `path`."""
        directory = path.parent
        chain = []
        while True:
            chain.append(directory)
            if directory.parent == directory or (directory / ".git").exists():
                break
            directory = directory.parent
        ignored = False
        for d in reversed(chain):
            spec = self._load(d)
            if spec is None:
                continue
            rel = path.relative_to(d).as_posix() + ("/" if is_dir else "")
            res = spec.check_file(rel)
            if res.include is not None:
                ignored = bool(res.include)
        return ignored


def _excluded(path: Path, settings: Settings) -> bool:
    patterns = tuple(settings.exclude) + tuple(settings.extend_exclude)
    if not patterns:
        return False
    root = Path(settings.root)
    try:
        rel = path.resolve().relative_to(root).as_posix()
    except ValueError:
        rel = path.as_posix()
    spec = _spec(patterns)
    if spec.match_file(rel) or spec.match_file(rel + "/"):
        return True
    # Bare names ("build") match any path component, as in ruff.
    return spec.match_file(path.name) or (path.is_dir() and spec.match_file(path.name + "/"))


class _SafeResolver:
    """Wraps a Resolver: a broken config is reported once and its files are skipped."""

    def __init__(self, resolver: Resolver, out: Discovered) -> None:
        self.resolver = resolver
        self.out = out
        self.reported: set[str] = set()

    def for_path(self, path: Path) -> Settings | None:
        try:
            return self.resolver.for_path(path)
        except ConfigError as exc:
            msg = str(exc)
            if msg not in self.reported:
                self.reported.add(msg)
                self.out.errors.append((str(path), "config: " + msg))
            return None


def discover(paths: list[str], resolver: Resolver, force_exclude: bool = False) -> Discovered:
    out = Discovered()
    resolver = _SafeResolver(resolver, out)  # type: ignore[assignment]
    ignores = _Ignores()
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if not os.path.lexists(p):
            out.errors.append((raw, "no such file or directory"))
            continue
        try:
            real = p.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            reason = "symbolic link loop" if isinstance(exc, RuntimeError) or getattr(exc, "errno", 0) == 40 else (
                exc.strerror or str(exc))
            out.errors.append((raw, f"cannot resolve path: {reason}"))
            continue
        settings = resolver.for_path(p)
        if settings is None:
            continue
        if real.is_file():
            if force_exclude and (_excluded(p, settings) or (settings.respect_gitignore and ignores.ignored(real, False, Path(settings.root)))):
                continue
            if real not in seen:
                seen.add(real)
                out.files.append((p, settings))
            continue
        _walk_dir(p, resolver, ignores, out, seen)
    out.files.sort(key=lambda fs: str(fs[0]))
    return out


def _walk_dir(top: Path, resolver: "_SafeResolver", ignores: _Ignores, out: Discovered, seen: set[Path]) -> None:
    visited_dirs: set[Path] = set()
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            real_d = d.resolve(strict=True)
        except (OSError, RuntimeError):
            out.errors.append((str(d), "cannot resolve path: symbolic link loop or broken link"))
            continue
        if real_d in visited_dirs:
            continue  # a symlink cycle
        visited_dirs.add(real_d)
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            out.errors.append((str(d), f"cannot list folder: {exc.strerror or exc}"))
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()
                is_file = entry.is_file()
            except OSError:
                is_dir = is_file = False
            if entry.is_symlink() and not (is_dir or is_file):
                out.errors.append((str(path), "cannot resolve path: symbolic link loop or broken link"))
                continue
            settings = resolver.for_path(path)
            if settings is None or _excluded(path, settings):
                continue
            if settings.respect_gitignore and ignores.ignored(path.absolute(), is_dir, Path(settings.root)):
                continue
            if is_dir:
                stack.append(path)
            elif is_file and path.suffix in SUFFIXES:
                try:
                    real = path.resolve()
                except (OSError, RuntimeError):
                    continue
                if real not in seen:
                    seen.add(real)
                    out.files.append((path, settings))
