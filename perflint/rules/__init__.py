"""The rules: every rule class, by code, in code order.

A rule is a `Rule` subclass with a `code`, in a module of this package: one rule a file,
`perflint/rules/<family>/pfNNN_<name>.py`.  `all_rules()` finds them by walking the package;
there is no list to add a rule to.

Importing this package is cheap: the rule modules (and libcst, which they need) load on the
first `all_rules()` call, so that a run answered from the cache never imports them.
"""

from __future__ import annotations

from pathlib import Path

# code → rule class, filled on the first `all_rules()` call.
_REGISTRY: dict = {}
# code → rule class, for the rules imported one by one (`rule_class`) before that.
_LOADED: dict = {}

# The rule reference shipped with perflint: one section per rule, `id` = the code in lower case.
DOCS_FILE = Path(__file__).resolve().parent.parent / "docs" / "rules.html"


def docs_url(code: str) -> str:
    """The stable address of a rule's documentation: its section in the rule reference that
    is installed with perflint (`perflint/docs/rules.html#pf101`), as a file URI.

    The one definition of a rule's link: the JSON output's `url`, SARIF's `helpUri` and
    the language server's code descriptions use it.
    """
    return f"{DOCS_FILE.as_uri()}#{code.strip().lower()}"


def all_rules() -> dict:
    if not _REGISTRY:
        _REGISTRY.update(discover())
    return dict(sorted(_REGISTRY.items()))


def rule_class(code: str):
    """The rule class of `code`, importing only its own module (named by the generated table,
    `perflint.rules.table`): a run imports the rules a file can fire, not all of them.  A code
    the table does not place (a table older than the rules) loads every rule."""
    if code in _REGISTRY:
        return _REGISTRY[code]
    cls = _LOADED.get(code)
    if cls is None:
        import importlib

        from perflint.rules.table import RULES

        row = RULES.get(code, {})
        try:
            cls = getattr(importlib.import_module(row["module"]), row["class"])
        except (KeyError, ImportError, AttributeError):
            cls = None
        if cls is None or vars(cls).get("code") != code:
            return all_rules()[code]
        _LOADED[code] = cls
    return cls


def discover() -> dict:
    """Code → rule class for every `Rule` subclass that defines a `code` in a module of this
    package (a class imported into another module counts only where it is defined)."""
    import importlib
    import pkgutil

    from perflint.rules.base import Rule

    found: dict = {}
    for info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Rule) and obj.__module__ == module.__name__
                    and "code" in vars(obj)):
                if obj.code in found:
                    raise ValueError(f"duplicate rule code {obj.code}: {found[obj.code].__module__} and {module.__name__}")
                found[obj.code] = obj
    return dict(sorted(found.items()))


def __getattr__(name: str):
    if name in ("EditorTag", "FixClass"):
        from perflint.rules import metadata

        return getattr(metadata, name)
    if name in ("FixPlan", "Rule", "Violation"):
        from perflint.rules import base

        return getattr(base, name)
    raise AttributeError(f"module 'perflint.rules' has no attribute {name!r}")


__all__ = ["DOCS_FILE", "EditorTag", "FixClass", "FixPlan", "Rule", "Violation", "all_rules", "discover", "docs_url", "rule_class"]
