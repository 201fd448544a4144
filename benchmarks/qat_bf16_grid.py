"""How many fake-quantized values stay on the int8 grid through bfloat16 (PF403's silence in
quantization-aware training). Fake quantization snaps a tensor to `scale * k` for integer
`k`; under bf16 autocast the next layer sees those values rounded to bfloat16's 8 significant
bits. CPU only:

    python benchmarks/qat_bf16_grid.py
"""

import torch


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(100_000)
    print("| scale | values off the int8 grid after a bfloat16 round trip |")
    print("|---|---|")
    for scale in (0.0123, 0.05, 0.1, 0.25):
        fq = torch.fake_quantize_per_tensor_affine(x, scale, 0, -128, 127)
        k = fq.to(torch.bfloat16).float() / scale
        off = (k - k.round()).abs() > 1e-3
        print(f"| {scale} | {off.float().mean().item() * 100:.1f} % |")


if __name__ == "__main__":
    main()
