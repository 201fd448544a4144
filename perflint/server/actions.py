"""The language server's code actions: a fix for one finding, "fix all", and a `# noqa`
for the line, as workspace edits in the client's position units (`lsp.PerflintServer`
checks and publishes; this builds the edits from its last report of a document)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from perflint.diagnostics import Applicability, Diagnostic
from perflint.fixedits import changed_span
from perflint.server.checker import Report, noqa_insertion

if TYPE_CHECKING:
    from perflint.server.lsp import PerflintServer

FIX_ALL_KIND = "source.fixAll.perflint"
_NEWLINE = re.compile(r"\r\n?|\n")


def lines_of(text: str) -> list[str]:
    """The lines of a document as the client counts them (\\n, \\r\\n and \\r end a line)."""
    return _NEWLINE.split(text)


_lines = lines_of


def _row_col(text: str, offset: int) -> tuple[int, int]:
    """1-based row and column of a character offset."""
    before = text[:offset]
    starts = [m.end() for m in _NEWLINE.finditer(before)]
    row = len(starts) + 1
    return row, offset - (starts[-1] if starts else 0) + 1


class CodeActions:
    def __init__(self, ls: "PerflintServer") -> None:
        self.ls = ls

    def _supports_resolve(self) -> bool:
        ca = getattr(self.ls.client_capabilities.text_document, "code_action", None) if self.ls.client_capabilities.text_document else None
        rs = getattr(ca, "resolve_support", None) if ca is not None else None
        return bool(rs is not None and "edit" in (rs.properties or []))

    def _supports_document_changes(self) -> bool:
        ws = self.ls.client_capabilities.workspace
        we = getattr(ws, "workspace_edit", None) if ws is not None else None
        return bool(we is not None and we.document_changes)

    def workspace_edit(self, edits: dict[str, list[lsp.TextEdit]]) -> lsp.WorkspaceEdit:
        if self._supports_document_changes():
            changes = []
            for uri, text_edits in edits.items():
                doc = self.ls.text_document(uri)
                changes.append(lsp.TextDocumentEdit(
                    text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=doc.version if doc else None),
                    edits=text_edits))
            return lsp.WorkspaceEdit(document_changes=changes)
        return lsp.WorkspaceEdit(changes=edits)

    def cell_uri(self, key: str, cell: int | None) -> str:
        if cell is None:
            return key
        nb = self.ls.workspace.get_notebook_document(notebook_uri=key)
        return nb.cells[cell - 1].document if nb is not None and 0 < cell <= len(nb.cells) else key

    async def fix_edit(self, report: Report, d: Diagnostic) -> lsp.WorkspaceEdit | None:
        edits = await self.ls.run(self.ls.checker.edits_for, report, d)
        if not edits:
            return None
        lines = _lines(self.ls.text_of(report, d.cell))
        text_edits = [lsp.TextEdit(range=self.ls.to_range(lines, e.location.row, e.location.column,
                                                       e.end_location.row, e.end_location.column), new_text=e.content)
                      for e in edits]
        return self.workspace_edit({self.cell_uri(report.doc.key, d.cell): text_edits})

    async def fix_all_edit(self, report: Report) -> lsp.WorkspaceEdit | None:
        new = await self.ls.run(self.ls.checker.fix_all, report)
        if new is None:
            return None
        if isinstance(new, str):
            return self.workspace_edit({report.doc.key: [self.replace_all(report.doc.text or "", new)]})
        edits: dict[str, list[lsp.TextEdit]] = {}
        for i, ((kind, old), text) in enumerate(zip(report.doc.cells or [], new), start=1):
            if kind == "code" and old != text:
                edits[self.cell_uri(report.doc.key, i)] = [self.replace_all(old, text)]
        return self.workspace_edit(edits) if edits else None

    def replace_all(self, old: str, new: str) -> lsp.TextEdit:
        """One edit turning `old` into `new`: the span between their common prefix and suffix."""
        start, end_old, end_new = changed_span(old, new)
        lines = _lines(old)
        r1, c1 = _row_col(old, start)
        r2, c2 = _row_col(old, end_old)
        return lsp.TextEdit(range=self.ls.to_range(lines, r1, c1, r2, c2), new_text=new[start:end_new])

    def noqa_action(self, report: Report, d: Diagnostic, lsp_diag: lsp.Diagnostic) -> lsp.CodeAction | None:
        text = self.ls.text_of(report, d.cell)
        where = noqa_insertion(text, d.location.row, d.code)
        if where is None:
            return None
        row, col, insert = where
        edit = lsp.TextEdit(range=self.ls.to_range(_lines(text), row, col, row, col), new_text=insert)
        return lsp.CodeAction(title=f"Suppress {d.code} on this line (# noqa)", kind=lsp.CodeActionKind.QuickFix,
                              diagnostics=[lsp_diag],
                              edit=self.workspace_edit({self.cell_uri(report.doc.key, d.cell): [edit]}))

    async def code_actions(self, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        key, cell = self.ls.key_of(params.text_document.uri)
        report = await self.ls.report_for(key)
        if report is None:
            return []
        only = params.context.only
        want_quick = not only or any(lsp.CodeActionKind.QuickFix.startswith(k) or k.startswith("quickfix") for k in only)
        want_all = not only or any(FIX_ALL_KIND.startswith(k) for k in only)
        lazy = self._supports_resolve()
        out: list[lsp.CodeAction] = []
        lines = _lines(self.ls.text_of(report, cell))
        first, last = params.range.start.line + 1, params.range.end.line + 1
        if want_quick:
            for d in self.ls.in_cell(report, cell):
                if d.end_location.row < first or d.location.row > last:
                    continue
                lsp_diag = self.ls.lsp_diagnostic(d, lines, report)
                if report.fix_allowed(d):
                    safety = "safe" if d.fix.applicability is Applicability.SAFE else "unsafe"
                    action = lsp.CodeAction(
                        title=f"Fix {d.code}: {d.fix.message} ({safety} fix)", kind=lsp.CodeActionKind.QuickFix,
                        diagnostics=[lsp_diag], is_preferred=safety == "safe",
                        data={"key": key, "version": report.doc.version, "what": "fix",
                              "diag": [d.code, d.cell, d.location.row, d.location.column]})
                    if not lazy:
                        action.edit = await self.fix_edit(report, d)
                        if action.edit is None:
                            action = None
                    if action is not None:
                        out.append(action)
                noqa = self.noqa_action(report, d, lsp_diag)
                if noqa is not None:
                    out.append(noqa)
        if want_all and any(report.fix_allowed(d) and d.fix.applicability is Applicability.SAFE
                            for d in report.diagnostics):
            action = lsp.CodeAction(title="perflint: fix all safe fixes", kind=FIX_ALL_KIND,
                                    data={"key": key, "version": report.doc.version, "what": "fixAll"})
            if not lazy:
                action.edit = await self.fix_all_edit(report)
                if action.edit is None:
                    action = None
            if action is not None:
                out.append(action)
        return out

    async def resolve(self, action: lsp.CodeAction) -> lsp.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        key = data.get("key")
        if not isinstance(key, str):
            return action
        report = await self.ls.report_for(key)
        if report is None or report.doc.version != data.get("version"):
            return action  # the document changed: no edit (the client asks again)
        if data.get("what") == "fixAll":
            action.edit = await self.fix_all_edit(report)
        elif data.get("what") == "fix":
            code, cell, row, col = data.get("diag") or [None, None, None, None]
            for d in report.diagnostics:
                if (d.code, d.cell, d.location.row, d.location.column) == (code, cell, row, col):
                    action.edit = await self.fix_edit(report, d)
                    break
        return action
