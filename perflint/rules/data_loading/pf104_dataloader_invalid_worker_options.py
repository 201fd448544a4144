"""PF104 dataloader-invalid-worker-options: worker-only DataLoader options with num_workers=0
(raises ValueError)."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import remove_arg, replace_arg_value
from perflint.analysis import NOT_LITERAL, Facts, has_splat, literal_value
from perflint.names import dotted
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.data_loading.helpers import dataloaders, loader_arg, worker_count


class DataLoaderInvalidWorkerOptions(Rule):
    """
    ## What it does
    Flags `persistent_workers=True`, `prefetch_factor=…` or `multiprocessing_context=…` on
    a `DataLoader` whose `num_workers` is missing or 0.

    ## Why is this bad?
    The constructor raises (verified on torch 2.13):

    - `ValueError: persistent_workers option needs num_workers > 0`
    - `ValueError: prefetch_factor option could only be specified in multiprocessing.let
      num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.`
    - `ValueError: multiprocessing_context can only be used with multi-process loading
      (num_workers > 0), but got num_workers=0`

    Before torch 2.0 `prefetch_factor` defaulted to 2 and only other values raised, so on a
    target below 2.0 only `prefetch_factor` values other than 2 are reported.

    ## Example
    ```python
    DataLoader(ds, batch_size=32, persistent_workers=True)
    ```

    ## Use instead
    ```python
    DataLoader(ds, batch_size=32)
    # or, with workers:
    DataLoader(ds, batch_size=32, num_workers=4, persistent_workers=True)
    ```

    ## Fix safety
    **Safe**: the code raises at construction as written. With `num_workers` missing or a
    literal 0 the option is removed; with a name that is only ever bound to 0 the option is
    made conditional on it (`persistent_workers=nw > 0`, `prefetch_factor=4 if nw > 0 else
    None`), so raising the worker count later still works.

    ## Applies to
    All torch versions (see above for `prefetch_factor` before 2.0).

    ## References
    - `torch/utils/data/dataloader.py` (2.13), the checks in `DataLoader.__init__`
    - Measured (torch 2.13): `DataLoader(ds, num_workers=0, persistent_workers=True)` raises
      "ValueError: persistent_workers option needs num_workers > 0"; with `prefetch_factor=2`
      it raises "prefetch_factor option could only be specified in multiprocessing"
    """

    code = "PF104"
    name = "dataloader-invalid-worker-options"
    summary = "worker-only DataLoader options with num_workers=0 (raises ValueError)"
    severity = Severity.ERROR
    fix_class = FixClass.SAFE
    tokens = (b"DataLoader",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in dataloaders(facts):
            if has_splat(call):
                continue
            state, nw_arg = worker_count(facts, call)
            if state != "zero":
                continue
            for opt in ("persistent_workers", "prefetch_factor", "multiprocessing_context"):
                arg = loader_arg(call, opt)
                if arg is None:
                    continue
                v = literal_value(arg.value)
                if v is None or v is False or isinstance(arg.value, cst.IfExp):
                    continue  # harmless, or already conditional
                if opt == "persistent_workers" and v is not True:
                    continue  # a variable: raises only when it is truthy
                if opt == "prefetch_factor" and facts.target_torch < (2, 0) and v == 2:
                    continue
                if nw_arg is None or literal_value(nw_arg.value) is not NOT_LITERAL:
                    new = remove_arg(call, arg)
                    fix_msg = f"Remove `{opt}`"
                else:
                    nw = nw_arg.value.deep_clone()
                    cond = cst.Comparison(left=nw, comparisons=[cst.ComparisonTarget(cst.GreaterThan(), cst.Integer("0"))])
                    if opt == "persistent_workers":
                        new_value: cst.BaseExpression = cond
                    else:
                        new_value = cst.IfExp(test=cond, body=arg.value.deep_clone(), orelse=cst.Name("None"))
                    new = replace_arg_value(call, arg, new_value)
                    fix_msg = f"Make `{opt}` conditional on `num_workers > 0`"
                if nw_arg is not None and literal_value(nw_arg.value) is NOT_LITERAL and dotted(nw_arg.value):
                    message = (f"`{opt}` needs `num_workers > 0`: with the default `{dotted(nw_arg.value)}` "
                               "(0) this DataLoader raises ValueError when it is built")
                else:
                    message = f"`{opt}` needs `num_workers > 0`: this DataLoader raises ValueError when it is built"
                yield Violation(arg, message, self.safe(fix_msg, {call: new}))
