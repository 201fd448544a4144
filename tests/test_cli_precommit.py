"""The pre-commit hooks: their definition, and their entries run on files as pre-commit would."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli_support import AMP, AMP_FIXED, CLEAN, notebook, write

ROOT = Path(__file__).resolve().parent.parent
HOOKS = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}


def run_hook(hook_id: str, files: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run a hook's entry and args on files, as pre-commit does (the `perflint` executable
    is this checkout's, through `python -m perflint`)."""
    hook = HOOKS[hook_id]
    entry = shlex.split(hook["entry"])
    assert entry[0] == "perflint"
    cmd = [sys.executable, "-m", "perflint", *entry[1:], *hook.get("args", []), *files]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)


def test_hook_definitions():
    assert set(HOOKS) == {"perflint", "perflint-fix"}
    for hook in HOOKS.values():
        assert hook["language"] == "python"
        assert sorted(hook["types_or"]) == ["jupyter", "python"]
        assert hook["require_serial"] is True
        assert "--force-exclude" in shlex.split(hook["entry"])
    assert shlex.split(HOOKS["perflint"]["entry"])[:2] == ["perflint", "check"]
    assert shlex.split(HOOKS["perflint-fix"]["entry"])[:2] == ["perflint", "fix"]


@pytest.fixture
def repo(tmp_path):
    write(tmp_path, {
        ".git/HEAD": "",
        ".gitignore": "generated/\n",
        "pyproject.toml": '[tool.perflint]\nextend-exclude = ["vendored/"]\n',
        "a.py": AMP,
        "clean.py": CLEAN,
        "nb.ipynb": notebook(("code", AMP)),
        "generated/g.py": AMP,
        "vendored/v.py": AMP,
    })
    return tmp_path


def test_check_hook_reports_findings_and_honours_excludes(repo):
    files = ["a.py", "clean.py", "nb.ipynb", "generated/g.py", "vendored/v.py"]
    p = run_hook("perflint", files, repo)
    assert p.returncode == 1, p.stderr
    assert "a.py:3:10: PF402" in p.stdout
    assert "nb.ipynb:cell 1:3:10: PF402" in p.stdout
    assert "generated" not in p.stdout and "vendored" not in p.stdout
    p = run_hook("perflint", ["clean.py", "generated/g.py", "vendored/v.py"], repo)
    assert p.returncode == 0, p.stdout + p.stderr


def test_fix_hook_fixes_the_files(repo):
    p = run_hook("perflint-fix", ["a.py", "nb.ipynb", "vendored/v.py"], repo)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (repo / "a.py").read_text() == AMP_FIXED
    assert 'torch.amp.GradScaler(\\"cuda\\")' in (repo / "nb.ipynb").read_text()
    assert (repo / "vendored" / "v.py").read_text() == AMP  # excluded: untouched
    # Nothing left to fix: the hook passes and changes nothing.
    before = (repo / "a.py").read_bytes()
    p = run_hook("perflint-fix", ["a.py"], repo)
    assert p.returncode == 0 and (repo / "a.py").read_bytes() == before
