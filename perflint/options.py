"""What decides one file's analysis: the rule codes that apply to it (the configuration's
selection, its per-file-ignores, test files) and the target torch version.

The command line, the language server and `perflint.api` all ask `options_for`, so a file
gets the same rules whichever way it is checked.
"""

from __future__ import annotations

import re
from pathlib import Path

from perflint.config import Settings
from perflint.diagnostics import Severity
from perflint.engine import LintOptions
from perflint.selection import ignored_for_path, selected_codes, severity_of

_TEST_IMPORT = re.compile(rb"^[ \t]*(?:import[ \t]+(?:pytest|unittest)\b|from[ \t]+(?:pytest|unittest|_pytest)\b)", re.M)
_TEST_DEFS = re.compile(rb"^[ \t]*(?:(?:async[ \t]+)?def[ \t]+test\w*[ \t]*\(|class[ \t]+Test\w*\b)", re.M)
_MAIN_GUARD = re.compile(rb"^if[ \t]+__name__[ \t]*==[ \t]*['\"]__main__['\"][ \t]*:", re.M)
_TEST_FOLDERS = {"tests", "test", "testing"}


def is_test_file(path: Path, source: bytes | None = None, root: str | None = None) -> bool:
    """A test module: named as pytest collects them (`test_*.py`, `*_test.py`) and looking
    like one, a conftest.py, any module in a `tests/` folder (the suite's helpers), or a
    module named with `test` elsewhere in its name that imports pytest or unittest, defines
    tests and does not run as a script (`old_test_datasets.py`).

    The name alone is not enough (`train_test.py` is often a training script): the file must
    also sit in a `tests/` folder, import pytest or unittest, or define `test_*` functions
    or `Test*` classes without running as a script (no `if __name__ == "__main__":`: a
    training script named `*_test.py` with `train()` and `test()` functions is no test). Test code runs a few steps on tiny inputs on purpose
    (`num_workers=0`, an `.item()` per assertion): performance warnings there are noise, so
    only error-severity rules (code that is wrong, not slow) apply, unless `lint-tests = true`.
    """
    name = path.name
    if name == "conftest.py":
        return True
    if not name.endswith(".py"):
        return False
    folder, below_root = path.parent, None
    if root is not None:
        try:
            folder = below_root = path.absolute().parent.relative_to(Path(root).absolute())
        except ValueError:
            pass
    if not (name.startswith("test_") or name.endswith("_test.py")):
        # A helper module of a test suite (`tests/utils.py`: fixtures, tiny fake loaders),
        # in a `tests/` folder of the project (not one the project sits in); a singular
        # `test/` folder often holds a project's evaluation scripts instead.
        if below_root is not None and "tests" in below_root.parts:
            return True
        # A test module under another name (`old_test_datasets.py`, kept out of pytest's
        # collection): it imports pytest or unittest, defines tests, and is no script.
        return "test" in name and _defines_tests(path, source, need_import=True)
    if any(part in _TEST_FOLDERS for part in folder.parts):
        return True
    return _defines_tests(path, source)


def _defines_tests(path: Path, source: bytes | None, need_import: bool = False) -> bool:
    """The source imports pytest or unittest, or (unless `need_import`) defines `test_*`
    functions or `Test*` classes and does not run as a script."""
    if source is None:
        from perflint.analysis.project import read_regular

        source = read_regular(str(path)) or b""
    if need_import:
        return bool(_TEST_IMPORT.search(source) and _TEST_DEFS.search(source) and not _MAIN_GUARD.search(source))
    if _TEST_IMPORT.search(source):
        return True
    # `def test(...)` in a script run as `__main__` (`pmnist_test.py`: train() and test() per
    # epoch, no test framework) is the script's evaluation, not a test for pytest to collect.
    return _TEST_DEFS.search(source) is not None and _MAIN_GUARD.search(source) is None


_BENCHMARK_NAME = re.compile(r"^(?:bench|benchmarks?|benchmarking)(?:_\w+)?\.py$|^\w+_bench(?:mark)?s?\.py$")
_BENCHMARK_FOLDERS = {"benchmark", "benchmarks"}


def is_benchmark_file(path: Path, root: str | None = None) -> bool:
    """A benchmark script: named `bench.py`, `benchmark.py`, `benchmark_*.py`,
    `benchmarking_*.py`, `*_benchmark.py` or `*_bench.py`, or any module in a `benchmark/`
    or `benchmarks/` folder below the project's root. A benchmark measures a setting on
    purpose (fp32 against bf16, an `.item()` per step, no workers): performance warnings
    there are noise, so only error-severity rules apply, unless `lint-benchmarks = true`."""
    if _BENCHMARK_NAME.match(path.name):
        return True
    if root is None or not path.name.endswith(".py"):
        return False
    try:
        below_root = path.absolute().parent.relative_to(Path(root).absolute())
    except ValueError:
        return False
    return any(part in _BENCHMARK_FOLDERS for part in below_root.parts)


def _severity(code: str) -> Severity:
    return severity_of(code)


def options_for(path: Path, settings: Settings, with_edits: bool = True, memo: dict | None = None) -> LintOptions:
    if memo is not None:
        if settings not in memo:
            memo[settings] = selected_codes(settings)
        codes = set(memo[settings])
    else:
        codes = set(selected_codes(settings))
    if settings.per_file_ignores:
        try:
            rel = path.absolute().relative_to(Path(settings.root)).as_posix()
        except ValueError:
            try:
                rel = path.resolve().relative_to(Path(settings.root)).as_posix()
            except (ValueError, OSError, RuntimeError):
                rel = path.as_posix()
        codes -= ignored_for_path(settings, rel)
    if (not settings.lint_tests and is_test_file(path, root=settings.root)) \
            or (not settings.lint_benchmarks and is_benchmark_file(path, root=settings.root)):
        codes = {c for c in codes if _severity(c) is Severity.ERROR}
    return LintOptions(codes=tuple(sorted(codes)), target_torch=settings.effective_target(), with_edits=with_edits)
