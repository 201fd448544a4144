"""Statistics for verify: medians, percentiles, the hierarchical bootstrap, loss agreement."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perflint_runtime import stats


def test_median_odd_even_and_unsorted():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert stats.median([7.0]) == 7.0
    with pytest.raises(ValueError):
        stats.median([])


def test_percentile_interpolates():
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert stats.percentile(values, 0) == 10.0
    assert stats.percentile(values, 100) == 50.0
    assert stats.percentile(values, 50) == 30.0
    assert stats.percentile(values, 2.5) == pytest.approx(11.0)
    with pytest.raises(ValueError):
        stats.percentile(values, 101)


def test_speedup_is_ratio_of_pooled_means():
    baseline = [[0.10, 0.12, 0.11], [0.13, 0.10]]
    candidate = [[0.05, 0.06], [0.055]]
    assert stats.speedup(baseline, candidate) == pytest.approx(0.112 / 0.055)


def test_speedup_counts_the_waits_of_a_bursty_loader():
    # Eight workers deliver eight batches at once every 0.5 s: seven steps find a batch
    # waiting (10 ms), one waits for the next burst.  The median would call this 50x faster
    # than a steady 0.5 s/step script; its throughput is about 8x.
    bursty = [[0.01] * 7 + [0.43]] * 4
    steady = [[0.5] * 8] * 4
    assert stats.speedup(steady, bursty) == pytest.approx(0.5 / ((7 * 0.01 + 0.43) / 8))
    assert 7.9 < stats.speedup(steady, bursty) < 8.1


def test_constant_times_give_a_point_interval():
    lo, hi = stats.bootstrap_speedup_ci([[2.0] * 10] * 3, [[1.0] * 10] * 3)
    assert lo == hi == 2.0


def noisy_runs(center: float, runs: int, steps: int, rng: random.Random) -> list[list[float]]:
    return [[center * (1 + rng.gauss(0, 0.02)) for _ in range(steps)] for _ in range(runs)]


def test_interval_covers_the_true_ratio_and_is_narrow_for_clean_data():
    rng = random.Random(1)
    baseline, candidate = noisy_runs(0.100, 3, 30, rng), noisy_runs(0.050, 3, 30, rng)
    lo, hi = stats.bootstrap_speedup_ci(baseline, candidate, resamples=1000, seed=0)
    assert lo < 2.0 < hi
    assert hi - lo < 0.1


def test_interval_is_deterministic_for_a_seed():
    rng = random.Random(2)
    baseline, candidate = noisy_runs(0.1, 2, 20, rng), noisy_runs(0.09, 2, 20, rng)
    first = stats.bootstrap_speedup_ci(baseline, candidate, resamples=500, seed=7)
    assert stats.bootstrap_speedup_ci(baseline, candidate, resamples=500, seed=7) == first
    assert stats.bootstrap_speedup_ci(baseline, candidate, resamples=500, seed=8) != first


def test_run_to_run_drift_widens_the_interval():
    """Steps within a run are not independent: a between-run shift must show in the interval."""
    steady = [[1.0 + 0.001 * i for i in range(20)] for _ in range(4)]
    drifting = [[shift + 0.001 * i for i in range(20)] for shift in (0.8, 1.0, 1.2, 1.4)]
    candidate = [[0.5 + 0.001 * i for i in range(20)] for _ in range(4)]
    lo1, hi1 = stats.bootstrap_speedup_ci(steady, candidate, resamples=500)
    lo2, hi2 = stats.bootstrap_speedup_ci(drifting, candidate, resamples=500)
    assert hi2 - lo2 > 5 * (hi1 - lo1)


def test_a_slower_candidate_has_an_interval_below_one():
    rng = random.Random(3)
    lo, hi = stats.bootstrap_speedup_ci(noisy_runs(0.1, 3, 30, rng), noisy_runs(0.2, 3, 30, rng))
    assert hi < 1.0


@pytest.mark.parametrize("runs", [[], [[]], [[1.0, 0.0]], [[1.0, math.nan]]])
def test_bad_runs_are_rejected(runs):
    with pytest.raises(ValueError):
        stats.bootstrap_speedup_ci(runs, [[1.0]])


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.floats(0.001, 10.0), min_size=1, max_size=8), min_size=1, max_size=3),
    st.lists(st.lists(st.floats(0.001, 10.0), min_size=1, max_size=8), min_size=1, max_size=3),
    st.floats(0.1, 10.0),
)
def test_scaling_the_candidate_scales_the_interval(baseline, candidate, k):
    lo, hi = stats.bootstrap_speedup_ci(baseline, candidate, resamples=50, seed=1)
    scaled = [[t * k for t in run] for run in candidate]
    lo_k, hi_k = stats.bootstrap_speedup_ci(baseline, scaled, resamples=50, seed=1)
    assert lo <= hi
    assert lo_k == pytest.approx(lo / k, rel=1e-9) and hi_k == pytest.approx(hi / k, rel=1e-9)


def test_relative_difference():
    assert stats.relative_difference(2.0, 2.0) == 0.0
    assert stats.relative_difference(1.0, 1.1) == pytest.approx(0.1 / 1.1)
    assert stats.relative_difference(0.0, 0.0) == 0.0
    assert stats.relative_difference(math.nan, math.nan) == 0.0
    assert stats.relative_difference(1.0, math.nan) == math.inf


def test_loss_divergence_skips_missing_steps():
    assert stats.max_loss_divergence([1.0, None, 2.0], [1.0, 5.0, 2.2], window=1) == pytest.approx(0.2 / 2.2)
    assert stats.max_loss_divergence([None], [1.0]) is None
    assert stats.max_loss_divergence([1.0, 1.0], [1.0, math.nan]) == math.inf
    assert stats.max_loss_divergence([math.nan, 1.0], [math.nan, 1.0]) == 0.0
    assert stats.max_loss_divergence([2.0, 1.0], [2.0, math.inf]) == math.inf


def test_loss_divergence_compares_window_means_against_the_loss_scale():
    # Windows of 2: means 2.0 vs 2.1, then 1.0 vs 1.0.
    assert stats.max_loss_divergence([2.0, 2.0, 1.0, 1.0], [2.0, 2.2, 0.9, 1.1], window=2) == pytest.approx(0.1 / 2.1)
    # Near-zero losses: step-level noise is judged against the starting loss, not itself.
    ref = [2.0] + [0.01, 0.02] * 10
    noisy = [2.0] + [0.02, 0.01] * 10
    assert max(stats.relative_difference(a, b) for a, b in zip(ref, noisy)) == pytest.approx(0.5)
    assert stats.max_loss_divergence(ref, noisy, window=1) == pytest.approx(0.01 / 2.0)
    assert stats.max_loss_divergence(ref, noisy) <= 0.005


def test_loss_divergence_still_catches_a_run_that_stops_converging():
    ref = [2.0 * 0.8 ** k for k in range(40)]  # 2.0 falling to 0.0003
    stuck = [2.0 * 0.8 ** min(k, 5) for k in range(40)]  # stops improving at 0.66
    assert stats.max_loss_divergence(ref, stuck) > 0.25
    blew_up = ref[:20] + [1.0] * 20  # climbs back to half the starting loss
    assert stats.max_loss_divergence(ref, blew_up) > 0.4
