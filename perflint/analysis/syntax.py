"""Small helpers over single expressions: call names, arguments, literals."""

from __future__ import annotations

import libcst as cst


def call_name(call: cst.Call) -> str | None:
    """The method or function name of a call: `a.b.step()` → "step"."""
    f = call.func
    if isinstance(f, cst.Attribute):
        return f.attr.value
    if isinstance(f, cst.Name):
        return f.value
    return None


def get_arg(call: cst.Call, name: str | None, pos: int | None = None) -> cst.Arg | None:
    """An argument by keyword, or by position when no keyword precedes it."""
    for arg in call.args:
        if arg.keyword is not None and name is not None and arg.keyword.value == name:
            return arg
    if pos is not None:
        i = 0
        for arg in call.args:
            if arg.keyword is not None or arg.star:
                break
            if i == pos:
                return arg
            i += 1
    return None


def strip_not(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
    """`not not x` → (x, False), `not x` → (x, True): the tested expression and whether the
    test is negated."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    return test, negated


def argparse_dest(call: cst.Call) -> str | None:
    """The attribute `parser.add_argument(...)` sets: its `dest=`, else its first `--long`
    option with dashes made underscores (`--num-workers` → `num_workers`)."""
    d = get_arg(call, "dest")
    if d is not None and isinstance(literal_value(d.value), str):
        return literal_value(d.value)
    for a in call.args:
        v = literal_value(a.value) if a.keyword is None else None
        if isinstance(v, str) and v.startswith("--"):
            return v.lstrip("-").replace("-", "_")
    return None


def has_splat(call: cst.Call) -> bool:
    return any(arg.star for arg in call.args)


def literal_value(node: cst.BaseExpression | None):
    """Python value of a simple literal (numbers, strings, True/False/None); else a sentinel."""
    if node is None:
        return _NOT_LITERAL
    if isinstance(node, cst.Integer):
        return node.evaluated_value
    if isinstance(node, cst.Float):
        return node.evaluated_value
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            return node.evaluated_value
        except Exception:  # noqa: BLE001 - f-strings and odd prefixes
            return _NOT_LITERAL
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = literal_value(node.expression)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v
    return _NOT_LITERAL


class _NotLiteral:
    def __repr__(self) -> str:
        return "<not a literal>"


_NOT_LITERAL = _NotLiteral()
NOT_LITERAL = _NOT_LITERAL


# ----------------------------------------------------------------------------------------


def comments_in(node: cst.CSTNode):
    """The text of every comment inside `node`, whitespace included (the facts' walk skips
    whitespace: ask here)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Comment):
            yield n.value
        else:
            stack.extend(n.children)


def is_main_guard(node: cst.CSTNode) -> bool:
    """`if __name__ == "__main__":` (either way round): its block runs only when the file is
    run as a script, never when it is imported."""
    if not (isinstance(node, cst.If) and isinstance(node.test, cst.Comparison) and len(node.test.comparisons) == 1
            and isinstance(node.test.comparisons[0].operator, cst.Equal)):
        return False
    sides = (node.test.left, node.test.comparisons[0].comparator)
    return {s.value if isinstance(s, cst.Name) else literal_value(s) for s in sides} == {"__name__", "__main__"}


def is_cli_command(fn: cst.FunctionDef) -> bool:
    """A command-line (sub)command: decorated `@<group>.command(...)` (click, typer), an entry
    point the program runs on its own."""
    for d in fn.decorators:
        f = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if isinstance(f, cst.Attribute) and f.attr.value == "command":
            return True
    return False


def patch_embedding(call: cst.Call, last: str) -> bool:
    """A convolution whose stride equals its kernel size (`Conv2d(3, 768, kernel_size=patch,
    stride=patch)`, a ViT's patch embedding): it cuts the input into disjoint patches and
    projects each, a matrix product over patches."""
    lazy = last.startswith("lazyconv")
    kernel, stride = get_arg(call, "kernel_size", 1 if lazy else 2), get_arg(call, "stride", 2 if lazy else 3)
    if kernel is None or stride is None:
        return False
    k, st = literal_value(kernel.value), literal_value(stride.value)
    if k is not NOT_LITERAL or st is not NOT_LITERAL:
        return k == st and k not in (NOT_LITERAL, None)
    named = [cst.Module([]).code_for_node(a.value) for a in (kernel, stride)]
    return isinstance(kernel.value, (cst.Name, cst.Attribute)) and named[0] == named[1]
