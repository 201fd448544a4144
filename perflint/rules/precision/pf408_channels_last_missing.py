"""PF408 channels-last-missing: conv net trained under AMP without channels_last."""

from __future__ import annotations

from typing import Iterator

from perflint.diagnostics import Severity
from perflint.analysis import Facts
from perflint.rules.base import Rule, Violation
from perflint.rules.common import is_training_file, words
from perflint.rules.precision.helpers import first_torch_import, has_conv_layers


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
        if anchor is None or not facts.filewide.uses_autocast or not facts.devices.is_cuda_code or not is_training_file(facts):
            return
        if words(facts).name_contains("channels_last") or not has_conv_layers(facts, two_d=True):
            return
        yield Violation(
            anchor,
            "2-D conv net trained under AMP in NCHW: convert the model and inputs with "
            "`.to(memory_format=torch.channels_last)` for faster tensor-core convolutions",
        )
