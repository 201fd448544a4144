"""Start-up: a warm run on one small file imports only what it needs, and does not read the
other files of its project again.  (The time itself is measured by
`benchmarks/lint_speed.py --one-file FILE`, not asserted here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import perflint.projectrun as projectrun
from cli_support import run, write

ROOT = Path(__file__).resolve().parent.parent
NOT_ON_A_WARM_RUN = ("libcst", "packaging", "rich.markdown", "perflint_runtime", "torch", "difflib",
                     "concurrent.futures.process", "pathspec")

PROBE = """
import sys
from perflint.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("imported:", " ".join(sorted(m for m in sys.modules if m in {names!r})))
"""

TRAIN = """\
import torch
from torch.utils.data import DataLoader

from helpers import log


def train(model, ds, opt):
    loader = DataLoader(Frames(ds, transform=augment), batch_size=32)
    for x, y in loader:
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log(loss.item())
"""


@pytest.fixture
def project(tmp_path):
    files = {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n', "train.py": TRAIN,
             "helpers.py": "def log(x):\n    print(x)\n"}
    files.update({f"pkg/m{i}.py": f"import torch\nfrom helpers import log\nX{i} = torch.ones({i})\n" for i in range(5)})
    write(tmp_path, files)
    return tmp_path


def _imports(project: Path, *args: str) -> list[str]:
    env = {**os.environ, "PERFLINT_CACHE_DIR": str(project / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")])}
    p = subprocess.run([sys.executable, "-c", PROBE.format(names=set(NOT_ON_A_WARM_RUN)), *args], cwd=project,
                       env=env, capture_output=True, text=True)
    line = p.stdout.splitlines()[-1]
    assert line.startswith("imported:"), p.stdout + p.stderr
    return line.split()[1:]


def test_a_warm_one_file_run_imports_only_what_it_needs(project):
    assert "libcst" in _imports(project, "check", "train.py", "--exit-zero")  # cold: it parses
    for fmt in ("concise", "full", "json", "sarif", "github"):
        assert _imports(project, "check", "train.py", "--output-format", fmt, "--exit-zero") == [], fmt


def test_piped_or_redirected_reports_do_not_import_rich(project):
    """rich styles a terminal; a report piped, redirected or written with -o is plain text."""
    probe = ("import sys\nfrom perflint.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print('imported:', ' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'rich')))\n")
    env = {**os.environ, "PERFLINT_CACHE_DIR": str(project / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")])}
    env.pop("FORCE_COLOR", None)
    for args in (("check", "train.py", "--no-cache"), ("check", "train.py", "--no-cache", "--output-format", "concise"),
                 ("check", "nothing_here.py", "--no-cache"), ("check", "train.py", "--no-cache", "-o", "r.txt")):
        p = subprocess.run([sys.executable, "-c", probe, *args], cwd=project, env=env, capture_output=True, text=True)
        assert p.stdout.splitlines()[-1].strip() == "imported:", (args, p.stdout[-300:], p.stderr[-300:])
    assert "Found" in (project / "r.txt").read_text()


def test_piped_rule_docs_do_not_render_markdown(project):
    assert "rich.markdown" not in _imports(project, "rule", "PF201")


def test_a_warm_one_file_run_does_not_reread_the_project(project, monkeypatch):
    monkeypatch.chdir(project)
    monkeypatch.setenv("PERFLINT_CACHE_DIR", str(project / "cache"))
    read: list[str] = []
    real = projectrun.read_regular
    monkeypatch.setattr(projectrun, "read_regular", lambda p: read.append(os.path.basename(p)) or real(p))
    first = run("check", "train.py", "-j1", "--output-format", "concise")
    assert "train.py:8:14: PF101" in first.stdout
    assert read  # the first run looks for the files that import train.py, and reads helpers.py
    read.clear()
    second = run("check", "train.py", "-j1", "--output-format", "concise")
    assert second.stdout == first.stdout
    assert read == []
    # A project file that changes is read again.
    write(project, {"pkg/m1.py": "import torch\nimport train\n"})
    read.clear()
    run("check", "train.py", "-j1", "--output-format", "concise")
    assert read == ["m1.py"]


def test_a_cold_run_on_a_file_no_rule_can_fire_in_never_imports_libcst(tmp_path):
    """The prefilter reads the rule table, not the rules: a file that holds none of the
    selected rules' tokens is skipped before libcst is imported (a pre-commit run on a
    utility module)."""
    write(tmp_path, {"paths.py": "import os\n\n\ndef under(root, name):\n    return os.path.join(root, name)\n"})
    assert "libcst" not in _imports(tmp_path, "check", "paths.py", "--no-cache", "--exit-zero")
    assert "libcst" not in _imports(tmp_path, "fix", "paths.py", "--no-cache", "--exit-zero")
    write(tmp_path, {"loader.py": "from torch.utils.data import DataLoader\nloader = DataLoader(ds)\n"})
    assert "libcst" in _imports(tmp_path, "check", "loader.py", "--no-cache", "--exit-zero")


RULE_PROBE = """
import sys
from perflint.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("imported:", " ".join(sorted(m for m in sys.modules if m.rsplit(".", 1)[-1].startswith("pf") or m == "tomllib")))
"""


def test_a_cold_run_imports_only_the_rules_its_file_can_fire(tmp_path):
    """The rule table names each rule's module: a file is checked by the selected rules whose
    tokens it holds, and only their modules are imported (with no configuration file, no TOML
    reader either)."""
    from perflint.rules.table import RULES

    text = "from torch.utils.data import DataLoader\nloader = DataLoader(ds)\n"
    write(tmp_path, {"loader.py": text})
    env = {**os.environ, "PERFLINT_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "runtime")])}
    p = subprocess.run([sys.executable, "-c", RULE_PROBE, "check", "loader.py", "--no-cache", "--exit-zero"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    imported = set(p.stdout.splitlines()[-1].split()[1:])
    expected = {row["module"] for row in RULES.values()
                if row["default"] and any(tok.decode() in text for tok in row["tokens"])}
    assert expected and len(expected) < len([r for r in RULES.values() if r["default"]])
    if any((d / "pyproject.toml").is_file() for d in tmp_path.parents):
        imported.discard("tomllib")  # a configuration above the test's folder is read, as it should be
    assert imported == expected, p.stderr[-500:]
