"""PF401–PF409 and PF501–PF503: metadata, docs, the byte prefilter, and fixes that meet."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest

from fixture_support import FIXTURES
from perflint.diagnostics import Severity
from cli_support import fix_source
from perflint.engine import LintOptions, lint_bytes
from perflint.rules import FixClass, all_rules

CODES = ["PF401", "PF403", "PF404", "PF405", "PF406", "PF407", "PF408", "PF409", "PF501", "PF502", "PF503"]
SECTIONS = ["What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "Applies to", "References"]


def test_metadata():
    rules = all_rules()
    expected = {
        # code: (severity, fix class, default, min_torch)
        "PF401": (Severity.WARNING, "unsafe", False, None),
        "PF403": (Severity.INFO, "unsafe", False, (1, 6)),
        "PF404": (Severity.ERROR, "none", True, None),
        "PF405": (Severity.INFO, "unsafe", False, (1, 12)),  # off by default (issue 21 review: 0.60 tuned, 0/5 held out)
        "PF406": (Severity.WARNING, "unsafe", False, None),  # off by default (whole-repository reviews)
        "PF407": (Severity.WARNING, "none", True, (2, 0)),
        "PF408": (Severity.INFO, "none", False, None),
        "PF409": (Severity.WARNING, "safe or unsafe", False, None),  # off by default (issue 21 review: 0.77)
        "PF501": (Severity.WARNING, "unsafe", True, None),
        "PF502": (Severity.WARNING, "unsafe", True, None),
        "PF503": (Severity.WARNING, "none", False, (0, 4)),  # no DDP launcher before 0.4; off by default (whole-repository reviews)
    }
    for code, (severity, fix_class, default, min_torch) in expected.items():
        rule = rules[code]
        assert (rule.severity, rule.fix_class, rule.default, rule.min_torch) == (severity, fix_class, default, min_torch), code
        assert rule.max_torch is None


@pytest.mark.parametrize("code", CODES)
def test_doc_has_the_house_sections(code):
    doc = all_rules()[code].doc()
    heads = re.findall(r"^## (.+)$", doc, flags=re.M)
    assert heads == SECTIONS, heads
    why = doc.split("## Why is this bad?")[1].split("## Example")[0]
    assert "not measured" in why.lower() or re.search(r"\d", why), "cite a number or say it is not measured"
    safety = doc.split("## Fix safety")[1].split("## Applies to")[0]
    fix_class = all_rules()[code].fix_class
    if fix_class is FixClass.NONE:
        assert safety.strip().startswith("No fix")
    else:
        words = [w for w, offered in (("safe", fix_class.offers_safe), ("unsafe", fix_class.offers_unsafe)) if offered]
        for word in words:
            assert f"**{word.capitalize()}" in safety or f"**{word}" in safety.lower()


_ALL_FIXTURES = sorted(
    p for p in (FIXTURES / "rules").glob("*.py") if not p.name.endswith((".fixed.py", ".unsafe.py"))
)


@pytest.mark.parametrize("code", CODES)
def test_prefilter_tokens_cover_every_finding(code):
    """A file that contains none of a rule's tokens must never produce that rule's finding:
    lint every fixture (of every rule) without the prefilter and check."""
    rule = all_rules()[code]
    for path in _ALL_FIXTURES:
        raw = path.read_bytes()
        result = lint_bytes(str(path), raw, LintOptions(codes=(code,), target_torch=(2, 13), prefilter=False))
        if result.diagnostics:
            assert any(tok in raw for tok in rule.tokens), path.name


def test_prefilter_skips_files_without_tokens():
    text = "import numpy as np\n\nx = np.zeros(3)\n"
    result = lint_bytes("x.py", text.encode(), LintOptions(codes=("PF501", "PF502", "PF503"), prefilter=True))
    assert result.skipped


@pytest.mark.parametrize(
    "code,target,fires",
    [("PF403", (1, 5), False), ("PF403", (1, 9), True), ("PF403", (2, 4), True), ("PF405", (1, 11), False),
     ("PF405", (1, 12), True), ("PF407", (1, 13), False), ("PF407", (2, 0), True)],
)
def test_version_gates_read_the_target(code, target, fires):
    text = textwrap.dedent(
        """
        import torch
        model = torch.nn.Linear(8, 8).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(10):
            f = torch.compile(model)
            loss = f(torch.randn(2, 8).cuda()).sum()
            loss.backward()
            opt.step()
        """
    )
    result = lint_bytes("t.py", text.encode(), LintOptions(codes=(code,), target_torch=target, prefilter=False))
    assert bool(result.diagnostics) is fires


TRAIN_SCRIPT = '''\
"""Everything at once: the fixes of different rules must meet cleanly."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))
        return self.fc(h.flatten(1))


device = torch.device("cuda")
model = Net().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 10, (64,))), batch_size=8)
rir = np.random.randn(4000)

for epoch in range(2):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        bias = torch.zeros(10).to(device)
        out = model(x) + bias
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    echo = np.convolve(np.random.randn(16000), rir)
'''


@pytest.mark.parametrize("unsafe", [False, True])
def test_all_fixes_together_parse_and_settle(unsafe):
    fixed = fix_source(TRAIN_SCRIPT, unsafe=unsafe, codes=CODES)
    ast.parse(fixed)
    assert fix_source(fixed, unsafe=unsafe, codes=CODES) == fixed
    assert "torch.zeros(10, device=device)" in fixed
    if unsafe:
        for piece in (
            'from torch.utils.data import DataLoader, TensorDataset\nimport scipy.signal\n\n'
            'torch.backends.cudnn.benchmark = True\ntorch.set_float32_matmul_precision("high")\n\n',
            "F.relu(self.bn(self.conv(x)), inplace=True)",
            'with torch.autocast("cuda", dtype=torch.bfloat16):\n            out = model(x) + bias\n'
            "            loss = F.cross_entropy(out, y)\n        loss.backward()",
            "scipy.signal.fftconvolve(np.random.randn(16000), rir)",
        ):
            assert piece in fixed, piece
    else:
        assert "autocast" not in fixed and "inplace" not in fixed


def test_pf403_fix_keeps_comments_and_blank_lines():
    src = textwrap.dedent(
        """\
        import torch

        model = torch.nn.Linear(4, 4).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(2, 4).cuda()

            # the forward pass
            out = model(x)  # logits

            # loss, then backward
            loss = out.square().mean()
            loss.backward()
            opt.step()
        """
    )
    fixed = fix_source(src, unsafe=True, codes=["PF403"])
    assert fixed == src.replace(
        "\n    # the forward pass\n    out = model(x)  # logits\n\n    # loss, then backward\n    loss = out",
        '\n    # the forward pass\n    with torch.autocast("cuda", dtype=torch.bfloat16):\n        out = model(x)  # logits\n'
        "\n        # loss, then backward\n        loss = out",
    )


def test_pf405_respects_an_existing_torch_alias_only_at_top_level():
    src = textwrap.dedent(
        """\
        def main():
            import torch
            model = torch.nn.Linear(4, 4).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(3):
                model(torch.randn(2, 4).cuda()).sum().backward()
                opt.step()
        """
    )
    result = lint_bytes("t.py", src.encode(), LintOptions(codes=("PF405",), prefilter=False, with_edits=True))
    assert [d.code for d in result.diagnostics] == ["PF405"]
    assert result.diagnostics[0].fix is None  # no module-level name to call it through


def test_every_rule_has_a_silent_fixture():
    """Each rule ships at least one `expect=none` file or marks must-not-fire cases inline."""
    for code in CODES:
        texts = [p.read_text() for p in (FIXTURES / "rules").glob(f"{code}*.py") if not p.name.endswith((".fixed.py", ".unsafe.py"))]
        assert any("expect=none" in t or "must not fire" in t.lower() or "must not" in t.lower() for t in texts), code
