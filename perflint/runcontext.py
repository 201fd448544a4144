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

    A fix run may also keep the first lint's analysis of that tree (`analysed`): where the
    project answers its questions as the first lint did, the fix loop's first pass is that
    analysis (`take_analysis`), not a new one.
    """

    def __init__(self) -> None:
        self.budget = 0  # characters of source whose trees may be kept; 0: keep nothing
        self.used = 0
        self.trees: dict[str, tuple[str, object, object]] = {}  # path → (text, tree, analysis or None)
        self._first: tuple[str, str, object] | None = None  # the current job's first parse
        self._analysis: object = None  # the current job's analysis of that parse, with its rules

    def enable(self, budget: int) -> None:
        self.clear()
        self.budget = budget

    def clear(self) -> None:
        self.budget = self.used = 0
        self.trees.clear()
        self._first = None
        self._analysis = None

    def take(self, path: str, text: str):
        got = self.trees.get(path)
        if got is None or got[0] != text:
            return None
        del self.trees[path]
        self.used -= len(text)
        return got[1]

    def take_analysis(self, path: str, text: str):
        """The kept analysis of `path` with exactly `text` (handed out once, with its tree), or None."""
        got = self.trees.get(path)
        if got is None or got[0] != text or got[2] is None:
            return None
        self.take(path, text)
        return got[2]

    def parsed(self, path: str, text: str, module) -> None:
        if self.budget and self._first is None:
            self._first = (path, text, module)

    def analysed(self, path: str, text: str, analysis) -> None:
        """The job's analysis, with its rules, of the tree of its first parse."""
        first = self._first
        if first is not None and first[0] == path and first[1] == text and getattr(analysis, "module", None) is first[2]:
            self._analysis = analysis

    def end_job(self, path: str, keep: bool, analysis: bool = False) -> bool:
        """After a job: keep the tree of its first parse when asked to and it fits (with
        `analysis`, also the job's analysis of it)."""
        first, self._first = self._first, None
        got, self._analysis = self._analysis, None
        if not keep or first is None or first[0] != path or self.used + len(first[1]) > self.budget:
            return False
        self.trees[path] = (first[1], first[2], got if analysis else None)
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
