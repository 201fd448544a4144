"""Bad input: each problem is one line on stderr naming the path and the cause, the other
files are still checked and reported, and the run exits 2.  Nothing crashes the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import perflint.runner as runner_mod
from cli_support import AMP, register_rule, run, write


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "good.py": AMP})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(*args: str):
    r = run("check", "--no-cache", "--output-format", "concise", "--select", "PF402", *args)
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert "Traceback" not in r.output
    return r, errors


def assert_one_error(errors: list[str], path: str, *cause: str) -> None:
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"error: {path}: "), errors[0]
    for c in cause:
        assert c in errors[0], errors[0]


def assert_good_file_still_reported(r) -> None:
    assert "good.py:3:10: PF402" in r.stdout


@pytest.mark.parametrize(
    "name, content, cause",
    [
        ("syntax.py", "import torch\ndef f(:\n    pass\n", ["syntax error", "line 2"]),
        # No rule can fire (the prefilter skips analysis), the syntax error is still reported.
        ("syntax_no_torch.py", "def f(:\n    pass\n", ["syntax error", "line 1"]),
        ("indent.py", "import torch\nif True:\nx = 1\n", ["syntax error", "line 3"]),
        # torch 0.3's keyword, a reserved word since Python 3.7: the message says what to write.
        ("async.py", "import torch\nx = torch.ones(3).cuda(async=True)\n",
         ["syntax error", "line 2", "`async` is a reserved word", "non_blocking=True"]),
        ("binary.py", b"\x7fELF\x02\x01\x01\x00\x00\x00torch", ["binary file"]),
        ("latin.py", b"import torch\nname = 'caf\xe9'\n", ["not valid UTF-8"]),
        ("cookie.py", b"# -*- coding: no-such-codec -*-\nimport torch\n", ["unknown encoding"]),
        ("nb.ipynb", "{\"cells\": [", ["invalid notebook JSON"]),
        ("notnb.ipynb", "[1, 2]", ["not a Jupyter notebook"]),
    ],
)
def test_unreadable_or_unparsable_file(proj, name, content, cause):
    write(proj, {name: content})
    r, errors = check()
    assert r.exit_code == 2
    assert_one_error(errors, name, *cause)
    assert_good_file_still_reported(r)


def test_empty_files_are_fine(proj):
    write(proj, {"empty.py": "", "empty.ipynb": '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
                 "blank.py": "\n\n   \n"})
    r, errors = check()
    assert errors == []
    assert r.exit_code == 1  # good.py's finding
    r, errors = check("empty.py", "blank.py", "empty.ipynb")
    assert r.exit_code == 0 and errors == []


def test_path_that_does_not_exist(proj):
    r, errors = check("missing.py", "good.py")
    assert r.exit_code == 2
    assert_one_error(errors, "missing.py", "no such file or directory")
    assert_good_file_still_reported(r)


def test_symlink_loop_named_explicitly_and_found_in_a_folder(proj):
    os.symlink("loop_b.py", proj / "loop_a.py")
    os.symlink("loop_a.py", proj / "loop_b.py")
    r, errors = check("loop_a.py", "good.py")
    assert r.exit_code == 2
    assert_one_error(errors, "loop_a.py", "symbolic link loop")
    assert_good_file_still_reported(r)
    r, errors = check()
    assert r.exit_code == 2
    assert sorted(errors) == ["error: loop_a.py: symbolic link loop", "error: loop_b.py: symbolic link loop"]
    assert_good_file_still_reported(r)


def test_dangling_symlink_met_in_a_folder_is_skipped_with_a_warning(proj):
    os.symlink("gone.py", proj / "dangling.py")
    os.symlink("gone.txt", proj / "dangling.txt")  # not a file to check: not a word about it
    r, lines = check()
    assert r.exit_code == 1  # good.py's finding; the link is not an error
    assert lines == ["warning: dangling.py: broken symbolic link (its target does not exist); skipped"]
    assert_good_file_still_reported(r)
    # Named on the command line, it is an error.
    r, errors = check("dangling.py", "good.py")
    assert r.exit_code == 2
    assert_one_error(errors, "dangling.py", "broken symbolic link")
    assert_good_file_still_reported(r)


def _deny(monkeypatch, name: str) -> None:
    """Make `name` unreadable, as for a user without permission (the tests may run as root)."""
    real_access, real_read = os.access, Path.read_bytes

    def access(path, mode, *a, **kw):
        if os.path.basename(os.fspath(path)) == name and mode & os.R_OK:
            return False
        return real_access(path, mode, *a, **kw)

    def read_bytes(self):
        if self.name == name:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)


def test_unreadable_path_named_on_the_command_line(proj, monkeypatch):
    write(proj, {"secret.py": AMP, "other.py": AMP})
    os.chmod(proj / "secret.py", 0)
    try:
        _deny(monkeypatch, "secret.py")
        r, errors = check("secret.py", "good.py", "other.py")
    finally:
        os.chmod(proj / "secret.py", 0o644)
    assert r.exit_code == 2
    assert_one_error(errors, "secret.py", "permission denied")
    assert_good_file_still_reported(r)
    assert "other.py:3:10: PF402" in r.stdout


def _vanish_after_discovery(monkeypatch, action):
    real = runner_mod.discover

    def discover(*a, **kw):
        out = real(*a, **kw)
        action()
        return out

    monkeypatch.setattr(runner_mod, "discover", discover)


def test_file_that_disappears_between_discovery_and_reading(proj, monkeypatch):
    write(proj, {"gone.py": AMP})
    _vanish_after_discovery(monkeypatch, lambda: os.unlink(proj / "gone.py"))
    r, errors = check()
    assert r.exit_code == 2
    assert_one_error(errors, "gone.py", "file not found")
    assert_good_file_still_reported(r)


def test_unreadable_file(proj, monkeypatch):
    write(proj, {"secret.py": AMP})
    os.chmod(proj / "secret.py", 0)
    if os.geteuid() == 0:
        # root reads files whatever their mode: make the read fail as it would for a user.
        real = Path.read_bytes

        def read_bytes(self):
            if self.name == "secret.py":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", read_bytes)
    try:
        r, errors = check()
    finally:
        os.chmod(proj / "secret.py", 0o644)
    assert r.exit_code == 2
    assert_one_error(errors, "secret.py", "permission denied")
    assert_good_file_still_reported(r)


def test_read_error_a_directory_where_a_file_was(proj, monkeypatch):
    """Runs as root too: x.py is a file at discovery and a directory when read."""
    write(proj, {"x.py": AMP})

    def swap():
        os.unlink(proj / "x.py")
        os.mkdir(proj / "x.py")

    _vanish_after_discovery(monkeypatch, swap)
    r, errors = check()
    assert r.exit_code == 2
    assert_one_error(errors, "x.py", "cannot read", "is a directory")
    assert_good_file_still_reported(r)


def test_a_fifo_is_not_read(proj):
    os.mkfifo(proj / "pipe.py")
    r, errors = check()
    assert r.exit_code == 2
    assert_one_error(errors, "pipe.py", "not a regular file")
    assert_good_file_still_reported(r)


@pytest.mark.parametrize(
    "toml, cause",
    [
        ("[tool.perflint\n", "invalid TOML"),
        ("[tool.perflint]\nfoo = 1\n", "unknown key `foo`"),
        ("[tool.perflint]\nignore = true\n", "`ignore` must be a list of rule codes"),
        ('[tool.perflint]\nextend-select = ["PF000"]\n', "unknown rule code or prefix `PF000`"),
    ],
)
def test_broken_pyproject(proj, toml, cause):
    write(proj, {"sub/pyproject.toml": toml, "sub/a.py": AMP})
    r, errors = check()
    assert r.exit_code == 2
    assert_one_error(errors, "sub/pyproject.toml", cause)
    assert_good_file_still_reported(r)
    assert "sub/a.py" not in r.stdout


# ---------------------------------------------------------------------------------------
# Internal errors
# ---------------------------------------------------------------------------------------


def _crash(self, facts):
    if "crash_here" in facts.module.code:
        raise ZeroDivisionError("boom")
    return iter(())


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_crashing_rule_is_reported_and_the_run_goes_on(proj, monkeypatch, jobs):
    register_rule(monkeypatch, "PF995", _crash, tokens=(b"torch",))
    # Enough files for worker processes with -j2.
    write(proj, {**{f"m{i}.py": AMP for i in range(9)}, "crash.py": AMP + "crash_here = 1\n"})
    r, errors = check("--extend-select", "PF995", "-j", jobs)
    assert r.exit_code == 2
    assert_one_error(errors, "crash.py", "internal error", "PF995", "ZeroDivisionError", "boom",
                     "this is a bug in perflint; please report it")
    # The other rules still ran on the same file; the other files are untouched.
    assert "crash.py:3:10: PF402" in r.stdout
    assert r.stdout.count(": PF402") == 11


def test_a_worker_process_that_dies_costs_only_its_file(proj, monkeypatch):
    def die(self, facts):
        if "die_here" in facts.module.code:
            os._exit(3)
        return iter(())

    register_rule(monkeypatch, "PF996", die, tokens=(b"torch",))
    write(proj, {**{f"m{i}.py": AMP for i in range(9)}, "die.py": AMP + "die_here = 1\n"})
    r, errors = check("--extend-select", "PF996", "-j", "2")
    assert r.exit_code == 2
    assert_one_error(errors, "die.py", "internal error", "worker process", "died")
    assert r.stdout.count(": PF402") == 10  # good.py and m0 … m8


def test_an_unexpected_failure_is_one_line_not_a_traceback(proj, monkeypatch):
    import perflint.runner as runner

    def broken(*a, **kw):
        raise KeyError("surprise")

    monkeypatch.setattr(runner, "run", broken)
    r = run("check")
    assert r.exit_code == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "internal error" in lines[0] and "surprise" in lines[0]
    assert "please report it" in lines[0]


def test_file_python_parses_but_perflint_cannot(proj):
    """Mixed tabs and spaces that CPython accepts (each line's indentation is consistent
    under both of its tab rules) but libcst does not: perflint's limit, not a syntax error."""
    import ast

    source = "import torch\n\n\ndef f(x):\n\t \tif x:\n \t\t \tpass\n\t \treturn x\n"
    ast.parse(source)  # Python can
    write(proj, {"mixed.py": source})
    r, errors = check()
    assert r.exit_code == 2
    assert_one_error(errors, "mixed.py", "perflint cannot parse this file (Python can)", "tabs and spaces")
    assert "syntax error" not in errors[0]
    assert_good_file_still_reported(r)


def test_broken_config_says_nothing_was_checked(proj):
    write(proj, {"pyproject.toml": "[tool.perflint]\nbogus = 1\n"})
    r = run("check", "--extend-select", "PF402", "--no-cache")
    assert r.exit_code == 2
    assert "No findings" not in r.stdout
    assert "Nothing checked" in r.stdout
    # Only part of the tree under the broken configuration: what was checked is reported,
    # and the summary says the rest was not.
    write(proj, {"pyproject.toml": "[tool.perflint]\n", "sub/pyproject.toml": "[tool.perflint]\nbogus = 1\n",
                 "sub/b.py": AMP})
    r = run("check", "--extend-select", "PF402", "--no-cache", "--output-format", "concise")
    assert r.exit_code == 2
    assert_good_file_still_reported(r)
    assert "Files under a broken configuration were not checked." in r.stdout
