"""The rule registry: every rule class, by code, in code order."""

from __future__ import annotations

from perflint.rules.base import FixPlan, Rule, Violation

_REGISTRY: dict[str, type[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    if cls.code in _REGISTRY:
        raise ValueError(f"duplicate rule code {cls.code}")
    _REGISTRY[cls.code] = cls
    return cls


def all_rules() -> dict[str, type[Rule]]:
    if not _REGISTRY:
        _load()
    return dict(sorted(_REGISTRY.items()))


def _load() -> None:
    # Importing the family modules registers their rules.
    from perflint.rules import data_loading, host_sync, optim_autograd, precision, data_dist  # noqa: F401


__all__ = ["FixPlan", "Rule", "Violation", "all_rules", "register"]
