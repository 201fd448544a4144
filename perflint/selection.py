"""Rule selection: codes and prefixes (`PF1`, `PF10`, `PF102`, `ALL`), ruff-style."""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

from perflint.config import Settings


def _registry():
    from perflint.rules import all_rules

    return all_rules()


def validate_selector(sel: str) -> str | None:
    """None if `sel` selects at least one rule; else why not."""
    s = sel.strip().upper()
    if s == "ALL":
        return None
    if not s.startswith("PF"):
        return f"unknown rule selector `{sel}` (codes look like PF101; prefixes like PF1 or PF10; or ALL)"
    if not any(code.startswith(s) for code in _registry()):
        return f"unknown rule code or prefix `{sel}`"
    return None


def _expand(selectors) -> set[str]:
    codes: set[str] = set()
    for sel in selectors:
        s = sel.strip().upper()
        if s == "ALL":
            codes.update(_registry())
        else:
            codes.update(c for c in _registry() if c.startswith(s))
    return codes


def default_codes() -> set[str]:
    return {code for code, rule in _registry().items() if rule.default}


def selected_codes(settings: Settings) -> tuple[str, ...]:
    base = _expand(settings.select) if settings.select is not None else default_codes()
    base |= _expand(settings.extend_select)
    # More specific selectors win, as in ruff: `select = ["PF2"]`, `ignore = ["PF201"]`.
    base -= _expand(settings.ignore)
    return tuple(sorted(base))


def fixable_codes(settings: Settings) -> frozenset[str] | None:
    if settings.fixable is None and not settings.unfixable:
        return None
    allowed = _expand(settings.fixable) if settings.fixable is not None else set(_registry())
    return frozenset(allowed - _expand(settings.unfixable))


def ignored_for_path(settings: Settings, rel_path: str) -> set[str]:
    """Codes that per-file-ignores switch off for a path relative to the settings' root."""
    out: set[str] = set()
    posix = PurePosixPath(rel_path).as_posix()
    name = PurePosixPath(posix).name
    for pattern, codes in settings.per_file_ignores:
        if _glob_match(posix, pattern) or _glob_match(name, pattern):
            out |= _expand(codes)
    return out


def _glob_match(path: str, pattern: str) -> bool:
    if fnmatch.fnmatch(path, pattern):
        return True
    if "**/" in pattern and fnmatch.fnmatch(path, pattern.replace("**/", "")):
        return True
    # A folder pattern: "tests/" or "tests" matches files below it.
    p = pattern.rstrip("/")
    return path == p or path.startswith(p + "/")
