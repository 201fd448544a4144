"""One count of "fixable": `check`'s summary, `fix --diff` and `fix --show-fixes` agree, per
finding (a fix that several findings share fixes each of them) and per applicability."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from cli_support import run

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "fixtures" / "rules"


def _number(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return int(m.group(1))


@pytest.mark.parametrize("name, unsafe", [
    ("PF501.py", True),  # three findings
    ("PF406.py", True),  # a finding that another fix makes moot (TF32 advice inside autocast)
    ("PF402.py", False),
    ("PF105.py", False),  # fixes that uncover new findings: counted apart
])
def test_check_fix_diff_and_show_fixes_count_the_same_findings(tmp_path, monkeypatch, name, unsafe):
    monkeypatch.chdir(tmp_path)
    shutil.copy(RULES / name, tmp_path / name)
    flags = ["--select", "ALL", "--no-cache", "-j1"] + (["--unsafe-fixes"] if unsafe else [])
    checked = run("check", name, *flags)
    fixable = _number(r"\[\*\] (\d+) fixable with `perflint fix", checked.stdout)
    diff = run("fix", name, "--diff", *flags)
    assert _number(r"Would fix (\d+) findings?", diff.stderr) == fixable
    shown = run("fix", name, "--show-fixes", *flags)
    assert _number(r"Fixed (\d+) findings?", shown.stdout) == fixable
    listed = sum(int(n) for n in re.findall(r"^\s+(\d+) × PF\d+ \(", shown.stdout, re.M))
    assert listed == fixable, shown.stdout
    # Nothing fixable is left.
    after = run("check", name, *flags)
    assert not re.search(r"\[\*\] \d+ fixable", after.stdout), after.stdout


def test_unfixable_codes_are_not_counted_or_marked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nunfixable = ["PF402"]\n')
    shutil.copy(RULES / "PF402.py", tmp_path / "a.py")
    r = run("check", "a.py", "--select", "PF402", "--no-cache", "--output-format", "concise")
    assert "PF402" in r.stdout and "[*]" not in r.stdout and "fixable" not in r.stdout
    assert "No fixes available." in run("fix", "a.py", "--select", "PF402", "--diff", "--no-cache").stderr
