"""Adding a keyword argument keeps the call's layout: one line stays one line, one argument
per line stays so (with or without a trailing comma), whatever the first line looks like."""

from __future__ import annotations

import libcst as cst
import pytest

from perflint.edits import add_arg, make_kwarg


def _add(src: str) -> str:
    module = cst.parse_module(src)

    class T(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            if isinstance(updated.func, cst.Name) and updated.func.value == "DataLoader":
                return add_arg(updated, make_kwarg("persistent_workers", "True"))
            return updated

    return module.visit(T()).code


@pytest.mark.parametrize(
    "src, expected",
    [
        ("x = DataLoader(ds, num_workers=4)\n", "x = DataLoader(ds, num_workers=4, persistent_workers=True)\n"),
        ("x = DataLoader()\n", "x = DataLoader(persistent_workers=True)\n"),
        (
            "x = DataLoader(\n    ds,\n    num_workers=4,\n)\n",
            "x = DataLoader(\n    ds,\n    num_workers=4,\n    persistent_workers=True,\n)\n",
        ),
        (   # the first line packs two arguments; the rest are one per line, trailing comma
            "x = DataLoader(\n    ds, sampler=s,\n    num_workers=4,\n    drop_last=True,\n)\n",
            "x = DataLoader(\n    ds, sampler=s,\n    num_workers=4,\n    drop_last=True,\n    persistent_workers=True,\n)\n",
        ),
        (   # no trailing comma, `)` on its own line
            "x = DataLoader(\n    ds,\n    num_workers=4\n)\n",
            "x = DataLoader(\n    ds,\n    num_workers=4,\n    persistent_workers=True\n)\n",
        ),
        (   # a single argument on its own line
            "x = DataLoader(\n    ds,\n)\n",
            "x = DataLoader(\n    ds,\n    persistent_workers=True,\n)\n",
        ),
        (   # comments stay on their own arguments and are not copied
            "x = DataLoader(\n    ds,  # data\n    num_workers=4,  # cores\n)\n",
            "x = DataLoader(\n    ds,  # data\n    num_workers=4,  # cores\n    persistent_workers=True,\n)\n",
        ),
        (
            "x = DataLoader(\n    ds,  # data\n    num_workers=4\n)\n",
            "x = DataLoader(\n    ds,  # data\n    num_workers=4,\n    persistent_workers=True\n)\n",
        ),
    ],
)
def test_add_arg_keeps_the_layout(src, expected):
    assert _add(src) == expected


# ----------------------------------------------------------------------------------------
# Settings inserted once per file (PF405/PF406): after the imports, with a blank line.
# ----------------------------------------------------------------------------------------

_TRAIN = (
    "model = torch.nn.Linear(4, 4).cuda()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for step in range(3):\n"
    "    model(torch.randn(2, 4).cuda()).sum().backward()\n"
    "    opt.step()\n"
)
_TF32 = 'torch.set_float32_matmul_precision("high")\n'


def _settings(src: str, codes=("PF405",)) -> str:
    from cli_support import fix_source

    return fix_source(src, unsafe=True, codes=list(codes))


@pytest.mark.parametrize(
    "head, expected",
    [
        (   # module docstring, `from __future__`, imports, a blank line, code
            '"""Train."""\nfrom __future__ import annotations\n\nimport os\nimport torch\n\n',
            '"""Train."""\nfrom __future__ import annotations\n\nimport os\nimport torch\n\n' + _TF32 + "\n",
        ),
        (   # code right after the imports: the setting is set off from the imports
            "import torch\n",
            "import torch\n\n" + _TF32,
        ),
        (   # try/except imports belong to the imports
            "import torch\n\ntry:\n    import wandb\nexcept ImportError:\n    wandb = None\n\n",
            "import torch\n\ntry:\n    import wandb\nexcept ImportError:\n    wandb = None\n\n" + _TF32 + "\n",
        ),
        (   # setup code between imports (sys.path) is part of the header
            "import sys\nsys.path.insert(0, '..')\nimport torch\n\n",
            "import sys\nsys.path.insert(0, '..')\nimport torch\n\n" + _TF32 + "\n",
        ),
        (   # an existing setting after the imports: the new one joins it
            "import torch\n\ntorch.backends.cudnn.benchmark = True\n\n",
            "import torch\n\ntorch.backends.cudnn.benchmark = True\n" + _TF32 + "\n",
        ),
        (   # comments above the code stay with the code
            "import torch\n\n# the model\n",
            "import torch\n\n" + _TF32 + "\n# the model\n",
        ),
    ],
)
def test_setting_goes_after_the_imports_with_a_blank_line(head, expected):
    assert _settings(head + _TRAIN) == expected + _TRAIN


def test_setting_goes_before_the_training_code_even_with_a_late_import():
    src = "import torch\n\n" + _TRAIN + "import json\nprint(json.dumps({}))\n"
    assert _settings(src) == "import torch\n\n" + _TF32 + "\n" + _TRAIN + "import json\nprint(json.dumps({}))\n"


def test_both_settings_are_grouped_after_the_imports():
    fixed = _settings("import torch\nimport torch.nn as nn\n\n" + _TRAIN.replace("torch.nn.Linear(4, 4)", "nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.Linear(4, 4))"),
                      codes=("PF405", "PF406"))
    head = fixed.split("model = ")[0]
    assert head in (
        "import torch\nimport torch.nn as nn\n\n" + _TF32 + "torch.backends.cudnn.benchmark = True\n\n",
        "import torch\nimport torch.nn as nn\n\ntorch.backends.cudnn.benchmark = True\n" + _TF32 + "\n",
    ), head


def test_setting_never_goes_after_a_main_guard():
    src = "import torch\n\n" + _TRAIN.replace("\n", "\n    ").replace("model = ", "if __name__ == '__main__':\n    import json\n    model = ", 1).rstrip() + "\n"
    fixed = _settings(src)
    assert fixed.startswith("import torch\n\n" + _TF32 + "\nif __name__"), fixed


def test_setting_keeps_the_file_line_endings():
    src = ('"""Train."""\nimport torch\n\n' + _TRAIN).replace("\n", "\r\n")
    fixed = _settings(src)
    assert fixed == ('"""Train."""\nimport torch\n\n' + _TF32 + "\n" + _TRAIN).replace("\n", "\r\n")
