"""Messages of the settings rules say what the code does (issue 21, class 7)."""

from __future__ import annotations

from perflint.engine import LintOptions, lint_bytes

FROZEN_ONLY = b'''
import torch
import torchvision

vgg = torchvision.models.vgg16().cuda().requires_grad_(False)
latent_model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.Adam(latent_model.parameters())
for step in range(10):
    x = torch.randn(4, 3, 64, 64, device="cuda")
    loss = vgg(x).mean() + latent_model(torch.randn(4, 8, device="cuda")).mean()
    loss.backward()
    opt.step()
'''


def test_a_frozen_feature_network_is_not_called_trained():
    result = lint_bytes("t.py", FROZEN_ONLY, LintOptions(codes=("PF406",), prefilter=False))
    [d] = result.diagnostics
    assert "frozen network" in d.message and "not trained" in d.message
