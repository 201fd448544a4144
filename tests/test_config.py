"""`[tool.perflint]`: where it is found, every key, broken configurations, target torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from cli_support import AMP, LOADER, run, write
from perflint.config import Resolver, torch_lower_bound


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def findings(*args: str) -> list[tuple[str, str]]:
    """(path relative to cwd, code) of every finding, sorted."""
    import os

    r = run("check", "--no-cache", "--output-format", "json", *args)
    assert r.exit_code in (0, 1), r.output
    return sorted((os.path.relpath(d["filename"]), d["code"]) for d in json.loads(r.stdout))


# ---------------------------------------------------------------------------------------
# Which configuration governs a file
# ---------------------------------------------------------------------------------------


def test_nearest_pyproject_with_a_perflint_table_wins(root):
    write(root, {
        "pyproject.toml": '[tool.perflint]\nselect = ["PF402"]\n',
        "a.py": AMP + LOADER,
        "sub/pyproject.toml": '[tool.perflint]\nselect = ["PF101"]\n',
        "sub/b.py": AMP + LOADER,
        "sub/deeper/c.py": AMP + LOADER,
        # A pyproject.toml without [tool.perflint] does not stop the search (as in ruff).
        "other/pyproject.toml": '[project]\nname = "other"\n',
        "other/d.py": AMP + LOADER,
    })
    assert findings() == [
        ("a.py", "PF402"), ("other/d.py", "PF402"), ("sub/b.py", "PF101"), ("sub/deeper/c.py", "PF101"),
    ]
    # The same when the files are named one by one, from anywhere.
    assert findings("sub/deeper/c.py", "a.py") == [("a.py", "PF402"), ("sub/deeper/c.py", "PF101")]


def test_select_ignore_extend_select(root):
    write(root, {"a.py": AMP + LOADER, "pyproject.toml": '[tool.perflint]\nignore = ["PF4"]\n'})
    assert ("a.py", "PF402") not in findings()
    assert ("a.py", "PF101") in findings()
    write(root, {"pyproject.toml": '[tool.perflint]\nselect = ["PF101"]\nextend-select = ["PF402"]\n'})
    assert findings() == [("a.py", "PF101"), ("a.py", "PF402")]
    # The command line's --select starts afresh; its --ignore adds to the configured one.
    assert findings("--select", "PF402") == [("a.py", "PF402")]
    assert findings("--ignore", "PF101") == [("a.py", "PF402")]


def test_per_file_ignores(root):
    write(root, {
        "pyproject.toml": """
            [tool.perflint]
            select = ["PF402", "PF101"]
            lint-tests = true  # (tests/ holds test code: without this, only error rules there)
            [tool.perflint.per-file-ignores]
            "tests/*" = ["PF4"]
            "__init__.py" = ["PF101"]
            "{scripts,tools}/*.py" = ["PF402", "PF101"]
        """,
        "tests/t.py": AMP + LOADER,
        "pkg/__init__.py": AMP + LOADER,
        "scripts/s.py": AMP + LOADER,
        "tools/u.py": AMP + LOADER,
        "pkg/m.py": AMP + LOADER,
    })
    assert findings() == [
        ("pkg/__init__.py", "PF402"), ("pkg/m.py", "PF101"), ("pkg/m.py", "PF402"), ("tests/t.py", "PF101"),
    ]


def test_per_file_ignores_match_as_excludes_do(root):
    """One glob language for excludes and per-file-ignores (pathspec): `*` stays within a
    folder, `**` crosses folders, a bare name matches at any depth, `dir/` all below it."""
    from perflint.config import Settings
    from perflint.selection import ignored_for_path

    def ignored(pattern: str, path: str) -> bool:
        return "PF101" in ignored_for_path(Settings(per_file_ignores=((pattern, ("PF101",)),)), path)

    assert ignored("tests/*", "tests/t.py") and ignored("tests/*", "tests/unit/t.py")  # the folder matches
    assert ignored("src/*.py", "src/a.py") and not ignored("src/*.py", "src/a/b.py")  # fnmatch's * crossed "/"
    assert ignored("tests/**", "tests/unit/t.py") and ignored("tests/", "tests/unit/t.py")
    assert ignored("**/scripts/*.py", "a/b/scripts/s.py") and not ignored("**/scripts/*.py", "a/scripts/x/s.py")
    assert ignored("__init__.py", "pkg/sub/__init__.py") and not ignored("__init__.py", "pkg/init.py")
    assert ignored("{tests,docs}/", "docs/conf.py") and not ignored("{tests,docs}/", "src/docs.py")
    assert ignored("./scripts/*.py", "scripts/s.py")


def test_exclude_and_extend_exclude(root):
    write(root, {
        "pyproject.toml": '[tool.perflint]\nextend-select = ["PF402"]\nextend-exclude = ["gen/", "*_pb2.py"]\n',
        "a.py": AMP, "gen/b.py": AMP, "x_pb2.py": AMP, "build/c.py": AMP,
    })
    assert findings() == [("a.py", "PF402")]  # build/ is a default exclude
    write(root, {"pyproject.toml": '[tool.perflint]\nextend-select = ["PF402"]\nexclude = ["gen"]\n'})
    # `exclude` replaces the defaults: build/ is checked again.
    assert findings() == [("a.py", "PF402"), ("build/c.py", "PF402"), ("x_pb2.py", "PF402")]
    # A file named on the command line is checked even when excluded...
    assert findings("gen/b.py") == [("gen/b.py", "PF402")]
    # ... unless --force-exclude.
    assert findings("gen/b.py", "--force-exclude") == []


def test_respect_gitignore_false(root):
    write(root, {"pyproject.toml": '[tool.perflint]\nextend-select = ["PF402"]\n', ".gitignore": "ignored.py\n",
                 "ignored.py": AMP})
    assert findings() == []
    write(root, {"pyproject.toml": '[tool.perflint]\nextend-select = ["PF402"]\nrespect-gitignore = false\n'})
    assert findings() == [("ignored.py", "PF402")]


def test_fixable_and_unfixable(root):
    write(root, {"a.py": AMP, "pyproject.toml": '[tool.perflint]\nunfixable = ["PF402"]\n'})
    r = run("fix", "--select", "PF402")
    assert r.exit_code == 1
    assert (root / "a.py").read_text() == AMP
    write(root, {"pyproject.toml": '[tool.perflint]\nfixable = ["PF1"]\n'})
    run("fix", "--select", "PF402")
    assert (root / "a.py").read_text() == AMP
    write(root, {"pyproject.toml": '[tool.perflint]\nfixable = ["PF4"]\n'})
    assert run("fix", "--select", "PF402").exit_code == 0
    assert (root / "a.py").read_text() != AMP


def test_explicit_config_file(root):
    write(root, {
        "pyproject.toml": '[tool.perflint]\nselect = ["PF101"]\n',
        "a.py": AMP + LOADER,
        "ci/perflint.toml": 'select = ["PF402"]\n',
        "ci/pyproject.toml": '[tool.perflint]\nselect = ["PF402", "PF101"]\n',
    })
    assert findings() == [("a.py", "PF101")]
    assert findings("a.py", "--config", "ci/perflint.toml") == [("a.py", "PF402")]
    assert findings("a.py", "--config", "ci/pyproject.toml") == [("a.py", "PF101"), ("a.py", "PF402")]
    r = run("check", "a.py", "--config", "ci/missing.toml")
    assert r.exit_code == 2 and "ci/missing.toml" in r.stderr and "not found" in r.stderr


# ---------------------------------------------------------------------------------------
# Broken configurations
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "toml, key, cause",
    [
        ('[tool.perflint\nselect = ["PF1"]\n', None, "invalid TOML"),
        ('[tool.perflint]\nselect = ["PF1"\n', None, "invalid TOML"),
        ('[tool.perflint]\nselct = ["PF1"]\n', "selct", "did you mean `select`"),
        ('[tool.perflint]\nselect = "PF1"\n', "select", "must be a list of rule codes, got a string"),
        ('[tool.perflint]\nselect = [1]\n', "select", "must be a list of rule codes"),
        ('[tool.perflint]\nselect = ["PF999"]\n', "select", "unknown rule code or prefix `PF999`"),
        ('[tool.perflint]\nignore = ["E501"]\n', "ignore", "unknown rule selector `E501`"),
        ('[tool.perflint]\nunsafe-fixes = "yes"\n', "unsafe-fixes", "must be true or false"),
        ('[tool.perflint]\ntarget-torch = 2.4\n', "target-torch", "must be a string"),
        ('[tool.perflint]\ntarget-torch = "latest"\n', "target-torch", "must be a torch version"),
        ('[tool.perflint]\nexclude = "build"\n', "exclude", "must be a list of glob patterns"),
        ('[tool.perflint.per-file-ignores]\n"a.py" = "PF1"\n', "per-file-ignores", "must be a list of rule codes"),
        ('[tool.perflint.per-file-ignores]\n"a.py" = ["PF0"]\n', "per-file-ignores", "unknown rule code or prefix"),
        ('[tool]\nperflint = 3\n', None, "must be a table"),
    ],
)
def test_broken_config_is_one_line_naming_file_and_key(root, toml, key, cause):
    write(root, {
        "good/pyproject.toml": "[tool.perflint]\n", "good/a.py": AMP,
        "bad/pyproject.toml": toml, "bad/b.py": AMP,
    })
    r = run("check", "--extend-select", "PF402", "--no-cache", "--output-format", "concise")
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("error: bad/pyproject.toml: ")
    if key is not None:
        assert f"`{key}`" in line
    assert cause in line
    # Files under other configurations are still checked and reported.
    assert "good/a.py:3:10: PF402" in r.stdout
    assert "b.py" not in r.stdout


def test_a_broken_config_is_reported_once_for_many_files(root):
    write(root, {"pyproject.toml": "[tool.perflint]\nbogus = 1\n", **{f"m{i}.py": AMP for i in range(5)}})
    r = run("check", "--no-cache")
    assert r.exit_code == 2
    assert r.stderr.count("bogus") == 1


def test_the_error_is_the_same_through_the_resolver(tmp_path):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\nselect = 3\n", "a.py": ""})
    from perflint.config import ConfigError

    with pytest.raises(ConfigError) as exc:
        Resolver().for_path(tmp_path / "a.py")
    assert exc.value.path == str(tmp_path / "pyproject.toml")
    assert "`select`" in str(exc.value)


# ---------------------------------------------------------------------------------------
# Target torch version
# ---------------------------------------------------------------------------------------


def _pf402(root: Path, *args: str) -> bool:
    return ("a.py", "PF402") in findings("--select", "PF402", *args)


@pytest.mark.parametrize(
    "files, fires",
    [
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n'}, False),
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.5"]\n'}, True),
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["numpy", "torch~=2.3.1"]\n'}, False),
        ({"pyproject.toml": '[project]\nname = "p"\n[project.optional-dependencies]\ngpu = ["torch==2.4.*"]\n'}, True),
        ({"pyproject.toml": '[tool.poetry.dependencies]\ntorch = "^2.2"\n'}, False),
        ({"pyproject.toml": '[project]\nname = "p"\n', "requirements.txt": "numpy\ntorch>=2.0  # old\n"}, False),
        ({"pyproject.toml": '[project]\nname = "p"\n', "requirements-gpu.txt": "torch==2.6.0+cu124\n"}, True),
        ({"requirements.txt": "-r base.txt\n", "base.txt": "torch >= 1.13, < 3\n"}, False),
        ({"requirements.txt": "torch==2.1.0 \\\n    --hash=sha256:abcdef\n"}, False),
        # setup.py / setup.cfg, a conda environment, requirements one folder down.
        ({"setup.py": 'setup(name="p", install_requires=["numpy", "torch>=1.8"])\n'}, False),
        ({"setup.py": 'setup(name="p", install_requires=["torch >= 2.5.0"])\n'}, True),
        ({"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    torch>=2.1,<3\n"}, False),
        ({"environment.yml": "dependencies:\n  - python=3.8\n  - pytorch::pytorch=1.12.1\n"}, False),
        ({"environment.yml": "dependencies:\n  - pip:\n    - torch==2.6.0\n"}, True),
        # One environment file per machine kind: the lowest torch of them all.
        ({"environment_gpu.yml": "dependencies:\n  - pytorch=1.6.0\n",
          "environment_cpu.yml": "dependencies:\n  - pytorch=2.6.0\n"}, False),
        ({"environment_gpu.yml": "dependencies:\n  - pytorch=2.5.1\n"}, True),
        ({"installation/requirements.txt": "torch==1.4.0\n"}, False),
        # Replicate's cog.yaml: the pip packages of the image it builds.
        ({"cog.yaml": 'build:\n  python_packages:\n    - "torchvision==0.11.1"\n    - "torch==1.10.0"\n'}, False),
        ({"cog.yaml": 'build:\n  python_packages:\n    - "torch==2.5.1"\n'}, True),
        # A cog.yaml builds a demo's prediction image: the README's older torch is training's.
        ({"cog.yaml": 'build:\n  python_packages:\n    - "torch==2.5.1"\n', "README.md": "Requirements:\n* pytorch 1.8.0\n"},
         False),
        ({"cog.yaml": 'build:\n  python_packages:\n    - "torch==2.5.1"\n', "README.md": "Requirements:\n* pytorch 2.6\n"},
         True),
        # Nothing machine-readable: the lowest torch the README, install notes or Dockerfiles name.
        ({"README.md": "## Setup\n\n1. Install PyTorch 1.13 or later\n"}, False),
        ({"INSTALL.md": "Requirements\n- Python >= 3.8\n- PyTorch >= 1.3\n"}, False),
        ({"README.md": "```bash\npip install torch==1.7.1\n```\n"}, False),
        ({"Dockerfile": "FROM pytorch/pytorch:1.7.0-cuda11.0-cudnn8-runtime\nRUN pip install -e .\n"}, False),
        ({"docker/Dockerfile": "FROM ubuntu:22.04\nRUN pip3 install numpy torch==2.5.1\n"}, True),
        ({"README.md": "Tested with PyTorch 2.5 or newer; see `torch >= 2.6` for compile.\n"}, True),
        ({"README.md": "Uses pytorch-lightning 1.4 and python 3.8.\n"}, True),  # no torch version named
        # A requirements list item, and the version the code was developed for.
        ({"README.md": "### Requirements\n* Python 3.8 (or newer)\n* PyTorch 2.0\n* torchvision\n"}, False),
        ({"README.md": "Requirements:\n- **PyTorch**: 1.10\n"}, False),
        ({"README.md": "The code has been developed for PyTorch version 1.8.1 and torchvision 0.9.1.\n"}, False),
        ({"README.md": "It is tested with pytorch-1.0.\n"}, False),
        ({"README.md": "It is tested with pytorch-2.5.\n"}, True),
        ({"README.md": "- PyTorch Lightning 1.4\n- Transformers 4.2\n"}, True),
        ({"README.md": "* PyTorch 2.5 or later\n"}, True),
        ({"README.md": "## Requirements\n1. PyTorch (>= 0.4.1): see pytorch.org\n"}, False),
        ({"README.md": "* numpy\n* PyTorch ( == 0.4.1, for <= 0.4.0 see branch [old](https://example.org))\n"}, False),
        ({"README.md": "* PyTorch ( == 2.5.1 )\n"}, True),
        ({"README.md": "Update: this repository is compatible with PyTorch 0.4.1/1.0 now!\n"}, False),
        ({"README.md": "1. PyTorch 1.8\n2. torchvision\n"}, False),
        ({"README.md": "1. Python 3.8 (>= 3.6)\n2. numpy (>= 1.20)\n"}, True),
        # The README spelled in lower case, a name behind a Markdown link, an environment
        # listed on one line; a version in prose bounds nothing.
        ({"readme.md": "```\npip install torch==1.4.0\n```\n"}, False),
        ({"README.md": "* [PyTorch](https://pytorch.org/) >= 1.9.0\n"}, False),
        ({"README.md": "Python 3.6.5, Pytorch 1.1.0, Numpy 1.16.3, argparse\n"}, False),
        ({"README.md": "Developed with python version 3.6, PyTorch version 1.7.1, CUDA 11.0 and torchvision.\n"},
         False),
        ({"README.md": "Python version 3.8, PyTorch version 2.5.1, CUDA 12.1.\n"}, True),
        ({"README.md": "* 64-bit Python 3.7 and PyTorch 1.7.1. See pytorch.org for install instructions.\n"}, False),
        ({"README.md": "Needs Python 3.10 and PyTorch 2.5 (CUDA 12).\n"}, True),
        # The last item of such a list, ending the sentence; an install step naming a version.
        ({"README.md": "Settings: 8 NVIDIA V100 GPUs, CUDA 10.1/CuDNN 7.6.5, PyTorch 1.7.0.\n"}, False),
        ({"README.md": "Settings: 8 NVIDIA A100 GPUs, CUDA 12.1, PyTorch 2.5.1.\n"}, True),
        ({"README.md": "The code has been tested with CUDA 10.2/CuDNN 7.6.5, PyTorch 1.9.0 and timm 0.4.9.\n"},
         False),
        ({"README.md": "Tested with CUDA 12.1, PyTorch 2.5.1 and timm 1.0.\n"}, True),
        ({"README.md": "5. Clone this repo\n6. Install [PyTorch 1.0]\n\n[pytorch 1.0]: https://pytorch.org\n"}, False),
        ({"README.md": "Install PyTorch 2.5 with CUDA 12.\n"}, True),
        # A list item naming the version behind a link and "install"; the author's own setup.
        ({"README.md": "- Python 3.6\n- [PyTorch](http://pytorch.org) install = 1.4.0\n- torchvision\n"}, False),
        ({"README.md": "- [PyTorch](http://pytorch.org) install = 2.5.1\n"}, True),
        ({"README.md": "I'm using `PyTorch 0.4` in `Python 3.6`.\n"}, False),
        ({"README.md": "This requires PyTorch 1.2 and CUDA 10.\n"}, False),
        ({"README.md": "We are using PyTorch 2.5 with bf16.\n"}, True),
        # Install notes in a `readme/` folder; the setup it was tested on, with the version after
        # a Markdown link; a project that runs on an older torch at most.
        ({"readme/INSTALL.md": "The code was tested on Ubuntu 16.04, with Python 3.6, CUDA 10.0, and "
                               "[PyTorch]((http://pytorch.org/)) v1.0.\n"}, False),
        ({"readme/INSTALL.md": "Tested on Ubuntu 22.04 with Python 3.11 and PyTorch 2.5.\n"}, True),
        ({"INSTALL.md": "It should be compatible with PyTorch <=1.4 and python >=3.6.\n"}, False),
        ({"README.md": "My environment is pytorch1.0 and python3.\n"}, False),
        ({"README.md": "Wheels: https://example.org/cu113/torch1.10/index.html and pytorch2.5.html\n"}, True),
        # The main requirements file asks for any torch: a variant's pins (an ONNX export's
        # `requirements_onnx_encoder.txt`) do not bound the project; with no torch in the main
        # file, a variant's bound counts.
        ({"requirements.txt": "torch\ntorchaudio\n", "requirements_onnx_encoder.txt": "torch==1.13.1\n"}, True),
        ({"requirements.txt": "numpy\n", "requirements_gpu.txt": "torch==1.13.1\n"}, False),
        # A requirements list item whose link text holds the version (Self-Attention-GAN).
        ({"README.md": "## Prerequisites\n* [Python 3.5+](https://www.continuum.io/downloads)\n"
                       "* [PyTorch 0.3.0](http://pytorch.org/)\n"}, False),
        # "- a PyTorch install version 0.1.8" (DeepCluster's requirements list).
        ({"README.md": "## Requirements\n- a Python installation version 2.7\n"
                       "- a PyTorch install version 0.1.8 ([pytorch.org](http://pytorch.org))\n"}, False),
        # A readme's environment line (Efficient-AI-Backbones' versatile_filters).
        ({"readme.md": "Platform: Pytorch 0.4\n"}, False),
        # The environment as the interpreter prints it (Adan's Transformer-XL notes).
        ({"README.md": "```python\ntorch.__version__  = '1.1.0'\n```\n"}, False),
        # A conda command with no torch version installs the newest build for its CUDA
        # (1.7.1 for cudatoolkit 10.1); a CUDA the table does not know bounds nothing.
        ({"README.md": "conda install pytorch torchvision cudatoolkit=10.1 -c pytorch\n"}, False),
        ({"README.md": "conda install pytorch torchvision cudatoolkit=11.8 -c pytorch\n"}, True),
        # Install notes kept as a getting-started page.
        ({"get_started.md": "- Install `PyTorch>=1.8.0` and `torchvision>=0.9.0` with `CUDA>=10.2`\n"}, False),
        ({"docs/GETTING_STARTED.md": "conda install pytorch==1.10.0 -c pytorch\n"}, False),
        ({"README.md": "PyTorch 2.0 introduced torch.compile, which we use.\n"}, True),
        # A declared requirement wins over what the README says.
        ({"requirements.txt": "torch>=2.5\n", "README.md": "Install PyTorch 1.13 or later\n"}, True),
        # No lower bound anywhere: 2.4.
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch<3"]\n'}, True),
        ({}, True),
        # target-torch in the configuration wins over the requirement.
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n'
                            '[tool.perflint]\ntarget-torch = "2.6"\n'}, True),
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.5"]\n'
                            '[tool.perflint]\ntarget-torch = "2.0"\n'}, False),
    ],
)
def test_target_torch_from_config_or_requirement_never_the_installed_torch(root, files, fires):
    write(root, {"a.py": AMP, **files})
    if "pyproject.toml" not in files:
        # Stop the search for a configuration here, without declaring anything.
        write(root, {"pyproject.toml": "[tool.perflint]\n"})
    assert _pf402(root) is fires


def test_a_folder_whose_readme_names_an_older_torch_targets_it(root):
    """`old/` kept beside the current code, with its own README: its files target the torch
    it names; a folder naming a newer torch does not raise the project's target."""
    write(root, {"pyproject.toml": '[tool.perflint]\n', "requirements.txt": "torch>=2.5\n", "a.py": AMP,
                 "old/README.md": "Tested with PyTorch 1.3 or later.\n", "old/a.py": AMP, "old/deep/a.py": AMP,
                 "new/README.md": "* PyTorch 2.6\n", "new/a.py": AMP})
    got = {f for f, code in findings("--select", "PF402") if code == "PF402"}
    assert got == {"a.py", "new/a.py"}
    # A target the configuration sets is the user's word: no folder lowers it.
    write(root, {"pyproject.toml": '[tool.perflint]\ntarget-torch = "2.5"\n'})
    assert {f for f, code in findings("--select", "PF402") if code == "PF402"} == {"a.py", "new/a.py", "old/a.py",
                                                                                    "old/deep/a.py"}


def test_target_torch_flag_wins_over_everything(root):
    write(root, {"a.py": AMP, "pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n'
                                                 '[tool.perflint]\ntarget-torch = "2.0"\n'})
    assert not _pf402(root)
    assert _pf402(root, "--target-torch", "2.5")


def test_a_subproject_requirement_applies_to_its_files(root):
    write(root, {
        "pyproject.toml": '[tool.perflint]\nselect = ["PF402"]\n',
        "new/pyproject.toml": '[project]\nname = "new"\ndependencies = ["torch>=2.5"]\n',
        "new/a.py": AMP,
        "old/pyproject.toml": '[project]\nname = "old"\ndependencies = ["torch>=2.1"]\n',
        "old/a.py": AMP,
    })
    assert findings() == [("new/a.py", "PF402")]


def test_a_repository_of_several_projects_gives_each_its_own_requirement(tmp_path):
    """Cream's layout: a `.git` root holding projects side by side, each with its own
    requirements (one of them in a file named `requirements`, no extension). A project's
    files target its own torch; a project with none does not take a sibling's, which a
    requirements file one folder down would otherwise give the whole repository."""
    write(tmp_path, {
        ".git/HEAD": "ref: refs/heads/main\n",
        "AutoFormer/requirements.txt": "torch==1.7.0\n", "AutoFormer/train.py": "",
        "CDARTS/requirements": "graphviz\ntorch==1.2\n", "CDARTS/lib/core/search.py": "",
        "MiniViT/Mini-Swin/main.py": "",
        "docker/requirements.txt": "torch==1.9.0\n",
    })
    r = Resolver()
    assert r.for_path(tmp_path / "AutoFormer" / "train.py").effective_target() == (1, 7)
    got = r.for_path(tmp_path / "CDARTS" / "lib" / "core" / "search.py")
    assert got.effective_target() == (1, 2) and got.target_source.endswith("CDARTS/requirements torch requirement")
    # Install notes one folder down (a folder with no Python code) still bound the rest.
    assert r.for_path(tmp_path / "MiniViT" / "Mini-Swin" / "main.py").effective_target() == (1, 9)


def test_resolver_reports_where_the_target_came_from(tmp_path):
    write(tmp_path, {"pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.2"]\n', "a.py": ""})
    s = Resolver().for_path(tmp_path / "a.py")
    assert s.effective_target() == (2, 2)
    assert "pyproject.toml" in s.target_source


# ---------------------------------------------------------------------------------------
# Requirement lower bounds (property tests)
# ---------------------------------------------------------------------------------------

versions = st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 9))
spaces = st.sampled_from(["", " ", "  "])


def _v(t, parts=3):
    return ".".join(map(str, t[:parts]))


@settings(max_examples=150, deadline=None)
@given(lo=versions, parts=st.integers(2, 3), op=st.sampled_from([">=", "==", "~=", ">"]), sp=spaces,
       upper=st.one_of(st.none(), versions), marker=st.booleans(), comment=st.booleans(), name=st.sampled_from(["torch", "Torch", "TORCH", "pytorch"]))
def test_lower_bound_of_one_requirement(lo, parts, op, sp, upper, marker, comment, name):
    spec = f"{op}{sp}{_v(lo, parts)}"
    if upper is not None:
        spec += f",{sp}<{_v(upper)}"
    line = f"{name}{sp}{spec}"
    if marker:
        line += ' ; python_version >= "3.9"'
    if comment:
        line += "  # pinned for CUDA"
    assert torch_lower_bound([line]) == (lo[0], lo[1])


@settings(max_examples=100, deadline=None)
@given(bounds=st.lists(versions, min_size=1, max_size=4), others=st.lists(st.sampled_from(
    ["numpy>=1.0", "torchvision>=0.15", "pytorch-lightning>=2.1", "torch", "torch<3", "-e .", "--index-url https://x/y"]),
    max_size=4), data=st.data())
def test_lowest_bound_wins_and_other_packages_are_ignored(bounds, others, data):
    lines = [f"torch>={_v(b)}" for b in bounds] + others
    lines = data.draw(st.permutations(lines))
    assert torch_lower_bound(lines) == min((b[0], b[1]) for b in bounds)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="torch<>=!~.,;*# 0123456789abc\\\n-", max_size=30), max_size=5))
def test_lower_bound_never_crashes_on_junk(lines):
    out = torch_lower_bound(lines)
    assert out is None or (isinstance(out, tuple) and len(out) == 2)


def test_lower_bound_special_cases():
    assert torch_lower_bound(["pytorch==1.3.1", "torchtext==0.4.0"]) == (1, 3)  # conda's name, in requirements.txt
    # A conda export saved as requirements.txt (Unsupervised-Classification's).
    assert torch_lower_bound(["  - blas=1.0=mkl", "  - pytorch=1.4.0=py3.7_cuda10.0.130_cudnn7.6.3_0"]) == (1, 4)
    assert torch_lower_bound(["-r base.txt", "-e git+https://example.org/torch-thing#egg=x"]) is None
    assert torch_lower_bound(["pytorch-lightning>=2.1"]) is None
    assert torch_lower_bound(["torch==2.*"]) == (2, 0)
    assert torch_lower_bound(["torch==2.10.*"]) == (2, 10)
    assert torch_lower_bound(["torch>=2.5.0rc1"]) == (2, 5)
    assert torch_lower_bound(["torch"]) is None
    assert torch_lower_bound(["torch!=2.1,<2.6"]) is None
    assert torch_lower_bound(["torchvision>=0.20"]) is None
    assert torch_lower_bound(["torch>=2.1 --hash=sha256:00"]) == (2, 1)
    assert torch_lower_bound(["torch>=2.3 \\", "  --hash=sha256:00"]) == (2, 3)
    assert torch_lower_bound(["# torch>=2.9", "torch>=2.2"]) == (2, 2)


def test_show_settings_names_the_target_torch_and_its_source(root):
    write(root, {"a.py": AMP, "pyproject.toml": '[tool.perflint]\nignore = ["PF101"]\n',
                 "README.md": "Install PyTorch 1.13 or later.\n"})
    r = run("check", "--show-settings", "a.py")
    assert r.exit_code == 0
    out = r.stdout
    assert out.startswith("Settings for a.py:\n")
    assert "  target torch: 1.13 (from " in out and "README.md (the torch version it names))" in out
    assert "pyproject.toml" in out.splitlines()[1]
    rules = next(line for line in out.splitlines() if line.startswith("  rules: "))
    assert "PF104" in rules and "PF101" not in rules and "PF102" not in rules  # PF102: off by default
    r = run("check", "--show-settings", "--target-torch", "2.6", ".")
    assert "  target torch: 2.6 (from --target-torch)" in r.stdout
    write(root, {"pyproject.toml": "[tool.perflint]\nselect = 3\n"})
    r = run("check", "--show-settings", "a.py")
    assert r.exit_code == 2 and "pyproject.toml" in r.stderr


LEGACY_TRAIN = """\
import torch
from torch.autograd import Variable
from torch.utils.data import DataLoader

loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)
for epoch in range(100):
    for x, y in loader:
        x = Variable(x.cuda(non_blocking=True))
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    "extra, fires",
    [
        ({}, True),
        # Written for torch 0.3: no `persistent_workers` (torch 1.7) advice.
        ({"models/net.py": "def evaluate(x):\n    return net(Variable(x, volatile=True))\n"}, False),
        ({"log.py": "def show(loss):\n    print(loss.data[0])\n"}, False),
        # … unless some file shows torch 0.4 or later.
        ({"models/net.py": "def evaluate(x):\n    return net(Variable(x, volatile=True))\n",
          "log.py": "def show(loss):\n    print(loss.item())\n"}, True),
        # `.data[0]` of a batch is no sign of anything.
        ({"show.py": "def first(images):\n    return images.data[0]\n"}, True),
        # A declared requirement wins.
        ({"models/net.py": "y = net(Variable(x, volatile=True))\n", "requirements.txt": "torch>=2.0\n"}, True),
        # A C extension built with `torch.utils.ffi` (gone in 1.0): 0.4 at most, `.item()` or not.
        ({"ops/dcn/build.py": "from torch.utils.ffi import create_extension\nffi = create_extension('dcn')\n",
          "log.py": "def show(loss):\n    print(loss.item())\n"}, False),
        ({"ops/dcn/notes.py": "# from torch.utils.ffi import create_extension\n"}, True),
    ],
)
def test_code_written_for_torch_0_3_gets_no_advice_for_later_torch(root, extra, fires):
    write(root, {"pyproject.toml": "[tool.perflint]\n", "train.py": LEGACY_TRAIN, **extra})
    assert (("train.py", "PF103") in findings("--select", "PF103")) is fires


@pytest.mark.parametrize("declared", [
    {"setup.py": "from setuptools import setup\nsetup(name='lib', install_requires=['torch>=2.6'])\n"},
    {"pyproject.toml": '[project]\nname = "lib"\ndependencies = ["torch>=2.6"]\n'},
])
def test_a_folder_readme_does_not_lower_the_package_requirement(root, declared):
    """diffusers' `examples/community/README.md` installs torch 1.10.1 for one pipeline; the
    scripts beside it import the package, which declares torch>=2.6: they target 2.6."""
    write(root, {**declared, "a.py": AMP, "examples/community/README.md": "conda install pytorch==1.10.1\n",
                 "examples/community/a.py": AMP})
    assert {f for f, code in findings("--select", "PF402") if code == "PF402"} == {"a.py", "examples/community/a.py"}
