"""The pre-commit hooks: their definition, and their entries run on files as pre-commit would."""

from __future__ import annotations

import os
import re
import shlex
import shutil
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
        "pyproject.toml": '[tool.perflint]\nextend-select = ["PF402"]\nextend-exclude = ["vendored/"]\n',
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


# ---------------------------------------------------------------------------------------
# The README's configuration, run by pre-commit itself in a fresh git repository.
# ---------------------------------------------------------------------------------------

README_CONFIG = re.compile(r"```yaml\n(# \.pre-commit-config\.yaml\n.*?)```", re.S)
# perflint's dependencies, and what pip needs to build it and pre-commit's placeholder package.
WHEELS = ("libcst", "pyyaml", "click", "rich", "markdown-it-py", "mdurl", "pygments", "pathspec", "packaging",
          "setuptools")  # setuptools: pre-commit's placeholder package for local hooks is built with it


def _readme_config(perflint_path: Path) -> str:
    found = README_CONFIG.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 1, "the README has one .pre-commit-config.yaml block"
    assert '"/path/to/perflint"' in found[0]
    return found[0].replace("/path/to/perflint", str(perflint_path))


def _wheel_from_installed(name: str, out: Path) -> None:
    """A wheel of an installed distribution, rebuilt from its files (for an offline index)."""
    import importlib.metadata as md
    import zipfile

    dist = md.distribution(name)
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    norm = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    path = out / f"{norm}-{dist.version}-{tags[0] if tags else 'py3-none-any'}.whl"
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    names = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in dist.files or ():
            rel = f.as_posix()
            if rel.startswith("..") or "__pycache__" in rel or (".dist-info/" in rel and f.name in skip):
                continue
            src = Path(dist.locate_file(f))
            if src.is_file():
                zf.write(src, rel)
                names.append(rel)
        info = next(n for n in names if ".dist-info/" in n).split("/", 1)[0]
        zf.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in names) + f"{info}/RECORD,,\n")


def _perflint_wheel(out: Path) -> Path:
    """A wheel of this checkout, written directly (building one needs setuptools ≥ 77, which a
    fresh virtual environment of Python 3.11 does not have and an offline pip cannot fetch)."""
    import tomllib
    import zipfile

    from perflint import __version__

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    info = f"torch_perflint-{__version__}.dist-info"
    path = out / f"torch_perflint-{__version__}-py3-none-any.whl"
    names = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for base, pkg in ((ROOT, "perflint"), (ROOT / "runtime", "perflint_runtime")):
            for f in sorted((base / pkg).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".html"):
                    rel = f.relative_to(base).as_posix()
                    zf.write(f, rel)
                    names.append(rel)
        meta = "".join(["Metadata-Version: 2.1\nName: torch-perflint\n", f"Version: {__version__}\n",
                        *(f"Requires-Dist: {d}\n" for d in project["dependencies"])])
        files = {"METADATA": meta, "WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
                 "entry_points.txt": "[console_scripts]\nperflint = perflint.cli:main\n"}
        for name, text in files.items():
            zf.writestr(f"{info}/{name}", text)
            names.append(f"{info}/{name}")
        zf.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in names) + f"{info}/RECORD,,\n")
    return path


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_readme_precommit_config_runs_under_pre_commit(tmp_path):
    """The README's snippet, with the path to this checkout, in a new git repository: pre-commit
    builds the hook's environment (offline: pip reads wheels of the packages installed here)
    and runs both hooks on a staged file with a finding."""
    pytest.importorskip("pre_commit", reason="pre-commit is in the dev extra")
    checkout = tmp_path / "perflint"
    for item in ("pyproject.toml", "README.md", "perflint", "runtime"):
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, checkout / item, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
        else:
            checkout.mkdir(exist_ok=True)
            shutil.copy(src, checkout / item)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    import importlib.metadata as md

    for name in WHEELS:
        try:
            _wheel_from_installed(name, wheels)
        except md.PackageNotFoundError:
            pass  # pip then reports what it cannot find, and the test is skipped below
    try:
        setuptools_major = int(md.version("setuptools").split(".")[0])
    except (md.PackageNotFoundError, ValueError):
        setuptools_major = 0
    if setuptools_major < 77:
        # pip cannot build the checkout offline with this environment's setuptools: give the
        # hook a wheel of it instead (the README's other form).
        checkout = _perflint_wheel(wheels)
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "VIRTUALENV_NO_PERIODIC_UPDATE": "1",
           "VIRTUALENV_OVERRIDE_APP_DATA": str(tmp_path / "virtualenv-data"), "PERFLINT_CACHE_DIR": str(tmp_path / "cache"),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    env.pop("PYTHONPATH", None)

    def sh(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)

    assert sh("git", "init", "-q").returncode == 0
    (repo / ".pre-commit-config.yaml").write_text(_readme_config(checkout), encoding="utf-8")
    (repo / "train.py").write_text(AMP, encoding="utf-8")
    (repo / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF402"]\n', encoding="utf-8")
    sh("git", "add", ".")
    precommit = [sys.executable, "-m", "pre_commit"]
    p = sh(*precommit, "run", "perflint", "--files", "train.py")
    if "Could not find a version that satisfies" in p.stdout + p.stderr:
        pytest.skip("pre-commit could not build the hook environment offline: " + (p.stdout + p.stderr)[-400:])
    assert p.returncode == 1, p.stdout + p.stderr
    assert "train.py:3:10: PF402" in p.stdout
    p = sh(*precommit, "run", "perflint-fix", "--files", "train.py")
    assert p.returncode == 1, p.stdout + p.stderr  # pre-commit fails a hook that changes files
    assert (repo / "train.py").read_text() == AMP_FIXED
    sh("git", "add", ".")
    p = sh(*precommit, "run", "--all-files")
    assert p.returncode == 0, p.stdout + p.stderr
