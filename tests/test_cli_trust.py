"""The command line's promises: Ctrl-C, nothing to check, what `fix --diff` cannot show,
errors in every machine format, `-o`, whole help texts, plain `rules` when piped, install
hints, `--add-noqa`, and `fix` stopping its analysis once nothing changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_support import AMP, AMP_FIXED, LOADER, run, write
from perflint import install_hint

TRAIN = (
    "import torch\n"
    "from torch.utils.data import DataLoader\n"
    "loader = DataLoader(ds)  # the loader\n"
    "for x in loader:\n"
    "    y = x.cuda()  # noqa: E501\n"
    "    loss = model(y)\n"
    "    loss.backward()\n"
    "    opt.step()\n"
    "    print(loss.item())\n"
)


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n"})
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---------------------------------------------------------------------------------------
# Ctrl-C, nothing to check, fix --diff with only unsafe fixes
# ---------------------------------------------------------------------------------------


def test_ctrl_c_exits_130_and_says_how_many_files_were_written(proj, monkeypatch):
    write(proj, {"a.py": AMP, "b.py": AMP, "c.py": AMP})
    from perflint import runner

    real = runner.atomic_write
    calls = []

    def write_then_interrupt(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(runner, "atomic_write", write_then_interrupt)
    r = run("fix", "--select", "PF402", "--no-cache", "--jobs", "1")
    assert r.exit_code == 130
    assert "Interrupted: 1 fixed file was already written; the other files are unchanged." in r.stderr
    texts = sorted((proj / n).read_text() for n in ("a.py", "b.py", "c.py"))
    assert texts == sorted([AMP_FIXED, AMP, AMP])


def test_ctrl_c_while_checking_exits_130(proj, monkeypatch):
    write(proj, {"a.py": AMP})
    from perflint import runner

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "discover", interrupted)
    r = run("check", "--no-cache")
    assert r.exit_code == 130 and "Interrupted: no file was written." in r.stderr


def test_a_folder_without_python_files_warns_instead_of_passing(proj):
    write(proj, {"docs/readme.md": "# hi\n"})
    r = run("check", "docs")
    assert r.exit_code == 0
    assert "warning: No Python files found under docs" in r.stderr
    assert "All checks passed" not in r.output
    as_json = run("check", "docs", "--output-format", "json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == []


def test_fix_diff_with_only_unsafe_fixes_says_how_many_and_the_flag(proj):
    write(proj, {"t.py": TRAIN})
    # PF105's non_blocking and PF403's autocast are both unsafe fixes here.
    found = json.loads(run("check", "--no-cache", "--select", "PF103,PF105,PF403", "--output-format", "json").stdout)
    n = sum(1 for d in found if d["fix"] and d["fix"]["applicability"] == "unsafe")
    assert n >= 2 and not any(d["fix"] and d["fix"]["applicability"] == "safe" for d in found)
    r = run("fix", "--diff", "--no-cache", "--select", "PF103,PF105,PF403")
    assert r.exit_code == 0 and r.stdout == ""
    assert f"No safe fixes available; {n} unsafe fixes are available: add --unsafe-fixes to see them." in r.stderr
    assert run("fix", "--diff", "--no-cache", "--unsafe-fixes", "--select", "PF103,PF105,PF403").exit_code == 1


# ---------------------------------------------------------------------------------------
# Files that could not be read or parsed, in every machine format; -o
# ---------------------------------------------------------------------------------------


@pytest.fixture
def broken(proj):
    write(proj, {"bad.py": "import torch\nx = (\n", "ok.py": AMP})
    return proj


def test_json_reports_an_unparsable_file_as_an_object_with_code_null(broken):
    r = run("check", "--output-format", "json", "--no-cache", "--select", "PF402")
    assert r.exit_code == 2
    data = json.loads(r.stdout)
    bad = [d for d in data if d["filename"].endswith("bad.py")]
    assert len(bad) == 1 and bad[0]["code"] is None and bad[0]["severity"] == "error"
    assert bad[0]["location"] == {"row": 2, "column": 5} and "never closed" in bad[0]["message"]
    assert [d["code"] for d in data if d["filename"].endswith("ok.py")] == ["PF402"]


def test_github_annotates_an_unparsable_file(broken):
    r = run("check", "--output-format", "github", "--no-cache", "--select", "PF402")
    lines = r.stdout.splitlines()
    assert any(line.startswith("::error file=bad.py,line=2,col=5,title=perflint (syntax-error)::") for line in lines)
    assert any("PF402" in line for line in lines)


SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0-subset.schema.json"


def test_sarif_reports_an_unparsable_file_and_validates(broken):
    jsonschema = pytest.importorskip("jsonschema")
    r = run("check", "--output-format", "sarif", "--no-cache", "--select", "PF402")
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, json.loads(SARIF_SCHEMA.read_text()))
    invocation = doc["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and "bad.py" in note["message"]["text"]
    assert note["locations"][0]["physicalLocation"]["region"] == {"startLine": 2, "startColumn": 5}
    assert [res["ruleId"] for res in doc["runs"][0]["results"]] == ["PF402"]


def test_sarif_of_a_clean_run_validates(proj):
    jsonschema = pytest.importorskip("jsonschema")
    write(proj, {"ok.py": TRAIN})
    doc = json.loads(run("check", "--output-format", "sarif", "--no-cache", "--extend-select", "PF105,PF403").stdout)
    jsonschema.validate(doc, json.loads(SARIF_SCHEMA.read_text()))
    assert doc["runs"][0]["invocations"][0]["executionSuccessful"] is True
    assert len(doc["runs"][0]["results"]) >= 3


def test_the_schema_rejects_what_sarif_forbids():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SARIF_SCHEMA.read_text())
    good = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": []}]}
    jsonschema.validate(good, schema)
    for bad in ({"version": "2.0.0", "runs": []},
                {"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]},
                {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                               "results": [{"message": {"text": "m"}, "level": "fatal"}]}]},
                {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}},
                                               "results": [{"message": {"text": "m"}, "locations": [
                                                   {"physicalLocation": {"region": {"startLine": 0}}}]}]}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_output_file_takes_the_report(proj):
    write(proj, {"a.py": AMP})
    r = run("check", "--extend-select", "PF402", "--no-cache", "--output-format", "concise", "-o", "report.txt")
    assert r.exit_code == 1 and "PF402" not in r.stdout
    report = (proj / "report.txt").read_text()
    assert "a.py:3:10: PF402" in report and "Found 1 finding." in report
    r = run("check", "--extend-select", "PF402", "--no-cache", "--output-format", "json", "--output-file", "out/r.json")
    assert r.exit_code == 2 and "report.json" not in r.stderr  # a folder that does not exist: one error line
    assert "cannot write the report" in r.stderr


# ---------------------------------------------------------------------------------------
# Help, rules, install hints
# ---------------------------------------------------------------------------------------


def test_help_lists_whole_command_descriptions():
    r = run("--help")
    text = " ".join(r.stdout.split())
    commands = r.stdout.split("Commands:")[1]
    assert "..." not in commands
    assert "Apply safe fixes (and unsafe ones with --unsafe-fixes) to PATHS, then report what is left." in text
    assert "Measure SCRIPT against its fixed version, alternating runs until the speedup is known (needs torch)." \
        in text


def test_install_hints_fit_where_perflint_was_installed_from(tmp_path, monkeypatch):
    checkout = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(checkout)
    assert install_hint("server") == 'pip install -e ".[server]"'
    monkeypatch.chdir(tmp_path)
    assert install_hint("server") == f'pip install -e "{checkout}[server]"'
    import perflint

    fake = tmp_path / "site" / "perflint" / "__init__.py"
    fake.parent.mkdir(parents=True)
    monkeypatch.setattr(perflint, "__file__", str(fake))
    assert install_hint("runtime") == 'pip install "torch-perflint[runtime]"'


# ---------------------------------------------------------------------------------------
# --add-noqa
# ---------------------------------------------------------------------------------------


def test_add_noqa_suppresses_todays_findings_and_nothing_else(proj):
    write(proj, {"t.py": TRAIN})
    sel = ("--extend-select", "PF105,PF403")  # the copy's finding (off by default) shows the merge into a noqa list
    before = run("check", *sel, "--no-cache", "--output-format", "json")
    rows = {(d["location"]["row"], d["code"]) for d in json.loads(before.stdout)}
    assert len(rows) >= 3
    r = run("check", *sel, "--add-noqa", "--no-cache")
    assert r.exit_code == 0, r.output
    n_lines = len({row for row, _ in rows})
    assert f"Added {n_lines} noqa directives." in r.stdout
    text = (proj / "t.py").read_text()
    lines = text.splitlines()
    # (no PF102: a loader without workers whose batch size nothing states)
    assert lines[2] == "loader = DataLoader(ds)  # the loader  # noqa: PF101"
    assert lines[4] == "    y = x.cuda()  # noqa: E501, PF105"  # merged into the existing list
    after = run("check", *sel, "--no-cache")
    assert after.exit_code == 0 and "All checks passed!" in after.stdout
    again = run("check", *sel, "--add-noqa", "--no-cache")
    assert "Added 0 noqa directives." in again.stdout and (proj / "t.py").read_text() == text
    # a new finding is still reported
    (proj / "t.py").write_text(text + "torch.cuda.empty_cache()\nscaler = torch.cuda.amp.GradScaler()\n")
    assert run("check", "--no-cache", "--select", "PF402").exit_code == 1


def test_add_noqa_keeps_line_endings_and_skips_lines_inside_strings():
    from perflint.addnoqa import add_noqa

    crlf = "a = 1\r\nb = f(\r\n    2)\r\n"
    edit = add_noqa(crlf, {2: {"PF101"}})
    assert edit.text == "a = 1\r\nb = f(  # noqa: PF101\r\n    2)\r\n" and edit.added == 1
    in_string = 'x = g("""one\ntwo""")\n'
    edit = add_noqa(in_string, {1: {"PF101"}})
    assert edit.text == in_string and edit.skipped == [1]
    bare = "x = 1  # noqa\n"
    assert add_noqa(bare, {1: {"PF101"}}).text == bare


def test_add_noqa_cannot_be_combined_with_fix(proj):
    write(proj, {"t.py": TRAIN})
    r = run("check", "--add-noqa", "--fix")
    assert r.exit_code == 2 and "--add-noqa" in r.output


# ---------------------------------------------------------------------------------------
# fix stops analysing once nothing changes
# ---------------------------------------------------------------------------------------


def test_fix_analyses_a_file_once_per_pass_and_not_again_at_the_end(monkeypatch):
    from perflint import engine

    calls = []
    real = engine._analyze

    def counted(text, *a, **k):
        calls.append(text)
        return real(text, *a, **k)

    monkeypatch.setattr(engine, "_analyze", counted)
    options = engine.LintOptions(codes=("PF402",), target_torch=(2, 4), prefilter=False)
    result = engine.fix_bytes("a.py", AMP.encode(), options, unsafe=False)
    assert result.fixed_bytes == AMP_FIXED.encode() and result.diagnostics == []
    # one pass that fixes, one that finds nothing left: that analysis gives the report
    assert calls == [AMP, AMP_FIXED]
