"""PF203 empty-cache-in-loop: `torch.cuda.empty_cache()` / `gc.collect()` on every iteration."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.analysis import Facts
from perflint.rules.base import Rule, Violation


class EmptyCacheInLoop(Rule):
    """
    ## What it does
    Flags `torch.cuda.empty_cache()` and `gc.collect()` on every iteration of a training or
    evaluation loop.

    ## Why is this bad?
    `empty_cache()` hands cached blocks back to the driver, so the next step has to
    `cudaMalloc` them again, which synchronises; it does not make more memory available to
    PyTorch (the docs: it "doesn't increase the amount of GPU memory available for
    PyTorch"). `gc.collect()` walks every Python object. Measured in peft PR #2894 over 250
    steps: removing a per-step `gc.collect()` went from 108 s to 65 s; calling
    `empty_cache()` every 10 steps instead of every step 65 s → 50 s; never, 45 s (with
    reserved memory 12.0 → 22.1 GB). On an H100 80GB (torch 2.11, `python
    benchmarks/rule_effects.py`; results in `benchmarks/results/h100/rule_effects/`),
    `empty_cache()` after every bf16 conv-net step cost 9.26 ms against 8.47 ms without
    (1.09×; 1.20× in a second run). transformers removed its per-step `empty_cache` (issue
    #31372, PR #31530) and made it opt-in every N steps.

    ## Example
    ```python
    for batch in loader:
        train_step(batch)
        torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    for step, batch in enumerate(loader):
        train_step(batch)
        if step % 100 == 0:
            torch.cuda.empty_cache()  # only if fragmentation is a real problem
    ```

    ## Fix safety
    No fix: removing the call can run out of memory where it was working against
    fragmentation; choosing N is the user's call.

    ## Applies to
    All torch versions. Not in a branch that runs on few steps: `if step % N == 0:`, or a
    step compared with a bound (`if step == last_step:`, and the step a resumed run starts
    from, `if resumed and step == initial_step:`, nanotron moving optimizer state back to the
    GPU once). Not in a function called every step that leaves early unless such a test
    holds, also through a tree of them (`if steps == 0: ... else: if steps % every != 0:
    return`: sd-scripts' sample-image functions and the memory cleaner they call, 6 reviewed
    findings false). Not in a branch for another device (`if device.type == "mps":
    torch.mps.empty_cache()`), which a CUDA run does not take.

    ## References
    - `torch.cuda.empty_cache` documentation; PyTorch notes "CUDA semantics", memory management
    - huggingface/peft PR #2894; huggingface/transformers #31372, #31530, #31546
    """

    code = "PF203"
    name = "empty-cache-in-loop"
    summary = "`torch.cuda.empty_cache()` / `gc.collect()` on every iteration"
    tokens = (b"empty_cache", b"collect")
    per_step = True

    def check(self, facts: Facts) -> Iterator[Violation]:
        wanted = {"torch.cuda.empty_cache", "torch.accelerator.memory.empty_cache", "torch.mps.empty_cache",
                  "torch.xpu.empty_cache", "gc.collect"}
        for call in facts.tree.calls():
            q = facts.tree.qualname(call.func)
            if q not in wanted:
                continue
            if _on_another_device(facts, call):
                continue  # `if device.type == "mps": torch.mps.empty_cache()`: not on a CUDA run
            why = facts.hotpath.hot_path(call)
            if why is None:
                continue  # not on every step of training (or of an evaluation during training)
            if q == "gc.collect":
                what, evidence = "gc.collect()", "peft measured 250 steps at 108 s with it, 65 s without"
            else:
                what, evidence = "empty_cache()", "peft measured 250 steps at 65 s, 50 s calling it every 10 steps"
            yield Violation(
                call,
                f"`{what}` on every iteration slows training ({evidence}); call it every N steps at most",
                why=why,
            )


_OTHER_DEVICES = {"cpu", "mps", "xpu", "npu", "hpu", "mlu", "xla", "musa"}


def _on_another_device(facts: Facts, call: cst.Call) -> bool:
    """`call` runs only in a branch for a device other than CUDA (`if device.type == "xpu":`,
    `elif device == "mps":`), which a CUDA training run does not take."""
    cur: cst.CSTNode = call
    for a in facts.tree.ancestors(call):
        if isinstance(a, cst.If) and cur is a.body:
            test = a.test
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                    and isinstance(test.comparisons[0].operator, cst.Equal):
                sides = (test.left, test.comparisons[0].comparator)
                if any(isinstance(s, cst.SimpleString) and s.evaluated_value in _OTHER_DEVICES for s in sides):
                    return True
        if isinstance(a, (cst.FunctionDef, cst.ClassDef)):
            return False
        cur = a
    return False
