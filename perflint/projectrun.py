"""The project layer of a run: which project each checked file belongs to, which other files
must be summarised for it, the summary cache, and the project indexes the checks consult.

Phase 1 summarises every file the checks may need: the checked files (a checked file's
first lint and its summary come from one parse), the project modules they import
(transitively, through packages and re-exports), and — when only part of a project is
checked — the project's files that import a checked module (their loops may call its
functions once per step).  Phase 2 re-checks a file only when a question its analysis
asked of the project now has an answer.  Summaries are cached by content hash; a file's
cached findings carry the questions it asked and a digest of their answers.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from perflint import __version__
from perflint.analysis.project import ProjectIndex, find_root, project_files, read_regular
from perflint.cache import code_stamp
from perflint.source import atomic_write

MAX_ROUNDS = 4


class SummaryCache:
    """sha256 of a file's bytes → its module summary (`.perflint_cache/<version>/`)."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / __version__ / f"summaries-{code_stamp()}.json" if directory is not None else None
        self.entries: dict[str, dict] = {}
        self.dirty = False
        if self.path is not None:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                if isinstance(data, dict):
                    self.entries = data
            except (OSError, ValueError):
                pass

    def get(self, sha: str) -> dict | None:
        got = self.entries.get(sha)
        return got if isinstance(got, dict) else None

    def put(self, sha: str, summary: dict) -> None:
        self.entries[sha] = summary
        self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(str(self.path), json.dumps(self.entries, separators=(",", ":")).encode("utf-8"))
            self.dirty = False
        except OSError:
            pass


def roots_for(files: list[Path], given: list[str]) -> dict[str, str]:
    """Each file's project root (absolute): the nearest marker folder above it, the search
    stopping at the folder named on the command line that holds the file."""
    stops = []
    for g in given:
        p = Path(g)
        if p.is_dir():
            stops.append(p.absolute())
    out: dict[str, str] = {}
    memo: dict[Path, str] = {}
    for f in files:
        fa = f.absolute()
        stop = None
        for s in stops:
            if fa.is_relative_to(s) and (stop is None or len(s.parts) > len(stop.parts)):
                stop = s
        here = fa.parent
        if here not in memo:
            memo[here] = str(find_root(fa, stop))
        out[str(f)] = memo[here]
    return out


def referenced_files(index: ProjectIndex, path: str) -> set[str]:
    """Project files that `path`'s summary refers to (imports, bases, calls, re-exports)."""
    summary = index.summaries.get(path) or {}
    refs: set[str] = set(summary.get("imports", {}).values()) | set(summary.get("relative", {}).values())
    refs |= set(summary.get("stars", ()))
    for c in summary.get("calls", ()):
        refs.add(c["ref"])
    out = set()
    for ref in refs:
        if ref.startswith(("#", "*")):
            continue
        for f in _candidate_files(index, path, ref):
            out.add(f)
    return out


def _candidate_files(index: ProjectIndex, importer: str, ref: str) -> list[str]:
    """Files a reference may live in (every package on the way, for re-exports)."""
    out = []
    if ref.startswith("."):
        level = len(ref) - len(ref.lstrip("."))
        base = os.path.dirname(importer)
        for _ in range(level - 1):
            base = os.path.dirname(base)
        parts = [p for p in ref[level:].split(".") if p]
        bases = [base]
        if not parts:
            f = os.path.join(base, "__init__.py")
            return [f] if f in index.all_files else []
    else:
        parts = ref.split(".")
        bases = index.search_bases(importer)
    for base in bases:
        for cut in range(1, len(parts) + 1):
            rel = os.path.join(*parts[:cut])
            for cand in (os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")):
                if cand in index.all_files:
                    out.append(cand)
    return out


_IMPORT_LINE = r"^\s*(?:from\s+[\w.]*\b{0}\b[\w.]*\s+import|import\s+[\w., ]*\b{0}\b|from\s+[.\w]+\s+import\s+[\w, ()]*\b{0}\b)"


def importers(all_files: set[str], targets: list[str], skip: set[str]) -> set[str]:
    """Project files whose import statements name one of `targets`' modules."""
    stems = {Path(t).stem if Path(t).name != "__init__.py" else Path(t).parent.name for t in targets}
    if not stems:
        return set()
    rx = re.compile("|".join(_IMPORT_LINE.format(re.escape(s)) for s in sorted(stems)).encode(), re.M)
    out = set()
    for f in all_files:
        if f in skip:
            continue
        raw = read_regular(f)
        if raw is None:
            continue
        if rx.search(raw):
            out.add(f)
    return out


# A file without any of these cannot offer other files anything the analysis uses, nor
# receive anything: it is summarised only when another file imports it.
SUMMARY_TOKENS = (b"torch", b"DataLoader", b".item(", b".cpu(", b".cuda(", b".to(", b"backward", b"add_argument",
                  b"dataclass", b"SimpleNamespace", b"Dataset")


def reask(index: ProjectIndex | None, path: str, questions: list[str]):
    """A view of `index` for `path` that has been asked `questions` again."""
    from perflint.analysis.project import ProjectView, answers_digest

    view = ProjectView(index, path)
    answers_digest(index, path, questions, view)
    return view


class ProjectPhase:
    """The project side of one run (see the module docstring)."""

    def __init__(self, keys: list[str], raws: dict[str, bytes], shas: dict[str, str], given: list[str],
                 use_cache: bool, options_of: dict) -> None:
        from perflint import engine
        from perflint.cache import cache_dir

        # The first lints (phase 1) run without a project: an index left from an earlier run
        # in this process would answer their questions from stale summaries, and a stale
        # answer that no longer holds would never be re-asked.
        engine.PROJECTS.clear()
        self.keys = keys
        self.raws = raws
        self.shas = shas
        self.options_of = options_of
        self.roots = roots_for([Path(k) for k in keys], given or ["."])
        self.cache = SummaryCache(cache_dir() if use_cache else None)
        self.abs = {k: os.path.abspath(k) for k in keys}
        self.summaries: dict[str, dict[str, dict]] = {}
        self.indexes: dict[str, ProjectIndex] = {}
        self._sha_of_abs: dict[str, str] = {}
        self._root_of_abs: dict[str, str] = {}
        for k in keys:
            root = self.roots[k]
            self.summaries.setdefault(root, {})
            self._sha_of_abs[self.abs[k]] = shas[k]
            got = self.cache.get(shas[k])
            if got is not None:
                self.summaries[root][self.abs[k]] = got

    def root_of(self, key: str) -> str | None:
        return self.roots.get(key)

    def first_jobs(self, fix: bool) -> list:
        from perflint.engine import Job, LintOptions

        jobs = []
        for k in self.keys:
            root = self.roots[k]
            if self.abs[k] in self.summaries[root] or not any(t in self.raws[k] for t in SUMMARY_TOKENS):
                continue
            options = self.options_of[k]
            if fix:
                options = LintOptions(codes=(), target_torch=options.target_torch, prefilter=False)
            jobs.append(Job(path=k, options=options, raw=self.raws[k], root=root, summarise=True))
        return jobs

    def take(self, r) -> None:
        """Keep the summary a job returned."""
        if r.summary is None:
            return
        a = os.path.abspath(r.path)
        root = self.roots.get(r.path) or self._root_of_abs.get(a)
        if root is None:
            return
        self.summaries.setdefault(root, {})[a] = r.summary
        sha = self._sha_of_abs.get(a)
        if sha is not None:
            self.cache.put(sha, r.summary)

    def complete(self, workers: int) -> None:
        """Summarise what the checked files need, then build each root's index."""
        from perflint import engine
        from perflint.cache import digest
        from perflint.engine import Job, LintOptions

        for root in sorted(self.summaries):
            all_files = {str(p.absolute()) for p in project_files(Path(root))}
            all_files |= {a for k, a in self.abs.items() if self.roots[k] == root}
            checked = {a for k, a in self.abs.items() if self.roots[k] == root}
            partial = not all_files <= checked
            targets = sorted(checked)
            tried: set[str] = set()
            for round_ in range(MAX_ROUNDS):
                have = self.summaries[root]
                index = ProjectIndex(Path(root), have, all_files)
                want: set[str] = set()
                for path in list(have):
                    want |= referenced_files(index, path)
                if partial and round_ < 2 and targets:
                    found = importers(all_files, targets, skip=set(have) | tried)
                    targets = sorted(found)
                    want |= found
                want -= set(have) | tried
                if not want:
                    break
                tried |= want
                jobs = []
                for f in sorted(want):
                    raw = read_regular(f)
                    if raw is None:
                        continue
                    sha = digest(raw)
                    self._sha_of_abs[f] = sha
                    self._root_of_abs[f] = root
                    got = self.cache.get(sha)
                    if got is not None:
                        have[f] = got
                        continue
                    jobs.append(Job(path=f, options=LintOptions(codes=(), prefilter=False), raw=raw, summarise=True))
                for r in engine.run_jobs(jobs, workers):
                    self.take(r)
            self.indexes[root] = ProjectIndex(Path(root), self.summaries[root], all_files)
        engine.PROJECTS.clear()
        engine.PROJECTS.update(self.indexes)

    def relevant(self, key: str, questions: list[str]) -> bool:
        """Whether a question the file's first analysis asked now has an answer."""
        if not questions:
            return False
        return reask(self.indexes.get(self.roots.get(key, "")), self.abs.get(key, os.path.abspath(key)),
                     questions).relevant()

    def digest(self, key: str, questions: list[str]) -> str:
        from perflint.analysis.project import answers_digest

        return answers_digest(self.indexes.get(self.roots.get(key, "")), self.abs.get(key, os.path.abspath(key)),
                              questions)

    def save(self) -> None:
        self.cache.save()
