"""Does any pass grow faster than the file? `perflint check` (and `fix`) on generated files of
unusual shape, at N and 2N units, with the growth of the time between them:

    python benchmarks/shapes.py [--units 1000] [--fix] [--only SHAPE ...] [--against DIR]

A growth near 2.0 is linear; near 4.0 a pass is quadratic in that shape (each time is one cold
`check --select ALL --no-cache --jobs 1` in a fresh process, interpreter start-up included, so
small files show less than 2.0). `--limit S` stops a run after S seconds ("timeout"). `--against DIR` times DIR's perflint (a `git archive` of an
older commit) on the same files. The shapes are the ones where a quadratic pass was found:

* `rebind`: one name rebound on each of N lines of a training loop (a long body re-indented
  under `with torch.autocast(...)`: the token diff of its fix);
* `calls`: N calls of a project helper that reads back, in one training loop (the evidence
  of each finding, the throttle guards before each statement, the GPU work between waits);
* `elif`: an `elif` chain of N arms (N levels deep: the enclosing function of each node);
* `body`: N distinct reads in one loop; `chain`: N functions, each calling the previous;
  `methods`: a model with N layers and N methods; `attrs`: N `self.` tensors updated per step;
  `defs`: N top-level functions that nothing calls (is the file calling its own functions?);
  `blocks`: N `with torch.no_grad():` blocks in a loop (PF303 looked for the reads after each
  block through the whole function); `steps`: N local functions each called once per step
  (the loop's evidence was built again for each of them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 300.0
HEAD = "import torch\nimport torch.nn as nn\n\n\n"
STEP_END = "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"


def _loop(body: str) -> str:
    return HEAD + "def train(model, loader, opt):\n    for x, y in loader:\n" + body + STEP_END


SHAPES = {
    "rebind": lambda n: _loop("        x = x.cuda()\n" + "".join(f"        x = x * {i}\n" for i in range(n))),
    "calls": lambda n: HEAD + "def helper(t):\n    return t.item()\n\n\n" + _loop(
        "".join(f"        a{i} = helper(model(x.cuda()))\n" for i in range(n)))[len(HEAD):],
    "elif": lambda n: HEAD + "def pick(k, x):\n    if k == 0:\n        return x\n"
    + "".join(f"    elif k == {i}:\n        return x * {i}\n" for i in range(1, n)),
    "body": lambda n: _loop("".join(f"        v{i} = model(x) + {i}\n        print(v{i}.mean().item())\n" for i in range(n))),
    "chain": lambda n: HEAD + "def f0(x):\n    return x\n\n\n" + "".join(
        f"def f{i}(x):\n    return f{i - 1}(x) + 1\n\n\n" for i in range(1, n)),
    "methods": lambda n: HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    + "".join(f"        self.l{i} = nn.Linear(4, 4)\n" for i in range(n))
    + "".join(f"\n    def m{i}(self, x):\n        return self.l{i}(x).relu()\n" for i in range(n)),
    "attrs": lambda n: HEAD + "class Trainer:\n    def __init__(self):\n"
    + "".join(f"        self.a{i} = torch.zeros(3).cuda()\n" for i in range(n))
    + "\n    def step(self, loader):\n        for x in loader:\n" + "".join(f"            self.a{i} += x.sum()\n" for i in range(n)),
    "defs": lambda n: HEAD + "".join(f"def f{i}(x):\n    return torch.relu(x) + {i}\n\n\n" for i in range(n)),
    "blocks": lambda n: _loop("".join(f"        with torch.no_grad():\n            v{i} = model(x)\n" for i in range(n))),
    "steps": lambda n: HEAD + "def train(model, loader, opt):\n" + "".join(
        f"    def step{i}(x):\n        return model(x).sum().item()\n\n" for i in range(n))
    + "    for x, y in loader:\n" + "".join(f"        step{i}(x.cuda())\n" for i in range(n)) + STEP_END,
}


def _time(code_dir: Path, path: Path, fix: bool, limit: float) -> float | None:
    """Seconds of one run; None past `limit`."""
    cmd = [sys.executable, "-m", "perflint"]
    cmd += ["fix", str(path), "--unsafe-fixes", "--diff"] if fix else ["check", str(path), "--exit-zero"]
    cmd += ["--select", "ALL", "--no-cache", "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    start = time.perf_counter()
    try:
        # From the file's folder: `python -m` puts the working folder first on the path, and a
        # checkout there would shadow `code_dir`.
        subprocess.run(cmd, env=env, cwd=path.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, timeout=limit)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def _cells(times: list, limit: float) -> list[str]:
    small, large = times
    shown = [f"{t:.2f}" if t is not None else "timeout" for t in times]
    growth = f"{large / small:.2f}" if small and large else (f"> {limit / small:.1f}" if small else "?")
    return shown + [growth]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=1000, help="N: the smaller size of each shape")
    ap.add_argument("--fix", action="store_true", help="time `fix --unsafe-fixes --diff` instead of `check`")
    ap.add_argument("--only", nargs="+", choices=sorted(SHAPES), help="these shapes only")
    ap.add_argument("--against", type=Path, metavar="DIR", help="also time the perflint package in DIR")
    ap.add_argument("--limit", type=float, default=LIMIT, help="seconds after which a run is stopped")
    args = ap.parse_args()
    codes = [("this", ROOT)] + ([("against", args.against.resolve())] if args.against else [])
    head = "| shape | lines (N) | " + " | ".join(f"{k}: N s | {k}: 2N s | {k}: growth" for k, _ in codes) + " |"
    print(f"{'fix --unsafe-fixes --diff' if args.fix else 'check'} --select ALL --no-cache --jobs 1, N = {args.units}")
    print()
    print(head)
    print("|" + "---|" * head.count(" | ") + "---|")
    with tempfile.TemporaryDirectory(prefix="perflint-shapes-") as tmp:
        for name in args.only or list(SHAPES):
            cells, lines = [], 0
            for _, code in codes:
                times: list = []
                for n in (args.units, 2 * args.units):
                    folder = Path(tmp) / f"{name}_{n}"
                    folder.mkdir(exist_ok=True)
                    path = folder / "train.py"  # one file alone in its folder: its own project
                    text = SHAPES[name](n)
                    path.write_text(text, encoding="utf-8")
                    lines = lines or text.count("\n")
                    times.append(None if times and times[0] is None else _time(code, path, args.fix, args.limit))
                cells += _cells(times, args.limit)
            print(f"| {name} | {lines} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
