"""Where a rule's documentation lives on the web: the one place that builds the address.

The documentation itself is each rule's docstring (`perflint rule CODE` prints it, and the
language server shows it on hover); the address is the project's page with one stable
anchor per rule, lower-case code: `…/torch-perflint/#pf201`.
"""

from __future__ import annotations

DOCS_URL = "https://pypi.org/project/torch-perflint/"


def rule_anchor(code: str) -> str:
    """The anchor of a rule's documentation: its code in lower case (`pf201`)."""
    return code.strip().lower()


def rule_url(code: str) -> str:
    return f"{DOCS_URL}#{rule_anchor(code)}"
