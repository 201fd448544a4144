"""Small, formatting-preserving libcst rewrites shared by the rules' fixes."""

from __future__ import annotations

import libcst as cst


def parse_expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def parse_stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def make_kwarg(name: str, value: cst.BaseExpression | str) -> cst.Arg:
    if isinstance(value, str):
        value = parse_expr(value)
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )


def _comma_like(call: cst.Call) -> cst.Comma:
    """The comma to put between two arguments, in the call's own layout at its end (a call
    may start `f(a, b,` and go on one argument per line)."""
    for arg in reversed(call.args[:-1]):
        if isinstance(arg.comma, cst.Comma):
            ws = arg.comma.whitespace_after
            if isinstance(ws, cst.ParenthesizedWhitespace) and (ws.first_line.comment is not None or ws.empty_lines):
                # Another argument's comment (or blank lines) is not copied.
                return arg.comma.with_changes(whitespace_after=ws.with_changes(
                    first_line=cst.TrailingWhitespace(), empty_lines=[]))
            return arg.comma
    if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        return cst.Comma(whitespace_after=call.whitespace_before_args)
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def add_arg(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """Append a keyword argument, keeping one-line calls on one line and exploded calls
    exploded (trailing comma and all)."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[arg])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # Exploded call with a trailing comma: the new argument inherits the trailing comma,
        # the old last argument gets an ordinary separating comma.
        sep = _comma_like(call) if len(args) > 1 else (
            cst.Comma(whitespace_after=call.whitespace_before_args)
            if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace)
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        old_comma = last.comma
        ws = old_comma.whitespace_after
        if (isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None
                and isinstance(sep.whitespace_after, cst.ParenthesizedWhitespace)):
            # `x=0,  # note` stays on its own line: the comment keeps its argument.
            sep = sep.with_changes(whitespace_after=sep.whitespace_after.with_changes(first_line=ws.first_line))
            old_comma = old_comma.with_changes(whitespace_after=ws.with_changes(
                first_line=cst.TrailingWhitespace()))
        args[-1] = last.with_changes(comma=sep)
        args.append(arg.with_changes(comma=old_comma))
    else:
        sep = _comma_like(call) if len(args) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        closing = last.whitespace_after_arg
        if isinstance(closing, cst.ParenthesizedWhitespace):
            # `f(a,\n  b\n)`: the line break before `)` moves after the new argument.
            args[-1] = last.with_changes(comma=sep, whitespace_after_arg=cst.SimpleWhitespace(""))
            args.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=closing))
        else:
            args[-1] = last.with_changes(comma=sep)
            args.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
    return call.with_changes(args=args)


def remove_arg(call: cst.Call, arg: cst.Arg) -> cst.Call:
    args = list(call.args)
    i = next(k for k, a in enumerate(args) if a is arg)
    removed = args.pop(i)
    if i == len(args) and args:
        # Removed the last argument: the new last one takes over its comma (or lack of one).
        args[-1] = args[-1].with_changes(comma=removed.comma)
    if not args:
        return call.with_changes(args=[])
    return call.with_changes(args=args)


def replace_arg_value(call: cst.Call, arg: cst.Arg, value: cst.BaseExpression | str) -> cst.Call:
    if isinstance(value, str):
        value = parse_expr(value)
    return call.with_changes(args=[a.with_changes(value=value) if a is arg else a for a in call.args])


def keywordize(call: cst.Call, names: list[str]) -> cst.Call | None:
    """Turn positional arguments into keywords following `names`; None if there are too many."""
    new_args = []
    pos = 0
    for a in call.args:
        if a.star:
            return None
        if a.keyword is None:
            if pos >= len(names):
                return None
            new_args.append(
                a.with_changes(
                    keyword=cst.Name(names[pos]),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                    ),
                )
            )
            pos += 1
        else:
            new_args.append(a)
    return call.with_changes(args=new_args)


def prepend_arg(call: cst.Call, value: cst.BaseExpression | str, keyword: str | None = None) -> cst.Call:
    if isinstance(value, str):
        value = parse_expr(value)
    if keyword is None:
        new = cst.Arg(value=value)
    else:
        new = make_kwarg(keyword, value)
    if call.args:
        first_sep = _comma_like(call) if len(call.args) > 1 or isinstance(call.args[0].comma, cst.Comma) else cst.Comma(
            whitespace_after=cst.SimpleWhitespace(" ")
        )
        new = new.with_changes(comma=first_sep)
    return call.with_changes(args=[new, *call.args])


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)
