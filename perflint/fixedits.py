"""The text edits of each finding's fix, computed once per file and kept minimal.

A fix is a set of node replacements.  The edits that report it (`--output-format json`, a
language server's code actions) are found without re-rendering the file once per fix:

1. the distinct fixes are split into groups whose replaced nodes do not overlap (nearly
   always one group);
2. each group is applied to the tree at once and the result rendered once, recording where
   each replacement's code lands; one render of the original records where each replaced
   node's code was.  Outside those ranges the two texts are the same;
3. each replaced range is diffed against its replacement token by token, so an edit covers
   the changed tokens only (`torch.cuda.amp.GradScaler()` → `torch.amp.GradScaler("cuda")`
   is a deletion of `cuda.` and an insertion of `"cuda"`, not the whole statement).

Applying the edits of a group must give the rendered text; if it does not (a replacement
libcst renders differently in place), the fixes of that group fall back to one edit each,
computed the slow way.
"""

from __future__ import annotations

import difflib
import re

import libcst as cst
from libcst._nodes.internal import CodegenState

from perflint.diagnostics import Edit, Location

_TOKEN = re.compile(r"\w+|[ \t]+|\r\n|\r|\n|[^\w\s]|\s")


class _Ranges(CodegenState):
    """A code generator that records the range of text each target node produces."""

    def __init__(self, module: cst.Module, targets: set) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.targets = targets
        self.open: dict[int, int] = {}
        self.found: dict[int, tuple[int, int]] = {}

    def add_indent_tokens(self) -> None:
        for tok in self.indent_tokens:
            self.tokens.append(tok)
            self.offset += len(tok)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def pop_trailing_newline(self) -> None:
        if self.tokens and self.tokens[-1] == self.default_newline:
            self.offset -= len(self.tokens.pop())

    def before_codegen(self, node) -> None:
        if id(node) in self.targets:
            self.open.setdefault(id(node), self.offset)

    def after_codegen(self, node) -> None:
        key = id(node)
        if key in self.targets and key in self.open and key not in self.found:
            self.found[key] = (self.open[key], self.offset)


def _render(module: cst.Module, nodes) -> tuple[str, dict[int, tuple[int, int]]]:
    state = _Ranges(module, {id(n) for n in nodes})
    module._codegen(state)
    text = "".join(state.tokens)
    return text, {k: (min(s, len(text)), min(e, len(text))) for k, (s, e) in state.found.items()}


def _new_nodes(value) -> list:
    """The nodes a replacement value puts in the tree (none for a removal)."""
    if isinstance(value, cst.CSTNode):
        return [value]
    if isinstance(value, cst.FlattenSentinel):
        return list(value.nodes)
    return []


def _groups(plans: list, overlaps) -> list[list]:
    """Split plans into groups whose replacements do not overlap (`overlaps(plans)` picks
    such a subset, keeping order)."""
    groups = []
    left = list(plans)
    while left:
        chosen = overlaps(left) or left[:1]
        ids = {id(p) for p in chosen}
        groups.append(chosen)
        left = [p for p in left if id(p) not in ids]
    return groups


def minimal_edits(old: str, new: str, start: int) -> list[tuple[int, int, str]]:
    """(start, end, content) edits, in `old`'s offsets shifted by `start`, turning `old` into
    `new`: the changed tokens only."""
    if old == new:
        return []
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    out: list[tuple[int, int, str]] = []
    pos_a = [0]
    for t in a:
        pos_a.append(pos_a[-1] + len(t))
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.append((start + pos_a[i1], start + pos_a[i2], "".join(b[j1:j2])))
    return out


def _apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    for s, e, content in sorted(edits, key=lambda x: (x[0], x[1]), reverse=True):
        text = text[:s] + content + text[e:]
    return text


def plan_edits(module: cst.Module, text: str, plans: list, overlaps, apply, alone) -> dict[int, list]:
    """id(plan) → its edits as (start, end, content) offsets into `text`.

    `apply(module, plans)` applies plans to the tree; `overlaps(plans)` picks a subset that
    does not overlap; `alone(plan)` is the slow fallback: the plan's edits found by
    rendering the tree with it alone.
    """
    out: dict[int, list] = {}
    if not plans:
        return out
    originals = [n for p in plans for n in p.replacements]
    rendered, old_ranges = _render(module, originals)
    if rendered != text:
        for p in plans:
            out[id(p)] = alone(p)
        return out
    for group in _groups(plans, overlaps):
        try:
            new_module = apply(module, group)
            new_nodes = [n for p in group for v in p.replacements.values() for n in _new_nodes(v)]
            new_text, new_ranges = _render(new_module, new_nodes)
        except Exception:  # noqa: BLE001 - a replacement libcst cannot render
            for p in group:
                out[id(p)] = []
            continue
        group_edits: dict[int, list] = {}
        ok = True
        for p in group:
            edits: list = []
            for orig, value in p.replacements.items():
                if id(orig) not in old_ranges:
                    ok = False
                    break
                s, e = old_ranges[id(orig)]
                nodes = _new_nodes(value)
                if nodes:
                    spans = [new_ranges.get(id(n)) for n in nodes]
                    if any(sp is None for sp in spans):
                        ok = False
                        break
                    content = new_text[spans[0][0]:spans[-1][1]]
                else:
                    content = ""
                edits.extend(minimal_edits(text[s:e], content, s))
            if not ok:
                break
            group_edits[id(p)] = edits
        if ok and _apply_edits(text, [e for es in group_edits.values() for e in es]) == new_text:
            out.update(group_edits)
            continue
        for p in group:
            out[id(p)] = alone(p)
    return out


def edits_alone(module: cst.Module, text: str, plan, apply) -> list[tuple[int, int, str]]:
    """A plan's edits found by rendering the whole tree with only that plan applied."""
    try:
        new = apply(module, [plan]).code
    except Exception:  # noqa: BLE001
        return []
    if new == text:
        return []
    start = 0
    limit = min(len(text), len(new))
    while start < limit and text[start] == new[start]:
        start += 1
    end_old, end_new = len(text), len(new)
    while end_old > start and end_new > start and text[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return minimal_edits(text[start:end_old], new[start:end_new], start)


def to_edits(offsets: list[tuple[int, int, str]], lines, notebook) -> tuple[Edit, ...]:
    """Offsets to 1-based rows and columns (rows inside the cell for a notebook; a fix whose
    edits leave one cell gets none)."""
    out = []
    cells = set()
    for s, e, content in sorted(offsets, key=lambda x: (x[0], x[1])):
        r1, c1 = lines.row_col(s)
        r2, c2 = lines.row_col(e)
        if notebook is not None:
            cell1, r1 = notebook.locate(r1)
            cell2, r2 = notebook.locate(r2)
            cells.update((cell1, cell2))
            if cell1 != cell2 or len(cells) > 1:
                return ()
        out.append(Edit(content, Location(r1, c1), Location(r2, c2)))
    return tuple(out)
