"""What a value is, for the PF2 rules: on the host already (numbers, numpy, CPU tensors, a
torch factory's tensor made without `device=`), on the device (or possibly: a value a call
computed from device tensors), and the ops whose output size depends on the data, which
make the host wait for the values (`.nonzero()`, `torch.unique`, one-argument `torch.where`)."""

from __future__ import annotations

import libcst as cst

from perflint.analysis import Facts, call_name, get_arg
from perflint.analysis.vocab import SIZE_FACTORIES


DATA_SIZED = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}


def cpu_factory(facts: Facts, expr: cst.BaseExpression) -> bool:
    """`torch.randn(1).clip(-2, 2)`: a tensor a torch factory made with no `device=` (so on the
    CPU, unless the file changes the default device), through methods of it."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not facts.qualname(expr.func):
        expr = expr.func.value
    if not isinstance(expr, cst.Call):
        return False
    q = facts.qualname(expr.func) or ""
    if not (q.startswith("torch.") and q.count(".") == 1 and q[6:] in SIZE_FACTORIES) or get_arg(expr, "device") is not None:
        return False
    return not facts.calls_to("torch.set_default_device") and not facts.calls_to("torch.set_default_tensor_type")


def copied_to_host(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A name bound (once) to a chain of tensor methods that went through `.cpu()` with no
    copy back after it (`correct = pred.eq(y).cpu().sum()`): a CPU tensor, so reading it later
    costs nothing; the wait was that earlier `.cpu()`."""
    if not isinstance(expr, cst.Name):
        return False
    bs = facts.lookup(expr.value, expr)
    if len(bs) != 1 or bs[0].how != "expr":
        return False
    node = bs[0].node
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not facts.qualname(node.func):
        name = call_name(node)
        if name in ("to", "cuda"):
            return False
        if name == "cpu" and not node.args:
            return True
        node = node.func.value
    return False


def of_data_sized(facts: Facts, expr: cst.BaseExpression) -> bool:
    """An element of what `.nonzero()`, `torch.unique(...)`, one-argument `torch.where` …
    returned (`idx = mask.nonzero(); idx[k].item()`): sizing that output already waited for
    the values, so reading one costs nothing more."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    if isinstance(expr, cst.Name):
        bs = facts.lookup(expr.value, expr)
        if len(bs) != 1 or bs[0].how != "expr":
            return False
        expr = bs[0].node
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    if not isinstance(expr, cst.Call):
        return False
    name = call_name(expr)
    return name in DATA_SIZED or (name == "where" and len(expr.args) == 1
                                  and (facts.qualname(expr.func) or "").startswith("torch."))


def maybe_on_device(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A device tensor, or a value of unknown kind that a call computed from one."""
    return device_tensor(facts, expr) or (not facts.kinds(expr) and computed_from_device(facts, expr, 0))


def sized_by_data(facts: Facts, call: cst.Call) -> bool:
    """An op whose output size depends on the values (the host waits for them to size it):
    `.nonzero()`, `torch.unique(x)`, `torch.where(cond)` with one argument …, of a value that
    may be on the device."""
    name = call_name(call)
    q = facts.qualname(call.func) or ""
    if q.startswith("torch.") and (name in DATA_SIZED or (name == "where" and len(call.args) == 1)):
        return bool(call.args) and maybe_on_device(facts, call.args[0].value)
    if isinstance(call.func, cst.Attribute) and name in DATA_SIZED and not q.startswith(("numpy.", "np.")):
        return maybe_on_device(facts, call.func.value)
    return False


def host_value(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A value known to live on the host already: numbers, numpy, CPU tensors."""
    ks = facts.kinds(expr)
    if not ks:
        return False
    if ks & {"number", "numpy", "int"} and not ks & {"tensor", "loss", "output"}:
        return True
    if "cpu_tensor" in ks and "device_tensor" not in ks:
        return True
    if "batch" in ks and "device_tensor" not in ks and not ks & {"loss", "output"}:
        return True  # straight from the DataLoader: still on the CPU
    return False


def device_tensor(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A tensor that is (or may be) on the accelerator: losses, model outputs, torch results
    that are not known CPU tensors, batches after `.to(device)`."""
    ks = facts.kinds(expr)
    if host_value(facts, expr):
        return False
    return bool(ks & {"loss", "output", "device_tensor"}) or ("tensor" in ks and "cpu_tensor" not in ks)


def computed_from_device(facts: Facts, expr: cst.BaseExpression, depth: int) -> bool:
    """`expr` (a name, or an element or attribute of one) was returned by a call given a
    device tensor."""
    while isinstance(expr, (cst.Subscript, cst.Attribute)):
        expr = expr.value
    if not isinstance(expr, cst.Name) or depth > 3:
        return False
    bindings = facts.lookup(expr.value, expr)
    if not bindings:
        return False
    for b in bindings:
        if b.how not in ("expr", "unpack") or not isinstance(b.node, cst.Call):
            return False
        if not any(device_tensor(facts, a.value) or unpacked_device(facts, a.value)
                   or computed_from_device(facts, a.value, depth + 1) for a in b.node.args):
            return False
    return True


def unpacked_device(facts: Facts, expr: cst.BaseExpression) -> bool:
    """A name bound by unpacking a tuple written out, whose element is a device tensor:
    `x, lengths = batch["x"].cuda(), batch["len"].cuda()`."""
    if not isinstance(expr, cst.Name):
        return False
    bs = facts.lookup(expr.value, expr)
    if len(bs) != 1 or bs[0].how != "unpack" or len(bs[0].index) != 1 or not isinstance(bs[0].node, (cst.Tuple, cst.List)):
        return False
    elements = bs[0].node.elements
    i = bs[0].index[0]
    return 0 <= i < len(elements) and not isinstance(elements[i], cst.StarredElement) \
        and device_tensor(facts, elements[i].value)
