"""PF204's invariant: a fix never detaches a value that reaches `.backward()`.

Each program below sums loss terms in a Python loop and backpropagates the sum in some
way the rule must follow (directly, through a returned value, a tuple assignment, a callable
scaler, `torch.autograd.grad`). The test runs the program before and after
`perflint fix --unsafe-fixes` (PF204 only) and compares every gradient it computed: they must
be identical, and the accumulators that only log must still be fixed."""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")

from perflint.engine import LintOptions, fix_text  # noqa: E402

PRELUDE = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [(torch.randn(5, 4), torch.randn(5, 3)) for _ in range(3)]
GRADS = []


def record():
    GRADS.append([p.grad.clone() for p in model.parameters()])
"""

PROGRAMS = {
    "returned_from_a_loss_function": """
        def multi_head_loss(pred, target):
            total = 0.0
            for h in range(pred.shape[1]):
                total = total + F.l1_loss(pred[:, h], target[:, h])
            return total

        for x, y in loader:
            optimizer.zero_grad()
            loss = multi_head_loss(model(x), y)
            loss.backward()
            record()
            optimizer.step()
    """,
    "tuple_assignment": """
        for x, y in loader:
            out = model(x)
            terms = []
            for k in range(out.shape[1]):
                terms.append(F.mse_loss(out[:, k], y[:, k]))
            loss, n = sum(terms), len(terms)
            optimizer.zero_grad()
            (loss / n).backward()
            record()
            optimizer.step()
    """,
    "callable_scaler": """
        def loss_scaler(loss, opt):
            loss.backward()
            record()
            opt.step()

        for x, y in loader:
            out = model(x)
            total = 0
            for b in range(out.shape[0]):
                total += F.mse_loss(out[b], y[b])
            optimizer.zero_grad()
            loss_scaler(total, optimizer)
    """,
    "autograd_grad": """
        for x, y in loader:
            out = model(x)
            acc = 0
            for b in range(out.shape[0]):
                acc = acc + F.l1_loss(out[b], y[b])
            grads = torch.autograd.grad(acc, list(model.parameters()))
            GRADS.append([g.clone() for g in grads])
    """,
    "accumulated_across_steps_then_backward": """
        total = 0
        for x, y in loader:
            total += F.mse_loss(model(x), y)
        total.backward()
        record()
    """,
    "logged_total_beside_a_backward": """
        running = 0.0
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            record()
            optimizer.step()
            running += loss
        print(float(running))
    """,
}


def _run(src: str) -> list:
    scope: dict = {"__name__": "__main__"}
    exec(compile(src, "<program>", "exec"), scope)
    return scope["GRADS"]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fixes_keep_every_gradient(name):
    src = PRELUDE + textwrap.dedent(PROGRAMS[name])
    fixed, _, errors = fix_text(src, "train.py", LintOptions(codes=("PF204",), prefilter=False), True)
    assert not errors
    before, after = _run(src), _run(fixed)
    assert len(before) == len(after) > 0
    for gb, ga in zip(before, after):
        for b, a in zip(gb, ga):
            assert torch.equal(b, a)
    if name == "logged_total_beside_a_backward":
        assert "running += loss.detach()" in fixed  # the one accumulator that only logs is fixed
    else:
        assert ".detach()" not in fixed, "a fix detached a value that is backpropagated"
