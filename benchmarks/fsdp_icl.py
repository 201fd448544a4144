"""The ICL fine-tune workload on perflint's trainer with FSDP2 and bf16: time per step, throughput, memory.

Runs `fixtures/workloads/icl_finetune.py`'s model and data (the trainer version's AdamW
groups, clipping and schedule) on `Trainer(strategy="fsdp")` for `--warmup` steps, then
times `--steps` more (the device synchronised before and after), and prints a table and
writes JSON to `--out` from rank 0.

    torchrun --standalone --nproc_per_node 1 benchmarks/fsdp_icl.py --out benchmarks/results/fsdp_icl.json

On the CPU (a check that it runs, not a GPU figure):

    torchrun --standalone --nproc_per_node 1 benchmarks/fsdp_icl.py --device cpu --precision fp32 \\
        --steps 2 --warmup 1 --batch-size 2 --block-size 32 --num-workers 0 --out /tmp/fsdp_icl.json
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "runtime"))
sys.path.insert(0, str(ROOT / "fixtures" / "workloads"))

from icl_finetune import PackedICLPrompts, TinyGPT, cosine_schedule  # noqa: E402
from perflint_runtime import Trainer  # noqa: E402

VOCAB_SIZE = 72  # as fixtures/workloads/on_trainer/icl_finetune.py


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="bf16", choices=["auto", "fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=50, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=10, help="optimizer steps before timing")
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--num-workers", type=int, default=None, help="default: the trainer's choice")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def lm_loss(model, batch):
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv=None) -> dict:
    args = parse_args(argv)
    trainer = Trainer(device=args.device, precision=args.precision, strategy="fsdp", seed=args.seed,
                      grad_accum_steps=args.grad_accum, max_grad_norm=1.0, log_every=10**9, progress=False,
                      activation_checkpointing=args.activation_checkpointing)
    total_steps = args.warmup + args.steps
    blocks_needed = total_steps * args.grad_accum * args.batch_size * trainer.world_size
    loader_options = {} if args.num_workers is None else {"num_workers": args.num_workers}
    loader = trainer.dataloader(PackedICLPrompts(blocks_needed, args.block_size, VOCAB_SIZE, seed=args.seed),
                                args.batch_size, shuffle=True, drop_last=True, **loader_options)
    model = trainer.setup_model(TinyGPT(VOCAB_SIZE, args.block_size, d_model=args.d_model, n_layers=args.layers,
                                        n_heads=args.heads))
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = trainer.setup_optimizer(
        torch.optim.AdamW, [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_schedule(min(100, total_steps // 10 + 1),
                                                                             total_steps))

    trainer.fit(model, optimizer, loader, lm_loss, steps=args.warmup, scheduler=scheduler)
    synchronize(trainer.device)
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(trainer.device)
    start = time.perf_counter()
    metrics = trainer.fit(model, optimizer, loader, lm_loss, steps=total_steps, scheduler=scheduler)
    synchronize(trainer.device)
    elapsed = time.perf_counter() - start

    samples = args.steps * args.grad_accum * args.batch_size * trainer.world_size
    if trainer.device.type == "cuda":
        device_name = torch.cuda.get_device_name(trainer.device)
        peak_gib, memory_kind = torch.cuda.max_memory_allocated(trainer.device) / 2**30, "cuda max_memory_allocated"
    else:
        device_name = platform.processor() or platform.machine()
        peak_gib, memory_kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "peak RSS of rank 0"
    result = {
        "benchmark": "fsdp_icl",
        "command": " ".join(sys.argv),
        "torch_version": torch.__version__,
        "device": trainer.device.type,
        "device_name": device_name,
        "world_size": trainer.world_size,
        "strategy": trainer.strategy,
        "precision": trainer.precision,
        "activation_checkpointing": args.activation_checkpointing,
        "parameters": n_params,
        "batch_size_per_process": args.batch_size,
        "block_size": args.block_size,
        "grad_accum_steps": args.grad_accum,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "ms_per_step": elapsed * 1e3 / args.steps,
        "samples_per_s": samples / elapsed,
        "tokens_per_s": samples * args.block_size / elapsed,
        "peak_memory_gib": peak_gib,
        "memory_kind": memory_kind,
        "last_loss": metrics.get("loss"),
    }
    if trainer.is_main:
        rows = [("torch", result["torch_version"]), ("device", f"{device_name} × {trainer.world_size}"),
                ("strategy / precision", f"fsdp / {trainer.precision}"),
                ("parameters", f"{n_params:,}"),
                ("timed steps", f"{args.steps} (after {args.warmup} warm-up)"),
                ("ms/step", f"{result['ms_per_step']:.2f}"),
                ("samples/s", f"{result['samples_per_s']:,.0f}"),
                ("tokens/s", f"{result['tokens_per_s']:,.0f}"),
                (f"peak memory ({memory_kind})", f"{peak_gib:.3f} GiB"),
                ("last loss", f"{result['last_loss']:.4f}")]
        width = max(len(name) for name, _ in rows)
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"written to {out}")
    trainer.close()
    return result


if __name__ == "__main__":
    main()
