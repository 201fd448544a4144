"""The facts layer, on small snippets: names, kinds, loops, per-iteration code, devices."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from perflint.analysis import Facts, call_name


def facts_of(src: str, target=(2, 4)) -> Facts:
    return Facts(cst.parse_module(textwrap.dedent(src)), target)


def calls_named(f: Facts, name: str) -> list[cst.Call]:
    return [c for c in f.tree.calls() if call_name(c) == name]


def first(seq):
    assert seq, "nothing matched"
    return seq[0]


# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "imports, expr, expected",
    [
        ("import torch.nn.functional as F", "F.relu", "torch.nn.functional.relu"),
        ("from torch.nn import functional as F", "F.relu", "torch.nn.functional.relu"),
        ("from torch.optim import AdamW", "AdamW", "torch.optim.AdamW"),
        ("from torch.optim.adamw import AdamW", "AdamW", "torch.optim.AdamW"),
        ("from torch import nn", "nn.ReLU", "torch.nn.ReLU"),
        ("from torch.nn.modules.activation import ReLU", "ReLU", "torch.nn.ReLU"),
        ("import torch.utils.data", "torch.utils.data.DataLoader", "torch.utils.data.DataLoader"),
        ("import torch.utils.data as tud", "tud.DataLoader", "torch.utils.data.DataLoader"),
        ("from torch.utils.data import DataLoader as DL", "DL", "torch.utils.data.DataLoader"),
        ("from torch.utils.data.dataloader import DataLoader", "DataLoader", "torch.utils.data.DataLoader"),
        ("import torch as T", "T.autocast", "torch.amp.autocast"),
        ("from torch.cuda.amp import autocast", "autocast", "torch.cuda.amp.autocast"),
        ("from torch.utils.data import DataLoader\nLoader = DataLoader", "Loader", "torch.utils.data.DataLoader"),
    ],
)
def test_names_resolve_through_imports_and_aliases(imports, expr, expected):
    f = facts_of(f"{imports}\nx = {expr}\n")
    value = f.module.body[-1].body[0].value
    assert f.tree.qualname(value) == expected


def test_relative_and_unknown_names_do_not_resolve():
    f = facts_of("from .data import DataLoader\nx = DataLoader\ny = foo.bar\n")
    assert f.tree.qualname(f.module.body[1].body[0].value) is None
    assert f.tree.qualname(f.module.body[2].body[0].value) is None


# -- kinds ---------------------------------------------------------------------------------


def test_loader_batch_model_optimizer_loss_scaler_kinds():
    f = facts_of(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader
        from tqdm import tqdm

        class Net(nn.Module):
            pass

        model = Net().cuda()
        loader = DataLoader(ds, batch_size=4)
        opt = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler("cuda")
        criterion = nn.CrossEntropyLoss()
        for step, (x, y) in enumerate(tqdm(loader)):
            out = model(x)
            loss = criterion(out, y)
            value = loss.item()
        """
    )
    loop = first(f.tree.index[cst.For])
    body_names = {n.value: n for n in _names(loop)}
    assert f.kinds.has_kind(body_names["x"], "batch", weak=False)
    assert f.kinds.has_kind(body_names["out"], "output", weak=False)
    assert f.kinds.has_kind(body_names["loss"], "loss", weak=False)
    assert "number" in f.kinds.of(body_names["value"])
    opt = first(calls_named(f, "AdamW"))
    assert "optimizer" in f.kinds.of(opt)
    assert "scaler" in f.kinds.of(first(calls_named(f, "GradScaler")))
    assert "model" in f.kinds.of(first([c for c in f.tree.calls() if call_name(c) == "cuda"]))


def test_self_attributes_set_in_init_keep_their_kind():
    f = facts_of(
        """
        import torch
        from torch.utils.data import DataLoader

        class Trainer:
            def __init__(self, ds):
                self.train_loader = DataLoader(ds)
                self.optimizer = torch.optim.SGD([], lr=0.1)

            def fit(self):
                for batch in self.train_loader:
                    self.optimizer.step()
        """
    )
    loop = first(f.tree.index[cst.For])
    assert f.loops.iterates_loader(loop, weak=False)
    assert f.loops.loop_kind(loop) == "train"


def test_accelerate_prepare_unpacking_keeps_kinds():
    f = facts_of(
        """
        from torch.utils.data import DataLoader
        loader = DataLoader(ds)
        model, loader2 = accelerator.prepare(model, loader)
        for batch in loader2:
            pass
        """
    )
    assert f.loops.iterates_loader(first(f.tree.index[cst.For]), weak=False)


def test_parameter_names_are_weak_evidence_only():
    f = facts_of("def run(model, train_loader):\n    for b in train_loader:\n        model(b)\n")
    loop = first(f.tree.index[cst.For])
    assert f.loops.iterates_loader(loop) and not f.loops.iterates_loader(loop, weak=False)
    assert f.loops.loop_kind(loop) == "eval"


def test_factory_function_names_are_not_models():
    f = facts_of("m = get_model()\nout = m(x)\n")
    assert not f.kinds.has_kind(f.module.body[1].body[0].value, "output")


def test_reaching_binding_beats_other_loops_binding_the_same_name():
    f = facts_of(
        """
        from torch.utils.data import DataLoader
        import numpy as np
        for x in DataLoader(ds):
            x = x.cuda()
        for x in np.arange(3):
            y = x.item()
        """
    )
    second = f.tree.index[cst.For][1]
    item = first([c for c in f.tree.calls_within(second) if call_name(c) == "item"])
    ks = f.kinds.of(item.func.value)
    assert "batch" not in ks


# -- loops -----------------------------------------------------------------------------------


def test_training_eval_and_epoch_loops_are_told_apart():
    f = facts_of(
        """
        import torch
        from torch.utils.data import DataLoader
        train_loader = DataLoader(a)
        val_loader = DataLoader(b)
        for epoch in range(3):
            for x, y in train_loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            for x, y in val_loader:
                model(x)
        """
    )
    epoch, train, val = f.tree.index[cst.For]
    assert f.loops.loop_kind(epoch) is None
    assert f.loops.loop_kind(train) == "train"
    assert f.loops.loop_kind(val) == "eval"


def test_while_loop_with_next_and_backward_is_training():
    f = facts_of("it = iter(loader)\nwhile step < n:\n    b = next(it)\n    model(b).sum().backward()\n    opt.step()\n")
    assert f.loops.loop_kind(first(f.tree.index[cst.While])) == "train"


@pytest.mark.parametrize("update, trains", [
    ("", False),  # gradients for analysis: head importance, saliency, a perturbation
    ("optimizer.step()", True),
    ("p.data -= 0.1 * p.grad", True),
    ("p.data.add_(p.grad, alpha=-0.1)", True),
    ("importance += mask.grad.abs()", False),
])
def test_backward_is_training_only_where_something_updates_parameters(update, trains):
    src = ("for b in loader:\n    loss = model(b).sum()\n    loss.backward()\n"
           + (f"    for p in model.parameters():\n        {update}\n" if update.startswith("p.") else
              f"    {update}\n" if update else ""))
    f = facts_of(src)
    assert (f.loops.loop_kind(first(f.tree.index[cst.For])) == "train") is trains


def test_rl_env_step_loop_is_not_training():
    f = facts_of("for t in range(100):\n    obs, r, done, info = env.step(action)\n")
    assert f.loops.loop_kind(first(f.tree.index[cst.For])) is None


def test_scheduler_step_alone_does_not_make_a_training_loop():
    f = facts_of("for epoch in range(3):\n    scheduler.step()\n")
    assert f.loops.loop_kind(first(f.tree.index[cst.For])) is None


# -- per-iteration code ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "guard, per_iteration",
    [
        ("if step % 50 == 0:", False),
        ("if not step % 10:", False),
        ("if (step + 1) % accum == 0:", False),
        ("if step == 0:", False),
        ("if i == len(loader) - 1:", False),
        ("if is_last_batch:", False),
        ("if args.log_every_step:", False),
        ("if self.config.debug:", False),
        ("if loss_ok:", True),
        ("if mode == 'train':", True),
        ("if accelerator.is_main_process:", True),
    ],
)
def test_throttled_branches_are_not_every_iteration(guard, per_iteration):
    f = facts_of(
        f"""
        for step, batch in enumerate(loader):
            loss = model(batch)
            loss.backward()
            {guard}
                v = loss.item()
        """
    )
    item = first(calls_named(f, "item"))
    assert (f.loops.iteration_context(item) is not None) is per_iteration


def test_else_of_a_throttled_branch_runs_every_iteration():
    f = facts_of(
        """
        for step, batch in enumerate(loader):
            model(batch).backward()
            if step % 10 == 0:
                pass
            else:
                v = t.item()
        """
    )
    assert f.loops.iteration_context(first(calls_named(f, "item"))) is not None


@pytest.mark.parametrize(
    "body",
    [
        "if step > 100:\n        v = t.item()\n        break",
        "try:\n        pass\n    except ValueError:\n        v = t.item()",
        "def helper():\n        return t.item()",
    ],
)
def test_once_only_handler_and_nested_def_code_is_not_per_iteration(body):
    f = facts_of(f"for step, b in enumerate(loader):\n    model(b).backward()\n    {body}\n")
    assert f.loops.iteration_context(first(calls_named(f, "item"))) is None


def test_step_functions_and_lightning_hooks_are_per_iteration():
    f = facts_of(
        """
        def train_step(batch):
            loss = model(batch)
            loss.backward()
            return loss.item()

        class M:
            def training_step(self, batch, idx):
                return self.net(batch).item()

        def test_backward_once():
            loss = model(x)
            loss.backward()
            return loss.item()
        """
    )
    items = calls_named(f, "item")
    assert f.loops.iteration_context(items[0]).kind == "train"
    assert f.loops.iteration_context(items[1]).kind == "train"
    assert f.loops.iteration_context(items[2]) is None


# -- devices, grad mode, file facts ---------------------------------------------------------------


def test_device_expressions():
    f = facts_of(
        """
        import torch
        a = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        b = "mps"
        c = torch.device("cuda:1")
        """
    )
    values = [stmt.body[0].value for stmt in f.module.body[1:]]
    assert f.devices.is_provably_cuda(values[0])
    assert not f.devices.is_provably_cuda(values[1]) and f.devices.device_kinds(values[1]) == {"device_other"}
    assert f.devices.is_provably_cuda(values[2])


@pytest.mark.parametrize(
    "src, cuda",
    [
        ("import torch\nx = torch.zeros(3).cuda()\n", True),
        ("import torch\nd = 'cuda:0'\n", True),
        ("import torch\nok = torch.cuda.is_available()\n", True),
        ("import torch\nx = torch.zeros(3)\n", False),
    ],
)
def test_cuda_code(src, cuda):
    assert facts_of(src).devices.is_cuda_code is cuda


def test_grad_context_through_with_and_decorators():
    f = facts_of(
        """
        import torch
        with torch.no_grad():
            a = model(x)
        @torch.inference_mode()
        def f():
            return model(x)
        with torch.set_grad_enabled(train):
            c = model(x)
        d = model(x)
        """
    )
    calls = [c for c in f.tree.calls() if getattr(c.func, "value", None) == "model"]
    assert [f.grad.grad_context(c) for c in calls] == ["off", "off", "unknown", None]


def _names(node):
    from perflint.analysis import iter_nodes

    seen = {}
    for n in iter_nodes(node):
        if isinstance(n, cst.Name) and n.value not in seen:
            seen[n.value] = n
    return list(seen.values())
