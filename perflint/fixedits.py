"""The text edits of each finding's fix, computed once per file and kept minimal.

A fix is a set of node replacements.  Its edits (`--output-format json`, a language
server's code actions) are found without transforming and re-rendering the whole file
once per fix:

1. the render of the original tree that finds the findings' positions also records where
   each replaced node's code is, and the indentation in force there;
2. each replacement is rendered on its own with that indentation: what it writes in place.
   A node whose code depends on its parent (an argument whose comma the call decides, a
   statement sharing a line with others), or that does not render alone exactly as it
   reads in the file, sends its fix down the slow path: the whole tree rendered with only
   that fix applied;
3. each replaced range is diffed against its replacement token by token, so an edit covers
   the changed tokens only (`torch.cuda.amp.GradScaler()` → `torch.amp.GradScaler("cuda")`
   is a deletion of `cuda.` and an insertion of `"cuda"`, not the whole statement).

Either way a fix's edits are what applying that one fix changes in the text.
"""

from __future__ import annotations

import difflib
import re

import libcst as cst
from perflint.cstprivate import CodegenState

from perflint.diagnostics import Edit, Location

_TOKEN = re.compile(r"\w+|[ \t]+|\r\n|\r|\n|[^\w\s]|\s")


_CONTEXT_FREE: dict[type, bool] = {}


def _context_free(node) -> bool:
    """Whether a node's code depends on nothing its parent passes it (a default comma or
    semicolon, `elif`): then it renders alone as it does in place."""
    t = type(node)
    got = _CONTEXT_FREE.get(t)
    if got is None:
        import inspect

        try:
            got = len(inspect.signature(t._codegen_impl).parameters) <= 2
        except (TypeError, ValueError):
            got = False
        _CONTEXT_FREE[t] = got
    return got


def _render_alone(module: cst.Module, nodes, indent: tuple[str, ...]) -> str:
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = list(indent)
    for n in nodes:
        n._codegen(state)
    return "".join(state.tokens)


def _new_nodes(value) -> list | None:
    """The nodes a replacement value puts in the tree (none for a removal; None for a value
    this module does not know)."""
    if isinstance(value, cst.CSTNode):
        return [value]
    if isinstance(value, cst.FlattenSentinel):
        return list(value.nodes)
    if isinstance(value, cst.RemovalSentinel):
        return []
    return None


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


def plan_edits(module: cst.Module, text: str, plans: list, ranges: dict, alone) -> dict[int, list]:
    """id(plan) → its edits as (start, end, content) offsets into `text`.

    `ranges` is what `perflint.positions.node_offsets` records for the replaced nodes
    (`whole=`); `alone(plan)` is the slow path: the plan's edits found by rendering the tree
    with that plan applied.
    """
    if not plans:
        return {}
    if ranges.get("") != text:
        return {id(p): alone(p) for p in plans}
    out: dict[int, list] = {}
    for p in plans:
        edits = _local_edits(module, text, p, ranges)
        out[id(p)] = edits if edits is not None else alone(p)
    return out


def _local_edits(module: cst.Module, text: str, plan, ranges) -> list | None:
    """A plan's edits from its replacements rendered alone, or None when that cannot be
    trusted."""
    items = []
    for orig, value in plan.replacements.items():
        got = ranges.get(id(orig))
        nodes = _new_nodes(value)
        if got is None or nodes is None or not _context_free(orig) or not all(_context_free(n) for n in nodes):
            return None
        items.append((got[0], got[1], got[2], orig, nodes))
    items.sort(key=lambda it: (it[0], -it[1]))
    edits: list = []
    reach = -1
    for s, e, indent, orig, nodes in items:
        if s < reach:
            if e <= reach:
                continue  # inside another replaced node: that node's replacement is what is applied
            return None
        reach = e
        try:
            if _render_alone(module, [orig], indent) != text[s:e]:
                return None
            new = _render_alone(module, nodes, indent)
        except Exception:  # noqa: BLE001 - a replacement libcst cannot render
            return None
        edits.extend(minimal_edits(text[s:e], new, s))
    return edits


def edits_alone(module: cst.Module, text: str, plan, apply) -> list[tuple[int, int, str]]:
    """A plan's edits found by rendering the whole tree with only that plan applied."""
    try:
        new = apply(module, [plan]).code
    except Exception:  # noqa: BLE001
        return []
    if new == text:
        return []
    start, end_old, end_new = changed_span(text, new)
    return minimal_edits(text[start:end_old], new[start:end_new], start)


def changed_span(old: str, new: str) -> tuple[int, int, int]:
    """(start, end in `old`, end in `new`): the span between the common prefix and the
    common suffix of two texts, the part that changed."""
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return start, end_old, end_new


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
