"""`perflint check`: selection, output formats, exit status, determinism."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import AMP, CLEAN, LOADER, NO_TORCH, codes, run, write
from perflint.rules import all_rules


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A project folder with an empty [tool.perflint] table, as the current folder."""
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n"})
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---------------------------------------------------------------------------------------
# Exit status
# ---------------------------------------------------------------------------------------


def test_clean_tree_exits_0_and_says_so(proj):
    write(proj, {"a.py": CLEAN, "b.py": NO_TORCH})
    r = run("check")
    assert r.exit_code == 0, r.output
    assert "All checks passed!" in r.stdout
    assert r.stderr == ""


def test_findings_exit_1(proj):
    write(proj, {"a.py": AMP})
    r = run("check", "--extend-select", "PF402", "--no-cache")
    assert r.exit_code == 1
    assert "PF402" in r.stdout


def test_exit_zero_turns_findings_into_0_but_not_errors(proj):
    write(proj, {"a.py": AMP})
    assert run("check", "--exit-zero").exit_code == 0
    write(proj, {"b.py": "def f(:\n"})
    r = run("check", "--exit-zero")
    assert r.exit_code == 2
    assert "b.py" in r.stderr


def test_unknown_option_and_bad_selector_are_usage_errors(proj):
    write(proj, {"a.py": AMP})
    assert run("check", "--no-such-flag").exit_code == 2
    r = run("check", "--select", "XYZ1")
    assert r.exit_code == 2 and "XYZ1" in r.stderr
    r = run("check", "--select", "PF9999")
    assert r.exit_code == 2 and "PF9999" in r.stderr
    r = run("check", "--target-torch", "two")
    assert r.exit_code == 2 and "--target-torch" in r.stderr


def test_default_path_is_the_current_folder(proj):
    write(proj, {"pkg/a.py": AMP})
    r = run("check", "--extend-select", "PF402", "--output-format", "json")
    assert codes(r) == [(os.path.join("pkg", "a.py"), "PF402")]


# ---------------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------------


def _json_codes(*args: str) -> set[str]:
    r = run("check", "--output-format", "json", "--no-cache", *args)
    assert r.exit_code in (0, 1), r.output
    return {d["code"] for d in json.loads(r.stdout)}


def test_select_ignore_and_prefixes(proj):
    write(proj, {"amp.py": AMP, "loader.py": LOADER})
    everything = _json_codes("--select", "ALL")
    assert {"PF402", "PF101"} <= everything
    assert _json_codes("--select", "PF402") == {"PF402"}
    assert _json_codes("--select", "PF4") == {"PF402"}
    assert _json_codes("--select", "PF40") == {"PF402"}
    assert "PF402" not in _json_codes("--select", "PF1")
    assert "PF101" in _json_codes("--select", "PF1")
    assert _json_codes("--select", "PF1,PF4", "--ignore", "PF1") == {"PF402"}
    assert "PF101" not in _json_codes("--ignore", "PF101")
    assert _json_codes("--select", "PF101", "--extend-select", "PF402") == {"PF101", "PF402"}
    # More specific selectors win over less specific ones, as in ruff.
    assert _json_codes("--select", "PF101", "--ignore", "PF1") == {"PF101"}
    assert _json_codes("--select", "ALL", "--ignore", "PF4") == everything - {"PF402"}


def test_default_set_is_the_rules_marked_default(proj, monkeypatch):
    registry = all_rules()
    write(proj, {"amp.py": AMP, "loader.py": LOADER})
    assert "PF101" in _json_codes()
    # PF402 (a maintenance rule) is off by default: only --extend-select adds it.
    assert "PF402" not in _json_codes()
    assert "PF402" in _json_codes("--extend-select", "PF402")
    # Turning PF101's default off removes it from a run without --select.
    monkeypatch.setattr(registry["PF101"], "default", False)
    assert "PF101" not in _json_codes()
    assert "PF101" in _json_codes("--extend-select", "PF101")


# ---------------------------------------------------------------------------------------
# Output formats
# ---------------------------------------------------------------------------------------


def test_full_format_shows_source_caret_fix_marker_and_summary(proj):
    write(proj, {"a.py": AMP, "b.py": LOADER})
    r = run("check", "--select", "PF402,PF101")
    assert r.exit_code == 1
    out = r.stdout
    assert "a.py:3:10: PF402 [*] " in out
    assert re.search(r"^b\.py:3:10: PF101 DataLoader", out, re.M), out  # no fix: no [*]
    assert "3 | scaler = torch.cuda.amp.GradScaler()" in out
    caret = next(line for line in out.splitlines() if "^" in line and "PF402" in line)
    source = next(line for line in out.splitlines() if "torch.cuda.amp.GradScaler()" in line and "|" in line)
    assert caret.index("^") == source.index("torch.cuda.amp.GradScaler")
    assert caret.count("^") == len("torch.cuda.amp.GradScaler")
    assert "= help:" in out
    assert "Found 2 findings." in out
    assert "[*] 1 fixable with `perflint fix`." in out


def test_concise_format(proj):
    write(proj, {"a.py": AMP})
    r = run("check", "--output-format", "concise", "--select", "PF402")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("a.py:3:10: PF402 [*] ")
    assert lines[1] == "Found 1 finding."


@pytest.mark.parametrize("fmt", ["full", "concise"])
def test_text_output_is_not_reinterpreted_as_emoji_or_markup(proj, fmt):
    # A finding on line 100 prints "x.py:100:..." and ":100:" is an emoji code; comments in the
    # source line may hold rich markup.  Both must come out as written.
    body = "import torch\n" + "x = 1\n" * 98 + "scaler = torch.cuda.amp.GradScaler()  # :smile: [bold]b[/bold]\n"
    write(proj, {"a.py": body})
    r = run("check", "--output-format", fmt, "--select", "PF402")
    assert "a.py:100:10: PF402" in r.stdout, r.stdout
    if fmt == "full":
        assert "# :smile: [bold]b[/bold]" in r.stdout, r.stdout
    assert "\U0001f4af" not in r.stdout and "\U0001f604" not in r.stdout


def test_json_format_is_ruff_compatible(proj):
    write(proj, {"a.py": AMP})
    r = run("check", "--output-format", "json", "--select", "PF402")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert len(data) == 1
    d = data[0]
    for key in ("code", "message", "filename", "location", "end_location", "fix", "url", "noqa_row", "cell"):
        assert key in d
    assert d["code"] == "PF402"
    assert d["filename"] == str(proj / "a.py")
    assert d["location"] == {"row": 3, "column": 10}
    assert d["end_location"] == {"row": 3, "column": 10 + len("torch.cuda.amp.GradScaler")}
    assert d["fix"]["applicability"] == "safe"
    assert d["fix"]["message"]
    # The edits turn the file into the fixed one, as ruff's do.
    text = (proj / "a.py").read_text()
    lines = text.splitlines(keepends=True)

    def offset(loc):
        return sum(len(line) for line in lines[: loc["row"] - 1]) + loc["column"] - 1

    for e in sorted(d["fix"]["edits"], key=lambda e: offset(e["location"]), reverse=True):
        text = text[: offset(e["location"])] + e["content"] + text[offset(e["end_location"]) :]
    assert text == 'import torch\n\nscaler = torch.amp.GradScaler("cuda")\n'


def test_json_format_empty_is_an_empty_list(proj):
    write(proj, {"a.py": CLEAN})
    r = run("check", "--output-format", "json")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == []


def _check_sarif(doc: dict) -> None:
    """The properties GitHub code scanning requires of an uploaded SARIF file."""
    assert doc["version"] == "2.1.0"
    assert doc["$schema"].endswith("sarif-2.1.0.json") or "sarif-schema-2.1.0" in doc["$schema"]
    assert isinstance(doc["runs"], list) and doc["runs"]
    for run_ in doc["runs"]:
        driver = run_["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        rule_ids = []
        for rule in driver.get("rules", []):
            assert isinstance(rule["id"], str)
            assert rule["shortDescription"]["text"]
            assert rule["fullDescription"]["text"]
            assert rule["help"]["text"]
            assert rule["defaultConfiguration"]["level"] in ("none", "note", "warning", "error")
            rule_ids.append(rule["id"])
        assert len(rule_ids) == len(set(rule_ids))
        for uri_base in run_.get("originalUriBaseIds", {}).values():
            assert uri_base["uri"].startswith("file://") and uri_base["uri"].endswith("/")
        assert isinstance(run_["results"], list)
        for res in run_["results"]:
            assert res["ruleId"] in rule_ids
            assert rule_ids[res["ruleIndex"]] == res["ruleId"]
            assert res["level"] in ("none", "note", "warning", "error")
            assert isinstance(res["message"]["text"], str) and res["message"]["text"]
            assert 1 <= len(res["locations"]) <= 10
            for loc in res["locations"]:
                phys = loc["physicalLocation"]
                art = phys["artifactLocation"]
                assert isinstance(art["uri"], str) and art["uri"]
                assert " " not in art["uri"]
                if "uriBaseId" in art:
                    assert art["uriBaseId"] in run_["originalUriBaseIds"]
                    assert not art["uri"].startswith("/")
                region = phys["region"]
                assert isinstance(region["startLine"], int) and region["startLine"] >= 1
                for k in ("startColumn", "endLine", "endColumn"):
                    assert isinstance(region[k], int) and region[k] >= 1
                assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])


def test_sarif_format_has_what_code_scanning_requires(proj):
    write(proj, {"a.py": AMP, "sub dir/b.py": LOADER})
    r = run("check", "--output-format", "sarif", "--select", "PF402,PF101")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    _check_sarif(doc)
    results = doc["runs"][0]["results"]
    assert {res["ruleId"] for res in results} == {"PF402", "PF101"}
    uris = {res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for res in results}
    assert uris == {"a.py", "sub%20dir/b.py"}
    amp = next(res for res in results if res["ruleId"] == "PF402")
    assert amp["locations"][0]["physicalLocation"]["region"]["startLine"] == 3
    assert amp["locations"][0]["physicalLocation"]["region"]["startColumn"] == 10


def test_sarif_for_a_file_outside_the_current_folder_uses_an_absolute_uri(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "src/a.py": AMP, "elsewhere/x": ""})
    monkeypatch.chdir(tmp_path / "elsewhere")
    r = run("check", "--extend-select", "PF402", "--output-format", "sarif", str(tmp_path / "src"))
    doc = json.loads(r.stdout)
    _check_sarif(doc)
    art = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert art == {"uri": (tmp_path / "src" / "a.py").as_uri()}


def test_sarif_with_no_findings_is_still_valid(proj):
    write(proj, {"a.py": CLEAN})
    r = run("check", "--output-format", "sarif")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    _check_sarif(doc)
    assert doc["runs"][0]["results"] == []


def test_github_format_is_workflow_annotations(proj):
    write(proj, {"a.py": AMP})
    r = run("check", "--output-format", "github", "--select", "PF402")
    line = r.stdout.strip()
    assert re.fullmatch(
        r"::warning file=a\.py,line=3,col=10,endLine=3,endColumn=35,title=perflint \(PF402\)::a\.py:3:10: PF402 .+", line
    ), line
    assert "\n" not in line
    # Notebook findings name the cell; messages with newlines or percent signs are escaped.
    from perflint.diagnostics import Diagnostic, FileResult, Location, Severity
    from perflint.report.machine import to_github

    d = Diagnostic("PF101", "n", "50% done\nnext", Severity.ERROR, Location(2, 1), Location(2, 5), cell=3)
    out = to_github([FileResult(path=str(proj / "x,y.ipynb"), diagnostics=[d])])
    assert out == ("::error file=x%2Cy.ipynb,line=2,col=1,endLine=2,endColumn=5,title=perflint (PF101)"
                   "::x,y.ipynb:cell 3:2:1: PF101 50%25 done%0Anext")


def test_statistics(proj):
    write(proj, {"a.py": AMP + "s2 = torch.cuda.amp.GradScaler()\n", "b.py": LOADER})
    r = run("check", "--statistics", "--select", "PF402,PF101")
    assert r.exit_code == 1
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()]
    assert rows[0][:3] == ["2", "PF402", "[*]"]
    assert rows[1][:2] == ["1", "PF101"] and "[*]" not in rows[1]
    r = run("check", "--statistics", "--select", "PF402,PF101", "--output-format", "json")
    assert json.loads(r.stdout)[0] == {"code": "PF402", "name": all_rules()["PF402"].name, "count": 2, "fixable": True}


# ---------------------------------------------------------------------------------------
# Target torch, jobs, determinism
# ---------------------------------------------------------------------------------------


def test_target_torch_flag_switches_version_gated_rules(proj):
    write(proj, {"a.py": AMP})
    assert _json_codes("--select", "PF402", "--target-torch", "2.3") == set()
    assert _json_codes("--select", "PF402", "--target-torch", "2.4") == {"PF402"}
    assert _json_codes("--select", "PF402", "--target-torch", "2.6.1") == {"PF402"}


def _many_files(root: Path, n: int = 24) -> None:
    files = {}
    for i in range(n):
        body = [AMP, LOADER, CLEAN, NO_TORCH][i % 4]
        files[f"pkg{i % 3}/m{i:02d}.py"] = body + f"\nscaler_{i} = torch.cuda.amp.GradScaler()\n" * (i % 2)
    files["pkg1/broken.py"] = "import torch\ndef f(:\n"
    write(root, files)


@pytest.mark.parametrize("fmt", ["concise", "json", "full"])
def test_same_output_with_one_or_two_jobs_and_across_runs(proj, fmt):
    _many_files(proj)
    outs = set()
    for args in (["-j1"], ["-j2"], ["-j2"], ["-j1"]):
        r = run("check", "--no-cache", "--output-format", fmt, *args)
        assert r.exit_code == 2
        outs.add((r.stdout, r.stderr))
    assert len(outs) == 1
    stdout, stderr = outs.pop()
    assert "broken.py" in stderr
    if fmt == "concise":
        names = [line.split(":")[0] for line in stdout.splitlines() if line.startswith("pkg")]
        assert names == sorted(names)


def test_python_dash_m_perflint(tmp_path):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "a.py": AMP})
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    p = subprocess.run([sys.executable, "-m", "perflint", "check", "--extend-select", "PF402", "--no-cache", "--output-format", "concise", "a.py"],
                       cwd=tmp_path, capture_output=True, text=True, env=env)
    assert p.returncode == 1, p.stderr
    assert p.stdout.startswith("a.py:3:10: PF402")
    h = subprocess.run([sys.executable, "-m", "perflint", "--help"], capture_output=True, text=True, env=env)
    assert h.returncode == 0 and "Usage: perflint" in h.stdout


def test_progress_bar_only_for_long_runs_on_a_terminal(monkeypatch):
    import io

    import perflint.cli as cli

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(cli.sys, "stderr", io.StringIO())
    assert cli._progress_factory(quiet=False) == (None, None)  # not a terminal
    monkeypatch.setattr(cli.sys, "stderr", Tty())
    assert cli._progress_factory(quiet=True) == (None, None)
    progress, factory = cli._progress_factory(quiet=False)
    assert factory(cli.PROGRESS_MIN_FILES - 1) is None  # a short run: no bar
    advance = factory(cli.PROGRESS_MIN_FILES)
    try:
        assert progress.live.is_started
        for _ in range(cli.PROGRESS_MIN_FILES):
            advance(None)
        assert progress.tasks[0].completed == cli.PROGRESS_MIN_FILES
    finally:
        progress.stop()
