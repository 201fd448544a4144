"""`perflint fix`: safe and unsafe fixes, --diff, --show-fixes, fixed point, the parse
guard, atomic writes, and files that keep their encoding, BOM and line endings."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import libcst as cst
import pytest

from cli_support import AMP, AMP_FIXED, LOADER, names_matching, register_rule, run, write
from perflint.rules.base import Violation


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n"})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _bump(self, facts):
    """PF991 (safe): step_N → step_N+1 up to step_3; one pass moves each name one step."""
    for node in names_matching(facts, r"step_[0-2]"):
        new = node.with_changes(value=f"step_{int(node.value[-1]) + 1}")
        yield Violation(node, f"`{node.value}` is not the last step", self.safe("bump the step", {node: new}))


def _unsafe_rename(self, facts):
    """PF992 (unsafe): old_name → new_name."""
    for node in names_matching(facts, r"old_name"):
        yield Violation(node, "`old_name` is old", self.unsafe("rename", {node: node.with_changes(value="new_name")}))


# ---------------------------------------------------------------------------------------
# What gets fixed
# ---------------------------------------------------------------------------------------


def test_safe_fix_is_applied_and_reported(proj):
    write(proj, {"a.py": AMP})
    r = run("fix", "--select", "PF402")
    assert r.exit_code == 0, r.output
    assert (proj / "a.py").read_text() == AMP_FIXED
    assert "Fixed 1 finding." in r.stdout
    assert "All checks passed!" not in r.stdout or "Found" not in r.stdout


def test_remaining_findings_are_reported_and_set_the_exit_status(proj):
    write(proj, {"a.py": AMP + "\n" + LOADER})
    r = run("fix", "--select", "PF402,PF101", "--output-format", "concise")
    assert r.exit_code == 1
    text = (proj / "a.py").read_text()
    assert "torch.amp.GradScaler(\"cuda\")" in text
    assert "PF101" in r.stdout and "PF402" not in r.stdout
    assert "Fixed 1 finding." in r.stdout
    assert "Found 1 finding remaining." in r.stdout
    r = run("fix", "--select", "PF402,PF101", "--exit-zero")
    assert r.exit_code == 0


def test_unsafe_fixes_need_the_flag_or_the_config(proj, monkeypatch):
    register_rule(monkeypatch, "PF992", _unsafe_rename, fix_class="unsafe", tokens=(b"old_name",))
    write(proj, {"a.py": "old_name = 1\n"})
    r = run("fix", "--select", "PF992", "-j1")
    assert r.exit_code == 1
    assert (proj / "a.py").read_text() == "old_name = 1\n"
    assert "1 more fixable with `perflint fix --unsafe-fixes`" in r.stdout
    r = run("fix", "--select", "PF992", "-j1", "--unsafe-fixes")
    assert r.exit_code == 0, r.output
    assert (proj / "a.py").read_text() == "new_name = 1\n"

    write(proj, {"a.py": "old_name = 1\n", "pyproject.toml": "[tool.perflint]\nunsafe-fixes = true\n"})
    r = run("fix", "--select", "PF992", "-j1")
    assert r.exit_code == 0, r.output
    assert (proj / "a.py").read_text() == "new_name = 1\n"
    # ... and --no-unsafe-fixes overrides the config.
    write(proj, {"a.py": "old_name = 1\n"})
    r = run("fix", "--select", "PF992", "-j1", "--no-unsafe-fixes")
    assert r.exit_code == 1
    assert (proj / "a.py").read_text() == "old_name = 1\n"


def test_check_marks_unsafe_fixes_fixable_only_with_unsafe_fixes(proj, monkeypatch):
    register_rule(monkeypatch, "PF992", _unsafe_rename, fix_class="unsafe", tokens=(b"old_name",))
    write(proj, {"a.py": "old_name = 1\n"})
    r = run("check", "--select", "PF992", "-j1", "--no-cache", "--output-format", "concise")
    assert "PF992 `old_name`" in r.stdout and "[*]" not in r.stdout.splitlines()[0]
    r = run("check", "--select", "PF992", "-j1", "--no-cache", "--output-format", "concise", "--unsafe-fixes")
    assert "PF992 [*] `old_name`" in r.stdout


def test_fixes_are_applied_to_a_fixed_point(proj, monkeypatch):
    register_rule(monkeypatch, "PF991", _bump, fix_class="safe", tokens=(b"step_",))
    write(proj, {"a.py": "step_0 = 1\nprint(step_1)\n"})
    r = run("fix", "--select", "PF991", "-j1", "--show-fixes")
    assert r.exit_code == 0, r.output
    assert (proj / "a.py").read_text() == "step_3 = 1\nprint(step_3)\n"
    # 3 passes for step_0, 2 for step_1: the 2 findings `check` reported, and 3 that only
    # exist once a fix is in.
    assert "Fixed 2 findings (and 3 more that the fixes uncovered):" in r.stdout
    assert "2 × PF991 (test-rule-pf991) (+3 that the fixes uncovered)" in r.stdout


def test_fix_that_does_not_parse_is_never_written(proj, monkeypatch):
    def bad(self, facts):
        for node in names_matching(facts, r"old_name"):
            yield Violation(node, "bad", self.safe("break it", {node: cst.Name("lambda")}))

    register_rule(monkeypatch, "PF993", bad, fix_class="safe", tokens=(b"old_name",))
    write(proj, {"a.py": "old_name = 1\n"})
    before = (proj / "a.py").read_bytes()
    r = run("fix", "--select", "PF993", "-j1")
    assert r.exit_code == 2
    assert (proj / "a.py").read_bytes() == before
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "a.py" in err[0] and "does not parse" in err[0]
    assert "Traceback" not in r.output


def test_a_bad_fix_is_dropped_and_the_good_ones_still_apply(proj, monkeypatch):
    def bad(self, facts):
        for node in names_matching(facts, r"old_name"):
            yield Violation(node, "bad", self.safe("break it", {node: cst.Name("lambda")}))

    register_rule(monkeypatch, "PF993", bad, fix_class="safe", tokens=(b"old_name",))
    write(proj, {"a.py": "old_name = 1\n" + AMP, "b.py": AMP})
    r = run("fix", "--select", "PF993,PF402", "-j1", "--output-format", "concise")
    assert r.exit_code == 2
    assert (proj / "a.py").read_text() == "old_name = 1\n" + AMP_FIXED
    assert (proj / "b.py").read_text() == AMP_FIXED
    assert "a fix for PF993 produced code that does not parse" in r.stderr
    assert "PF993" in r.stdout  # still reported as a finding


# ---------------------------------------------------------------------------------------
# --diff and --show-fixes
# ---------------------------------------------------------------------------------------


def test_diff_prints_a_unified_diff_and_writes_nothing(proj):
    write(proj, {"a.py": AMP, "clean.py": AMP_FIXED})
    r = run("fix", "--diff", "--select", "PF402")
    assert r.exit_code == 1
    assert (proj / "a.py").read_text() == AMP
    assert r.stdout.splitlines()[:2] == ["--- a.py", "+++ a.py"]
    assert "-scaler = torch.cuda.amp.GradScaler()" in r.stdout
    assert '+scaler = torch.amp.GradScaler("cuda")' in r.stdout
    assert "clean.py" not in r.stdout
    assert "Would fix 1 finding." in r.stderr
    r = run("fix", "--diff", "--select", "PF402", "clean.py")
    assert r.exit_code == 0 and r.stdout == ""
    # check --diff is the same thing.
    r = run("check", "--diff", "--select", "PF402")
    assert r.exit_code == 1 and "+scaler = torch.amp.GradScaler" in r.stdout
    assert (proj / "a.py").read_text() == AMP
    # --exit-zero makes a diff exit 0 too (as in ruff); the diff is still printed.
    r = run("fix", "--diff", "--exit-zero", "--select", "PF402")
    assert r.exit_code == 0 and "+scaler = torch.amp.GradScaler" in r.stdout


def test_check_fix_is_fix(proj):
    write(proj, {"a.py": AMP})
    r = run("check", "--fix", "--select", "PF402")
    assert r.exit_code == 0
    assert (proj / "a.py").read_text() == AMP_FIXED


def test_show_fixes_lists_fixes_by_file_and_rule(proj):
    write(proj, {"a.py": AMP + "s2 = torch.cuda.amp.GradScaler()\n", "b.py": AMP})
    r = run("fix", "--show-fixes", "--select", "PF402")
    assert r.exit_code == 0
    out = r.stdout
    assert "Fixed 3 findings:" in out
    assert "- a.py:\n    2 × PF402" in out
    assert "- b.py:\n    1 × PF402" in out


# ---------------------------------------------------------------------------------------
# How files are written
# ---------------------------------------------------------------------------------------


def test_write_is_atomic_and_keeps_the_mode(proj, monkeypatch):
    write(proj, {"a.py": AMP})
    os.chmod(proj / "a.py", 0o751)
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((os.path.basename(src), os.path.basename(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    assert run("fix", "--select", "PF402").exit_code == 0
    assert (proj / "a.py").read_text() == AMP_FIXED
    assert stat.S_IMODE(os.stat(proj / "a.py").st_mode) == 0o751
    ours = [(src, dst) for src, dst in replaced if dst == "a.py"]
    assert len(ours) == 1 and ours[0][0].startswith(".a.py.")
    assert sorted(p.name for p in proj.iterdir() if p.name.startswith(".a.py")) == []


def test_a_failed_write_leaves_the_original_and_no_temporary_file(proj, monkeypatch):
    write(proj, {"a.py": AMP})

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    r = run("fix", "--select", "PF402", "--no-cache")
    assert r.exit_code == 2
    assert (proj / "a.py").read_text() == AMP
    assert "No space left on device" in r.stderr
    assert sorted(p.name for p in proj.iterdir()) == ["a.py", "pyproject.toml"]


def test_a_read_only_file_is_not_replaced(proj):
    write(proj, {"a.py": AMP, "b.py": AMP})
    os.chmod(proj / "a.py", 0o444)
    before = os.stat(proj / "a.py")
    r = run("fix", "--select", "PF402", "--no-cache")
    assert r.exit_code == 2
    errors = [line for line in r.stderr.splitlines() if "a.py" in line]
    assert len(errors) == 1 and "permission denied" in errors[0], r.stderr
    assert (proj / "a.py").read_text() == AMP
    after = os.stat(proj / "a.py")
    assert (after.st_ino, stat.S_IMODE(after.st_mode)) == (before.st_ino, 0o444)
    assert (proj / "b.py").read_text() == AMP_FIXED  # the other file is still fixed
    assert "Fixed 1 finding" in r.output
    assert sorted(p.name for p in proj.iterdir() if p.name.startswith(".")) == []


def test_a_file_whose_owner_cannot_be_kept_is_not_replaced(proj, monkeypatch):
    write(proj, {"a.py": AMP})
    real_stat = os.stat

    class Other:
        """The file as another user's: same bits, uid/gid that the temporary file lacks."""

        def __init__(self, st):
            self._st = st

        def __getattr__(self, name):
            if name in ("st_uid", "st_gid"):
                return getattr(self._st, name) + 4242
            return getattr(self._st, name)

    target = str(proj / "a.py")
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: Other(real_stat(p, *a, **k))
                        if os.fspath(p) == target else real_stat(p, *a, **k))
    monkeypatch.setattr(os, "chown", lambda *a, **k: (_ for _ in ()).throw(PermissionError(1, "Operation not permitted")))
    r = run("fix", "--select", "PF402", "--no-cache")
    assert r.exit_code == 2
    assert "owner could not be kept" in r.stderr and "left as it was" in r.stderr
    assert (proj / "a.py").read_text() == AMP
    assert sorted(p.name for p in proj.iterdir() if p.name.startswith(".")) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to own files as another user")
def test_a_fixed_file_keeps_its_owner_and_group(proj):
    write(proj, {"a.py": AMP})
    os.chown(proj / "a.py", 4321, 4322)
    assert run("fix", "--select", "PF402", "--no-cache").exit_code == 0
    st = os.stat(proj / "a.py")
    assert (proj / "a.py").read_text() == AMP_FIXED
    assert (st.st_uid, st.st_gid) == (4321, 4322)


def _as_nobody(args, cwd):
    """Run `perflint ARGS` as the unprivileged user 65534, or None where this cannot be arranged."""
    import subprocess
    import sys

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None

    def drop():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    env = {**os.environ, "PERFLINT_CACHE_DIR": "", "HOME": str(cwd)}
    try:
        probe = subprocess.run([sys.executable, "-c", "import perflint.cli"], preexec_fn=drop, cwd=cwd, env=env,
                               capture_output=True)
    except OSError:
        return None
    if probe.returncode != 0:  # this checkout is not readable by that user
        return None
    return subprocess.run([sys.executable, "-m", "perflint", *args], preexec_fn=drop, cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.fixture
def shared_folder():
    """A world-writable folder outside pytest's tmp_path (which only root may enter)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="perflint-shared-"))
    os.chmod(folder, 0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_an_unprivileged_user_cannot_replace_another_users_file(shared_folder):
    shared = shared_folder
    write(shared, {"ro.py": AMP, "rw.py": AMP})
    os.chmod(shared / "ro.py", 0o444)
    os.chmod(shared / "rw.py", 0o666)  # writable by the user, but owned by root
    r = _as_nobody(["fix", "--select", "PF402", "--no-cache", "ro.py", "rw.py"], shared)
    if r is None:
        pytest.skip("needs root, and a checkout the unprivileged user can read")
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.splitlines()
    assert any("ro.py" in line and "permission denied" in line for line in err), r.stderr
    assert any("rw.py" in line and "owner could not be kept" in line for line in err), r.stderr
    for name in ("ro.py", "rw.py"):
        assert (shared / name).read_text() == AMP
        assert os.stat(shared / name).st_uid == 0
    assert "Fixed" not in r.stdout + r.stderr
    assert sorted(p.name for p in shared.iterdir()) == ["ro.py", "rw.py"]


def test_a_symlinked_file_stays_a_symlink(proj):
    write(proj, {"real/a.py": AMP})
    (proj / "link.py").symlink_to(proj / "real" / "a.py")
    assert run("fix", "--select", "PF402", "link.py").exit_code == 0
    assert (proj / "link.py").is_symlink()
    assert (proj / "real" / "a.py").read_text() == AMP_FIXED


@pytest.mark.parametrize(
    "before, after",
    [
        pytest.param(
            b"# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\nscaler = torch.cuda.amp.GradScaler()\n",
            b"# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\nscaler = torch.amp.GradScaler(\"cuda\")\n",
            id="pep263-latin-1",
        ),
        pytest.param(
            b"\xef\xbb\xbfimport torch\nname = 'caf\xc3\xa9'\nscaler = torch.cuda.amp.GradScaler()\n",
            b"\xef\xbb\xbfimport torch\nname = 'caf\xc3\xa9'\nscaler = torch.amp.GradScaler(\"cuda\")\n",
            id="utf-8-bom",
        ),
        pytest.param(
            b"import torch\r\n\r\nscaler = torch.cuda.amp.GradScaler()\r\nx = '''a\r\nb'''\r\n",
            b"import torch\r\n\r\nscaler = torch.amp.GradScaler(\"cuda\")\r\nx = '''a\r\nb'''\r\n",
            id="crlf",
        ),
        pytest.param(
            b"\xef\xbb\xbfimport torch\r\nscaler = torch.cuda.amp.GradScaler()\r\n",
            b"\xef\xbb\xbfimport torch\r\nscaler = torch.amp.GradScaler(\"cuda\")\r\n",
            id="bom-and-crlf",
        ),
        pytest.param(
            b"import torch\nscaler = torch.cuda.amp.GradScaler()",
            b"import torch\nscaler = torch.amp.GradScaler(\"cuda\")",
            id="no-final-newline",
        ),
    ],
)
def test_fix_keeps_encoding_bom_and_line_endings_byte_exact(proj, before, after):
    (proj / "a.py").write_bytes(before)
    r = run("fix", "--select", "PF402", "a.py")
    assert r.exit_code == 0, r.output
    assert (proj / "a.py").read_bytes() == after


def test_a_crlf_file_stays_crlf_when_a_fix_adds_lines(proj, monkeypatch):
    def add_line(self, facts):
        if "added" in facts.module.code:
            return
        for node in facts.module.body:
            if isinstance(node, cst.SimpleStatementLine) and "old_name" in facts.module.code_for_node(node):
                new = cst.FlattenSentinel([node, cst.parse_statement("added = 1\n")])
                yield Violation(node, "add a line", self.safe("add", {node: new}))

    register_rule(monkeypatch, "PF994", add_line, fix_class="safe", tokens=(b"old_name",))
    (proj / "a.py").write_bytes(b"old_name = 1\r\nother = 2\r\n")
    run("fix", "--select", "PF994", "-j1")
    data = (proj / "a.py").read_bytes()
    assert data.startswith(b"old_name = 1\r\nadded = 1\r\n")
    assert b"\n" not in data.replace(b"\r\n", b"")
    ast.parse(data)
