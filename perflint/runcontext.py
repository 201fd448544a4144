"""What the processes of one run keep between its jobs, scoped to the run instead of held in
module globals: the trees of a process's first pass over its files (`TreeStore`), and the
project indexes that answer the second pass's questions.

`runner.run` makes a `RunContext` for each run and enters it (`running(ctx)`) in its own
process; a worker process of the pool (`perflint.pool`) makes its own and keeps it for the
jobs it serves.  The context is a `contextvars.ContextVar`: a program that calls
`perflint.api` in another thread, or outside a run, sees none, so it keeps no trees and
reads no run's projects.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


class TreeStore:
    """Parsed trees kept for a second pass over the same file in the same process.

    A project run lints most files twice at most: first alone, then again, for the few
    whose questions to the project got answers.  A process that keeps the tree of its first
    parse (within a budget of source characters) skips the second parse, which is most of
    the cost of a file.  A kept tree is handed out once, for the same text only.
    """

    def __init__(self) -> None:
        self.budget = 0  # characters of source whose trees may be kept; 0: keep nothing
        self.used = 0
        self.trees: dict[str, tuple[str, object]] = {}
        self._first: tuple[str, str, object] | None = None  # the current job's first parse

    def enable(self, budget: int) -> None:
        self.clear()
        self.budget = budget

    def clear(self) -> None:
        self.budget = self.used = 0
        self.trees.clear()
        self._first = None

    def take(self, path: str, text: str):
        got = self.trees.get(path)
        if got is None or got[0] != text:
            return None
        del self.trees[path]
        self.used -= len(text)
        return got[1]

    def parsed(self, path: str, text: str, module) -> None:
        if self.budget and self._first is None:
            self._first = (path, text, module)

    def end_job(self, path: str, keep: bool) -> bool:
        """After a job: keep the tree of its first parse when asked to and it fits."""
        first, self._first = self._first, None
        if not keep or first is None or first[0] != path or self.used + len(first[1]) > self.budget:
            return False
        self.trees[path] = (first[1], first[2])
        self.used += len(first[1])
        return True


@dataclass
class RunContext:
    """The trees this process keeps (a `TreeStore` with its budget) and the project index of
    each project root of the run."""

    trees: TreeStore = field(default_factory=TreeStore)
    projects: dict = field(default_factory=dict)  # project root → analysis.project.ProjectIndex


_CURRENT: ContextVar[RunContext | None] = ContextVar("perflint_run", default=None)


def current() -> RunContext | None:
    """The context of the run this code runs in; None outside a run."""
    return _CURRENT.get()


def current_trees() -> TreeStore | None:
    ctx = _CURRENT.get()
    return ctx.trees if ctx is not None else None


@contextmanager
def running(ctx: RunContext):
    """Enter `ctx` for the code in the block; its trees are dropped on the way out."""
    token = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(token)
        ctx.trees.clear()
