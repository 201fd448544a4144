"""What flows into a function from its callers: device, model placement, `**kwargs`
contents and argument classes, joined over every call site in the project; a fact holds in
the callee only when every known caller agrees, and an unknown caller keeps it unknown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import cold_then_warm, run, write

ENGINE = """\
import torch.nn.functional as F


def fit(model, loader, optimizer, device):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def _main(device: str, call: str = "fit(model, loader, opt, device)") -> str:
    return f"""\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from engine import fit

device = {device}
loader = DataLoader(datasets.MNIST("d", transform=transforms.ToTensor()), batch_size=64, num_workers=4,
                    pin_memory=True, persistent_workers=True)
model = torch.nn.Linear(784, 10).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    {call}
"""


def findings(result, select: str | None = None) -> list[tuple[str, int, str]]:
    out = sorted((Path(d["filename"]).name, d["location"]["row"], d["code"]) for d in json.loads(result.stdout))
    return [f for f in out if select is None or f[2] == select]


def check(*targets: str, select: str = "PF105,PF403") -> list[tuple[str, int, str]]:
    r = run("check", *targets, "--no-cache", "--output-format", "json", "--select", select)
    assert r.exit_code in (0, 1), r.output
    return findings(r)


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\ntarget-torch = \"2.4\"\nextend-select = [\"PF403\"]\n",
                     "engine.py": ENGINE})
    monkeypatch.chdir(tmp_path)
    return tmp_path


CUDA_FINDINGS = [("engine.py", 6, "PF105"), ("engine.py", 6, "PF105"), ("engine.py", 7, "PF403")]


@pytest.mark.parametrize("device", ['torch.device("cuda")', '"cuda" if torch.cuda.is_available() else "cpu"',
                                    '"cuda:0"'])
def test_a_cuda_device_from_every_caller_makes_the_callee_cuda_code(proj, device):
    write(proj, {"main.py": _main(device)})
    assert check(".") == CUDA_FINDINGS
    assert check("engine.py") == CUDA_FINDINGS  # one file checked: its project is still read


def test_one_caller_on_the_cpu_leaves_the_device_unknown(proj):
    write(proj, {"main.py": _main('torch.device("cuda")'), "cpu_main.py": _main('"cpu"')})
    assert check(".") == []


def test_a_forwarded_parameter_takes_what_its_own_callers_pass(proj):
    write(proj, {"main.py": _main('torch.device("cuda")', "run(model, loader, opt, device)").replace(
        "from engine import fit", "from engine import run"),
        "engine.py": ENGINE + "\n\ndef run(model, loader, optimizer, device):\n    fit(model, loader, optimizer, device)\n"})
    assert check(".") == CUDA_FINDINGS


@pytest.mark.parametrize("unknown", [
    # handed on as a value: called from wherever it goes
    "fit(model, loader, opt, device)\n    hooks = [fit]",
    # a call with *args: which parameter gets what is unknown
    "fit(model, loader, opt, device)\n    fit(*[model, loader, opt, device])",
    # a call with a **kwargs that is no known dict
    "fit(model, loader, opt, device)\n    fit(model, loader, opt, **extra)",
])
def test_an_unknown_caller_keeps_the_facts_unknown(proj, unknown):
    write(proj, {"main.py": _main('torch.device("cuda")', unknown)})
    assert check(".") == []


# The same training pass as a method of a trainer object.
TRAINER = """\
import torch.nn.functional as F


class Trainer:
    def __init__(self, clip=1.0):
        self.clip = clip

    def fit(self, model, loader, optimizer, device):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""
METHOD_MAIN = _main('torch.device("cuda")', "trainer.fit(model, loader, opt, device)").replace(
    "from engine import fit", "from engine import Trainer").replace("for epoch", "trainer = Trainer()\nfor epoch")
METHOD_FINDINGS = [("engine.py", 10, "PF105"), ("engine.py", 10, "PF105"), ("engine.py", 11, "PF403")]


def test_a_method_takes_what_every_call_on_an_instance_of_its_class_passes(proj):
    write(proj, {"engine.py": TRAINER, "main.py": METHOD_MAIN})
    assert check(".") == METHOD_FINDINGS
    assert check("engine.py") == METHOD_FINDINGS
    write(proj, {"cpu_main.py": METHOD_MAIN.replace('torch.device("cuda")', '"cpu"')})
    assert check(".") == []  # one caller on the CPU


@pytest.mark.parametrize("unknown", [
    # called on an object whose class is not known
    "trainer.fit(model, loader, opt, device)\n    def again(t):\n        t.fit(model, loader, opt, 'cpu')",
    # handed on as a bound method
    "trainer.fit(model, loader, opt, device)\n    hooks = [trainer.fit]",
    # called through the class: the arguments start at `self`
    "Trainer.fit(trainer, model, loader, opt, device)",
    # a subclass that does not define it: which method runs is not followed
    "trainer.fit(model, loader, opt, device)\n    Sub().fit(model, loader, opt, 'cpu')",
])
def test_an_unknown_call_of_a_method_keeps_its_facts_unknown(proj, unknown):
    main = METHOD_MAIN.replace("trainer.fit(model, loader, opt, device)", unknown)
    main = main.replace("for epoch", "class Sub(Trainer):\n    pass\n\n\nfor epoch")
    write(proj, {"engine.py": TRAINER, "main.py": main})
    assert check(".") == []


def test_a_method_its_own_class_calls_on_self_keeps_its_facts_unknown(proj):
    engine = TRAINER + "\n    def epochs(self, n, *args):\n        for _ in range(n):\n            self.fit(*args)\n"
    write(proj, {"engine.py": engine, "main.py": METHOD_MAIN})
    assert check(".") == []

def test_a_function_nothing_in_the_project_calls_learns_nothing(proj):
    write(proj, {"main.py": _main('torch.device("cuda")', "pass")})
    assert check(".") == []


def test_a_model_moved_to_cuda_makes_the_callee_cuda_code(proj):
    fitting = ENGINE.replace("def fit(model, loader, optimizer, device):",
                             "def fit(model, loader, optimizer):\n    device = next(model.parameters()).device")
    main = _main('"cpu"', "fit(model, loader, opt)").replace(".to(device)", ".cuda()")
    write(proj, {"engine.py": fitting, "main.py": main})
    assert check(".") == [("engine.py", 7, "PF105"), ("engine.py", 7, "PF105"), ("engine.py", 8, "PF403")]
    write(proj, {"main.py": main.replace(".cuda()", "")})
    assert check(".") == []


def test_an_accelerate_caller_makes_no_cuda_claim(proj):
    # Accelerate sets precision (autocast) for the model it prepares and its prepared
    # loaders yield batches on the device: what its script hands on says nothing of CUDA.
    main = _main('torch.device("cuda")').replace("import torch\n", "import torch\nfrom accelerate import Accelerator\n")
    main = main.replace("for epoch", "accelerator = Accelerator(mixed_precision='bf16')\n"
                                     "model, opt, loader = accelerator.prepare(model, opt, loader)\nfor epoch")
    write(proj, {"main.py": main})
    assert check(".") == []


FACTORY = """\
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __init__(self, root):
        self.names = sorted(open(root).read().split())

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        return open(self.names[i], "rb").read()


def make_loader(root, batch_size, **kw):
    return DataLoader(Files(root), batch_size=batch_size, **kw)
"""


@pytest.mark.parametrize("calls,expected", [
    # every caller leaves num_workers at the argparse default 0
    (['make_loader("a", 8, **{"num_workers": args.workers, "pin_memory": True})'], ["PF101"]),
    (['make_loader("a", 8, num_workers=0, pin_memory=True)'], ["PF101"]),
    # the callers disagree: unknown
    (['make_loader("a", 8, num_workers=0, pin_memory=True)', 'make_loader("b", 8, num_workers=4, pin_memory=True)'],
     []),
    # workers from every caller
    (['make_loader("a", 8, num_workers=4, pin_memory=True, persistent_workers=True)'], []),
])
def test_kwargs_forwarded_to_a_dataloader_are_what_every_caller_passes(tmp_path, monkeypatch, calls, expected):
    body = "\n".join(f"    loader{i} = {c}\n    for b in loader{i}:\n        print(len(b))" for i, c in enumerate(calls))
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "data.py": FACTORY,
                     "main.py": "import argparse\n\nfrom data import make_loader\n\nparser = argparse.ArgumentParser()\n"
                                "parser.add_argument('--workers', type=int, default=0)\n\n\ndef main(args):\n"
                                + body + "\n\n\nmain(parser.parse_args())\n"})
    monkeypatch.chdir(tmp_path)
    got = check(".", select="PF101")
    assert [f[2] for f in got] == expected
    assert all(f[:2] == ("data.py", 16) for f in got)
    r = run("check", ".", "--no-cache", "--output-format", "json", "--select", "PF101")
    for d in json.loads(r.stdout):
        assert "num_workers=" in d["message"] and d.get("fix") is None  # no rewrite through `**kw`


def test_library_names_reach_a_module_through_a_project_star_import(tmp_path, monkeypatch):
    write(tmp_path, {
        "setup.py": "",
        "pkg/__init__.py": "",
        "pkg/common.py": "import torch as T\nimport torch.nn as nn\n",
        "pkg/opt.py": "from .common import *\n\n\ndef make(model):\n    return T.optim.Adam(model.parameters())\n",
        "main.py": "import torch\nfrom pkg.opt import make\n\nmodel = torch.nn.Linear(2, 2).cuda()\nopt = make(model)\n",
    })
    monkeypatch.chdir(tmp_path)
    # `T` is torch only through common.py's import: no convention says so.
    assert check(".", select="PF302") == [("opt.py", 5, "PF302")]
    write(tmp_path, {"pkg/common.py": "import numpy as T\n"})
    assert check(".", select="PF302") == []


def test_the_facts_survive_the_cache(proj):
    write(proj, {"main.py": _main('torch.device("cuda")')})
    first, second = cold_then_warm(proj)
    assert first[:-1] == second[:-1]  # the same findings from the cache
    assert second[-1] == "imported libcst: False"  # answered from the cached summaries
    assert any("engine.py:7" in line and "PF403" in line for line in second)


def test_a_warm_run_sees_the_project_of_the_cold_run(tmp_path, monkeypatch):
    """An empty `__init__.py` that nothing imports is not summarised on a cold run; a cached
    summary of the same bytes (another, imported, empty `__init__.py`) must not add it on a
    warm run, or the project differs and every cached answer is asked again."""
    import perflint.analysis.project as project
    from perflint import runner
    from perflint.config import Resolver

    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "engine.py": ENGINE, "main.py": _main('"cuda"'),
                     "used/__init__.py": "", "used/helpers.py": "def f():\n    return 1\n",
                     "unused/__init__.py": "", "unused/tool.py": "print('no torch here')\n"})
    write(tmp_path, {"main.py": _main('"cuda"').replace("from engine import fit", "from engine import fit\nimport used")})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PERFLINT_CACHE_DIR", str(tmp_path / "cache"))
    asked = []
    digest = project.answers_digest
    monkeypatch.setattr(project, "answers_digest", lambda *a, **k: asked.append(a[1]) or digest(*a, **k))
    cold = runner.run(["."], Resolver(), jobs=1)
    assert asked
    asked.clear()
    warm = runner.run(["."], Resolver(), jobs=1)
    assert asked == [] and warm.cached == len(warm.results)
    assert [r.diagnostics for r in warm.results] == [r.diagnostics for r in cold.results]


def test_a_warm_run_sees_the_project_of_the_cold_run_with_a_nested_project(tmp_path, monkeypatch):
    """A folder holding a script and a nested project it imports (its own `pyproject.toml`):
    the nested package's `__init__.py` (no torch in it) is summarised for the outer project.
    The cold run must file that summary under the project that asked for it, as a warm run's
    cache hit does, or the warm run sees another project and asks every question again."""
    import perflint.analysis.project as project
    from perflint import runner
    from perflint.config import Resolver

    write(tmp_path, {"main.py": _main('"cuda"').replace("from engine import fit", "from inner.lib import fit"),
                     "inner/pyproject.toml": "[tool.perflint]\n", "inner/lib/__init__.py": "from .engine import fit\n",
                     "inner/lib/engine.py": ENGINE})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PERFLINT_CACHE_DIR", str(tmp_path / "cache"))
    asked = []
    digest = project.answers_digest
    monkeypatch.setattr(project, "answers_digest", lambda *a, **k: asked.append(a[1]) or digest(*a, **k))
    cold = runner.run([str(tmp_path)], Resolver(), jobs=1)
    assert asked
    asked.clear()
    warm = runner.run([str(tmp_path)], Resolver(), jobs=1)
    assert asked == [] and warm.cached == len(warm.results)
    assert [r.diagnostics for r in warm.results] == [r.diagnostics for r in cold.results]
