"""`perflint.api` and the containment of perflint's libcst speed-ups (`perflint.cstprivate`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from perflint.api import PerflintError, check_source, fix_source

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "fixtures" / "workloads" / "image_classifier.py"

TRAIN = textwrap.dedent('''\
    import torch
    from torch.utils.data import DataLoader

    scaler = torch.cuda.amp.GradScaler()
    loader = DataLoader(ds, batch_size=8)
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True)).sum()
        loss.backward()
        opt.step()
        print(loss.item())
''')


def _python(code: str) -> str:
    """Run `code` in a fresh interpreter (this one may have run the command line, which
    turns the speed-ups on); returns its stdout."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_check_source_reports_what_check_reports():
    found = [(d.location.row, d.code) for d in check_source(TRAIN, path="train.py", config=False)]
    assert (5, "PF101") in found
    assert (4, "PF402") not in found and (10, "PF201") not in found  # off by default
    found = [(d.location.row, d.code) for d in check_source(TRAIN, path="train.py", extend_select=["PF201"],
                                                              config=False)]
    assert (5, "PF101") in found and (10, "PF201") in found


def test_select_ignore_and_target_torch_act_as_the_options():
    assert {d.code for d in check_source(TRAIN, path="train.py", select="PF402", config=False)} == {"PF402"}
    assert "PF402" not in {d.code for d in check_source(TRAIN, path="train.py", ignore=["PF402"], config=False)}
    # PF402's fix applies from torch 2.4: on 2.3 the rule stays silent.
    assert not check_source(TRAIN, path="train.py", select="PF402", target_torch="2.3", config=False)


def test_fix_source_applies_safe_fixes_and_says_what_is_left():
    r = fix_source(TRAIN, path="train.py", select="PF402", config=False)
    assert r.changed and r.applied == {"PF402": 1}
    assert 'torch.amp.GradScaler("cuda")' in r.text and r.remaining == []
    unchanged = fix_source(TRAIN, path="train.py", select="PF201", config=False)
    assert unchanged.text == TRAIN and not unchanged.changed and [d.code for d in unchanged.remaining] == ["PF201"]


def test_bad_input_raises_one_line_errors():
    with pytest.raises(PerflintError, match=r"^a\.py: syntax-error: line 1"):
        check_source("x = (\n", path="a.py")
    with pytest.raises(PerflintError, match="unknown rule code or prefix `PF999`"):
        check_source("x = 1\n", select="PF999")


def test_the_configuration_above_the_path_applies(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nignore = ["PF201"]\n')
    codes = {d.code for d in check_source(TRAIN, path=str(tmp_path / "train.py"))}
    assert "PF201" not in codes and "PF101" in codes
    (tmp_path / "pyproject.toml").write_text("[tool.perflint]\nselect = 3\n")
    with pytest.raises(PerflintError, match="pyproject.toml"):
        check_source(TRAIN, path=str(tmp_path / "train.py"))


def test_the_configurations_unfixable_codes_are_not_fixed(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nselect = ["PF402", "PF102"]\nunfixable = ["PF402"]\n')
    r = fix_source(TRAIN, path=str(tmp_path / "train.py"))
    assert "PF402" not in r.applied and "torch.cuda.amp.GradScaler()" in r.text
    assert "PF402" in {d.code for d in r.remaining}
    (tmp_path / "pyproject.toml").write_text('[tool.perflint]\nselect = ["PF402"]\nfixable = ["PF402"]\n')
    assert fix_source(TRAIN, path=str(tmp_path / "train.py")).applied == {"PF402": 1}


def test_the_file_level_forms_report_bad_input_in_the_result():
    from perflint.api import LintOptions, check_file, fix_file

    options = LintOptions(codes=("PF402",))
    result = check_file("a.py", b"x = (\n", options)
    assert not result.diagnostics and [e.kind.value for e in result.errors] == ["syntax-error"]
    fixed = fix_file("train.py", TRAIN.encode(), options, unsafe=False)
    assert fixed.fixes_applied == {"PF402": 1} and b'torch.amp.GradScaler("cuda")' in fixed.fixed_bytes


def test_the_command_line_server_and_runtime_check_through_the_api():
    """Only `perflint.api` calls the engine's entry points: the CLI's workers, the language
    server and the runtime go through it."""
    import ast

    entry = {"lint_bytes", "fix_bytes", "fix_text", "fix_source"}
    offenders = []
    for path in sorted([*(ROOT / "perflint").rglob("*.py"), *(ROOT / "runtime").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("perflint/api.py", "perflint/engine.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "perflint.engine":
                offenders += [f"{rel}: {a.name}" for a in node.names if a.name in entry]
            elif isinstance(node, ast.Attribute) and node.attr in entry and \
                    isinstance(node.value, ast.Name) and node.value.id == "engine":
                offenders.append(f"{rel}: engine.{node.attr}")
    assert offenders == []


def test_threads_get_the_answers_of_one_thread():
    text = WORKLOAD.read_text()

    def both(_):
        checked = [(d.code, d.location.row, d.location.column, d.message) for d in check_source(text, path=str(WORKLOAD))]
        return checked, fix_source(text, path=str(WORKLOAD), unsafe=True).text

    alone = both(0)
    assert alone[0] and alone[1] != text
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(both, range(12)))
    assert all(a == alone for a in answers)


def test_importing_perflint_leaves_libcst_alone():
    out = _python("""
        import gc
        from abc import ABCMeta
        import libcst as cst
        thresholds = gc.get_threshold()
        hash_before = cst.Name.__dict__.get("__hash__") or cst.CSTNode.__dict__.get("__hash__")
        import perflint.api, perflint.cli, perflint.engine, perflint.rules, perflint.server.checker
        from perflint.api import check_source
        from perflint.rules import all_rules
        all_rules()
        check_source(open("fixtures/workloads/image_classifier.py").read(), path="x.py")
        assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0
        assert type(cst.Name) is ABCMeta, type(cst.Name)
        assert (cst.Name.__dict__.get("__hash__") or cst.CSTNode.__dict__.get("__hash__")) is hash_before
        try:
            cst.Name("not a valid name!")
        except cst.CSTValidationError:
            print("validated")
    """)
    assert out.strip() == "validated"


def test_perflints_own_process_collects_cycles_less_often():
    out = _python("""
        import gc
        from perflint import ownership
        before = gc.get_threshold()
        ownership.own()
        frozen = gc.get_freeze_count()
        ownership.own()  # a second run in the process freezes nothing more
        print(before[0] < 100_000, gc.get_threshold()[0], frozen > 0, gc.get_freeze_count() == frozen)
    """)
    assert out.split() == ["True", "100000", "True", "True"]


def test_concurrent_parses_in_perflints_own_process_leave_validation_on():
    out = _python("""
        import threading
        import libcst as cst
        from perflint import cstprivate, ownership
        ownership.own()
        text = open("fixtures/workloads/image_classifier.py").read()
        barrier = threading.Barrier(4)

        def parse():
            barrier.wait()
            for _ in range(3):
                cstprivate.parse_module(text)

        threads = [threading.Thread(target=parse) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert cstprivate.claimed() and cstprivate.validation_on()
        try:
            cst.Name("not a valid name!")
        except cst.CSTValidationError:
            print("validated")
    """)
    assert out.strip() == "validated"


def test_the_speed_ups_change_no_answer():
    """The command line (speed-ups on) and the library (stock libcst) report the same."""
    paths = sorted(str(p) for p in (ROOT / "fixtures" / "workloads").glob("*.py"))
    cli = subprocess.run([sys.executable, "-m", "perflint", "check", "--no-cache", "--output-format", "json",
                          "--exit-zero", "--select", "ALL", *paths],
                         capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 0, cli.stderr
    via_cli = sorted((Path(d["filename"]).name, d["code"], d["location"]["row"], d["location"]["column"])
                     for d in json.loads(cli.stdout))
    library = json.loads(_python(f"""
        import json
        from pathlib import Path
        from perflint.api import check_source
        out = []
        for p in {paths!r}:
            out += [(Path(p).name, d.code, d.location.row, d.location.column)
                    for d in check_source(Path(p).read_text(), path=p, select="ALL")]
        print(json.dumps(out))
    """))
    assert via_cli and sorted(map(tuple, library)) == via_cli


def test_the_private_libcst_api_perflint_relies_on_is_there():
    """A libcst that moves these breaks positions, minimal edits and the speed-ups: the
    pyproject bound (<1.10) is the last version range this was checked on."""
    from perflint import cstprivate

    assert cstprivate._REAL_POST_INIT is not None
    state = cstprivate.CodegenState(default_indent="    ", default_newline="\n")
    assert hasattr(state, "tokens")
