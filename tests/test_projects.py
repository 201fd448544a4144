"""Projects, not files: fixtures/projects/ holds small multi-file training projects in the
layouts real repositories use (a `models/` package, `datasets.py` + `train.py` + `utils.py`,
an `engine.py` called from `main.py`, a `src/` package with a config dataclass …).  Every
expected finding is annotated on its line with `# expect: PFxxx`; a finding in a helper that
a loop in another file calls on every step also names that call, as the message does:
`# expect: PF201 (runs once per step: called from train.py:41)`.

perflint (default rules, as users run it) must report exactly the annotations:
  * on the project folder, from the repository root and from inside the folder;
  * on each file of the project alone: the project is still read, so that file's findings
    are the ones the folder run gives for it.
Projects whose expected findings need a change in a rule are marked xfail(strict=True) in
GAPS (see the gaps list in fixtures/projects/README.md), so they flip when the rule learns it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from cli_support import run
from fixture_support import FIXTURES, expected_findings
from perflint.rules import all_rules

PROJECTS_DIR = FIXTURES / "projects"
PROJECTS = sorted(p for p in PROJECTS_DIR.iterdir() if (p / "pyproject.toml").is_file())
REPO = FIXTURES.parent

# project → {file: why its annotations cannot all be met yet} (gaps in the rules or the
# single-file analysis, listed in fixtures/projects/README.md).
GAPS: dict[str, dict[str, str]] = {
}

_CALLED_FROM = re.compile(r"#\s*expect:[^#\n]*\(runs once per step: called from (?P<where>[\w./-]+:\d+)\)")


def _files(project: Path) -> list[Path]:
    return sorted(project.rglob("*.py"))


def _rel(project: Path, path: Path) -> str:
    return path.relative_to(project).as_posix()


def annotated(project: Path) -> Counter:
    out: Counter = Counter()
    for p in _files(project):
        for (row, code), n in expected_findings(p.read_text()).items():
            out[(_rel(project, p), row, code)] += n
    return out


def annotated_callers(project: Path) -> dict[tuple[str, int], str]:
    """(file, line) → "train.py:41" for annotations that name the per-step call."""
    out = {}
    for p in _files(project):
        for row, line in enumerate(p.read_text().splitlines(), start=1):
            m = _CALLED_FROM.search(line)
            if m:
                out[(_rel(project, p), row)] = m.group("where")
    return out


def reported(project: Path, *targets: str, cwd: Path | None = None) -> tuple[Counter, list[dict]]:
    old = os.getcwd()
    os.chdir(cwd or REPO)
    try:
        r = run("check", *targets, "--no-cache", "--output-format", "json")
    finally:
        os.chdir(old)
    assert r.exit_code in (0, 1), r.output
    diags = json.loads(r.stdout)
    out: Counter = Counter()
    for d in diags:
        path = Path(d["filename"])
        path = path if path.is_absolute() else (cwd or REPO) / path
        out[(_rel(project, path.resolve()), d["location"]["row"], d["code"])] += 1
    return out, diags


def _mark(project: Path, path: Path | None = None):
    gaps = GAPS.get(project.name, {})
    reasons = [why for f, why in sorted(gaps.items()) if path is None or _rel(project, path) == f]
    return [pytest.mark.xfail(strict=True, reason="; ".join(reasons))] if reasons else []


def _params(items):
    return [pytest.param(*item, marks=_mark(*item), id="/".join(
        [item[0].name] + [_rel(item[0], x) for x in item[1:]])) for item in items]


def _compare(expected: Counter, actual: Counter) -> None:
    missing, extra = expected - actual, actual - expected
    show = lambda c: ", ".join(f"{f}:{r} {code}" + (f" ×{n}" if n > 1 else "")  # noqa: E731
                               for (f, r, code), n in sorted(c.items()))
    assert not missing and not extra, f"missing: [{show(missing)}]; unexpected: [{show(extra)}]"


def test_there_are_at_least_10_projects_each_described():
    assert len(PROJECTS) >= 10
    readme = (PROJECTS_DIR / "README.md").read_text()
    for p in PROJECTS:
        assert f"`{p.name}`" in readme, f"{p.name} is not described in fixtures/projects/README.md"
        header = (p / "pyproject.toml").read_text().splitlines()[0]
        assert header.startswith("# Layout: "), f"{p.name}: pyproject.toml does not start with its layout line"


def test_the_projects_exercise_cross_module_findings_and_silence():
    per_step = [p.name for p in PROJECTS if annotated_callers(p)]
    silent = [p.name for p in PROJECTS if not annotated(p)]
    assert len(per_step) >= 3, per_step
    assert len(silent) >= 2, silent


def test_annotations_name_real_rules_and_real_callers():
    known = set(all_rules())
    for project in PROJECTS:
        for (f, _, code) in annotated(project):
            assert code in known, f"{project.name}/{f}: unknown code {code}"
        for (f, row), where in annotated_callers(project).items():
            caller, line = where.rsplit(":", 1)
            text = (project / caller).read_text().splitlines()[int(line) - 1]
            assert "(" in text, f"{project.name}/{f}:{row}: {where} is not a call"


@pytest.mark.parametrize("project", _params([(p,) for p in PROJECTS]))
def test_the_folder_run_reports_exactly_the_annotations(project: Path):
    expected = annotated(project)
    actual, diags = reported(project, str(project.relative_to(REPO)))
    _compare(expected, actual)
    # A per-step finding in a helper names the loop that calls it, as annotated.
    callers = annotated_callers(project)
    for d in diags:
        key = (_rel(project, (REPO / d["filename"]).resolve()), d["location"]["row"])
        m = re.search(r"\(runs once per step: called from ([\w./-]+:\d+)\)$", d["message"])
        assert (m.group(1) if m else None) == callers.get(key), f"{key} {d['code']}: {d['message']}"


@pytest.mark.parametrize("project", _params([(p,) for p in PROJECTS]))
def test_a_run_from_inside_the_project_folder_gives_the_same(project: Path):
    actual, _ = reported(project, ".", cwd=project)
    _compare(annotated(project), actual)


@pytest.mark.parametrize("project,path", _params([(p, f) for p in PROJECTS for f in _files(p)]))
def test_a_run_on_one_file_gives_that_files_findings_of_the_folder_run(project: Path, path: Path):
    rel = _rel(project, path)
    expected = Counter({k: n for k, n in annotated(project).items() if k[0] == rel})
    actual, diags = reported(project, str(path.relative_to(REPO)))
    _compare(expected, actual)
    callers = annotated_callers(project)
    for d in diags:
        m = re.search(r"\(runs once per step: called from ([\w./-]+:\d+)\)$", d["message"])
        assert (m.group(1) if m else None) == callers.get((rel, d["location"]["row"])), d["message"]



def _rows(env: dict, keep) -> list[int]:
    """The rows of `perflint check .`'s findings that `keep(diagnostic)` selects (a run that
    uses the cache folder in `env`)."""
    r = run("check", ".", "--output-format", "json", env=env)
    assert r.exit_code in (0, 1), r.output
    return sorted(d["location"]["row"] for d in json.loads(r.stdout) if keep(d))


def test_a_warm_run_sees_a_notebook_start_calling_a_function_nothing_ran(tmp_path, monkeypatch):
    """p37's `layers/utils.train` is code nothing runs until a notebook calls it: the entries
    that asked this question are stamped with the notebooks' sizes and times, so an edited
    notebook makes the next run ask again instead of serving the cached silence."""
    import shutil

    proj = tmp_path / "p37"
    shutil.copytree(PROJECTS_DIR / "p37_unused_helpers", proj)
    monkeypatch.chdir(proj)
    env = {"PERFLINT_CACHE_DIR": str(tmp_path / "cache")}

    def rows_in_utils() -> list[int]:
        return _rows(env, lambda d: d["filename"].endswith("utils.py"))

    assert rows_in_utils() == [36]
    assert rows_in_utils() == [36]  # a warm run, the same answer
    nb = json.loads((proj / "notebooks" / "sweep.ipynb").read_text())
    nb["cells"][0]["source"] = ["from layers.utils import sweep, train\n", "sweep(net, data, dev)\n", "train(net, data, dev)\n"]
    (proj / "notebooks" / "sweep.ipynb").write_text(json.dumps(nb))
    assert rows_in_utils() == [22, 36]


def test_a_loss_layer_built_and_never_called_does_not_block_the_autocast_rewrite():
    """p44: the detector's head builds a `BCELoss` nothing calls (PyTorch-YOLOv3's
    `self.bce_loss`), so its training step gets the plain autocast rewrite; the
    discriminator calls its `BCELoss` every step, so its step is told why not."""
    project = PROJECTS_DIR / "p44_unused_loss_layer"
    _, diags = reported(project, str(project.relative_to(REPO)))
    by_file = {Path(d["filename"]).name: d for d in diags if d["code"] == "PF403"}
    assert set(by_file) == {"train.py", "train_gan.py"}
    assert "BCELoss" not in by_file["train.py"]["message"]
    assert by_file["train.py"]["fix"] is not None
    assert "`BCELoss`/`binary_cross_entropy` raise under CUDA autocast" in by_file["train_gan.py"]["message"]
    assert by_file["train_gan.py"]["fix"] is None


def test_ffts_in_another_module_keep_the_bf16_rewrite_out():
    """p47: the layers `train.py` builds run `torch.fft` in `layers.py`; cuFFT takes no
    bfloat16, so the step is reported with the reason and no rewrite."""
    project = PROJECTS_DIR / "p47_fft_layers_elsewhere"
    _, diags = reported(project, str(project.relative_to(REPO)))
    (d,) = [d for d in diags if d["code"] == "PF403"]
    assert "cuFFT takes no bfloat16" in d["message"] and d["fix"] is None


def test_a_loss_layer_another_module_reads_still_blocks_the_autocast_rewrite(tmp_path):
    """The head's `self.bce_loss` is unread in models.py, but once another module of the
    project calls `model.bce_loss(...)` it may run under autocast, where `BCELoss` raises:
    the detector's step keeps the reason and gets no rewrite."""
    project = tmp_path / "p44"
    shutil.copytree(PROJECTS_DIR / "p44_unused_loss_layer", project)
    (project / "extra_loss.py").write_text("import torch\n\n\ndef objectness(model, p, t):\n"
                                         "    return model.bce_loss(torch.sigmoid(p), t)\n")
    _, diags = reported(project, ".", cwd=project)
    (d,) = [d for d in diags if d["code"] == "PF403" and Path(d["filename"]).name == "train.py"]
    assert "`BCELoss`/`binary_cross_entropy` raise under CUDA autocast" in d["message"]
    assert d["fix"] is None


def test_a_local_loss_layer_another_module_reads_still_blocks_the_autocast_rewrite(tmp_path):
    """The model class is in the training file, which never reads `.bce_loss`; the loss
    module the step calls does (`model.bce_loss(...)`): still no plain rewrite."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.4"]\n\n'
                                             '[tool.perflint]\nextend-select = ["PF403"]\n')
    (tmp_path / "losses.py").write_text("import torch\n\n\ndef objectness(model, p, t):\n"
                                        "    return model.bce_loss(torch.sigmoid(p), t)\n")
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.nn as nn\n\nfrom losses import objectness\n\n\n"
        "class Det(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 8, 3, padding=1)\n        self.bce_loss = nn.BCELoss()\n\n"
        "    def forward(self, x):\n        return self.conv(x)\n\n\n"
        "def main():\n    model = Det().cuda()\n    optimizer = torch.optim.Adam(model.parameters())\n"
        "    for step in range(100):\n        x = torch.randn(8, 3, 32, 32, device=\"cuda\")\n"
        "        t = torch.rand(8, 8, 32, 32, device=\"cuda\")\n        out = model(x)\n"
        "        loss = objectness(model, out, t)\n        optimizer.zero_grad(set_to_none=True)\n"
        "        loss.backward()\n        optimizer.step()\n")
    _, diags = reported(tmp_path, ".", cwd=tmp_path)
    (d,) = [d for d in diags if d["code"] == "PF403"]
    assert "`BCELoss`/`binary_cross_entropy` raise under CUDA autocast" in d["message"]
    assert d["fix"] is None


def test_a_warm_run_sees_the_optimizer_wrapper_take_set_to_none(tmp_path, monkeypatch):
    """p48's `loss_batch(..., opt)` is silent while the project's `OptimWrapper.zero_grad`
    takes no `set_to_none`; once the wrapper accepts it, the cached silence is not served:
    the answer is re-asked and the bare `zero_grad()` is reported."""
    proj = tmp_path / "p48"
    shutil.copytree(PROJECTS_DIR / "p48_optimizer_wrapper_param", proj)
    monkeypatch.chdir(proj)
    env = {"PERFLINT_CACHE_DIR": str(tmp_path / "cache")}

    def pf301_rows() -> list[int]:
        return _rows(env, lambda d: d["code"] == "PF301" and Path(d["filename"]).name == "basic_train.py")

    assert pf301_rows() == [34]
    assert pf301_rows() == [34]  # warm
    src = (proj / "callback.py").read_text()
    (proj / "callback.py").write_text(src.replace("def zero_grad(self):", "def zero_grad(self, set_to_none=False):"))
    assert pf301_rows() == [16, 34]


def test_a_warm_run_sees_the_project_lose_its_grad_scaler(tmp_path, monkeypatch):
    """p50's float16 step hands its loss to the optimizer wrapper's `backward`, silent while a
    module of the project builds a GradScaler; once none does, the cached silence is not
    served and the step is reported."""
    proj = tmp_path / "p50"
    shutil.copytree(PROJECTS_DIR / "p50_scaler_in_optimizer_factory", proj)
    monkeypatch.chdir(proj)
    env = {"PERFLINT_CACHE_DIR": str(tmp_path / "cache")}

    def pf404_rows() -> list[int]:
        return _rows(env, lambda d: d["code"] == "PF404")

    assert pf404_rows() == [23]
    assert pf404_rows() == [23]  # warm
    opt = proj / "nmt" / "optimizers.py"
    opt.write_text(opt.read_text().replace("from torch.cuda.amp import GradScaler\n\n", "")
                   .replace("optimizer._scaler = GradScaler()", "optimizer._scaler = object()"))
    assert pf404_rows() == [15, 23]



def test_only_a_wrapper_named_for_scaling_takes_the_loss(tmp_path, monkeypatch):
    """`self.sampler.backward(loss)` is no optimizer wrapper (`amp` inside `sampler` is not the
    word): p50's float16 step is reported then, GradScaler in the project or not."""
    proj = tmp_path / "p50"
    shutil.copytree(PROJECTS_DIR / "p50_scaler_in_optimizer_factory", proj)
    monkeypatch.chdir(proj)
    trainer = proj / "nmt" / "trainer.py"
    trainer.write_text(trainer.read_text().replace("self.optim.backward(loss)", "self.sampler.backward(loss)"))
    assert _rows({"PERFLINT_CACHE_DIR": str(tmp_path / "cache")}, lambda d: d["code"] == "PF404") == [15, 23]
