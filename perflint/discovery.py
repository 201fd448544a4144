"""Find the files to check: `.py` and `.ipynb`, honouring .gitignore and excludes.

Paths named on the command line are always checked (as in ruff), unless `force_exclude` is
set, which pre-commit hooks use because pre-commit passes every staged file explicitly.
`.gitignore` files are read at every level from the repository root (the nearest folder
with a `.git`) down to the file, each anchored at its own folder, as git does.

Problems are collected, never raised: a path that does not exist, a symbolic link loop, a
folder that cannot be listed, a broken configuration (reported once, and the files it
governs skipped; files under other configurations are still found).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from perflint.config import ConfigError, Resolver, Settings
from perflint.diagnostics import ErrorKind, FileError

SUFFIXES = (".py", ".ipynb")


@dataclass
class Discovered:
    files: list[tuple[Path, Settings]] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    # Skipped entries worth a word that are not errors (a dangling link inside a folder).
    warnings: list[FileError] = field(default_factory=list)


if TYPE_CHECKING:
    import pathspec


@lru_cache(maxsize=64)
def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(patterns)


_PLAIN_NAME = re.compile(r"[\w.-]+")


@lru_cache(maxsize=64)
def _plain_names(patterns: tuple[str, ...]) -> frozenset[str] | None:
    """The patterns as a set of names, when every one is a plain file or folder name (the
    defaults: `build`, `.venv`); None otherwise.  A gitignore pattern with no slash, wildcard,
    negation or escape matches a path exactly when one of its components is that name (a file
    of that name, or anything inside a folder of that name), so these need no pattern engine."""
    if all(_PLAIN_NAME.fullmatch(p) and p not in (".", "..") for p in patterns):
        return frozenset(patterns)
    return None


class _Ignores:
    """Stacked .gitignore files, each anchored at its own folder (absolute path strings)."""

    def __init__(self) -> None:
        self._specs: dict[str, pathspec.PathSpec | None] = {}
        self._chains: dict[str, tuple[tuple[str, pathspec.PathSpec], ...]] = {}

    def _load(self, directory: str) -> pathspec.PathSpec | None:
        if directory not in self._specs:
            spec = None
            gi = os.path.join(directory, ".gitignore")
            try:
                if os.path.isfile(gi):
                    import pathspec

                    with open(gi, encoding="utf-8", errors="replace") as fh:
                        spec = pathspec.GitIgnoreSpec.from_lines(fh.read().splitlines())
            except (OSError, ValueError):
                spec = None
            self._specs[directory] = spec
        return self._specs[directory]

    def chain(self, directory: str) -> tuple[tuple[str, pathspec.PathSpec], ...]:
        """The .gitignore specs that apply inside `directory`, outermost first."""
        hit = self._chains.get(directory)
        if hit is not None:
            return hit
        own = self._load(directory)
        parent_dir = os.path.dirname(directory)
        if parent_dir == directory or os.path.exists(os.path.join(directory, ".git")):
            parent: tuple = ()
        else:
            parent = self.chain(parent_dir)
        chain = parent + (((directory, own),) if own is not None else ())
        self._chains[directory] = chain
        return chain

    def ignored(self, path: Path | str, is_dir: bool, inherited: bool = False) -> bool:
        """Whether the .gitignore files from the repository root down ignore `path`.

        `inherited`: as for `_excluded`, only patterns matching the entry's own name count.
        """
        path = os.path.abspath(path)
        ignored = False
        suffix = "/" if is_dir else ""
        for d, spec in self.chain(os.path.dirname(path)):
            if inherited:
                rel = os.path.basename(path)
            else:
                rel = path[len(d):].lstrip(os.sep)
                if os.sep != "/":
                    rel = rel.replace(os.sep, "/")
            res = spec.check_file(rel + suffix)
            if res.include is not None:
                ignored = bool(res.include)
        return ignored


def _rel_to_root(path: Path | str, settings: Settings) -> str | None:
    """The path relative to the configuration's folder, "/"-separated; None if outside."""
    absolute = os.path.abspath(path)
    root = settings.root
    if absolute == root:
        return "."
    if absolute.startswith(root.rstrip(os.sep) + os.sep):
        rel = absolute[len(root.rstrip(os.sep)) + 1 :]
        return rel.replace(os.sep, "/") if os.sep != "/" else rel
    try:
        real = os.path.realpath(absolute)
    except OSError:
        return None
    if real.startswith(root.rstrip(os.sep) + os.sep):
        rel = real[len(root.rstrip(os.sep)) + 1 :]
        return rel.replace(os.sep, "/") if os.sep != "/" else rel
    return None


def _excluded(path: Path | str, settings: Settings, is_dir: bool, inherited: bool = False,
              rel: str | None = None) -> bool:
    """Whether `exclude`/`extend-exclude` match the path (relative to the config's folder).

    `inherited`: the path is inside a folder that is itself excluded but was named on the
    command line; only patterns that match this entry's own name count then.  `rel`: the
    path relative to the config's folder, when the caller knows it.
    """
    patterns = settings.exclude + settings.extend_exclude
    if not patterns:
        return False
    names = _plain_names(patterns)
    suffix = "/" if is_dir else ""
    if not inherited:
        if rel is None:
            rel = _rel_to_root(path, settings)
        if rel is not None and rel != ".":
            if names is not None:
                return not names.isdisjoint(rel.split("/"))
            return _spec(patterns).match_file(rel + suffix)
    # Outside the config's folder: bare names ("build") still match, as in ruff.
    base = os.path.basename(os.fspath(path).rstrip(os.sep))
    if names is not None:
        return base in names
    return _spec(patterns).match_file(base + suffix)


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
                where = exc.path or str(path)
                prefix = f"{where}: "
                self.out.errors.append(FileError(where, ErrorKind.CONFIG, msg.removeprefix(prefix)))
            return None


def _link_problem(path: Path) -> str | None:
    """Why a symbolic link cannot be followed, or None when it can."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        if exc.errno == errno.ENOENT:
            return "broken symbolic link (its target does not exist)"
        return exc.strerror or str(exc)
    return None


def discover(paths: list[str], resolver: Resolver, force_exclude: bool = False) -> Discovered:
    out = Discovered()
    safe = _SafeResolver(resolver, out)
    ignores = _Ignores()
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if not os.path.lexists(p):
            out.errors.append(FileError(raw, ErrorKind.IO, "no such file or directory"))
            continue
        problem = _link_problem(p)
        if problem is not None:
            out.errors.append(FileError(raw, ErrorKind.IO, problem))
            continue
        settings = safe.for_path(p)
        if settings is None:
            continue
        if not p.is_dir():
            if force_exclude and (
                _excluded(p, settings, False)
                or (settings.respect_gitignore and ignores.ignored(p, False))
            ):
                continue
            real = p.resolve()
            if real not in seen:
                seen.add(real)
                out.files.append((p, settings))
            continue
        if force_exclude and p.absolute() != Path.cwd() and (
            _excluded(p, settings, True) or (settings.respect_gitignore and ignores.ignored(p, True))
        ):
            continue
        _walk_dir(p, safe, ignores, out, seen)
    out.files.sort(key=lambda fs: str(fs[0]))
    return out


def _walk_dir(top: Path, resolver: _SafeResolver, ignores: _Ignores, out: Discovered, seen: set[Path]) -> None:
    visited_dirs: set[str] = set()
    # (folder, whether an exclude or .gitignore matches it or a folder above it: only a
    # folder named on the command line can be walked then)
    stack: list[tuple[str, bool]] = [(os.fspath(top), False)]
    first = True
    while stack:
        d, inherited = stack.pop()
        try:
            real_d = os.path.realpath(d, strict=True)
        except (OSError, RuntimeError):
            out.errors.append(FileError(d, ErrorKind.IO, "symbolic link loop"))
            continue
        if real_d in visited_dirs:
            continue  # reached again through a symbolic link
        visited_dirs.add(real_d)
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out.errors.append(FileError(d, ErrorKind.IO, f"cannot list folder: {exc.strerror or exc}"))
            continue
        settings = resolver.for_path(Path(d))
        if settings is None:
            continue
        if first:
            first = False
            if os.path.abspath(d) != os.getcwd() and (
                _excluded(d, settings, True)
                or (settings.respect_gitignore and ignores.ignored(d, True))
            ):
                inherited = True
        rel_d = None if inherited else _rel_to_root(d, settings)
        abs_d = os.path.abspath(d)
        subdirs = []
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError:
                is_dir = is_file = False
            suffix = os.path.splitext(name)[1]
            if not (is_dir or suffix in SUFFIXES or entry.is_symlink()):
                continue
            rel = None if rel_d is None else (name if rel_d == "." else f"{rel_d}/{name}")
            if _excluded(entry.path, settings, is_dir, inherited, rel=rel):
                continue
            if settings.respect_gitignore and ignores.ignored(os.path.join(abs_d, name), is_dir, inherited):
                continue
            if not (is_dir or is_file):
                if entry.is_symlink():
                    problem = _link_problem(Path(entry.path))
                    # A loop is always a problem.  A dangling link met while walking is
                    # skipped with a warning where a file to check was meant to be (a file
                    # named on the command line that is a dangling link is an error).
                    if problem == "symbolic link loop":
                        out.errors.append(FileError(entry.path, ErrorKind.IO, problem))
                    elif problem and suffix in SUFFIXES:
                        out.warnings.append(FileError(entry.path, ErrorKind.IO, f"{problem}; skipped"))
                elif suffix in SUFFIXES:
                    out.errors.append(FileError(entry.path, ErrorKind.IO, "not a regular file"))
                continue
            if is_dir:
                subdirs.append((entry.path, inherited))
            elif is_file and suffix in SUFFIXES:  # a link is checked by its own name, as a file is
                if entry.is_symlink():
                    real = Path(os.path.realpath(entry.path))
                else:
                    real = Path(real_d, name)
                if real not in seen:
                    seen.add(real)
                    out.files.append((Path(entry.path), settings))
        # Settings can change at a nested pyproject.toml, so each folder resolves its own.
        stack.extend(reversed(subdirs))
