"""A whole run: discover files, consult the cache, lint or fix in parallel, write fixes.

This is library code (it prints nothing); `perflint.cli` renders what it returns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perflint.cache import Cache, cache_dir, digest
from perflint.config import Resolver, Settings
from perflint.diagnostics import ErrorKind, FileError, FileResult
from perflint.discovery import discover
from perflint.engine import Job, LintOptions, run_jobs
from perflint.selection import fixable_codes, ignored_for_path, selected_codes
from perflint.source import atomic_write


@dataclass
class RunOutcome:
    results: list[FileResult] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    files: int = 0
    cached: int = 0
    skipped: int = 0

    @property
    def all_errors(self) -> list[FileError]:
        errs = list(self.errors)
        for r in self.results:
            errs.extend(r.errors)
        return errs


def options_for(path: Path, settings: Settings, with_edits: bool) -> LintOptions:
    codes = set(selected_codes(settings))
    try:
        rel = path.resolve().relative_to(Path(settings.root)).as_posix()
    except ValueError:
        rel = path.as_posix()
    codes -= ignored_for_path(settings, rel)
    return LintOptions(codes=tuple(sorted(codes)), target_torch=settings.effective_target(), with_edits=with_edits)


def run(
    paths: list[str],
    resolver: Resolver,
    *,
    fix: bool = False,
    unsafe: bool | None = None,
    diff: bool = False,
    with_edits: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    force_exclude: bool = False,
    progress: Callable[[int], Callable[[FileResult], None]] | None = None,
) -> RunOutcome:
    outcome = RunOutcome()
    found = discover(paths, resolver, force_exclude=force_exclude)
    for p, msg in found.errors:
        kind = ErrorKind.IO
        if msg.startswith("config: "):
            kind = ErrorKind.CONFIG
            msg = msg.removeprefix("config: ")
            p, msg = _config_path(msg), _config_msg(msg)
        outcome.errors.append(FileError(p, kind, msg))
    outcome.files = len(found.files)

    caches: dict[str, Cache] = {}
    pending: list[Job] = []
    shas: dict[str, str] = {}
    results: dict[str, FileResult] = {}
    order: list[str] = []
    for path, settings in found.files:
        key = str(path)
        order.append(key)
        options = options_for(path, settings, with_edits)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            reason = "file not found (it may have been removed)" if isinstance(exc, FileNotFoundError) else (
                f"cannot read: {exc.strerror or exc}")
            results[key] = FileResult(path=key, errors=[FileError(key, ErrorKind.IO, reason)])
            continue
        want_unsafe = settings.unsafe_fixes if unsafe is None else unsafe
        if not fix and use_cache:
            fp = options.fingerprint()
            cache = caches.get(fp) or caches.setdefault(fp, Cache(cache_dir(), fp))
            sha = digest(raw)
            shas[key] = sha
            hit = cache.get(os.path.abspath(key), sha)
            if hit is not None:
                results[key] = FileResult(path=key, diagnostics=hit, from_cache=True)
                outcome.cached += 1
                continue
        pending.append(
            Job(path=key, options=options, fix=fix, unsafe=want_unsafe, raw=raw, fixable=fixable_codes(settings))
        )
    workers = jobs if jobs and jobs > 0 else (os.cpu_count() or 1)
    callback = progress(len(pending)) if progress else None
    job_by_path = {j.path: j for j in pending}
    for r in run_jobs(pending, workers, callback):
        results[r.path] = r
        if not fix and use_cache and not r.errors:
            fp = job_by_path[r.path].options.fingerprint()
            caches[fp].put(os.path.abspath(r.path), shas[r.path], r.diagnostics)
        if r.skipped:
            outcome.skipped += 1
    for c in caches.values():
        c.save()
    if fix and not diff:
        for r in results.values():
            if r.fixed_bytes is not None:
                _write(r)
    outcome.results = [results[k] for k in order if k in results]
    return outcome


def _write(r: FileResult) -> None:
    """Write a fixed file, unless it changed on disk since it was read."""
    try:
        current = Path(r.path).read_bytes()
    except OSError as exc:
        r.errors.append(FileError(r.path, ErrorKind.IO, f"not written: {exc.strerror or exc}"))
        r.fixed_bytes = None
        return
    if current != r.original_bytes:
        r.errors.append(FileError(r.path, ErrorKind.FIX, "file changed on disk while it was being fixed; not written"))
        r.fixed_bytes = None
        return
    try:
        atomic_write(r.path, r.fixed_bytes)  # type: ignore[arg-type]
    except OSError as exc:
        r.errors.append(FileError(r.path, ErrorKind.IO, f"not written: {exc.strerror or exc}"))
        r.fixed_bytes = None


def _config_path(message: str) -> str:
    head = message.split(": ", 1)[0]
    return head


def _config_msg(message: str) -> str:
    parts = message.split(": ", 1)
    return parts[1] if len(parts) == 2 else message
