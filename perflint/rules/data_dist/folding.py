"""The range of values an accumulation count takes in the documented multi-process launches
(PF502): YOLOv4/v5/v7's `accumulate = max(round(nbs / total_batch_size), 1)`, with `nbs = 64`
and `total_batch_size` the `--batch-size` option, is 1 in every `torch.distributed.launch ...
--batch-size 128` run the README shows, and so is the warm-up's
`max(1, np.interp(ni, xi, [1, nbs / total_batch_size]).round())`: the optimizer steps on every
iteration and no all-reduce is wasted.

Values are closed intervals.  Literals, names bound in the file (every binding counts),
options (`opt.batch_size`: the value each documented multi-process launch of the script
passes, or the argparse default where one passes none; the default alone where none is
documented), attributes of the options object assigned from another expression in the file
(`opt.total_batch_size = opt.batch_size`), `+ - * / //` on positive values, and the monotonic
`round`, `int`, `math.floor`/`ceil`, `max`, `min` and `np.interp` (whose result lies between
its `fp` values).  Anything else is unknown, and the rule keeps reporting.
"""

from __future__ import annotations

import math

import libcst as cst

from perflint.analysis import Facts, call_name, literal_value
from perflint.analysis.summary import _symbol_of

Interval = tuple[float, float]
_DEPTH = 8


def always_one(facts: Facts, expr: cst.BaseExpression) -> bool:
    """Whether `expr` is 1 in every documented multi-process launch (see the module)."""
    got = _value(facts, expr, _DEPTH)
    return got is not None and got[0] == got[1] == 1


def _value(facts: Facts, e: cst.BaseExpression, depth: int) -> Interval | None:
    if depth <= 0:
        return None
    if isinstance(e, (cst.Integer, cst.Float)):
        v = literal_value(e)
        return (v, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if isinstance(e, cst.Name):
        return _name(facts, e, depth)
    if isinstance(e, cst.Attribute):
        return _attribute(facts, e, depth)
    if isinstance(e, cst.BinaryOperation):
        return _binary(facts, e, depth)
    if isinstance(e, cst.Call):
        return _call(facts, e, depth)
    return None


def _union(values: list[Interval | None]) -> Interval | None:
    if not values or any(v is None for v in values):
        return None
    return min(v[0] for v in values), max(v[1] for v in values)  # type: ignore[index]


def _name(facts: Facts, e: cst.Name, depth: int) -> Interval | None:
    bindings = facts.bindings.lookup(e.value, e)
    if not bindings or any(b.how not in ("expr", "unpack") for b in bindings):
        return None
    return _union([_value(facts, v, depth - 1) if (v := b.value()) is not None else None for b in bindings])


def _attribute(facts: Facts, e: cst.Attribute, depth: int) -> Interval | None:
    found, default = facts.cross.option_default(e, callers=True)
    if found:
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            return None
        values: list[Interval | None] = []
        for given in _launched(facts, e):
            if given is None:
                values.append((default, default))
                continue
            try:
                v = float(given)
            except ValueError:
                return None
            values.append((v, v))
        return _union(values or [(default, default)])
    # `opt.total_batch_size = opt.batch_size`: every assignment of the attribute in the file.
    sources = [a.value for a in facts.tree.index[cst.Assign] for t in a.targets
               if isinstance(t.target, cst.Attribute) and t.target.attr.value == e.attr.value]
    return _union([_value(facts, v, depth - 1) for v in sources])


def _launched(facts: Facts, e: cst.Attribute) -> list[str | None]:
    """What each documented multi-process launch of this script passes to the option `e`
    names (None: it passes nothing); where none launches this script, what the launches of
    the scripts that call the function `e` sits in pass, and the default (ConvNeXt's
    `engine.py`, called from `main.py`)."""
    if facts.project is None:
        return []
    name = e.attr.value
    own = facts.project.launched_each(name)
    if own:
        return own
    callers = facts.project.launched_option(name, _symbol_of(facts, facts.tree.enclosing_function(e)))
    return [*callers, None] if callers else []


def _binary(facts: Facts, e: cst.BinaryOperation, depth: int) -> Interval | None:
    a, b = _value(facts, e.left, depth - 1), _value(facts, e.right, depth - 1)
    if a is None or b is None or a[0] <= 0 or b[0] <= 0:
        return None  # positive operands only: the bounds then stay ordered
    op = e.operator
    if isinstance(op, cst.Add):
        return a[0] + b[0], a[1] + b[1]
    if isinstance(op, cst.Multiply):
        return a[0] * b[0], a[1] * b[1]
    if isinstance(op, cst.Divide):
        return a[0] / b[1], a[1] / b[0]
    if isinstance(op, cst.FloorDivide):
        return a[0] // b[1], a[1] // b[0]
    return None


_MONOTONIC = {"round": round, "int": int, "floor": math.floor, "ceil": math.ceil}


def _call(facts: Facts, e: cst.Call, depth: int) -> Interval | None:
    name = call_name(e)
    args = [a for a in e.args if a.keyword is None and not a.star]
    if len(args) != len(e.args):
        return None
    if name == "round" and isinstance(e.func, cst.Attribute) and not args:
        inner = _value(facts, e.func.value, depth - 1)  # `np.interp(...).round()`
        return (round(inner[0]), round(inner[1])) if inner is not None else None
    qual = facts.tree.qualname(e.func) or name or ""
    if qual in ("round", "int", "math.floor", "math.ceil") and len(args) == 1:
        inner = _value(facts, args[0].value, depth - 1)
        f = _MONOTONIC[qual.rsplit(".", 1)[-1]]
        return (f(inner[0]), f(inner[1])) if inner is not None else None
    if qual in ("max", "min") and len(args) >= 2:
        vals = [_value(facts, a.value, depth - 1) for a in args]
        if any(v is None for v in vals):
            return None
        pick = max if qual == "max" else min
        return pick(v[0] for v in vals), pick(v[1] for v in vals)  # type: ignore[index]
    if qual == "numpy.interp" and len(args) == 3 and isinstance(args[2].value, (cst.List, cst.Tuple)):
        vals = [_value(facts, el.value, depth - 1) for el in args[2].value.elements]
        return _union(vals)
    return None
