"""Reading and writing Python source: encodings, BOM, line endings, atomic writes."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, settings, strategies as st

from perflint.source import SourceError, atomic_write, decode_python, read_source


def test_utf8_default_and_bom():
    assert decode_python("x = 'é'\n".encode()) == ("x = 'é'\n", "utf-8")
    text, enc = decode_python(b"\xef\xbb\xbfx = 1\n")
    assert text == "x = 1\n" and enc == "utf-8-sig"


def test_pep263_cookie_on_first_or_second_line():
    assert decode_python(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n")[0].endswith("x = 'é'\n")
    assert decode_python(b"#!/usr/bin/env python\n# coding=cp1252\nx = '\x80'\n")[0].endswith("x = '€'\n")


def test_a_syntax_backport_codec_reads_as_utf8_and_keeps_its_cookie():
    """`# -*- coding: future_fstrings -*-` (FCGF's scripts): the future-fstrings package's codec
    decodes UTF-8 unchanged on every Python with f-strings; the file is read, not refused."""
    raw = "# -*- coding: future_fstrings -*-\nname = 'é'\nprint(f'{name}')\n".encode()
    src = read_source("train.py", raw)
    assert src.text == raw.decode() and src.encoding == "utf-8"
    assert src.encode(src.text.replace("name", "who")) == raw.replace(b"name", b"who")
    assert decode_python(b"# coding: future-annotations\nx: int = 1\n")[1] == "utf-8"


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"x = '\xe9'\n", ["not valid UTF-8", "0xe9", "offset 5", "coding declaration"]),
        (b"# coding: klingon\nx = 1\n", ["unknown encoding", "klingon"]),
        (b"\x00\x01\x02binary", ["binary file"]),
        (b"# coding: ascii\nx = '\xc3\xa9'\n", ["cannot decode as ascii"]),
    ],
)
def test_undecodable_input_gives_one_line_with_the_cause(raw, words):
    with pytest.raises(SourceError) as exc:
        decode_python(raw)
    assert "\n" not in exc.value.message
    for w in words:
        assert w in exc.value.message


def test_newlines_are_not_translated():
    src = read_source("a.py", b"a = 1\r\nb = 2\rc = 3\n")
    assert src.text == "a = 1\r\nb = 2\rc = 3\n"


def test_encode_restores_crlf_for_lines_a_fix_added():
    src = read_source("a.py", b"a = 1\r\nb = 2\r\n")
    assert src.encode("a = 1\r\nnew = 0\nb = 2\r\n") == b"a = 1\r\nnew = 0\r\nb = 2\r\n"
    # A file that already mixes endings is left as the fix made it.
    mixed = read_source("a.py", b"a = 1\r\nb = 2\n")
    assert mixed.encode("a = 1\r\nnew = 0\nb = 2\n") == b"a = 1\r\nnew = 0\nb = 2\n"


def test_encode_keeps_the_encoding():
    src = read_source("a.py", b"# -*- coding: latin-1 -*-\nx = '\xe9'\n")
    assert src.encode(src.text.replace("x", "y")) == b"# -*- coding: latin-1 -*-\ny = '\xe9'\n"
    bom = read_source("a.py", b"\xef\xbb\xbfx = 1\n")
    assert bom.encode("y = 1\n") == b"\xef\xbb\xbfy = 1\n"


_newline = st.sampled_from(["\n", "\r\n"])
_line = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=20)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(_line, max_size=8), nl=_newline, mixed=st.booleans(), final=st.booleans(),
       form=st.sampled_from(["utf-8", "bom", "latin-1"]))
def test_read_then_encode_is_byte_exact(lines, nl, mixed, final, form):
    text = "".join(line + ("\n" if mixed and i % 2 else nl) for i, line in enumerate(lines))
    if not final and text:
        text = text.rstrip("\r\n")
    if form == "latin-1":
        text = "# -*- coding: latin-1 -*-\n" + "".join(c if ord(c) < 256 else "?" for c in text)
        raw = text.encode("latin-1")
    elif form == "bom":
        raw = b"\xef\xbb\xbf" + text.encode("utf-8")
    else:
        raw = text.encode("utf-8")
    src = read_source("a.py", raw)
    assert src.encode(src.text) == raw


def test_atomic_write_replaces_content_keeps_mode_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "a.py"
    p.write_bytes(b"old\n")
    os.chmod(p, 0o604)
    atomic_write(str(p), b"new\n")
    assert p.read_bytes() == b"new\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o604
    assert [x.name for x in tmp_path.iterdir()] == ["a.py"]


def test_atomic_write_through_a_symlink_replaces_the_target(tmp_path):
    target = tmp_path / "real.py"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.py"
    link.symlink_to(target)
    atomic_write(str(link), b"new\n")
    assert link.is_symlink() and target.read_bytes() == b"new\n"


def test_atomic_write_failure_keeps_the_original(tmp_path, monkeypatch):
    p = tmp_path / "a.py"
    p.write_bytes(b"old\n")

    def fail(*a):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        atomic_write(str(p), b"new\n")
    assert p.read_bytes() == b"old\n"
    assert [x.name for x in tmp_path.iterdir()] == ["a.py"]
