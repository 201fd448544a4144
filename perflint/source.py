"""Reading and writing source files: encodings, BOMs, line endings and notebooks.

A `.py` file is decoded the way Python itself decodes it (PEP 263 cookie, UTF-8 BOM) and
never newline-translated, so CRLF files stay CRLF.  A notebook's code cells are joined into
one virtual module (so an import in cell 1 resolves a call in cell 3); IPython magics are
masked so the module parses, and everything is put back when the fixed module is split.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import tempfile
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
_MAGIC_RE = re.compile(r"^\s*[%!]")


@dataclass
class CellSpan:
    index: int  # 1-based position among all the notebook's cells
    first_row: int  # 1-based row of the cell's first line in the virtual module
    n_rows: int


@dataclass
class NotebookMap:
    data: dict
    indent: int | None
    trailing_newline: bool
    ensure_ascii: bool
    cells: list[CellSpan] = field(default_factory=list)
    magics: list[str] = field(default_factory=list)  # masked lines, in order

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
        """Turn fixed module text back into the file's bytes (same encoding, BOM, cells)."""
        if self.notebook is None:
            return text.encode(self.encoding)
        return _notebook_bytes(self.notebook, text)


def decode_python(raw: bytes) -> tuple[str, str]:
    """Decode like the interpreter: BOM and coding cookie; returns (text, codec)."""
    if b"\x00" in raw[:8192]:
        raise SourceError("decode-error", "binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        raise SourceError("decode-error", f"bad encoding declaration: {exc.msg}") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise SourceError(
            "decode-error",
            f"cannot decode as {encoding}: {exc.reason} at byte {exc.start}",
        ) from None
    except LookupError:
        raise SourceError("decode-error", f"unknown encoding {encoding!r}") from None
    if encoding == "utf-8-sig" and text.startswith("\ufeff"):
        text = text[1:]
    return text, encoding


def read_source(path: str, raw: bytes | None = None) -> Source:
    if raw is None:
        try:
            raw = Path(path).read_bytes()
        except FileNotFoundError:
            raise SourceError("io-error", "file not found (it may have been removed)") from None
        except IsADirectoryError:
            raise SourceError("io-error", "is a directory") from None
        except OSError as exc:
            raise SourceError("io-error", f"cannot read: {exc.strerror or exc}") from None
    if path.endswith(".ipynb"):
        return _read_notebook(path, raw)
    text, encoding = decode_python(raw)
    return Source(path=path, raw=raw, text=text, encoding=encoding)


def _cell_lines(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        return "".join(src)
    if isinstance(src, str):
        return src
    raise SourceError("notebook-error", "a cell's source is neither a string nor a list of strings")


def _read_notebook(path: str, raw: bytes) -> Source:
    try:
        text = raw.decode("utf-8-sig")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise SourceError("decode-error", f"notebook is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise SourceError("notebook-error", f"invalid notebook JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise SourceError("notebook-error", "not a Jupyter notebook (no 'cells' list)")
    language = (
        data.get("metadata", {}).get("language_info", {}).get("name")
        or data.get("metadata", {}).get("kernelspec", {}).get("language")
        or "python"
    )
    nb = NotebookMap(
        data=data,
        indent=_json_indent(text),
        trailing_newline=text.endswith("\n"),
        ensure_ascii=not any(ord(c) > 127 for c in text),
    )
    parts: list[str] = []
    row = 1
    for i, cell in enumerate(data["cells"], start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or str(language).lower() != "python":
            continue
        body = _cell_lines(cell)
        lines = body.split("\n")
        if lines and lines[0].lstrip().startswith("%%"):
            # A cell magic (%%bash, %%time …) makes the whole cell something else.
            masked = [_mask(line, nb) for line in lines]
        elif _parses(body):
            masked = lines
        else:
            # Shell escapes and line magics; only in cells that do not parse as they are, so
            # a string that happens to hold a line starting with "%" is never touched.
            masked = [_mask(line, nb) if _MAGIC_RE.match(line) else line for line in lines]
        nb.cells.append(CellSpan(index=i, first_row=row, n_rows=len(masked)))
        parts.append("\n".join(masked))
        row += len(masked) + 1  # the boundary line
    virtual = "".join(p + "\n" + CELL_BOUNDARY + "\n" for p in parts)
    return Source(path=path, raw=raw, text=virtual, encoding="utf-8", notebook=nb)


def _parses(body: str) -> bool:
    try:
        ast.parse(body)
    except (SyntaxError, ValueError):
        return False
    return True


def _mask(line: str, nb: NotebookMap) -> str:
    if not line.strip():
        return line
    indent = line[: len(line) - len(line.lstrip())]
    nb.magics.append(line.strip())
    return indent + MAGIC_PLACEHOLDER


def _json_indent(text: str) -> int | None:
    for line in text.splitlines()[1:3]:
        stripped = line.lstrip(" ")
        if stripped != line:
            return len(line) - len(stripped)
    return None


def _notebook_bytes(nb: NotebookMap, text: str) -> bytes:
    chunks = text.split(CELL_BOUNDARY + "\n")
    if chunks and chunks[-1] == "":
        chunks.pop()
    if len(chunks) != len(nb.cells) or text.count(CELL_BOUNDARY) != len(nb.cells):
        raise SourceError("fix-error", "the fix would move code across notebook cells; not written")
    magics = iter(nb.magics)
    data = json.loads(json.dumps(nb.data))  # a copy
    for span, chunk in zip(nb.cells, chunks):
        if not chunk.endswith("\n"):
            raise SourceError("fix-error", "the fix broke a notebook cell boundary; not written")
        body = chunk[:-1]
        out_lines = []
        for line in body.split("\n"):
            if line.strip() == MAGIC_PLACEHOLDER:
                indent = line[: len(line) - len(line.lstrip())]
                try:
                    out_lines.append(indent + next(magics))
                except StopIteration:
                    raise SourceError("fix-error", "lost track of the notebook's IPython magics; not written") from None
            else:
                out_lines.append(line)
        new_body = "\n".join(out_lines)
        cell = data["cells"][span.index - 1]
        if isinstance(cell.get("source"), list):
            cell["source"] = new_body.splitlines(keepends=True)
        else:
            cell["source"] = new_body
    out = json.dumps(data, indent=nb.indent, ensure_ascii=nb.ensure_ascii)
    if nb.trailing_newline:
        out += "\n"
    return out.encode("utf-8")


def atomic_write(path: str, data: bytes) -> None:
    """Write via a temporary file in the same folder and rename it over the original."""
    target = Path(path)
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".perflint-tmp", dir=str(target.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
