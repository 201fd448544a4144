"""The project layer: roots, module resolution as Python does it for each layout, summaries,
cross-module kinds and per-step helpers, and the cache's dependence on other files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cli_support import cold_then_warm, run, write
from perflint.analysis.project import ProjectIndex, find_root

TRAIN = """\
import torch
from metrics import accuracy
from data import get_dataloader

device = torch.device("cuda")
model = torch.nn.Linear(8, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = get_dataloader()
for epoch in range(2):
    for x, y in loader:
        out = model(x.to(device, non_blocking=True))
        loss = torch.nn.functional.cross_entropy(out, y.to(device, non_blocking=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = accuracy(out, y)
"""
METRICS = """\
def accuracy(out, y):
    return (out.argmax(1) == y).float().mean().item()
"""
DATA = """\
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i


def get_dataloader():
    return DataLoader(Items(), batch_size=4, num_workers=2, persistent_workers=True, pin_memory=True)
"""


def findings(result) -> list[tuple[str, int, str]]:
    return sorted((Path(d["filename"]).name, d["location"]["row"], d["code"]) for d in json.loads(result.stdout))


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": '[tool.perflint]\nextend-select = ["PF201"]\n', "train.py": TRAIN,
                     "metrics.py": METRICS, "data.py": DATA})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_helper_called_every_step_from_another_file_is_reported_once_naming_the_caller(proj):
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF201")
    assert findings(r) == [("metrics.py", 2, "PF201")]
    msg = json.loads(r.stdout)[0]["message"]
    assert msg.endswith("(runs once per step: called from train.py:16)")
    # The same finding when only the helper's file is checked: its project is still read.
    single = run("check", "metrics.py", "--no-cache", "--output-format", "json", "--select", "PF201")
    assert findings(single) == [("metrics.py", 2, "PF201")]


def test_without_the_caller_the_helper_is_silent_and_the_cache_notices_the_change(proj):
    assert findings(run("check", "metrics.py", "--output-format", "json", "--select", "PF201"))
    (proj / "train.py").write_text(TRAIN.replace("        acc = accuracy(out, y)\n", ""))
    assert findings(run("check", "metrics.py", "--output-format", "json", "--select", "PF201")) == []
    (proj / "train.py").write_text(TRAIN)
    assert findings(run("check", "metrics.py", "--output-format", "json", "--select", "PF201")) == [
        ("metrics.py", 2, "PF201")]


def test_a_loader_from_a_project_factory_gives_batches(proj):
    (proj / "train.py").write_text(TRAIN.replace("x.to(device, non_blocking=True)", "x.to(device)"))
    r = run("check", "train.py", "--no-cache", "--output-format", "json", "--select", "PF105")
    assert findings(r) == [("train.py", 11, "PF105")]


def test_an_imported_conv_model_makes_a_conv_net(tmp_path, monkeypatch):
    write(tmp_path, {
        "setup.py": "",
        "models/__init__.py": "from .net import *\n",
        "models/net.py": "import torch.nn as nn\n\n__all__ = ['Net']\n\n\nclass Net(nn.Module):\n"
                         "    def __init__(self):\n        super().__init__()\n        self.c = nn.Conv2d(3, 8, 3)\n",
        "main.py": "import torch\nfrom models import Net\n\nmodel = Net().cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                   "for x in range(3):\n    loss = model(torch.randn(1, 3, 8, 8, device='cuda')).sum()\n"
                   "    loss.backward()\n    opt.step()\n",
    })
    monkeypatch.chdir(tmp_path)
    r = run("check", "main.py", "--no-cache", "--output-format", "json", "--select", "PF406")
    assert [f[2] for f in findings(r)] == ["PF406"]
    # Without the project (the model file gone), nothing says the model has convolutions.
    (tmp_path / "models" / "net.py").write_text("import torch.nn as nn\n\n\nclass Net(nn.Module):\n    pass\n")
    assert findings(run("check", "main.py", "--no-cache", "--output-format", "json", "--select", "PF406")) == []


def test_module_resolution_follows_the_layout(tmp_path):
    files = {
        "pkg/src/lib/__init__.py": "",
        "pkg/src/lib/util.py": "",
        "pkg/scripts/train.py": "",
        "pkg/scripts/helpers.py": "",
        "pkg/lib2/__init__.py": "from .mod import thing\n",
        "pkg/lib2/mod.py": "",
    }
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(files[rel])
    (tmp_path / "pkg" / "pyproject.toml").write_text("")
    root = find_root(tmp_path / "pkg" / "scripts" / "train.py")
    assert root == (tmp_path / "pkg").absolute()
    p = lambda rel: str((tmp_path / rel).absolute())  # noqa: E731
    summaries = {p(r): {"classes": {}, "functions": {}, "imports": {}, "relative": {}} for r in files}
    summaries[p("pkg/lib2/mod.py")]["functions"] = {"thing": {"returns": ["dataloader"]}}
    summaries[p("pkg/lib2/__init__.py")]["relative"] = {"thing": ".mod.thing"}
    summaries[p("pkg/src/lib/util.py")]["functions"] = {"f": {}}
    summaries[p("pkg/scripts/helpers.py")]["functions"] = {"g": {}}
    index = ProjectIndex(root, summaries)
    train = p("pkg/scripts/train.py")
    assert index.resolve(train, "helpers.g") == (p("pkg/scripts/helpers.py"), "g")  # the script's own folder
    assert index.resolve(train, "lib.util.f") == (p("pkg/src/lib/util.py"), "f")  # a src/ layout
    assert index.resolve(train, "lib2.thing") == (p("pkg/lib2/mod.py"), "thing")  # re-exported by __init__
    assert index.result_kinds(index.resolve(train, "lib2.thing")) == {"dataloader"}
    assert index.resolve(p("pkg/lib2/__init__.py"), ".mod.thing") == (p("pkg/lib2/mod.py"), "thing")  # relative
    assert index.resolve(train, "lib2.missing") is None  # not defined in the project: unknown
    assert index.resolve(train, "torch.nn.Linear") is None  # outside the project: unknown


def test_a_warm_project_run_does_not_import_libcst(proj):
    first, second = cold_then_warm(proj)
    assert first[-1] == "imported libcst: True"
    assert second[-1] == "imported libcst: False"
    assert first[:-1] == second[:-1] and any("metrics.py" in line for line in first[:-1])


def test_loader_options_through_kwargs_and_argparse_defaults(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "", "main.py": """\
        import argparse
        import torch
        from torch.utils.data import DataLoader

        parser = argparse.ArgumentParser()
        parser.add_argument("--workers", type=int, default=0)
        args = parser.parse_args()
        train_kwargs = {"batch_size": 64}
        cuda_kwargs = {"num_workers": 1, "pin_memory": True, "shuffle": True}
        train_kwargs.update(cuda_kwargs)
        train_loader = DataLoader(ds, **train_kwargs)
        test_loader = DataLoader(ds, batch_size=64)
        val_loader = DataLoader(ds, batch_size=64, num_workers=args.workers)
        train(train_loader, test_loader, val_loader)
        """})
    monkeypatch.chdir(tmp_path)
    r = run("check", "main.py", "--no-cache", "--output-format", "json", "--select", "PF101")
    assert findings(r) == [("main.py", 12, "PF101"), ("main.py", 13, "PF101")]


def test_loaders_unpacked_from_a_factory_reach_the_parameters_of_the_step_function(tmp_path, monkeypatch):
    data = """\
        from torch.utils.data import DataLoader


        def get_loaders(train_set, val_set):
            train_loader = DataLoader(train_set, batch_size=8, num_workers=2, pin_memory=True, persistent_workers=True)
            val_loader = DataLoader(val_set, batch_size=8, num_workers=2, pin_memory=True, persistent_workers=True)
            return train_loader, val_loader
        """
    train = """\
        import torch
        from data import get_loaders


        def fit(model, batches, opt):  # (a name with no "loader" in it: no hint from the name)
            for x, y in batches:
                x = x.cuda()
                loss = torch.nn.functional.cross_entropy(model(x), y.cuda(non_blocking=True))
                loss.backward()
                opt.step()


        def main(train_set, val_set):
            model = torch.nn.Linear(8, 2).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            train_loader, val_loader = get_loaders(train_set, val_set)
            fit(model, train_loader, opt)
        """
    write(tmp_path, {"pyproject.toml": "", "data.py": data, "train.py": train})
    monkeypatch.chdir(tmp_path)
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF105")
    assert findings(r) == [("train.py", 7, "PF105")]
    # A tuple that mixes a loader with something else (its sampler) says nothing about either.
    (tmp_path / "data.py").write_text(textwrap.dedent(data).replace("return train_loader, val_loader",
                                                                      "return train_loader, train_set"))
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF105")
    assert findings(r) == []


def test_a_warm_run_of_an_unchanged_project_asks_no_question_again(proj, monkeypatch, tmp_path_factory):
    import perflint.analysis.project as project
    from perflint import runner
    from perflint.config import Resolver

    monkeypatch.setenv("PERFLINT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    asked = []
    digest = project.answers_digest
    monkeypatch.setattr(project, "answers_digest", lambda *a, **k: asked.append(a[1]) or digest(*a, **k))
    cold = runner.run(["."], Resolver(), jobs=1)
    assert cold.cached == 0 and asked  # the answers stored with the findings
    asked.clear()
    warm = runner.run(["."], Resolver(), jobs=1)
    # The project's files and contents are those the entries were stored with: nothing to re-ask.
    assert warm.cached == 3 and asked == []
    assert [r.diagnostics for r in warm.results] == [r.diagnostics for r in cold.results]
    # Another file's content changed: the entries are checked against re-asked answers (and
    # still hold, since a comment changes no answer).
    (proj / "data.py").write_text(DATA + "# a comment\n")
    again = runner.run(["."], Resolver(), jobs=1)
    assert asked and again.cached >= 2
    assert [r.diagnostics for r in again.results] == [r.diagnostics for r in cold.results]


@pytest.mark.parametrize("line, found", [
    ("from pkg.engine import train_one_epoch", {"engine"}),
    ("from .engine import train", {"engine"}),
    ("from . import engine, utils", {"engine", "utils"}),
    ("from pkg import (engine,", {"engine"}),
    ("import pkg.engine as eng", {"engine"}),
    ("    import engine  # inside a function", {"engine"}),
    ("import engine_v2", set()),  # another module
    ("from pkg.engine_v2 import train", set()),
    ("importlib.import_module('engine')", set()),  # not an import statement
    ("from x import y; import engine", {"engine"}),  # every statement of a line is read
    ("import données", {"données"}),  # a module named in non-ASCII letters
])
def test_importers_are_the_files_whose_import_lines_name_a_target(tmp_path, line, found):
    """`projectrun.importers`: which files name a target module in their import lines (the
    files of a project to summarise besides those checked)."""
    from perflint.projectrun import ImportLines, importers

    targets = [str(tmp_path / "pkg" / "engine.py"), str(tmp_path / "pkg" / "utils" / "__init__.py"),
               str(tmp_path / "données.py")]
    user = tmp_path / "user.py"
    user.write_text("import os\n" + line + "\n", encoding="utf-8")
    got = importers({str(user)}, targets, skip=set(), lines=ImportLines(None))
    named = {Path(t).stem if Path(t).name != "__init__.py" else Path(t).parent.name for t in targets}
    assert (got == {str(user)}) == bool(found & named), line


_ORPHAN = """\
    import torch


    def train_epoch(model, optimizer, loader):
        for batch in loader:
            loss = model(batch.cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
_ENTRY = """\
    import torch


    def main():
        print(torch.__version__)


    if __name__ == "__main__":
        main()
    """


@pytest.mark.parametrize("pyproject, reported", [
    ('[tool.black]\nline-length = 100\n', False),  # a collection of scripts: the orphan never runs
    ('[project]\nname = "graphs"\nversion = "0.1"\n', True),  # a library: its users import the module
    ('[build-system]\nrequires = ["setuptools"]\n', True),
])
def test_a_module_nothing_imports_is_silent_only_where_nothing_can_install_it(tmp_path, monkeypatch, pyproject, reported):
    write(tmp_path, {"pyproject.toml": pyproject + '[tool.perflint]\ntarget-torch = "1.13"\n',
                     "main.py": _ENTRY, "leftover.py": _ORPHAN})
    monkeypatch.chdir(tmp_path)
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF301")
    assert findings(r) == ([("leftover.py", 7, "PF301")] if reported else [])


def test_a_setup_py_makes_a_library(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": '[tool.perflint]\ntarget-torch = "1.13"\n', "setup.py": "from setuptools import setup\nsetup()\n",
                     "main.py": _ENTRY, "leftover.py": _ORPHAN})
    monkeypatch.chdir(tmp_path)
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF301")
    assert findings(r) == [("leftover.py", 7, "PF301")]


@pytest.mark.parametrize("readme, reported", [
    (False, True),  # Time-Series-Library: `exp/` imports every `models/*` module by a computed name
    (True, False),  # `exp/` is a sub-project with a README of its own: its computed imports are its own
])
def test_a_computed_import_in_another_folder_may_reach_a_module(tmp_path, monkeypatch, readme, reported):
    files = {"pyproject.toml": '[tool.perflint]\ntarget-torch = "1.13"\n', "main.py": _ENTRY,
             "exp/basic.py": "import importlib\n\n\ndef build(name):\n    return importlib.import_module('models.' + name)\n",
             "models/dlinear.py": _ORPHAN}
    if readme:
        files["exp/README.md"] = "# exp\n"
    write(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF301")
    assert findings(r) == ([("dlinear.py", 7, "PF301")] if reported else [])


def test_an_import_continued_with_a_backslash_names_its_last_module(tmp_path, monkeypatch):
    # `from helpers import tools, \` then `leftover` on the next line imports `leftover`: its
    # findings stay (a module someone imports is no orphan).
    # The folder is put on `sys.path` by hand, so the project's own resolution misses it.
    entry = _ENTRY.replace("import torch\n", "import sys\n\n    import torch\n\n    sys.path.insert(0, 'lib')\n"
                           "    from helpers import tools, \\\n        leftover\n", 1)
    write(tmp_path, {"pyproject.toml": '[tool.perflint]\ntarget-torch = "1.13"\n', "main.py": entry,
                     "lib/helpers/tools.py": "X = 1\n", "lib/helpers/leftover.py": _ORPHAN})
    monkeypatch.chdir(tmp_path)
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF301")
    assert findings(r) == [("leftover.py", 7, "PF301")]


def test_a_cached_silence_ends_when_a_document_starts_importing_the_module(tmp_path, monkeypatch):
    # The answer reads every text file of the project: the cache serves it only while their
    # sizes and times are unchanged.
    write(tmp_path, {"pyproject.toml": '[tool.perflint]\ntarget-torch = "1.13"\n', "main.py": _ENTRY,
                     "leftover.py": _ORPHAN})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PERFLINT_CACHE_DIR", str(tmp_path / ".cache"))
    args = ("check", ".", "--output-format", "json", "--select", "PF301")
    assert findings(run(*args)) == []
    assert findings(run(*args)) == []  # from the cache
    (tmp_path / "README.md").write_text("```python\nfrom leftover import train_epoch\n```\n")
    assert findings(run(*args)) == [("leftover.py", 7, "PF301")]
