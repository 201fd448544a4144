"""Shared helpers for the command-line tests: run `perflint` in-process, write small projects."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner, Result

from perflint.cli import main

# One finding of each kind the tests lean on (rules available from the start):
#   PF402: deprecated torch.cuda.amp API, safe fix, applies from target torch 2.4;
#   PF101: DataLoader without workers, no fix.
AMP = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
AMP_FIXED = 'import torch\n\nscaler = torch.amp.GradScaler("cuda")\n'
LOADER = "from torch.utils.data import DataLoader\n\nloader = DataLoader(ds, batch_size=2)\n"
CLEAN = "import torch\n\nx = torch.ones(3)\n"
NO_TORCH = "def add(a, b):\n    return a + b\n"


def run(*args: str, env: dict | None = None) -> Result:
    """`perflint ARGS` in this process; the result has exit_code, stdout and stderr."""
    runner = CliRunner(env={"PERFLINT_CACHE_DIR": None, "COLUMNS": "200", **(env or {})})
    return runner.invoke(main, list(args), catch_exceptions=False)


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create files under root (text is dedented); returns root."""
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(textwrap.dedent(content), encoding="utf-8")
    return root


def notebook(*cells: tuple[str, object], **extra) -> str:
    """A notebook with ("code"|"markdown", source) cells, as Jupyter writes it."""
    out = []
    for kind, source in cells:
        cell = {"cell_type": kind, "metadata": {}, "source": source}
        if kind == "code":
            cell.update({"execution_count": None, "outputs": []})
        out.append(cell)
    nb = {
        "cells": out,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
        **extra,
    }
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def codes(result: Result) -> list[tuple[str, str]]:
    """(filename relative to cwd, code) for each finding in `--output-format json` output."""
    import os

    return [(os.path.relpath(d["filename"]), d["code"]) for d in json.loads(result.stdout)]


# ---------------------------------------------------------------------------------------
# Rules made for a test, registered with monkeypatch (in-process runs only: -j1, or fewer
# files than the engine sends to worker processes).
# ---------------------------------------------------------------------------------------

HOUSE_DOC = """
    ## What it does
    A rule made for a test.

    ## Why is this bad?
    Not measured yet.

    ## Example
    ```python
    step_0 = 1
    ```

    ## Use instead
    ```python
    step_3 = 1
    ```

    ## Fix safety
    Safe: it only renames.

    ## Applies to
    All torch versions.

    ## References
    None.
    """


def register_rule(monkeypatch, code: str, check, *, fix_class: str = "none", tokens=(b"torch",), default=True):
    """Register a rule whose `check(self, facts)` is `check`; undone when the test ends."""
    import perflint.rules as rules_pkg
    from perflint.rules.base import Rule

    rules_pkg.all_rules()  # load the real rules first
    cls = type(
        f"TestRule{code}",
        (Rule,),
        {"code": code, "name": f"test-rule-{code.lower()}", "summary": "A rule made for a test.",
         "fix_class": fix_class, "tokens": tuple(tokens), "default": default, "check": check,
         "__doc__": HOUSE_DOC},
    )
    monkeypatch.setitem(rules_pkg._REGISTRY, code, cls)
    return cls


def names_matching(facts, pattern: str):
    """Every libcst Name node in the file whose value matches `pattern`."""
    import re

    import libcst as cst

    from perflint.analysis import iter_nodes

    for node in iter_nodes(facts.module):
        if isinstance(node, cst.Name) and re.fullmatch(pattern, node.value):
            yield node


_LIBCST_PROBE = (
    "import sys\nfrom perflint.cli import main\n"
    "try:\n    main(['check', '.', '--exit-zero', '--output-format', 'concise'])\n"
    "except SystemExit:\n    pass\n"
    "print('imported libcst:', 'libcst' in sys.modules)\n"
)


def cold_then_warm(folder: Path) -> tuple[list[str], list[str]]:
    """`perflint check .` in `folder` twice, each in a fresh process with the cache in
    `folder/cache`; each run's output lines, the last saying whether libcst was imported."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PERFLINT_CACHE_DIR": str(folder / "cache")}
    runs = [subprocess.run([sys.executable, "-c", _LIBCST_PROBE], cwd=folder, env=env, capture_output=True, text=True)
            for _ in range(2)]
    for r in runs:
        assert r.stdout.splitlines(), r.stderr
    first, second = (r.stdout.splitlines() for r in runs)
    return first, second


def fix_source(text: str, *, unsafe: bool = False, codes=None, target_torch: str = "2.4") -> str:
    """`text` with the fixes of `codes` applied, as `perflint fix` applies them (no configuration)."""
    from perflint.api import fix_source as _fix_source

    return _fix_source(text, path="train.py", unsafe=unsafe, select=list(codes or ["ALL"]),
                       target_torch=target_torch, config=False).text
