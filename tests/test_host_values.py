"""`rules/host_sync/values.consumed_on_host` on the receiver of an array method."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts
from perflint.rules.host_sync.values import consumed_on_host

_SRC = """\
import numpy as np


def validate(model, loader):
    for img in loader:
        pred = model(img.cuda())
        pred = pred.squeeze().cpu().numpy()
        host = np.ones(3)
        host = host.squeeze()
"""


def _receiver(facts: Facts, line_start: str) -> cst.Name:
    """The name before `.squeeze()` on the line that starts with `line_start`."""
    for a in facts.tree.index[cst.Attribute]:
        if a.attr.value == "squeeze" and isinstance(a.value, cst.Name):
            stmt = facts.tree.statement_of(a)
            if cst.Module([]).code_for_node(stmt).strip().startswith(line_start):
                return a.value
    raise AssertionError(line_start)


def test_a_name_before_an_array_method_is_read_without_failing():
    # AdaBins' `pred = pred.squeeze().cpu().numpy()`: `pred` is a name, not a call; asking
    # whether it is a numpy copy failed with an AttributeError (PF201 and PF202 crashed).
    facts = Facts(cst.parse_module(_SRC), (2, 4), None)
    assert consumed_on_host(facts, _receiver(facts, "pred = pred")) is False
    assert consumed_on_host(facts, _receiver(facts, "host = host")) is True  # a numpy array's method
