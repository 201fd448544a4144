"""PF502's folding of an accumulation count (`rules/data_dist/folding.py`): exactly 1 only
when every value the expression can take is 1; anything it cannot read is unknown."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from perflint.analysis import Facts
from perflint.rules.data_dist.folding import always_one


def _count(body: str) -> bool:
    """`always_one` of the right side of the `%` in `body` (no project: options read as
    their argparse defaults)."""
    src = textwrap.dedent("""\
        import argparse
        import math

        import numpy as np

        parser = argparse.ArgumentParser()
        parser.add_argument("--batch-size", type=int, default=64)
        parser.add_argument("--small", type=int, default=16)
        args = parser.parse_args()


        def train(loader, ni, xi):
        """) + textwrap.indent(textwrap.dedent(body), "    ") + "    if ni % accumulate == 0:\n        pass\n"
    module = cst.parse_module(src)
    facts = Facts(module, (2, 4), None)
    mod = next(n.test.left for n in facts.tree.index[cst.If] if isinstance(n.test, cst.Comparison)
               and isinstance(n.test.left, cst.BinaryOperation) and isinstance(n.test.left.operator, cst.Modulo))
    return always_one(facts, mod.right)


@pytest.mark.parametrize("body, one", [
    ("accumulate = max(round(64 / 128), 1)\n", True),  # round(0.5) is 0 (half to even), max makes it 1
    ("accumulate = max(round(64 / 16), 1)\n", False),
    ("nbs = 64\nbs = args.batch_size\naccumulate = max(round(nbs / bs), 1)\n", True),  # the default, 64
    ("accumulate = max(round(64 / args.small), 1)\n", False),  # 4
    ("accumulate = int(64 // 32)\n", False),
    ("accumulate = math.ceil(64 / 128)\n", True),
    ("accumulate = max(1, np.interp(ni, xi, [1, 64 / 128]).round())\n", True),
    ("accumulate = np.interp(ni, xi, [1, 64 / 128]).round()\n", False),  # 0 or 1
    ("accumulate = 1\nif ni > 3:\n    accumulate = 2\n", False),  # every binding counts
    ("accumulate = max(len(loader), 1)\n", False),  # unknown
    ("accumulate = 1 - 0\n", False),  # subtraction is not folded
    ("accumulate = max(round(64 / 0), 1)\n", False),  # positive operands only (no division by zero)
])
def test_an_accumulation_count_is_one_only_when_every_value_is(body, one):
    assert _count(body) is one
