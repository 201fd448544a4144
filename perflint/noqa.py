"""Suppression comments, in ruff's syntax so that one comment serves both tools.

* `# noqa` on the reported line suppresses every finding on it;
* `# noqa: PF102, PF103` suppresses those codes (prefixes such as `PF1` too); codes of
  other tools (`# noqa: E501, PF102`) are allowed alongside;
* `# perflint: noqa` anywhere in a file suppresses the whole file,
  `# perflint: noqa: PF201` that code in the whole file.

Only real comments count: the text is tokenized, so "# noqa" inside a string does nothing.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_CODE = r"[A-Za-z]+[0-9]+"
_CODES = rf"(?P<codes>{_CODE}(?:(?:\s*,\s*|\s+){_CODE})*)"
# `noqa` must end there: `# noqa`, `# noqa: X1`, `# noqa # why`, not `# noqaxyz`.
_LINE = re.compile(rf"#\s*noqa(?::\s*{_CODES}|(?![\w:-]))", re.I)
_FILE = re.compile(rf"#\s*perflint\s*:\s*noqa(?::\s*{_CODES}|(?![\w:-]))", re.I)
_SPLIT = re.compile(r"[\s,]+")


@dataclass
class Suppressions:
    lines: dict[int, set[str] | None] = field(default_factory=dict)  # row → codes (None: all)
    file_all: bool = False
    file_codes: set[str] = field(default_factory=set)

    def suppressed(self, code: str, row: int) -> bool:
        if self.file_all or _matches(code, self.file_codes):
            return True
        if row not in self.lines:
            return False
        codes = self.lines[row]
        return codes is None or _matches(code, codes)


def _matches(code: str, codes: set[str]) -> bool:
    return any(code.startswith(c) for c in codes)


def _codes(m: re.Match) -> set[str] | None:
    raw = m.group("codes")
    if not raw:
        return None
    return {c.upper() for c in _SPLIT.split(raw.strip()) if c}


def _comments(text: str):
    """(row, comment text) for every comment in the source."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
        return
    except (tokenize.TokenError, SyntaxError):
        pass
    # Source that Python 3.11's tokenizer rejects (newer syntax that libcst accepts): fall
    # back to a scan that tracks string literals well enough for comments.
    yield from _scan_comments(text)


_SCAN = re.compile(r"(?P<str>[rRbBuUfF]{0,2}(?:\"\"\"|'''|\"|'))|(?P<com>#[^\r\n]*)|(?P<nl>\r\n|\r|\n)")


def _scan_comments(text: str):
    row = 1
    i = 0
    n = len(text)
    while i < n:
        m = _SCAN.search(text, i)
        if m is None:
            return
        if m.group("nl"):
            row += 1
            i = m.end()
        elif m.group("com"):
            yield row, m.group("com")
            i = m.end()
        else:
            quote = m.group("str").lstrip("rRbBuUfF")
            raw = "r" in m.group("str").lower()
            j = m.end()
            while j < n:
                if text.startswith(quote, j):
                    j += len(quote)
                    break
                c = text[j]
                if c == "\\" and not raw:
                    j += 1
                    if j < n and text[j] == "\n":
                        row += 1
                elif c == "\\" and raw:
                    j += 1
                elif c == "\n":
                    row += 1
                    if len(quote) == 1:
                        break
                j += 1
            i = j


def parse_suppressions(text: str) -> Suppressions:
    sup = Suppressions()
    if "noqa" not in text.lower():
        return sup
    for row, comment in _comments(text):
        fm = _FILE.search(comment)
        if fm:
            codes = _codes(fm)
            if codes is None:
                sup.file_all = True
            else:
                sup.file_codes |= codes
            continue
        m = _LINE.search(comment)
        if m:
            codes = _codes(m)
            if codes is None or (row in sup.lines and sup.lines[row] is None):
                sup.lines[row] = None
            else:
                sup.lines.setdefault(row, set()).update(codes)  # type: ignore[union-attr]
    return sup
