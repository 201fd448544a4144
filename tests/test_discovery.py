"""File discovery: .py and .ipynb, .gitignore (nested), excludes, explicit paths, links."""

from __future__ import annotations

import os

import pytest

from cli_support import AMP, notebook, run, write
from perflint.config import Resolver
from perflint.discovery import discover


@pytest.fixture
def root(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n"})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def found(*paths: str, force_exclude: bool = False, **overrides) -> list[str]:
    out = discover(list(paths) or ["."], Resolver(overrides=overrides), force_exclude=force_exclude)
    assert not out.errors, [e.one_line() for e in out.errors]
    return [os.path.relpath(p).replace(os.sep, "/") for p, _ in out.files]


def test_finds_python_files_and_notebooks_only(root):
    write(root, {"a.py": "", "b.ipynb": notebook(("code", "x = 1")), "c.pyi": "", "d.txt": "", "e.pyc": "",
                 "pkg/f.py": "", "pkg/sub/g.py": ""})
    assert found() == ["a.py", "b.ipynb", "pkg/f.py", "pkg/sub/g.py"]


def test_gitignore_nested_and_negated(root):
    write(root, {
        ".git/HEAD": "",
        ".gitignore": "*.gen.py\nlogs/\n/top_only.py\n",
        "a.py": "", "x.gen.py": "", "logs/l.py": "", "top_only.py": "",
        "pkg/top_only.py": "",
        "pkg/.gitignore": "secret.py\n!keep.gen.py\n",
        "pkg/secret.py": "", "pkg/keep.gen.py": "", "pkg/other.gen.py": "", "pkg/m.py": "",
        "pkg/deep/.gitignore": "*\n!*.py\n!*/\n", "pkg/deep/d.py": "", "pkg/deep/notes.ipynb": notebook(),
    })
    assert found() == ["a.py", "pkg/deep/d.py", "pkg/keep.gen.py", "pkg/m.py", "pkg/top_only.py"]
    assert "x.gen.py" in found(respect_gitignore=False)


def test_gitignore_above_the_repository_root_does_not_apply(tmp_path, monkeypatch):
    write(tmp_path, {".gitignore": "*.py\n", "repo/.git/HEAD": "", "repo/pyproject.toml": "[tool.perflint]\n",
                     "repo/a.py": ""})
    monkeypatch.chdir(tmp_path / "repo")
    assert found() == ["a.py"]


def test_default_excludes_and_virtualenvs(root):
    write(root, {"a.py": "", ".venv/lib/x.py": "", "venv/y.py": "", "build/b.py": "", "node_modules/n.py": "",
                 ".git/hooks/h.py": "", "src/build/c.py": "", ".perflint_cache/z.py": ""})
    assert found() == ["a.py"]


def test_exclude_patterns_are_anchored_at_the_config_folder(root):
    write(root, {"pyproject.toml": '[tool.perflint]\nextend-exclude = ["/gen", "docs/*.py"]\n',
                 "gen/a.py": "", "src/gen/b.py": "", "docs/c.py": "", "docs/api/d.py": "", "e.py": ""})
    assert found() == ["docs/api/d.py", "e.py", "src/gen/b.py"]


def test_explicit_paths_are_checked_even_when_ignored_unless_force_exclude(root):
    write(root, {".gitignore": "ignored.py\n", "ignored.py": "", "build/b.py": "", "script": "", "a.py": ""})
    assert found("ignored.py", "build/b.py", "script") == ["build/b.py", "ignored.py", "script"]
    assert found("ignored.py", "build/b.py", "a.py", force_exclude=True) == ["a.py"]
    # An excluded folder named explicitly: its content is checked, excludes still apply inside.
    write(root, {"build/build/c.py": ""})
    assert found("build") == ["build/b.py"]


def test_duplicates_and_overlapping_paths_are_checked_once(root):
    write(root, {"pkg/a.py": "", "pkg/b.py": ""})
    assert found("pkg", "pkg/a.py", "./pkg/a.py", ".") == ["pkg/a.py", "pkg/b.py"]


def test_symlinked_folder_cycle_terminates(root):
    write(root, {"pkg/a.py": ""})
    os.symlink(root / "pkg", root / "pkg" / "again")
    os.symlink(root, root / "pkg" / "up")
    assert found() == ["pkg/a.py"]


def test_a_link_is_checked_by_its_own_name_like_a_file(root):
    # yolov5 links one Markdown file to another name: a linked Markdown file is not Python.
    write(root, {"NOTES.md": "notes \u2014 hi\n", "a.py": "x = 1\n", "real.py": "", "blob.bin": "\x00"})
    os.symlink(root / "NOTES.md", root / "GUIDE.md")
    os.symlink(root / "blob.bin", root / "blob.link")
    os.symlink(root / "real.py", root / "alias.py")
    assert found() == ["a.py", "alias.py"]  # the link to real.py stands for it (one file)
    r = run("check", ".")
    assert r.exit_code == 0, r.stderr


def test_order_is_sorted_whatever_the_creation_order(root):
    names = ["z.py", "a.py", "m/b.py", "B.py", "m/a.py", "_x.py"]
    for n in names:
        write(root, {n: ""})
    assert found() == sorted(found())
    assert found("z.py", "a.py") == ["a.py", "z.py"]


def test_check_reports_a_notebook_in_a_folder(root):
    write(root, {"nb.ipynb": notebook(("markdown", "# t"), ("code", AMP))})
    r = run("check", "--no-cache", "--output-format", "concise", "--select", "PF402")
    assert r.exit_code == 1
    assert r.stdout.startswith("nb.ipynb:cell 2:3:10: PF402")


@pytest.mark.parametrize("rel", ["build", "build/x.py", "a/build/x.py", "a/build.py", "src/venv", "src/venv2/m.py",
                                 ".venv/lib/site.py", "pkg/.git/hooks/x.py", "x.py", "builds/x.py", "a/b/c.py",
                                 "node_modules", "dist.py/x.py"])
@pytest.mark.parametrize("is_dir", [False, True])
def test_plain_name_excludes_match_as_gitignore_patterns_do(rel, is_dir):
    """The default excludes are plain names, matched without a pattern engine: the same
    answer as pathspec's gitignore matching, for files and folders at any depth."""
    import pathspec

    from perflint.config import DEFAULT_EXCLUDE
    from perflint.discovery import _plain_names

    names = _plain_names(DEFAULT_EXCLUDE)
    assert names is not None
    spec = pathspec.GitIgnoreSpec.from_lines(DEFAULT_EXCLUDE)
    assert (not names.isdisjoint(rel.split("/"))) == spec.match_file(rel + ("/" if is_dir else ""))


def test_patterns_with_slashes_or_wildcards_use_the_pattern_engine():
    from perflint.discovery import _plain_names

    assert _plain_names(("build", "*.pyc")) is None
    assert _plain_names(("docs/build",)) is None
    assert _plain_names(("!keep",)) is None
    assert _plain_names(("build", "dist")) == {"build", "dist"}
