"""Lint and fix one file (many files: `perflint.jobs`; the result cache is the runner's).

    read ─► prefilter ─► parse ─► facts ─► rules ─► positions ─► noqa ─► diagnostics
                │                                                 └─► fix: apply, re-parse, repeat
                └─► no selected rule can fire: a CPython syntax check only (so a syntax
                    error is reported either way), no libcst parse

The engine is a library: it never imports the CLI and prints nothing.  `fix_source()` is the
entry point the runtime's verifier uses to produce the "after" script.  One rule failing on
one file is reported as an internal error of that file; the other rules' findings stand.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perflint import __version__
from perflint.diagnostics import (
    Applicability,
    Diagnostic,
    Edit,
    ErrorKind,
    FileError,
    FileResult,
    Fix,
    Location,
)
from perflint.runcontext import current_trees
from perflint.selection import prefilter_tokens
from perflint.source import Source, SourceError, read_source

MAX_FIX_PASSES = 10
BUG_HINT = "this is a bug in perflint; please report it with the file that triggers it"


@dataclass(frozen=True)
class LintOptions:
    """What decides a file's diagnostics, besides its content (so: the cache key)."""

    codes: tuple[str, ...]
    target_torch: tuple[int, int] = (2, 4)
    with_edits: bool = True  # each fix's text edits (JSON output); cached with the findings
    prefilter: bool = True

    def fingerprint(self) -> str:
        blob = json.dumps([__version__, list(self.codes), list(self.target_torch), self.with_edits, self.prefilter])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class _Analysis:
    module: object
    facts: object
    findings: list  # (rule, Violation)
    errors: list[FileError] = field(default_factory=list)
    # Set when the module summary follows the findings: the positions pass of the findings then
    # also records every call's range, which the summary's per-step call lines reuse (one
    # rendering of the module instead of two).
    call_offsets: dict | None = None


class _RuleSet:
    """The selected rules that apply to the target torch, in code order.  A rule is imported
    and made the first time a file can fire it (`_runnable`), so that a run imports only the
    rules its files need; iterating makes them all.  One instance per rule for the set's life."""

    def __init__(self, options: LintOptions) -> None:
        from perflint.selection import rule_records

        records = rule_records()
        self.records = [records[c] for c in options.codes
                        if c in records and records[c].applies_to(options.target_torch)]
        self._made: dict = {}

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter([self.rule(r.code) for r in self.records])

    def rule(self, code: str):
        made = self._made.get(code)
        if made is None:
            from perflint.rules import rule_class

            made = self._made[code] = rule_class(code)()
        return made

    def may_fire_in(self, text: str) -> list:
        """As `Rule.may_fire_in`, read from the records, for every rule of the set."""
        return [self.rule(r.code) for r in self.records
                if any(t.decode("latin-1") in text for t in r.tokens)]


def _rules_for(options: LintOptions) -> _RuleSet:
    return _RuleSet(options)


def _runnable(rules, text: str, options: LintOptions) -> list:
    """The rules that can fire in `text`: with the prefilter on, those that find one of their
    tokens in it (a rule left out asks the project nothing either, so its file is not
    checked again for the answers, and is not imported)."""
    if not options.prefilter:
        return list(rules)
    if isinstance(rules, _RuleSet):
        return rules.may_fire_in(text)
    return [r for r in rules if r.may_fire_in(text)]


def _cannot_fire(raw: bytes, options: LintOptions) -> bool:
    """The prefilter: the file holds none of the tokens of the selected rules (read from
    the rule table: the rule modules and libcst are not imported for it)."""
    return options.prefilter and not any(tok in raw for tok in prefilter_tokens(options.codes, options.target_torch))


def _cpython_syntax_error(text: str) -> str | None:
    """CPython's description of a syntax error (clearer than libcst's), if it sees one."""
    import ast
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except SyntaxError as exc:
        hint = ""
        if _ASYNC_KEYWORD.search(exc.text or ""):
            # torch 0.3's `.cuda(async=True)`: the keyword became `non_blocking` in 0.4
            hint = " (`async` is a reserved word since Python 3.7: write `non_blocking=True`, its name since torch 0.4)"
        return f"line {exc.lineno or 1}, column {exc.offset or 1}: {exc.msg}{hint}"
    except (ValueError, MemoryError, RecursionError):
        return None
    return None


# `x.cuda(async=True)`, `x.to(device, async=True)`: a method call given `async` as a keyword.
_ASYNC_KEYWORD = re.compile(r"\.\w+\([^()]*\basync\s*=(?!=)")


def _parse_module(text: str):
    from perflint.cstprivate import parse_module

    return parse_module(text)


CANNOT_PARSE = "perflint cannot parse this file (Python can)"


def _mixed_indentation(text: str) -> bool:
    """Whether some line's indentation holds both tabs and spaces, or lines differ in which they use."""
    kinds = set()
    for line in text.splitlines():
        lead = line[: len(line) - len(line.lstrip(" \t"))]
        if not lead or not line.strip():
            continue
        if " " in lead and "\t" in lead:
            return True
        kinds.add(lead[0])
    return len(kinds) > 1


def _parse(text: str, path: str):
    import libcst as cst

    trees = current_trees()
    kept = trees.take(path, text) if trees is not None and trees.trees else None
    if kept is not None:
        return kept, None
    try:
        module = _parse_module(text)
        if trees is not None:
            trees.parsed(path, text, module)
        return module, None
    except cst.ParserSyntaxError as exc:
        better = _cpython_syntax_error(text)
        if better is not None:
            return None, FileError(path, ErrorKind.SYNTAX, better)
        # CPython accepts the file: the limit is perflint's parser, not the user's code.
        msg = str(exc.message).splitlines()[0] if exc.message else "invalid syntax"
        hint = " (indentation mixes tabs and spaces)" if _mixed_indentation(text) else ""
        return None, FileError(path, ErrorKind.PARSE, f"{CANNOT_PARSE}: line {exc.raw_line}, column "
                                                      f"{exc.raw_column + 1}: {msg}{hint}")
    except RecursionError:
        return None, FileError(path, ErrorKind.SYNTAX, "too deeply nested to parse")
    except Exception as exc:  # noqa: BLE001 - libcst raises assorted errors on odd input
        return None, FileError(path, ErrorKind.SYNTAX, f"cannot parse: {type(exc).__name__}: {exc}".splitlines()[0])


def syntax_check(text: str, path: str) -> FileError | None:
    """The syntax error `_parse` would report, found at a fraction of its cost.

    CPython's parser accepts the file: so does libcst.  CPython rejects it (or it uses
    syntax newer than this interpreter): libcst decides, so the answer is always libcst's.
    """
    import ast
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
        return None
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        pass
    return _parse(text, path)[1]


def _analyze(text: str, path: str, rules, target, project=None, module=None, tree=None) -> _Analysis | FileError:
    """The facts of one file and every rule's findings.  `tree`: the facts of an analysis of
    the same `module` whose walk this one takes over (that analysis is not used again)."""
    from perflint.analysis import Facts
    from perflint.analysis.unused import nothing_runs

    if module is None:
        module, err = _parse(text, path)
        if err is not None:
            return err
    try:
        facts = Facts(module, target, project, tree=tree)
    except RecursionError:
        return FileError(path, ErrorKind.INTERNAL, "file too deeply nested to analyse")
    facts.selected = frozenset(rule.code for rule in rules)
    findings = []
    errors = []
    for rule in rules:
        if facts.target_torch != target and not rule.applies_to(facts.target_torch):
            continue  # the file's imports bound its torch below the target (`torchtext.legacy`)
        try:
            for v in rule.check(facts):
                # Not in a branch no run takes (`else:` of an always-true option), nor in a
                # function the project never calls, nor in a module nothing imports.
                if not facts.throttles.never_runs(v.node) and not nothing_runs(facts, v.node):
                    findings.append((rule, v))
        except Exception as exc:  # noqa: BLE001 - one broken rule must not take the run down
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            errors.append(
                FileError(
                    path,
                    ErrorKind.INTERNAL,
                    f"rule {rule.code} failed ({type(exc).__name__}: {exc} at "
                    f"{os.path.basename(where.filename)}:{where.lineno}); {BUG_HINT}",
                )
            )
    return _Analysis(module, facts, findings, errors)


def _to_diagnostics(src: Source, text: str, analysis: _Analysis, options: LintOptions) -> list[Diagnostic]:
    from perflint.analysis.hotpath import render_why
    from perflint.positions import LineIndex, node_offsets

    if not analysis.findings:
        return []
    module = analysis.module
    whole: dict = {}
    replaced = [n for _, v in analysis.findings if v.fix is not None for n in v.fix.replacements] \
        if options.with_edits else []
    why_of = _why_steps(analysis)
    anchors = [s.node for steps in why_of.values() for s in steps if s.node is not None]
    calls = analysis.facts.tree.calls() if analysis.call_offsets is not None else []
    offsets = node_offsets(module, [v.node for _, v in analysis.findings] + anchors + list(calls), whole, replaced)
    if calls:
        analysis.call_offsets = offsets
    from perflint.noqa import parse_suppressions

    lines = LineIndex(text)
    sup = parse_suppressions(text)
    edits_of: dict[int, tuple[Edit, ...]] = {}
    if options.with_edits:
        edits_of = _fix_edits(analysis, text, lines, src, sup, offsets, whole)
    out = []
    for rule, v in analysis.findings:
        if v.node not in offsets:
            continue
        s, e = offsets[v.node]
        row, col = lines.row_col(s)
        erow, ecol = lines.row_col(e)
        if sup.suppressed(rule.code, row):
            continue
        cell = None
        if src.notebook is not None:
            cell, row = src.notebook.locate(row)
            _, erow = src.notebook.locate(erow)
        message = v.message
        if analysis.facts.step_callers and rule.per_step:
            message += _called_from(analysis.facts, v.node)
        fix = None
        if v.fix is not None:
            fix = Fix(v.fix.applicability, v.fix.message, edits_of.get(id(v.fix), ()))
        out.append(
            Diagnostic(
                code=rule.code,
                name=rule.name,
                message=message,
                severity=rule.severity,
                location=Location(row, col),
                end_location=Location(erow, ecol),
                fix=fix,
                cell=cell,
                why=render_why(why_of.get(id(v)), offsets, lines, src.notebook),
            )
        )
    out.sort(key=lambda d: d.sort_key)
    return _dedupe(out)


def _fix_edits(analysis: _Analysis, text: str, lines, src: Source, sup, offsets, whole: dict) -> dict[int, tuple[Edit, ...]]:
    """id(fix plan) → the edits of that fix (see `perflint.fixedits`), for the findings
    that are reported."""
    from perflint import fixedits

    plans = []
    seen: set[int] = set()
    for rule, v in analysis.findings:
        if v.fix is None or id(v.fix) in seen or v.node not in offsets:
            continue
        if sup.suppressed(rule.code, lines.row_col(offsets[v.node][0])[0]):
            continue
        seen.add(id(v.fix))
        plans.append(v.fix)
    if not plans:
        return {}
    module = analysis.module
    by_plan = fixedits.plan_edits(module, text, plans, whole,
                                  alone=lambda p: fixedits.edits_alone(module, text, p, _apply))
    return {k: fixedits.to_edits(v, lines, src.notebook) for k, v in by_plan.items()}


def _why_steps(analysis: _Analysis) -> dict:
    """id(violation) → the chain of evidence that its code runs on every step: what the
    rule attached, else, for the per-step rules, the file's hot path to the node."""
    out = {}
    for rule, v in analysis.findings:
        steps = v.why
        if steps is None and rule.per_step:
            steps = analysis.facts.hotpath.hot_path(v.node)
        if steps:
            out[id(v)] = steps
    return out


def _called_from(facts, node) -> str:
    """" (runs once per step: called from train.py:212)" for a finding inside a function
    that a loop in another file calls on every step."""
    info = facts.loops.iteration_context(node)
    caller = facts.step_callers.get(info.node) if info is not None else None
    if caller is None:
        return ""
    path, line = caller[0], caller[1]
    root = getattr(getattr(facts.project, "index", None), "root", None)
    shown = os.path.relpath(path, root) if root else os.path.basename(path)
    return f" (runs once per step: called from {Path(shown).as_posix()}:{line})"


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    out = []
    for d in diags:
        key = (d.code, d.cell, d.location, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _apply(module, plans):
    import libcst as cst

    replacements: dict = {}
    for plan in plans:
        replacements.update(plan.replacements)

    class _Replacer(cst.CSTTransformer):
        def on_leave(self, original_node, updated_node):
            return replacements.get(original_node, updated_node)

    return module.visit(_Replacer())


def _apply_and_parse(module, plans, path: str) -> tuple[str, str | None, object]:
    """The module's code with `plans` applied, why it does not parse (None if it does), and
    its tree when it does (the next fix pass analyses that tree instead of parsing again)."""
    try:
        new_text = _apply(module, plans).code
    except Exception as exc:  # noqa: BLE001 - a replacement libcst cannot render
        return "", f"{type(exc).__name__}: {exc}".splitlines()[0], None
    parsed, perr = _parse(new_text, path)
    return new_text, (perr.message if perr is not None else None), parsed


def _load(path: str, raw: bytes | None) -> Source | FileError:
    try:
        return read_source(path, raw)
    except SourceError as exc:
        return FileError(path, ErrorKind(exc.kind), exc.message)


# A file that imports another deep-learning framework and not torch is that framework's code
# (PaddlePaddle's `.cuda()`, TensorFlow's data pipelines): no rule applies to it.
_OTHER_FRAMEWORK = re.compile(rb"^[ \t]*(?:import|from)[ \t]+(?:paddle|paddlenlp|mindspore|jittor|oneflow|megengine"
                              rb"|tensorflow|jax|flax|mxnet)\b", re.M)
_TORCH_IMPORT = re.compile(rb"^[ \t]*(?:import|from)[ \t]+(?:torch|torchvision|torchaudio|lightning|pytorch_lightning"
                           rb"|accelerate|transformers|timm)\b", re.M)


def not_torch_code(raw: bytes) -> bool:
    """Whether the file is another framework's code (`_OTHER_FRAMEWORK`, no torch import)."""
    return _OTHER_FRAMEWORK.search(raw) is not None and _TORCH_IMPORT.search(raw) is None


def _skip(result: FileResult, src: Source, path: str) -> FileResult:
    """No selected rule can fire: report only a syntax error."""
    result.skipped = True
    err = syntax_check(src.text, path)
    if err is not None:
        result.errors.append(_in_cell(err, src))
    return result


def lint_bytes(path: str, raw: bytes | None, options: LintOptions, project=None, summarise: bool = False,
               alone: bool = False) -> FileResult:
    """Lint one file.  `project` is its `ProjectView` (cross-module questions are asked of it
    and recorded in `result.questions`); with `summarise`, `result.summary` is the file's
    module summary for the other files of its project; `alone`: the file is the only Python
    file of its project (a script checked on its own)."""
    result = FileResult(path=path)
    src = _load(path, raw)
    if isinstance(src, FileError):
        result.errors.append(src)
        return result
    other = not_torch_code(src.raw)
    if not summarise and (other or _cannot_fire(src.raw, options)):
        return _skip(result, src, path)  # no selected rule can fire
    rules = _rules_for(options)
    if summarise and src.notebook is None and not other and rules and project is not None \
            and project.index is None and (alone or len(src.text) >= FIRST_PASS_ALONE_CHARS) \
            and _calls_its_own_functions(src.text):
        return _first_pass(result, src, rules, options, project)
    if summarise and src.notebook is None:
        # Another framework's file is still summarised (what it defines, what it imports),
        # so that the project sees the same files on every run; no rule runs on it.
        analysis = _analyze(src.text, path, () if other else _runnable(rules, src.text, options), options.target_torch,
                            project)
        _kept_analysis(path, src.text, analysis)
        if not isinstance(analysis, FileError):
            analysis.call_offsets = {}
        # The findings (and the questions they asked) first: the summary asks questions of
        # its own, which no finding depends on.
        _finish(result, src, analysis, options, project)
        if not isinstance(analysis, FileError):
            result.summary = _summary_of(analysis, src.text)
        return result
    if other or _cannot_fire(src.raw, options):
        return _skip(result, src, path)  # no selected rule can fire
    analysis = _analyze(src.text, path, _runnable(rules, src.text, options), options.target_torch, project)
    return _finish(result, src, analysis, options, project)


# A file this long whose functions are called in the file itself gets its first pass answered
# from its own summary (`_first_pass`): one more analysis walk instead of a second full check
# in phase 2.  Below it the second check, when the project's answers call for one, is the
# cheaper way (most small files need none), unless the file is its project's only one: then
# its own summary is the whole project, and the first pass is always the last.
FIRST_PASS_ALONE_CHARS = 200_000
_TOP_DEF = re.compile(r"^(?:async[ \t]+def|def|class)[ \t]+(\w+)", re.M)
_CALLED_WORD = re.compile(r"\b(\w+)\s*\(")
_HEADER = re.compile(r"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+(\w+)\s*\(", re.M)


def _calls_its_own_functions(text: str) -> bool:
    """Whether some top-level function or class of the file is called (or named with a call
    after it) anywhere but its own header: then the project's questions about its callers
    have answers in the file itself, and the first pass answers them from its summary.
    (One scan of the text for every name, not one per top-level name: a long file has
    thousands of them.)"""
    names = set(_TOP_DEF.findall(text))
    if not names:
        return False
    uses = Counter(w for w in _CALLED_WORD.findall(text) if w in names)
    headers = Counter(w for w in _HEADER.findall(text) if w in names)
    return any(uses[n] > headers[n] for n in names)


def _first_pass(result: FileResult, src: Source, rules, options: LintOptions, project) -> FileResult:
    """A checked file's first pass in a project run: its summary, then its findings with
    the questions about its own functions answered from that summary.  The file is checked
    again only if the whole project answers those questions differently (`result.answers`)."""
    from perflint.analysis.project import ProjectView, answers_digest

    path = result.path
    bare = _analyze(src.text, path, (), options.target_torch, ProjectView(None, path))
    if isinstance(bare, FileError):
        return _finish(result, src, bare, options, project)
    result.summary = _summary_of(bare, src.text)
    rules = _runnable(rules, src.text, options)
    if result.summary is None:
        analysis = _analyze(src.text, path, rules, options.target_torch, project, module=bare.module, tree=bare.facts)
        return _finish(result, src, analysis, options, project)
    view = project.alone(result.summary)
    analysis = _analyze(src.text, path, rules, options.target_torch, view, module=bare.module, tree=bare.facts)
    _kept_analysis(path, src.text, analysis)
    _finish(result, src, analysis, options, view)
    if result.questions:
        result.answers = answers_digest(view.index, path, result.questions, view)
    return result


def _kept_analysis(path: str, text: str, analysis) -> None:
    """Offer a first lint's analysis to the run's tree store (a fix run keeps it for the fix loop)."""
    trees = current_trees()
    if trees is not None and trees.budget and not isinstance(analysis, FileError):
        trees.analysed(path, text, analysis)


def _finish(result: FileResult, src: Source, analysis, options: LintOptions, project) -> FileResult:
    path = result.path
    if isinstance(analysis, FileError):
        result.errors.append(_in_cell(analysis, src))
        return result
    result.errors.extend(analysis.errors)
    try:
        result.diagnostics = _to_diagnostics(src, src.text, analysis, options)
    except Exception as exc:  # noqa: BLE001
        result.errors.append(FileError(path, ErrorKind.INTERNAL, f"reporting failed ({type(exc).__name__}: {exc}); {BUG_HINT}"))
    if project is not None:
        result.questions = sorted(project.asked)
    return result


def _summary_of(analysis: _Analysis, text: str) -> dict | None:
    from perflint.positions import summary_with_lines

    return summary_with_lines(analysis.facts, analysis.module, text, analysis.call_offsets)


def _in_cell(err: FileError, src: Source) -> FileError:
    """Rewrite a syntax error's virtual row into the notebook's cell:row."""
    if src.notebook is None or err.kind is not ErrorKind.SYNTAX or not err.message.startswith("line "):
        return err
    try:
        head, rest = err.message.split(",", 1)
        row = int(head.split()[1])
    except (ValueError, IndexError):
        return err
    cell, crow = src.notebook.locate(row)
    return FileError(err.path, err.kind, f"cell {cell}, line {crow},{rest}")


def _applicable(plan, unsafe: bool) -> bool:
    return plan.applicability is Applicability.SAFE or (unsafe and plan.applicability is Applicability.UNSAFE)


def fix_text(
    text: str,
    path: str,
    options: LintOptions,
    unsafe: bool,
    fixable: Callable[[str], bool] | None = None,
    project=None,
    first: list | None = None,
    last: list | None = None,
    reuse: bool = False,
) -> tuple[str, dict[str, int], list[FileError]]:
    """Apply fixes to a fixed point. Returns (new text, findings fixed by code, errors).

    A fix that several findings share counts once for each of them (a finding is what a
    user sees).  `first`, when given, receives the analysis of the text as it came;
    `last`, the analysis of the text returned when the loop ended on it (nothing left to
    apply), so that the caller need not analyse the fixed text once more.  `reuse`: the
    first pass is the analysis a project run's first lint of `text` left in this process's
    tree store, where there is one (the run found that the project answers its questions as
    that lint did).

    The text is only ever replaced by a version that parses: when a pass produces code that
    does not parse, the fixes that break it on their own are dropped and reported (their
    rule's fixes are not tried again), and the others are applied.
    """
    rules = _rules_for(options)
    applied: dict[str, int] = {}
    errors: list[FileError] = []
    broken: set[str] = set()  # rules whose fix produced code that does not parse
    module = None  # the tree of `text`, when the last pass parsed it
    trees = current_trees() if reuse else None
    kept = trees.take_analysis(path, text) if trees is not None else None
    for _ in range(MAX_FIX_PASSES):
        if kept is not None:
            analysis, kept = kept, None
        else:
            analysis = _analyze(text, path, _runnable(rules, text, options), options.target_torch, project,
                                module=module)
        if isinstance(analysis, FileError):
            errors.append(analysis)
            return text, applied, errors
        if first is not None and not first:
            first.append(analysis)
        from perflint.noqa import parse_suppressions

        sup = parse_suppressions(text)
        plans = []
        codes = []
        counts: list[dict[str, int]] = []  # per plan: the findings it fixes, by code
        if analysis.findings:
            from perflint.positions import LineIndex, node_offsets

            offsets = node_offsets(analysis.module, [v.node for _, v in analysis.findings])
            lines = LineIndex(text)
            ordered = sorted(
                (offsets.get(v.node, (0, 0))[0], i, rule, v) for i, (rule, v) in enumerate(analysis.findings)
            )
            for _, _, rule, v in ordered:
                if v.fix is None or not _applicable(v.fix, unsafe):
                    continue
                if fixable is not None and not fixable(rule.code):
                    continue
                if rule.code in broken:
                    continue
                if v.node in offsets and sup.suppressed(rule.code, lines.row_col(offsets[v.node][0])[0]):
                    continue
                shared = next((i for i, p in enumerate(plans) if p is v.fix), None)
                if shared is not None:
                    counts[shared][rule.code] = counts[shared].get(rule.code, 0) + 1
                    continue
                plans.append(v.fix)
                codes.append(rule.code)
                counts.append({rule.code: 1})
        if not plans:
            if last is not None:
                last.append((text, analysis))
            return text, applied, errors
        from perflint.fixedits import non_overlapping

        chosen = non_overlapping(analysis.facts, plans)
        chosen_codes = [codes[next(i for i, p in enumerate(plans) if p is plan)] for plan in chosen]
        chosen_counts = [counts[next(i for i, p in enumerate(plans) if p is plan)] for plan in chosen]
        new_text, perr, new_module = _apply_and_parse(analysis.module, chosen, path)
        if perr is not None:
            # Find the fixes that break the file on their own; apply the others.
            good, good_codes, good_counts = [], [], []
            for plan, code, count in zip(chosen, chosen_codes, chosen_counts):
                solo_text, solo_err, _ = _apply_and_parse(analysis.module, [plan], path)
                if solo_err is None:
                    good.append(plan)
                    good_codes.append(code)
                    good_counts.append(count)
                elif code not in broken:
                    broken.add(code)
                    errors.append(FileError(
                        path, ErrorKind.FIX,
                        f"a fix for {code} produced code that does not parse ({solo_err}); not applied; {BUG_HINT}",
                    ))
            chosen, chosen_codes, chosen_counts = good, good_codes, good_counts
            if not chosen:
                return text, applied, errors
            new_text, perr, new_module = _apply_and_parse(analysis.module, chosen, path)
            if perr is not None:
                errors.append(FileError(
                    path, ErrorKind.FIX,
                    f"fixes for {', '.join(sorted(set(chosen_codes)))} together produced code that does not parse "
                    f"({perr}); file not changed by them; {BUG_HINT}",
                ))
                return text, applied, errors
        if new_text == text:
            if last is not None:
                last.append((text, analysis))
            return text, applied, errors
        if perr is None and len(chosen) < len(plans):
            from perflint.fixedits import take_commuting

            got = take_commuting(analysis, text, plans, codes, chosen, new_text, _apply)
            if got is not None:
                parsed, merr = _parse(got[1], path)
                if merr is None:  # else the plans left wait for the next pass, as before
                    for plan in got[0]:
                        i = next(i for i, p in enumerate(plans) if p is plan)
                        chosen.append(plan)
                        chosen_counts.append(counts[i])
                    new_text, new_module = got[1], parsed
        for count in chosen_counts:
            for code, n in count.items():
                applied[code] = applied.get(code, 0) + n
        text, module = new_text, new_module
    errors.append(FileError(path, ErrorKind.FIX, f"fixes did not settle after {MAX_FIX_PASSES} passes; {BUG_HINT}"))
    return text, applied, errors


def fix_bytes(path: str, raw: bytes | None, options: LintOptions, unsafe: bool, fixable=None, project=None,
              reuse: bool = False) -> FileResult:
    result = FileResult(path=path)
    src = _load(path, raw)
    if isinstance(src, FileError):
        result.errors.append(src)
        return result
    result.original_bytes = src.raw
    first_src = src
    if _cannot_fire(src.raw, options) or not_torch_code(src.raw):
        return _skip(result, src, path)
    rules = _rules_for(options)
    first: list = []
    last: list = []
    new_text, applied, errors = fix_text(src.text, path, options, unsafe, fixable=fixable, project=project,
                                         first=first, last=last, reuse=reuse)
    if any(e.kind in (ErrorKind.SYNTAX, ErrorKind.PARSE) for e in errors):
        result.errors.extend(_in_cell(e, src) for e in errors)
        return result
    result.errors.extend(_in_cell(e, src) for e in errors)
    if new_text != src.text:
        try:
            new_bytes = src.encode(new_text)
        except SourceError as exc:
            result.errors.append(FileError(path, ErrorKind(exc.kind), exc.message))
            new_text = src.text
        except UnicodeEncodeError as exc:
            result.errors.append(FileError(path, ErrorKind.FIX, f"fixed text cannot be encoded as {src.encoding}: {exc.reason}"))
            new_text = src.text
        else:
            if new_bytes != src.raw:
                result.fixed_bytes = new_bytes
                result.fixes_applied = applied
    # What is left after fixing.
    if new_text != src.text:
        src2 = _load(path, result.fixed_bytes)
        if isinstance(src2, FileError):
            result.errors.append(src2)
            return result
        src = src2
    if last and last[0][0] == src.text:
        analysis = last[0][1]  # the fix loop ended by analysing exactly this text
    else:
        analysis = _analyze(src.text, path, _runnable(rules, src.text, options), options.target_torch, project)
    if isinstance(analysis, FileError):
        result.errors.append(_in_cell(analysis, src))
        return result
    result.errors.extend(e for e in analysis.errors if e not in result.errors)
    try:
        result.diagnostics = _to_diagnostics(src, src.text, analysis, options)
    except Exception as exc:  # noqa: BLE001
        result.errors.append(FileError(path, ErrorKind.INTERNAL, f"reporting failed ({type(exc).__name__}: {exc}); {BUG_HINT}"))
    if result.fixes_applied and first and not isinstance(first[0], FileError):
        result.fixes_applied, result.fixes_uncovered = _split_fixed(
            result.fixes_applied, first_src, first[0], result.diagnostics, options, unsafe, fixable)
    # The questions the passes asked of the project (the first pass's of the view it was
    # analysed with, when it came from the run's first lint): what the cached findings hang on.
    views = [project, first[0].facts.project] if first else [project]
    result.questions = sorted({q for v in views if v is not None for q in getattr(v, "asked", ())})
    return result


def _split_fixed(applied: dict[str, int], src: Source, before, after: list[Diagnostic], options: LintOptions,
                 unsafe: bool, fixable) -> tuple[dict[str, int], dict[str, int]]:
    """Split the findings fixed, by code, into those the unfixed file reported and those
    the fixes uncovered (a finding that only exists once another fix is in).

    A reported finding is fixed when `check` counted it as fixable and fixing leaves no
    fixable finding in its place: by its own fix, or by another that makes it moot (an
    autocast region settles the TF32 advice on the matmuls inside it).
    """
    from perflint.report.counts import is_fixable

    def fixable_by_code(diags) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in diags:
            if is_fixable(d, unsafe) and (fixable is None or fixable(d.code)):
                out[d.code] = out.get(d.code, 0) + 1
        return out

    try:
        from dataclasses import replace

        reported = fixable_by_code(_to_diagnostics(src, src.text, before, replace(options, with_edits=False)))
    except Exception:  # noqa: BLE001 - counting must not fail a fix
        return applied, {}
    left = fixable_by_code(after)
    original: dict[str, int] = {}
    uncovered: dict[str, int] = {}
    for code in sorted(set(applied) | set(reported)):
        mine = max(0, reported.get(code, 0) - left.get(code, 0))
        if mine:
            original[code] = mine
        more = applied.get(code, 0) - mine
        if more > 0:
            uncovered[code] = more
    return original, uncovered
