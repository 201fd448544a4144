"""What "fixable" means, in one place: the check summary, `fix --diff`, `--show-fixes`,
`--statistics` and the `[*]` markers all count with these."""

from __future__ import annotations

from perflint.diagnostics import Applicability


def is_fixable(d, unsafe: bool) -> bool:
    """Whether `perflint fix` (with --unsafe-fixes when `unsafe`) fixes this finding.

    Per finding and per applicability: a fix that several findings share fixes each of
    them.  Codes the configuration marks unfixable carry no fix (the runner drops it).
    """
    if d.fix is None:
        return False
    return d.fix.applicability is Applicability.SAFE or unsafe


def fixable_counts(results) -> tuple[int, int]:
    """(findings a safe fix fixes, findings only an unsafe fix fixes)."""
    safe = uns = 0
    for r in results:
        for d in r.diagnostics:
            if d.fix is None:
                continue
            if d.fix.applicability is Applicability.SAFE:
                safe += 1
            else:
                uns += 1
    return safe, uns


def fixed_counts(results) -> tuple[int, int]:
    """(reported findings fixed, findings the fixes uncovered and fixed too)."""
    fixed = sum(sum(r.fixes_applied.values()) for r in results)
    uncovered = sum(sum(r.fixes_uncovered.values()) for r in results)
    return fixed, uncovered
