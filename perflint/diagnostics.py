"""The data a lint run produces: diagnostics, fixes, edits and per-file errors.

Everything here is plain data that pickles across worker processes and serialises to the
cache; rules never build these directly (they return `perflint.rules.base.Violation`s, which
the engine turns into diagnostics once positions are known).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class Applicability(str, Enum):
    SAFE = "safe"
    UNSAFE = "unsafe"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, order=True)
class Location:
    """A 1-based row and a 1-based column, as ruff's JSON output has them."""

    row: int
    column: int


@dataclass(frozen=True)
class Edit:
    content: str
    location: Location
    end_location: Location


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    message: str
    edits: tuple[Edit, ...] = ()


@dataclass(frozen=True)
class Diagnostic:
    code: str
    name: str
    message: str
    severity: Severity
    location: Location
    end_location: Location
    fix: Fix | None = None
    # Notebooks: the 1-based cell number; rows are then counted inside that cell.
    cell: int | None = None
    # Why the finding's code runs on every step: short lines with line numbers, the loop
    # first (`perflint.analysis.hotpath`); empty for rules that claim no per-step cost.
    why: tuple[str, ...] = ()

    @property
    def sort_key(self) -> tuple:
        return (self.cell or 0, self.location.row, self.location.column, self.code, self.message)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["severity"] = self.severity.value
        if self.fix is not None:
            data["fix"]["applicability"] = self.fix.applicability.value
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Diagnostic":
        fix = data.get("fix")
        return cls(
            code=data["code"],
            name=data["name"],
            message=data["message"],
            severity=Severity(data["severity"]),
            location=Location(**data["location"]),
            end_location=Location(**data["end_location"]),
            fix=None
            if fix is None
            else Fix(
                applicability=Applicability(fix["applicability"]),
                message=fix["message"],
                edits=tuple(
                    Edit(
                        content=e["content"],
                        location=Location(**e["location"]),
                        end_location=Location(**e["end_location"]),
                    )
                    for e in fix["edits"]
                ),
            ),
            cell=data.get("cell"),
            why=tuple(data.get("why") or ()),
        )


class ErrorKind(str, Enum):
    """Why a file could not be linted or fixed; every kind makes the run exit 2."""

    IO = "io-error"
    DECODE = "decode-error"
    SYNTAX = "syntax-error"
    # CPython parses the file, perflint's parser (libcst) does not: not the user's error.
    PARSE = "parse-error"
    NOTEBOOK = "notebook-error"
    CONFIG = "config-error"
    FIX = "fix-error"
    INTERNAL = "internal-error"


@dataclass(frozen=True)
class FileError:
    path: str
    kind: ErrorKind
    message: str

    def one_line(self) -> str:
        return f"{self.path}: {self.kind.value}: {self.message}"


@dataclass
class FileResult:
    """The outcome for one file: diagnostics after suppression, errors, and fix output."""

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    # Set by `fix`: the new file bytes (None when nothing changed) and how many fixes went in.
    fixed_bytes: bytes | None = None
    original_bytes: bytes | None = None
    fixes_applied: dict[str, int] = field(default_factory=dict)  # findings fixed, by code
    fixes_uncovered: dict[str, int] = field(default_factory=dict)  # ... that only the fixes brought up
    from_cache: bool = False
    skipped: bool = False  # the prefilter proved no selected rule can fire
    # Cross-module analysis: the file's module summary (when asked for), the questions its
    # analysis asked of the project, and — when a first pass answered them from the file's
    # own summary — the digest of those answers (`analysis.project.answers_digest`).
    summary: dict | None = None
    questions: list[str] = field(default_factory=list)
    answers: str | None = None
    # Whether the process that produced this result kept the file's parsed tree.
    kept: bool = False
