"""Reading and writing source files: encodings, BOMs, line endings and notebooks.

A `.py` file is decoded the way Python itself decodes it (PEP 263 cookie, UTF-8 BOM) and
never newline-translated, so CRLF files stay CRLF.  A notebook's code cells are joined into
one virtual module (so an import in cell 1 resolves a call in cell 3); IPython magics and
shell escapes are masked so the module parses, and put back when the fixed module is split.
Writing a notebook back replaces the changed cells' `source` values in the original JSON
text and leaves every other byte (outputs, metadata, markdown cells, layout) as it was.
"""

from __future__ import annotations

import ast
import codecs
import io
import json
import os
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path


class SourceError(Exception):
    """A file that cannot be turned into Python source; the message is one line."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


CELL_BOUNDARY = "# perflint: cell boundary"
MAGIC_PLACEHOLDER = "pass  # perflint: ipython magic"
CELL_MAGIC_PLACEHOLDER = "pass  # perflint: ipython cell magic"
# Line magics, shell escapes, help (`?obj`, `obj?`), `x = !cmd` / `x = %magic`, and the
# automagics IPython runs without their `%` (it has automagic on by default): `pip install …`,
# `conda install …`, `cd folder` (Colab notebooks: `cd DeOldify` after a `!git clone`), and
# `pwd`/`ls`/`popd` alone on their line.
_MAGIC_RE = re.compile(r"^\s*(?:[%!?]|[\w.]+\s*=\s*[%!]|(?:pip|conda|mamba)\s+(?:install|uninstall|list|show)\b"
                       r"|(?:cd|pushd)\s+[^\s=(\[.,:;+\-*/%&|<>!]|(?:cd|pwd|ls|popd)\s*$)"
                       r"|\?\s*$")


@dataclass
class CellSpan:
    index: int  # 1-based position among all the notebook's cells
    first_row: int  # 1-based row of the cell's first line in the virtual module
    n_rows: int


@dataclass
class NotebookMap:
    data: dict
    text: str  # the JSON text as read (BOM removed)
    bom: bool
    indent: int | None
    ensure_ascii: bool
    cells: list[CellSpan] = field(default_factory=list)
    # masked lines, in order: (the original line, the indentation of its placeholder)
    magics: list[tuple[str, str]] = field(default_factory=list)

    def locate(self, row: int) -> tuple[int | None, int]:
        """Map a virtual row to (cell number, row inside that cell)."""
        for span in self.cells:
            if span.first_row <= row < span.first_row + max(span.n_rows, 1):
                return span.index, row - span.first_row + 1
        return None, row


@dataclass
class Source:
    path: str
    raw: bytes
    text: str
    encoding: str
    notebook: NotebookMap | None = None

    def encode(self, text: str) -> bytes:
        """Turn fixed module text back into the file's bytes (same encoding, BOM, line
        endings, and for a notebook the same JSON apart from the changed cells)."""
        if self.notebook is None:
            return _restore_newlines(self.text, text).encode(self.encoding)
        return _notebook_bytes(self.notebook, text)


def _restore_newlines(before: str, after: str) -> str:
    """A CRLF file stays CRLF: bare LFs a fix introduced become CRLF."""
    if "\r\n" in before and "\n" not in before.replace("\r\n", ""):
        return re.sub(r"(?<!\r)\n", "\r\n", after)
    return after


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


# Codecs that packages register to backport syntax (future-fstrings, future-annotations):
# on the Pythons that have that syntax they decode plain UTF-8 and change nothing, and the
# interpreter reads the file only once the package is installed.  Read as UTF-8, the cookie
# kept as it is.
_UTF8_SOURCE_CODECS = frozenset({"future_fstrings", "future-fstrings", "future_annotations", "future-annotations"})


def _utf8_codec_cookie(raw: bytes) -> bool:
    for line in raw.splitlines()[:2]:
        m = _COOKIE.match(line)
        if m is not None:
            return m.group(1).decode("ascii", "replace").lower() in _UTF8_SOURCE_CODECS
    return False


def _declaration_error(raw: bytes, msg: str) -> None:
    if "invalid or missing encoding declaration" in msg:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as uexc:
            raise SourceError(
                "decode-error",
                f"not valid UTF-8 (byte 0x{raw[uexc.start]:02x} at offset {uexc.start}) and no "
                "PEP 263 coding declaration",
            ) from None
    raise SourceError("decode-error", f"bad encoding declaration: {msg}") from None


def decode_python(raw: bytes) -> tuple[str, str]:
    """Decode like the interpreter: BOM and coding cookie; returns (text, codec)."""
    if b"\x00" in raw[:8192]:
        raise SourceError("decode-error", "binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        msg = str(exc.msg if hasattr(exc, "msg") else exc)
        if _utf8_codec_cookie(raw):
            encoding = "utf-8"  # `# -*- coding: future_fstrings -*-`: UTF-8 on any Python with f-strings
        else:
            _declaration_error(raw, msg)
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        where = f"byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        if encoding in ("utf-8", "utf-8-sig"):
            cookie = any(_COOKIE.match(line) for line in raw.splitlines()[:2])
            raise SourceError(
                "decode-error",
                f"not valid UTF-8 ({where})" + ("" if cookie else " and no PEP 263 coding declaration"),
            ) from None
        raise SourceError("decode-error", f"cannot decode as {encoding}: {exc.reason} ({where})") from None
    except LookupError:
        raise SourceError("decode-error", f"unknown encoding {encoding!r}") from None
    if encoding == "utf-8-sig" and text.startswith("\ufeff"):
        text = text[1:]
    return text, encoding


def read_source(path: str, raw: bytes | None = None) -> Source:
    if raw is None:
        raw = read_bytes(path)
    if path.endswith(".ipynb"):
        return _read_notebook(path, raw)
    text, encoding = decode_python(raw)
    return Source(path=path, raw=raw, text=text, encoding=encoding)


def read_bytes(path: str) -> bytes:
    """A file's bytes, or SourceError with a one-line reason."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise SourceError("io-error", "file not found (it may have been removed)") from None
    except IsADirectoryError:
        raise SourceError("io-error", "cannot read: is a directory") from None
    except PermissionError:
        raise SourceError("io-error", "cannot read: permission denied") from None
    except OSError as exc:
        raise SourceError("io-error", f"cannot read: {exc.strerror or exc}") from None


# ----------------------------------------------------------------------------------------
# Notebooks
# ----------------------------------------------------------------------------------------


def cell_source(cell: dict) -> str:
    """A notebook cell's text (its `source`, a string or a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _cell_text(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, str) or (isinstance(src, list) and all(isinstance(s, str) for s in src)):
        return cell_source(cell)
    raise SourceError("notebook-error", "a cell's source is neither a string nor a list of strings")


def _read_notebook(path: str, raw: bytes) -> Source:
    bom = raw.startswith(codecs.BOM_UTF8)
    try:
        text = raw.decode("utf-8-sig")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise SourceError("decode-error", f"notebook is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise SourceError("notebook-error", f"invalid notebook JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise SourceError("notebook-error", "invalid notebook JSON: nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise SourceError("notebook-error", "not a Jupyter notebook (no 'cells' list)")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    lang_info = metadata.get("language_info") if isinstance(metadata.get("language_info"), dict) else {}
    kernel = metadata.get("kernelspec") if isinstance(metadata.get("kernelspec"), dict) else {}
    language = lang_info.get("name") or kernel.get("language") or "python"
    nb = NotebookMap(
        data=data,
        text=text,
        bom=bom,
        indent=_json_indent(text),
        ensure_ascii=not any(ord(c) > 127 for c in text),
    )
    parts: list[str] = []
    row = 1
    for i, cell in enumerate(data["cells"], start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or str(language).lower() != "python":
            continue
        body = _cell_text(cell)
        lines = body.split("\n")
        if lines and lines[0].lstrip().startswith("%%"):
            # A cell magic (%%bash, %%time …) makes the whole cell something else.
            masked = [_mask(line, nb, cell_magic=True) for line in lines]
        elif _parses(body):
            masked = lines
        else:
            # Shell escapes and line magics; only in cells that do not parse as they are, so
            # a string that happens to hold a line starting with "%" is never touched.
            masked = []
            continued = False
            indent = ""
            for line in lines:
                if continued or _MAGIC_RE.search(line):
                    if not continued:
                        indent = line[: len(line) - len(line.lstrip())]
                    # A continuation line (after a trailing backslash) takes the first
                    # line's indentation, so the placeholders form a valid block.
                    masked.append(_mask(line, nb, indent=indent))
                    continued = line.rstrip().endswith("\\")
                else:
                    masked.append(line)
        nb.cells.append(CellSpan(index=i, first_row=row, n_rows=len(masked)))
        parts.append("\n".join(masked))
        row += len(masked) + 1  # the boundary line
    virtual = "".join(p + "\n" + CELL_BOUNDARY + "\n" for p in parts)
    return Source(path=path, raw=raw, text=virtual, encoding="utf-8", notebook=nb)


def _parses(body: str) -> bool:
    try:
        ast.parse(body)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def _mask(line: str, nb: NotebookMap, cell_magic: bool = False, indent: str | None = None) -> str:
    if not line.strip():
        return line
    if cell_magic:
        nb.magics.append((line, ""))
        return CELL_MAGIC_PLACEHOLDER
    if indent is None:
        indent = line[: len(line) - len(line.lstrip())]
    nb.magics.append((line, indent))
    return indent + MAGIC_PLACEHOLDER


def _json_indent(text: str) -> int | None:
    for line in text.splitlines()[1:3]:
        stripped = line.lstrip(" ")
        if stripped != line:
            return len(line) - len(stripped)
    return None


def _split_cells(nb: NotebookMap, text: str) -> list[str]:
    """The fixed virtual module back into one source text per code cell."""
    chunks = text.split(CELL_BOUNDARY + "\n")
    if chunks and chunks[-1] == "":
        chunks.pop()
    if len(chunks) != len(nb.cells) or text.count(CELL_BOUNDARY) != len(nb.cells):
        raise SourceError("fix-error", "the fix would move code across notebook cells; not written")
    magics = iter(nb.magics)
    used = 0
    bodies = []
    for chunk in chunks:
        if not chunk.endswith("\n"):
            raise SourceError("fix-error", "the fix broke a notebook cell boundary; not written")
        out_lines = []
        for line in chunk[:-1].split("\n"):
            stripped = line.strip()
            if stripped in (MAGIC_PLACEHOLDER, CELL_MAGIC_PLACEHOLDER):
                try:
                    original = next(magics)
                except StopIteration:
                    raise SourceError("fix-error", "lost track of the notebook's IPython magics; not written") from None
                used += 1
                line_text, old_indent = original
                indent = line[: len(line) - len(line.lstrip())]
                if stripped == CELL_MAGIC_PLACEHOLDER or indent == old_indent:
                    out_lines.append(line_text)
                elif line_text.startswith(old_indent):
                    # The fix re-indented the block the magic is in: move it along.
                    out_lines.append(indent + line_text[len(old_indent):])
                else:
                    out_lines.append(indent + line_text.lstrip())
            else:
                out_lines.append(line)
        bodies.append("\n".join(out_lines))
    if used != len(nb.magics):
        raise SourceError("fix-error", "lost track of the notebook's IPython magics; not written")
    return bodies


def _notebook_bytes(nb: NotebookMap, text: str) -> bytes:
    bodies = _split_cells(nb, text)
    spans = _source_spans(nb.text)
    out = nb.text
    # Replace from the end so earlier offsets stay valid.
    for span, body in sorted(zip(nb.cells, bodies), key=lambda sb: -sb[0].index):
        cell = nb.data["cells"][span.index - 1]
        if _cell_text(cell) == body:
            continue
        where = spans.get(span.index - 1)
        if where is None:
            raise SourceError("fix-error", f"cannot find cell {span.index}'s source in the notebook JSON; not written")
        start, end, items = where
        out = out[:start] + _encode_source(out, start, end, items, body, cell.get("source"), nb) + out[end:]
    return (codecs.BOM_UTF8 if nb.bom else b"") + out.encode("utf-8")


def _encode_source(text: str, start: int, end: int, items, body: str, old, nb: NotebookMap) -> str:
    dump = lambda s: json.dumps(s, ensure_ascii=nb.ensure_ascii)  # noqa: E731
    if not isinstance(old, list):
        return dump(body)
    lines = re.findall(r"[^\n]*\n|[^\n]+$", body)
    if not lines:
        return "[]"
    items = items or []
    if items:
        first_ws = text[start + 1 : items[0][0]]
        last_ws = text[items[-1][1] : end - 1]
        sep = text[items[0][1] : items[1][0]] if len(items) >= 2 else "," + (first_ws or " ")
    elif nb.indent is not None:
        line_start = text.rfind("\n", 0, start) + 1
        key_indent = re.match(r"[ \t]*", text[line_start:]).group(0)  # type: ignore[union-attr]
        newline = "\r\n" if text[line_start - 2 : line_start] == "\r\n" else "\n"
        first_ws = newline + key_indent + " " * nb.indent
        last_ws = newline + key_indent
        sep = "," + first_ws
    else:
        first_ws, last_ws, sep = "", "", ", "
    return "[" + first_ws + sep.join(dump(s) for s in lines) + last_ws + "]"


# A small JSON scanner that records where each cell's "source" value sits in the text.
_WS = re.compile(r"[ \t\r\n]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_SCALAR = re.compile(r"[^,\]\}\s]+")


def _source_spans(text: str) -> dict[int, tuple[int, int, list[tuple[int, int]] | None]]:
    """cell index → (start, end, item spans if the value is an array) of its "source" value."""
    spans: dict = {}

    def ws(i: int) -> int:
        return _WS.match(text, i).end()  # type: ignore[union-attr]

    def string(i: int) -> int:
        m = _STRING.match(text, i)
        if m is None:
            raise ValueError(i)
        return m.end()

    def value(i: int, path: tuple) -> int:
        c = text[i]
        if c == '"':
            return string(i)
        if c == "{":
            i = ws(i + 1)
            if text[i] == "}":
                return i + 1
            while True:
                kend = string(i)
                key = json.loads(text[i:kend])
                i = ws(kend)
                if text[i] != ":":
                    raise ValueError(i)
                i = ws(i + 1)
                vstart = i
                i = value(i, path + (key,))
                if len(path) == 2 and path[0] == "cells" and key == "source":
                    spans[path[1]] = (vstart, i, _items(vstart, i))
                i = ws(i)
                if text[i] == "}":
                    return i + 1
                if text[i] != ",":
                    raise ValueError(i)
                i = ws(i + 1)
        if c == "[":
            i = ws(i + 1)
            if text[i] == "]":
                return i + 1
            n = 0
            while True:
                i = value(i, path + (n,))
                n += 1
                i = ws(i)
                if text[i] == "]":
                    return i + 1
                if text[i] != ",":
                    raise ValueError(i)
                i = ws(i + 1)
        m = _SCALAR.match(text, i)
        if m is None:
            raise ValueError(i)
        return m.end()

    def _items(start: int, end: int) -> list[tuple[int, int]] | None:
        if text[start] != "[":
            return None
        items = []
        i = ws(start + 1)
        while text[i] != "]":
            j = string(i)
            items.append((i, j))
            i = ws(j)
            if text[i] == ",":
                i = ws(i + 1)
        return items

    try:
        value(ws(0), ())
    except (ValueError, IndexError, RecursionError):
        return {}
    return spans


# ----------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------


class NotReplaced(PermissionError):
    """A file that perflint will not replace: read-only, or its owner or group could not be kept."""


def atomic_write(path: str, data: bytes) -> None:
    """Write via a temporary file in the same folder and rename it over the original.

    The original must be writable by whoever runs perflint, and have a write bit at all: a
    file marked read-only (mode 0444) is not replaced, not even by root.  The new file
    keeps the original's permission bits, owner and group; where the owner or group cannot
    be kept (an unprivileged user fixing another user's group-writable file), the original
    is left as it was and `NotReplaced` says why.  A symbolic link keeps pointing at its
    target, which is what gets replaced.
    """
    import errno
    import tempfile

    target = Path(os.path.realpath(path))
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if not st.st_mode & 0o222 or not os.access(target, os.W_OK):
            raise NotReplaced(errno.EACCES, "permission denied (the file is read-only)")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".perflint-tmp", dir=str(target.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            _keep_owner(tmp, st)
            os.chmod(tmp, st.st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _keep_owner(tmp: str, st: os.stat_result) -> None:
    """Give the temporary file the original's owner and group, or raise `NotReplaced`."""
    import errno

    if not hasattr(os, "chown"):  # no owners to keep (Windows)
        return
    mine = os.stat(tmp)
    if (mine.st_uid, mine.st_gid) == (st.st_uid, st.st_gid):
        return
    try:
        os.chown(tmp, st.st_uid, st.st_gid)
    except OSError:
        what = "owner" if mine.st_uid != st.st_uid else "group"
        raise NotReplaced(errno.EPERM, f"permission denied: the file's {what} could not be kept "
                                       f"(uid {st.st_uid}, gid {st.st_gid}); the file is left as it was") from None
