"""The `perflint` command: check, fix, rule, rules, verify.

Exit status (as ruff): 0 nothing found, 1 findings (or, with `--diff`, a diff; `--exit-zero`
makes both 0), 2 a usage error, a broken config, or a file that could not be read, parsed or
fixed (the other files are still checked and reported).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from perflint import __version__, install_hint
from perflint.config import ConfigError, Resolver, parse_version
from perflint.report import FORMATS, display_path

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
PROGRESS_MIN_FILES = 50  # a progress bar for runs with at least this many files to analyse


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def _split_codes(values: tuple[str, ...]) -> list[str] | None:
    if not values:
        return None
    out = []
    for v in values:
        out.extend(c.strip() for c in v.split(",") if c.strip())
    return out


def _validate(codes: list[str] | None, flag: str) -> list[str] | None:
    from perflint.selection import validate_selector

    if codes is None:
        return None
    for c in codes:
        err = validate_selector(c)
        if err:
            raise click.UsageError(f"{flag}: {err}")
    return [c.upper() for c in codes]


def selection_options(f):
    options = [
        click.option("--select", multiple=True, metavar="CODES",
                     help="Rule codes or prefixes to enable, comma-separated (PF101, PF1, ALL). Replaces the "
                          "configured set; the default set is the rules `perflint rules` marks as on by default."),
        click.option("--extend-select", multiple=True, metavar="CODES", help="Rule codes or prefixes to enable on top of the configured set."),
        click.option("--ignore", multiple=True, metavar="CODES", help="Rule codes or prefixes to disable."),
        click.option("--target-torch", metavar="X.Y", help="The torch version the code must run on (default: [tool.perflint] "
                     "target-torch, else the lower bound of the project's torch requirement, else 2.4)."),
        click.option("--config", "config_file", type=click.Path(dir_okay=False), help="A pyproject.toml (or a TOML file holding the [tool.perflint] keys) used for every file."),
        click.option("--exclude", multiple=True, metavar="GLOB", help="Glob patterns to exclude (replaces the defaults)."),
        click.option("--extend-exclude", multiple=True, metavar="GLOB", help="Glob patterns to exclude on top of the defaults."),
        click.option("--no-respect-gitignore", is_flag=True, help="Check files that .gitignore excludes."),
        click.option("--force-exclude", is_flag=True, help="Apply excludes and .gitignore to paths named on the command line too (for pre-commit)."),
        click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: one per CPU)."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the result cache (.perflint_cache)."),
        click.option("-q", "--quiet", is_flag=True, help="Print findings only: no summary, no progress bar."),
        click.option("--stdin-filename", metavar="PATH", help="Read the source from standard input and report it "
                     "under PATH (its configuration and excludes apply); the same as giving `-` as the only path."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def _resolver(select, extend_select, ignore, target_torch, config_file, exclude, extend_exclude, no_respect_gitignore, unsafe=None):
    overrides: dict = {
        "select": _validate(_split_codes(select), "--select"),
        "extend_select": _validate(_split_codes(extend_select), "--extend-select"),
        "ignore": _validate(_split_codes(ignore), "--ignore"),
        "exclude": list(exclude) if exclude else None,
        "extend_exclude": list(extend_exclude) if extend_exclude else None,
        "respect_gitignore": False if no_respect_gitignore else None,
        "unsafe_fixes": unsafe,
    }
    if target_torch:
        try:
            overrides["target_torch"] = parse_version(target_torch, "--target-torch")
        except ConfigError as exc:
            raise click.BadParameter(str(exc).removeprefix("--target-torch: "), param_hint="--target-torch") from None
    return Resolver(overrides=overrides, config_file=Path(config_file) if config_file else None)


def _progress_factory(quiet: bool):
    """A rich progress bar on stderr for long runs, when stderr is a terminal."""
    if quiet or not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=_console(stderr=True), transient=True,
    )

    def factory(total: int):
        if total < PROGRESS_MIN_FILES:
            return None
        progress.start()
        task = progress.add_task("files", total=total)
        return lambda _r: progress.advance(task)

    return progress, factory


_ERROR_LABEL = {"syntax-error": "syntax error: ", "internal-error": "internal error: ", "config-error": "", "parse-error": "",
                "decode-error": "", "io-error": "", "notebook-error": "", "fix-error": "not fixed: "}


def _print_errors(errors, warnings=()) -> None:
    """One line per problem on stderr: the path and the cause."""
    if not errors and not warnings:
        return
    from perflint.report.text import writer

    err = writer(stderr=True)
    for w in warnings:
        err.line(("warning", "bold yellow"), (f": {display_path(w.path)}: {w.message}", None))
    for e in errors:
        label = _ERROR_LABEL.get(e.kind.value, "")
        err.line(("error", "bold red"), (f": {display_path(e.path)}: {label + e.message}", None))


def _source_lines(results, given: dict | None = None) -> dict:
    """The source line of every finding, for the `full` format (read after any fix)."""
    from perflint.source import SourceError, cell_source, read_source

    lines: dict = {}
    for r in results:
        if not r.diagnostics:
            continue
        try:
            src = read_source(r.path, r.fixed_bytes if r.fixed_bytes is not None else (given or {}).get(r.path))
        except SourceError:
            continue
        if src.notebook is not None:
            cells = {
                span.index: cell_source(src.notebook.data["cells"][span.index - 1]).split("\n")
                for span in src.notebook.cells
            }
        else:
            text_lines = src.text.splitlines()
        for d in r.diagnostics:
            row = d.location.row
            if src.notebook is not None:
                cell_lines = cells.get(d.cell or -1, [])
                if 0 < row <= len(cell_lines):
                    lines[(r.path, d.cell, row)] = cell_lines[row - 1]
            elif 0 < row <= len(text_lines):
                lines[(r.path, None, row)] = text_lines[row - 1]
    return lines


def _render(outcome, output_format: str, unsafe: bool, statistics: bool, quiet: bool, fixed=(0, 0),
            stderr: bool = False, given: dict | None = None, show_why: bool = False) -> None:
    results = outcome.results
    if output_format in ("json", "sarif", "github"):
        from perflint.report import machine
    if statistics:
        if output_format == "json":
            click.echo(machine.statistics_json(results, unsafe), err=stderr)
        else:
            from perflint.report import text

            text.statistics(_console(stderr=stderr), results, unsafe)
        return
    errors = outcome.all_errors
    if output_format == "json":
        click.echo(machine.to_json(results, errors), err=stderr)
    elif output_format == "sarif":
        click.echo(machine.to_sarif(results, errors), err=stderr)
    elif output_format == "github":
        out = machine.to_github(results, errors)
        if out:
            click.echo(out, err=stderr)
    else:
        from perflint.report import text

        out = text.writer(stderr=stderr)
        if output_format == "concise":
            text.concise(out, results, unsafe, show_why=show_why)
        else:
            text.full(out, results, unsafe, _source_lines(results, given), show_why=show_why)
        if not quiet:
            text.summary(out, results, unsafe, fixed[0], errors=len(outcome.all_errors), files=outcome.files,
                         uncovered=fixed[1],
                         config_errors=any(e.kind.value == "config-error" for e in outcome.all_errors))


class _Group(click.Group):
    """A command group whose `--help` lists each command's whole first paragraph (click cuts
    them at 45 characters)."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            first = " ".join((cmd.help or "").split("\n\n")[0].split())
            rows.append((name, first))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="perflint")
def main() -> None:
    """perflint: find and fix PyTorch training-performance anti-patterns."""


def _stdin_source(paths, stdin_filename) -> bytes | None:
    """The bytes of standard input when the run checks it (`-` as the only path, or
    --stdin-filename without paths), else None."""
    if "-" in paths:
        if len(paths) > 1:
            raise click.UsageError("`-` (standard input) cannot be combined with other paths")
    elif not (stdin_filename and not paths):
        if stdin_filename:
            raise click.UsageError("--stdin-filename reads standard input: give no paths, or `-`")
        return None
    return sys.stdin.buffer.read()


def _run(paths, *, select, extend_select, ignore, target_torch, config_file, exclude, extend_exclude,
         no_respect_gitignore, force_exclude, jobs, no_cache, quiet, output_format, statistics=False,
         exit_zero=False, fix=False, unsafe_fixes=None, diff=False, show_fixes=False, stdin_filename=None,
         show_why=False, output_file=None, add_noqa=False):
    """The body of `check` and `fix`: run, print, and exit with the right status."""
    from perflint import ownership, runner

    ownership.own()
    if add_noqa and (fix or diff or stdin_filename or "-" in paths):
        raise click.UsageError("--add-noqa edits the files checked: it cannot be combined with --fix, --diff or stdin")

    resolver = _resolver(select, extend_select, ignore, target_torch, config_file, exclude, extend_exclude,
                         no_respect_gitignore, unsafe=unsafe_fixes)
    stdin = _stdin_source(paths, stdin_filename)
    progress, factory = (None, None) if stdin is not None else _progress_factory(
        quiet or (output_format != "full" and output_format != "concise"))
    try:
        outcome = runner.run(
            list(paths) or ["."], resolver, fix=fix, diff=diff,
            use_cache=not no_cache, jobs=jobs, force_exclude=force_exclude, progress=factory,
            stdin=stdin, stdin_filename=stdin_filename,
        )
    except KeyboardInterrupt as exc:
        if progress is not None:
            progress.stop()
        written = getattr(exc, "written", [])
        n = len(written)
        what = (f"{n} fixed file{'s were' if n != 1 else ' was'} already written" if fix and not diff
                else "no file was written")
        click.echo(f"Interrupted: {what}; the other files are unchanged." if fix and not diff
                   else f"Interrupted: {what}.", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - a bug: one line, not a traceback
        if progress is not None:
            progress.stop()
        if os.environ.get("PERFLINT_DEBUG"):
            raise
        from perflint.engine import BUG_HINT

        click.echo(f"error: internal error: {type(exc).__name__}: {exc}; {BUG_HINT} "
                   "(set PERFLINT_DEBUG=1 for the traceback)", err=True)
        sys.exit(EXIT_ERROR)
    finally:
        if progress is not None:
            progress.stop()
    if stdin is None and outcome.files == 0 and not outcome.all_errors:
        # As ruff: say that nothing was checked rather than "All checks passed!"; the
        # machine formats still print their (empty) report.
        where = ", ".join(display_path(p) for p in (paths or (".",)))
        click.echo(f"warning: No Python files found under {where}", err=True)
        if output_format in ("json", "sarif", "github") and not add_noqa:
            with _report_to(output_file):
                _render(outcome, output_format, False, statistics, quiet)
        sys.exit(EXIT_CLEAN)
    errors = outcome.all_errors
    if add_noqa:
        _print_errors(errors, outcome.warnings)
        sys.exit(_add_noqa(outcome.results, quiet) or (EXIT_ERROR if errors else EXIT_CLEAN))
    _print_errors(errors, outcome.warnings)
    unsafe = bool(unsafe_fixes) if unsafe_fixes is not None else outcome.unsafe_any
    changed = [r for r in outcome.results if r.fixed_bytes is not None]
    from perflint.report.counts import fixed_counts

    fixed, uncovered = fixed_counts(changed)
    given = {r.path: stdin for r in outcome.results} if stdin is not None else None
    if fix and stdin is not None and not diff:
        # The fixed source (or the source as it came, when nothing changed or it could not
        # be checked) on stdout; what is left on stderr.
        out = changed[0].fixed_bytes if changed else stdin
        sys.stdout.flush()
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
        if show_fixes:
            _show_fixes(changed, stderr=True)
        with _report_to(output_file):
            _render(outcome, output_format, unsafe, statistics, quiet, fixed=(fixed, uncovered),
                    stderr=output_file is None, given=given)
    elif diff:
        with _report_to(output_file):
            for r in changed:
                click.echo(_unified_diff(r), nl=False)
        if not quiet:
            click.echo(_fixed_line("Would fix", fixed, uncovered) if fixed or uncovered else
                       _no_fixes_line(outcome.results, unsafe), err=True)
    else:
        with _report_to(output_file):
            if show_fixes and fix:
                _show_fixes(changed)
            _render(outcome, output_format, unsafe, statistics, quiet, fixed=(fixed, uncovered) if fix else (0, 0),
                    given=given, show_why=show_why)
    if errors:
        sys.exit(EXIT_ERROR)
    if diff:
        sys.exit(EXIT_FINDINGS if changed and not exit_zero else EXIT_CLEAN)
    if any(r.diagnostics for r in outcome.results) and not exit_zero:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_CLEAN)


def _add_noqa(results, quiet: bool) -> int:
    """Write `# noqa` comments for the findings; 2 if a file could not be written, else 0."""
    from perflint.addnoqa import add_noqa
    from perflint.source import SourceError, atomic_write, read_source

    added, failed = 0, False
    for r in results:
        if not r.diagnostics:
            continue
        if r.path.endswith(".ipynb"):
            click.echo(f"warning: {display_path(r.path)}: --add-noqa does not edit notebooks; "
                       f"{len(r.diagnostics)} finding(s) left", err=True)
            continue
        rows: dict[int, set[str]] = {}
        for d in r.diagnostics:
            rows.setdefault(d.location.row, set()).add(d.code)
        try:
            src = read_source(r.path)
            edit = add_noqa(src.text, rows)
            for row in edit.skipped:
                click.echo(f"warning: {display_path(r.path)}:{row}: the line ends inside a string; "
                           "no noqa comment added", err=True)
            if edit.added:
                atomic_write(r.path, src.encode(edit.text))
                added += edit.added
        except (OSError, SourceError, UnicodeEncodeError) as exc:
            message = getattr(exc, "strerror", None) or getattr(exc, "message", None) or str(exc)
            click.echo(f"error: {display_path(r.path)}: not written: {message}", err=True)
            failed = True
    if not quiet:
        click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.")
    return EXIT_ERROR if failed else 0


@contextlib.contextmanager
def _report_to(output_file: str | None):
    """Send the report (what goes to stdout) to `output_file` instead, as ruff's -o does."""
    if output_file is None:
        yield
        return
    try:
        fh = open(output_file, "w", encoding="utf-8")
    except OSError as exc:
        _fail(f"{output_file}: cannot write the report: {exc.strerror or exc}")
    with fh, contextlib.redirect_stdout(fh):
        yield


def _no_fixes_line(results, unsafe: bool) -> str:
    """`fix --diff` with nothing to show: say so, and how many unsafe fixes wait for the flag."""
    from perflint.report.counts import fixable_counts

    _, n_unsafe = fixable_counts(results)
    if n_unsafe and not unsafe:
        return (f"No safe fixes available; {n_unsafe} unsafe fix{'es' if n_unsafe != 1 else ''} "
                f"{'are' if n_unsafe != 1 else 'is'} available: add --unsafe-fixes to see "
                f"{'them' if n_unsafe != 1 else 'it'}.")
    return "No fixes available."


def _fixed_line(verb: str, fixed: int, uncovered: int) -> str:
    """The count line: `Fixed 3 findings.`, `Would fix 1 finding (and 2 more that the fixes uncover).`"""
    line = f"{verb} {fixed} finding{'s' if fixed != 1 else ''}"
    if uncovered:
        line += f" (and {uncovered} more that the fixes uncover{'ed' if verb == 'Fixed' else ''})"
    return line + "."


def _show_fixes(changed, stderr: bool = False) -> None:
    from perflint.report.counts import fixed_counts
    from perflint.report.text import writer
    from perflint.rules import all_rules

    out = writer(stderr=stderr)
    registry = all_rules()
    total, uncovered = fixed_counts(changed)
    if not total and not uncovered:
        out.line(("No findings fixed.", None))
        return
    out.line((_fixed_line("Fixed", total, uncovered).rstrip(".") + ":", None))
    for r in changed:
        out.line((f"- {display_path(r.path)}:", None))
        for code in sorted(set(r.fixes_applied) | set(r.fixes_uncovered)):
            name = registry[code].name if code in registry else ""
            n, more = r.fixes_applied.get(code, 0), r.fixes_uncovered.get(code, 0)
            extra = f" (+{more} that the fixes uncovered)" if more else ""
            if n:
                out.line((f"    {n} × {code} ({name}){extra}", None))
            else:
                out.line((f"    {more} × {code} ({name}), that the fixes uncovered", None))
    out.line()


_format_option = click.option(
    "--output-format", type=click.Choice(FORMATS), default="full", show_default=True,
    help="full: source line and caret; concise: one line each; json: ruff-compatible objects; "
         "sarif: SARIF 2.1.0 for code scanning; github: workflow annotations.",
)
_output_file_option = click.option(
    "-o", "--output-file", type=click.Path(dir_okay=False), default=None,
    help="Write the report to this file instead of standard output (errors still go to stderr).",
)


def output_format_option(f):
    return _format_option(_output_file_option(f))


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(readable=False, allow_dash=True))
@selection_options
@output_format_option
@click.option("--statistics", is_flag=True, help="Print a count of findings by rule instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings (errors still exit 2).")
@click.option("--fix", is_flag=True, help="Apply fixes, as `perflint fix` does.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Treat unsafe fixes as available (and apply them with --fix).")
@click.option("--diff", is_flag=True, help="With --fix (implied): print a unified diff of the fixes and write nothing.")
@click.option("--show-fixes", is_flag=True, help="With --fix: list the fixes applied, by file and rule.")
@click.option("--add-noqa", is_flag=True,
              help="Add `# noqa: PFxxx` to every line with a finding (merging into an existing noqa list), "
                   "so that CI can start strict on new code.")
@click.option("--show-why", is_flag=True,
              help="Under each per-step finding, the evidence that its code runs on every step (the loop, the call, the branch).")
@click.option("--show-settings", is_flag=True,
              help="Print the settings each PATH gets (configuration file, target torch and where it comes from, "
                   "rules) and exit.")
def check(paths, select, extend_select, ignore, target_torch, config_file, exclude, extend_exclude,
          no_respect_gitignore, force_exclude, jobs, no_cache, quiet, stdin_filename, output_format, statistics,
          exit_zero, fix, unsafe_fixes, diff, show_fixes, add_noqa, show_why, show_settings, output_file):
    """Report anti-patterns in PATHS (default: the current folder).

    Finds .py files and Jupyter notebooks, honouring .gitignore and the configured
    excludes; files named explicitly are always checked (unless --force-exclude).
    `-` (or --stdin-filename) checks the source given on standard input.
    """
    if show_settings:
        _show_settings(paths or ["."], _resolver(select, extend_select, ignore, target_torch, config_file, exclude,
                                                 extend_exclude, no_respect_gitignore, unsafe=unsafe_fixes))
        return
    _run(paths, select=select, extend_select=extend_select, ignore=ignore, target_torch=target_torch,
         config_file=config_file, exclude=exclude, extend_exclude=extend_exclude,
         no_respect_gitignore=no_respect_gitignore, force_exclude=force_exclude, jobs=jobs, no_cache=no_cache,
         quiet=quiet, output_format=output_format, statistics=statistics, exit_zero=exit_zero,
         fix=fix or diff, unsafe_fixes=unsafe_fixes, diff=diff, show_fixes=show_fixes, stdin_filename=stdin_filename,
         show_why=show_why, output_file=output_file, add_noqa=add_noqa)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(readable=False, allow_dash=True))
@selection_options
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Apply unsafe fixes too (default: [tool.perflint] unsafe-fixes).")
@click.option("--diff", is_flag=True, help="Print a unified diff of the fixes and write nothing (exit 1 if there is a diff, unless --exit-zero).")
@click.option("--show-fixes", is_flag=True, help="List the fixes applied, by file and rule.")
@output_format_option
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain (errors still exit 2).")
def fix(paths, select, extend_select, ignore, target_torch, config_file, exclude, extend_exclude, no_respect_gitignore,
        force_exclude, jobs, no_cache, quiet, stdin_filename, unsafe_fixes, diff, show_fixes, output_format,
        output_file, exit_zero):
    """Apply safe fixes (and unsafe ones with --unsafe-fixes) to PATHS, then report what is left.

    A fixed file is written only if it still parses, through a temporary file renamed over
    the original; its encoding, BOM and line endings are kept.  Notebooks get their code
    cells rewritten and nothing else.  `-` (or --stdin-filename) fixes the source given on
    standard input and writes the fixed source to standard output (findings go to stderr).
    """
    _run(paths, select=select, extend_select=extend_select, ignore=ignore, target_torch=target_torch,
         config_file=config_file, exclude=exclude, extend_exclude=extend_exclude,
         no_respect_gitignore=no_respect_gitignore, force_exclude=force_exclude, jobs=jobs, no_cache=no_cache,
         quiet=quiet, output_format=output_format, exit_zero=exit_zero, fix=True, unsafe_fixes=unsafe_fixes,
         diff=diff, show_fixes=show_fixes, stdin_filename=stdin_filename, output_file=output_file)


def _show_settings(paths, resolver) -> None:
    """What `check` would use for each path (a folder: a file directly inside it)."""
    from perflint.config import ConfigError
    from perflint.options import is_benchmark_file, is_test_file
    from perflint.selection import fixable_codes, ignored_for_path, selected_codes

    status = 0
    for given in paths:
        p = Path(given)
        probe = p if not p.is_dir() else p / "__init__.py"
        try:
            s = resolver.for_path(probe)
        except ConfigError as exc:
            click.echo(f"error: {exc}", err=True)
            status = 2
            continue
        target = ".".join(map(str, s.effective_target()))
        codes = selected_codes(s)
        fixable = fixable_codes(s)
        rel = os.path.relpath(probe.absolute(), s.root) if s.root else str(probe)
        lines = [
            f"Settings for {given}:",
            f"  configuration: {s.config_file or 'none (defaults)'}",
            f"  target torch: {target} ({'default' if s.target_source == 'default' else 'from ' + s.target_source})",
            f"  rules: {', '.join(codes) if codes else 'none'}",
            f"  per-file-ignores here: {', '.join(sorted(ignored_for_path(s, rel))) or 'none'}",
            f"  unsafe fixes: {'yes' if s.unsafe_fixes else 'no'}",
            f"  fixable: {'all' if fixable is None else ', '.join(sorted(fixable)) or 'none'}",
            f"  test file rules only (errors): {'yes' if is_test_file(probe, root=s.root) and not s.lint_tests else 'no'}",
            f"  benchmark file rules only (errors): "
            f"{'yes' if is_benchmark_file(probe, root=s.root) and not s.lint_benchmarks else 'no'}",
        ]
        click.echo("\n".join(lines))
    sys.exit(status)


def _unified_diff(r) -> str:
    import difflib

    from perflint.source import cell_source, read_source

    before = read_source(r.path, r.original_bytes)
    after = read_source(r.path, r.fixed_bytes)
    name = display_path(r.path)
    if before.notebook is None or after.notebook is None:
        return "".join(
            difflib.unified_diff(before.text.splitlines(keepends=True), after.text.splitlines(keepends=True),
                                 fromfile=name, tofile=name)
        )
    out = []
    old_cells, new_cells = before.notebook.data["cells"], after.notebook.data["cells"]
    for i, (a, b) in enumerate(zip(old_cells, new_cells), start=1):
        a_src, b_src = cell_source(a), cell_source(b)
        if a_src == b_src:
            continue
        a_lines = [line + "\n" for line in a_src.split("\n")]
        b_lines = [line + "\n" for line in b_src.split("\n")]
        out.extend(difflib.unified_diff(a_lines, b_lines, fromfile=f"{name}:cell {i}", tofile=f"{name}:cell {i}"))
    return "".join(out)


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="Every rule.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rule(code, show_all, output_format):
    """Explain a rule (its documentation), or every rule with --all."""
    from perflint.rules import all_rules

    registry = all_rules()
    if show_all:
        chosen = list(registry.values())
    elif code:
        key = code.strip().upper()
        if key not in registry:
            raise click.BadParameter(f"unknown rule code `{code}`; `perflint rules` lists them", param_hint="CODE")
        chosen = [registry[key]]
    else:
        raise click.UsageError("give a rule code, or --all")
    if output_format == "json":
        import json

        data = [_rule_json(r) for r in chosen]
        click.echo(json.dumps(data if show_all else data[0], indent=2))
        return
    console = _console()
    if not console.is_terminal:
        # Piped or redirected: the markdown itself, every line whole (no wrapping at a
        # width no terminal asked for).
        click.echo("\n\n".join(_rule_markdown(r) for r in chosen))
        return
    from rich.markdown import Markdown

    for r in chosen:
        console.print(Markdown(_rule_markdown(r)))
        console.print()


def _rule_markdown(r) -> str:
    from perflint.ruledoc import rule_markdown

    return rule_markdown(r)


def _versions(r) -> str:
    from perflint.ruledoc import versions

    return versions(r)


def _rule_json(r) -> dict:
    return {
        "code": r.code,
        "name": r.name,
        "summary": r.summary,
        "severity": r.severity.value,
        "fix": r.fix_class,
        "default": r.default,
        "min_torch": ".".join(map(str, r.min_torch)) if r.min_torch else None,
        "max_torch": ".".join(map(str, r.max_torch)) if r.max_torch else None,
        "explanation": r.doc(),
    }


@main.command()
@click.option("--output-format", type=click.Choice(["table", "json"]), default="table", show_default=True)
def rules(output_format):
    """List every rule: code, name, fix class, whether it is on by default."""
    from perflint.rules import all_rules

    registry = all_rules()
    if output_format == "json":
        import json

        click.echo(json.dumps([_rule_json(r) for r in registry.values()], indent=2))
        return
    header = ("code", "name", "fix", "default", "severity", "applies to")
    rows = [(r.code, r.name, r.fix_class, "on" if r.default else "off", r.severity.value, _versions(r))
            for r in registry.values()]
    console = _console()
    if not console.is_terminal:
        # Piped: plain columns, one rule a line, nothing drawn (for grep, cut, awk).
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
        for row in (header, *rows):
            click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
        return
    from rich.table import Table

    table = Table(title="perflint rules")
    for col in header:
        table.add_column(col, no_wrap=col in ("code", "name"))
    for row in rows:
        table.add_row(*row)
    console.print(table)


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.option("--fixed", type=click.Path(exists=True, dir_okay=False), help="The optimised script (default: perflint's own fix of SCRIPT).")
@click.option("--unsafe-fixes", is_flag=True, help="Produce the fixed script with unsafe fixes too.")
@click.option("--steps", type=click.IntRange(min=1), default=30, show_default=True, help="Measured optimizer steps per run.")
@click.option("--warmup", type=click.IntRange(min=1), default=5, show_default=True, help="Optimizer steps discarded before measuring (at least 1: the first step's time includes start-up).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Runs of each script at least, alternated A B A B … (fewer than 3: the verdict is inconclusive).")
@click.option("--max-time", type=click.FloatRange(min=0), default=300.0, show_default=True, help="Seconds of measuring after which no further pair of runs is started (0: just --repeats runs).")
@click.option("--precision", type=click.FloatRange(min=0, max=1, min_open=True), default=0.05, show_default=True, help="Stop once the speedup's 95% interval is within ± this fraction of it.")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Seconds one run may take.")
@click.option("--loss-tolerance", type=float, default=0.05, show_default=True, help="Largest relative loss difference accepted.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the result as JSON here.")
@click.option("--target-torch", metavar="X.Y", help="Target torch version for the fixer.")
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def verify(script, fixed, unsafe_fixes, steps, warmup, repeats, max_time, precision, timeout, loss_tolerance, json_out,
           target_torch, quiet, script_args):
    """Measure SCRIPT against its fixed version, alternating runs until the speedup is known (needs torch).

    Arguments after `--` go to both scripts, e.g. `perflint verify train.py -- --device cuda`.
    """
    if not _torch_importable():
        _fail(f"`perflint verify` runs the scripts under torch, which {sys.executable} cannot import; "
              f"install it with `{install_hint('runtime')}`")
    try:
        from perflint_runtime.verify import main as verify_main
    except ImportError as exc:
        _fail(f"`perflint verify` needs the runtime package ({exc}); install with `{install_hint('runtime')}`")
    try:
        target = parse_version(target_torch, "--target-torch") if target_torch else None
    except ConfigError as exc:
        _fail(str(exc))
    code = verify_main(
        script=script, fixed=fixed, unsafe_fixes=unsafe_fixes, steps=steps, warmup=warmup, repeats=repeats,
        timeout=timeout, loss_tolerance=loss_tolerance, json_out=json_out, script_args=list(script_args),
        target_torch=target, quiet=quiet, max_time=max_time, precision=precision,
    )
    sys.exit(code)


def _torch_importable() -> bool:
    """Whether this Python can import torch (found without importing it: that takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def _fail(message: str) -> None:
    """One error line on stderr, exit status 2 (a usage error)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@main.command()
def server():
    """Run the language server on stdin/stdout, for editors (needs the `server` extra).

    Install the extra with `pip install "torch-perflint[server]"` (from a checkout:
    `pip install -e ".[server]"`).  Settings come from pyproject.toml as for `check`."""
    from perflint.server import main as server_main

    sys.exit(server_main())


if __name__ == "__main__":  # pragma: no cover
    main()
