"""FSDP against DDP, DDP options, seeding, sharded data and evaluation, on 2 CPU processes (gloo)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainer_support import all_scenarios, max_difference  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return all_scenarios()  # shared with test_trainer_resume.py


def test_fsdp_and_ddp_reach_the_same_weights(runs):
    rank0, rank1 = runs["fsdp"]
    assert rank1["ddp"] == {} and rank1["fsdp"] == {}  # full_state_dict: on rank 0 only
    assert set(rank0["fsdp_sharded"]) == {"DTensor"}  # really sharded
    assert max_difference(rank0["ddp"], rank0["fsdp"]) < 1e-5
    assert max_difference(rank0["ddp"], rank0["rank0_init"]) > 1e-3  # and they trained


def test_fsdp_shards_each_layer_with_the_trainers_precision(runs):
    rank0 = runs["fsdp"][0]
    assert rank0["fsdp_units"] == [True, True, True, True, False, False]  # root and the 3 blocks
    assert rank0["bf16_compute_dtype"] == "torch.bfloat16"  # precision="bf16": bf16 for compute
    assert rank0["bf16_stored_dtype"] == "torch.float32"  # fp32 sharded weights for the optimizer


def test_every_strategy_starts_from_rank_0s_weights(runs):
    rank0 = runs["fsdp"][0]
    assert max_difference(rank0["fsdp_init"], rank0["rank0_init"]) == 0  # rank 1 built other weights


def test_fsdp_state_is_sharded_and_resumes_exactly(runs):
    rank0 = runs["fsdp"][0]
    assert rank0["fsdp_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp", "rank0.pt", "rank1.pt"]
    assert max_difference(rank0["fsdp"], rank0["fsdp_resumed"]) == 0


def test_activation_checkpointing_recomputes_each_layer_and_changes_nothing_else(runs):
    rank0 = runs["fsdp"][0]
    assert rank0["forwards_ac"] == [16, 16, 16]  # 8 micro-batches, each layer's forward run twice
    assert max_difference(rank0["fsdp"], rank0["fsdp_ac"]) < 1e-6


def test_evaluation_under_fsdp_with_uneven_shards(runs):
    for rank in runs["fsdp"]:
        assert rank["fsdp_eval"] == {"v": pytest.approx(6.0)}  # the mean of 0..12; 4 batches on rank 0, 3 on rank 1
        assert rank["fsdp_mode_after_eval"] is True


def test_ddp_kwargs_reach_ddp(runs):
    for rank in runs["options"]:
        assert rank["unused_ok"] == 2
        assert "find_unused_parameters" in rank["unused_default"]  # without the option, DDP refuses
        assert rank["static_graph"] is True


def test_seed_differs_between_ranks_and_repeats(runs):
    (first0, again0), (first1, _) = (rank["seeded"] for rank in runs["options"])  # torch ×2, numpy, random
    assert torch.equal(first0, again0)
    assert all(a != b for a, b in zip(first0.tolist(), first1.tolist()))  # every generator differs by rank


def test_loader_workers_draw_differently_on_each_rank_and_the_same_in_every_run(runs):
    (a0, b0), (a1, _) = (rank["worker_draws"] for rank in runs["options"])
    assert torch.equal(a0, b0)
    assert not torch.equal(a0, a1)


def test_iterable_dataset_is_sharded_by_rank(runs):
    rank0, rank1 = runs["options"]
    # training: 11 numbers, the odd one out dropped so both ranks take the same number of batches
    assert rank0["iterable_train"] == [0, 2, 4, 6, 8] and rank1["iterable_train"] == [1, 3, 5, 7, 9]
    # evaluation: every number once
    assert sorted(rank0["iterable_eval"] + rank1["iterable_eval"]) == list(range(11))


def test_evaluate_counts_every_sample_once_over_the_ranks(runs):
    for rank in runs["options"]:
        # 11 samples on 2 ranks: DistributedSampler pads rank 1 with sample 0 (value 0); counted,
        # the mean would be 385 / 12, not 385 / 11 = 35
        assert rank["eval"] == {"v": pytest.approx(35.0), "twice": pytest.approx(70.0)}
        assert sorted(rank["eval_samples"].tolist()) == [float(i * i) for i in range(11)]
        assert rank["mode_after_eval"] is True
