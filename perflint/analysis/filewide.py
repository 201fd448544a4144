"""File-wide facts: the words of a file, references to torch settings, autocast and
GradScaler use."""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from perflint.analysis.syntax import literal_value
from perflint.analysis.vocab import AUTOCASTS, SCALERS

if TYPE_CHECKING:
    from perflint.analysis.facts import Facts


class FileWideMixin:
    @cached_property
    def words(self) -> "Words":
        """Every identifier and string literal of the file, for name-based guards."""
        return Words(self)

    def references(self, *prefixes: str) -> list[cst.CSTNode]:
        """Name/Attribute nodes (outermost) whose qualified name starts with one of `prefixes`."""
        out = []
        for a in self.index[cst.Attribute]:
            parent = self.parents.get(a)
            if isinstance(parent, cst.Attribute) and parent.value is a:
                continue
            q = self.qualname(a)
            if q is not None and q.startswith(prefixes):
                out.append(a)
        for call in self.index[cst.Call]:
            if isinstance(call.func, cst.Name):
                q = self.qualname(call.func)
                if q is not None and q.startswith(prefixes):
                    out.append(call.func)
        return out

    @cached_property
    def uses_autocast(self) -> bool:
        return bool(self.references(*AUTOCASTS)) or any(
            (self.qualname(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "") in AUTOCASTS
            for d in self.index[cst.Decorator]
        )

    @cached_property
    def uses_grad_scaler(self) -> bool:
        return bool(self.references(*SCALERS))


class Words:
    """Every identifier (names, attribute names, keyword names) and string literal of a
    file, collected from the facts walk's index, plus whether the `@` operator appears."""

    def __init__(self, facts: Facts) -> None:
        self.name_nodes: dict[str, list[cst.Name]] = {}
        for node in facts.index[cst.Name]:
            self.name_nodes.setdefault(node.value, []).append(node)  # type: ignore[attr-defined]
        strings = set()
        for node in facts.index[cst.SimpleString]:
            v = literal_value(node)
            if isinstance(v, str):
                strings.add(v)
        self.names = frozenset(self.name_nodes)
        self.strings = frozenset(strings)
        self.matmul_operator = any(
            isinstance(n.operator, cst.MatrixMultiply) for n in facts.index[cst.BinaryOperation]  # type: ignore[attr-defined]
        ) or any(isinstance(n.operator, cst.MatrixMultiplyAssign) for n in facts.index[cst.AugAssign])  # type: ignore[attr-defined]
        self._lower = tuple(w.lower() for w in (*self.names, *self.strings))
        self._lower_names = tuple(w.lower() for w in self.names)

    def contains(self, *fragments: str) -> bool:
        """Whether any identifier or string contains one of `fragments` (case-insensitive)."""
        frags = tuple(f.lower() for f in fragments)
        return any(f in w for w in self._lower for f in frags)

    def name_contains(self, *fragments: str) -> bool:
        """Whether any identifier (not string) contains one of `fragments` (case-insensitive)."""
        frags = tuple(f.lower() for f in fragments)
        return any(f in w for w in self._lower_names for f in frags)

    def matches(self, rx: "re.Pattern") -> bool:
        return any(rx.search(w) for w in self._lower)

