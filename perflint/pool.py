"""Worker processes that live for a whole run and remember which files they parsed.

A project run passes over files twice: every file first on its own (phase 1), then again
the few whose questions to the project got answers (phase 2).  `concurrent.futures` gives
each job to whichever worker is free, so the second pass parses again.  Here each worker
keeps the trees of its first pass (its `runcontext.RunContext`, within a budget), and a second-pass job
goes to the worker that holds its tree; a worker with nothing of its own to do takes shared
jobs, then another worker's queued ones (parsing them again rather than waiting).

A worker that dies (a crash in native code, the out-of-memory killer) costs only the job it
was running: its result stays None for the caller to retry, its queued jobs go to the
others.  The run's project indexes are sent to every worker when they change.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Callable

from perflint.diagnostics import ErrorKind, FileError, FileResult

# Characters of source whose trees the workers of one run may keep, all together (a
# tree takes about 30 bytes of memory per character: 32 M characters is about 1 GB).
TREE_BUDGET = 32 << 20


def _worker_init() -> None:
    # A parse allocates millions of small objects and frees them by reference counting;
    # the cyclic collector only slows that down.  Objects inherited from the parent are
    # frozen out of its reach.
    from perflint.ownership import tune_gc

    tune_gc(worker=True)


def _worker(conn, budget: int, run_job) -> None:
    import signal

    from perflint.runcontext import RunContext, running

    # Ctrl-C is the parent's to handle: it stops the workers (see `Pool.close`).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_init()
    ctx = RunContext()
    ctx.trees.enable(budget)
    try:
        with running(ctx):
            _serve(conn, run_job, ctx)
    except (EOFError, OSError):
        return  # the parent is gone


def _serve(conn, run_job, ctx) -> None:
    from perflint.engine import BUG_HINT

    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        if msg[0] == "projects":
            ctx.projects.clear()
            ctx.projects.update(msg[1])
            continue
        _, i, job = msg
        r = run_job(job)
        try:
            conn.send((i, r))
        except Exception as exc:  # noqa: BLE001 - a result that cannot be pickled
            conn.send((i, FileResult(path=job.path, errors=[
                FileError(job.path, ErrorKind.INTERNAL, f"worker failed: {exc}; {BUG_HINT}")])))


class Pool:
    """`workers` processes, forked on the first `run` that needs them, each running jobs
    with `run_job(job)` (`jobs.run_job`; a module-level function, so that spawned workers
    can be handed it)."""

    def __init__(self, workers: int, run_job) -> None:
        self.workers = workers
        self.run_job = run_job
        self.procs: list = []
        self.conns: list = []
        self.alive: list[bool] = []
        self.owner: dict[str, int] = {}  # file → the worker that keeps its tree
        self._sent: dict[str, int] | None = None  # root → id(index) last sent

    @property
    def started(self) -> bool:
        return bool(self.procs)

    def _start(self) -> None:
        import multiprocessing

        # Forked workers inherit the loaded rules; where there is no fork, spawned ones load them.
        ctx = multiprocessing.get_context("fork" if can_fork() else "spawn")
        budget = TREE_BUDGET // self.workers
        for _ in range(self.workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, budget, self.run_job), daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
            self.alive.append(True)

    def _send_projects(self) -> None:
        from perflint.runcontext import current

        ctx = current()
        projects = dict(ctx.projects) if ctx is not None else {}
        now = {root: id(index) for root, index in projects.items()}
        if now == self._sent:
            return
        self._sent = now
        payload = ("projects", projects)
        for w, conn in enumerate(self.conns):
            if self.alive[w]:
                try:
                    conn.send(payload)
                except OSError:
                    self._dead(w)

    def _dead(self, w: int) -> None:
        self.alive[w] = False
        self.owner = {k: v for k, v in self.owner.items() if v != w}

    def run(self, jobs: list, progress: Callable[[FileResult], None] | None = None,
            on_start: Callable[[], Callable[[FileResult], None] | None] | None = None) -> list[FileResult | None]:
        """Results in the order of `jobs`; None where the worker running the job died."""
        from multiprocessing.connection import wait

        if not self.started:
            self._start()
        if on_start is not None:
            progress = on_start() or progress
        out: list[FileResult | None] = [None] * len(jobs)
        if not jobs:
            return out
        self._send_projects()

        def size(i: int) -> int:
            return len(jobs[i].raw) if jobs[i].raw is not None else 0

        # Largest first keeps the workers evenly loaded.
        order = sorted(range(len(jobs)), key=lambda i: -size(i))
        own: list[deque] = [deque() for _ in self.conns]
        shared: deque = deque()
        for i in order:
            w = self.owner.get(jobs[i].path)
            (own[w] if w is not None and self.alive[w] else shared).append(i)
        running: dict[int, int] = {}  # worker → job index

        def next_for(w: int) -> int | None:
            if own[w]:
                return own[w].popleft()
            if shared:
                return shared.popleft()
            # The queue of a worker that is busy: its smallest job, parsed again here
            # rather than waiting.
            victims = [v for v in range(len(own)) if own[v] and v != w and v in running]
            if victims:
                return own[max(victims, key=lambda v: sum(size(i) for i in own[v]))].pop()
            return None

        def feed(w: int) -> None:
            i = next_for(w)
            if i is None:
                return
            try:
                self.conns[w].send(("job", i, jobs[i]))
            except OSError:
                shared.appendleft(i)
                self._dead(w)
                return
            running[w] = i

        # Workers with jobs of their own start first, so that no other worker takes them.
        for w in sorted(range(len(self.conns)), key=lambda w: not own[w]):
            if self.alive[w]:
                feed(w)
        while running:
            waiting = {}
            for w in running:
                waiting[self.conns[w]] = w
                waiting[self.procs[w].sentinel] = w
            for ready in wait(list(waiting)):
                w = waiting[ready]
                if w not in running:
                    continue
                conn = self.conns[w]
                got, dead = None, False
                try:
                    got = conn.recv() if conn.poll() else None
                except (EOFError, OSError):
                    dead = True  # a worker closes its end only by ending
                if got is None:
                    if not dead and self.procs[w].is_alive():
                        continue  # its result is still on the way
                    # The worker died: its job is lost, its queue goes to the others.
                    del running[w]
                    shared.extend(own[w])
                    own[w].clear()
                    self._dead(w)
                    for v in range(len(self.conns)):
                        if self.alive[v] and v not in running:
                            feed(v)
                    continue
                i, r = got
                del running[w]
                out[i] = r
                if r.kept:
                    self.owner[jobs[i].path] = w
                elif self.owner.get(jobs[i].path) == w:
                    del self.owner[jobs[i].path]
                if progress:
                    progress(r)
                feed(w)
        return out

    def close(self) -> None:
        for w, conn in enumerate(self.conns):
            if self.alive[w]:
                try:
                    conn.send(("stop",))
                except OSError:
                    pass
            conn.close()
        for p in self.procs:
            p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join()
        self.procs, self.conns, self.alive = [], [], []
        self.owner.clear()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def can_fork() -> bool:
    return hasattr(os, "fork")
