"""Fuzzing the whole rule set: random training scripts built from the constructs the rules
look at, linted and fixed with every rule and unsafe fixes on.

Properties (non-negotiable #1): no rule crashes, a fix never produces code that does not
parse, and fixing is idempotent (a second `fix` changes nothing).
"""

from __future__ import annotations

import ast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perflint.engine import LintOptions, fix_text, lint_bytes
from perflint.rules import all_rules

IMPORTS = [
    "import torch",
    "import torch.nn as nn",
    "import torch.nn.functional as F",
    "from torch.utils.data import DataLoader",
    "from torch.utils.data import DataLoader as DL",
    "import torch.utils.data as tud",
    "from torch.cuda.amp import autocast, GradScaler",
    "from torch.optim import AdamW",
    "import numpy as np",
    "import gc",
]

SETUP = [
    'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
    "model = nn.Linear(8, 2).to(device)",
    "model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten()).cuda()",
    "criterion = nn.CrossEntropyLoss()",
    "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)",
    "optimizer = AdamW(model.parameters())",
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "scaler = GradScaler()",
    "scaler = torch.amp.GradScaler('cuda')",
    "loader = DataLoader(ds, batch_size=8)",
    "loader = DL(ds, batch_size=8, num_workers=0, persistent_workers=True)",
    "loader = tud.DataLoader(ds, 32, True, None, None, 4)",
    "loader = DataLoader(\n    ds,\n    batch_size=8,\n    num_workers=2,\n)",
    "loader = DataLoader(ds, num_workers=nw, prefetch_factor=2)",
    "nw = 0",
    "torch.autograd.set_detect_anomaly(True)",
    "buf = torch.zeros(10).cuda()",
    "ir = np.convolve(sig, kernel)",
]

BODY = [
    "x, y = batch",
    "x, y = x.to(device), y.to(device)",
    "x = x.cuda()",
    "out = model(x)",
    "loss = criterion(out, y)",
    "loss = F.cross_entropy(model(x), y)",
    "loss.backward()",
    "scaler.scale(loss).backward()",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "scaler.step(optimizer)",
    "scaler.update()",
    "optimizer.step()",
    "optimizer.zero_grad(set_to_none=False)",
    "optimizer.zero_grad()",
    "total += loss",
    "total += loss.item()",
    "losses.append(loss)",
    "print(loss)",
    "print(f'{loss:.3f}')",
    "acc = (out.argmax(1) == y).float().mean().item()",
    "preds.extend(out.argmax(1).cpu().tolist())",
    "torch.cuda.empty_cache()",
    "gc.collect()",
    "torch.cuda.synchronize()",
    "z = torch.ones(4).to(device)",
    "w = torch.randn(4).cuda()",
    "pass",
]

WRAPPERS = [
    ("if step % 10 == 0:", True),
    ("if step == 0:", True),
    ("with torch.no_grad():", True),
    ("with autocast():", True),
    ("with torch.autocast('cuda', dtype=torch.bfloat16):", True),
    ("if loss > 1:", True),
    ("try:", False),
]


@st.composite
def body_block(draw, depth: int = 0):
    stmts = draw(st.lists(st.sampled_from(BODY), min_size=1, max_size=7))
    lines = list(stmts)
    if depth < 2 and draw(st.booleans()):
        header, _ = draw(st.sampled_from(WRAPPERS))
        inner = draw(body_block(depth + 1))
        block = [header] + ["    " + l for l in inner]
        if header == "try:":
            block += ["except RuntimeError:", "    pass"]
        pos = draw(st.integers(0, len(lines)))
        lines[pos:pos] = block
    return lines


@st.composite
def scripts(draw):
    imports = draw(st.lists(st.sampled_from(IMPORTS), min_size=1, max_size=6, unique=True))
    setup = draw(st.lists(st.sampled_from(SETUP), max_size=8))
    loop_header = draw(st.sampled_from([
        "for step, batch in enumerate(loader):",
        "for batch in loader:",
        "for step in range(10):",
        "while step < 10:",
    ]))
    body = draw(body_block())
    eval_part = draw(st.sampled_from([
        [],
        ["model.eval()", "for x, y in loader:", "    out = model(x)", "    correct += (out.argmax(1) == y).sum().item()"],
        ["@torch.no_grad()", "def evaluate(m, dl):", "    return [m(b).sum().item() for b in dl]"],
    ]))
    in_function = draw(st.booleans())
    lines = imports + setup + ["total = 0", "losses, preds = [], []", "step = 0", "correct = 0"]
    loop = [loop_header] + ["    " + l for l in body]
    if in_function:
        lines += ["def train(model, loader, optimizer):"] + ["    " + l for l in loop + eval_part if l] + ["    return total"]
    else:
        lines += loop + eval_part
    return "\n".join(lines) + "\n"


ALL = tuple(all_rules())


@settings(max_examples=int(__import__("os").environ.get("PERFLINT_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts(), st.sampled_from([(1, 13), (2, 1), (2, 4)]))
def test_fixes_parse_and_are_idempotent(src, target):
    ast.parse(src)
    options = LintOptions(codes=ALL, target_torch=target, prefilter=False)
    result = lint_bytes("fuzz.py", src.encode(), options)
    assert not result.errors, [e.one_line() for e in result.errors]
    for unsafe in (False, True):
        fixed, _, errors = fix_text(src, "fuzz.py", options, unsafe)
        assert not errors, [e.one_line() for e in errors]
        ast.parse(fixed)
        again, applied, errors = fix_text(fixed, "fuzz.py", options, unsafe)
        assert not errors and again == fixed and not applied
