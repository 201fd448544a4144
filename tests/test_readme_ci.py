"""The README's first screen holds the install and test commands, and CI runs exactly those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block, "README has no bash block"
    assert first_block.start() < 1500, "the commands must be on the README's first screen"
    return [line for line in first_block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_has_an_install_and_a_test_command():
    install, test = readme_commands()
    assert "pip install torch==2.13.0" in install and "perflint check" in install
    assert "pytest" in test


def test_ci_runs_the_readme_commands_verbatim_after_pinning_torch():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    install, test = readme_commands()
    assert install in ci and test in ci
    pin = next(i for i, line in enumerate(ci) if "install -q torch==2.13.0" in line)
    assert pin < ci.index(install) < ci.index(test)


def test_project_torch_requirement_is_a_range_that_213_satisfies():
    from packaging.requirements import Requirement

    text = (ROOT / "pyproject.toml").read_text()
    specs = re.findall(r'"(torch[<>=!~][^"]*)"', text)
    assert specs, "no torch requirement found"
    for spec in specs:
        req = Requirement(spec)
        assert req.specifier.contains("2.13.0"), spec
        assert not str(req.specifier).startswith("=="), "pin torch only in .ci/run, not in the project"


def test_readme_configuration_example_is_accepted(tmp_path):
    from perflint.config import Resolver

    block = re.search(r"```toml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block and "[tool.perflint]" in block.group(1)
    (tmp_path / "pyproject.toml").write_text(block.group(1))
    (tmp_path / "train.py").write_text("import torch\n")
    settings = Resolver().for_path(tmp_path / "train.py")
    assert settings.effective_target() == (2, 4) and settings.lint_tests is False
    assert "PF201" in dict(settings.per_file_ignores)["scripts/*.py"]
