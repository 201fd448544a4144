"""How many times does `perflint fix` analyse each file?

    python benchmarks/fix_passes.py FOLDER [FOLDER ...] [--select CODES] [--safe-only]

Runs `perflint fix FOLDER --diff --no-cache --jobs 1` (`--unsafe-fixes` unless `--safe-only`;
`--select ALL` unless told otherwise) in this process, counts the analyses the fix loop
(`engine.fix_text`) makes of each file, and prints one row per folder: how many files took
1, 2, 3 … analyses.  One analysis is a file with nothing to apply; two are a pass that
applied fixes and the pass that found nothing left; more are passes that fixes left to
each other (two fixes of one node that do not commute, a fix that uncovers a finding).
Nothing is written: `--diff` only prints.  Counts, not times: the machine's load does not
change them.
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
    inside: list[int] = []
    real_analyze, real_fix_text = engine._analyze, engine.fix_text

    def analyze(text, path, *args, **kwargs):
        if inside:
            per_file[path] += 1
        return real_analyze(text, path, *args, **kwargs)

    def fix_text(*args, **kwargs):
        inside.append(1)
        try:
            return real_fix_text(*args, **kwargs)
        finally:
            inside.pop()

    engine._analyze, engine.fix_text = analyze, fix_text
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
        engine._analyze, engine.fix_text = real_analyze, real_fix_text
    return collections.Counter(per_file.values())


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
