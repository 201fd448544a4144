"""Option defaults from the scripts that import a module: a trainer module's `args.amp`
or `args.n_gpu` comes from the entry script that parses the command line and passes `args`
on (TorchSSL's `freematch.py` parses `--amp`, default False, and hands `args` to
`models/freematch/freematch.py`).  Read from the module summaries' `defaults` (argparse,
dataclass fields, config literals): the project's modules that import the module, and the
modules that import those, up to `MAX_DEPTH` levels.  Only the rules that ask whether a
branch runs with every option at its default use it (`rules.common.off_by_default`)."""

from __future__ import annotations

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
