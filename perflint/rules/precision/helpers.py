"""PF4 — precision, kernels and tensors."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from perflint.diagnostics import Severity
from perflint.edits import add_arg, keywordize, make_kwarg, parse_expr, prepend_arg
from perflint.analysis import NOT_LITERAL, Binding, Facts, call_name, get_arg, has_splat, iter_nodes, literal_value
from perflint.names import dotted
from perflint.rules import register
from perflint.rules.base import FixPlan, Rule, Violation

_DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": ("cuda", "autocast"),
    "torch.cuda.amp.GradScaler": ("cuda", "GradScaler"),
    "torch.cuda.amp.custom_fwd": ("cuda", "custom_fwd"),
    "torch.cuda.amp.custom_bwd": ("cuda", "custom_bwd"),
    "torch.cpu.amp.autocast": ("cpu", "autocast"),
    "torch.cpu.amp.GradScaler": ("cpu", "GradScaler"),
}
_OLD_AUTOCAST_POSITIONALS = ["enabled", "dtype", "cache_enabled"]


@register
class DeprecatedAmpApi(Rule):
    """
    ## What it does
    Flags the deprecated device-specific AMP APIs — `torch.cuda.amp.autocast`,
    `torch.cuda.amp.GradScaler`, `torch.cuda.amp.custom_fwd`/`custom_bwd`,
    `torch.cpu.amp.autocast` and `torch.cpu.amp.GradScaler` — whether used through the
    attribute chain, a module alias, or `from torch.cuda.amp import …`.

    ## Why is this bad?
    They are deprecated and emit a `FutureWarning` on every construction since torch 2.4
    (for example "`torch.cuda.amp.autocast(args...)` is deprecated. Please use
    `torch.amp.autocast('cuda', args...)` instead."). This is a maintenance rule, not a
    speed rule: the new APIs run the same kernels.

    ## Example
    ```python
    from torch.cuda.amp import GradScaler, autocast
    scaler = GradScaler()
    with autocast(enabled=use_amp):
        loss = model(x)
    ```

    ## Use instead
    ```python
    from torch.amp import GradScaler, autocast
    scaler = GradScaler("cuda")
    with autocast("cuda", enabled=use_amp):
        loss = model(x)
    ```

    ## Fix safety
    **Safe.** The device type is prepended and, for `autocast`, every positional argument
    becomes a keyword: the old signature is `(enabled, dtype, cache_enabled)` and the new one
    `(device_type, dtype, enabled, cache_enabled)`, so keeping them positional would pass
    `enabled` as `dtype` (verified: `TypeError` on `__enter__`). `GradScaler`'s positionals
    stay valid after the prepended device. `custom_fwd`/`custom_bwd` get the required
    `device_type="cuda"`. When the file calls `torch.set_autocast_dtype`, the old implicit
    dtype is written out (`dtype=torch.float16` for CUDA, `torch.bfloat16` for CPU).
    No fix for calls with `*args`/`**kwargs`, for non-call uses of the names (passing the
    class around, `isinstance`), or when a module alias is used and no `torch` name is
    imported.

    ## Applies to
    Target torch ≥ 2.4, where the old APIs warn (`torch.amp.GradScaler` exists since 2.3,
    `torch.amp.custom_fwd(device_type=…)` since 2.4). In a file that keeps torch 1.x code
    paths (`torch.__version__` switches, `torch._six` imports) the finding comes without a
    rewrite: with no declared bound the 2.4 default is a guess, and the new API would break
    the versions the code still supports.

    ## References
    - `torch/cuda/amp/autocast_mode.py`, `torch/cuda/amp/grad_scaler.py` (2.13)
    - PyTorch AMP documentation, `torch.amp`
    """

    code = "PF402"
    name = "deprecated-amp-api"
    summary = "deprecated torch.cuda.amp / torch.cpu.amp API"
    fix_class = "safe"
    min_torch = (2, 4)
    tokens = (b"amp",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if supports_old_torch(facts):
            # The code keeps working on torch 1.x (`torch._six`, `torch.__version__` checks):
            # `torch.amp.GradScaler("cuda")` (2.3) and `custom_fwd(device_type=…)` (2.4) would
            # break it there, so report without a rewrite.
            for v in self._violations(facts):
                yield Violation(v.node, v.message, None)
            return
        yield from self._violations(facts)

    def _violations(self, facts: Facts) -> Iterator[Violation]:
        torch_names = facts.imports.local_names_for("torch")
        torch_name = "torch" if "torch" in torch_names else (torch_names[0] if torch_names else None)
        explicit_dtype = any(
            (facts.qualname(c.func) or "") == "torch.set_autocast_dtype" for c in facts.calls()
        )
        # Uses through `from torch.cuda.amp import X [as Y]`, grouped by import statement.
        from_imports: dict[str, cst.ImportFrom] = {}
        for imp in facts.index[cst.ImportFrom]:
            module = dotted(imp.module) if imp.module is not None else None
            if module in ("torch.cuda.amp", "torch.cpu.amp") and not isinstance(imp.names, cst.ImportStar):
                for alias in imp.names:
                    local = alias.asname.name.value if alias.asname else alias.name.value  # type: ignore[union-attr]
                    from_imports[local] = imp
        groups: dict[cst.ImportFrom, list[tuple[cst.CSTNode, str, object]]] = {}
        singles: list[tuple[cst.CSTNode, str, object]] = []
        for ref in self._references(facts):
            q = facts.qualname(ref)
            use = self._use_site(facts, ref)
            if isinstance(ref, cst.Name) and ref.value in from_imports:
                groups.setdefault(from_imports[ref.value], []).append((ref, q, use))
            else:
                singles.append((ref, q, use))
        for ref, q, use in singles:
            device, api = _DEPRECATED_AMP[q]
            replacement = None
            root = ref
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name) and facts.imports.aliases.get(root.value) == "torch":
                prefix = root.value
            else:
                prefix = torch_name
            if prefix is not None:
                replacement = self._rewrite(use, parse_expr(f"{prefix}.amp.{api}"), device, api, explicit_dtype)
            fix = self.safe(f"Use `torch.amp.{api}(\"{device}\", …)`", replacement) if replacement else None
            yield Violation(ref, self._message(device, api), fix)
        for imp, uses in groups.items():
            replacements: dict = {}
            ok = not isinstance(imp.names, cst.ImportStar)
            for ref, q, use in uses:
                device, api = _DEPRECATED_AMP[q]
                r = self._rewrite(use, ref, device, api, explicit_dtype)
                if r is None:
                    ok = False
                    break
                replacements.update(r)
            if ok:
                module = imp.module
                new_module = cst.Attribute(value=cst.Name("torch"), attr=cst.Name("amp"))
                if module is not None and dotted(module) in ("torch.cuda.amp", "torch.cpu.amp"):
                    replacements[imp] = imp.with_changes(module=new_module)
                else:
                    ok = False
            fix = self.safe("Import from `torch.amp` and pass the device type", replacements) if ok else None
            names = ", ".join(
                a.name.value for a in imp.names if isinstance(a.name, cst.Name)  # type: ignore[union-attr]
            )
            yield Violation(
                imp,
                f"`from {dotted(imp.module)} import {names}` imports deprecated AMP APIs; import them from `torch.amp`",
                fix,
            )
            for ref, q, _ in uses:
                device, api = _DEPRECATED_AMP[q]
                yield Violation(ref, self._message(device, api), fix)

    @staticmethod
    def _message(device: str, api: str) -> str:
        if api in ("autocast", "GradScaler"):
            return (
                f"`torch.{device}.amp.{api}` is deprecated since torch 2.4; use "
                f"`torch.amp.{api}(\"{device}\", …)`"
            )
        return f"`torch.{device}.amp.{api}` is deprecated since torch 2.4; use `torch.amp.{api}(device_type=\"{device}\")`"

    def _references(self, facts: Facts) -> list[cst.CSTNode]:
        refs = []
        for node in facts.index[cst.Attribute]:
            parent = facts.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                continue
            q = facts.qualname(node)
            if q in _DEPRECATED_AMP:
                refs.append(node)
        # Bare names from `from torch.cuda.amp import autocast`.
        names = {local for local, full in facts.imports.aliases.items() if full in _DEPRECATED_AMP}
        if names:
            seen = set()
            for call in facts.calls():
                if isinstance(call.func, cst.Name) and call.func.value in names:
                    refs.append(call.func)
                    seen.add(call.func)
            for dec in facts.index[cst.Decorator]:
                if isinstance(dec.decorator, cst.Name) and dec.decorator.value in names and dec.decorator not in seen:
                    refs.append(dec.decorator)
            # Other loads of the name (passed as a value): reported without a fix.
            for node in _names_in(facts, names):
                if node not in seen and all(node is not r for r in refs):
                    parent = facts.parent(node)
                    if isinstance(parent, (cst.ImportAlias, cst.AsName)):
                        continue
                    refs.append(node)
        return refs

    @staticmethod
    def _use_site(facts: Facts, ref: cst.CSTNode):
        parent = facts.parent(ref)
        if isinstance(parent, cst.Call) and parent.func is ref:
            return parent
        if isinstance(parent, cst.Decorator) and parent.decorator is ref:
            return parent
        return None

    def _rewrite(self, use, new_func: cst.BaseExpression, device: str, api: str, explicit_dtype: bool) -> dict | None:
        dev = cst.SimpleString(f'"{device}"')
        if isinstance(use, cst.Call):
            if has_splat(use):
                return None
            if api == "autocast":
                call = keywordize(use, _OLD_AUTOCAST_POSITIONALS)
                if call is None:
                    return None
                if explicit_dtype and not any(a.keyword is not None and a.keyword.value == "dtype" for a in call.args):
                    call = add_arg(call, make_kwarg("dtype", "torch.float16" if device == "cuda" else "torch.bfloat16"))
                call = prepend_arg(call, dev)
            elif api == "GradScaler":
                call = prepend_arg(use, dev)
            else:  # custom_fwd / custom_bwd
                kw = make_kwarg("device_type", dev)
                positional = [a for a in use.args if a.keyword is None]
                call = add_arg(use, kw) if positional else prepend_arg(use, dev, keyword="device_type")
            return {use: call.with_changes(func=new_func)}
        if isinstance(use, cst.Decorator) and api in ("custom_fwd", "custom_bwd"):
            # Bare `@custom_fwd` becomes `@torch.amp.custom_fwd(device_type="cuda")`.
            new_dec = cst.Call(func=new_func, args=[make_kwarg("device_type", dev)])
            return {use: use.with_changes(decorator=new_dec)}
        return None


def supports_old_torch(facts: Facts) -> bool:
    """The file keeps code paths for torch 1.x: it reads `torch.__version__` (a version
    switch) or imports from `torch._six` (removed in 2.0, kept behind a `try`).  A fix must
    then work on those versions too."""
    for node in facts.index[cst.Attribute]:
        q = facts.qualname(node) or ""
        if q in ("torch.__version__", "torch.version.__version__") or q.startswith("torch._six"):
            return True
    return any(full.startswith("torch._six") for full in facts.imports.aliases.values())


def _names_in(facts: Facts, names: set[str]) -> Iterator[cst.Name]:
    # Names are not indexed by the walk; scan the few statements that mention them.
    for node in facts.index[cst.Call]:
        for arg in node.args:
            if isinstance(arg.value, cst.Name) and arg.value.value in names:
                yield arg.value
    for node in facts.index[cst.Assign]:
        if isinstance(node.value, cst.Name) and node.value.value in names:
            yield node.value


# ----------------------------------------------------------------------------------------
# Shared helpers for PF401–PF409 and PF5 (candidates for `perflint.analysis`)
# ----------------------------------------------------------------------------------------

def words(facts: Facts):
    return facts.words


def torch_module_name(facts: Facts, top_level: bool = False) -> str | None:
    """The local name the `torch` module is bound to (`torch`, or an alias such as `th`)."""
    names = facts.imports.local_names_for("torch")
    if top_level:
        bound = set()
        for stmt in facts.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            full = dotted(alias.name) or ""
                            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                                if full == "torch":
                                    bound.add(alias.asname.name.value)
                            elif full == "torch" or full.startswith("torch."):
                                bound.add("torch")
        names = [n for n in names if n in bound]
    if "torch" in names:
        return "torch"
    return sorted(names)[0] if names else None


def first_torch_import(facts: Facts) -> cst.CSTNode | None:
    """The first `import torch…` / `from torch… import …` statement of the file."""
    best = None
    for node in (*facts.index[cst.Import], *facts.index[cst.ImportFrom]):
        hit = False
        if isinstance(node, cst.Import):
            hit = any((dotted(a.name) or "").split(".")[0] == "torch" for a in node.names)
        elif node.module is not None and not node.relative:
            hit = (dotted(node.module) or "").split(".")[0] == "torch"
        if hit and (best is None or facts.order[node] < facts.order[best]):
            best = node
    return best


def _is_setting_line(facts: Facts, stmt: cst.CSTNode) -> bool:
    """`torch.backends.… = …` or `torch.set_float32_matmul_precision(…)` on its own line."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        q = facts.qualname(small.targets[0].target) or ""
        return q.startswith("torch.backends.")
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return (facts.qualname(small.value.func) or "") == "torch.set_float32_matmul_precision"
    return False


def insert_after_imports(facts: Facts, code_line: str, after_settings: bool = True) -> dict | None:
    """A replacement that adds `code_line` once, after the last top-level import (and, with
    `after_settings`, after any settings lines that directly follow it, so inserted settings
    stay together)."""
    body = list(facts.module.body)
    last = None
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
        ):
            last = i
    if last is None:
        return None
    while after_settings and last + 1 < len(body) and _is_setting_line(facts, body[last + 1]):
        last += 1
    anchor = body[last]
    new = cst.parse_statement(code_line + "\n")
    return {anchor: cst.FlattenSentinel([anchor, new])}


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
    while last + 1 < len(body) and _is_setting_line(facts, body[last + 1]):
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


def optimizes_inputs_only(facts: Facts) -> bool:
    """Every optimizer the file builds updates free tensors (`Adam([latent] + noises)`: GAN
    inversion, adversarial inputs, style transfer), none a module's `.parameters()`: the
    loop with `backward()`/`step()` trains no model."""
    ctors = [c for c in facts.calls() if (facts.qualname(c.func) or "").startswith("torch.optim.")
             and (facts.qualname(c.func) or "").count(".") == 2 and call_name(c)[:1].isupper()]
    if not ctors:
        return False
    for c in ctors:
        params = get_arg(c, "params", 0)
        if params is None:
            return False
        value = params.value
        if isinstance(value, cst.Name):
            bs = facts.lookup(value.value, value)
            value = bs[0].node if len(bs) == 1 and bs[0].how == "expr" else value
        nodes = list(iter_nodes(value))
        if not isinstance(nodes[0], (cst.List, cst.BinaryOperation, cst.Tuple)):
            return False
        if any(isinstance(n, cst.Call) for n in nodes) or any(isinstance(n, (cst.Dict, cst.Attribute)) for n in nodes):
            return False  # `.parameters()`, param groups, `model.weight`: may be a module's weights
    return True


def is_training_file(facts: Facts) -> bool:
    """A file that trains: a training loop that updates weights (not a profiling helper that
    times `.backward()` in a loop), or a per-step training function of its own."""
    if optimizes_inputs_only(facts):
        return False  # GAN inversion and the like: the optimizer updates inputs, not a model
    if any(updates_weights(facts, loop, wrapping=True) for loop in facts.training_loops()):
        return True
    # A helper called once per step from another file's loop is per-step code, but its file
    # is not a training file: file-wide settings belong in the file that trains.
    return any(facts.step_function_kind(fn) == "train" and fn not in facts.step_callers
               for fn in facts.index[cst.FunctionDef])


def updates_weights(facts: Facts, step: cst.CSTNode, wrapping: bool = False) -> bool:
    """An optimizer step in the iteration, or an optimizer built in the file: a training step,
    not a saliency map, an adversarial attack that only needs input gradients, or a timing
    helper.  With `wrapping`, a `DistributedOptimizer` counts too (its model may run in
    another process: enough for a file-wide setting, not for rewriting the step)."""
    if any(facts.is_optimizer_step(c) for c in facts.calls_within(step)):
        return True
    if wrapping:
        # For a file-wide setting: the loop calls some `.step()` (a remote optimizer's,
        # `opt_rref.rpc_sync().step()`), the file steps an optimizer somewhere (a helper it
        # calls), or drives a DistributedOptimizer; an optimizer it only builds and returns
        # (a utility module's factory) does not make it a file that trains.
        if any(call_name(c) == "step" for c in facts.calls_within(step)):
            return True
        return any(facts.is_optimizer_step(c) or facts.qualname(c.func) in _WRAPPING_OPTIMIZERS
                   for c in facts.calls())
    return any(
        (facts.qualname(c.func) or "").startswith("torch.optim.") and "optimizer" in facts.kinds(c)
        for c in facts.calls()
    )


# Optimizers that take an optimizer class rather than being one (`DistributedOptimizer(optim.SGD, ...)`).
_WRAPPING_OPTIMIZERS = {"torch.distributed.optim.DistributedOptimizer", "torch.distributed.optim.ZeroRedundancyOptimizer"}


_FRAMEWORK_ROOTS = {
    "accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed",
    "colossalai", "composer",
}
# apex's mixed-precision parts (its LARC, SyncBatchNorm, fused optimizers are not).
_APEX_PRECISION = ("apex.amp", "apex.fp16_utils")


def uses_training_framework(facts: Facts) -> bool:
    """Accelerate, Lightning, DeepSpeed, apex's amp … or the transformers Trainer: precision
    and loss scaling may then be configured outside this file."""
    for full in facts.imports.aliases.values():
        root = full.split(".", 1)[0]
        if root in _FRAMEWORK_ROOTS:
            return True
        if full.startswith(_APEX_PRECISION):
            return True
        if full == "apex" and any((facts.qualname(c.func) or "").startswith(_APEX_PRECISION) for c in facts.calls()):
            return True  # `import apex` … `apex.amp.initialize(...)`
        if root == "transformers" and full.rsplit(".", 1)[-1] in ("Trainer", "TrainingArguments", "Seq2SeqTrainer", "Seq2SeqTrainingArguments"):
            return True
    return False


def _precision_framework(facts: Facts) -> bool:
    """Accelerate, Lightning, DeepSpeed, ColossalAI, Composer or the transformers Trainer:
    they set the model's precision themselves (bf16 parameters, mixed precision), so fp32
    matmuls are not the default there.  apex is not counted: its amp is optional."""
    for full in facts.imports.aliases.values():
        root = full.split(".", 1)[0]
        if root in _FRAMEWORK_ROOTS:
            return True
        if root == "transformers" and full.rsplit(".", 1)[-1] in ("Trainer", "TrainingArguments", "Seq2SeqTrainer",
                                                                "Seq2SeqTrainingArguments"):
            return True
    return False


def layer_qualnames(facts: Facts) -> set[str]:
    """Qualified names of every torch API called in the file (cached through `words`)."""
    w = words(facts)
    got = getattr(w, "_called", None)
    if got is None:
        got = {q for q in (facts.qualname(c.func) for c in facts.calls()) if q}
        got |= facts.project_layer_apis  # layers built by the project's model classes used here
        w._called = got  # type: ignore[attr-defined]
    return got


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
_CONV_APIS = {
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
_TORCHVISION_CLASSIFIER = re.compile(r"^torchvision\.models\.(?!detection\.|optical_flow\.|video\.|segmentation\.|quantization\.)[a-z]\w*$")


def has_matmul_work(facts: Facts) -> bool:
    called = layer_qualnames(facts)
    if called & _MATMUL_APIS or words(facts).matmul_operator:
        return True
    return any(
        _TORCHVISION_CLASSIFIER.match(q) or q == "timm.create_model" or q == "torch.hub.load"
        or (q.startswith("transformers.") and q.endswith(".from_pretrained"))
        for q in called
    )


def has_conv_layers(facts: Facts, two_d: bool = False) -> bool:
    called = layer_qualnames(facts)
    if called & (_CONV2D_APIS if two_d else _CONV_APIS):
        return True
    return any(_TORCHVISION_CLASSIFIER.match(q) for q in called)


_LOW_PRECISION_DTYPES = {"torch.float16", "torch.half", "torch.bfloat16"}


def casts_to_low_precision(facts: Facts) -> bool:
    """`.half()`, `.bfloat16()`, any `torch.float16/bfloat16` reference or a default dtype."""
    for call in facts.calls():
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("half", "bfloat16"):
            return True
        if (facts.qualname(call.func) or "") == "torch.set_default_dtype":
            return True
    for a in facts.index[cst.Attribute]:
        if (facts.qualname(a) or "") in _LOW_PRECISION_DTYPES:
            return True
    return False


def enclosing_block(facts: Facts, node: cst.CSTNode) -> tuple[cst.CSTNode, int] | None:
    """(the IndentedBlock or Module whose body holds `node`'s statement, its index)."""
    return facts.block_of(node)


def is_model_call(facts: Facts, call: cst.Call) -> bool:
    if isinstance(call.func, cst.Name) and call.func.value == "self":
        return False
    ks = facts.kinds(call.func)
    return bool(ks & {"model", "~model"}) and not (ks & {"criterion", "~criterion", "optimizer", "dataloader"})


def _contains(facts: Facts, stmt: cst.CSTNode, pred) -> bool:
    for n in iter_nodes(stmt):
        if isinstance(n, cst.Call) and pred(n):
            return True
    return False


def wrap_in_with(stmts: list[cst.BaseStatement], item_code: str) -> cst.With:
    """`with <item_code>:` around `stmts`; the first statement's comments move above it."""
    first = stmts[0]
    lead = getattr(first, "leading_lines", ())
    inner = [first.with_changes(leading_lines=[])] + list(stmts[1:]) if lead else list(stmts)
    return cst.With(
        items=[cst.WithItem(item=parse_expr(item_code))],
        body=cst.IndentedBlock(body=inner),
        leading_lines=lead,
    )


# The script's own device (`--device`, `args.device`, `device = torch.device(...)`), for
# unsafe fixes that only make sense on CUDA (bf16 autocast, fused optimizers).

_CUDA = "cuda"  # the device is CUDA for sure: the fix may say "cuda" outright


def _device_like(facts: Facts, expr: cst.BaseExpression) -> bool:
    """An expression that names a device: a device literal or `torch.device(...)`, a name
    bound only to those, or a name/attribute spelled like a device (`device`, `args.device`,
    `self.dev`)."""
    if facts.kinds(expr) & {"tensor", "output", "batch", "loss", "model", "number", "int"}:
        return False
    if isinstance(expr, cst.Call):
        return facts.qualname(expr.func) == "torch.device" and bool(expr.args) and not has_splat(expr)
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if not isinstance(expr, (cst.Name, cst.Attribute)) or dotted(expr) is None:
        return False
    if isinstance(expr, cst.Attribute) and facts.kinds(expr.value) & {"tensor", "output", "batch", "loss"}:
        return False  # `x.device` of a tensor made in the step
    if facts.is_device_expr(expr):
        return True
    last = (expr.value if isinstance(expr, cst.Name) else expr.attr.value).lower()
    return last == "dev" or "device" in last


def _device_args(facts: Facts, call: cst.Call) -> list[object]:
    """What a call says about the device: `.cuda()` → _CUDA; `.to(D)` / `device=D` → D."""
    out: list[object] = []
    name = call_name(call)
    if name == "cuda" and isinstance(call.func, cst.Attribute) and facts.qualname(call.func) is None:
        out.append(_CUDA)
    elif name == "to" and isinstance(call.func, cst.Attribute) and not has_splat(call):
        dev = get_arg(call, "device", 0)
        if dev is not None and _device_like(facts, dev.value):
            out.append(dev.value)
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "device" and name != "to" and _device_like(facts, a.value):
            out.append(a.value)
    return out


def _read_names(expr: cst.BaseExpression) -> list[cst.Name]:
    """The names an expression reads (not attribute names or keywords)."""
    skip = set()
    for n in iter_nodes(expr):
        if isinstance(n, cst.Attribute):
            skip.add(id(n.attr))
        elif isinstance(n, cst.Arg) and n.keyword is not None:
            skip.add(id(n.keyword))
    return [n for n in iter_nodes(expr) if isinstance(n, cst.Name) and id(n) not in skip]


def _names_reach(facts: Facts, expr: cst.BaseExpression, at: cst.CSTNode, used_at: cst.CSTNode) -> bool:
    """Every name `expr` reads is bound where `at` runs: in `at`'s scope before it, or in an
    enclosing scope (a parameter, or a module name bound before `at`, or one that `used_at`,
    a read in `at`'s own scope, already relies on)."""
    scope = facts.scope_of(at)
    for n in _read_names(expr):
        if n.value in facts.imports.aliases:
            continue  # an imported module (`torch`)
        bs = facts.lookup(n.value, at)
        if not bs:
            return False
        if any(b.how == "param" or facts._reaches(b, at) for b in bs):  # type: ignore[attr-defined]
            continue
        outer = all(b.site is not None and facts.scope_of(b.site) is not scope for b in bs)
        if outer and facts.scope_of(used_at) is scope and facts.lookup(n.value, used_at) == bs:
            continue  # a global the step itself reads when it runs
        return False
    return True


def _device_type_test(facts: Facts, expr: cst.BaseExpression, tn: str) -> str:
    """Source of a test that the device `expr` is CUDA, right for a string or a torch.device."""
    text = cst.Module(body=[]).code_for_node(expr)
    if isinstance(expr, cst.Call):
        return f'{text}.type == "cuda"'
    bindings: list[Binding] = []
    if isinstance(expr, cst.Name):
        bindings = facts.lookup(expr.value, expr)
    elif isinstance(expr, cst.Attribute):
        bindings = facts.self_attr_bindings(expr)
    values = [b.node for b in bindings if b.how == "expr"]
    if bindings and len(values) == len(bindings):
        if all(isinstance(v, cst.Call) and facts.qualname(v.func) == "torch.device" for v in values):
            return f'{text}.type == "cuda"'
        strings: list[object] = []
        for v in values:
            parts = [v.body, v.orelse] if isinstance(v, cst.IfExp) else [v]
            strings.extend(literal_value(p) for p in parts)
        if all(s in ("cuda", "cpu") for s in strings):
            return f'{text} == "cuda"'
    return f'{tn}.device({text}).type == "cuda"'


def script_device_test(facts: Facts, at: cst.CSTNode, region: cst.CSTNode | None = None,
                       models_only: bool = False) -> str | None:
    """See `script_device`; only the test."""
    return script_device(facts, at, region, models_only)[0]


def script_device(facts: Facts, at: cst.CSTNode, region: cst.CSTNode | None = None,
                  models_only: bool = False) -> tuple[str | None, cst.Call | None]:
    """How an unsafe CUDA-only fix at `at` should tell whether the script runs on CUDA.

    The device is the first one the training step (`region`) moves data or the model to,
    else the first one a model is moved to in the file (same scope as `at` first). Returns
    None when that device is CUDA for sure (`.cuda()`, `"cuda"`, `torch.device("cuda")`) or
    when no device expression reaches `at` (the fix then says "cuda", as before); else the
    source of a test such as `device.type == "cuda"`. With it, the call that moves data or
    the model to that device.
    """
    tn = torch_module_name(facts)
    if tn is None:
        return None, None
    found: list[tuple[object, cst.Call]] = []
    if region is not None:
        for call in facts.calls_within(region):
            if models_only and not facts.has_kind(call, "model"):
                continue
            found.extend((d, call) for d in _device_args(facts, call))
    if not found:
        scope = facts.scope_of(at)
        moves = []
        for call in facts.calls():
            if call_name(call) in ("to", "cuda") and (facts.has_kind(call, "model") or facts.has_kind(
                    call.func.value if isinstance(call.func, cst.Attribute) else None, "model")):
                moves.extend((d, call) for d in _device_args(facts, call))
        moves.sort(key=lambda m: (facts.scope_of(m[1]) is not scope, facts.order[m[1]]))
        found = moves
    for dev, call in found:
        if dev is _CUDA:
            return None, call
        assert isinstance(dev, cst.BaseExpression)
        ks = facts.device_kinds(dev)
        if ks == {"device_cuda"}:
            return None, call
        if ks == {"device_cpu"} or (ks and ks <= {"device_cpu", "device_other"}):
            continue  # a CPU copy (logging, checkpoints), not the training device
        if not _names_reach(facts, dev, at, call):
            continue
        return _device_type_test(facts, dev, tn), call
    return None, None


# ----------------------------------------------------------------------------------------
# PF401 — relu-not-inplace
# ----------------------------------------------------------------------------------------

_NN = "torch.nn."
_F = "torch.nn.functional."
# Ops that return a new tensor and save only their *inputs* (never their output) for backward:
# an in-place ReLU on their output is safe (verified: linear, conv, conv→bn(train), layer_norm,
# gelu, dropout).
_PRODUCER_FUNCS = {
    _F + n for n in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                     "conv_transpose3d", "batch_norm", "layer_norm", "group_norm", "gelu")
} | {"torch.conv1d", "torch.conv2d", "torch.conv3d"}
_PRODUCER_MODULES = {
    _NN + n for n in ("Linear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
                      "ConvTranspose2d", "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d",
                      "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
                      "LazyBatchNorm3d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "GELU")
}
# Dropout returns its input itself in eval mode and for p=0 (verified), so it is transparent:
# what feeds it decides.
_TRANSPARENT_FUNCS = {_F + n for n in ("dropout", "dropout1d", "dropout2d", "dropout3d")}
_TRANSPARENT_MODULES = {_NN + n for n in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d")}
_RELU_FUNCS = {_F + "relu", "torch.relu"}


def _not_inplace(call: cst.Call, pos: int | None) -> bool:
    arg = get_arg(call, "inplace", pos)
    return arg is None or literal_value(arg.value) is False


def _is_store(facts: Facts, name: cst.Name) -> bool:
    """Whether a Name node is a binding target (not a read)."""
    child: cst.CSTNode = name
    parent = facts.parent(name)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        child, parent = parent, facts.parent(parent)
    if isinstance(parent, cst.AssignTarget) and parent.target is child:
        return True
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is child:
        return True
    if isinstance(parent, (cst.AnnAssign, cst.NamedExpr)) and parent.target is child:
        return True
    if isinstance(parent, cst.AsName):
        return True
    return False


def _is_variable_name(facts: Facts, name: cst.Name) -> bool:
    parent = facts.parent(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is name:
        return False
    if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias)):
        return False
    return True


def _other_reads(facts: Facts, binding: Binding, name: str, except_node: cst.CSTNode) -> bool:
    """Whether the value bound by `binding` is read anywhere but at `except_node`."""
    scope = facts.scope_of(except_node)
    for n in words(facts).name_nodes.get(name, ()):
        if n is except_node or not facts.is_inside(n, scope) or not _is_variable_name(facts, n):
            continue
        if _is_store(facts, n):
            continue
        if facts.scope_of(n) is not scope:
            return True  # read from a nested function or lambda: assume the worst
        if any(b is binding for b in facts.lookup(name, n)):
            return True
    return False


def _module_constructor(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> cst.Call | None:
    """The `nn.X(...)` call an expression is (or is bound to, by a single assignment)."""
    if depth > 4:
        return None
    if isinstance(expr, cst.Call):
        return expr
    bindings: list[Binding] = []
    if isinstance(expr, cst.Name):
        bindings = facts.lookup(expr.value, expr)
    elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        bindings = facts.self_attr_bindings(expr)
    if len(bindings) == 1 and bindings[0].how == "expr":
        return _module_constructor(facts, bindings[0].node, depth + 1)  # type: ignore[arg-type]
    return None


def _module_kind(facts: Facts, ctor: cst.Call | None, depth: int = 0) -> tuple[str, cst.Call | None] | None:
    """("producer", None) or ("transparent", None) for an allow-listed module constructor."""
    if ctor is None or depth > 4 or has_splat(ctor):
        return None
    q = facts.qualname(ctor.func) or ""
    if q in _PRODUCER_MODULES:
        return "producer", None
    if q in _TRANSPARENT_MODULES:
        return ("transparent", None) if _not_inplace(ctor, 1) else None
    if q == _NN + "Sequential":
        positional = [a for a in ctor.args if a.keyword is None]
        if positional:
            return _sequential_output_kind(facts, positional, len(positional), depth + 1)
    return None


def _sequential_output_kind(facts: Facts, args: list[cst.Arg], upto: int, depth: int) -> tuple[str, None] | None:
    """Whether the element before position `upto` of a Sequential yields a fresh tensor."""
    i = upto - 1
    while i >= 0:
        if args[i].star:
            return None
        kind = _module_kind(facts, _module_constructor(facts, args[i].value), depth)
        if kind is None:
            return None
        if kind[0] == "producer":
            return kind
        i -= 1  # transparent: the element before it decides
    return None


def fresh_activation(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether `expr` is a new tensor made by an allow-listed op that nothing else reads."""
    if depth > 6:
        return False
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].node, cst.Call):
            return False
        if bs[0].site is None or facts.scope_of(bs[0].site) is not facts.scope_of(expr):
            return False  # bound in an enclosing scope: its other readers are out of view
        if _other_reads(facts, bs[0], expr.value, expr):
            return False
        return fresh_activation(facts, bs[0].node, depth + 1)  # type: ignore[arg-type]
    if not isinstance(expr, cst.Call) or has_splat(expr):
        return False
    q = facts.qualname(expr.func)
    if q is not None:
        if q in _PRODUCER_FUNCS:
            return True
        if q in _TRANSPARENT_FUNCS:
            inner = get_arg(expr, "input", 0)
            return _not_inplace(expr, 3) and inner is not None and fresh_activation(facts, inner.value, depth + 1)
        return False
    if isinstance(expr.func, (cst.Name, cst.Attribute)):
        kind = _module_kind(facts, _module_constructor(facts, expr.func))
        if kind is None:
            return False
        if kind[0] == "producer":
            return True
        inner = get_arg(expr, "input", 0)
        return inner is not None and len(expr.args) == 1 and fresh_activation(facts, inner.value, depth + 1)
    return False


@register
class ReluNotInplace(Rule):
    """
    ## What it does
    Flags `F.relu(x)`, `torch.relu(x)` and `nn.ReLU()` whose input is a fresh activation that
    nothing else reads: the output of a convolution, linear layer, batch/layer/group norm or
    GELU (directly, or through dropout), as a module called in `forward` (`self.conv(x)`), a
    functional call, or the element before `nn.ReLU()` in `nn.Sequential(...)`. The input
    value must have no other read, and an `nn.ReLU` module must be called exactly once.

    ## Why is this bad?
    An out-of-place ReLU allocates a second activation-sized tensor. The gain of
    `inplace=True` is that one transient buffer — memory, not speed: the PyTorch autograd
    notes say "there are very few occasions when in-place operations actually lower memory
    usage by any significant amount". Not measured yet; expect a negligible change in step
    time. The rule is off by default for that reason.

    ## Example
    ```python
    def forward(self, x):
        x = self.bn(self.conv(x))
        return F.relu(x)
    ```

    ## Use instead
    ```python
    def forward(self, x):
        x = self.bn(self.conv(x))
        return F.relu(x, inplace=True)
    ```

    ## Fix safety
    **Unsafe.** `inplace=True` (`torch.relu` becomes `torch.relu_`). Wrong producers raise at
    `backward()` — sigmoid, tanh, exp, softmax and relu save their output (verified:
    "one of the variables needed for gradient computation has been modified by an inplace
    operation"), leaves and views of leaves refuse in-place ops — and a value read again later
    (a residual) silently changes. The rule only fires when the dataflow in this file rules all
    of that out, but it cannot see forward hooks or other code that holds the producer's output
    (files that call `register_forward_hook` are skipped), so the fix stays opt-in.

    ## Applies to
    All torch versions; CPU and CUDA. Not the default rule set.

    ## References
    - PyTorch notes, "In-place operations with autograd" (`docs/source/notes/autograd.rst`)
    - Measured (torch 2.13, CPU): `relu_` after sigmoid, tanh, exp, softmax or relu raises
      "one of the variables needed for gradient computation has been modified by an
      inplace operation"; after linear, conv, batch/layer norm, GELU or dropout it does not
    """

    code = "PF401"
    name = "relu-not-inplace"
    summary = "ReLU on a fresh activation could run in place (saves memory, not time)"
    fix_class = "unsafe"
    default = False
    tokens = (b"relu", b"ReLU")

    def check(self, facts: Facts) -> Iterator[Violation]:
        if words(facts).name_contains("register_forward_hook", "register_module_forward_hook"):
            return
        for call in facts.calls():
            q = facts.qualname(call.func)
            if q in _RELU_FUNCS:
                yield from self._functional(facts, call, q)
            elif q == _NN + "ReLU" and not call.args:
                yield from self._module(facts, call)

    def _functional(self, facts: Facts, call: cst.Call, q: str) -> Iterator[Violation]:
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return
        if not fresh_activation(facts, call.args[0].value):
            return
        fix = None
        if q == _F + "relu":
            fix = self.unsafe("Pass `inplace=True`", {call: add_arg(call, make_kwarg("inplace", "True"))})
        elif isinstance(call.func, cst.Attribute):
            new = call.with_changes(func=call.func.with_changes(attr=cst.Name("relu_")))
            fix = self.unsafe("Use `torch.relu_`", {call: new})
        yield Violation(call, self._message(), fix)

    def _module(self, facts: Facts, ctor: cst.Call) -> Iterator[Violation]:
        parent = facts.parent(ctor)
        ok = False
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            seq = facts.parent(parent)
            if isinstance(seq, cst.Call) and facts.qualname(seq.func) == _NN + "Sequential":
                args = list(seq.args)
                i = next(k for k, a in enumerate(args) if a is parent)
                ok = _sequential_output_kind(facts, args, i, 0) is not None
        elif isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            site = self._single_call_site(facts, parent.targets[0].target, parent)
            if site is not None and len(site.args) == 1 and site.args[0].keyword is None and not site.args[0].star:
                ok = fresh_activation(facts, site.args[0].value)
        if ok:
            fix = self.unsafe("Pass `inplace=True`", {ctor: add_arg(ctor, make_kwarg("inplace", "True"))})
            yield Violation(ctor, self._message(), fix)

    @staticmethod
    def _single_call_site(facts: Facts, target: cst.BaseExpression, assign: cst.Assign) -> cst.Call | None:
        """The one place a module bound to `target` is used, when that is a call."""
        uses: list[cst.CSTNode] = []
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            attr = target.attr.value
            if len(facts.self_attr_bindings(target)) != 1 or attr in words(facts).strings:
                return None  # rebound, or reached by name (getattr, setattr, state-dict keys)
            for a in facts.index[cst.Attribute]:
                if a.attr.value == attr and a is not target:
                    if not (isinstance(a.value, cst.Name) and a.value.value == "self"):
                        return None  # reached from outside the class
                    uses.append(a)
        elif isinstance(target, cst.Name):
            scope = facts.scope_of(assign)
            for n in words(facts).name_nodes.get(target.value, ()):
                if n is target or not facts.is_inside(n, scope) or not _is_variable_name(facts, n):
                    continue
                if _is_store(facts, n):
                    return None
                uses.append(n)
        else:
            return None
        if len(uses) != 1:
            return None
        site = facts.parent(uses[0])
        if isinstance(site, cst.Call) and site.func is uses[0]:
            return site
        return None

    @staticmethod
    def _message() -> str:
        return (
            "ReLU on a fresh activation nothing else reads: `inplace=True` saves one "
            "activation-sized buffer (transient memory, not speed)"
        )


# ----------------------------------------------------------------------------------------
# PF403 — no-mixed-precision
# ----------------------------------------------------------------------------------------

# Whole words that name a mixed-precision setup. `amp` only standing alone or as the switch
# of a phrase (`use_amp`, `args.amp`, `--no-amp`, `amp_dtype`): `fact_amp` or `max_amp` is
# an amplitude.
# A framework precision setting written as a value (`precision: "bf16-mixed"` in a config
# dataclass, `--precision 16-mixed`).
_FRAMEWORK_PRECISION = re.compile(r"^(bf16|16|fp16)-(mixed|true)$")
_PRECISION_WORDS = re.compile(
    r"(^|[_-])(fp16|bf16|mixed_precision|half_precision)([_-]|$)"
    r"|^(--?)?((use|enable|enabled|with|no|disable|apply|do|native|torch|cuda)[_-])?amp([_-](dtype|enabled|level|mode|"
    r"scaler|backend|opt_level|type))?$")


def _is_step_boundary(facts: Facts, call: cst.Call) -> bool:
    return facts.is_backward_call(call) or facts.is_optimizer_step(call)


def _backward_tensor_name(call: cst.Call) -> str | None:
    recv = call.func.value if isinstance(call.func, cst.Attribute) else None
    while isinstance(recv, cst.BinaryOperation):
        recv = recv.left
    return recv.value if isinstance(recv, cst.Name) else None


def forward_range(facts: Facts, backward: cst.Call, include_backward: bool = False):
    """The statements of one training step to wrap: from the first model call to the statement
    that produces the tensor passed to `.backward()` (or the backward statement itself).

    Returns (block, start, end, first model call) with `block.body[start:end + 1]` the range,
    or (None, None, None, first model call) when the step has no such simple shape.
    """
    where = enclosing_block(facts, backward)
    if where is None or isinstance(where[0], cst.Module):
        return None, None, None, None
    block, bi = where
    body = list(block.body)
    if include_backward:
        end = bi
    else:
        name = _backward_tensor_name(backward)
        end = None
        if name is not None:
            bs = facts.lookup(name, backward)
            if len(bs) == 1 and bs[0].how in ("expr", "unpack") and bs[0].site is not None:
                stmt = facts.parent(bs[0].site)
                for i in range(bi):
                    if body[i] is stmt:
                        end = i
            if end is not None:
                # `loss += aux` / `loss = loss / k` style updates between binding and backward.
                for k in range(end + 1, bi):
                    st = body[k]
                    if isinstance(st, cst.SimpleStatementLine) and any(
                        isinstance(s, cst.AugAssign) and isinstance(s.target, cst.Name) and s.target.value == name
                        for s in st.body
                    ):
                        end = k
    lo = 0
    for i in range(bi - 1, -1, -1):
        if _contains(facts, body[i], lambda c: _is_step_boundary(facts, c)):
            lo = i + 1
            break
    first_call = None
    start = None
    for i in range(lo, bi + 1):
        for n in iter_nodes(body[i]):
            if isinstance(n, cst.Call) and is_model_call(facts, n) and facts.scope_of(n) is facts.scope_of(backward):
                if first_call is None or facts.order[n] < facts.order[first_call]:
                    first_call = n
        if first_call is not None:
            start = i
            break
    if first_call is None or end is None or start is None or start > end:
        return None, None, None, first_call
    for st in body[start:end + 1]:
        if _contains(facts, st, lambda c: _is_step_boundary(facts, c)) and not include_backward:
            return None, None, None, first_call
        if any(isinstance(n, (cst.Yield, cst.Await)) for n in iter_nodes(st)):
            return None, None, None, first_call
    return block, start, end, first_call


# Calls before the first recognised model call that are not themselves a forward pass.
_DATA_PREP_CALLS = {"cuda", "to", "float", "long", "half", "int", "bool", "double", "tensor", "as_tensor", "from_numpy",
                    "randn", "rand", "randint", "zeros", "ones", "full", "arange", "zeros_like", "ones_like",
                    "randn_like", "rand_like", "empty", "get", "item", "len", "range", "next", "min", "max", "train",
                    "eval", "zero_grad", "unsqueeze", "squeeze", "view", "reshape", "permute", "contiguous",
                    "detach", "clone", "cat", "stack", "split", "chunk", "size", "print", "int", "float", "str"}


def _forward_starts_earlier(facts: Facts, block: cst.IndentedBlock, start: int, end: int) -> bool:
    """A statement before the wrapped range binds, from a call that is not data preparation
    (`outputs = net(x)` with `net` not recognised as a model), a name the range reads: the
    forward pass begins before the first recognised model call, and wrapping from there would
    leave that part in fp32 (SSL4MIS: the segmentation net before the discriminator)."""
    body = list(block.body)
    used = {n.value for st in body[start:end + 1] for n in iter_nodes(st) if isinstance(n, cst.Name)}
    for st in body[:start]:
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if not isinstance(small, cst.Assign):
                continue
            names = {n.value for t in small.targets for n in iter_nodes(t.target) if isinstance(n, cst.Name)}
            if not names & used:
                continue
            calls = [n for n in iter_nodes(small.value) if isinstance(n, cst.Call)]
            if any((call_name(c) or "") not in _DATA_PREP_CALLS and not is_model_call(facts, c)
                   and not (facts.qualname(c.func) or "").startswith(
                       ("torch.nn.functional.", "torch.softmax", "torch.sigmoid", "numpy.")) for c in calls):
                return True  # (a recognised model call there is an earlier step's range)
    return False


def rebuild_block(block: cst.IndentedBlock, ranges: list[tuple[int, int, str]]) -> cst.IndentedBlock:
    """`block` with each `body[start:end + 1]` wrapped in `with <item>:`."""
    body = list(block.body)
    out: list[cst.BaseStatement] = []
    i = 0
    for start, end, item in sorted(ranges):
        out.extend(body[i:start])
        out.append(wrap_in_with(body[start:end + 1], item))
        i = end + 1
    out.extend(body[i:])
    return block.with_changes(body=out)


_BCE = {"torch.nn.BCELoss", "torch.nn.functional.binary_cross_entropy"}
_CUDNN_RNNS = {"torch.nn.LSTM", "torch.nn.GRU", "torch.nn.RNN"}


def _no_bf16_autocast_fix(facts: Facts) -> str | None:
    """Why wrapping the step in bf16 autocast would break this file, or None."""
    called = layer_qualnames(facts)
    if called & _BCE:
        return ("`BCELoss`/`binary_cross_entropy` raise under CUDA autocast (\"unsafe to autocast\"); "
                "compute the loss from logits with `BCEWithLogitsLoss` inside it")
    if called & _CUDNN_RNNS:
        return ("under CUDA autocast cuDNN LSTM/GRU/RNN layers run in float16 whatever the dtype asked, "
                "so the step needs float16 with a `torch.amp.GradScaler`")
    if "torch.nn.DataParallel" in called:
        return ("`nn.DataParallel` runs its replicas in threads that enter autocast without its dtype, "
                "so they would run float16 without a `torch.amp.GradScaler`; move to DDP first (PF503)")
    return None


@register
class NoMixedPrecision(Rule):
    """
    ## What it does
    Flags a CUDA training step (a loop or step function that calls `.backward()`) whose
    forward pass runs in full fp32, in a file that never uses `torch.autocast` or any other
    mixed-precision mechanism. Reported once per training loop (a GAN's discriminator and
    generator updates count as one step), at its first model call.

    ## Why is this bad?
    Tensor cores run bf16/fp16 matmuls and convolutions far faster than fp32: the PyTorch
    performance tuning guide says mixed precision "offers up to 3x overall speedup on Volta
    and newer GPU architectures". On an H100 80GB (torch 2.11, `python
    benchmarks/rule_effects.py`; results in `benchmarks/results/h100/rule_effects/`): an
    8-layer transformer training step (d 1024, 16 × 512 tokens) took 130.0 ms in fp32 and
    22.8 ms under bf16 autocast (5.7×), while a small BatchNorm conv net went only from 18.5
    to 16.6 ms (1.11×) in NCHW — 7.2 ms once it is also channels_last (PF408). The gain
    depends on how much of the step is matmul/conv work.

    ## Example
    ```python
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = criterion(out, y)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    **Unsafe.** It changes numerics (bf16 has an 8-bit mantissa), and bf16 is only fast on
    compute capability ≥ 8.0 (Ampere and newer); on older GPUs use
    `torch.autocast("cuda", dtype=torch.float16)` with a `torch.amp.GradScaler` instead
    (note `torch.cuda.is_bf16_supported()` returns True on pre-Ampere GPUs by default, through
    emulation). The fix wraps the statements from the first model call to the statement that
    produces the tensor passed to `.backward()`, when they sit in the same block as the
    backward call; `backward()` and the optimizer step stay outside, comments stay in place.
    No fix when the loss is computed in the backward statement itself, or across blocks.
    No fix either in files whose loss uses `acos`/`asin` (ArcFace / additive-angular-margin
    losses): they clamp the cosine to `1 - 1e-7`, which bf16 rounds to 1.0, so under autocast
    `acos` has an infinite gradient (NaN gradients, reproduced under CPU bf16 autocast), and
    leaving the loss outside autocast feeds a bf16 embedding to fp32 margin weights
    (`expected m1 and m2 to have the same dtype`). No fix, and a message that says why, when
    the file calls `BCELoss`/`binary_cross_entropy` (CUDA autocast raises "unsafe to
    autocast" for them: use `BCEWithLogitsLoss` on logits), builds `nn.LSTM`/`GRU`/`RNN`
    layers (torch's autocast wrapper for cuDNN RNNs casts them to float16 whatever the dtype
    asked, `aten/src/ATen/cudnn/AutocastRNN.cpp`, so they need a GradScaler), or uses
    `nn.DataParallel` (its replica threads enter `autocast(enabled=...)` without the dtype,
    `torch/nn/parallel/parallel_apply.py`, so they run float16), or builds custom C++/CUDA ops
    (`torch.utils.cpp_extension`, in the file or a module it imports): kernels dispatched with
    `AT_DISPATCH_FLOATING_TYPES_AND_HALF` raise "not implemented for 'BFloat16'" under bf16
    autocast (stylegan2's fused_bias_act/upfirdn2d). bf16 needs no GradScaler:
    it has fp32's exponent range. When the step runs on the script's own device (`x.to(device)`,
    `.to(args.device)`, a `device` parameter) and that device may not be CUDA, the autocast
    is enabled only there: `enabled=device.type == "cuda"` for a `torch.device`,
    `enabled=torch.device(args.device).type == "cuda"` for a string option (right for either).
    A `--device cpu` run then keeps fp32 — CPU bf16 autocast is its own trade-off: a small
    MLP step ran 3–5× slower than in fp32 on a 2-core CPU without native bf16 (torch 2.13,
    `python benchmarks/cpu_bf16_autocast.py`) — and gets no "CUDA is not available …
    Disabling autocast" warning. The device expression must
    be bound where the `with` goes (in its scope or an enclosing one, before it); a device
    that is CUDA for sure (`.cuda()`, `"cuda"`), or none in reach, gives plain
    `torch.autocast("cuda", …)`, which warns and disables itself on a CPU-only run.

    ## Applies to
    Target torch ≥ 1.10 (`torch.autocast`); CUDA code only. Silent in files that use
    autocast, a GradScaler, Accelerate/Lightning/DeepSpeed/apex's amp or the transformers Trainer,
    precision flags (`amp`, `fp16`, `bf16`, `mixed_precision`), or cast models to
    half/bfloat16.

    ## References
    - PyTorch performance tuning guide, "Use mixed precision and AMP"
    - PyTorch AMP documentation (`torch.amp`), autocast and GradScaler examples
    """

    code = "PF403"
    name = "no-mixed-precision"
    summary = "CUDA training step without autocast"
    severity = Severity.INFO
    fix_class = "unsafe"
    min_torch = (1, 10)
    tokens = (b"backward",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not facts.is_cuda_code or self._has_precision_setup(facts) or optimizes_inputs_only(facts):
            return
        near = settings_near(facts)[0]
        if near & {"amp", "scaler"}:
            return  # autocast or a scaler in the modules around (a trainer base class, a wrapper optimizer)
        tn = torch_module_name(facts)
        steps: list[tuple[cst.Call, object, int | None, int | None, cst.Call | None]] = []
        loop_of: dict[cst.Call, cst.CSTNode] = {}
        device_test: dict[cst.Call, str | None] = {}
        for call in facts.calls():
            if not facts.is_backward_call(call) or call_name(call) != "backward":
                continue
            ctx = facts.iteration_context(call)
            if ctx is None or ctx.kind != "train" or not self._updates_weights(facts, ctx.node):
                continue
            block, start, end, first = forward_range(facts, call)
            if first is None:
                continue
            if block is not None and _forward_starts_earlier(facts, block, start, end):
                block = None  # reported, but the rewrite would leave part of the forward in fp32
            steps.append((call, block, start, end, first))
            loop_of[first] = ctx.node
            device_test[first] = script_device_test(facts, first, ctx.node)
        if not steps:
            return
        if words(facts).name_contains("acos", "asin", "arccos", "arcsin"):
            # Margin losses (ArcFace/AAM) clamp to 1 - 1e-7, which bf16 rounds to 1: under
            # autocast acos gets an infinite gradient, and outside it a bf16 embedding meets
            # fp32 margin weights. Report, but offer no rewrite.
            steps = [(c, None, s, e, f) for c, b, s, e, f in steps]
        why_not = _no_bf16_autocast_fix(facts)
        if not why_not and ("cuda_ext" in near or facts.references("torch.utils.cpp_extension")):
            why_not = ("the model runs custom C++/CUDA extension ops (`torch.utils.cpp_extension`), which often "
                       "dispatch only float32/float16 and raise on bfloat16: check them, or use float16 with a "
                       "`torch.amp.GradScaler`")
        if why_not:
            steps = [(c, None, s, e, f) for c, b, s, e, f in steps]
        per_block: dict[cst.CSTNode, list[tuple[int, int, str]]] = {}
        for _, block, start, end, first in steps:
            if block is not None and tn is not None:
                # On the script's own device when it may not be CUDA: enabled only on CUDA, so
                # a CPU run keeps fp32 (CPU bf16 autocast is a different trade-off) and gets no
                # "CUDA is not available" warning.
                test = device_test[first]
                enabled = f", enabled={test}" if test else ""
                item = f'{tn}.autocast("cuda", dtype={tn}.bfloat16{enabled})'
                per_block.setdefault(block, []).append((start, end, item))  # type: ignore[arg-type]
        replacements = {b: rebuild_block(b, rs) for b, rs in per_block.items()}  # type: ignore[arg-type]
        plan = self.unsafe("Run forward and loss under bf16 autocast", replacements) if replacements else None
        # One finding per training step (a GAN's discriminator and generator updates share
        # one), at the step's first model call; its fix wraps every forward range.
        seen: set[cst.CSTNode] = set()
        for call, block, start, end, first in sorted(steps, key=lambda s: facts.order[s[4]]):
            if loop_of[first] in seen:
                continue
            seen.add(loop_of[first])
            has_plan = any(b is not None for _, b, _, _, f in steps if loop_of[f] is loop_of[first])
            test = device_test[first]
            enabled = f", enabled={test}" if test else ""
            other = ", so a run on another device keeps fp32" if test else ""
            message = ("CUDA training step without mixed precision: run the forward pass and loss under "
                       f'`torch.autocast("cuda", dtype=torch.bfloat16{enabled})`{other} (Ampere or newer; '
                       "pre-Ampere GPUs should use float16 with a `torch.amp.GradScaler` instead)")
            if why_not:
                message = ("CUDA training step without mixed precision: run the forward pass under "
                           f"`torch.autocast` — not as a plain rewrite here: {why_not}")
            yield Violation(first, message, plan if has_plan else None)

    @staticmethod
    def _updates_weights(facts: Facts, step: cst.CSTNode) -> bool:
        return updates_weights(facts, step)

    @staticmethod
    def _has_precision_setup(facts: Facts) -> bool:
        w = words(facts)
        return (
            facts.uses_autocast
            or facts.uses_grad_scaler
            or w.name_contains("autocast", "gradscaler", "grad_scaler", "loss_scale")
            or uses_training_framework(facts)
            or w.matches(_PRECISION_WORDS)
            or casts_to_low_precision(facts)
            or any(a.keyword is not None and a.keyword.value in ("precision", "mixed_precision")
                   for c in facts.calls() for a in c.args)
            or any(_FRAMEWORK_PRECISION.search(v) for v in w.strings)
        )


# ----------------------------------------------------------------------------------------
# PF404 — fp16-without-grad-scaler
# ----------------------------------------------------------------------------------------

_AUTOCAST_POSITIONS = {
    # qualname: (device, enabled position, dtype position)
    "torch.cuda.amp.autocast": ("cuda", 0, 1),
    "torch.cpu.amp.autocast": ("cpu", 0, 1),
    "torch.amp.autocast": (None, 2, 1),
}


def _dtype_of(facts: Facts, expr: cst.BaseExpression, depth: int = 0) -> str | None:
    q = facts.qualname(expr)
    if q in ("torch.float16", "torch.half"):
        return "fp16"
    if q == "torch.bfloat16":
        return "bf16"
    if literal_value(expr) is None:
        return "default"
    if isinstance(expr, cst.Name) and depth < 4:
        bs = facts.lookup(expr.value, expr)
        kinds = {_dtype_of(facts, b.node, depth + 1) if b.how == "expr" else None for b in bs}  # type: ignore[arg-type]
        if len(kinds) == 1:
            return kinds.pop()
    return None


def autocast_dtype(facts: Facts, call: cst.Call) -> str | None:
    """"fp16", "bf16" or None (unknown or disabled) for an autocast call."""
    q = facts.qualname(call.func)
    if q not in _AUTOCAST_POSITIONS or has_splat(call):
        return None
    device, enabled_pos, dtype_pos = _AUTOCAST_POSITIONS[q]
    enabled = get_arg(call, "enabled", enabled_pos)
    if enabled is not None and literal_value(enabled.value) is False:
        return None
    if device is None:
        dev = get_arg(call, "device_type", 0)
        value = literal_value(dev.value) if dev is not None else NOT_LITERAL
        device = value if isinstance(value, str) else None
    arg = get_arg(call, "dtype", dtype_pos)
    dtype = "default" if arg is None else _dtype_of(facts, arg.value)
    if dtype == "default":
        if any((facts.qualname(c.func) or "") == "torch.set_autocast_dtype" for c in facts.calls()):
            return None
        return {"cuda": "fp16", "cpu": "bf16"}.get(device or "")
    return dtype


@register
class Fp16WithoutGradScaler(Rule):
    """
    ## What it does
    Flags float16 autocast in a training step — `torch.autocast("cuda")` (float16 is the CUDA
    default), `torch.autocast(..., dtype=torch.float16)`, `torch.cuda.amp.autocast()` — in a
    file with no GradScaler. bfloat16 autocast is exempt.

    ## Why is this bad?
    Gradients of float16 ops are float16. Values below float16's range (about 6e-8) flush to
    zero, so small gradients are silently lost and the affected parameters stop learning; the
    AMP documentation makes gradient scaling part of every float16 training recipe. Not a
    speed issue: the step computes the wrong update.

    ## Example
    ```python
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    ...
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```
    or `torch.autocast("cuda", dtype=torch.bfloat16)` on Ampere or newer GPUs.

    ## Fix safety
    No fix: adding a scaler changes three statements of the step, and the right choice
    between a scaler and bf16 depends on the GPU.

    ## Applies to
    All torch versions with autocast; CUDA and CPU. Silent when the file mentions any scaler
    (`GradScaler`, `ShardedGradScaler`, timm's `NativeScaler`, a `loss_scaler` …) or uses
    Accelerate, Lightning, DeepSpeed, apex's amp or the transformers Trainer, which scale losses
    themselves; silent when the dtype cannot be resolved.

    ## References
    - PyTorch AMP documentation, "Gradient Scaling"
    """

    code = "PF404"
    name = "fp16-without-grad-scaler"
    summary = "float16 autocast in training without a GradScaler"
    severity = Severity.ERROR
    tokens = (b"autocast",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if facts.uses_grad_scaler or words(facts).name_contains("scaler") or uses_training_framework(facts):
            return
        if "scaler" in settings_near(facts)[0]:
            return  # a GradScaler in the modules around (a wrapper optimizer, a trainer base class)
        for call in facts.calls():
            if facts.qualname(call.func) not in _AUTOCAST_POSITIONS:
                continue
            ctx = facts.iteration_context(call)
            if (ctx is None or ctx.kind != "train") and not self._around_training_loop(facts, call):
                continue
            if autocast_dtype(facts, call) != "fp16":
                continue
            yield Violation(
                call,
                "float16 autocast in a training step with no GradScaler: small gradients underflow "
                "to zero; scale the loss with `torch.amp.GradScaler` or use `dtype=torch.bfloat16`",
            )

    @staticmethod
    def _around_training_loop(facts: Facts, call: cst.Call) -> bool:
        """`with autocast(...):` wrapped around a whole training loop."""
        item = facts.parent(call)
        stmt = facts.parent(item) if isinstance(item, cst.WithItem) else None
        if not isinstance(stmt, cst.With):
            return False
        return any(facts.is_inside(loop, stmt.body) for loop in facts.training_loops())


# ----------------------------------------------------------------------------------------
# PF405 — tf32-not-enabled / PF406 — cudnn-benchmark-not-enabled
# ----------------------------------------------------------------------------------------


@register
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
    fix_class = "unsafe"
    default = False  # whole-repository review: 0.60 tuned, 0/5 held out (see "Applies to")
    min_torch = (1, 12)
    tokens = (b"cuda", b"accelerator", b"device")  # what is_cuda_code reads: CUDA names, torch.accelerator, a device option

    def check(self, facts: Facts) -> Iterator[Violation]:
        anchor = first_torch_import(facts)
        if anchor is None or not facts.is_cuda_code or not is_training_file(facts):
            return
        w = words(facts)
        if w.name_contains("tf32", "fp32_precision", "matmul_precision"):
            return
        if facts.uses_autocast or casts_to_low_precision(facts) or not has_matmul_work(facts):
            return
        if _precision_framework(facts) or any(_FRAMEWORK_PRECISION.search(v) for v in w.strings) or any(
                a.keyword is not None and a.keyword.value in ("precision", "mixed_precision")
                for c in facts.calls() for a in c.args):
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
    loops = facts.training_loops()
    if loops:
        return min(loops, key=lambda n: facts.order.get(n, 0)), "training loop"
    backward = [c for c in facts.calls() if facts.is_backward_call(c)]
    if backward:
        return min(backward, key=lambda n: facts.order.get(n, 0)), "training step"
    return None, "training code"


def _frozen(facts: Facts, call: cst.Call) -> bool:
    """The model built by `call` is frozen: `.requires_grad_(False)` chained on it or called on
    the name it is bound to, or `p.requires_grad = False` over that name's parameters."""
    node: cst.CSTNode = call
    while True:  # up the chain `vgg16(...).features[:16].cuda().eval()`
        parent = facts.parent(node)
        if isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is node:
            node = parent
            continue
        if isinstance(parent, cst.Call) and parent.func is node:
            if call_name(parent) == "requires_grad_" and parent.args and literal_value(parent.args[0].value) is False:
                return True
            node = parent
            continue
        break
    assign = facts.parent(node)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
        return False
    target = dotted(assign.targets[0].target)
    return bool(target) and target in _frozen_names(facts)


def _frozen_names(facts: Facts) -> frozenset[str]:
    """The names whose parameters the file freezes: `name.requires_grad_(False)`, or
    `p.requires_grad = False` in a loop over `name.parameters()` (computed once a file)."""
    memo = facts.__dict__.get("_frozen_names_memo")
    if memo is not None:
        return memo
    names: set[str] = set()
    for c in facts.calls():
        if call_name(c) == "requires_grad_" and isinstance(c.func, cst.Attribute) \
                and c.args and literal_value(c.args[0].value) is False:
            name = dotted(c.func.value)
            if name:
                names.add(name)
    for loop in facts.index[cst.For]:
        it = loop.iter
        if isinstance(it, cst.Call) and call_name(it) == "parameters" and isinstance(it.func, cst.Attribute):
            name = dotted(it.func.value)
            if name and name not in names and any(
                    isinstance(n, cst.Assign) and literal_value(n.value) is False and any(
                        isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                        for t in n.targets)
                    for n in iter_nodes(loop.body)):
                names.add(name)
    memo = frozenset(names)
    facts.__dict__["_frozen_names_memo"] = memo
    return memo


def _first_conv_call(facts: Facts) -> cst.Call | None:
    """The first convolution layer (or torchvision classifier) the file builds or calls, a
    trained one before a frozen one (a perceptual-loss feature network)."""
    candidates = [c for c in facts.calls()
                  if (facts.qualname(c.func) or "") in _CONV_APIS or _TORCHVISION_CLASSIFIER.match(facts.qualname(c.func) or "")]
    best = min(candidates, key=lambda c: (_frozen(facts, c), facts.order[c])) if candidates else None
    if best is None and facts.project is not None:
        # The layers are built in another module: point at the model the file builds there.
        for call in facts.calls():
            ref = facts.project_ref(call.func)
            if ref is not None and not ref.startswith("#") and facts.project.layer_apis(ref) & _CONV_APIS:
                return call
    return best


_VARIABLE_SHAPE_WORDS = (
    "pad_sequence", "pack_padded_sequence", "pack_sequence", "pad_packed_sequence", "packedsequence",
    "randomresize", "randomshortestsize", "scalejitter", "randomioucrop", "randomzoomout", "bucket",
    # per-batch sequence lengths: audio/text models crop or pad to each batch's own length
    "input_lengths", "mel_input_length", "mel_lengths", "length_to_mask", "sequence_mask", "lengths_to_mask",
)
_RANDOM_CALLS = {"randint", "randrange", "uniform", "choice", "integers", "rand", "random", "randn"}


def _variable_input_shapes(facts: Facts) -> bool:
    w = words(facts)
    if w.name_contains(*_VARIABLE_SHAPE_WORDS):
        return True
    if any(v.startswith("torchvision.models.detection") for v in facts.imports.aliases.values()):
        return True
    for call in facts.calls():
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


_CONV1D_APIS = {"torch.nn.Conv1d", "torch.nn.ConvTranspose1d", "torch.nn.LazyConv1d", "torch.nn.LazyConvTranspose1d",
                 "torch.nn.functional.conv1d", "torch.nn.functional.conv_transpose1d", "torch.conv1d"}
_SEQUENCE_WORDS = ("lengths", "seq_len", "src_len", "tgt_len", "max_len", "padding_mask", "attention_mask",
                   "key_padding_mask", "x_mask", "src_mask", "mel_len", "text_len")


def _sequence_convs(facts: Facts) -> bool:
    """The convolutions are 1-D over sequences whose length changes per batch (the file keeps
    per-batch lengths or padding masks), or all pointwise (kernel size 1, like the 1×1 convs
    of a TTS or ASR model): `cudnn.benchmark` would re-tune for every new length and gain
    nothing on a pointwise GEMM."""
    convs = [c for c in facts.calls() if (facts.qualname(c.func) or "") in _CONV_APIS]
    if not convs or any(_TORCHVISION_CLASSIFIER.match(q) for q in layer_qualnames(facts)) \
            or facts.project_layer_apis & _CONV_APIS:
        return False  # (some) layers live in another module or a library model: no view of their kernels
    if all(literal_value((get_arg(c, "kernel_size", 2) or cst.Arg(cst.Name("x"))).value) in (1, (1, 1), (1, 1, 1))
           for c in convs):
        return True
    one_d = all((facts.qualname(c.func) or "") in _CONV1D_APIS for c in convs)
    return one_d and words(facts).name_contains(*_SEQUENCE_WORDS)


def _cudnn_flag_assignments(facts: Facts, flag: str) -> list[cst.Assign]:
    out = []
    for node in facts.index[cst.Assign]:
        for t in node.targets:
            if isinstance(t.target, cst.Attribute) and facts.qualname(t.target) == f"torch.backends.cudnn.{flag}":
                out.append(node)
    return out


@register
class CudnnBenchmarkNotEnabled(Rule):
    """
    ## What it does
    Flags, once per file, a CUDA training file with convolution layers that never sets
    `torch.backends.cudnn.benchmark`, reported at the first convolution layer (or
    torchvision classifier) the file builds: the layers the setting speeds up (when the
    layers are built in another module of the project, at the model the file builds from
    it, e.g. `model = Net()`). Also flags
    `cudnn.benchmark = True` set in the same block as `cudnn.deterministic = True` or
    `torch.use_deterministic_algorithms(True)` (reported at the `benchmark = True`
    assignment).

    ## Why is this bad?
    With `benchmark = False` (the default) cuDNN picks convolution algorithms by heuristic;
    with `True` it times the candidates once per input shape and keeps the fastest. For
    fixed input shapes that is a one-off cost for faster convolutions; the gain is
    workload-dependent. On an H100 80GB (torch 2.11, `python benchmarks/rule_effects.py`;
    results in `benchmarks/results/h100/rule_effects/`), a fp32 6-layer conv net training
    step took 9.64 ms either way (1.00×): the heuristic already chose well there. Setting it
    together with determinism flags is contradictory: the PyTorch reproducibility notes say
    reproducible runs need `benchmark = False`, since the timed choice can differ from run
    to run.

    ## Example
    ```python
    import torch
    model = torchvision.models.resnet50().cuda()
    ```

    ## Use instead
    ```python
    import torch
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda()
    ```

    ## Fix safety
    **Unsafe.** Benchmarking makes algorithm choice, and so results, vary between runs, and
    every new input shape triggers a new round of timing (slow with variable shapes). The fix
    inserts `torch.backends.cudnn.benchmark = True` once, after the file's imports, set off
    by a blank line (as for PF405).
    The rule is silent when the file shows signs of variable input shapes (`pad_sequence`,
    packed sequences, random-size crops or resizes, custom `collate_fn`/`batch_sampler`,
    detection models, 1-D convolutions next to per-batch lengths or padding masks), when
    every convolution is pointwise (kernel size 1), or any determinism setting. No fix for the benchmark/deterministic
    conflict: which of the two the user wants is unknown.

    ## Applies to
    All torch versions; CUDA code only.

    ## References
    - PyTorch performance tuning guide, "Enable cuDNN auto-tuner"
    - PyTorch reproducibility notes (`docs/source/notes/randomness.rst`)
    """

    code = "PF406"
    name = "cudnn-benchmark-not-enabled"
    summary = "conv net trained on CUDA without cudnn.benchmark (or benchmark with determinism)"
    fix_class = "unsafe"
    tokens = (b"cuda", b"accelerator", b"device", b"benchmark")  # CUDA code, or the benchmark/deterministic conflict

    def check(self, facts: Facts) -> Iterator[Violation]:
        yield from self._conflicts(facts)
        anchor = first_torch_import(facts)
        if anchor is None or not facts.is_cuda_code or not is_training_file(facts):
            return
        w = words(facts)
        if w.name_contains("deterministic") or any("CUBLAS_WORKSPACE_CONFIG" in v for v in w.strings) or _cudnn_flag_assignments(facts, "benchmark"):
            return
        if any(
            isinstance(a.value, cst.Name) and a.value.value == "cudnn" or
            (isinstance(a.value, cst.Attribute) and a.value.attr.value == "cudnn")
            for a in facts.index[cst.Attribute] if a.attr.value == "benchmark"
        ) or "cudnn" in {s.lower() for s in w.strings} or w.name_contains("cudnn_benchmark"):
            return
        if any(a.keyword is not None and a.keyword.value == "benchmark" for c in facts.calls() for a in c.args):
            return  # e.g. Lightning's Trainer(benchmark=...)
        if not has_conv_layers(facts) or _variable_input_shapes(facts) or _sequence_convs(facts):
            return
        near, imported = settings_near(facts)
        if near & {"cudnn_benchmark", "deterministic"}:
            return  # set (or ruled out) by the entry point or a base class's module
        tn = torch_module_name(facts, top_level=True)
        fix = None
        if tn is not None and not imported:  # file-wide settings go into the entry point only
            r = insert_setting(facts, f"{tn}.backends.cudnn.benchmark = True", tn)
            if r is not None:
                fix = self.unsafe("Add `torch.backends.cudnn.benchmark = True`", r)
        conv = _first_conv_call(facts)
        what = "this convolution layer" if conv is None or facts.qualname(conv.func) in _CONV_APIS \
            else "the convolution layers of this model"
        if conv is not None and _frozen(facts, conv):
            what = "this frozen network's convolutions (it is not trained, but its forward runs every step)"
        yield Violation(
            conv or anchor,
            f"CUDA training runs {what} without `torch.backends.cudnn.benchmark = True`: with fixed "
            "input shapes the autotuner picks faster convolution algorithms ("
            + ("a process-wide setting: add it once in the script that runs training, which imports this module)"
               if imported else "a file-wide setting: add it once after the imports)"),
            fix,
        )

    def _conflicts(self, facts: Facts) -> Iterator[Violation]:
        det_stmts = [facts.statement_of(a) for a in _cudnn_flag_assignments(facts, "deterministic")
                     if literal_value(a.value) is True]
        for call in facts.calls_to("torch.use_deterministic_algorithms"):
            arg = get_arg(call, "mode", 0)
            if arg is not None and literal_value(arg.value) is True:
                det_stmts.append(facts.statement_of(call))
        if not det_stmts:
            return
        det_blocks = {id(facts.parent(s)) for s in det_stmts}
        for assign in _cudnn_flag_assignments(facts, "benchmark"):
            if literal_value(assign.value) is True and id(facts.parent(facts.statement_of(assign))) in det_blocks:
                yield Violation(
                    assign,
                    "`cudnn.benchmark = True` next to a determinism setting: the determinism flag keeps "
                    "cuDNN to its slower deterministic algorithms while benchmarking makes runs differ anyway; "
                    "drop the determinism flag for speed, or set `benchmark = False` if reproducibility is the goal",
                )


# ----------------------------------------------------------------------------------------
# PF407 — compile-misuse
# ----------------------------------------------------------------------------------------

_OTHER_ACCELERATORS = re.compile(r"^(mps|xpu|hpu|npu|mtia|xla|privateuseone)(:\d+)?$")


def _cpu_only(facts: Facts) -> bool:
    if facts.is_cuda_code:
        return False
    strings = words(facts).strings
    if any(_OTHER_ACCELERATORS.match(s) for s in strings) or words(facts).name_contains("accelerator"):
        return False
    return "cpu" in strings


def compiled_functions(facts: Facts) -> dict[cst.FunctionDef, cst.Call | None]:
    """Functions compiled with `torch.compile` in this file → the compile call (None for a
    bare `@torch.compile` decorator)."""
    out: dict[cst.FunctionDef, cst.Call | None] = {}
    for fn in facts.index[cst.FunctionDef]:
        for d in fn.decorators:
            dec = d.decorator
            target = dec.func if isinstance(dec, cst.Call) else dec
            if facts.qualname(target) == "torch.compile":
                out[fn] = dec if isinstance(dec, cst.Call) else None
    for call in facts.calls_to("torch.compile"):
        arg = get_arg(call, "model", 0)
        if arg is None:
            continue
        value = arg.value
        if isinstance(value, cst.Name) and value.value in facts.functions_by_name and not facts.lookup(value.value, value):
            fns = facts.functions_by_name[value.value]
            if len(fns) == 1:
                out.setdefault(fns[0], call)
            continue
        ctor = value
        if isinstance(value, cst.Name):
            bs = facts.lookup(value.value, value)
            ctor = bs[0].node if len(bs) == 1 and bs[0].how == "expr" else None
        while isinstance(ctor, cst.Call) and isinstance(ctor.func, cst.Attribute) and ctor.func.attr.value in (
            "to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "requires_grad_"
        ):
            ctor = ctor.func.value
        if isinstance(ctor, cst.Call) and isinstance(ctor.func, cst.Name) and ctor.func.value in facts.module_classes:
            cls = facts.classes_by_name.get(ctor.func.value)
            for stmt in cls.body.body if cls is not None else ():
                if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "forward":
                    out.setdefault(stmt, call)
    return out


@register
class CompileMisuse(Rule):
    """
    ## What it does
    Flags three `torch.compile` mistakes:
    1. `torch.compile(...)` called on every iteration of a training/evaluation loop (or of a
       loop around one), outside any `if`;
    2. `mode="reduce-overhead"` in CPU-only code;
    3. `.item()` or `print(...)` inside a compiled function (decorated with `@torch.compile`,
       or passed to `torch.compile` in this file, including a local `nn.Module`'s `forward`).

    ## Why is this bad?
    1. Compilation is expensive (measured on CPU: 40 s for the first call of a small MLP,
       9.7 s for a recompile) and each call wraps the model again; past the recompile limit
       (8) torch falls back to eager.
    2. `reduce-overhead` means CUDA graphs (`{'triton.cudagraphs': True}`), which only apply
       to CUDA graphs: on CPU it buys nothing.
    3. Both are graph breaks (verified with `torch._dynamo.explain`: one break each), which
       split the compiled region; `.item()` also forces a device-to-host sync.

    ## Example
    ```python
    for epoch in range(epochs):
        model = torch.compile(model)
        ...

    @torch.compile
    def step(x):
        loss = model(x).sum()
        print(loss.item())
        return loss
    ```

    ## Use instead
    ```python
    model = torch.compile(model)
    for epoch in range(epochs):
        ...

    @torch.compile
    def step(x):
        return model(x).sum()
    loss = step(x)   # log outside, every N steps
    ```

    ## Fix safety
    No fix: moving a compile call or a print changes program structure.

    ## Applies to
    Target torch ≥ 2.0; CPU and CUDA (check 2 only in CPU-only files: no CUDA evidence, a
    `"cpu"` device string, and no other accelerator). With `fullgraph=True`, `.item()` is
    captured (torch 2.13 turns on `capture_scalar_outputs`), so only `print` is reported.

    ## References
    - `torch.compile` docstring and `torch._inductor.list_mode_options()` (2.13)
    - Measured (torch 2.13, CPU inductor, 6 × Linear(256) + GELU): first call 40.0 s, then
      1.9 ms a call; a new batch size recompiled in 9.7 s
    """

    code = "PF407"
    name = "compile-misuse"
    summary = "torch.compile in a loop, cudagraph mode on CPU, or graph breaks in compiled code"
    min_torch = (2, 0)
    tokens = (b"compile",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in facts.calls_to("torch.compile"):
            if self._in_loop(facts, call):
                yield Violation(
                    call,
                    "`torch.compile` runs on every iteration of the loop; compile once, before it",
                )
            mode = get_arg(call, "mode", 2)
            if mode is not None and literal_value(mode.value) == "reduce-overhead" and _cpu_only(facts):
                yield Violation(
                    mode,
                    '`mode="reduce-overhead"` uses CUDA graphs, which do nothing for CPU-only code',
                )
        print_shadowed = "print" in facts.functions_by_name
        for fn, compile_call in compiled_functions(facts).items():
            fullgraph = False
            if compile_call is not None:
                fg = get_arg(compile_call, "fullgraph", 1)
                fullgraph = fg is not None and literal_value(fg.value) is True
            for call in facts.calls_within(fn):
                if facts.enclosing_function(call) is not fn:
                    continue
                if call_name(call) == "item" and isinstance(call.func, cst.Attribute) and not call.args and not fullgraph:
                    yield Violation(call, "`.item()` inside a compiled function is a graph break and a host sync")
                elif isinstance(call.func, cst.Name) and call.func.value == "print" and not print_shadowed \
                        and not facts.lookup("print", call):
                    yield Violation(call, "`print` inside a compiled function is a graph break")

    @staticmethod
    def _in_loop(facts: Facts, call: cst.Call) -> bool:
        loops = []
        for a in facts.ancestors(call):
            if isinstance(a, (cst.If, cst.Try, cst.IfExp)):
                if not loops:
                    return False  # compiled under a condition (once, lazily): fine
            if isinstance(a, (cst.For, cst.While)):
                loops.append(a)
            if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                break
        for loop in loops:
            if facts.loop_kind(loop) is not None:
                return True
            if any(facts.is_inside(inner, loop) for inner in (*facts.training_loops(), *facts.eval_loops())):
                return True
        return False


# ----------------------------------------------------------------------------------------
# PF408 — channels-last-missing
# ----------------------------------------------------------------------------------------


@register
class ChannelsLastMissing(Rule):
    """
    ## What it does
    Flags, once per file, a CUDA training file that trains a 2-D conv net under autocast and
    never mentions `channels_last`. Reported at the first `import torch`.

    ## Why is this bad?
    Tensor-core convolutions prefer NHWC. The PyTorch memory-format tutorial reports "22%
    improvement in ResNet50 training speed" and "8-35% improvement across a selection of
    models tested on a V100" with channels_last + AMP (quoted by the fastai docs). On an
    H100 80GB (torch 2.11, `python benchmarks/rule_effects.py`; results in
    `benchmarks/results/h100/rule_effects/`): a bf16 conv net training step (batch 128, 128
    × 128) took 16.7 ms in NCHW and 7.2 ms in channels_last (2.3×). Grouped convolutions can
    hit slow paths instead.

    ## Example
    ```python
    model = torchvision.models.resnet50().cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    ```

    ## Use instead
    ```python
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    x = x.to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    ```

    ## Fix safety
    No fix: both the model and the inputs must be converted, results can differ numerically,
    and custom ops may assume contiguous NCHW tensors.

    ## Applies to
    All torch versions with `channels_last` (1.5+); CUDA code with autocast. Off by default:
    the detection is a heuristic and the gain depends on the GPU and the network.

    ## References
    - PyTorch performance tuning guide and channels-last memory-format tutorial ("8-35%
      improvement across a selection of models tested on a V100")
    """

    code = "PF408"
    name = "channels-last-missing"
    summary = "conv net trained under AMP without channels_last"
    severity = Severity.INFO
    default = False
    tokens = (b"autocast",)

    def check(self, facts: Facts) -> Iterator[Violation]:
        anchor = first_torch_import(facts)
        if anchor is None or not facts.uses_autocast or not facts.is_cuda_code or not is_training_file(facts):
            return
        if words(facts).name_contains("channels_last") or not has_conv_layers(facts, two_d=True):
            return
        yield Violation(
            anchor,
            "2-D conv net trained under AMP in NCHW: convert the model and inputs with "
            "`.to(memory_format=torch.channels_last)` for faster tensor-core convolutions",
        )


# ----------------------------------------------------------------------------------------
# PF409 — tensor-created-then-moved
# ----------------------------------------------------------------------------------------

# Constructors whose values do not depend on where they are computed.  Not `tensor`,
# `as_tensor` or `from_numpy`: their data starts in host memory, and with `device=` torch
# builds the same host tensor and copies it the same way (`torch/csrc/utils/tensor_new.h`:
# the data is moved into a CPU tensor, then `.to(device)`), so there is nothing to save.
_EXACT_CTORS = {"zeros", "ones", "full", "empty", "eye"}
# Same values only in integer arithmetic: CPU kernels accumulate float ranges in double
# (`acc_type<scalar_t, false>`), CUDA kernels in float (`acc_type<scalar_t, true>`).
_RANGE_CTORS = {"arange", "linspace"}
_RANDOM_CTORS = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "poisson", "multinomial"}
_TO_KEYWORDS = {"device", "dtype", "non_blocking", "copy"}
_CAST_METHODS = {"float", "double", "half", "bfloat16", "long", "int", "short", "bool", "byte", "contiguous",
                 "unsqueeze", "view", "reshape", "t"}
_DEVICE_NAME = re.compile(r"(^|_)(device|dev)$")


def _int_literals_only(call: cst.Call) -> bool:
    positional = [a for a in call.args if a.keyword is None]
    return all(isinstance(a.value, cst.Integer) for a in positional) and not any(
        a.keyword is not None and a.keyword.value == "dtype" for a in call.args
    )


# Functions that run once per model or per run: what they build is not rebuilt per step.
_ONCE_FUNCTIONS = {"__init__", "__post_init__", "setup", "reset_parameters", "_reset_parameters", "init_weights",
                   "_init_weights", "build_model", "configure_optimizers", "on_fit_start", "on_train_start"}
_REPEATED_METHODS = {"forward", "__call__", "training_step", "validation_step", "test_step", "predict_step"}


_INFERENCE_FLAGS = re.compile(r"^(reverse|inference|is_inference|generate|generation|infer|sampling|export|onnx)$")
_TRAINING_FLAGS = re.compile(r"^(training|is_training|train|is_train)$")
_INFERENCE_NAMES = re.compile(r"(^|_)(pred|predict|prediction|infer|inference|detect|export|onnx|ort|trt|warmup|"
                              r"generate|generation)(_|$)", re.I)


def _inference_only(facts: Facts, node: cst.CSTNode) -> bool:
    """`node` runs only on a path that does not train: a branch taken when a flag says
    inference (`if reverse:`, the `else` of `if not reverse:`, `if not self.training:`), or a
    function or class named for prediction, export or generation (`detect`, `predict_3D`,
    `export_onnx`, `warmup`)."""
    cur = node
    for anc in facts.ancestors(node):
        if isinstance(anc, cst.If):
            test, negated = anc.test, False
            while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, negated = test.expression, not negated
            name = (dotted(test) or "").rsplit(".", 1)[-1] if isinstance(test, (cst.Name, cst.Attribute)) else ""
            in_body = cur is anc.body
            in_else = cur is anc.orelse
            if _INFERENCE_FLAGS.match(name) and ((in_body and not negated) or (in_else and negated)):
                return True
            if _TRAINING_FLAGS.match(name) and ((in_body and negated) or (in_else and not negated)):
                return True
        if isinstance(anc, (cst.FunctionDef, cst.ClassDef)) and _INFERENCE_NAMES.search(anc.name.value):
            return True
        cur = anc
    return False


def runs_repeatedly(facts: Facts, node: cst.CSTNode, depth: int = 0) -> bool:
    """Whether `node` runs many times in a run: on every iteration of a training/eval loop or
    per-step function, in an unthrottled loop inside a function, in a model's `forward`, or in
    a function that this file calls from such code.  Module-level setup, `__init__`, code
    before the loop and helpers called once (or from nowhere in view) run once."""
    if facts.iteration_context(node) is not None:
        return True
    fn = facts.enclosing_function(node)
    if depth > 4 or (fn is not None and fn.name.value in _ONCE_FUNCTIONS):
        return False
    cur = node
    for anc in facts.ancestors(node):
        if anc is fn or isinstance(anc, (cst.ClassDef, cst.Lambda)):
            break
        if isinstance(anc, (cst.For, cst.While)) and cur is anc.body:
            if facts.runs_each_time(node, anc, nested_functions=False):
                return True
        cur = anc
    if fn is None:
        return False
    cls = facts.enclosing_class(fn)
    if cls is not None and fn.name.value in ("forward", "backward") and any(
            (facts.qualname(b.value) or dotted(b.value) or "").endswith("autograd.Function") for b in cls.bases):
        # A custom autograd Function runs when something calls `Name.apply(...)`; one nothing
        # in the file applies may be dead code (yolov7's unused ranking losses).
        return any(isinstance(a.value, cst.Name) and a.value.value == cls.name.value and a.attr.value == "apply"
                   for a in facts.index[cst.Attribute])
    if fn.name.value in _REPEATED_METHODS or facts.step_function_kind(fn) is not None:
        return True
    own_method = cls is not None and facts.parent(facts.parent(fn)) is cls
    for c in facts.calls():
        f = c.func
        if isinstance(f, cst.Name) and f.value == fn.name.value and not own_method:
            pass
        elif (own_method and isinstance(f, cst.Attribute) and f.attr.value == fn.name.value
              and isinstance(f.value, cst.Name) and f.value.value == "self"):
            pass
        else:
            continue
        if facts.is_inside(c, fn):
            continue  # recursion
        if runs_repeatedly(facts, c, depth + 1):
            return True
    return False


@register
class TensorCreatedThenMoved(Rule):
    """
    ## What it does
    Flags `torch.zeros/ones/full/empty/eye/arange/linspace(...)` and the random
    constructors (`rand`, `randn`, `randint`, `randperm`, `normal` …) directly followed by
    `.cuda()` or `.to(<device>)`.

    ## Why is this bad?
    The tensor is built in host memory, then copied: a pageable host-to-device copy that
    also synchronizes. The performance tuning guide: "Instead of calling
    `torch.rand(size).cuda()` … produce the output directly on the target device". Measured
    on CPU: `torch.randn(4e6)` takes 26.7 ms before any copy. On an H100 80GB (torch 2.11,
    `python benchmarks/rule_effects.py`; results in
    `benchmarks/results/h100/rule_effects/`): `torch.zeros(4096, 4096).to("cuda")` took 14.8
    ms and `torch.zeros(4096, 4096, device="cuda")` 0.023 ms; with `randn` 115.8 ms against
    0.042 ms (the CPU's random generation included).

    ## Example
    ```python
    mask = torch.zeros(n, n).to(device)
    noise = torch.randn(b, d).cuda()
    ```

    ## Use instead
    ```python
    mask = torch.zeros(n, n, device=device)
    noise = torch.randn(b, d, device="cuda")
    ```

    Not for data that starts in host memory: `torch.tensor(data).to(device)` and
    `torch.from_numpy(arr).to(device)` are left alone. `torch.tensor(data, device=...)` and
    `torch.as_tensor(arr, device=...)` build the same host tensor and copy it the same way
    (torch's `tensor_new.h`: the data goes into a CPU tensor, then `.to(device)`), so the
    rewrite would save nothing. When such data is a constant, build it once, outside the loop.

    ## Fix safety
    **Safe** for `zeros`, `ones`, `full`, `empty`, `eye` and integer `arange`, when the `.to`
    argument is provably a device (a string literal,
    `torch.device(...)`, or a name bound only to those) and the constructor has no
    `requires_grad=True` (moving `device=` into it would turn a non-leaf into a leaf). `.to(dev,
    dtype)` becomes `device=…, dtype=…` (safe for `zeros/ones/empty/eye`; other constructors
    would round once instead of twice). **Unsafe** for random constructors (CUDA has its own
    generator, so seeded runs draw different numbers), float `arange`/`linspace` (CPU kernels
    accumulate in double, CUDA kernels in float), and when the device is only a name such as
    `device` or `self.device`. No fix with `generator=`, `out=`, `pin_memory=`, `**kwargs`,
    `memory_format=` or a dtype given twice; never fires for `.to(dtype)`, `.to(tensor)` or
    `.to("cpu")`.

    ## Applies to
    All torch versions; any device but the CPU. Only code that runs many times: an
    unthrottled loop body, a training or evaluation step, a model's `forward`, or a function
    this file calls from one of those. A buffer built once — at module level, in `__init__`,
    before the loop, in a helper called once, or under `if step % N == 0` — costs one copy
    per run and is not reported; nor is a path that does not train (a branch taken for
    inference, `if reverse:` / `if not self.training:`, a function or class named for
    prediction, export or generation, an autograd Function nothing applies).

    Off by default. In the strict whole-repository reviews of issue 21 (three reviews, 52
    repositories), 63 PF409 findings were read: 24 right, 39 false alarms (0.38). After the
    narrowing above, 31 of them are still reported: 24 right, 7 false (0.77) — below the
    0.80 a default rule must reach. The false alarms left are per-step code of sampling and
    evaluation paths that only a call graph of the whole run could tell from training (a
    diffusion sampler's helper, a tensor per evaluation episode, a KV-cache during
    generation). Select it (`--extend-select PF409`) for code you know runs per step.

    ## References
    - PyTorch performance tuning guide, "Create tensors directly on the target device"
    - Measured (torch 2.13): `torch.zeros(3, requires_grad=True).to(...)` is not a leaf
      (`grad_fn=ToCopyBackward0`), which is why `requires_grad=True` constructors are left alone
    """

    code = "PF409"
    name = "tensor-created-then-moved"
    summary = "tensor built on the CPU, then moved to a device"
    fix_class = "safe or unsafe"
    default = False  # whole-repository review: 0.77 after narrowing (see "Applies to")
    tokens = (b"zeros", b"ones", b"full", b"empty", b"eye", b"arange", b"linspace", b"rand", b"normal",
              b"bernoulli", b"poisson", b"multinomial")

    def check(self, facts: Facts) -> Iterator[Violation]:
        for call in facts.calls():
            name = call_name(call)
            if name not in ("to", "cuda") or not isinstance(call.func, cst.Attribute):
                continue
            inner = call.func.value
            # `torch.zeros(n).float().cuda()`, `torch.ones(n)[None, :, None].to(dev)`: the
            # same CPU tensor, cast or viewed on the way (reported; no fix is offered).
            through = False
            while True:
                if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and not inner.args \
                        and inner.func.attr.value in _CAST_METHODS:
                    inner, through = inner.func.value, True
                elif isinstance(inner, cst.Subscript):
                    inner, through = inner.value, True
                else:
                    break
            if not isinstance(inner, cst.Call):
                continue
            q = facts.qualname(inner.func) or ""
            if not q.startswith("torch.") or q.count(".") != 1:
                continue
            ctor = q[len("torch."):]
            if ctor not in (_EXACT_CTORS | _RANGE_CTORS | _RANDOM_CTORS):
                continue
            rg = get_arg(inner, "requires_grad")
            if rg is not None and literal_value(rg.value) is not False:
                continue
            if get_arg(inner, "device") is not None:
                continue
            dest = self._destination(facts, call, name)
            if dest is None:
                continue
            device, dtype, strength = dest
            if not runs_repeatedly(facts, call):
                continue  # built once (module level, `__init__`, before the loop): nothing to save
            if _inference_only(facts, call):
                continue  # a prediction, export or generation path: no training step waits for it
            yield Violation(
                inner,
                f"`torch.{ctor}(...)` is built on the CPU and then copied to the device; pass `device=` to create it there",
                None if through else self._fix(facts, call, inner, ctor, device, dtype, strength),
            )

    @staticmethod
    def _destination(facts: Facts, call: cst.Call, name: str):
        """(device expr, dtype expr | None, "proven" | "named" | "nofix") or None (not a move)."""
        if name == "cuda":
            positional = [a for a in call.args if a.keyword is None]
            if any(a.star for a in call.args) or any(
                a.keyword is not None and a.keyword.value not in ("non_blocking", "device") for a in call.args
            ):
                return cst.SimpleString('"cuda"'), None, "nofix"
            dev_arg = get_arg(call, "device", 0)
            if dev_arg is None:
                return cst.SimpleString('"cuda"'), None, "proven"
            if isinstance(dev_arg.value, cst.Integer) and positional:
                return cst.SimpleString(f'"cuda:{dev_arg.value.value}"'), None, "proven"
            return cst.SimpleString('"cuda"'), None, "nofix"
        if any(a.star for a in call.args):
            return None
        positional = [a for a in call.args if a.keyword is None]
        dev_arg = get_arg(call, "device", 0)
        if dev_arg is None:
            return None  # `.to(dtype=...)` only
        dtype_arg = get_arg(call, "dtype", 1)
        ks = facts.device_kinds(dev_arg.value)
        if facts.is_device_expr(dev_arg.value):
            if ks == {"device_cpu"}:
                return None
            strength = "proven"
        else:
            target = dev_arg.value
            label = target.attr.value if isinstance(target, cst.Attribute) else (
                target.value if isinstance(target, cst.Name) else "")
            if not _DEVICE_NAME.search(label.lower()) or facts.kinds(target) & {"tensor", "output", "batch"}:
                return None
            strength = "named"
        if len(positional) > 2 or any(a.keyword is not None and a.keyword.value not in _TO_KEYWORDS for a in call.args):
            strength = "nofix"
        return dev_arg.value, (dtype_arg.value if dtype_arg is not None else None), strength

    def _fix(self, facts: Facts, call: cst.Call, inner: cst.Call, ctor: str, device, dtype, strength) -> FixPlan | None:
        if strength == "nofix" or any(a.star == "**" for a in inner.args):
            return None
        if any(a.keyword is not None and a.keyword.value in ("generator", "out", "pin_memory", "device") for a in inner.args):
            return None
        has_dtype = get_arg(inner, "dtype") is not None
        if dtype is not None and has_dtype:
            return None
        safe = strength == "proven"
        if ctor in _RANDOM_CTORS:
            safe = False
        elif ctor == "linspace" or (ctor == "arange" and not _int_literals_only(inner) and len([a for a in inner.args if a.keyword is None]) != 1):
            safe = False
        if dtype is not None and ctor not in ("zeros", "ones", "empty", "eye"):
            safe = False
        new = inner
        if dtype is not None:
            new = add_arg(new, make_kwarg("dtype", dtype))
        new = add_arg(new, make_kwarg("device", device))
        new = new.with_changes(lpar=call.lpar, rpar=call.rpar) if call.lpar else new
        return (self.safe if safe else self.unsafe)("Create it with `device=`", {call: new})


# ----------------------------------------------------------------------------------------
# PF410 — model-not-compiled
# ----------------------------------------------------------------------------------------

_NOT_TORCH_COMPILE = {"re.compile", "regex.compile"}
# Statements right after a model is built that still set it up: the compile goes after them.
_SETUP_METHODS = {"to", "cuda", "cpu", "train", "apply", "float", "half", "bfloat16", "double",
                  "load_state_dict", "requires_grad_", "init_weights", "reset_parameters"}
_CHECKPOINT_METHODS = {"state_dict", "load_state_dict", "save_pretrained"}
_NOT_MODEL_WORDS = ("loss", "criterion", "metric")


def mentions_compile(facts: Facts) -> bool:
    """Any sign that the file compiles (or decides about compiling) its model: a
    `torch.compile` call or decorator, `model.compile()`, a `compile`/`dynamo` option or
    identifier. `re.compile` and the builtin `compile(source, …)` do not count."""
    w = words(facts)
    if w.contains("dynamo", "inductor") or any("compile" in s.lower() for s in w.strings):
        return True
    for name, nodes in w.name_nodes.items():
        if "compile" not in name.lower():
            continue
        for node in nodes:
            parent = facts.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                if facts.qualname(parent) in _NOT_TORCH_COMPILE:
                    continue
            elif name == "compile" and isinstance(parent, cst.Call) and parent.func is node and not facts.lookup(name, node):
                continue  # the builtin
            elif isinstance(parent, cst.ImportAlias) and facts.qualname(node) in _NOT_TORCH_COMPILE:
                continue
            return True
    return False


def _model_binding(facts: Facts, call: cst.Call) -> tuple[str, Binding] | None:
    """The one assignment `name = <expr>` the called model comes from, outside any loop
    (inside `if __name__ == "__main__":`, a `with` or a `try` is fine: the compile goes
    into the same block)."""
    if not isinstance(call.func, cst.Name):
        return None
    name = call.func.value
    bs = facts.lookup(name, call.func)
    if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].site, cst.Assign):
        return None
    site = bs[0].site
    if len(site.targets) != 1 or not isinstance(site.targets[0].target, cst.Name) or not isinstance(site.value, cst.Call):
        return None
    scope = facts.scope_of(site)
    if any(isinstance(a, (cst.For, cst.While)) for a in facts.ancestors(site) if a is not scope and facts.is_inside(a, scope)):
        return None  # a model built per fold or per run: each new model would compile again
    if facts.qualname(site.value.func) in ("torch.compile", "torch.jit.script", "torch.jit.trace"):
        return None
    return name, bs[0]


def _setup_statement(stmt: cst.CSTNode, name: str) -> bool:
    """`model.to(device)`, `model.apply(init)`, `model = model.cuda()` …"""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    value = None
    if isinstance(small, cst.Expr):
        value = small.value
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
            and small.targets[0].target.value == name:
        value = small.value
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
        return False
    recv = value.func.value
    while isinstance(recv, cst.Call) and isinstance(recv.func, cst.Attribute):
        recv = recv.func.value
    return isinstance(recv, cst.Name) and recv.value == name and value.func.attr.value in _SETUP_METHODS


@register
class ModelNotCompiled(Rule):
    """
    ## What it does
    Flags a model that a training loop (or training step) calls with autograd on (not a
    target network run under `no_grad`, not a loss module) and that is never compiled:
    the file has no `torch.compile` call or decorator, no `model.compile()`, no
    `compile`/dynamo option. Reported at the statement that builds the model, once per
    model. Silent when input shapes may vary (`pad_sequence`, packed sequences, random-size
    crops or resizes, a custom `collate_fn`/`batch_sampler`, detection models,
    `mark_dynamic`), under training frameworks that own compilation (Lightning, Accelerate,
    DeepSpeed, the transformers Trainer …), for models built inside a loop (one compile per
    model) or bound differently on different branches,
    and when the target torch is older than 2.0. Off by default.

    ## Why is this bad?
    `torch.compile` fuses the model's element-wise work into generated kernels and cuts
    Python overhead per step, but it pays a compile on the first step (and on every new
    input shape) and does not speed up every model. The PyTorch 2.0 announcement reported
    43 % faster training on average over 163 open-source models on an A100 (cited, not
    measured here).
    Measured on this project's 2-core CPU (torch 2.13, CPU inductor, one thread, AdamW
    training step; `python benchmarks/compile_break_even.py`; eager and compiled steps
    timed in alternating blocks, median of 100 each), no GPU being available:

    | model | eager step | compiled step | compile (empty cache) | break-even | compile (warm cache) | break-even |
    |---|---|---|---|---|---|---|
    | small conv net, batch 16 × 1×64×64 | 51.9 ms | 31.8 ms (1.63×) | 18.0 s | 900 steps | 0.3 s | 13 steps |
    | 6-layer MLP (256, GELU, LayerNorm), batch 64 | 8.0 ms | 8.2 ms (0.98×) | 24.6 s | never | 0.2 s | never |

    Over three runs on the shared machine (load average 2–8) the conv net gained 1.49–1.63×
    and the MLP 0.98–1.00×; a cold compile took 18–61 s depending on the load.
    The compile costs tens of seconds once per process (a fraction of a second when the
    inductor cache on disk already holds the graphs): worth it for runs of thousands of
    steps, and only for models that actually run faster compiled — measure with
    `perflint verify` before keeping it.

    ## Example
    ```python
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Use instead
    ```python
    model = Net().to(device)
    model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Fix safety
    **Unsafe.** The fix inserts `model = torch.compile(model)` right after the statement
    that builds the model and the set-up statements that directly follow it
    (`model.to(device)`, `model.apply(init)`, `model.load_state_dict(...)` …), at the same
    indentation. The first step then takes seconds to minutes; every new input shape
    recompiles (past 8 recompiles torch falls back to eager), including shapes the same
    model sees outside training (an evaluation on full-length utterances: after the first
    recompile torch marks the changing dimension dynamic); graph breaks, unsupported
    Python, or a missing C++ compiler on CPU can raise; numerics differ from eager by
    rounding (fused kernels); and `torch.compile` returns a wrapper: `isinstance(model,
    Net)` becomes false and `model.state_dict()` keys gain an `_orig_mod.` prefix
    (verified on 2.13), which breaks loading checkpoints into an uncompiled model. So no
    fix is offered where the file reads or loads the model's state dict or saves the model
    (`state_dict`, `load_state_dict`, `save_pretrained`, `torch.save`):
    there compile in place with `model.compile()`, which keeps the keys. (Every
    `state_dict`/`load_state_dict` call and `torch.save` outside the model's set-up counts,
    since checkpoint helpers take the model as an argument.)

    ## Applies to
    Target torch ≥ 2.0 (CUDA and CPU; the inductor CPU backend needs a C++ compiler).
    Off by default: the gain depends on the model and the hardware, and the compile time
    only pays back on long runs.

    ## References
    - `torch.compile` documentation and the PyTorch 2.0 release announcement (training
      speed-up over 163 models on A100)
    - Measured: `python benchmarks/compile_break_even.py` (figures above)
    """

    code = "PF410"
    name = "model-not-compiled"
    summary = "static-shape model trained without torch.compile"
    severity = Severity.INFO
    fix_class = "unsafe"
    default = False
    min_torch = (2, 0)

    def check(self, facts: Facts) -> Iterator[Violation]:
        if not is_training_file(facts) or uses_training_framework(facts) or mentions_compile(facts):
            return
        if _variable_input_shapes(facts) or words(facts).name_contains("mark_dynamic"):
            return
        seen: dict[cst.CSTNode, str] = {}
        containers = list(facts.training_loops())
        containers += [fn for fn in facts.index[cst.FunctionDef] if facts.step_function_kind(fn) == "train"]
        for container in containers:
            for call in facts.calls_within(container):
                if not is_model_call(facts, call) or facts.grad_context(call) == "off":
                    continue  # a model only run without grad (a target network) is not trained here
                if isinstance(call.func, cst.Name) and any(w in call.func.value.lower() for w in _NOT_MODEL_WORDS):
                    continue  # a loss module with parameters (AAM-softmax): not what users compile
                found = _model_binding(facts, call)
                if found is not None and found[1].site not in seen:
                    seen[found[1].site] = found[0]
        tn = torch_module_name(facts)
        for site, name in sorted(seen.items(), key=lambda kv: facts.order.get(kv[0], 0)):
            fix = self._fix(facts, site, name, tn)
            note = "" if fix is not None else (
                " (no fix: the file saves or loads the model's state dict, whose keys `torch.compile` "
                "prefixes with `_orig_mod.`; compile in place with `model.compile()`)"
            )
            yield Violation(
                site.value,  # type: ignore[attr-defined]
                f"`{name}` is trained without `torch.compile`: with static input shapes, "
                f"`{name} = torch.compile({name})` can make each step faster after a one-off compile "
                "(measured on a CPU: 1.5–1.6× for a small conv net, no gain for a small MLP, 18–61 s to "
                "compile; verify on your hardware)" + note,
                fix,
            )

    def _fix(self, facts: Facts, site: cst.CSTNode, name: str, tn: str | None):
        if tn is None:
            return None
        where = facts.block_of(site)
        if where is None:
            return None
        block, i = where
        body = list(block.body)
        while i + 1 < len(body) and _setup_statement(body[i + 1], name):
            i += 1
        anchor = body[i]
        setup = body[where[1]:i + 1]
        for call in facts.calls():
            if call_name(call) in _CHECKPOINT_METHODS or facts.qualname(call.func) == "torch.save":
                if not any(facts.is_inside(call, st) for st in setup):
                    return None  # checkpoints: their keys would change (any receiver: helpers take the model as an argument)
        # A name used before the insertion point but bound elsewhere is fine; the same name
        # rebound later (a DDP wrap) keeps the compiled module inside.
        new = cst.parse_statement(f"{name} = {tn}.compile({name})\n")
        return self.unsafe(f"Compile `{name}` with `torch.compile`", {anchor: cst.FlattenSentinel([anchor, new])})
