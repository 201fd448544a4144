"""Adding a keyword argument keeps the call's layout: one line stays one line, one argument
per line stays so (with or without a trailing comma), whatever the first line looks like."""

from __future__ import annotations

import libcst as cst
import pytest

from perflint.edits import add_arg, make_kwarg


def _add(src: str) -> str:
    module = cst.parse_module(src)

    class T(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            if isinstance(updated.func, cst.Name) and updated.func.value == "DataLoader":
                return add_arg(updated, make_kwarg("persistent_workers", "True"))
            return updated

    return module.visit(T()).code


@pytest.mark.parametrize(
    "src, expected",
    [
        ("x = DataLoader(ds, num_workers=4)\n", "x = DataLoader(ds, num_workers=4, persistent_workers=True)\n"),
        ("x = DataLoader()\n", "x = DataLoader(persistent_workers=True)\n"),
        (
            "x = DataLoader(\n    ds,\n    num_workers=4,\n)\n",
            "x = DataLoader(\n    ds,\n    num_workers=4,\n    persistent_workers=True,\n)\n",
        ),
        (   # the first line packs two arguments; the rest are one per line, trailing comma
            "x = DataLoader(\n    ds, sampler=s,\n    num_workers=4,\n    drop_last=True,\n)\n",
            "x = DataLoader(\n    ds, sampler=s,\n    num_workers=4,\n    drop_last=True,\n    persistent_workers=True,\n)\n",
        ),
        (   # no trailing comma, `)` on its own line
            "x = DataLoader(\n    ds,\n    num_workers=4\n)\n",
            "x = DataLoader(\n    ds,\n    num_workers=4,\n    persistent_workers=True\n)\n",
        ),
        (   # a single argument on its own line
            "x = DataLoader(\n    ds,\n)\n",
            "x = DataLoader(\n    ds,\n    persistent_workers=True,\n)\n",
        ),
    ],
)
def test_add_arg_keeps_the_layout(src, expected):
    assert _add(src) == expected
