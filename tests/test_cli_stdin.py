"""Source from standard input: `check -`, `--stdin-filename PATH`, `fix -` (as in ruff)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cli_support import AMP, AMP_FIXED, CLEAN, write
from perflint.cli import main


def run_stdin(*args: str, data: str | bytes):
    runner = CliRunner(env={"PERFLINT_CACHE_DIR": None, "COLUMNS": "200"})
    return runner.invoke(main, list(args), input=data, catch_exceptions=False)


def test_check_dash_reads_stdin(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_stdin("check", "--extend-select", "PF402", "-", "--output-format", "concise", "--no-cache", data=AMP)
    assert r.exit_code == 1, r.output
    assert r.stdout.startswith("-:3:10: PF402")


def test_stdin_filename_names_the_source_and_picks_its_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"pyproject.toml": '[tool.perflint]\nper-file-ignores = { "scripts/*" = ["PF402"] }\n'})
    r = run_stdin("check", "--extend-select", "PF402", "--stdin-filename", "train.py", "--output-format", "concise",
                  "--no-cache", data=AMP)
    assert r.exit_code == 1 and r.stdout.startswith("train.py:3:10: PF402"), r.output
    r = run_stdin("check", "--extend-select", "PF402", "--stdin-filename", "scripts/train.py", "--no-cache", data=AMP)
    assert r.exit_code == 0, r.output  # its per-file-ignores apply
    # The file on disk is not what is checked.
    write(tmp_path, {"train.py": CLEAN})
    r = run_stdin("check", "--extend-select", "PF402", "-", "--stdin-filename", "train.py", "--output-format", "json", data=AMP)
    assert [d["code"] for d in json.loads(r.stdout)] == ["PF402"]
    assert (tmp_path / "train.py").read_text() == CLEAN


def test_full_format_shows_the_stdin_source_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_stdin("check", "--extend-select", "PF402", "--stdin-filename", "t.py", "--no-cache", data=AMP)
    assert "scaler = torch.cuda.amp.GradScaler()" in r.stdout


def test_fix_dash_writes_the_fixed_source_to_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"t.py": AMP})
    r = run_stdin("fix", "--extend-select", "PF402", "--stdin-filename", "t.py", "--no-cache", data=AMP)
    assert r.exit_code == 0, r.output
    assert r.stdout == AMP_FIXED
    assert "Fixed 1 finding" in r.stderr
    assert (tmp_path / "t.py").read_text() == AMP  # nothing written
    # Nothing to fix: the source comes back as it was, byte for byte.
    r = run_stdin("fix", "--extend-select", "PF402", "-", "--no-cache", data=CLEAN.replace("\n", "\r\n").encode())
    assert r.stdout_bytes == CLEAN.replace("\n", "\r\n").encode()
    # --diff: the diff instead.
    r = run_stdin("fix", "--extend-select", "PF402", "-", "--diff", "--no-cache", data=AMP)
    assert r.exit_code == 1 and r.stdout.startswith("--- -\n+++ -\n")


def test_stdin_that_does_not_parse_is_one_error_under_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_stdin("check", "--extend-select", "PF402", "--stdin-filename", "bad.py", "--no-cache", data="import torch\ndef f(:\n")
    assert r.exit_code == 2
    assert [line for line in r.stderr.splitlines() if line.strip()][0].startswith("error: bad.py: syntax error")
    r = run_stdin("fix", "--extend-select", "PF402", "-", "--no-cache", data="import torch\ndef f(:\n")
    assert r.exit_code == 2 and r.stdout == "import torch\ndef f(:\n"


def test_dash_with_other_paths_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"a.py": AMP})
    r = run_stdin("check", "--extend-select", "PF402", "-", "a.py", data=AMP)
    assert r.exit_code == 2 and "standard input" in r.stderr
