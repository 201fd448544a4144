"""File-wide settings (cudnn.benchmark, TF32) and mixed precision set up by another module of
the project: the entry point or a base class's module covers the file; a module that others
import is never where a file-wide setting is inserted (fixtures/projects/p12, p13)."""

from __future__ import annotations

import shutil
from pathlib import Path

from cli_support import run
from fixture_support import FIXTURES

P12 = FIXTURES / "projects" / "p12_settings_elsewhere"
P13 = FIXTURES / "projects" / "p13_settings_in_a_library"


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_a_library_module_gets_the_finding_but_never_the_setting(tmp_path):
    root = _copy(P13, tmp_path)
    before = {p.name: p.read_text() for p in root.glob("*.py")}
    r = run("fix", "--unsafe-fixes", "--no-cache", "--select", "PF406,PF405", str(root))
    assert r.exit_code == 1, r.output  # the finding stays: nothing fixed it
    after = {p.name: p.read_text() for p in root.glob("*.py")}
    assert after == before
    assert "torch.backends.cudnn.benchmark = True" not in after["engine.py"]


def test_the_same_file_on_its_own_is_an_entry_point_and_gets_the_setting(tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(P13 / "engine.py", alone / "engine.py")
    (alone / "pyproject.toml").write_text('[tool.perflint]\ntarget-torch = "2.4"\n')
    run("fix", "--unsafe-fixes", "--no-cache", "--select", "PF406", str(alone))
    assert "torch.backends.cudnn.benchmark = True" in (alone / "engine.py").read_text()


def test_settings_and_loss_scaling_made_elsewhere_silence_the_module(tmp_path):
    root = _copy(P12, tmp_path)
    r = run("check", "--no-cache", "--select", "PF403,PF404,PF405,PF406", str(root))
    assert r.exit_code == 0, r.output
    # Without main.py (which sets cudnn.benchmark) and amp_optim.py (the GradScaler), the
    # same engine.py is reported.
    (root / "main.py").unlink()
    (root / "amp_optim.py").unlink()
    r = run("check", "--no-cache", "--select", "PF404,PF406", "--output-format", "concise", str(root))
    assert "PF406" in r.output and "PF404" in r.output, r.output


P14 = FIXTURES / "projects" / "p14_cuda_extension_ops"


def test_no_bf16_rewrite_over_the_projects_own_cuda_ops(tmp_path):
    root = _copy(P14, tmp_path)
    before = (root / "train.py").read_text()
    r = run("fix", "--unsafe-fixes", "--no-cache", "--select", "PF403", str(root))
    assert r.exit_code == 1, r.output  # reported, not rewritten
    assert (root / "train.py").read_text() == before
    # Without the extension module in view, the same step gets the bf16 rewrite.
    shutil.rmtree(root / "op")
    (root / "train.py").write_text(before.replace("from op import fused_leaky_relu\n", "from op_lib import fused_leaky_relu\n"))
    run("fix", "--unsafe-fixes", "--no-cache", "--select", "PF403", str(root))
    assert "torch.autocast(" in (root / "train.py").read_text()


def test_the_library_modules_message_points_at_the_entry_point(tmp_path):
    root = _copy(P13, tmp_path)
    r = run("check", "--no-cache", "--select", "PF406", "--output-format", "concise", str(root))
    assert "in the script that runs training" in r.output and "after the imports" not in r.output, r.output
