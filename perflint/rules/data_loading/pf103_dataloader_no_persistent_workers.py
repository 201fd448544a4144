"""PF103 dataloader-no-persistent-workers: DataLoader with workers but without
persistent_workers."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import add_arg, make_kwarg
from perflint.analysis import NOT_LITERAL, Facts, get_arg, has_splat, literal_value
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import throttled_in_loop
from perflint.rules.data_loading.helpers import (
    dataloaders,
    iterated_once,
    loader_options,
    worker_count,
    workers_of,
)
from perflint.rules.data_loading.reads import read_cheaply


def _rebuilt_each_round(facts: Facts, call: cst.Call) -> bool:
    """The DataLoader is built anew on every iteration of a loop — in the loop body, or in a
    function this file calls from a loop (`run_epoch()` building its own loader): its workers
    die with it, so `persistent_workers` keeps nothing."""
    fn = facts.tree.enclosing_function(call)
    if throttled_in_loop(facts, call, fn or facts.module) is not None:
        return True
    if fn is None or facts.tree.parent(fn) is not facts.module and facts.tree.enclosing_class(fn) is None:
        return False
    name = fn.name.value
    own_method = facts.tree.enclosing_class(fn) is not None
    for c in facts.tree.calls():
        f = c.func
        hit = (isinstance(f, cst.Name) and f.value == name and not own_method) or (
            own_method and isinstance(f, cst.Attribute) and f.attr.value == name
            and isinstance(f.value, cst.Name) and f.value.value == "self")
        if hit and not facts.tree.is_inside(c, fn) and \
                throttled_in_loop(facts, c, facts.tree.enclosing_function(c) or facts.module) is False:
            return True
    return False


def _needs_parens(expr: cst.BaseExpression) -> bool:
    return not isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer)) and not expr.lpar


class DataLoaderNoPersistentWorkers(Rule):
    """
    ## What it does
    Flags `DataLoader(...)` calls with worker processes (`num_workers` a non-zero literal or
    a value not known to be 0) and no `persistent_workers`.

    ## Why is this bad?
    Without persistent workers, every epoch (every `iter(loader)`) shuts the worker
    processes down and starts new ones, each re-creating its copy of the dataset. Measured
    with 2 workers on 2000 small samples (torch 2.13, CPU): an epoch took 0.14–0.18 s with
    `fork` and 4.8–6.4 s with `spawn`; with `persistent_workers=True` the later epochs took
    0.03–0.07 s with every start method. The gain matters when epochs are short or the
    start method is `spawn`/`forkserver` (the default on macOS and Windows, and on Linux
    from Python 3.14).

    ## Example
    ```python
    loader = DataLoader(ds, batch_size=64, num_workers=8)
    ```

    ## Use instead
    ```python
    loader = DataLoader(ds, batch_size=64, num_workers=8, persistent_workers=True)
    ```

    ## Fix safety
    **Unsafe.** Persistent workers keep the dataset object they were started with: a
    dataset changed between epochs (a curriculum, `IterableDataset.set_epoch`, re-sampling
    done on the dataset) is silently not seen by the workers (reproduced: epoch 2 still
    yielded epoch 1's values). `sampler.set_epoch` on a map-style dataset is fine. For a
    non-literal `num_workers` the fix writes `persistent_workers=<num_workers> > 0`, never
    a bare `True`, which would raise when the value is 0. `DataLoader(ds, **kw)` is read
    through `kw` when its keys are known (a dict literal, `dict(...)`, `.update({...})`) and
    reported without a fix: the dict may get its `num_workers` only on some paths.

    ## Applies to
    Target torch ≥ 1.7 (`persistent_workers` does not exist before); CPU and CUDA. Not reported for a loader bound to a name that is
    read by one loop that is not inside another loop — directly, through `enumerate`,
    `tqdm` or a logging wrapper such as `log_every(loader, 10)`, or by a local function it
    is handed to once (a test set read once, features extracted once): its workers start
    once either way; nor for one batch read once, or a sample batch read under `if step %
    N == 0:`. `len(loader)`, `loader.__len__()` and `loader.dataset` do not count as reads.

    **Off by default** (`extend-select = ["PF103"]` turns it on). It cannot see how a loader
    returned by a factory function is read, and on repositories no rule change had seen it
    stays below the 0.80 bar: 11 right of 22 (0.50) on one held-out set, 31 right of 43
    (0.72) on the 18 repositories of the last review. The false alarms are loaders that are
    read once after all: one loader per data shard, a batch sampler that spans the whole run
    (Megatron), a factory whose only caller reads it once, a test set read a few times after
    training. What it saves is worker start-up once per epoch (0.2 s with fork, 5–6 s with
    spawn in the measurement below), small next to an epoch of training.

    ## References
    - `torch.utils.data.DataLoader` documentation, `persistent_workers`
    - Measured (torch 2.13, CPU): a dataset attribute changed between epochs reaches fresh
      workers (epoch 2 `[0, 10, 20, 30]`) but not persistent ones (`[0, 1, 2, 3]` again);
      epoch times with 2 workers and 2,000 small samples, not persistent → persistent after
      the first epoch: fork 0.18 s → 0.03–0.07 s, spawn 4.8–6.4 s → 0.03 s
    """

    code = "PF103"
    name = "dataloader-no-persistent-workers"
    summary = "DataLoader with workers but without persistent_workers"
    severity = Severity.INFO
    fix_class = FixClass.UNSAFE
    min_torch = (1, 7)  # `persistent_workers` is a TypeError before 1.7
    tokens = (b"DataLoader",)
    # Shares a fix pass with: `pin_memory` (PF102) on the same loader is not read by this fix.
    fix_commutes_with = frozenset({"PF102"})
    default = False  # held-out whole-repository review: 0.50, 0.72 (see "Applies to")

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in dataloaders(facts):
            if has_splat(call):
                # `DataLoader(ds, **kw)`: read through `kw` when its keys are known.
                opts = loader_options(facts, call)
                if opts is None or "persistent_workers" in opts or "num_workers" not in opts:
                    continue
                if workers_of(facts, opts["num_workers"]) == "zero" or iterated_once(facts, call) \
                        or read_cheaply(facts, call) or _rebuilt_each_round(facts, call):
                    continue
                # No fix: the dict may get its `num_workers` only on some paths (`if use_cuda:
                # kw.update(...)`), and `persistent_workers=True` without workers raises.
                yield Violation(
                    call.func,
                    "DataLoader restarts its worker processes every epoch; pass `persistent_workers=True` "
                    "if the dataset does not change between epochs",
                    None,
                )
                continue
            if get_arg(call, "persistent_workers") is not None:
                continue
            state, arg = worker_count(facts, call)
            if state == "zero" or arg is None:
                continue
            if iterated_once(facts, call) or read_cheaply(facts, call) or _rebuilt_each_round(facts, call):
                continue  # the workers start once per loader either way
            if state == "positive" and literal_value(arg.value) is not NOT_LITERAL:
                value: cst.BaseExpression = cst.Name("True")
            else:
                nw = arg.value
                left = nw.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if _needs_parens(nw) else nw
                value = cst.Comparison(
                    left=left.deep_clone(),
                    comparisons=[cst.ComparisonTarget(cst.GreaterThan(), cst.Integer("0"))],
                )
            new = add_arg(call, make_kwarg("persistent_workers", value))
            yield Violation(
                call.func,
                "DataLoader restarts its worker processes every epoch; pass `persistent_workers=True` "
                "if the dataset does not change between epochs",
                self.unsafe("Add `persistent_workers`", {call: new}),
            )
