"""`fix` takes in one pass the fixes whose nodes overlap where their rules' fixes commute
(`fixedits.compose`): fewer analyses of the file, and exactly the text that one pass per
overlapping fix gives."""

from __future__ import annotations

import pytest

import perflint.engine as engine
from perflint import fixedits
from perflint.engine import LintOptions
from perflint.rules import all_rules

ALL = tuple(sorted(all_rules()))

# A loader missing `pin_memory` and `persistent_workers` (PF102 and PF103 both edit the
# call), and batch copies without `non_blocking` inside the step that PF403 wraps in autocast.
LOADER_AND_STEP = '''\
import torch
from torch.utils.data import DataLoader


def train(model, dataset, epochs):
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
    for epoch in range(epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
'''

# PF204's `.detach()` sits inside the evaluation loop that PF304 wraps in `no_grad`: once
# the block is there the graph is not kept, and the next pass offers no `.detach()`.
MOOTED = '''\
import torch


def evaluate(model, loader, criterion, device):
    model.eval()
    val_loss, n = 0.0, 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = criterion(model(x), y)
        val_loss += loss
        n += 1
    return val_loss.item() / n


def main(model, train_loader, val_loader, opt):
    device = torch.device("cuda")
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        print(evaluate(model, val_loader, torch.nn.CrossEntropyLoss(), device))
'''


def _fix(text: str, monkeypatch, compose: bool = True):
    analyses = []
    real = engine._analyze

    def counting(*args, **kwargs):
        analyses.append(1)
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(engine, "_analyze", counting)
        if not compose:
            m.setattr(fixedits, "compose", lambda *a, **k: None)
        fixed, applied, errors = engine.fix_text(text, "train.py", LintOptions(codes=ALL, prefilter=False), True)
    assert errors == []
    return fixed, applied, len(analyses)


def test_fixes_that_commute_share_a_pass_and_write_what_the_passes_wrote(monkeypatch):
    fixed, applied, passes = _fix(LOADER_AND_STEP, monkeypatch)
    one_by_one, applied_one_by_one, more_passes = _fix(LOADER_AND_STEP, monkeypatch, compose=False)
    assert fixed == one_by_one
    assert applied == applied_one_by_one
    assert "pin_memory=True" in fixed and "persistent_workers=True" in fixed
    assert "x.to(device, non_blocking=True)" in fixed and "torch.autocast(" in fixed
    assert (passes, more_passes) == (2, 3)  # one pass and the one that finds nothing left


@pytest.mark.parametrize("code", ["PF102", "PF103", "PF105", "PF403"])
def test_each_commuting_fix_is_still_applied_alone(monkeypatch, code):
    fixed, applied, _ = _fix(LOADER_AND_STEP, monkeypatch)
    assert applied.get(code, 0) >= 1


def test_a_fix_that_another_makes_moot_waits_for_the_next_pass(monkeypatch):
    fixed, applied, passes = _fix(MOOTED, monkeypatch)
    one_by_one, applied_one_by_one, _ = _fix(MOOTED, monkeypatch, compose=False)
    assert fixed == one_by_one and applied == applied_one_by_one
    assert "torch.no_grad()" in fixed
    assert "val_loss += loss\n" in fixed  # PF204's `.detach()` is moot under no_grad
    assert "PF204" not in applied


def test_edits_at_one_point_go_in_the_order_taken_and_overlaps_clash():
    text = "f(a)"
    assert fixedits.apply_edits(text, [(3, 3, ", b"), (3, 3, ", c"), (0, 1, "g")]) == "g(a, b, c)"
    assert fixedits._clash((1, 3), (2, 4)) and fixedits._clash((2, 2), (1, 3))
    assert not fixedits._clash((1, 3), (3, 5)) and not fixedits._clash((3, 3), (3, 3))
    assert not fixedits._clash((1, 1), (1, 3)) and not fixedits._clash((3, 3), (1, 3))


ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "fixtures" / "realistic").glob("*.py")) + [
    ROOT / "fixtures" / "rules" / name for name in ("PF410.py", "PF101_options.py", "PF106.py", "PF304_torch03.py")
]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_fixing_the_fixtures_in_fewer_passes_writes_what_one_pass_per_fix_writes(monkeypatch, path):
    text = path.read_text()
    fixed, applied, passes = _fix(text, monkeypatch)
    one_by_one, applied_one_by_one, more_passes = _fix(text, monkeypatch, compose=False)
    assert (fixed, applied) == (one_by_one, applied_one_by_one)
    assert passes <= more_passes


def test_the_benchmark_counts_the_analyses_of_each_file(tmp_path):
    """`benchmarks/fix_passes.py` (the README's pass counts): a script whose overlapping
    fixes commute takes two analyses, its first lint (whose fixes the fix job applies) and
    the pass that finds nothing left; a file with nothing to fix, its first lint only (no
    fix job)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fix_passes", ROOT / "benchmarks" / "fix_passes.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (tmp_path / "train.py").write_text(LOADER_AND_STEP)
    (tmp_path / "plain.py").write_text("import torch\n\nx = torch.ones(3)\nprint(x.sum())\n")
    assert bench.count(str(tmp_path), "ALL", True) == {2: 1, 1: 1}
    assert (tmp_path / "train.py").read_text() == LOADER_AND_STEP  # `--diff` writes nothing


PROJECT_FIXTURES = sorted(p for p in (ROOT / "fixtures" / "projects").iterdir() if (p / "pyproject.toml").is_file())


@pytest.mark.parametrize("project", PROJECT_FIXTURES, ids=lambda p: p.name)
def test_a_fix_run_that_takes_its_first_lints_writes_what_fixing_from_scratch_writes(project, monkeypatch):
    """A fix run answers a file with nothing to fix from its first lint, and starts the fix
    loop of the others from it (`TreeStore.take_analysis`): the same diff, findings and
    counts as fixing every file from a fresh analysis, in no more analyses."""
    from cli_support import run
    from perflint.runcontext import TreeStore

    analyses: list[str] = []
    real = engine._analyze

    def counted(text, path, *args, **kwargs):
        analyses.append(path)
        return real(text, path, *args, **kwargs)

    monkeypatch.setattr(engine, "_analyze", counted)
    args = ("fix", str(project), "--diff", "--unsafe-fixes", "--select", "ALL", "--no-cache", "--jobs", "1",
            "--output-format", "json", "--exit-zero")
    taken = run(*args)
    n_taken = len(analyses)
    analyses.clear()
    monkeypatch.setattr(TreeStore, "take_analysis", lambda self, path, text: None)
    monkeypatch.setattr("perflint.runner.has_fixes", lambda r, unsafe, fixable: True)
    fresh = run(*args)
    assert (taken.stdout, taken.stderr, taken.exit_code) == (fresh.stdout, fresh.stderr, fresh.exit_code)
    assert n_taken <= len(analyses)  # fewer wherever a file has nothing to fix (the benchmark test above)
