"""Dynamic proof for PF410's fix: the inserted `model = torch.compile(model)` trains the
same parameters to the same losses. Compiled with the `eager` backend (graph capture
without code generation) so the test takes about a second; the inductor timings are
`benchmarks/compile_break_even.py`'s job."""

from __future__ import annotations

import functools
import textwrap

import pytest

torch = pytest.importorskip("torch")

from cli_support import fix_source  # noqa: E402

SCRIPT = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    device = torch.device("cpu")
    data = [(torch.randn(16, 8), torch.randint(0, 3, (16,))) for _ in range(4)]
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 3))
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for x, y in data:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    """
)


def _run(src: str) -> dict:
    ns: dict = {"__name__": "snippet"}
    real = torch.compile
    torch.compile = functools.partial(real, backend="eager")
    try:
        torch._dynamo.reset()
        exec(compile(src, "<snippet>", "exec"), ns)
    finally:
        torch.compile = real
    return ns


def test_fix_compiles_the_trained_model_and_keeps_the_losses():
    after = fix_source(SCRIPT, unsafe=True, codes=["PF410"])
    assert "model.to(device)\nmodel = torch.compile(model)\noptimizer" in after
    assert fix_source(SCRIPT, unsafe=False, codes=["PF410"]) == SCRIPT  # unsafe only
    before, fixed = _run(SCRIPT), _run(after)
    assert type(fixed["model"]).__name__ == "OptimizedModule"
    assert fixed["losses"] == before["losses"]
    # What the fix safety note warns about: the state dict keys change.
    assert all(k.startswith("_orig_mod.") for k in fixed["model"].state_dict())
