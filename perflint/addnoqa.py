"""`perflint check --add-noqa`: suppress today's findings in place, as ruff's `--add-noqa`
does, so that CI can start strict on new code.

Each reported line gets `# noqa: PFxxx` for the codes reported on it; a line that already
has a `# noqa: …` list gets the new codes merged into it.  The comment goes at the end of
the line the finding is reported on (that is the line `# noqa` is read from); a line that
ends inside a multi-line string cannot take a comment and is left as it is, and said so.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

from perflint.noqa import _LINE, _SPLIT

_EOL = re.compile(r"(\r\n|\r|\n)")


@dataclass
class NoqaEdit:
    text: str  # the new source
    added: int = 0  # lines that got a comment or new codes in theirs
    skipped: list[int] = field(default_factory=list)  # rows that end inside a string


def _rows_ending_in_strings(text: str) -> set[int]:
    """Rows whose end is inside a string token (a comment there would become string text)."""
    rows: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.start[0] != tok.end[0] and tok.type in (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)):
                rows.update(range(tok.start[0], tok.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return rows


def _comments_by_row(text: str) -> dict[int, tuple[int, str]]:
    """row → (column, text) of the comment on that row."""
    out: dict[int, tuple[int, str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = (tok.start[1], tok.string)
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def add_noqa(text: str, codes_by_row: dict[int, set[str]]) -> NoqaEdit:
    """`text` with a `# noqa` comment for the codes of each row (1-based)."""
    parts = _EOL.split(text)
    # parts alternate line, ending, line, ending, …, last line (maybe empty)
    lines = parts[0::2]
    endings = parts[1::2] + [""]
    in_string = _rows_ending_in_strings(text)
    comments = _comments_by_row(text)
    out = NoqaEdit(text)
    for row in sorted(codes_by_row):
        if row < 1 or row > len(lines):
            continue
        if row in in_string:
            out.skipped.append(row)
            continue
        codes = set(codes_by_row[row])
        line = lines[row - 1]
        found = comments.get(row)
        m = _LINE.search(found[1]) if found else None
        if m is not None:
            if not m.group("codes"):
                continue  # a bare `# noqa` suppresses everything already
            have = [c for c in _SPLIT.split(m.group("codes").strip()) if c]
            new = sorted(codes - {c.upper() for c in have})
            if not new:
                continue
            start = found[0] + m.start("codes")
            end = found[0] + m.end("codes")
            lines[row - 1] = line[:start] + ", ".join(have + new) + line[end:]
        else:
            lines[row - 1] = line.rstrip(" \t") + "  # noqa: " + ", ".join(sorted(codes))
        out.added += 1
    out.text = "".join(line + ending for line, ending in zip(lines, endings))
    return out
