"""What a rule declares about itself besides its check: the kinds of fix it offers and how an
editor should show its findings.  Light on purpose (no libcst): the rule selection reads it
from the cached rule records without importing the rules.
"""

from __future__ import annotations

from enum import StrEnum


class FixClass(StrEnum):
    """The fixes a rule offers.  The value is what `perflint rules`, `perflint rule`, the
    JSON/SARIF rule properties and the rule reference print."""

    NONE = "none"
    SAFE = "safe"
    UNSAFE = "unsafe"
    SAFE_OR_UNSAFE = "safe or unsafe"  # safe where the rule can prove it, unsafe elsewhere

    @property
    def offers_safe(self) -> bool:
        return self in (FixClass.SAFE, FixClass.SAFE_OR_UNSAFE)

    @property
    def offers_unsafe(self) -> bool:
        return self in (FixClass.UNSAFE, FixClass.SAFE_OR_UNSAFE)


class EditorTag(StrEnum):
    """How an editor marks a finding (the language server's diagnostic tags)."""

    DEPRECATED = "deprecated"  # struck through
    UNNECESSARY = "unnecessary"  # faded out
