"""benchmarks/review.py: sample findings from a small repository into a sheet, then score it."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "review.py"

TRAIN = """\
import torch


def train(model, loader, opt):
    model.train()
    for x, y in loader:
        x = x.cuda()
        loss = model(x).sum()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
"""


def _run(*args, cwd=None):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _write(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_sample_then_score(tmp_path):
    repo = tmp_path / "toyrepo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    (repo / "pyproject.toml").write_text('[tool.perflint]\nextend-select = ["PF105"]\n')  # off by default
    sheet = tmp_path / "sheet.csv"
    out = _run("sample", str(repo), "--out", str(sheet))
    assert "toyrepo: 1 files," in out
    rows = _read(sheet)
    assert list(rows[0]) == ["key", "repo", "path", "line", "col", "code", "message", "fix", "verdict", "cls",
                             "note"]
    by_code = {r["code"]: r for r in rows}
    assert {"PF105", "PF301"} <= set(by_code)
    r105 = by_code["PF105"]
    assert (r105["repo"], r105["path"], r105["line"]) == ("toyrepo", "train.py", "7")
    assert r105["key"].startswith("toyrepo:train.py:PF105:") and len(r105["key"].rsplit(":", 1)[1]) == 8
    assert "non_blocking" in r105["fix"]

    # one right, one false; the rest left unreviewed
    for r in rows:
        if r["code"] == "PF105":
            r["verdict"] = "right"
        elif r["code"] == "PF301":
            r["verdict"], r["cls"] = "false", "other:test"
    _write(sheet, rows)
    score = _run("score", str(sheet), "--by-repo")
    assert "| PF105 | 1 | 1 | 0 | 0 | 0 | 1.00 | 1.00 |" in score
    assert "| PF301 | 1 | 0 | 1 | 0 | 0 | 0.00 | 0.00 |" in score
    assert "| **total** | 2 | 1 | 1 | 0 | 0 | 0.50 | 0.50 |" in score
    assert "| toyrepo | 2 | 1 | 1 |" in score
    assert "other:test 1" in score

    # a line shift keeps the key: verdicts come back with --prior; --per-rule 1 keeps one per code
    (repo / "train.py").write_text("# header\n\n" + TRAIN)
    sheet2 = tmp_path / "sheet2.csv"
    _run("sample", str(repo), "--out", str(sheet2), "--prior", str(sheet), "--per-rule", "1", "--seed", "3")
    rows2 = _read(sheet2)
    assert len({r["code"] for r in rows2}) == len(rows2)
    r105 = next(r for r in rows2 if r["code"] == "PF105")
    assert r105["line"] == "9" and r105["verdict"] == "right"


def test_a_file_that_does_not_parse_is_not_a_finding(tmp_path):
    repo = tmp_path / "withbroken"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    (repo / "old.py").write_text("def f(async=True):\n    pass\n")  # pre-3.7 keyword: a syntax error now
    sheet = tmp_path / "sheet.csv"
    _run("sample", str(repo), "--out", str(sheet), "--per-rule", "5")
    rows = _read(sheet)
    assert rows and all(r["code"].startswith("PF") for r in rows)
    assert not any(r["path"] == "old.py" for r in rows)
