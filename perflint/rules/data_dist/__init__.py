"""PF5 — data pipelines and distributed training."""
