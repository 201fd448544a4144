"""What several PF4 rules (precision, kernels and tensors) share: adding a setting after the
imports and the settings already there, training frameworks, the model's layers (conv
nets), casts to low precision and variable input shapes."""

from __future__ import annotations

import re

import libcst as cst

from perflint.analysis import Facts, call_name, iter_nodes, literal_value
from perflint.names import dotted
from perflint.rules.common import is_setting_line, words


def first_torch_import(facts: Facts) -> cst.CSTNode | None:
    """The first `import torch…` / `from torch… import …` statement of the file."""
    best = None
    for node in (*facts.tree.index[cst.Import], *facts.tree.index[cst.ImportFrom]):
        hit = False
        if isinstance(node, cst.Import):
            hit = any((dotted(a.name) or "").split(".")[0] == "torch" for a in node.names)
        elif node.module is not None and not node.relative:
            hit = (dotted(node.module) or "").split(".")[0] == "torch"
        if hit and (best is None or facts.tree.order[node] < facts.tree.order[best]):
            best = node
    return best


def _importish(stmt: cst.CSTNode) -> bool:
    """An import line, or a `try`/`if` block of simple statements that imports something
    (`try: import wandb` / `except ImportError: wandb = None`, `if TYPE_CHECKING: ...`)."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
    blocks: list[cst.BaseSuite] = []
    if isinstance(stmt, (cst.Try, cst.TryStar)):
        blocks = [stmt.body, *(h.body for h in stmt.handlers)]
        blocks += [x.body for x in (stmt.orelse, stmt.finalbody) if x is not None]
    elif isinstance(stmt, cst.If):
        blocks = [stmt.body]
        orelse = stmt.orelse
        while orelse is not None:
            blocks.append(orelse.body)
            orelse = orelse.orelse if isinstance(orelse, cst.If) else None
    else:
        return False
    stmts = [s for b in blocks for s in (b.body if isinstance(b, cst.IndentedBlock) else [b])]
    if not all(isinstance(s, cst.SimpleStatementLine) for s in stmts):
        return False
    first = blocks[0].body if isinstance(blocks[0], cst.IndentedBlock) else [blocks[0]]
    if isinstance(stmt, cst.If):
        # Only imports in every branch (`if TYPE_CHECKING:`), never `if __name__ == "__main__":`
        # with a call that runs the script.
        return all(_importish(s) or all(isinstance(x, cst.Pass) for x in s.body) for s in stmts)
    # `try:` imports (and flags such as `HAS_X = True`), without calls that do work.
    return any(_importish(s) for s in first) and not any(
        isinstance(n, cst.Call) for s in first for n in iter_nodes(s)
    )


def _binds_torch_name(stmt: cst.CSTNode, tn: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                full = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    if full == "torch" and alias.asname.name.value == tn:
                        return True
                elif tn == "torch" and (full == "torch" or full.startswith("torch.")):
                    return True
    return False


def insert_setting(facts: Facts, code_line: str, tn: str) -> dict | None:
    """A replacement that adds the settings line `code_line` once, where a person would
    write it: after the file's imports (module docstring, `from __future__`, setup code
    between imports and `try`/`except` imports included), set off by a blank line, before
    the first function, class or loop; next to settings lines already there. None when no
    top-level import binds the torch name `tn`."""
    body = list(facts.module.body)
    last = None
    torch_bound = False
    for i, stmt in enumerate(body):
        if _importish(stmt):
            last = i
            torch_bound = torch_bound or _binds_torch_name(stmt, tn)
        elif isinstance(stmt, cst.BaseCompoundStatement) and torch_bound:
            break
    if last is None or not torch_bound:
        return None
    grouped = False
    while last + 1 < len(body) and is_setting_line(facts, body[last + 1]):
        last += 1
        grouped = True
    anchor = body[last]
    new = cst.parse_statement(code_line + "\n")
    if not grouped:
        new = new.with_changes(leading_lines=[cst.EmptyLine()])
    return {anchor: cst.FlattenSentinel([anchor, new])}


def settings_near(facts: Facts) -> tuple[set[str], bool]:
    """(the settings the project modules around this file make — "tf32",
    "cudnn_benchmark", "deterministic", "amp", "scaler" — whether another project module
    imports this file).  A file-wide setting made by the entry point or a base class's
    module covers this file; a file others import is a library module, not the place for one."""
    if facts.project is None:
        return set(), False
    got = facts.project.settings_near()
    return set(got.get("settings", ())), bool(got.get("imported"))


FRAMEWORK_ROOTS = {
    "accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed",
    "colossalai", "composer",
}
# apex's mixed-precision parts (its LARC, SyncBatchNorm, fused optimizers are not).
_APEX_PRECISION = ("apex.amp", "apex.fp16_utils")


def uses_training_framework(facts: Facts) -> bool:
    """Accelerate, Lightning, DeepSpeed, apex's amp … or the transformers Trainer: precision
    and loss scaling may then be configured outside this file."""
    for full in facts.tree.imports.aliases.values():
        root = full.split(".", 1)[0]
        if root in FRAMEWORK_ROOTS:
            return True
        if full.startswith(_APEX_PRECISION):
            return True
        if full == "apex" and any((facts.tree.qualname(c.func) or "").startswith(_APEX_PRECISION) for c in facts.tree.calls()):
            return True  # `import apex` … `apex.amp.initialize(...)`
        if root == "transformers" and full.rsplit(".", 1)[-1] in ("Trainer", "TrainingArguments", "Seq2SeqTrainer", "Seq2SeqTrainingArguments"):
            return True
    return False


def layer_qualnames(facts: Facts) -> set[str]:
    """Qualified names of every torch API called in the file (cached through `words`)."""
    w = words(facts)
    got = getattr(w, "_called", None)
    if got is None:
        got = {q for c in facts.tree.calls() if (q := facts.tree.qualname(c.func))
               and not (q.endswith("Loss") and _loss_never_called(facts, c))}
        got |= facts.kinds.calls.project_layer_apis  # layers built by the project's model classes used here
        w._called = got  # type: ignore[attr-defined]
    return got


CONV_APIS = {
    "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d", "torch.nn.ConvTranspose1d",
    "torch.nn.ConvTranspose2d", "torch.nn.ConvTranspose3d", "torch.nn.LazyConv1d", "torch.nn.LazyConv2d",
    "torch.nn.LazyConv3d", "torch.nn.LazyConvTranspose1d", "torch.nn.LazyConvTranspose2d",
    "torch.nn.LazyConvTranspose3d", "torch.nn.functional.conv1d", "torch.nn.functional.conv2d",
    "torch.nn.functional.conv3d", "torch.nn.functional.conv_transpose1d",
    "torch.nn.functional.conv_transpose2d", "torch.nn.functional.conv_transpose3d",
    "torch.conv1d", "torch.conv2d", "torch.conv3d",
}
_CONV2D_APIS = {
    "torch.nn.Conv2d", "torch.nn.ConvTranspose2d", "torch.nn.LazyConv2d", "torch.nn.LazyConvTranspose2d",
    "torch.nn.functional.conv2d", "torch.nn.functional.conv_transpose2d", "torch.conv2d",
}
TORCHVISION_CLASSIFIER = re.compile(r"^torchvision\.models\.(?!detection\.|optical_flow\.|video\.|segmentation\.|quantization\.)[a-z]\w*$")


def has_conv_layers(facts: Facts, two_d: bool = False) -> bool:
    called = layer_qualnames(facts)
    if called & (_CONV2D_APIS if two_d else CONV_APIS):
        return True
    return any(TORCHVISION_CLASSIFIER.match(q) for q in called)


_LOW_PRECISION_DTYPES = {"torch.float16", "torch.half", "torch.bfloat16"}


def casts_to_low_precision(facts: Facts) -> bool:
    """`.half()`, `.bfloat16()`, any `torch.float16/bfloat16` reference or a default dtype."""
    for call in facts.tree.calls():
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("half", "bfloat16"):
            return True
        if (facts.tree.qualname(call.func) or "") == "torch.set_default_dtype":
            return True
    for a in facts.tree.index[cst.Attribute]:
        if (facts.tree.qualname(a) or "") in _LOW_PRECISION_DTYPES:
            return True
    return False


# Whole words that name a mixed-precision setup. `amp` only standing alone or as the switch
# of a phrase (`use_amp`, `args.amp`, `--no-amp`, `amp_dtype`): `fact_amp` or `max_amp` is
# an amplitude.
# A framework precision setting written as a value (`precision: "bf16-mixed"` in a config
# dataclass, `--precision 16-mixed`).
FRAMEWORK_PRECISION = re.compile(r"^(bf16|16|fp16)-(mixed|true)$")


_VARIABLE_SHAPE_WORDS = (
    "pad_sequence", "pack_padded_sequence", "pack_sequence", "pad_packed_sequence", "packedsequence",
    "randomresize", "randomshortestsize", "scalejitter", "randomioucrop", "randomzoomout", "bucket",
    # per-batch sequence lengths: audio/text models crop or pad to each batch's own length
    "input_lengths", "mel_input_length", "mel_lengths", "length_to_mask", "sequence_mask", "lengths_to_mask",
)
_RANDOM_CALLS = {"randint", "randrange", "uniform", "choice", "integers", "rand", "random", "randn"}


def variable_input_shapes(facts: Facts) -> bool:
    w = words(facts)
    if w.name_contains(*_VARIABLE_SHAPE_WORDS):
        return True
    if any(v.startswith("torchvision.models.detection") for v in facts.tree.imports.aliases.values()):
        return True
    if _opacus_poisson_batches(facts):
        return True
    for call in facts.tree.calls():
        for a in call.args:
            if a.keyword is not None and a.keyword.value in ("collate_fn", "batch_sampler") and literal_value(a.value) is not None:
                return True
        name = (call_name(call) or "").lower()
        if "crop" in name or "resize" in name or "interpolate" in name:
            for a in call.args:
                for n in iter_nodes(a.value):
                    if isinstance(n, cst.Call) and call_name(n) in _RANDOM_CALLS:
                        return True
    return False


def _loss_never_called(facts: Facts, call: cst.Call) -> bool:
    """`self.bce_loss = nn.BCELoss()` that neither this file nor another module of the
    project reads (`.bce_loss`): a loss built and never called."""
    if not facts.tree.unread_self_attribute(call):
        return False
    attr = facts.tree.parent(call).targets[0].target.attr.value  # type: ignore[union-attr]
    return facts.project is None or not facts.project.attribute_read_elsewhere(attr)


_OPACUS_SAMPLING = {"make_private", "make_private_with_epsilon", "DPDataLoader", "BatchMemoryManager"}


def _opacus_poisson_batches(facts: Facts) -> bool:
    """Opacus's differentially private training draws each batch by Poisson sampling (the
    default of `PrivacyEngine.make_private`, and `DPDataLoader`), so the batch size changes
    every step, as do the physical batches `BatchMemoryManager` splits them into; only
    `poisson_sampling=False` keeps it fixed."""
    if not any(v.split(".", 1)[0] == "opacus" for v in facts.tree.imports.aliases.values()):
        return False
    calls = [c for c in facts.tree.calls() if call_name(c) in _OPACUS_SAMPLING]
    fixed = any(a.keyword is not None and a.keyword.value == "poisson_sampling" and literal_value(a.value) is False
                for c in calls for a in c.args)
    return bool(calls) and (not fixed or any(call_name(c) == "BatchMemoryManager" for c in calls))


def _shards_with_fsdp(facts: Facts) -> bool:
    """The file wraps a model in FSDP's `FullyShardedDataParallel` (asked once per file: a
    message per finding names the scaler)."""
    got = facts.__dict__.get("_shards_with_fsdp")
    if got is None:
        got = facts.__dict__["_shards_with_fsdp"] = any(
            (q := facts.tree.qualname(c.func) or "").startswith("torch.distributed.fsdp.")
            and q.endswith(".FullyShardedDataParallel") for c in facts.tree.calls())
    return got


def grad_scaler_name(facts: Facts) -> str:
    """The GradScaler to name for the target torch: `torch.amp.GradScaler` exists from 2.3;
    before it, `torch.cuda.amp.GradScaler` (from 1.6). A file that shards its model with
    FSDP's `FullyShardedDataParallel` needs the shard-aware `ShardedGradScaler` (from 1.12)."""
    if facts.target_torch >= (1, 12) and _shards_with_fsdp(facts):
        return "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler"
    return "torch.amp.GradScaler" if facts.target_torch >= (2, 3) else "torch.cuda.amp.GradScaler"
