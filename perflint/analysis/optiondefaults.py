"""Option defaults from the scripts that import a module: a trainer module's `args.amp`
or `args.n_gpu` comes from the entry script that parses the command line and passes `args`
on (TorchSSL's `freematch.py` parses `--amp`, default False, and hands `args` to
`models/freematch/freematch.py`).  Read from the module summaries' `defaults` (argparse,
dataclass fields, config literals): the project's modules that import the module, and the
modules that import those, up to `MAX_DEPTH` levels.  Only the rules that ask whether a
branch runs with every option at its default use it (`rules.common.off_by_default`).

The import edges also tell `ProjectIndex.never_used` which names a file's importers take
(`imported_unused`: a name imported and then named nowhere else in the importer's code)."""

from __future__ import annotations

import io
import os
import re
import tokenize

from perflint.analysis.modules import MAX_DEPTH


def import_edges(index):
    """(importer, imported file, the name imported: "" for the module itself or a star
    import) for every import of one project file by another."""
    for other in sorted(index.summaries):
        s = index.summaries[other]
        for ref in s.get("stars", ()):
            target = index.modules.module_ref(other, ref)
            if target is not None and target != other:
                yield other, target, ""
        for ref in [*(s.get("imports") or {}).values(), *(s.get("relative") or {}).values()]:
            w = index.resolve(other, ref)
            if w is not None and w[0] != other:
                yield other, w[0], w[1].split(".", 1)[0]


def edges_by_target(index, part: int) -> dict[str, set[str]]:
    """Each imported project file → its importers (`part` 0) or the names imported from it
    (`part` 2) over `import_edges`, built once per index."""
    got = index._memo.get(("edges", part))
    if got is None:
        got = {}
        for edge in import_edges(index):
            got.setdefault(edge[1], set()).add(edge[part])
        index._memo[("edges", part)] = got
    return got


def caller_defaults(index, path: str, name: str) -> list:
    """The defaults of option `name` in the project modules that import `path`, directly
    or through other importers (the nearest level that has any)."""
    up = edges_by_target(index, 0)
    seen, frontier = {path}, [path]
    for _ in range(MAX_DEPTH):
        nxt = sorted({p for f in frontier for p in up.get(f, ()) if p not in seen})
        seen.update(nxt)
        values = [index.summaries[p]["defaults"][name] for p in nxt
                  if name in (index.summaries.get(p) or {}).get("defaults", {})]
        if values:
            return values
        frontier = nxt
    return []


def imported_unused(index, path: str, name: str) -> bool:
    """Every project file that imports `name` from `path` names it nowhere else, not even in
    a string: `from infill_util import refine, refine_v1` with `refine_v1` then named only in
    a call left commented out (Diffusion-LM's `infill.py`).  Not when an importer is a
    package's `__init__.py` (a name it imports is what the package offers), hands the name on
    to files that import it from there, imports it under another name (`import … as`), or
    cannot be read."""
    by_name = index._memo.get("importers_by_name")
    if by_name is None:
        by_name = index._memo["importers_by_name"] = {}
        for edge in import_edges(index):
            by_name.setdefault((edge[1], edge[2]), []).append(edge[0])
    importers = by_name.get((path, name), [])
    if not importers:
        return False
    for f in importers:
        if os.path.basename(f) == "__init__.py" or by_name.get((f, name)) or _code_mentions(f, name) != 1:
            return False  # a package's offer, a name other files take from the importer, or used
    return True


def _code_mentions(path: str, name: str) -> int:
    """How often the file's code names `name` (comments left out; a string that holds the
    word counts as a mention too), or -1 when the file cannot be read or tokenised."""
    word = re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w)")
    try:
        with open(path, "rb") as fh:
            tokens = list(tokenize.tokenize(io.BytesIO(fh.read()).readline))
    except (OSError, SyntaxError, tokenize.TokenError):
        return -1
    n = 0
    code = [t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
    for i, tok in enumerate(code):
        if tok.type == tokenize.NAME and tok.string == name:
            if i + 1 < len(code) and code[i + 1].string == "as":
                return -1  # imported under another name: its uses are not counted here
            n += 1
        elif tok.type not in (tokenize.NAME, tokenize.COMMENT) and word.search(tok.string):
            n += 2  # a string (or f-string part) holding the name: it may be looked up by it
    return n
