"""Exact resumption on 2 CPU processes (gloo): a run stopped mid-epoch, or by SIGTERM on one
rank, and continued in a fresh trainer over several `fit` calls ends with the same weights,
bit for bit, as the run that was not stopped (dropout, shuffling, accumulation, clipping, a
scheduler and fused AdamW included); and `fit` called in stretches continues its pass."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainer_support import all_scenarios  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return all_scenarios()  # shared with test_trainer_distributed.py


def test_resumed_run_ends_with_the_straight_runs_weights_bit_for_bit(runs):
    for rank in runs["resume"]:
        straight, resumed = rank["straight"], rank["resumed"]
        assert straight["params"].keys() == resumed["params"].keys()
        for name, value in straight["params"].items():
            assert torch.equal(value, resumed["params"][name]), name
        assert resumed["lr"] == straight["lr"]  # the scheduler continued too
        assert (resumed["epoch"], resumed["batch_in_epoch"]) == (straight["epoch"], straight["batch_in_epoch"])


def test_resumed_run_continues_the_interrupted_epoch_with_the_same_batches(runs):
    seen = []
    for rank in runs["resume"]:
        assert rank["resumed"]["seen"] == rank["straight"]["seen"]  # 18 batches of 4, in the same order
        assert len(rank["straight"]["seen"]) == 18
        seen += [i for batch in rank["straight"]["seen"][:8] for i in batch]
    assert sorted(seen) == list(range(64))  # the first epoch: every sample once over both ranks
    first, second = (rank["straight"]["seen"] for rank in runs["resume"])
    assert first != second  # each rank its own share


def test_state_directory_keeps_the_last_steps_and_points_at_the_latest(runs):
    for rank in runs["resume"]:
        assert rank["resumed"]["saved"] == ["latest", "step_000000002", "step_000000003"]  # keep_last=2
        assert rank["resumed"]["latest"] == "step_000000003"


def test_sigterm_on_one_rank_saves_on_every_rank_and_the_run_resumes_exactly(runs):
    for rank in runs["resume"]:
        preempted, straight = rank["preempted"], rank["straight"]
        assert preempted["exit_code"] == 143
        assert preempted["stopped_at"] == 5  # the step in progress finished, then every rank saved
        assert preempted["latest"] == "step_000000005"
        for name, value in straight["params"].items():
            assert torch.equal(value, preempted["params"][name]), name


def test_fit_in_stretches_continues_one_pass_over_the_data(runs):
    ranks = runs["stretches"]
    seen = ranks[0]["seen"] + ranks[1]["seen"]
    assert sorted(seen) == list(range(64))  # 8 steps of 2 × 4 samples in stretches of 3, 3, 2: each sample once
    assert [(r["epoch"], r["batch_in_epoch"]) for r in ranks] == [(1, 0), (1, 0)]
