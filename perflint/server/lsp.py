"""`perflint server`: the Language Server Protocol side (pygls, lsprotocol).

    didOpen / didSave ─┐                     ┌─► publishDiagnostics (the document; then the
    didChange ─► debounce ─► check (one worker thread) ─┤   open documents whose project answers changed)
    notebook cells ────┘                     └─► kept for code actions and hover

All engine work runs on one worker thread, in order, so the warm project model has one
writer and the event loop stays free to read the next edit.  A result for a version that
has since changed is not published (a newer check is already scheduled).  Nothing a client
sends stops the server: every handler logs what went wrong and answers what it can.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace.position_codec import ServerTextPosition, ServerTextRange

from perflint import __version__
from perflint.diagnostics import Diagnostic, Severity
from perflint.rules import docs_url
from perflint.server.actions import FIX_ALL_KIND, CodeActions
from perflint.server.actions import lines_of as _lines
from perflint.server.checker import (
    Checker,
    Doc,
    Report,
    hover_markdown,
    parse_client_settings,
)

log = logging.getLogger("perflint.server")

SOURCE = "perflint"
DEBOUNCE_S = 0.03  # wait this long after a change for the next one before checking
REFRESH_S = 0.5  # and this long after an edited file's check before updating its project
_SEVERITY = {Severity.ERROR: lsp.DiagnosticSeverity.Error, Severity.WARNING: lsp.DiagnosticSeverity.Warning,
             Severity.INFO: lsp.DiagnosticSeverity.Information}
_CONFIG_NAMES = re.compile(r"^(pyproject\.toml|requirements.*\.txt)$")


@functools.lru_cache(maxsize=None)
def _rule_tags(code: str) -> tuple:
    from perflint.rules import all_rules
    from perflint.rules.metadata import EditorTag

    as_lsp = {EditorTag.DEPRECATED: lsp.DiagnosticTag.Deprecated, EditorTag.UNNECESSARY: lsp.DiagnosticTag.Unnecessary}
    rule = all_rules().get(code)
    return tuple(as_lsp[t] for t in getattr(rule, "editor_tags", ()))


def diagnostic_tags(code: str) -> list[lsp.DiagnosticTag] | None:
    """How an editor marks a rule's findings: the rule's `editor_tags`."""
    return list(_rule_tags(code)) or None


class PerflintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "perflint", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
            notebook_document_sync=lsp.NotebookDocumentSyncOptions(
                notebook_selector=[lsp.NotebookDocumentFilterWithCells(
                    notebook="jupyter-notebook", cells=[lsp.NotebookCellLanguage(language="python")])],
                save=True,
            ),
        )
        self.checker = Checker(log=self.log_error)
        self.actions = CodeActions(self)
        self.debounce = DEBOUNCE_S
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="perflint-check")
        self.pending: dict[str, asyncio.TimerHandle] = {}
        self.refreshing: dict[str, asyncio.TimerHandle] = {}
        self.last_change: dict[str, float] = {}
        self.tasks: set[asyncio.Task] = set()
        self.reports: dict[str, Report] = {}  # by document key (a file's or a notebook's URI)
        self.published_cells: dict[str, set[str]] = {}
        # Open documents by the URI the client gave (the keys of everything published).
        self.open_files: dict[str, None] = {}
        self.open_notebooks: dict[str, None] = {}
        self.logged: set[str] = set()

    # -- logging -------------------------------------------------------------------------
    def log_error(self, message: str) -> None:
        log.error("%s", message)
        try:
            self.window_log_message(lsp.LogMessageParams(type=lsp.MessageType.Error, message=message))
        except Exception:  # noqa: BLE001 - no client yet, or the pipe is gone
            pass

    def log_info(self, message: str) -> None:
        log.info("%s", message)
        try:
            self.window_log_message(lsp.LogMessageParams(type=lsp.MessageType.Log, message=message))
        except Exception:  # noqa: BLE001
            pass

    def show(self, message: str, kind=lsp.MessageType.Warning) -> None:
        try:
            self.window_show_message(lsp.ShowMessageParams(type=kind, message=message))
        except Exception:  # noqa: BLE001
            pass
        log.warning("%s", message)

    # -- documents -----------------------------------------------------------------------
    def key_of(self, uri: str) -> tuple[str, int | None]:
        """(document key, 1-based cell number) for a URI: a notebook cell belongs to its notebook."""
        nb = self.workspace.get_notebook_document(cell_uri=uri)
        if nb is None:
            return uri, None
        for i, cell in enumerate(nb.cells, start=1):
            if cell.document == uri:
                return nb.uri, i
        return nb.uri, None

    def snapshot(self, key: str) -> Doc | None:
        nb = self.workspace.get_notebook_document(notebook_uri=key)
        if nb is not None:
            cells = []
            for cell in nb.cells:
                text_doc = self.text_document(cell.document)
                code = (cell.kind == lsp.NotebookCellKind.Code and text_doc is not None
                        and (text_doc.language_id or "python") == "python")
                cells.append(("code" if code else "markdown", text_doc.source if text_doc is not None else ""))
            path = _path_of(key)
            if not path.endswith(".ipynb"):
                path += ".ipynb"
            return Doc(key=key, path=path, version=nb.version, cells=cells)
        doc = self.text_document(key) if key in self.open_files else None
        if doc is None or not _is_python(key, doc.language_id):
            return None
        return Doc(key=key, path=_path_of(key), version=doc.version, text=doc.source)

    def current_version(self, key: str) -> int | None:
        nb = self.workspace.get_notebook_document(notebook_uri=key)
        if nb is not None:
            return nb.version
        doc = self.text_document(key) if key in self.open_files else None
        return doc.version if doc is not None else None

    def open_keys(self) -> list[str]:
        return list(self.open_files) + list(self.open_notebooks)

    def text_document(self, uri: str):
        """The workspace's copy of an open text document (pygls keys them by unquoted URI)."""
        return self.workspace.text_documents.get(unquote(uri))

    # -- checking ------------------------------------------------------------------------
    def schedule(self, key: str, delay: float) -> None:
        for timers in (self.pending, self.refreshing):
            old = timers.pop(key, None)
            if old is not None:
                old.cancel()
        loop = asyncio.get_running_loop()
        self.pending[key] = loop.call_later(delay, self._start, key, self.check_and_publish)

    def changed(self, key: str) -> None:
        """Debounce edits: a change that follows the previous one within `debounce` waits
        until `debounce` passes without another (a burst is checked once, at its end); a
        change after a pause is checked at once."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        previous = self.last_change.get(key)
        self.last_change[key] = now
        burst = previous is not None and now - previous < self.debounce
        self.schedule(key, self.debounce if burst or key in self.pending else 0)

    def schedule_refresh(self, key: str) -> None:
        old = self.refreshing.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self.refreshing[key] = loop.call_later(REFRESH_S, self._start, key, self.refresh_project)

    def _start(self, key: str, job) -> None:
        (self.refreshing if job == self.refresh_project else self.pending).pop(key, None)
        task = asyncio.ensure_future(job(key))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def refresh_project(self, key: str) -> None:
        """The edited file's summary, brought up to date once edits pause; the open documents
        that depend on it are checked again."""
        try:
            self.recheck_paths(await self.run(self.checker.refresh, _path_of(key)))
        except Exception as exc:  # noqa: BLE001
            log.exception("updating the project for %s failed", key)
            self.log_error(f"perflint: updating the project for {key} failed: {type(exc).__name__}: {exc}")

    async def run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    async def check_and_publish(self, key: str) -> Report | None:
        try:
            doc = self.snapshot(key)
            if doc is None:
                return None
            report = await self.run(self.checker.check, doc)
            if self.current_version(key) != doc.version:
                return None  # edited meanwhile: the check of the newer text is scheduled
            self.reports[key] = report
            for err in report.errors:
                line = f"perflint: {err.one_line()}"
                if line not in self.logged:  # once, not on every keystroke
                    if len(self.logged) > 1000:
                        self.logged.clear()
                    self.logged.add(line)
                    self.log_error(line)
            self.publish(report)
            self.recheck_paths(report.recheck)
            if not doc.is_notebook:
                self.recheck_paths(await self.run(self.checker.dependents, doc.path))
                self.schedule_refresh(key)
            return report
        except Exception as exc:  # noqa: BLE001
            log.exception("checking %s failed", key)
            self.log_error(f"perflint: checking {key} failed: {type(exc).__name__}: {exc}")
            return None

    def recheck_paths(self, paths) -> None:
        wanted = {os.path.abspath(p) for p in paths}
        if not wanted:
            return
        for key in self.open_keys():
            if os.path.abspath(_path_of(key)) in wanted:
                self.schedule(key, 0)

    def recheck_all(self) -> None:
        for key in self.open_keys():
            self.schedule(key, 0)

    async def report_for(self, key: str) -> Report | None:
        """The report for the document as it is now (checked again if it is stale)."""
        report = self.reports.get(key)
        if report is not None and report.doc.version == self.current_version(key):
            return report
        doc = self.snapshot(key)
        if doc is None:
            return None
        report = await self.run(self.checker.check, doc)
        self.reports[key] = report
        return report

    # -- diagnostics ---------------------------------------------------------------------
    def publish(self, report: Report) -> None:
        doc = report.doc
        if not doc.is_notebook:
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
                uri=doc.key, version=doc.version, diagnostics=self.lsp_diagnostics(report, None)))
            return
        nb = self.workspace.get_notebook_document(notebook_uri=doc.key)
        if nb is None:
            return
        cell_uris = [c.document for c in nb.cells]
        seen = set()
        for i, uri in enumerate(cell_uris, start=1):
            diags = self.lsp_diagnostics(report, i)
            previously = uri in self.published_cells.get(doc.key, set())
            if diags or previously:
                self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags))
            if diags:
                seen.add(uri)
        for uri in self.published_cells.get(doc.key, set()) - set(cell_uris):
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        self.published_cells[doc.key] = seen

    def text_of(self, report: Report, cell: int | None) -> str:
        doc = report.doc
        if cell is None:
            return doc.text or ""
        cells = doc.cells or []
        return cells[cell - 1][1] if 0 < cell <= len(cells) else ""

    def to_range(self, lines: list[str], row: int, col: int, erow: int, ecol: int) -> lsp.Range:
        """1-based rows and columns in characters → an LSP range in the client's units."""
        codec = self.workspace.position_codec
        return codec.range_to_client_units(lines, ServerTextRange(
            ServerTextPosition(max(0, row - 1), max(0, col - 1)), ServerTextPosition(max(0, erow - 1), max(0, ecol - 1))))

    def lsp_diagnostic(self, d: Diagnostic, lines: list[str], report: Report) -> lsp.Diagnostic:
        fix = None
        if d.fix is not None:
            fix = {"applicability": d.fix.applicability.value, "message": d.fix.message,
                   "offered": report.fix_allowed(d)}
        return lsp.Diagnostic(
            range=self.to_range(lines, d.location.row, d.location.column, d.end_location.row, d.end_location.column),
            severity=_SEVERITY.get(d.severity, lsp.DiagnosticSeverity.Warning),
            code=d.code,
            code_description=lsp.CodeDescription(href=docs_url(d.code)),
            source=SOURCE,
            message=d.message,
            tags=diagnostic_tags(d.code),
            data={"name": d.name, "fix": fix},
        )

    def lsp_diagnostics(self, report: Report, cell: int | None) -> list[lsp.Diagnostic]:
        lines = _lines(self.text_of(report, cell))
        if report.config_error is not None:
            if cell != _top_cell(report):
                return []
            return [lsp.Diagnostic(range=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
                                   severity=lsp.DiagnosticSeverity.Error, code="config-error", source=SOURCE,
                                   message=f"perflint: configuration error: {report.config_error}")]
        out = []
        if report.file_error is not None and cell == _top_cell(report):
            out.append(lsp.Diagnostic(range=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
                                      severity=lsp.DiagnosticSeverity.Error, code=report.file_error.kind.value,
                                      source=SOURCE, message=f"perflint: {report.file_error.message}"))
        if report.syntax is not None:
            s = report.syntax
            if s.cell == cell:
                line = lines[s.row - 1] if 0 < s.row <= len(lines) else ""
                col = min(s.column, len(line) + 1)
                end = col + 1 if col <= len(line) else col
                out.append(lsp.Diagnostic(
                    range=self.to_range(lines, s.row, col, s.row, end), severity=lsp.DiagnosticSeverity.Error,
                    code="syntax-error", source=SOURCE, message=f"syntax error: {s.message}"))
        for d in report.diagnostics:
            if d.cell == cell:
                out.append(self.lsp_diagnostic(d, lines, report))
        return out

    def in_cell(self, report: Report, cell: int | None) -> list[Diagnostic]:
        return [d for d in report.diagnostics if d.cell == cell]

    # -- hover -----------------------------------------------------------------------------
    async def hover(self, params: lsp.HoverParams) -> lsp.Hover | None:
        key, cell = self.key_of(params.text_document.uri)
        report = await self.report_for(key)
        if report is None:
            return None
        lines = _lines(self.text_of(report, cell))
        pos = self.workspace.position_codec.position_from_client_units(lines, params.position)
        here = (pos.line + 1, pos.character + 1)
        hits = [d for d in self.in_cell(report, cell)
                if (d.location.row, d.location.column) <= here <= (d.end_location.row, d.end_location.column)]
        if not hits:
            return None
        parts = []
        for d in hits:
            if d.why:
                steps = "\n".join(f"- {step}" for step in d.why)
                parts.append(f"**{d.code}: why this runs on every step**\n\n{steps}")
        for code in dict.fromkeys(d.code for d in hits):
            md = hover_markdown(code)
            if md:
                parts.append(md)
        if not parts:
            return None
        d = hits[0]
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)),
                         range=self.to_range(lines, d.location.row, d.location.column, d.end_location.row,
                                             d.end_location.column))

    # -- settings --------------------------------------------------------------------------
    def apply_settings(self, raw: object) -> None:
        overrides, problems = parse_client_settings(raw)
        for p in problems:
            self.show(f"perflint: {p}")
        for nest in ("settings", "perflint"):
            if isinstance(raw, dict) and isinstance(raw.get(nest), dict):
                raw = raw[nest]
        if isinstance(raw, dict):
            ms = raw.get("debounceMs", raw.get("debounce-ms"))
            if isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 <= ms <= 10_000:
                self.debounce = ms / 1000
        self.checker.reload(overrides)

    async def config_changed(self) -> None:
        await self.run(self.checker.reload, None)
        self.log_info("perflint: configuration reloaded")
        self.recheck_all()


def _top_cell(report: Report) -> int | None:
    """Where a problem with the whole document is shown: a file's top, a notebook's first
    code cell."""
    cells = report.doc.cells
    if cells is None:
        return None
    return next((i for i, (kind, _) in enumerate(cells, start=1) if kind == "code"), 1)


def _path_of(uri: str) -> str:
    path = to_fs_path(uri) if uri.startswith("file:") else None
    if path:
        return path
    name = re.sub(r"[^\w.-]+", "_", uri.rsplit("/", 1)[-1]) or "untitled"
    return name if name.endswith((".py", ".ipynb")) else name + ".py"


def _is_python(uri: str, language_id: str | None) -> bool:
    return language_id == "python" or uri.endswith((".py", ".pyi"))


def _watched(uri: str) -> str | None:
    path = to_fs_path(uri) if uri.startswith("file:") else None
    return path


def create_server() -> PerflintServer:
    server = PerflintServer()

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: PerflintServer, params: lsp.InitializeParams) -> None:
        folders = [to_fs_path(f.uri) for f in params.workspace_folders or [] if f.uri.startswith("file:")]
        if not folders and params.root_uri and params.root_uri.startswith("file:"):
            folders = [to_fs_path(params.root_uri)]
        elif not folders and params.root_path:
            folders = [params.root_path]
        ls.checker.folders = [f for f in folders if f]
        opts = params.initialization_options
        ls.apply_settings(opts if isinstance(opts, dict) else {})

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: PerflintServer, params: lsp.InitializedParams) -> None:
        ws = ls.client_capabilities.workspace
        watch = getattr(ws, "did_change_watched_files", None) if ws is not None else None
        if watch is not None and watch.dynamic_registration:
            watchers = [lsp.FileSystemWatcher(glob_pattern=g) for g in
                        ("**/pyproject.toml", "**/requirements*.txt", "**/*.py")]
            try:
                await ls.client_register_capability_async(lsp.RegistrationParams(registrations=[lsp.Registration(
                    id="perflint-watch", method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                    register_options=lsp.DidChangeWatchedFilesRegistrationOptions(watchers=watchers))]))
            except Exception as exc:  # noqa: BLE001
                ls.log_info(f"perflint: could not watch files ({exc}); pyproject.toml is re-read when saved")

    @server.feature(lsp.SHUTDOWN)
    def shutdown(ls: PerflintServer, params) -> None:
        for timers in (ls.pending, ls.refreshing):
            for handle in timers.values():
                handle.cancel()
            timers.clear()
        ls.worker.shutdown(wait=False, cancel_futures=True)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: PerflintServer, params: lsp.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        if _is_python(doc.uri, doc.language_id):
            ls.open_files[doc.uri] = None
            ls.schedule(doc.uri, 0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: PerflintServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.changed(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: PerflintServer, params: lsp.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        path = _watched(uri)
        if path and _CONFIG_NAMES.match(os.path.basename(path)):
            await ls.config_changed()
            return
        if uri in ls.open_files or uri in ls.open_notebooks:
            ls.schedule(uri, 0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    async def did_close(ls: PerflintServer, params: lsp.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.last_change.pop(uri, None)
        for timers in (ls.pending, ls.refreshing):
            handle = timers.pop(uri, None)
            if handle is not None:
                handle.cancel()
        report = ls.reports.pop(uri, None)
        if ls.open_files.pop(uri, False) is None or report is not None:
            ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        if report is not None and not report.doc.is_notebook:
            await ls.run(ls.checker.close, report.doc)
            ls.recheck_paths(await ls.run(ls.checker.dependents, report.doc.path))

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_OPEN)
    def nb_open(ls: PerflintServer, params: lsp.DidOpenNotebookDocumentParams) -> None:
        ls.open_notebooks[params.notebook_document.uri] = None
        ls.schedule(params.notebook_document.uri, 0)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def nb_change(ls: PerflintServer, params: lsp.DidChangeNotebookDocumentParams) -> None:
        ls.changed(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_SAVE)
    def nb_save(ls: PerflintServer, params: lsp.DidSaveNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri, 0)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE)
    async def nb_close(ls: PerflintServer, params: lsp.DidCloseNotebookDocumentParams) -> None:
        key = params.notebook_document.uri
        ls.open_notebooks.pop(key, None)
        ls.last_change.pop(key, None)
        handle = ls.pending.pop(key, None)
        if handle is not None:
            handle.cancel()
        report = ls.reports.pop(key, None)
        for uri in ls.published_cells.pop(key, set()) | {c.uri for c in params.cell_text_documents}:
            ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        if report is not None:
            await ls.run(ls.checker.close, report.doc)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    async def watched(ls: PerflintServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        config = False
        paths = []
        for change in params.changes:
            path = _watched(change.uri)
            if not path:
                continue
            if _CONFIG_NAMES.match(os.path.basename(path)):
                config = True
            elif path.endswith(".py"):
                paths.append(path)
        if config:
            await ls.config_changed()
            return
        deps: set[str] = set()
        for path in paths:
            deps |= set(await ls.run(ls.checker.disk_changed, path))
        ls.recheck_paths(deps)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def folders_changed(ls: PerflintServer, params: lsp.DidChangeWorkspaceFoldersParams) -> None:
        gone = {to_fs_path(f.uri) for f in params.event.removed if f.uri.startswith("file:")}
        added = [to_fs_path(f.uri) for f in params.event.added if f.uri.startswith("file:")]
        ls.checker.folders = [f for f in ls.checker.folders if f not in gone] + [f for f in added if f]

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def configuration(ls: PerflintServer, params: lsp.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and ("perflint" in settings or any(k in settings for k in
                                                                          ("select", "ignore", "unsafeFixes",
                                                                           "targetTorch", "extendSelect"))):
            ls.apply_settings(settings)
            ls.recheck_all()

    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(
        code_action_kinds=[lsp.CodeActionKind.QuickFix, lsp.CodeActionKind.SourceFixAll, FIX_ALL_KIND],
        resolve_provider=True))
    async def code_action(ls: PerflintServer, params: lsp.CodeActionParams):
        return await _guarded(ls, "code actions", ls.actions.code_actions(params), [])

    @server.feature(lsp.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: PerflintServer, params: lsp.CodeAction):
        return await _guarded(ls, "resolving a code action", ls.actions.resolve(params), params)

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    async def hover(ls: PerflintServer, params: lsp.HoverParams):
        return await _guarded(ls, "hover", ls.hover(params), None)

    return server


async def _guarded(ls, what: str, request, fallback):
    """A request that fails is logged and answered with `fallback`: the server stays up."""
    try:
        return await request
    except Exception as exc:  # noqa: BLE001
        log.exception("%s failed", what)
        ls.log_error(f"perflint: {what} failed: {type(exc).__name__}: {exc}")
        return fallback
