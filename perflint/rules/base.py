"""The contract between the engine and a rule.

A rule is a class with a code, a name, a house-format docstring, a severity, its fix class,
the torch versions it applies to, whether its findings claim a cost on every step, and how an
editor shows them.  `check(facts)` yields `Violation`s: the node to report,
a message, and optionally a `FixPlan` — replacements of original nodes by new ones, which the
engine applies with a libcst transformer (never by editing strings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Iterator

import libcst as cst

from perflint.diagnostics import Applicability, Severity
from perflint.analysis import Facts
from perflint.rules.metadata import EditorTag, FixClass

Version = tuple[int, int]


@dataclass
class FixPlan:
    applicability: Applicability
    message: str
    # original node → its replacement (a node, a FlattenSentinel, or a RemovalSentinel)
    replacements: dict[cst.CSTNode, object] = field(default_factory=dict)


@dataclass
class Violation:
    node: cst.CSTNode
    message: str
    fix: FixPlan | None = None
    # The evidence that the node runs on every step (`perflint.analysis.hotpath.WhyStep`s),
    # for rules that claim a per-step cost.
    why: list | None = None


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    severity: ClassVar[Severity] = Severity.WARNING
    fix_class: ClassVar[FixClass] = FixClass.NONE
    default: ClassVar[bool] = True
    # The rule applies when min_torch <= target torch < max_torch (None: unbounded).
    min_torch: ClassVar[Version | None] = None
    max_torch: ClassVar[Version | None] = None
    # Prefilter: a file that contains none of these byte strings cannot produce a finding.
    tokens: ClassVar[tuple[bytes, ...]] = (b"torch",)
    # The findings are about code that runs on every step of a loop: each carries the
    # evidence (the file's hot path to it when the rule attaches none), and a finding in a
    # function that another file's loop calls every step says where it is called from.
    per_step: ClassVar[bool] = False
    # How an editor marks the findings (the language server's diagnostic tags).
    editor_tags: ClassVar[tuple[EditorTag, ...]] = ()
    # Rules whose fixes this rule's fix may share a `fix` pass with where their nodes overlap
    # (`perflint.fixedits.compose`): this fix reads nothing that theirs write, so taking it
    # with theirs applied first gives what the next pass would give.  Left out: a rule whose
    # fix can make this one moot or change it.
    fix_commutes_with: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # A fix class or tag written as its text ("unsafe") becomes the enum member; an
        # unknown one is an error when the class is defined.
        cls.fix_class = FixClass(cls.fix_class)
        cls.editor_tags = tuple(EditorTag(t) for t in cls.editor_tags)

    @classmethod
    def may_fire_in(cls, text: str) -> bool:
        """Whether the source `text` holds one of the rule's tokens (without one the rule
        cannot fire there, so it is not run)."""
        texts = cls.__dict__.get("_token_texts")
        if texts is None:
            texts = tuple(t.decode("latin-1") for t in cls.tokens)
            setattr(cls, "_token_texts", texts)
        return any(t in text for t in texts)

    def check(self, facts: Facts) -> Iterator[Violation]:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def applies_to(cls, target: Version) -> bool:
        if cls.min_torch is not None and target < cls.min_torch:
            return False
        if cls.max_torch is not None and target >= cls.max_torch:
            return False
        return True

    @classmethod
    def doc(cls) -> str:
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")

    # helpers -------------------------------------------------------------------------
    def safe(self, message: str, replacements: dict) -> FixPlan:
        return FixPlan(Applicability.SAFE, message, replacements)

    def unsafe(self, message: str, replacements: dict) -> FixPlan:
        return FixPlan(Applicability.UNSAFE, message, replacements)
