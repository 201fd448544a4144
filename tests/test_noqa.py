"""Suppression: `# noqa`, `# noqa: CODES`, `# perflint: noqa`, per-file-ignores."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from cli_support import AMP, run, write
from perflint.noqa import parse_suppressions

LINE = "scaler = torch.cuda.amp.GradScaler()"


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n"})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rows(src: str, *args: str) -> list[int]:
    """Rows with a PF402 finding when `src` is checked."""
    from pathlib import Path

    Path("a.py").write_text(src)
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF402", "a.py", *args)
    assert r.exit_code in (0, 1), r.output
    return [d["location"]["row"] for d in json.loads(r.stdout)]


@pytest.mark.parametrize(
    "comment, suppressed",
    [
        ("# noqa", True),
        ("#noqa", True),
        ("# NOQA", True),
        ("# noqa: PF402", True),
        ("# noqa:PF402", True),
        ("# noqa: PF102, PF402", True),
        ("# noqa: PF102,PF402", True),
        ("# noqa: PF102 PF402", True),
        ("# noqa: E501, PF402  # why", True),
        ("# noqa: PF4", True),  # a prefix
        ("# noqa: pf402", True),
        ("# type: ignore  # noqa", True),
        ("# noqa - it is fine", True),
        ("# noqa: PF102", False),
        ("# noqa: PF4021", False),
        ("# noqa: E501", False),
        ("# noqanot", False),
        ("# not a noqa", False),
        ("# noqa:", False),  # no codes after the colon: not a valid directive
    ],
)
def test_noqa_on_the_reported_line(proj, comment, suppressed):
    found = rows(f"import torch\n{LINE}  {comment}\n")
    assert found == ([] if suppressed else [2])


def test_noqa_on_another_line_does_nothing(proj):
    assert rows(f"import torch  # noqa\n{LINE}\n# noqa\n") == [2]


def test_noqa_inside_a_string_does_nothing(proj):
    assert rows(f'import torch\n{LINE}; s = "# noqa"\n') == [2]
    assert rows(f"import torch\ns = '''\n# noqa\n'''\n{LINE}\n") == [5]
    assert rows(f"import torch\n{LINE}; s = f'{{1}} # noqa: PF402'\n") == [2]


def test_file_level_noqa(proj):
    assert rows(f"# perflint: noqa\nimport torch\n{LINE}\n") == []
    assert rows(f"# perflint: noqa: PF402\nimport torch\n{LINE}\n") == []
    assert rows(f"# perflint: noqa: PF101\nimport torch\n{LINE}\n") == [3]
    assert rows(f"import torch\n{LINE}\ns = '# perflint: noqa'\n") == [2]


def test_noqa_also_stops_a_fix(proj):
    write(proj, {"a.py": f"import torch\n{LINE}  # noqa: PF402\n"})
    r = run("fix", "--select", "PF402", "a.py")
    assert r.exit_code == 0
    assert (proj / "a.py").read_text() == f"import torch\n{LINE}  # noqa: PF402\n"


def test_per_file_ignores(proj):
    write(proj, {"pyproject.toml": '[tool.perflint.per-file-ignores]\n"a.py" = ["PF402"]\n', "b.py": AMP})
    assert rows(AMP) == []
    r = run("check", "--no-cache", "--output-format", "json", "--select", "PF402")
    assert [d["filename"].rsplit("/", 1)[-1] for d in json.loads(r.stdout)] == ["b.py"]


# ---------------------------------------------------------------------------------------
# Property tests of the parser
# ---------------------------------------------------------------------------------------

code_st = st.builds(lambda p, n: f"{p}{n}", st.sampled_from(["PF", "pf", "E", "B", "RUF"]), st.integers(0, 9999))
sep_st = st.sampled_from([",", ", ", " ", " , ", ",  "])


@settings(max_examples=200, deadline=None)
@given(codes=st.lists(code_st, min_size=1, max_size=5), seps=st.lists(sep_st, min_size=5, max_size=5),
       space=st.sampled_from(["", " "]), prefix=st.sampled_from(["", "x = 1  ", "x = 1 # type: ignore "]),
       row=st.integers(1, 5), probe=code_st)
def test_listed_codes_are_suppressed_on_their_row_only(codes, seps, space, prefix, row, probe):
    directive = "# noqa:" + space + "".join(c + (seps[i] if i < len(codes) - 1 else "") for i, c in enumerate(codes))
    lines = ["y = 0"] * 5
    lines[row - 1] = prefix + directive if prefix else directive
    sup = parse_suppressions("\n".join(lines) + "\n")
    upper = [c.upper() for c in codes]
    expected = any(probe.upper().startswith(c) for c in upper)
    assert sup.suppressed(probe.upper(), row) is expected
    for other in range(1, 6):
        if other != row:
            assert not sup.suppressed(probe.upper(), other)


@settings(max_examples=200, deadline=None)
@given(body=st.text(alphabet="# noqa:PF402,'\"\\\n xf{}", max_size=40))
def test_parser_never_crashes_and_string_content_never_counts(body):
    sup = parse_suppressions(body)
    assert isinstance(sup.lines, dict)
    # The same text inside a string literal suppresses nothing.
    quoted = "s = " + repr(body) + "\n"
    assert parse_suppressions(quoted).lines == {}
    assert not parse_suppressions(quoted).file_all
