"""PF405 tf32-not-enabled: fp32 matmuls in a CUDA training file without TF32."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.analysis import Facts
from perflint.analysis.vocab import loads_model
from perflint.rules.base import FixClass, Rule, Violation
from perflint.rules.common import is_training_file, torch_module_name, words
from perflint.rules.precision.helpers import (
    FRAMEWORK_PRECISION,
    FRAMEWORK_ROOTS,
    TORCHVISION_CLASSIFIER,
    casts_to_low_precision,
    first_torch_import,
    insert_setting,
    layer_qualnames,
    settings_near,
)


def _precision_framework(facts: Facts) -> bool:
    """Accelerate, Lightning, DeepSpeed, ColossalAI, Composer or the transformers Trainer:
    they set the model's precision themselves (bf16 parameters, mixed precision), so fp32
    matmuls are not the default there.  apex is not counted: its amp is optional."""
    for full in facts.tree.imports.aliases.values():
        root = full.split(".", 1)[0]
        if root in FRAMEWORK_ROOTS:
            return True
        if root == "transformers" and full.rsplit(".", 1)[-1] in ("Trainer", "TrainingArguments", "Seq2SeqTrainer",
                                                                "Seq2SeqTrainingArguments"):
            return True
    return False


_MATMUL_APIS = {
    "torch.nn.Linear", "torch.nn.LazyLinear", "torch.nn.Bilinear", "torch.nn.MultiheadAttention",
    "torch.nn.Transformer", "torch.nn.TransformerEncoder", "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoder", "torch.nn.TransformerDecoderLayer",
    "torch.nn.functional.linear", "torch.nn.functional.bilinear",
    "torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.multi_head_attention_forward",
    "torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.baddbmm", "torch.addbmm",
    "torch.einsum", "torch.chain_matmul",
    "operator.matmul",  # `a @ b` in a project model class (the summaries' name for the operator)
}


def has_matmul_work(facts: Facts) -> bool:
    called = layer_qualnames(facts)
    if called & _MATMUL_APIS or words(facts).matmul_operator:
        return True
    return any(
        TORCHVISION_CLASSIFIER.match(q) or q == "timm.create_model" or q == "torch.hub.load"
        or (q.startswith("transformers.") and q.endswith(".from_pretrained") and loads_model(q))
        for q in called
    )


class Tf32NotEnabled(Rule):
    """
    ## What it does
    Flags, once per file, a CUDA training file with fp32 matmul work (linear layers,
    attention, `matmul`/`bmm`/`einsum`, `@`, a torchvision/timm/transformers model) that never
    sets or reads a TF32 setting — neither the legacy API
    (`torch.set_float32_matmul_precision`, `torch.backends.cuda.matmul.allow_tf32`,
    `torch.backends.cudnn.allow_tf32`) nor the new `fp32_precision` API. Reported at the
    header of the first training loop (the code whose matmuls run slower), or at the first
    `.backward()` call when the file only defines a step function.

    ## Why is this bad?
    Since torch 1.12 fp32 matmuls run in full IEEE precision by default
    (`get_float32_matmul_precision() == "highest"`, `cuda.matmul.allow_tf32 == False`), so
    Ampere and newer GPUs leave their TF32 tensor cores unused for fp32 matmuls. cuDNN
    convolutions already default to TF32 (`cudnn.allow_tf32 == True`), so the setting
    matters for matmuls. On an H100 80GB (torch 2.11, `python benchmarks/rule_effects.py`;
    results in `benchmarks/results/h100/rule_effects/`), an 8192 × 8192 fp32 matmul took
    21.2 ms at full precision and 3.1 ms with TF32 (6.9×); a training step gains in
    proportion to its share of fp32 matmul time.

    ## Example
    ```python
    import torch
    model = Transformer().cuda()
    ```

    ## Use instead
    ```python
    import torch
    torch.set_float32_matmul_precision("high")
    model = Transformer().cuda()
    ```

    ## Fix safety
    **Unsafe.** TF32 rounds matmul inputs to a 10-bit mantissa, which changes numerics. The
    fix inserts `torch.set_float32_matmul_precision("high")` (portable since 1.12, never
    raises) once, after the file's imports (docstring, `from __future__`, setup code between
    imports and `try`/`except` imports included) and before the first function, class or
    loop, set off by a blank line (next to settings lines already there), using the file's
    own name for the torch module and its line endings. It never writes the new `fp32_precision` API: mixing it with the legacy API
    raises `RuntimeError` on torch 2.13 as soon as either side reads its setting (verified),
    and libraries still read the legacy getters. Because files that mention either API are
    skipped, the inserted line can never mix the two within the file.

    ## Applies to
    Target torch ≥ 1.12 (TF32 matmul was on by default in 1.7–1.11). CUDA code only; the
    effect needs compute capability ≥ 8.0. Silent in files that use autocast or cast the
    model to half/bfloat16 (their matmuls do not run in fp32), that train through DeepSpeed,
    Lightning, Accelerate or the transformers Trainer or pass a framework precision flag
    (`precision="bf16-mixed"`), and when a project module the file imports or that imports
    it (the entry point, a base class's module) sets TF32 or runs the step under autocast.
    In a module other project modules import, the finding says to set it in the script that
    runs training, and no fix is offered there.

    Off by default. Whole-repository review (strict, issue 21): of the 10 PF405 findings
    still reported after this narrowing on the 56 repositories the rules were tuned on, 6
    are right and 4 false (0.60); on a held-out set of repositories none of 5 was right
    (conv nets whose matmul work is a final classifier, a library module, code pinned to
    torch 1.x). The advice is right for matmul-heavy fp32 training on Ampere or newer,
    which is what the labelled projects that select it are; turn it on with
    `--extend-select PF405` (or `extend-select = ["PF405"]`) where that is your code.

    ## References
    - PyTorch CUDA semantics notes, "TensorFloat-32 (TF32) on Ampere (and later) devices"
    - PyTorch performance tuning guide
    - Measured (torch 2.13): the defaults are `get_float32_matmul_precision() == "highest"`
      and `cuda.matmul.allow_tf32 == False`; setting `cuda.matmul.fp32_precision` and then
      reading `allow_tf32` raises a RuntimeError about mixing the legacy and new APIs
    """

    code = "PF405"
    name = "tf32-not-enabled"
    summary = "fp32 matmuls in a CUDA training file without TF32"
    severity = Severity.INFO
    fix_class = FixClass.UNSAFE
    default = False  # whole-repository review: 0.60 tuned, 0/5 held out (see "Applies to")
    min_torch = (1, 12)
    tokens = (b"cuda", b"accelerator", b"device")  # what is_cuda_code reads: CUDA names, torch.accelerator, a device option

    def check(self, facts: Facts) -> Iterator[Violation]:
        anchor = first_torch_import(facts)
        if anchor is None or not facts.devices.is_cuda_code or not is_training_file(facts):
            return
        w = words(facts)
        if w.name_contains("tf32", "fp32_precision", "matmul_precision"):
            return
        if facts.filewide.uses_autocast or casts_to_low_precision(facts) or not has_matmul_work(facts):
            return
        if _precision_framework(facts) or any(FRAMEWORK_PRECISION.search(v) for v in w.strings) or any(
                a.keyword is not None and a.keyword.value in ("precision", "mixed_precision")
                for c in facts.tree.calls() for a in c.args):
            return  # a framework's mixed precision (`precision="bf16-mixed"`): no fp32 matmuls
        near, imported = settings_near(facts)
        if near & {"tf32", "amp"}:
            return  # set by the entry point or a base class's module, or the step runs under autocast
        tn = torch_module_name(facts, top_level=True)
        fix = None
        if tn is not None and not imported:  # file-wide settings go into the entry point only
            r = insert_setting(facts, f'{tn}.set_float32_matmul_precision("high")', tn)
            if r is not None:
                fix = self.unsafe('Add `torch.set_float32_matmul_precision("high")`', r)
        node, what = _training_anchor(facts)
        yield Violation(
            node or anchor,
            f"fp32 matmuls in this {what} run without TF32 on Ampere+ GPUs: add "
            '`torch.set_float32_matmul_precision("high")` once '
            + ("in the script that runs training (other modules import this one; a process-wide setting "
               "belongs in the entry point; " if imported else "after the imports (a file-wide setting; ")
            + "do not mix it with the new `fp32_precision` API)",
            fix,
        )


def _training_anchor(facts: Facts) -> tuple[cst.CSTNode | None, str]:
    """Where a file-wide training finding points: the first training loop's header, else the
    first `.backward()` call (a step function without a loop in the file)."""
    loops = facts.loops.training_loops()
    if loops:
        return min(loops, key=lambda n: facts.tree.order.get(n, 0)), "training loop"
    backward = [c for c in facts.tree.calls() if facts.steps.is_backward_call(c)]
    if backward:
        return min(backward, key=lambda n: facts.tree.order.get(n, 0)), "training step"
    return None, "training code"
