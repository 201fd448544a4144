"""How many times does `perflint fix` analyse each file?

    python benchmarks/fix_passes.py FOLDER [FOLDER ...] [--select CODES] [--safe-only]

Runs `perflint fix FOLDER --diff --no-cache --jobs 1` (`--unsafe-fixes` unless `--safe-only`;
`--select ALL` unless told otherwise) in this process, counts the analyses of each checked
file over the whole run (the first lint, which also summarises the file for its project, and
each pass of the fix loop, `engine.fix_text`), and prints one row per folder: how many files
took 1, 2, 3 … analyses.  One analysis is a file with nothing to fix (its first lint is its
result); two are the first lint, whose fixes the fix loop applies (when the project answers
its questions as it did), and the pass that found nothing left; more are a first lint the
project's answers overturned, or passes that fixes left to each other (two fixes of one node
that do not commute, a fix that uncovers a finding).  Files the prefilter skips, and the modules that are
only summarised for the project, are not counted.  Nothing is written: `--diff` only prints.
Counts, not times: the machine's load does not change them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os

import perflint.engine as engine
from perflint.cli import main as cli_main


def count(folder: str, select: str, unsafe: bool) -> collections.Counter:
    per_file: collections.Counter = collections.Counter()
    real_analyze = engine._analyze

    def analyze(text, path, *args, **kwargs):
        # A walk taken over from an analysis of the same tree (`tree=`) is the same analysis.
        if kwargs.get("tree") is None:
            per_file[os.path.abspath(path)] += 1
        return real_analyze(text, path, *args, **kwargs)

    engine._analyze = analyze
    cwd = os.getcwd()
    try:
        os.chdir(folder)
        args = ["fix", ".", "--diff", "--no-cache", "--jobs", "1", "--select", select]
        if unsafe:
            args.append("--unsafe-fixes")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                cli_main(args, standalone_mode=False)
            except SystemExit:
                pass
    finally:
        os.chdir(cwd)
        engine._analyze = real_analyze
    checked = checked_files(folder)
    return collections.Counter(n for p, n in per_file.items() if p in checked)


def checked_files(folder: str) -> set[str]:
    """The files `perflint fix FOLDER` checks (its discovery), as absolute paths."""
    from perflint.config import Resolver
    from perflint.discovery import discover

    return {os.path.abspath(p) for p, _ in discover([folder], Resolver()).files}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--select", default="ALL")
    ap.add_argument("--safe-only", action="store_true", help="without --unsafe-fixes")
    args = ap.parse_args()
    rows = [(f, count(f, args.select, not args.safe_only)) for f in args.folders]
    most = max((n for _, hist in rows for n in hist), default=1)
    head = "| folder | files | " + " | ".join(f"{n} analyses" for n in range(1, most + 1)) + " |"
    print(head)
    print("|" + "---|" * (most + 2))
    for folder, hist in rows:
        print(f"| {folder} | {sum(hist.values())} | " + " | ".join(str(hist.get(n, 0)) for n in range(1, most + 1)) + " |")


if __name__ == "__main__":
    main()
