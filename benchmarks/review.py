"""Sample perflint findings from whole repositories into a review sheet, and score a filled-in sheet.

A repository is checked the way a user runs the tool, from its root:

    perflint check . --output-format json --no-cache --exit-zero

Sample (stratified by rule code, reproducible with a seed, spread across repositories):

    python benchmarks/review.py sample REPO_DIR [REPO_DIR ...] --out SHEET.csv \
        [--per-rule N] [--seed S] [--prior OLD.csv ...]

The sheet has the columns key,repo,path,line,col,code,message,fix,verdict,cls,note. `key` is
repo:path:code:<first 8 hex digits of the sha1 of the stripped source line>, so a verdict survives
edits that only shift lines; `--prior` copies verdict, cls and note from earlier sheets by key.
Fill `verdict` with right, false, oos or unsure, `cls` with a short class label for a false alarm,
and `note` with the reason. Then:

    python benchmarks/review.py score SHEET.csv [SHEET.csv ...] [--by-repo]

prints a Markdown table per rule: precision = right / (right + false), and the same counting
out-of-scope findings as false. Default-on rules with at least 10 reviewed findings whose precision
is below 0.80 are marked.

Only the standard library is used; the `perflint` command is taken from the running interpreter's
environment (the venv this script runs in), else from PATH.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

COLUMNS = ["key", "repo", "path", "line", "col", "code", "message", "fix", "verdict", "cls", "note"]
VERDICTS = ("right", "false", "oos", "unsure")
BAR = 0.80
MIN_N = 10
# the folders perflint skips by default (perflint/config.py DEFAULT_EXCLUDE), for the file count
_SKIP_DIRS = {
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".perflint_cache", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox",
    ".venv", "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules", "site-packages",
    "venv",
}


def perflint_command() -> list[str]:
    exe = Path(sys.executable).parent / ("perflint.exe" if os.name == "nt" else "perflint")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("perflint")
    if found:
        return [found]
    return [sys.executable, "-m", "perflint"]


def count_files(repo: Path) -> int:
    n = 0
    for _root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        n += sum(1 for f in files if f.endswith((".py", ".ipynb")))
    return n


def _line_text(repo: Path, rel: str, row: int, cell: int | None, cache: dict) -> str:
    """The stripped source line a finding points at ('' when it cannot be read)."""
    if rel not in cache:
        p = repo / rel
        lines: object = None
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
            if p.suffix == ".ipynb":
                nb = json.loads(text)
                lines = [
                    "".join(c.get("source", "")) if isinstance(c.get("source"), list) else c.get("source", "")
                    for c in nb.get("cells", []) if c.get("cell_type") == "code"
                ]
            else:
                lines = text.splitlines()
        except (OSError, ValueError):
            lines = None
        cache[rel] = lines
    lines = cache[rel]
    if lines is None:
        return ""
    if cell is not None:  # a notebook: rows count within the code cell (1-based cell index)
        cells = lines
        if not 1 <= cell <= len(cells):
            return ""
        cell_lines = cells[cell - 1].splitlines()
        return cell_lines[row - 1].strip() if 1 <= row <= len(cell_lines) else ""
    return lines[row - 1].strip() if 1 <= row <= len(lines) else ""


def _fix_text(fix: dict | None) -> str:
    if not fix:
        return ""
    app = fix.get("applicability") or ""
    msg = fix.get("message") or ""
    return f"{app}: {msg}" if msg else app


def run_repo(repo: Path) -> tuple[list[dict], int, str, int]:
    """Run perflint in `repo`; return (rows, exit status, stderr, files counted)."""
    cmd = perflint_command() + ["check", ".", "--output-format", "json", "--no-cache", "--exit-zero"]
    r = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    try:
        found = json.loads(r.stdout) if r.stdout.strip() else []
    except json.JSONDecodeError:
        found = []
    name = repo.resolve().name
    cache: dict = {}
    rows = []
    for f in found:
        if not f.get("code"):
            continue  # a file perflint could not read or parse: reported on stderr, not a finding
        fn = Path(f["filename"])
        try:
            rel = fn.resolve().relative_to(repo.resolve()).as_posix()
        except ValueError:
            rel = fn.as_posix()
        loc = f.get("location") or {}
        row, col = int(loc.get("row") or 0), int(loc.get("column") or 0)
        cell = f.get("cell")
        text = _line_text(repo, rel, row, cell, cache)
        digest = hashlib.sha1((text or f.get("message", "")).encode("utf-8")).hexdigest()[:8]
        rows.append({
            "key": f"{name}:{rel}:{f['code']}:{digest}",
            "repo": name,
            "path": rel if cell is None else f"{rel}[cell {cell}]",
            "line": row,
            "col": col,
            "code": f["code"],
            "message": f.get("message", ""),
            "fix": _fix_text(f.get("fix")),
            "verdict": "",
            "cls": "",
            "note": "",
        })
    # the same code on two identical lines of one file: number the repeats so keys stay unique
    seen: dict[str, int] = defaultdict(int)
    for row in sorted(rows, key=lambda x: (x["path"], x["line"], x["col"])):
        seen[row["key"]] += 1
        if seen[row["key"]] > 1:
            row["key"] += f"#{seen[row['key']]}"
    return rows, r.returncode, r.stderr, count_files(repo)


def stratify(rows: list[dict], per_rule: int | None, seed: int) -> list[dict]:
    """At most `per_rule` findings per code, drawn round-robin across repositories."""
    if per_rule is None:
        return list(rows)
    rng = random.Random(seed)
    by_code: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        by_code[row["code"]][row["repo"]].append(row)
    chosen = []
    for code in sorted(by_code):
        pools = []
        for repo in sorted(by_code[code]):
            pool = sorted(by_code[code][repo], key=lambda x: x["key"])
            rng.shuffle(pool)
            pools.append(pool)
        rng.shuffle(pools)
        taken = 0
        while taken < per_rule and any(pools):
            for pool in pools:
                if pool and taken < per_rule:
                    chosen.append(pool.pop())
                    taken += 1
    return chosen


def read_sheets(paths: list[str]) -> list[dict]:
    rows = []
    for p in paths:
        with open(p, newline="", encoding="utf-8") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


def cmd_sample(args: argparse.Namespace) -> int:
    prior: dict[str, dict] = {}
    if args.prior:
        for row in read_sheets(args.prior):
            if (row.get("verdict") or "").strip():
                prior[row["key"]] = row
    everything: list[dict] = []
    for d in args.repos:
        repo = Path(d)
        if not repo.is_dir():
            print(f"{d}: not a folder", file=sys.stderr)
            continue
        rows, rc, err, nfiles = run_repo(repo)
        everything.extend(rows)
        print(f"{repo.resolve().name}: {nfiles} files, {len(rows)} findings")
        err = err.strip()
        if rc != 0 or err:
            for line in err.splitlines() or [""]:
                print(f"  perflint error (exit {rc}): {line}")
    chosen = stratify(everything, args.per_rule, args.seed)
    copied = 0
    for row in chosen:
        old = prior.get(row["key"])
        if old:
            for c in ("verdict", "cls", "note"):
                row[c] = old.get(c, "")
            copied += 1
    chosen.sort(key=lambda x: (x["repo"], x["path"], int(x["line"]), int(x["col"]), x["code"]))
    with open(args.out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(chosen)
    codes = len({r["code"] for r in chosen})
    print(f"wrote {len(chosen)} of {len(everything)} findings ({codes} rules) to {args.out}"
          + (f"; {copied} verdicts copied from prior sheets" if args.prior else ""))
    return 0


def default_on_rules() -> set[str] | None:
    try:
        r = subprocess.run(perflint_command() + ["rules", "--output-format", "json"],
                           capture_output=True, text=True, timeout=60)
        return {x["code"] for x in json.loads(r.stdout) if x.get("default")}
    except (OSError, ValueError, subprocess.SubprocessError, KeyError, TypeError):
        return None


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _counts(rows: list[dict]) -> dict[str, int]:
    c = {v: 0 for v in VERDICTS}
    c["rows"] = len(rows)
    for r in rows:
        v = (r.get("verdict") or "").strip().lower()
        if v in c:
            c[v] += 1
    c["reviewed"] = sum(c[v] for v in VERDICTS)
    return c


def precision(c: dict[str, int]) -> tuple[float | None, float | None]:
    d1 = c["right"] + c["false"]
    d2 = d1 + c["oos"]
    return (c["right"] / d1 if d1 else None, c["right"] / d2 if d2 else None)


def table(rows: list[dict], group: str, default_on: set[str] | None) -> list[str]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r[group]].append(r)
    head = f"| {group} | reviewed | right | false | oos | unsure | precision | precision (oos as false) |"
    if group == "code":
        head += " default | below bar |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for name in sorted(groups):
        c = _counts(groups[name])
        p, p_oos = precision(c)
        line = (f"| {name} | {c['reviewed']} | {c['right']} | {c['false']} | {c['oos']} | {c['unsure']} "
                f"| {_fmt(p)} | {_fmt(p_oos)} |")
        if group == "code":
            on = default_on is not None and name in default_on
            below = on and c["reviewed"] >= MIN_N and p is not None and p < BAR
            line += f" {'on' if on else ('?' if default_on is None else 'off')} | {'**below 0.80**' if below else ''} |"
        out.append(line)
    c = _counts(rows)
    p, p_oos = precision(c)
    total = (f"| **total** | {c['reviewed']} | {c['right']} | {c['false']} | {c['oos']} | {c['unsure']} "
             f"| {_fmt(p)} | {_fmt(p_oos)} |")
    if group == "code":
        total += " | |"
    out.append(total)
    if default_on is not None and group == "code":
        on_rows = [r for r in rows if r["code"] in default_on]
        c = _counts(on_rows)
        p, p_oos = precision(c)
        out.append(f"| default-on rules | {c['reviewed']} | {c['right']} | {c['false']} | {c['oos']} | "
                   f"{c['unsure']} | {_fmt(p)} | {_fmt(p_oos)} | | |")
    return out


def cmd_score(args: argparse.Namespace) -> int:
    rows = read_sheets(args.sheets)
    default_on = default_on_rules()
    c = _counts(rows)
    print(f"{c['reviewed']} of {c['rows']} findings reviewed ({', '.join(args.sheets)})\n")
    print("\n".join(table(rows, "code", default_on)))
    if args.by_repo:
        print()
        print("\n".join(table(rows, "repo", default_on)))
    p, p_oos = precision(c)
    print(f"\nprecision {_fmt(p)} (right / (right + false)); counting out-of-scope as false: {_fmt(p_oos)}")
    cls: dict[str, int] = defaultdict(int)
    for r in rows:
        if (r.get("verdict") or "").strip().lower() == "false":
            cls[(r.get("cls") or "").strip() or "(no class)"] += 1
    if cls:
        print("\nfalse-alarm classes: " + ", ".join(f"{k} {v}" for k, v in sorted(cls.items(), key=lambda kv: (-kv[1], kv[0]))))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="run perflint on repositories and write a review sheet")
    s.add_argument("repos", nargs="+", metavar="REPO_DIR")
    s.add_argument("--out", required=True, metavar="SHEET.csv")
    s.add_argument("--per-rule", type=int, default=None, metavar="N",
                   help="at most N findings per rule code across all repositories (default: all)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--prior", action="extend", nargs="+", default=[], metavar="OLD.csv",
                   help="copy verdict, cls and note from rows of an earlier sheet with the same key")
    s.set_defaults(func=cmd_sample)
    t = sub.add_parser("score", help="precision per rule from filled-in sheets")
    t.add_argument("sheets", nargs="+", metavar="SHEET.csv")
    t.add_argument("--by-repo", action="store_true", help="also a table per repository")
    t.set_defaults(func=cmd_score)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
