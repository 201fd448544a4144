"""`perflint server` end to end: a real LSP client (pytest-lsp) starts the server as a
subprocess over stdio and drives it as an editor would."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")])}
PUBLISH = lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS

pytestmark = pytest.mark.asyncio(loop_scope="function")

TRAIN = '''\
import torch
from torch.utils.data import DataLoader


def main():
    device = torch.device("cuda")
    model = torch.nn.Linear(10, 1).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.cuda.amp.GradScaler()
    loader = DataLoader(Frames("data", transform=augment), batch_size=8)
    total = 0.0
    for x, y in loader:
        x = x.to(device)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        total += loss.item()
    print(total)


if __name__ == "__main__":
    main()
'''
EXPECTED = {"PF101", "PF105", "PF201", "PF302", "PF402"}  # no PF102: off by default, and not selected here
# PF402 (a maintenance rule), PF105, PF302 and PF201 are off by default: the workspace selects them, as a user would.
PROJECT = '[project]\nname = "demo"\ndependencies = ["torch>=2.4"]\n'
PYPROJECT = PROJECT + '[tool.perflint]\nextend-select = ["PF402", "PF105", "PF302", "PF201"]\n'


def _codes(diags) -> set[str]:
    return {d.code for d in diags}


async def wait_diagnostics(client: LanguageClient, uri: str, pred=lambda d: True, timeout: float = 20.0):
    """The diagnostics last published for `uri`, once they satisfy `pred`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = client.diagnostics.get(uri)
        if got is not None and pred(got):
            return got
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"no matching diagnostics for {uri}; last: {got}")
        try:
            await asyncio.wait_for(client.wait_for_notification(PUBLISH), remaining)
        except TimeoutError:
            pass


def _init_params(root: Path, options: dict | None = None) -> lsp.InitializeParams:
    capabilities = client_capabilities("visual-studio-code")
    capabilities.notebook_document = lsp.NotebookDocumentClientCapabilities(
        synchronization=lsp.NotebookDocumentSyncClientCapabilities())
    return lsp.InitializeParams(
        capabilities=capabilities,
        root_uri=root.as_uri(),
        workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="demo")],
        initialization_options=options or {},
    )


CONFIG = ClientServerConfig(server_command=[sys.executable, "-m", "perflint", "server"], server_env=ENV)


def _accept_registrations(client: LanguageClient) -> list:
    """Let the server register its file watchers, as editors do; the registrations are kept."""
    seen: list = []

    @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def register(params: lsp.RegistrationParams):
        seen.extend(params.registrations)

    return seen


@pytest_lsp.fixture(config=CONFIG)
async def client(lsp_client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    lsp_client.registrations = _accept_registrations(lsp_client)
    result = await lsp_client.initialize_session(_init_params(tmp_path))
    assert result.capabilities.code_action_provider.resolve_provider
    assert result.capabilities.notebook_document_sync is not None
    yield
    await lsp_client.shutdown_session()
    # A clean shutdown: `shutdown` answered, then `exit` ends the process with status 0.
    assert lsp_client._server.returncode == 0
    assert [r.method for r in lsp_client.registrations] == [lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES]


def open_doc(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
    return uri


def change_doc(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)]))


def apply_edits(text: str, edits) -> str:
    lines = text.splitlines(keepends=True)

    def offset(pos):
        return sum(len(line) for line in lines[: pos.line]) + pos.character

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
    return text


def edits_of(edit: lsp.WorkspaceEdit, uri: str):
    if edit.document_changes:
        return [e for dc in edit.document_changes if dc.text_document.uri == uri for e in dc.edits]
    return list((edit.changes or {}).get(uri, []))


async def test_diagnostics_update_fix_and_hover(client: LanguageClient, tmp_path):
    uri = open_doc(client, tmp_path / "train.py", TRAIN)
    diags = await wait_diagnostics(client, uri)
    assert _codes(diags) == EXPECTED
    item = next(d for d in diags if d.code == "PF201")
    assert item.range.start == lsp.Position(line=19, character=22)
    assert item.severity == lsp.DiagnosticSeverity.Warning and item.source == "perflint"
    from perflint.rules import docs_url

    assert item.code_description.href == docs_url("PF201") and item.code_description.href.endswith("#pf201")
    assert list(next(d for d in diags if d.code == "PF402").tags) == [lsp.DiagnosticTag.Deprecated]

    # An incremental edit that turns `.item()` into `.detach()`: PF201 goes, the rest stays.
    edited = TRAIN.replace("total += loss.item()", "total += loss.detach()")
    col = TRAIN.splitlines()[19].index("item")
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(line=19, character=col), end=lsp.Position(line=19, character=col + 4)),
            text="detach")]))
    diags = await wait_diagnostics(client, uri, lambda d: "PF201" not in _codes(d))
    assert _codes(diags) == EXPECTED - {"PF201"}

    # Code actions on the GradScaler line: a safe fix (resolved lazily) and a noqa.
    pf402 = next(d for d in diags if d.code == "PF402")
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=pf402.range,
        context=lsp.CodeActionContext(diagnostics=[pf402])))
    titles = [a.title for a in actions]
    fix = next(a for a in actions if a.title.startswith("Fix PF402"))
    assert fix.title.endswith("(safe fix)") and fix.kind == lsp.CodeActionKind.QuickFix
    assert any(t.startswith("Suppress PF402") for t in titles)
    # Unsafe fixes are not offered while unsafe-fixes is off.
    assert not any("(unsafe fix)" in t for t in titles)
    if fix.edit is None:
        fix = await client.code_action_resolve_async(fix)
    fixed = apply_edits(edited, edits_of(fix.edit, uri))
    assert 'torch.amp.GradScaler("cuda")' in fixed and "torch.cuda.amp" not in fixed
    change_doc(client, uri, fixed, 3)
    diags = await wait_diagnostics(client, uri, lambda d: "PF402" not in _codes(d))
    assert _codes(diags) == EXPECTED - {"PF201", "PF402"}

    # The noqa action suppresses the finding it is for.
    pf105 = next(d for d in diags if d.code == "PF105")
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=pf105.range,
        context=lsp.CodeActionContext(diagnostics=[pf105])))
    noqa = next(a for a in actions if a.title.startswith("Suppress PF105"))
    suppressed = apply_edits(fixed, edits_of(noqa.edit, uri))
    assert "x = x.to(device)  # noqa: PF105" in suppressed
    change_doc(client, uri, suppressed, 4)
    await wait_diagnostics(client, uri, lambda d: "PF105" not in _codes(d) and "PF302" in _codes(d))

    # Hover on a reported range: the rule's documentation.
    pf302 = next(d for d in client.diagnostics[uri] if d.code == "PF302")
    hover = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=pf302.range.start))
    assert hover is not None and hover.contents.kind == lsp.MarkupKind.Markdown
    assert "PF302" in hover.contents.value and "## What it does" in hover.contents.value
    nothing = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=0, character=0)))
    assert nothing is None


async def test_a_burst_of_changes_is_checked_once_at_its_end(client: LanguageClient, tmp_path):
    uri = open_doc(client, tmp_path / "train.py", TRAIN)
    await wait_diagnostics(client, uri)
    published = []
    handler = client.protocol.fm.features[PUBLISH]

    def counting(params):
        published.append(params.version)
        return handler(params)

    client.protocol.fm.features[PUBLISH] = counting
    # Typing `.detach()` over `.item()`, one change at a time, faster than the debounce.
    for version, typed in enumerate([".", ".d", ".de", ".det", ".deta", ".detac", ".detach"], start=2):
        change_doc(client, uri, TRAIN.replace("loss.item()", "loss" + typed, 1), version)
    change_doc(client, uri, TRAIN.replace("loss.item()", "loss.detach()", 1), 9)
    await wait_diagnostics(client, uri, lambda d: "PF201" not in _codes(d))
    await asyncio.sleep(0.5)  # anything still to come would be a stale version
    assert published[-1] == 9 and len(published) <= 2, published
    assert _codes(client.diagnostics[uri]) == EXPECTED - {"PF201"}


async def test_columns_are_in_the_clients_units(client: LanguageClient, tmp_path):
    """LSP counts UTF-16 code units by default: an emoji before a finding counts 2."""
    line = '        tag = "🚀"; x = x.to(device)'
    uri = open_doc(client, tmp_path / "train.py", TRAIN.replace("        x = x.to(device)", line))
    diags = await wait_diagnostics(client, uri)
    pf105 = next(d for d in diags if d.code == "PF105")
    at = line.index("to(device)")  # in characters; the emoji takes one, UTF-16 counts two
    assert pf105.range.start == lsp.Position(line=12, character=at + 1)
    assert pf105.range.end == lsp.Position(line=12, character=at + 3)


async def test_fix_all_applies_safe_fixes_only(client: LanguageClient, tmp_path):
    uri = open_doc(client, tmp_path / "my train.py", TRAIN)  # a name the URI must quote
    assert "%20" in uri
    await wait_diagnostics(client, uri)
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0)),
        context=lsp.CodeActionContext(diagnostics=[], only=[lsp.CodeActionKind.SourceFixAll])))
    assert [a.kind for a in actions] == ["source.fixAll.perflint"]
    action = actions[0]
    if action.edit is None:
        action = await client.code_action_resolve_async(action)
    fixed = apply_edits(TRAIN, edits_of(action.edit, uri))
    assert 'torch.amp.GradScaler("cuda")' in fixed
    assert "fused=True" not in fixed and "pin_memory" not in fixed  # unsafe: not applied
    # Saving checks the document again.
    client.diagnostics.pop(uri)
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert _codes(await wait_diagnostics(client, uri)) == EXPECTED


async def test_pyproject_change_reselects_rules(client: LanguageClient, tmp_path):
    uri = open_doc(client, tmp_path / "train.py", TRAIN)
    await wait_diagnostics(client, uri, lambda d: _codes(d) == EXPECTED)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + 'ignore = ["PF201", "PF101"]\n')
    client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(changes=[
        lsp.FileEvent(uri=(tmp_path / "pyproject.toml").as_uri(), type=lsp.FileChangeType.Changed)]))
    diags = await wait_diagnostics(client, uri, lambda d: "PF201" not in _codes(d))
    assert _codes(diags) == EXPECTED - {"PF201", "PF101"}
    # A broken configuration is reported on the document, and the server keeps going.
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + 'select = ["PF999"]\n')
    client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(changes=[
        lsp.FileEvent(uri=(tmp_path / "pyproject.toml").as_uri(), type=lsp.FileChangeType.Changed)]))
    diags = await wait_diagnostics(client, uri, lambda d: _codes(d) == {"config-error"})
    assert "PF999" in diags[0].message
    # Saving pyproject.toml in the editor reloads it too.
    (tmp_path / "pyproject.toml").write_text(PROJECT + '[tool.perflint]\nselect = ["PF1"]\n')
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(
        text_document=lsp.TextDocumentIdentifier(uri=(tmp_path / "pyproject.toml").as_uri())))
    diags = await wait_diagnostics(client, uri, lambda d: "config-error" not in _codes(d))
    assert _codes(diags) == {"PF101", "PF105"}
    # Client settings override the file's selection (PF201 reports the read once PF105 is
    # there to report the blocking copy before it).
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"perflint": {"select": ["PF2", "PF105"], "unsafeFixes": True}}))
    diags = await wait_diagnostics(client, uri, lambda d: _codes(d) == {"PF201", "PF105"})
    assert next(d for d in diags if d.code == "PF201").data["fix"] is None


async def test_syntax_error_is_one_diagnostic_and_the_server_survives(client: LanguageClient, tmp_path):
    bad = open_doc(client, tmp_path / "broken.py", "import torch\n\ndef f(:\n    pass\n")
    diags = await wait_diagnostics(client, bad)
    assert len(diags) == 1 and diags[0].code == "syntax-error"
    assert diags[0].range.start.line == 2 and diags[0].severity == lsp.DiagnosticSeverity.Error
    # Undecodable and odd input, then a good file: still answered.
    odd = open_doc(client, tmp_path / "odd.py", "\x00\ufeff" + "(" * 300 + "\n")
    diags = await wait_diagnostics(client, odd)
    assert [d.code for d in diags] == ["decode-error"] and "NUL" in diags[0].message
    good = open_doc(client, tmp_path / "train.py", TRAIN)
    assert _codes(await wait_diagnostics(client, good)) == EXPECTED
    # Fixing the syntax error clears its diagnostic.
    change_doc(client, bad, "import torch\n\ndef f():\n    pass\n", 2)
    await wait_diagnostics(client, bad, lambda d: len(d) == 0)


async def test_edit_rechecks_open_dependents(client: LanguageClient, tmp_path):
    """The step loop lives in train.py and calls a helper in metrics.py: the helper's `.item()`
    runs once per step, so metrics.py is reported; when train.py stops calling it every
    step, metrics.py (not edited) is checked again and the finding goes."""
    helper = "import torch\n\n\ndef accuracy(logits, y):\n    return (logits.argmax(1) == y).float().mean().item()\n"
    loop = TRAIN.replace("from torch.utils.data import DataLoader",
                         "from torch.utils.data import DataLoader\n\nfrom metrics import accuracy")
    loop = loop.replace("        total += loss.item()\n", "        total += loss.detach()\n        accuracy(model(x), y)\n")
    (tmp_path / "train.py").write_text(loop)
    m_uri = open_doc(client, tmp_path / "metrics.py", helper)
    t_uri = open_doc(client, tmp_path / "train.py", loop)
    await wait_diagnostics(client, t_uri)
    diags = await wait_diagnostics(client, m_uri, lambda d: "PF201" in _codes(d))
    assert "called from train.py" in next(d for d in diags if d.code == "PF201").message
    change_doc(client, t_uri, loop.replace("        accuracy(model(x), y)\n", ""), 2)
    await wait_diagnostics(client, m_uri, lambda d: "PF201" not in _codes(d))
    # Closing train.py without saving: the project sees the file on disk again, whose loop
    # still calls the helper; train.py's own diagnostics are cleared.
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=t_uri)))
    await wait_diagnostics(client, t_uri, lambda d: len(d) == 0)
    await wait_diagnostics(client, m_uri, lambda d: "PF201" in _codes(d))


async def test_notebook_cells_get_their_own_diagnostics(client: LanguageClient, tmp_path):
    nb_uri = (tmp_path / "explore.ipynb").as_uri()
    cells = ["import torch\nfrom torch.utils.data import DataLoader\n", "# notes",
             "loader = DataLoader(Frames(transform=augment), batch_size=2)\nfor epoch in range(3):\n    for x in loader:\n"
             "        print(x.sum().item())\n"]  # read every epoch (one pass alone is not reported)
    kinds = [lsp.NotebookCellKind.Code, lsp.NotebookCellKind.Markup, lsp.NotebookCellKind.Code]
    cell_uris = [f"vscode-notebook-cell:{tmp_path}/explore.ipynb#C{i}" for i in range(3)]
    client.notebook_document_did_open(lsp.DidOpenNotebookDocumentParams(
        notebook_document=lsp.NotebookDocument(
            uri=nb_uri, notebook_type="jupyter-notebook", version=1,
            cells=[lsp.NotebookCell(kind=k, document=u) for k, u in zip(kinds, cell_uris)]),
        cell_text_documents=[lsp.TextDocumentItem(uri=u, language_id="python" if k == lsp.NotebookCellKind.Code
                                                  else "markdown", version=1, text=t)
                             for u, k, t in zip(cell_uris, kinds, cells)]))
    diags = await wait_diagnostics(client, cell_uris[2], lambda d: "PF101" in _codes(d))
    pf101 = next(d for d in diags if d.code == "PF101")
    assert pf101.range.start.line == 0  # counted inside the cell
    assert cell_uris[0] not in client.diagnostics or client.diagnostics[cell_uris[0]] == []
    # Editing the cell updates its diagnostics.
    client.notebook_document_did_change(lsp.DidChangeNotebookDocumentParams(
        notebook_document=lsp.VersionedNotebookDocumentIdentifier(uri=nb_uri, version=2),
        change=lsp.NotebookDocumentChangeEvent(cells=lsp.NotebookDocumentCellChanges(text_content=[
            lsp.NotebookDocumentCellContentChanges(
                document=lsp.VersionedTextDocumentIdentifier(uri=cell_uris[2], version=2),
                changes=[lsp.TextDocumentContentChangeWholeDocument(
                    text="loader = DataLoader(Frames(transform=augment), batch_size=2, num_workers=2)\n")])]))))
    await wait_diagnostics(client, cell_uris[2], lambda d: "PF101" not in _codes(d))
    client.diagnostics[cell_uris[2]] = None  # so that the clearing below is seen arriving
    # The finding back, then the notebook closed: its cells' diagnostics are cleared.
    client.notebook_document_did_change(lsp.DidChangeNotebookDocumentParams(
        notebook_document=lsp.VersionedNotebookDocumentIdentifier(uri=nb_uri, version=3),
        change=lsp.NotebookDocumentChangeEvent(cells=lsp.NotebookDocumentCellChanges(text_content=[
            lsp.NotebookDocumentCellContentChanges(
                document=lsp.VersionedTextDocumentIdentifier(uri=cell_uris[2], version=3),
                changes=[lsp.TextDocumentContentChangeWholeDocument(text=cells[2])])]))))
    await wait_diagnostics(client, cell_uris[2], lambda d: d is not None and "PF101" in _codes(d))
    client.notebook_document_did_close(lsp.DidCloseNotebookDocumentParams(
        notebook_document=lsp.NotebookDocumentIdentifier(uri=nb_uri),
        cell_text_documents=[lsp.TextDocumentIdentifier(uri=u) for u in cell_uris]))
    await wait_diagnostics(client, cell_uris[2], lambda d: d is not None and len(d) == 0)


@pytest_lsp.fixture(config=CONFIG)
async def client_with_options(lsp_client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    _accept_registrations(lsp_client)
    await lsp_client.initialize_session(_init_params(tmp_path, {"settings": {"unsafeFixes": True,
                                                                             "ignore": ["PF402"]}}))
    yield
    await lsp_client.shutdown_session()


async def test_initialization_options_allow_unsafe_fixes(client_with_options: LanguageClient, tmp_path):
    client = client_with_options
    uri = open_doc(client, tmp_path / "train.py", TRAIN)
    diags = await wait_diagnostics(client, uri)
    assert _codes(diags) == EXPECTED - {"PF402"}
    pf302 = next(d for d in diags if d.code == "PF302")
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=pf302.range,
        context=lsp.CodeActionContext(diagnostics=[pf302])))
    fix = next(a for a in actions if a.title.startswith("Fix PF302"))
    assert fix.title.endswith("(unsafe fix)") and not fix.is_preferred
    if fix.edit is None:
        fix = await client.code_action_resolve_async(fix)
    assert "fused=True" in apply_edits(TRAIN, edits_of(fix.edit, uri))


BROKEN_RULE = '''\
"""Loaded by Python at start-up (sitecustomize): PF201's check raises, as a bug would."""
from perflint.rules import all_rules


def _boom(self, facts):
    raise RuntimeError("boom")


all_rules()["PF201"].check = _boom
'''


@pytest.fixture
def broken_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(BROKEN_RULE)
    return {**ENV, "PYTHONPATH": os.pathsep.join([str(site), ENV["PYTHONPATH"]])}


async def test_a_crashing_rule_is_logged_and_the_others_report(broken_env, tmp_path):
    client = await ClientServerConfig(server_command=CONFIG.server_command, server_env=broken_env).start()
    try:
        (tmp_path / "pyproject.toml").write_text(PYPROJECT)
        _accept_registrations(client)
        await client.initialize_session(_init_params(tmp_path))
        uri = open_doc(client, tmp_path / "train.py", TRAIN)
        diags = await wait_diagnostics(client, uri)
        assert _codes(diags) == EXPECTED - {"PF201"}
        logged = [m.message for m in client.log_messages if m.type == lsp.MessageType.Error]
        assert any("rule PF201 failed" in m and "boom" in m for m in logged), logged
        # Logged once, not on every edit.
        change_doc(client, uri, TRAIN + "\n", 2)
        await asyncio.wait_for(client.wait_for_notification(PUBLISH), 20)
        logged = [m.message for m in client.log_messages if "rule PF201 failed" in m.message]
        assert len(logged) == 1
        await client.shutdown_session()
        assert client._server.returncode == 0
    finally:
        await client.stop()


async def test_a_module_changed_on_disk_rechecks_its_importers(client: LanguageClient, tmp_path):
    """train.py iterates what `data.make_loader` returns: a DataLoader, so its copies to the
    GPU are batch copies (PF105).  data.py is not open; when it changes on disk to return a
    list, the watcher's event re-checks train.py."""
    (tmp_path / "data.py").write_text("from torch.utils.data import DataLoader\n\n\ndef make_loader(ds):\n"
                                      "    return DataLoader(ds, batch_size=4, num_workers=4, pin_memory=True)\n")
    train = ('import torch\nfrom data import make_loader\n\ndevice = torch.device("cuda")\n'
             "model = torch.nn.Linear(4, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "for x in make_loader(list(range(8))):\n    x = x.to(device)\n    loss = model(x).sum()\n"
             "    loss.backward()\n    opt.step()\n")
    uri = open_doc(client, tmp_path / "train.py", train)
    await wait_diagnostics(client, uri, lambda d: "PF105" in _codes(d))
    (tmp_path / "data.py").write_text("def make_loader(ds):\n    return list(ds)\n")
    client.workspace_did_change_watched_files(lsp.DidChangeWatchedFilesParams(changes=[
        lsp.FileEvent(uri=(tmp_path / "data.py").as_uri(), type=lsp.FileChangeType.Changed)]))
    await wait_diagnostics(client, uri, lambda d: "PF105" not in _codes(d))
