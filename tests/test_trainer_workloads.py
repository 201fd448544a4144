"""A workload on the trainer evaluates over every rank: its untrained model's test accuracy
under `torchrun` with 2 processes is the one process's figure (each rank holds half of
the test set; rank 0's half alone would give another figure)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ON_TRAINER = Path(__file__).resolve().parent.parent / "fixtures" / "workloads" / "on_trainer"


def test_image_classifier_test_accuracy_counts_every_rank():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    args = [str(ON_TRAINER / "image_classifier.py"), "--steps", "0", "--device", "cpu"]
    # --steps 0: no training; the model is rank 0's initial one on every rank, in both runs
    commands = {"one": [sys.executable, *args],
                "two": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]}
    procs = {name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                    cwd=ON_TRAINER) for name, command in commands.items()}
    outputs = {name: proc.communicate(timeout=300) for name, proc in procs.items()}
    accuracy = {}
    for name, proc in procs.items():
        stdout, stderr = outputs[name]
        assert proc.returncode == 0, stdout[-2000:] + stderr[-3000:]
        found = re.findall(r"^test accuracy (\S+)$", stdout, re.MULTILINE)
        assert len(found) == 1, stdout  # printed by rank 0 only
        accuracy[name] = float(found[0])
    assert accuracy["two"] == accuracy["one"]
