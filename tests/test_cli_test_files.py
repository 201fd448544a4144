"""Test files (what pytest collects: test_*.py, *_test.py, conftest.py) get only the
error-severity rules unless `lint-tests = true`: a test's `num_workers=0` is deliberate."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_support import codes, run, write
from perflint.options import is_benchmark_file, is_test_file

# PF101 (warning, DataLoader without workers) and PF404 (error: fp16 autocast without a
# GradScaler, gradients underflow) in one training loop.
BOTH = """\
import torch
from torch.utils.data import DataLoader

model = torch.nn.Linear(8, 2).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(ds, batch_size=4)
for x in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x.cuda()).sum()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize(
    "name, content, is_test",
    [
        ("test_train.py", "import pytest\n", True),
        ("train_test.py", "from unittest import TestCase\n", True),
        ("test_model.py", "def test_forward():\n    assert True\n", True),
        ("tests/test_train.py", BOTH, True),
        ("conftest.py", "", True),
        # Named like a test, but a training script: linted in full.
        ("train_test.py", BOTH, False),
        ("test_train.py", BOTH, False),
        # A script with `train()` and `test()` run per epoch from `__main__` (TCN's
        # `pmnist_test.py`): a `def test` is not enough; a pytest file run as a script is still one.
        ("pmnist_test.py", "def train():\n    pass\n\ndef test():\n    pass\n\n"
                           "if __name__ == \"__main__\":\n    train()\n    test()\n", False),
        ("model_test.py", "def test():\n    pass\n", True),
        ("model_test.py", "import pytest\n\ndef test_a():\n    pass\n\nif __name__ == '__main__':\n    pytest.main()\n",
         True),
        ("train.py", "import pytest\n", False),
        # A test module under a name pytest does not collect (a legacy suite's
        # `old_test_datasets.py`): it imports pytest or unittest and defines tests.
        ("old_test_datasets.py", "import pytest\n\nclass TestAll(TestCasePlus):\n    def test_a(self):\n        pass\n", True),
        ("old_test_datasets.py", "import pytest\n\nclass TestAll:\n    pass\n\nif __name__ == '__main__':\n    main()\n", False),
        ("test_utils_old.py", "def test_a():\n    pass\n", True),
        ("latest_tests.py", "def test_a():\n    pass\n", False),
        ("testing_utils.py", "import pytest\n", False),
        ("latest.py", "", False),
        # The helpers of a test suite (fixtures, fake loaders), but not a `test/` folder of
        # evaluation scripts.
        ("tests/methods/utils.py", BOTH, True),
        ("tests/fixtures.py", "", True),
        ("test/eval.py", BOTH, False),
        ("testing/train.py", BOTH, False),
        ("test_data.ipynb", "", False),
    ],
)
def test_what_counts_as_a_test_file(tmp_path, name, content, is_test):
    write(tmp_path, {name: content})
    assert is_test_file(tmp_path / name, root=str(tmp_path)) is is_test


def test_a_project_inside_a_tests_folder_is_not_test_code(tmp_path):
    """Only the folders below the project's root count: a project kept in `~/tests/` is not."""
    write(tmp_path, {"tests/proj/train.py": BOTH, "tests/proj/tests/helpers.py": BOTH})
    root = str(tmp_path / "tests" / "proj")
    assert not is_test_file(tmp_path / "tests/proj/train.py", root=root)
    assert is_test_file(tmp_path / "tests/proj/tests/helpers.py", root=root)


def test_a_training_script_named_like_a_test_gets_every_rule(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "train_test.py": BOTH})
    monkeypatch.chdir(tmp_path)
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF101,PF404")
    assert _codes_by_file(r)["train_test.py"] == {"PF101", "PF404"}


def _codes_by_file(result):
    out: dict[str, set[str]] = {}
    for path, code in codes(result):
        out.setdefault(Path(path).name, set()).add(code)
    return out


def test_test_files_get_only_error_rules_by_default(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "train.py": BOTH, "tests/test_train.py": BOTH})
    monkeypatch.chdir(tmp_path)
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF101,PF404")
    found = _codes_by_file(r)
    assert found["train.py"] == {"PF101", "PF404"}
    assert found["test_train.py"] == {"PF404"}


def test_lint_tests_setting_reports_everything_in_test_files(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\nlint-tests = true\n", "tests/test_train.py": BOTH})
    monkeypatch.chdir(tmp_path)
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF101,PF404")
    assert _codes_by_file(r)["test_train.py"] == {"PF101", "PF404"}


def test_lint_tests_must_be_a_boolean(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": '[tool.perflint]\nlint-tests = "yes"\n', "train.py": BOTH})
    monkeypatch.chdir(tmp_path)
    r = run("check", "--no-cache")
    assert r.exit_code == 2
    assert "`lint-tests` must be true or false" in r.stderr


def test_fix_leaves_warnings_in_test_files_alone(tmp_path, monkeypatch):
    # PF402's safe fix (deprecated torch.cuda.amp API) is not applied in a test file.
    amp = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n\n\ndef test_scaler():\n    assert scaler\n"
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "test_amp.py": amp, "amp.py": amp})
    monkeypatch.chdir(tmp_path)
    run("fix", "--no-cache", "--select", "PF402")
    assert (tmp_path / "test_amp.py").read_text() == amp
    assert (tmp_path / "amp.py").read_text() != amp


@pytest.mark.parametrize(
    "name, is_bench",
    [
        ("bench.py", True),
        ("benchmark.py", True),
        ("benchmarks.py", True),
        ("benchmark_train.py", True),
        ("benchmarking_flux.py", True),
        ("train_benchmark.py", True),
        ("loader_bench.py", True),
        ("benchmarks/run_all.py", True),
        ("tools/benchmark/train_speed.py", True),
        # Training scripts with "bench" inside a word, or not in a benchmark folder.
        ("benchmarked_train.py", False),
        ("workbench.py", False),
        ("train.py", False),
        ("benchmarks.ipynb", False),
        ("tools/benchmark_results/train.py", False),
    ],
)
def test_what_counts_as_a_benchmark_file(tmp_path, name, is_bench):
    write(tmp_path, {name: ""})
    assert is_benchmark_file(tmp_path / name, root=str(tmp_path)) is is_bench


def test_a_project_inside_a_benchmarks_folder_is_not_benchmark_code(tmp_path):
    write(tmp_path, {"benchmarks/proj/train.py": BOTH})
    assert not is_benchmark_file(tmp_path / "benchmarks/proj/train.py", root=str(tmp_path / "benchmarks" / "proj"))


def test_benchmark_files_get_only_error_rules_by_default(tmp_path, monkeypatch):
    # nanoGPT's bench.py times training steps with an `.item()` per step on purpose.
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "train.py": BOTH, "bench.py": BOTH})
    monkeypatch.chdir(tmp_path)
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF101,PF404")
    found = _codes_by_file(r)
    assert found["train.py"] == {"PF101", "PF404"}
    assert found["bench.py"] == {"PF404"}


def test_lint_benchmarks_setting_reports_everything_in_benchmark_files(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\nlint-benchmarks = true\n", "benchmarks/train_speed.py": BOTH})
    monkeypatch.chdir(tmp_path)
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF101,PF404")
    assert _codes_by_file(r)["train_speed.py"] == {"PF101", "PF404"}
