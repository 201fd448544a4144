"""The rule registry: every rule class, by code, in code order.

Importing this package is cheap: the rule modules (and libcst, which they need) load on the
first `all_rules()` call, so that a run answered from the cache never imports them.
"""

from __future__ import annotations

from pathlib import Path

_REGISTRY: dict = {}

# The rule reference shipped with perflint: one section per rule, `id` = the code in lower case.
DOCS_FILE = Path(__file__).resolve().parent.parent / "docs" / "rules.html"


def docs_url(code: str) -> str:
    """The stable address of a rule's documentation: its section in the rule reference that
    is installed with perflint (`perflint/docs/rules.html#pf101`), as a file URI.

    The one definition of a rule's link: the JSON output's `url`, SARIF's `helpUri` and
    the language server's code descriptions use it.
    """
    return f"{DOCS_FILE.as_uri()}#{code.strip().lower()}"


def register(cls):
    if cls.code in _REGISTRY:
        raise ValueError(f"duplicate rule code {cls.code}")
    _REGISTRY[cls.code] = cls
    return cls


def all_rules() -> dict:
    if not _REGISTRY:
        _load()
    return dict(sorted(_REGISTRY.items()))


def _load() -> None:
    # Importing the family modules registers their rules.
    from perflint.rules.data_loading import helpers  # noqa: F401
    from perflint.rules.host_sync import helpers  # noqa: F401, F811
    from perflint.rules.optim_autograd import helpers  # noqa: F401, F811
    from perflint.rules.precision import helpers  # noqa: F401, F811
    from perflint.rules.data_dist import helpers  # noqa: F401, F811


def __getattr__(name: str):
    if name in ("FixPlan", "Rule", "Violation"):
        from perflint.rules import base

        return getattr(base, name)
    raise AttributeError(f"module 'perflint.rules' has no attribute {name!r}")


__all__ = ["DOCS_FILE", "FixPlan", "Rule", "Violation", "all_rules", "docs_url", "register"]
