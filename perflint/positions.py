"""Source positions for just the nodes that produce a diagnostic.

libcst's `PositionProvider` records a range for every node of the tree; measured on 80 timm
files it cost 4.5 s against 0.6 s for this: one code-generation pass that counts characters
and records ranges only for the requested nodes, then maps offsets to rows and columns.
"""

from __future__ import annotations

import bisect
import re
from contextlib import contextmanager, nullcontext
from typing import Iterable, Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

_NULL = nullcontext()
_NEWLINE = re.compile(r"\r\n?|\n")


class _State(CodegenState):
    def __init__(self, module: cst.Module, targets: set[cst.CSTNode]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.targets = targets
        self.found: dict[cst.CSTNode, tuple[int, int]] = {}

    def add_indent_tokens(self) -> None:
        for tok in self.indent_tokens:
            self.tokens.append(tok)
            self.offset += len(tok)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):  # type: ignore[override]
        if node in self.targets:
            return self._record(node, start_node, end_node)
        return _NULL

    @contextmanager
    def _record(self, node, start_node, end_node) -> Iterator[None]:
        # Compound statements hoist their end from their last body statement, so trailing
        # blank lines and comments are not part of the range.
        for extra in (start_node, end_node):
            if extra is not None:
                self.targets.add(extra)
        start = self.offset
        yield
        end = self.offset
        if start_node is not None and start_node in self.found:
            start = self.found[start_node][0]
        if end_node is not None and end_node in self.found:
            end = self.found[end_node][1]
        self.found.setdefault(node, (start, end))


class LineIndex:
    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def row_col(self, offset: int) -> tuple[int, int]:
        """1-based row, 1-based column."""
        i = bisect.bisect_right(self.starts, offset) - 1
        return i + 1, offset - self.starts[i] + 1

    def offset(self, row: int, column: int) -> int:
        return self.starts[row - 1] + column - 1


def node_offsets(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, tuple[int, int]]:
    """Character ranges (start, end) in `module.code` for the given nodes."""
    targets = set(nodes)
    if not targets:
        return {}
    state = _State(module, set(targets))
    module._codegen(state)
    return {n: state.found[n] for n in targets if n in state.found}
