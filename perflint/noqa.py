"""Suppression comments, in ruff's syntax so that one comment serves both tools.

* `# noqa` on the reported line suppresses every finding on it;
* `# noqa: PF102, PF103` suppresses those codes (prefixes such as `PF1` too);
* `# perflint: noqa` anywhere in a file suppresses the whole file,
  `# perflint: noqa: PF201` that code in the whole file.

Only real comments count: the text is tokenized, so "# noqa" inside a string does nothing.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_LINE = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+\d+(?:[\s,]+[A-Za-z]+\d+)*))?", re.I)
_FILE = re.compile(r"#\s*perflint\s*:\s*noqa(?::\s*(?P<codes>[A-Za-z]+\d+(?:[\s,]+[A-Za-z]+\d+)*))?", re.I)
_SPLIT = re.compile(r"[\s,]+")

ALL = None  # a blanket suppression


@dataclass
class Suppressions:
    lines: dict[int, set[str] | None] = field(default_factory=dict)
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


def parse_suppressions(text: str) -> Suppressions:
    sup = Suppressions()
    if "noqa" not in text.lower():
        return sup
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return sup
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        fm = _FILE.search(tok.string)
        if fm:
            codes = _codes(fm)
            if codes is None:
                sup.file_all = True
            else:
                sup.file_codes |= codes
            continue
        m = _LINE.search(tok.string)
        if m:
            row = tok.start[0]
            codes = _codes(m)
            if codes is None or sup.lines.get(row, set()) is None:
                sup.lines[row] = None
            else:
                sup.lines.setdefault(row, set()).update(codes)  # type: ignore[union-attr]
    return sup
