"""A whole run: discover files, consult the cache, lint or fix in parallel, write fixes.

This is library code (it prints nothing); `perflint.cli` renders what it returns.  Results
come back in the order of the discovered paths whatever the number of workers, so output is
the same from run to run.
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
from perflint.engine import LintOptions
from perflint.jobs import Job, default_workers, has_fixes, run_job, run_jobs
from perflint.projectrun import ProjectPhase
from perflint.options import options_for
from perflint.selection import fixable_codes
from perflint.source import SourceError, atomic_write, read_bytes

ProgressFactory = Callable[[int], "Callable[[FileResult], None] | None"]


@dataclass
class RunOutcome:
    results: list[FileResult] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)  # not tied to one checked file
    warnings: list[FileError] = field(default_factory=list)  # skipped, not errors (dangling links)
    files: int = 0
    written: list[str] = field(default_factory=list)  # files replaced by their fixed versions
    cached: int = 0
    skipped: int = 0
    unsafe_any: bool = False  # a configuration that governs a checked file has unsafe-fixes = true

    @property
    def all_errors(self) -> list[FileError]:
        errs = list(self.errors)
        for r in self.results:
            errs.extend(r.errors)
        return errs




def run(
    paths: list[str],
    resolver: Resolver,
    *,
    fix: bool = False,
    unsafe: bool | None = None,
    diff: bool = False,
    with_edits: bool = True,
    use_cache: bool = True,
    jobs: int | None = None,
    force_exclude: bool = False,
    progress: ProgressFactory | None = None,
    stdin: bytes | None = None,
    stdin_filename: str | None = None,
) -> RunOutcome:
    """Check (or fix) `paths`.  `progress(n)` is called once the n files to analyse are
    known and returns a callback for each finished file (or None).

    With `stdin` (the bytes read from standard input) `paths` is ignored: the one file
    checked is those bytes, reported as `stdin_filename` (configuration, excludes and
    per-file ignores are those of that path) or "-"; nothing is written.
    """
    outcome = RunOutcome()
    given: dict[str, bytes] = {}
    if stdin is not None:
        name = str(Path(stdin_filename)) if stdin_filename else STDIN_NAME
        found = _stdin_file(name, resolver, force_exclude)
        given[name] = stdin
        paths = [os.path.dirname(name) or "."] if stdin_filename else ["."]
    else:
        found = discover(paths, resolver, force_exclude=force_exclude)
    outcome.errors.extend(found.errors)
    outcome.warnings.extend(found.warnings)
    outcome.files = len(found.files)

    f = _Files()
    memo: dict = {}
    for path, settings in found.files:
        key = str(path)
        f.order.append(key)
        options = options_for(path, settings, with_edits, memo)
        try:
            raw = given[key] if key in given else read_bytes(key)
        except SourceError as exc:
            f.results[key] = FileResult(path=key, errors=[FileError(key, ErrorKind(exc.kind), exc.message)])
            continue
        want_unsafe = settings.unsafe_fixes if unsafe is None else unsafe
        outcome.unsafe_any = outcome.unsafe_any or want_unsafe
        f.raws[key], f.unsafe_for[key], f.settings_for[key], f.options_of[key] = raw, want_unsafe, settings, options
        f.shas[key] = digest(raw)
        if use_cache:
            fp = options.fingerprint()
            f.fingerprints[key] = fp
            f.caches.get(fp) or f.caches.setdefault(fp, Cache(cache_dir(), fp))

    workers = jobs if jobs and jobs > 0 else default_workers()
    started = {"done": False}

    def on_start_for(n: int):
        if progress is None or started["done"]:
            return None
        started["done"] = True
        return lambda: progress(n)

    from perflint.pool import TREE_BUDGET, Pool
    from perflint.runcontext import RunContext, running

    pool = Pool(workers, run_job) if workers > 1 else None
    ctx = RunContext()
    ctx.trees.enable(TREE_BUDGET)
    try:
        with running(ctx):
            return _run_phases(outcome, f, paths, use_cache=use_cache, fix=fix, diff=diff, stdin=stdin is not None,
                               workers=workers, on_start_for=on_start_for, pool=pool)
    except KeyboardInterrupt:
        raise Interrupted(outcome.written) from None
    finally:
        if pool is not None:
            pool.close()


@dataclass
class _Files:
    """The files of one run, by path as given: bytes, hashes, options, and results so far."""

    order: list[str] = field(default_factory=list)
    raws: dict[str, bytes] = field(default_factory=dict)
    shas: dict[str, str] = field(default_factory=dict)
    options_of: dict[str, LintOptions] = field(default_factory=dict)
    unsafe_for: dict[str, bool] = field(default_factory=dict)
    settings_for: dict[str, Settings] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)  # path → result-cache key
    caches: dict[str, Cache] = field(default_factory=dict)  # result-cache key → cache
    results: dict[str, FileResult] = field(default_factory=dict)


def _run_phases(outcome: RunOutcome, f: _Files, paths: list[str], *, use_cache: bool, fix: bool, diff: bool,
                stdin: bool, workers: int, on_start_for, pool) -> RunOutcome:
    raws, shas, options_of, fingerprints, caches, results = (f.raws, f.shas, f.options_of, f.fingerprints,
                                                             f.caches, f.results)
    pending: list[Job] = []
    # Phase 1: the project model.  Checked files whose summary is not cached get their first
    # lint and their summary from one parse; other project files the checks need are
    # summarised; then each root's index is built.
    proj = ProjectPhase(list(raws), raws, shas, paths, use_cache, options_of)
    first: dict[str, FileResult] = {}
    phase1 = proj.first_jobs()
    for j in phase1:
        j.keep = "fixes" if fix else "asked"
        if fix:  # what the run would fix decides whether the worker keeps the tree for it
            j.unsafe, j.fixable = f.unsafe_for[j.path], fixable_codes(f.settings_for[j.path])
    if not fix:
        # The other files go along in the same pool (a plain lint each: most are skipped by
        # the prefilter), unless the result cache may answer them once the project is known.
        queued = {j.path for j in phase1}
        for key in raws:
            if key in queued or proj.summary_cached(key):
                continue
            if use_cache and key in fingerprints and caches[fingerprints[key]].has(os.path.abspath(key), shas[key]):
                continue
            phase1.append(Job(path=key, options=options_of[key], raw=raws[key], root=proj.root_of(key), keep="asked"))
    n_first = len(phase1)
    for r in run_jobs(phase1, workers, on_start=on_start_for(n_first) if n_first else None, pool=pool):
        proj.take(r)
        first[r.path] = r
    proj.complete(workers, pool)

    # Phase 2: answers from the cache, from the first lint, or a (re-)check (or the fix) with
    # the project.  A fix run takes the first lint of a file with nothing to fix as it is.
    for key in list(raws):
        options = options_of[key]
        view_root = proj.root_of(key)
        reuse = False
        if key in first:
            r = first[key]
            if fix and (r.errors or has_fixes(r, f.unsafe_for[key], fixable_codes(f.settings_for[key]))):
                # The fix job below; its first pass is this lint where the project answers
                # as the lint assumed and the worker kept the analysis.
                reuse = r.kept and not r.errors and not proj.relevant(key, r.questions, r.answers)
            elif r.errors or not proj.relevant(key, r.questions, r.answers):
                if fix:
                    _as_fix_result(r, raws[key], options)
                results[key] = r
                if r.skipped:
                    outcome.skipped += 1
                continue
        elif use_cache and key in fingerprints:
            cache = caches[fingerprints[key]]
            hit = cache.get(os.path.abspath(key), shas[key], lambda q, key=key: proj.digest(key, q),
                            lambda q, key=key: proj.stamp(key, q))
            # When fixing, only a file known to have no findings can be answered from
            # the cache: there is nothing to fix in it.
            if hit is not None and (not fix or not hit):
                results[key] = FileResult(path=key, diagnostics=hit, from_cache=True)
                outcome.cached += 1
                continue
        pending.append(
            Job(path=key, options=options, fix=fix, unsafe=f.unsafe_for[key], raw=raws[key],
                fixable=fixable_codes(f.settings_for[key]), root=view_root, reuse=reuse)
        )
    for r in run_jobs(pending, workers, on_start=on_start_for(len(pending)) if n_first == 0 else None, pool=pool):
        results[r.path] = r
        if r.skipped:
            outcome.skipped += 1
    if fix and not diff and not stdin:
        for r in results.values():
            if r.fixed_bytes is not None:
                _write(r)
                if r.fixed_bytes is not None:
                    outcome.written.append(r.path)
    if use_cache:
        for r in results.values():
            if r.from_cache or r.errors or r.path not in fingerprints:
                continue
            if r.fixed_bytes is not None:
                if diff:
                    continue  # the file on disk still holds what the diagnostics were not found in
                sha = digest(r.fixed_bytes)
            else:
                sha = shas[r.path]
            caches[fingerprints[r.path]].put(os.path.abspath(r.path), sha, r.diagnostics,
                                             r.questions, proj.digest(r.path, r.questions),
                                             proj.stamp(r.path, r.questions))
        for c in caches.values():
            c.save()
        proj.save()
    outcome.results = [results[k] for k in f.order if k in results]
    _drop_unfixable(outcome.results, f.settings_for)
    return outcome


def _as_fix_result(r: FileResult, raw: bytes, options) -> None:
    """A first lint taken as the outcome of fixing a file with nothing to fix: as the fix
    job reports it (the bytes it read; skipped where no selected rule can fire)."""
    from perflint.engine import _cannot_fire, not_torch_code

    r.original_bytes = raw
    r.summary = None
    if _cannot_fire(raw, options) or not_torch_code(raw):
        r.skipped = True


def _drop_unfixable(results: list[FileResult], settings_for: dict[str, Settings]) -> None:
    """Findings of codes the configuration makes unfixable (`fixable`/`unfixable`) carry no
    fix: no `[*]`, not counted as fixable, no edits in the JSON (as in ruff)."""
    from dataclasses import replace

    memo: dict = {}
    for r in results:
        settings = settings_for.get(r.path)
        if settings is None or not r.diagnostics:
            continue
        if settings not in memo:
            memo[settings] = fixable_codes(settings)
        allowed = memo[settings]
        if allowed is None:
            continue
        r.diagnostics = [d if d.fix is None or d.code in allowed else replace(d, fix=None) for d in r.diagnostics]


STDIN_NAME = "-"


def _stdin_file(name: str, resolver: Resolver, force_exclude: bool):
    """Discovery for source read from standard input: the settings of the path it stands for."""
    from perflint.config import ConfigError
    from perflint.discovery import Discovered, _excluded, _Ignores

    out = Discovered()
    where = Path(name if name != STDIN_NAME else "stdin.py")
    try:
        settings = resolver.for_path(where)
    except ConfigError as exc:
        path = exc.path or name
        out.errors.append(FileError(path, ErrorKind.CONFIG, str(exc).removeprefix(f"{path}: ")))
        return out
    if force_exclude and name != STDIN_NAME and (
        _excluded(where, settings, False)
        or (settings.respect_gitignore and _Ignores().ignored(where, False))
    ):
        return out
    out.files.append((Path(name), settings))
    return out


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run; `written` files had already been replaced by their fixed versions."""

    def __init__(self, written: list[str]) -> None:
        super().__init__()
        self.written = list(written)


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
