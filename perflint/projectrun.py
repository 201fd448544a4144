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

import os
import re
import stat
from pathlib import Path

from perflint import __version__
from perflint.analysis.modules import import_words
from perflint.analysis.project import ProjectIndex, find_root, project_paths, read_regular
from perflint.cache import code_stamp
from perflint.store import Store

MAX_ROUNDS = 4


class SummaryCache:
    """sha256 of a file's bytes → its module summary (the cache folder's `store.Store`)."""

    def __init__(self, directory: Path | None) -> None:
        self.store = Store(directory)
        self.namespace = f"summaries/{__version__}/{code_stamp()}"
        self.entries: dict[str, dict] = self.store.load(self.namespace)
        self.changed: dict[str, dict] = {}
        self.used: set[str] = set()

    def get(self, sha: str) -> dict | None:
        got = self.entries.get(sha)
        if not isinstance(got, dict):
            return None
        self.used.add(sha)
        return got

    def put(self, sha: str, summary: dict) -> None:
        self.entries[sha] = self.changed[sha] = summary

    def save(self) -> None:
        if (self.changed or self.used) and self.store.save(self.namespace, "summaries", self.changed, self.used):
            self.changed, self.used = {}, set()
        self.store.close()


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


_ASCII_NAME = re.compile(r"[A-Za-z0-9_]+")
_IMPORT_LINE = r"^\s*(?:from\s+[\w.]*\b{0}\b[\w.]*\s+import|import\s+[\w., ]*\b{0}\b|from\s+[.\w]+\s+import\s+[\w, ()]*\b{0}\b)"


def importers(all_files: set[str], targets: list[str], skip: set[str], lines: "ImportLines | None" = None) -> set[str]:
    """Project files whose import statements name one of `targets`' modules."""
    stems = {Path(t).stem if Path(t).name != "__init__.py" else Path(t).parent.name for t in targets}
    if not stems:
        return set()
    wanted = {s.encode() for s in stems}
    lines = lines if lines is not None else ImportLines(None)
    out = {f for f in all_files if f not in skip and not wanted.isdisjoint(lines.words(f))}
    odd = sorted(s for s in stems if not _ASCII_NAME.fullmatch(s))  # a module named in non-ASCII letters
    if odd:
        rx = re.compile("|".join(_IMPORT_LINE.format(re.escape(s)) for s in odd).encode(), re.M)
        out |= {f for f in all_files if f not in skip and rx.search(lines.get(f) or b"")}
    return out


FRESH_LIMIT = 16 << 20
_IMPORT_LINES = re.compile(rb"^\s*(?:from|import)\b[^\n]*", re.M)


class ImportLines:
    """A file's import lines (all that `importers` searches) and content hash, cached by the
    file's size and modification time: a run that checks one file of a large project does
    not read every other file again to find the ones that import it, nor the modules it
    imports to look up their cached summaries."""

    def __init__(self, directory: Path | None) -> None:
        self.store = Store(directory)
        self.namespace = f"imports/{__version__}/{code_stamp()}"
        self.entries: dict[str, list] = self.store.load(self.namespace)
        self.fresh: dict[str, bytes] = {}  # the bytes of files read in this run (up to FRESH_LIMIT)
        self._fresh_bytes = 0
        self.changed: dict[str, list] = {}
        self.used: set[str] = set()
        self._words: dict[str, frozenset[bytes]] = {}

    def _entry(self, path: str) -> list | None:
        """[mtime_ns, size, import lines, sha256] of a regular file, read only when its size
        or modification time changed since it was last read."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        got = self.entries.get(path)
        if isinstance(got, list) and len(got) == 4 and got[0] == st.st_mtime_ns and got[1] == st.st_size:
            self.used.add(path)
            return got
        raw = read_regular(path)
        if raw is None:
            return None
        from perflint.cache import digest

        text = b"\n".join(m.group(0) for m in _IMPORT_LINES.finditer(raw))
        entry = [st.st_mtime_ns, st.st_size, text.decode("latin-1"), digest(raw)]
        if self._fresh_bytes + len(raw) <= FRESH_LIMIT:
            self.fresh[path] = raw
            self._fresh_bytes += len(raw)
        if self.store.directory is not None:
            self.entries[path] = self.changed[path] = entry
        return entry

    def get(self, path: str) -> bytes | None:
        """The file's import lines joined by newlines (None: not a readable regular file)."""
        entry = self._entry(path)
        return entry[2].encode("latin-1") if entry is not None else None

    def words(self, path: str) -> frozenset[bytes]:
        """The names the file's import lines mention (`import_words`)."""
        got = self._words.get(path)
        if got is None:
            text = self.get(path)
            got = self._words[path] = import_words(text) if text is not None else frozenset()
        return got

    def sha(self, path: str) -> str | None:
        """The SHA-256 of the file's bytes, or None."""
        entry = self._entry(path)
        return entry[3] if entry is not None else None

    def save(self, keep: set[str] | None = None) -> None:
        """Write what changed; with `keep`, forget the files not in it (gone from the project)."""
        drop = set()
        if keep is not None and len(keep) != len(self.entries):
            drop = {k for k in self.entries if k not in keep}
            self.entries = {k: v for k, v in self.entries.items() if k in keep}
        changed = {k: v for k, v in self.changed.items() if k not in drop}
        if (changed or self.used or drop) and self.store.save(self.namespace, "imports", changed, self.used, drop):
            self.changed, self.used = {}, set()
        self.store.close()


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
        from perflint.cache import cache_dir

        # The first lints (phase 1) run without a project: an index left from an earlier run
        # would answer their questions from stale summaries, and a stale answer that no
        # longer holds would never be re-asked.
        self._projects().clear()
        self.keys = keys
        self.raws = raws
        self.shas = shas
        self.options_of = options_of
        self.roots = roots_for([Path(k) for k in keys], given or ["."])
        self.cache = SummaryCache(cache_dir() if use_cache else None)
        self.import_lines = ImportLines(cache_dir() if use_cache else None)
        self._seen_files: set[str] = set()
        self._paths: dict[str, list[str]] = {}  # root → its project's Python files
        self._roots_seen: list[str] = []
        self.abs = {k: os.path.abspath(k) for k in keys}
        self.summaries: dict[str, dict[str, dict]] = {}
        self.indexes: dict[str, ProjectIndex] = {}
        self._sha_of_abs: dict[str, str] = {}
        self._stamps: dict[str, str | None] = {}
        self._root_of_abs: dict[str, str] = {}
        for k in keys:
            root = self.roots[k]
            self.summaries.setdefault(root, {})
            self._sha_of_abs[self.abs[k]] = shas[k]
            if not any(t in raws[k] for t in SUMMARY_TOKENS):
                # Summarised only when another file refers to it (`complete`), as on a cold
                # run: a cached summary of the same bytes (every empty `__init__.py`) must not
                # add it, or the project a warm run sees differs from the cold run's and
                # every cached answer is asked again.
                continue
            got = self.cache.get(shas[k])
            if got is not None:
                self.summaries[root][self.abs[k]] = got

    def summary_cached(self, key: str) -> bool:
        """Whether the file's summary came from the cache (its first lint is then skipped:
        the result cache may answer it once the project is indexed)."""
        root = self.roots.get(key)
        return root is not None and self.abs[key] in self.summaries.get(root, {})

    def root_of(self, key: str) -> str | None:
        return self.roots.get(key)

    def project_files(self, root: str) -> list[str]:
        """The Python files of the project at `root` (walked once a run)."""
        got = self._paths.get(root)
        if got is None:
            got = self._paths[root] = project_paths(root)
        return got

    def first_jobs(self) -> list:
        """The first lints of the checked files whose summary is not cached: each file's
        findings without the project, and its summary (a fix run too: a file that turns out
        to have nothing to fix needs no fix job)."""
        from perflint.jobs import Job

        jobs = []
        for k in self.keys:
            root = self.roots[k]
            if self.abs[k] in self.summaries[root] or not any(t in self.raws[k] for t in SUMMARY_TOKENS):
                continue
            # A fix run lints the file here too: a file with nothing to fix needs no fix job.
            alone = len(self.project_files(root)) <= 1 and set(self.project_files(root)) <= {self.abs[k]}
            jobs.append(Job(path=k, options=self.options_of[k], raw=self.raws[k], root=root, summarise=True,
                            alone=alone))
        return jobs

    def take(self, r, root: str | None = None) -> None:
        """Keep the summary a job returned (in `root`'s project: by default the file's own)."""
        if r.summary is None:
            return
        a = os.path.abspath(r.path)
        root = root or self.roots.get(r.path) or self._root_of_abs.get(a)
        if root is None:
            return
        self.summaries.setdefault(root, {})[a] = r.summary
        sha = self._sha_of_abs.get(a)
        if sha is not None:
            self.cache.put(sha, r.summary)

    def complete(self, workers: int, pool=None) -> None:
        """Summarise what the checked files need, then build each root's index."""
        from perflint.cache import digest
        from perflint.engine import LintOptions
        from perflint.jobs import Job, run_jobs

        for root in sorted(self.summaries):
            all_files = set(self.project_files(root))
            self._seen_files |= all_files
            self._roots_seen.append(root.rstrip(os.sep) + os.sep)
            all_files |= {a for k, a in self.abs.items() if self.roots[k] == root}
            checked = {a for k, a in self.abs.items() if self.roots[k] == root}
            partial = not all_files <= checked
            targets = sorted(checked)
            tried: set[str] = set()
            refs_of: dict[str, set[str]] = {}
            for round_ in range(MAX_ROUNDS):
                have = self.summaries[root]
                index = ProjectIndex(Path(root), have, all_files)
                want: set[str] = set()
                for path in list(have):
                    if path not in refs_of:  # what a summary refers to does not change between rounds
                        refs_of[path] = referenced_files(index, path)
                    want |= refs_of[path]
                if partial and round_ < 2 and targets:
                    found = importers(all_files, targets, skip=set(have) | tried, lines=self.import_lines)
                    targets = sorted(found)
                    want |= found
                want -= set(have) | tried
                if not want:
                    break
                tried |= want
                jobs = []
                for f in sorted(want):
                    raw = None
                    sha = self.import_lines.sha(f)  # from the file's size and mtime, when known
                    if sha is None:
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
                    raw = raw if raw is not None else self.import_lines.fresh.get(f) or read_regular(f)
                    if raw is None:
                        continue
                    jobs.append(Job(path=f, options=LintOptions(codes=(), prefilter=False), raw=raw, summarise=True))
                # Into this project: a checked file of another project (a nested one) that
                # this one imports is summarised here as a warm run's cache hit puts it.
                for r in run_jobs(jobs, workers, pool=pool):
                    self.take(r, root)
            self.indexes[root] = ProjectIndex(Path(root), self.summaries[root], all_files)
        projects = self._projects()
        projects.clear()
        projects.update(self.indexes)

    @staticmethod
    def _projects() -> dict:
        """The project indexes of the run this is part of (none outside a run: a scratch dict)."""
        from perflint.runcontext import current

        ctx = current()
        return ctx.projects if ctx is not None else {}

    def relevant(self, key: str, questions: list[str], answers: str | None = None) -> bool:
        """Whether a question the file's first analysis asked now has an answer — or, where
        the first pass answered them from the file alone (`answers`), a different one."""
        if not questions:
            return False
        if answers is not None:
            return self.digest(key, questions) != answers
        return reask(self.indexes.get(self.roots.get(key, "")), self.abs.get(key, os.path.abspath(key)),
                     questions).relevant()

    def stamp(self, key: str, questions=()) -> str | None:
        """A hash of what the answers to the file's questions are computed from: its project's
        files, and the content of each file summarised (a summary is a function of the
        content and of perflint's code, which keys the cache).  None for a file whose
        questions read a config file (YAML/JSON) or the project's documented command lines
        (README, shell scripts), which no stamp covers: its cached findings
        are served only once the answers are asked again and hash the same.  A file that asked
        whether a function is code nothing runs (`never_used`), or whether any module builds a
        GradScaler (`sets_up_anywhere`), also reads the notebooks and
        the scripts with no summary: their sizes and times join its stamp."""
        if any(q.startswith(('["cfgfile"', '["launch"')) for q in questions):
            return None
        root = self.roots.get(key)
        index = self.indexes.get(root or "")
        if index is None:
            return None
        got = self._stamps.get(root)
        if got is None:
            from perflint.cache import digest

            shas = self._sha_of_abs
            parts = [root, "\0".join(sorted(index.all_files)),
                     "\0".join(f"{p}:{shas.get(p, '?')}" for p in sorted(index.summaries))]
            got = self._stamps[root] = digest("\1".join(parts).encode())[:20]
        if any(q.startswith('["orphan"') for q in questions):
            other = self._text_stamp(root)
            if other is None:
                return None
            got = got + other
        if any(q.startswith(('["unused"', '["anyset"')) for q in questions):
            other = self._stamps.get("\0unsummarised:" + root)
            if other is None:
                from perflint.cache import digest

                texts = index.unsummarised_texts()
                if texts is None:
                    return None
                marks = []
                for f in texts:
                    try:
                        st = os.stat(f)
                    except OSError:
                        return None
                    marks.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
                other = self._stamps["\0unsummarised:" + root] = digest("\0".join(marks).encode())[:20]
            got = got + other
        return got

    def _text_stamp(self, root: str) -> str | None:
        """Sizes and times of every file `never_imported` reads (`orphans.text_files`)."""
        key = "\0texts:" + root
        if key not in self._stamps:
            from perflint.analysis.orphans import text_files
            from perflint.cache import digest

            marks = []
            for f in text_files(root) or ():
                try:
                    st = os.stat(f)
                except OSError:
                    marks = []
                    break
                marks.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
            self._stamps[key] = digest("\0".join(marks).encode())[:20] if marks else None
        return self._stamps[key]

    def digest(self, key: str, questions: list[str]) -> str:
        from perflint.analysis.project import answers_digest

        return answers_digest(self.indexes.get(self.roots.get(key, "")), self.abs.get(key, os.path.abspath(key)),
                              questions)

    def save(self) -> None:
        self.cache.save()
        # Entries of files that left a project this run walked are dropped; other projects'
        # entries stay.
        roots = tuple(self._roots_seen)
        self.import_lines.save({k for k in self.import_lines.entries
                                if k in self._seen_files or not k.startswith(roots)})
