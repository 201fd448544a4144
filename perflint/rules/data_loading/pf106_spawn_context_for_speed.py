"""PF106 spawn-context-for-speed: DataLoader workers started with spawn/forkserver without
persistent_workers."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg, has_splat, literal_value
from perflint.rules.base import Rule, Violation
from perflint.rules.data_loading.helpers import dataloaders, dataset_origin, loader_arg, worker_count


class SpawnContextForSpeed(Rule):
    """
    ## What it does
    Flags `DataLoader(..., multiprocessing_context="spawn")` (or `"forkserver"`, or a
    `get_context("spawn")` object) without `persistent_workers`.

    ## Why is this bad?
    `spawn` is not faster: every spawned worker starts a fresh interpreter and re-imports
    torch, every epoch. Measured with 2 workers on 2000 small samples (torch 2.13, CPU):
    4.8–6.4 s per epoch with `spawn`, 4.8–5.2 s with `forkserver`, 0.14–0.18 s with `fork`.
    The PyTorch docs use spawn for correctness (CUDA inside workers), not speed.

    ## Example
    ```python
    DataLoader(ds, num_workers=4, multiprocessing_context="spawn")
    ```

    ## Use instead
    ```python
    DataLoader(ds, num_workers=4)  # the platform default
    # or, if spawn is needed: keep the workers alive across epochs
    DataLoader(ds, num_workers=4, multiprocessing_context="spawn", persistent_workers=True)
    ```

    ## Fix safety
    No fix: removing `spawn` breaks code that uses CUDA in workers, and adding persistent
    workers has its own caveat (PF103).

    ## Applies to
    All torch versions. Not reported when the dataset class in the file uses CUDA itself.

    ## References
    - PyTorch docs, `notes/multiprocessing.rst` ("The CUDA runtime does not support the fork
      start method")
    - Measured (torch 2.13, CPU, 2 workers, 2,000 small samples, epochs without persistent
      workers): fork 0.14–0.18 s, forkserver 4.8–5.2 s, spawn 4.8–6.4 s — each spawned
      worker imports torch again
    """

    code = "PF106"
    name = "spawn-context-for-speed"
    summary = "DataLoader workers started with spawn/forkserver without persistent_workers"
    tokens = (b"spawn", b"forkserver")

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in dataloaders(facts):
            if has_splat(call) or get_arg(call, "persistent_workers") is not None:
                continue
            arg = loader_arg(call, "multiprocessing_context")
            if arg is None:
                continue
            method = _start_method(facts, arg.value)
            if method not in ("spawn", "forkserver"):
                continue
            if worker_count(facts, call)[0] == "zero":
                continue  # PF104's business
            if dataset_origin(facts, (loader_arg(call, "dataset") or cst.Arg(cst.Name("None"))).value) == "device":
                continue
            yield Violation(
                arg,
                f"DataLoader workers started with '{method}' re-import torch every epoch (measured "
                "4.8-6.4 s per epoch vs 0.14-0.18 s with fork); use the default start method, or add "
                "`persistent_workers=True` if spawn is needed for CUDA in workers",
            )


def _start_method(facts: Facts, expr: cst.BaseExpression) -> str | None:
    v = literal_value(expr)
    if isinstance(v, str):
        return v
    if isinstance(expr, cst.Call) and call_name(expr) == "get_context" and expr.args:
        v = literal_value(expr.args[0].value)
        return v if isinstance(v, str) else None
    if isinstance(expr, cst.Name):
        bs = facts.bindings.lookup(expr.value, expr)
        if len(bs) == 1 and bs[0].how == "expr":
            return _start_method(facts, bs[0].node)
    return None
