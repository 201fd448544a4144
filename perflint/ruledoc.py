"""A rule's documentation as markdown (what `perflint rule` prints), the HTML rule
reference installed with perflint (`perflint/docs/rules.html`, the target of
`perflint.rules.docs_url`) and the rule table of the README, all from the rule classes.

Regenerate the reference and the README's table after adding a rule or editing one:

    python -m perflint.ruledoc
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from perflint.rules import DOCS_FILE, all_rules


def versions(r) -> str:
    lo = ".".join(map(str, r.min_torch)) if r.min_torch else None
    hi = ".".join(map(str, r.max_torch)) if r.max_torch else None
    if lo and hi:
        return f"target torch {lo} to before {hi}"
    if lo:
        return f"target torch ≥ {lo}"
    if hi:
        return f"target torch < {hi}"
    return "all torch versions"


def rule_markdown(r) -> str:
    return (f"# {r.code} ({r.name})\n\n*{r.summary}*\n\nFix: **{r.fix_class}** · severity: {r.severity.value} · "
            f"{'on' if r.default else 'off'} by default · {versions(r)}\n\n{r.doc()}")


def reference_html() -> str:
    """Every rule's documentation on one page; each rule's section has its code (lower
    case) as its `id`."""
    from markdown_it import MarkdownIt

    from perflint import __version__

    md = MarkdownIt("commonmark").enable("table")
    registry = all_rules()
    toc = "\n".join(f'<li><a href="#{c.lower()}">{c}</a> {html.escape(r.name)}</li>' for c, r in registry.items())
    sections = "\n".join(
        f'<section id="{c.lower()}">\n{md.render(rule_markdown(r))}</section>' for c, r in registry.items()
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>perflint {__version__} rules</title>\n"
        "<style>body{max-width:52rem;margin:2rem auto;padding:0 1rem;font-family:sans-serif;line-height:1.5}"
        "pre{background:#f5f5f5;padding:.6rem;overflow:auto}section{border-top:1px solid #ccc;margin-top:2rem}</style>\n"
        "</head>\n<body>\n"
        f"<h1>perflint {__version__}: rules</h1>\n<p>Generated from the rules' documentation "
        "(<code>perflint rule CODE</code> prints the same text).</p>\n"
        f"<ul>\n{toc}\n</ul>\n{sections}\n</body>\n</html>\n"
    )


# In a source checkout: the README, whose rule table is generated.
README = Path(__file__).resolve().parent.parent / "README.md"
README_TABLE_HEAD = "| code | name | finds | fix | default |\n|---|---|---|---|---|\n"


def readme_table() -> str:
    """The README's rule table: code, name, summary, fix class and default of every rule."""
    rows = []
    for c, r in all_rules().items():
        cells = (c, r.name, r.summary.replace("|", "\\|"), str(r.fix_class), "on" if r.default else "off")
        rows.append("| " + " | ".join(cells) + " |\n")
    return README_TABLE_HEAD + "".join(rows)


def readme_with_table(text: str) -> str:
    """`text` (the README) with its rule table (from the header row to the first line that is
    not a table row) replaced by `readme_table()`."""
    start = text.index(README_TABLE_HEAD)
    end = re.compile(r"^(?!\|)", re.M).search(text, start).start()
    return text[:start] + readme_table() + text[end:]


TABLE_FILE = Path(__file__).resolve().parent / "rules" / "table.py"
TABLE_HEAD = '''"""Every rule's declarations, generated from the rule classes by `python -m perflint.ruledoc`
(a test fails while it is stale): what selecting rules, the prefilter and the reports need,
read without importing the rules and libcst.  Do not edit."""

'''


def table_source() -> str:
    """The text of `perflint/rules/table.py`: code → name, summary, severity, fix class,
    default, torch bounds, prefilter tokens, where the class is (module and name: a run imports
    only the rules a file can fire) and documentation."""
    rows = []
    for code, r in all_rules().items():
        fields = {
            "name": r.name, "summary": r.summary, "severity": r.severity.value, "fix": r.fix_class.value,
            "default": bool(r.default), "min_torch": tuple(r.min_torch) if r.min_torch else None,
            "max_torch": tuple(r.max_torch) if r.max_torch else None, "tokens": tuple(r.tokens),
            "module": r.__module__, "class": r.__qualname__, "doc": r.doc(),
        }
        body = "".join(f"        {k!r}: {v!r},\n" for k, v in fields.items())
        rows.append(f"    {code!r}: {{\n{body}    }},\n")
    return TABLE_HEAD + "RULES = {\n" + "".join(rows) + "}\n"


def main() -> None:
    TABLE_FILE.write_text(table_source(), encoding="utf-8")
    print(f"wrote {TABLE_FILE}")
    DOCS_FILE.parent.mkdir(parents=True, exist_ok=True)
    DOCS_FILE.write_text(reference_html(), encoding="utf-8")
    print(f"wrote {DOCS_FILE}")
    if README.exists():
        README.write_text(readme_with_table(README.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote the rule table of {README}")


if __name__ == "__main__":
    main()
