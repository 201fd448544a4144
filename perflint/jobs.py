"""Many files: one job a file, run in this process or in worker processes.

`run_jobs` gives the jobs to forked worker processes when there are enough of them to pay
for the start-up (or to the workers of a `perflint.pool.Pool` that live for a whole project
run), and retries, one at a time, the jobs of a worker that died.  Each job is
`perflint.api.check_file` or `fix_file` on one file.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Callable

from perflint.api import check_file, fix_file
from perflint.diagnostics import ErrorKind, FileError, FileResult
from perflint.engine import BUG_HINT, LintOptions
from perflint.runcontext import current, current_trees


@dataclass
class Job:
    path: str
    options: LintOptions
    fix: bool = False
    unsafe: bool = False
    raw: bytes | None = None
    fixable: frozenset[str] | None = None
    # Cross-module analysis: the project root whose index (the run context's `projects`) answers this file's
    # questions, and whether to return the file's module summary.
    root: str | None = None
    summarise: bool = False
    # A first pass of a project run: whether the process may keep the parsed tree for the
    # second ("always"; "fixes": a fix run's first lint that found something the run fixes,
    # kept with its analysis for the fix job; "asked": a check re-checks only a file that
    # asked its project something; "": no second pass).
    keep: str = ""
    # The file is the only Python file of its project: its own summary answers every question
    # it asks the project, so its first pass is also its last (`engine._first_pass`).
    alone: bool = False
    # A fix job whose first lint the project answers as it did: the fix loop's first pass
    # is that lint's analysis, when this process kept it (`runcontext.TreeStore`).
    reuse: bool = False


def _view(job: Job):
    """The job's window on its project: the run's index of that root (`runcontext`), or
    none yet (a first pass)."""
    if job.root is None:
        return None
    from perflint.analysis.project import ProjectView

    ctx = current()
    return ProjectView(ctx.projects.get(job.root) if ctx is not None else None, job.path, job.root)


def _fixable_pred(job: Job):
    if job.fixable is None:
        return None
    allowed = job.fixable
    return lambda code: code in allowed


def run_job(job: Job) -> FileResult:
    """One job; a first pass (`job.keep`) keeps its tree (the run context's `trees`) when a second pass may
    need it: a fix run fixes every file, a check re-checks only files that asked the project
    something (`result.kept` says whether it was kept)."""
    # A check job's analysis allocates millions of objects for a long file, and every full
    # collection the collector starts meanwhile walks the whole tree again (nine of them for a
    # 40,000-line file): the collector waits until the job ends. A fix job keeps it running:
    # each of its passes leaves an analysis behind, which only the collector frees.
    paused = not job.fix and gc.isenabled()
    if paused:
        gc.disable()
    try:
        result = _run_job(job)
    finally:
        if paused:
            gc.enable()
    trees = current_trees()
    if trees is not None and trees.budget:
        result.kept = trees.end_job(job.path, not result.errors and (
            job.keep == "always" or (job.keep == "asked" and bool(result.questions))
            or (job.keep == "fixes" and has_fixes(result, job.unsafe, job.fixable))), analysis=job.keep == "fixes")
    return result


def has_fixes(result: FileResult, unsafe: bool, fixable: frozenset[str] | None) -> bool:
    """Whether `fix` would change something for these findings: one carries a fix that the
    run applies (safe, or unsafe with --unsafe-fixes) for a code the configuration lets it
    fix (`fixable`; None: every code)."""
    from perflint.report.counts import is_fixable

    return any(is_fixable(d, unsafe) and (fixable is None or d.code in fixable) for d in result.diagnostics)


def _run_job(job: Job) -> FileResult:
    try:
        if job.fix:
            return fix_file(job.path, job.raw, job.options, unsafe=job.unsafe, fixable=_fixable_pred(job),
                            project=_view(job), reuse=job.reuse)
        return check_file(job.path, job.raw, job.options, project=_view(job), summarise=job.summarise,
                          alone=job.alone)
    except RecursionError:
        return FileResult(path=job.path, errors=[FileError(job.path, ErrorKind.INTERNAL, "too deeply nested to analyse")])
    except Exception as exc:  # noqa: BLE001
        return FileResult(
            path=job.path,
            errors=[FileError(job.path, ErrorKind.INTERNAL, f"{type(exc).__name__}: {exc}; {BUG_HINT}".splitlines()[0])],
        )


def preload() -> None:
    """Import the rules (and libcst) once, before worker processes are forked from us (a run
    in this process imports them when a file needs them: not at all when the prefilter
    skips every file)."""
    from perflint.rules import all_rules

    import perflint.analysis  # noqa: F401
    import perflint.positions  # noqa: F401

    all_rules()


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run_jobs(
    jobs: list[Job],
    workers: int,
    progress: Callable[[FileResult], None] | None = None,
    *,
    on_start: Callable[[], Callable[[FileResult], None] | None] | None = None,
    pool=None,
) -> list[FileResult]:
    """Run jobs, in worker processes (`perflint.pool.Pool`) when there are enough of them to
    pay for the start-up: the run's own pool when given, else one for these jobs.

    Results come back in the order of `jobs`.  `on_start`, if given, is called once the
    workers exist (so that no thread, such as a progress display's, is running when they
    are forked) and returns the per-result callback.  A worker that dies (a crash in native
    code, the out-of-memory killer) costs only the file it was working on.
    """
    if pool is not None and jobs and (pool.started or len(jobs) >= 8):
        if not pool.started:
            preload()
        out = pool.run(jobs, progress, on_start)  # workers that live for the whole run
        return _retry_lost(jobs, out, progress)
    if workers <= 1 or len(jobs) < 8 or pool is not None:
        if on_start is not None:
            progress = on_start() or progress
        results: list[FileResult] = []
        for job in jobs:
            r = run_job(job)
            results.append(r)
            if progress:
                progress(r)
        return results
    from perflint.pool import Pool

    preload()
    with Pool(min(workers, len(jobs)), run_job) as own:
        out = own.run(jobs, progress, on_start)
    return _retry_lost(jobs, out, progress)


def _retry_lost(jobs: list[Job], out: list[FileResult | None], progress) -> list[FileResult]:
    """Jobs lost with a dead worker: again, each in a worker of its own, so that the file
    that kills a worker is found and reported and the others still get their results."""
    from perflint.pool import Pool

    for i in [i for i, r in enumerate(out) if r is None]:
        with Pool(1, run_job) as alone:
            out[i] = alone.run([jobs[i]])[0]
        if out[i] is None:
            out[i] = FileResult(path=jobs[i].path, errors=[FileError(
                jobs[i].path, ErrorKind.INTERNAL, f"the worker process checking this file died; {BUG_HINT}")])
        if progress:
            progress(out[i])
    return [r for r in out if r is not None]
