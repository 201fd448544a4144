"""The base of the analyses that make up a file's facts (`analysis.facts.Facts`).

Each analysis is a component: it declares the components it reads (`needs`), gets them as
attributes when it is built, and computes what it answers lazily, on first use.  The facts
build the components in an order where every component's needs come first, so the needs
form no cycle.  `self.facts` is the whole set, for the module-level helpers that take it;
`self.project` is the project view (None for a file checked on its own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perflint.analysis.facts import Facts


class Component:
    needs: tuple[str, ...] = ()

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.project = facts.project
        for name in self.needs:
            setattr(self, name, getattr(facts, name))
