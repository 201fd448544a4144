"""The project model the language server keeps warm between edits.

One `WarmProject` per project root: the module summaries of the files that matter (the
open documents, what they import, the files that import them), summarised once and then
updated file by file.  An open document is summarised from its buffer, any other file from
disk.  Each check records the questions the file asked of the project; after an edit the
other open documents whose answers changed are the ones that depend on the edit, and only
they are checked again (the same digest of answers the CLI's cache uses).
"""

from __future__ import annotations

import os
from pathlib import Path

from perflint.analysis.project import ProjectIndex, ProjectView, answers_digest, find_root, project_files, read_regular
from perflint.projectrun import MAX_ROUNDS, SUMMARY_TOKENS, importers, referenced_files


def wants_summary(raw: bytes) -> bool:
    return any(t in raw for t in SUMMARY_TOKENS)


def summarise_bytes(path: str, raw: bytes) -> dict | None:
    from perflint.api import LintOptions, check_file

    return check_file(path, raw, LintOptions(codes=(), prefilter=False), summarise=True).summary


class WarmProject:
    def __init__(self, root: str) -> None:
        self.root = root
        self.all_files = {str(p.absolute()) for p in project_files(Path(root))}
        self.summaries: dict[str, dict] = {}
        self.index = ProjectIndex(Path(root), self.summaries, self.all_files)
        self._tried: set[str] = set()  # files summarised (or found to need none) at least once
        self._importers_scanned: set[str] = set()

    def view(self, path: str) -> ProjectView:
        return ProjectView(self.index, path)

    def _rebuild(self) -> None:
        self.index = ProjectIndex(Path(self.root), self.summaries, self.all_files)

    def put(self, path: str, summary: dict | None) -> bool:
        """Record a file's summary; True when it changed what the project knows."""
        path = os.path.abspath(path)
        self.all_files.add(path)
        self._tried.add(path)
        old = self.summaries.get(path)
        if summary is None:
            if old is None:
                return False
            del self.summaries[path]
        else:
            if old == summary:
                return False
            self.summaries[path] = summary
        self._rebuild()
        return True

    def forget(self, path: str) -> bool:
        """A file removed from disk."""
        path = os.path.abspath(path)
        self.all_files.discard(path)
        self._tried.discard(path)
        if self.summaries.pop(path, None) is None:
            return False
        self._rebuild()
        return True

    def complete(self, path: str, buffers: dict[str, bytes]) -> bool:
        """Summarise what `path` needs: the modules it refers to (transitively) and, once,
        the project files that import it (their loops may call its functions every step).
        `buffers` holds the open documents' contents by absolute path."""
        path = os.path.abspath(path)
        changed = False
        extra: set[str] = set()
        if path not in self._importers_scanned:
            self._importers_scanned.add(path)
            extra = importers(self.all_files, [path], skip={path} | set(self.summaries))
        for _ in range(MAX_ROUNDS):
            want: set[str] = set(extra)
            extra = set()
            for p in list(self.summaries):
                want |= referenced_files(self.index, p)
            want -= self._tried | set(self.summaries)
            want.discard(path)
            if not want:
                break
            for f in sorted(want):
                self._tried.add(f)
                raw = buffers.get(f)
                if raw is None:
                    raw = read_regular(f)
                if raw is None:
                    continue
                summary = summarise_bytes(f, raw)
                if summary is not None:
                    self.summaries[f] = summary
                    changed = True
            self._rebuild()
        return changed

    def refresh_from_disk(self, path: str, buffers: dict[str, bytes]) -> bool:
        """A file changed on disk (not open in the editor): summarise it again if the
        project uses it."""
        path = os.path.abspath(path)
        if path in buffers:
            return False
        raw = read_regular(path)
        if raw is None:
            return self.forget(path)
        if path not in self.summaries and path not in self.all_files:
            self.all_files.add(path)
            self._rebuild()
        if path not in self.summaries:
            return False
        return self.put(path, summarise_bytes(path, raw) if wants_summary(raw) else None)

    def digest(self, path: str, questions: list[str]) -> str:
        return answers_digest(self.index, os.path.abspath(path), questions)


class Projects:
    """The warm projects, by root."""

    def __init__(self) -> None:
        self.by_root: dict[str, WarmProject] = {}

    def root_for(self, path: str, folders: list[str]) -> str:
        p = Path(path).absolute()
        stop = None
        for f in folders:
            fp = Path(f).absolute()
            if p.is_relative_to(fp) and (stop is None or len(fp.parts) > len(stop.parts)):
                stop = fp
        return str(find_root(p, stop))

    def for_path(self, path: str, folders: list[str]) -> WarmProject:
        root = self.root_for(path, folders)
        got = self.by_root.get(root)
        if got is None:
            got = self.by_root[root] = WarmProject(root)
        return got

    def containing(self, path: str) -> list[WarmProject]:
        a = os.path.abspath(path)
        return [p for p in self.by_root.values() if a in p.all_files or a.startswith(p.root + os.sep)]
