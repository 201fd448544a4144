"""How fast does `perflint server` answer an edit, and does its memory stay flat?

    python benchmarks/server_latency.py [--edits 1000] [--latency-edits 20] [--json OUT.json]

Starts `perflint server` as a subprocess and drives it over stdio with pygls's LSP client,
as an editor does: opens a ~300-line training script (the `speaker_verification` workload
and an evaluation module appended to it) in a temporary project, then

* latency: `--latency-edits` edits, one at a time (an incremental `didChange` that types
  or deletes a character inside the training loop); the time from sending the change to
  receiving `publishDiagnostics` for that document version (each edit follows the previous
  one's diagnostics, so the server's debounce lets it through at once, as a keystroke after
  a pause).  Three edits before them warm the server up and are not counted.  The server's
  CPU time per edit (user + system, from /proc) is what the machine's load cannot inflate.
* code actions: a quick fix and "fix all safe fixes", each asked for and resolved five
  times (the first renders the edit; later ones come from the server's per-version cache).
* memory: `--edits` more edits, each waited for; the resident set size of the server
  process (VmRSS) after the warm-up and every tenth of the way.

Prints both as tables (median and 90th percentile of the latencies; RSS in MiB with the
growth since the warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "fixtures" / "workloads" / "speaker_verification.py"

EVAL_MODULE = '''

# --- evaluation ---------------------------------------------------------------------------


def evaluate_{i}(model, loader, device, criterion):
    """Mean loss and accuracy of `model` over `loader`."""
    model.eval()
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for feats, labels in loader:
            feats = feats.to(device)
            labels = labels.to(device)
            logits = model(feats)
            total += criterion(logits, labels).item() * labels.numel()
            correct += (logits.argmax(dim=-1) == labels).sum().item()
            count += labels.numel()
    model.train()
    return total / max(count, 1), correct / max(count, 1)
'''


def training_script(lines: int = 300) -> str:
    text = WORKLOAD.read_text()
    i = 0
    while text.count("\n") < lines:
        text += EVAL_MODULE.format(i=i)
        i += 1
    return text


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(edits: int, latency_edits: int) -> dict:
    from lsprotocol import types as lsp
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("perflint-benchmark", "1")
    published: dict[int, float] = {}
    arrived = asyncio.Event()

    last: list = []

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_publish(params: lsp.PublishDiagnosticsParams) -> None:
        if params.version is not None:
            published[params.version] = time.perf_counter()
            published[-1] = len(params.diagnostics)
            last[:] = params.diagnostics
            arrived.set()

    @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def on_register(params) -> None:
        return None

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")])}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "pyproject.toml").write_text('[project]\nname = "bench"\ndependencies = ["torch>=2.4"]\n')
        text = training_script()
        path = folder / "train.py"
        path.write_text(text)
        uri = path.as_uri()
        await client.start_io(sys.executable, "-m", "perflint", "server", env=env)
        pid = client._server.pid  # type: ignore[union-attr]
        capabilities = lsp.ClientCapabilities(text_document=lsp.TextDocumentClientCapabilities(
            code_action=lsp.CodeActionClientCapabilities(resolve_support=lsp.ClientCodeActionResolveOptions(
                properties=["edit"]))))
        await client.initialize_async(lsp.InitializeParams(
            capabilities=capabilities, root_uri=folder.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=folder.as_uri(), name="bench")]))
        client.initialized(lsp.InitializedParams())

        async def wait_for(version: int) -> float:
            while version not in published:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 60)
            return published[version]

        client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=text)))
        await wait_for(1)
        findings = published[-1]
        # The line inside the training loop that the edits type on.
        lines = text.split("\n")
        row = next(i for i, line in enumerate(lines) if "loss.backward()" in line)
        col = len(lines[row])
        version = 1

        async def edit() -> float:
            nonlocal version
            version += 1
            typing = version % 2 == 0  # type a character, then delete it again
            start = lsp.Position(line=row, character=col)
            end = start if typing else lsp.Position(line=row, character=col + 1)
            sent = time.perf_counter()
            client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[lsp.TextDocumentContentChangePartial(
                    range=lsp.Range(start=start, end=end), text=" " if typing else "")]))
            return (await wait_for(version)) - sent

        for _ in range(3):
            await edit()
        async def action_ms(diag: lsp.Diagnostic | None, kind: str) -> float:
            """A code action asked for and its edit resolved, as picking it from a menu does."""
            rng = diag.range if diag is not None else lsp.Range(start=lsp.Position(line=0, character=0),
                                                                end=lsp.Position(line=0, character=0))
            sent = time.perf_counter()
            actions = await client.text_document_code_action_async(lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), range=rng,
                context=lsp.CodeActionContext(diagnostics=[diag] if diag else [], only=[kind])))
            chosen = next(a for a in actions if a.title.startswith("Fix") or kind != "quickfix")
            if chosen.edit is None:
                chosen = await client.code_action_resolve_async(chosen)
            assert chosen.edit is not None
            return (time.perf_counter() - sent) * 1000

        fixable = next(d for d in last if (d.data or {}).get("fix") and d.data["fix"]["offered"])
        quick_fix = [await action_ms(fixable, "quickfix") for _ in range(5)]
        await edit()  # a new version: nothing cached
        fix_all = [await action_ms(None, "source.fixAll.perflint") for _ in range(5)]
        cpu0 = _cpu_s(pid)
        latencies = [await edit() for _ in range(latency_edits)]
        cpu_ms = (_cpu_s(pid) - cpu0) * 1000 / max(1, latency_edits)
        rss = [(0, _rss_mib(pid))]
        step = max(1, edits // 10)
        started = time.perf_counter()
        for n in range(1, edits + 1):
            await edit()
            if n % step == 0 or n == edits:
                rss.append((n, _rss_mib(pid)))
        soak_s = time.perf_counter() - started
        await client.shutdown_async(None)
        client.exit(None)
        await asyncio.wait_for(client._server.wait(), 10)  # type: ignore[union-attr]
        code = client._server.returncode  # type: ignore[union-attr]
        await client.stop()
    return {
        "script_lines": text.count("\n"), "findings": findings, "latency_ms": [x * 1000 for x in latencies],
        "server_cpu_ms_per_edit": cpu_ms, "quick_fix_ms": quick_fix, "fix_all_ms": fix_all,
        "quick_fix_rule": fixable.code, "load_average": os.getloadavg(),
        "rss_mib": rss, "soak_edits": edits, "soak_s": soak_s, "exit_code": code,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=1000, help="edits for the memory soak (default 1000)")
    ap.add_argument("--latency-edits", type=int, default=20, help="timed edits (default 20)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    res = asyncio.run(run(args.edits, args.latency_edits))
    lat = sorted(res["latency_ms"])
    p90 = lat[min(len(lat) - 1, int(round(0.9 * (len(lat) - 1))))]
    print(f"perflint server, {res['script_lines']}-line training script ({res['findings']} findings), {res['machine']}")
    print()
    print("| didChange → publishDiagnostics | ms |")
    print("|---|---|")
    print(f"| median of {len(lat)} edits | {statistics.median(lat):.0f} |")
    print(f"| 90th percentile | {p90:.0f} |")
    print(f"| fastest / slowest | {lat[0]:.0f} / {lat[-1]:.0f} |")
    print(f"| server CPU time per edit | {res['server_cpu_ms_per_edit']:.0f} |")
    print()
    print("| code action, asked for and resolved | first (ms) | median of the next 4 (ms) |")
    print("|---|---|---|")
    for label, key in ((f"quick fix ({res['quick_fix_rule']})", "quick_fix_ms"), ("fix all safe fixes", "fix_all_ms")):
        print(f"| {label} | {res[key][0]:.0f} | {statistics.median(res[key][1:]):.0f} |")
    print()
    base = res["rss_mib"][0][1]
    print("| edits | server RSS (MiB) | growth (MiB) |")
    print("|---|---|---|")
    for n, mib in res["rss_mib"]:
        print(f"| {n} | {mib:.1f} | {mib - base:+.1f} |")
    print()
    print(f"{res['soak_edits']} edits in {res['soak_s']:.1f} s; server exit status after shutdown/exit: "
          f"{res['exit_code']}; load average at the end: {res['load_average'][0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
