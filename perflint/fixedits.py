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


# Above this many token pairs (the old text's tokens times the new one's), `difflib`'s matcher
# grows to seconds: a loop body of a thousand lines re-indented under a new `with` block took
# minutes. Such texts are matched line by line first, indentation aside, and only the lines
# that pair up are compared token by token. (The largest pair count on `fixtures/` and the
# scratch repositories was 1.4 million: every edit there is still found token by token.)
TOKEN_PAIRS_LIMIT = 2_000_000
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def minimal_edits(old: str, new: str, start: int) -> list[tuple[int, int, str]]:
    """(start, end, content) edits, in `old`'s offsets shifted by `start`, turning `old` into
    `new`: the changed tokens only."""
    if old == new:
        return []
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    if len(a) * len(b) > TOKEN_PAIRS_LIMIT:
        return _edits_by_line(old, new, start)
    return _token_edits(a, b, start)


def _token_edits(a: list[str], b: list[str], start: int) -> list[tuple[int, int, str]]:
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


def _edits_by_line(old: str, new: str, start: int) -> list[tuple[int, int, str]]:
    """`minimal_edits` for long texts: lines paired by their text without indentation, then
    the tokens of each pair, and of each run of unpaired lines unless that run is itself
    too long (then it is replaced whole)."""
    la, lb = _LINE.findall(old), _LINE.findall(new)
    at = [0]
    for line in la:
        at.append(at[-1] + len(line))
    matcher = difflib.SequenceMatcher(None, [x.lstrip(" \t") for x in la], [x.lstrip(" \t") for x in lb])
    out: list[tuple[int, int, str]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        pairs = zip(range(i1, i2), range(j1, j2)) if tag == "equal" else [(None, None)]
        for i, j in pairs:
            s, e = (at[i], at[i + 1]) if i is not None else (at[i1], at[i2])
            chunk = lb[j] if j is not None else "".join(lb[j1:j2])
            if old[s:e] == chunk:
                continue
            ta, tb = _TOKEN.findall(old[s:e]), _TOKEN.findall(chunk)
            if len(ta) * len(tb) > TOKEN_PAIRS_LIMIT:
                out.append((start + s, start + e, chunk))
            else:
                out.extend(_token_edits(ta, tb, start + s))
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


def _clash(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two edits' ranges overlap: they share a character, or one is an insertion
    strictly inside the other's range.  Insertions at the same point do not clash: they are
    applied in the order the fixes were taken."""
    (s1, e1), (s2, e2) = a, b
    if s1 == e1 and s2 == e2:
        return False
    if s1 == e1:
        return s2 < s1 < e2
    if s2 == e2:
        return s1 < s2 < e1
    return max(s1, s2) < min(e1, e2)


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with non-clashing (start, end, content) edits applied; insertions at one point
    in the order given."""
    order = sorted(range(len(edits)), key=lambda i: (edits[i][0], edits[i][1], i))
    out, pos = [], 0
    for i in order:
        s, e, content = edits[i]
        out.append(text[pos:s])
        out.append(content)
        pos = max(pos, e)
    out.append(text[pos:])
    return "".join(out)


class _TooSlow(Exception):
    pass


def compose(module: cst.Module, text: str, plans: list, chosen: list, chosen_text: str, apply, joinable,
            slow_budget: int = 4) -> tuple[list, str] | None:
    """The plans left out of `chosen` because their nodes overlap a chosen plan's, taken into
    the same pass when the text edits of each touch no other plan's: (those plans, the text
    with all the plans applied), or None.  All of them or none: the next pass would apply
    them together, and one taken early could change what that pass finds for another (an
    autocast region makes the TF32 advice moot).

    A fix pass applies the chosen plans by transforming the tree (`chosen_text` is what that
    wrote); two fixes that change one node (two keywords added to one call, two statements
    inserted before one statement) or nested nodes would each need a pass of their own.
    Here every plan's edits are found (as `plan_edits` finds them for the JSON output); they
    are trusted only when the chosen plans' edits, applied to `text`, give exactly
    `chosen_text`.  `joinable(plan, taken)` says whether a plan may join the plans taken so
    far: whether applying them first could change that plan's fix (the engine knows which
    rules' fixes commute).  At most `slow_budget` plans may need the whole tree rendered to
    find their edits (a large file with many such plans is left to the passes).
    """
    from perflint.positions import node_offsets

    deferred = [p for p in plans if not any(p is c for c in chosen)]
    if not deferred or not all(joinable(p, chosen) for p in deferred):
        return None
    whole: dict = {}
    node_offsets(module, [], whole, [n for p in plans for n in p.replacements])
    slow = [0]

    def alone(p):
        slow[0] += 1
        if slow[0] > slow_budget:
            raise _TooSlow
        return edits_alone(module, text, p, apply)

    try:
        by_plan = plan_edits(module, text, list(chosen) + deferred, whole, alone)
    except _TooSlow:
        return None
    taken: list[tuple[int, int, str]] = [e for p in chosen for e in by_plan.get(id(p), [])]
    if apply_edits(text, taken) != chosen_text:
        return None
    extra = []
    spans = _Spans(taken)
    for p in deferred:
        mine = by_plan.get(id(p)) or []
        if not mine or any(spans.clashes((s, e)) for s, e, _ in mine) or not joinable(p, extra):
            return None
        extra.append(p)
        taken.extend(mine)
        spans.add(mine)
    return extra, apply_edits(text, taken)


class _Spans:
    """Edit ranges filed by the 256-character blocks they touch: whether a range clashes
    (`_clash`) with any of them looks only at ranges sharing a block with it (every pair
    that clashes shares a character, or an insertion point inside the other's range), not
    at all of them (a pass of n plans was n² comparisons)."""

    BLOCK = 256

    def __init__(self, edits) -> None:
        self.blocks: dict[int, list] = {}
        self.add(edits)

    def _span(self, s: int, e: int) -> range:
        return range(s // self.BLOCK, (max(e, s + 1) - 1) // self.BLOCK + 1)

    def add(self, edits) -> None:
        for s, e, _ in edits:
            for b in self._span(s, e):
                self.blocks.setdefault(b, []).append((s, e))

    def clashes(self, span: tuple[int, int]) -> bool:
        return any(_clash(span, t) for b in self._span(*span) for t in self.blocks.get(b, ()))


def take_commuting(analysis, text: str, plans: list, codes: list, chosen: list, chosen_text: str, apply):
    """`compose` for a fix pass of the engine: the plans a pass left out because their nodes
    overlap a chosen one's, taken where their rules' fixes commute (each rule's
    `fix_commutes_with`).  The chosen plans are those `chosen_text` applied: (plans taken
    besides them, the text)."""
    tree = analysis.facts.tree
    code_of = {id(p): c for p, c in zip(plans, codes)}
    # Which plans replace each node, and which replace a node below it: the plans a plan
    # overlaps are found from its own nodes and their ancestors, not by trying every pair.
    at: dict[int, list] = {}
    below: dict[int, list] = {}
    for p in plans:
        for n in p.replacements:
            at.setdefault(id(n), []).append(p)
            for a in tree.ancestors(n):
                below.setdefault(id(a), []).append(p)

    def overlapping(plan) -> list:
        out = []
        for n in plan.replacements:
            out += at.get(id(n), [])
            out += below.get(id(n), [])
            for a in tree.ancestors(n):
                out += at.get(id(a), ())
        return [p for p in out if p is not plan]

    commutes = {rule.code: rule.fix_commutes_with for rule, _ in analysis.findings}

    ids: dict[int, tuple[int, set]] = {}  # id(list of plans) → (its length, the ids in it)

    def joinable(plan, taken) -> bool:
        mine = commutes.get(code_of[id(plan)], frozenset())
        got = ids.get(id(taken))
        if got is None or got[0] > len(taken):
            got = ids[id(taken)] = (len(taken), {id(t) for t in taken})
        elif got[0] < len(taken):  # the list grew (plans are only appended): add the new ones
            got[1].update(id(t) for t in taken[got[0]:])
            got = ids[id(taken)] = (len(taken), got[1])
        return all(code_of[id(t)] in mine for t in overlapping(plan) if id(t) in got[1])

    return compose(analysis.module, text, plans, chosen, chosen_text, apply, joinable)


def non_overlapping(facts, plans):
    """Pick fixes whose replaced nodes neither contain nor sit inside another picked fix's."""
    taken: set = set()  # replaced nodes
    covered: set = set()  # replaced nodes and all their ancestors
    chosen = []
    for plan in plans:
        nodes = list(plan.replacements)
        clash = False
        for n in nodes:
            if n in covered:
                clash = True
                break
            if any(a in taken for a in facts.tree.ancestors(n)):
                clash = True
                break
        if clash:
            continue
        chosen.append(plan)
        for n in nodes:
            taken.add(n)
            covered.add(n)
            covered.update(facts.tree.ancestors(n))
    return chosen
