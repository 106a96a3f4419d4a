"""The leaderboard's statistics against values worked out independently: the bootstrap's every resample of a few
tasks enumerated exactly (n^n equally likely draws), and a hand-worked paired case."""
from itertools import product

import numpy as np
import pytest

from ehrbench.stats import bootstrap_interval, paired_comparison


def exact_resample_means(values):
    """Every resample of the tasks, each as likely as the others: its mean."""
    n = len(values)
    return np.sort([np.mean([values[i] for i in pick]) for pick in product(range(n), repeat=n)])


def exact_quantile(sorted_means, q):
    """The smallest mean whose share of resamples at or below it reaches q (the distribution's q-quantile)."""
    return sorted_means[int(np.ceil(q * len(sorted_means))) - 1]


def test_the_interval_is_the_exact_bootstrap_distribution_s_percentiles():
    scores = [100.0, 40.0, 0.0, 80.0, 60.0]                      # five tasks' scores: 3,125 resamples
    exact = exact_resample_means(scores)
    got = bootstrap_interval(scores, resamples=200_000, seed=1)
    atoms = np.unique(exact)
    for estimate, q in ((got.low, 0.025), (got.high, 0.975)):
        target = exact_quantile(exact, q)
        i = int(np.searchsorted(atoms, target))
        neighbours = atoms[max(0, i - 1):i + 2]                  # a sample percentile lands on or next to it
        assert neighbours.min() - 1e-9 <= estimate <= neighbours.max() + 1e-9, (q, estimate, target)
    assert got.estimate == pytest.approx(56.0) and got.tasks == 5 and got.low < 56.0 < got.high


def test_the_paired_p_value_is_the_exact_share_on_the_far_side_of_zero():
    a = {"t1": 100.0, "t2": 100.0, "t3": 0.0, "t4": 100.0, "extra": 50.0}
    b = {"t1": 0.0, "t2": 100.0, "t3": 0.0, "t4": 0.0}
    # differences over the shared tasks: 100, 0, 0, 100 (mean 50); a resample's mean is <= 0 only when it draws
    # neither task 1 nor task 4: (2/4)^4 = 1/16 of resamples, so p = 2/16 = 0.125
    got = paired_comparison(a, b, resamples=400_000, seed=2)
    assert got.tasks == 4 and got.difference == pytest.approx(50.0)
    assert got.p_value == pytest.approx(0.125, abs=0.004)
    exact = exact_resample_means([100.0, 0.0, 0.0, 100.0])
    assert got.low == pytest.approx(exact_quantile(exact, 0.025)) and got.high == pytest.approx(100.0)


def test_no_difference_is_p_1_and_runs_without_shared_tasks_are_refused():
    same = {"t1": 10.0, "t2": 90.0}
    assert paired_comparison(same, dict(same)).p_value == 1.0
    with pytest.raises(ValueError, match="share no task"):
        paired_comparison({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ValueError, match="no task scores"):
        bootstrap_interval([])


def test_a_metric_over_groups_resamples_within_each_group():
    """AgentEHR's F1 is the mean of its categories' means: a category of one task keeps that task in every
    resample, so with groups {a: [100], b: [0, 100]} the statistic is 50 + (a resample of b) / 2: exactly 50, 75
    or 100 with chances 1/4, 1/2, 1/4."""
    got = bootstrap_interval([100.0, 0.0, 100.0], groups=["a", "b", "b"], resamples=100_000, seed=3)
    assert got.estimate == pytest.approx(75.0)            # (100 + 50) / 2, not the plain mean 66.7
    assert (got.low, got.high) == (50.0, 100.0)
    paired = paired_comparison({"x": 100.0, "y": 0.0, "z": 100.0}, {"x": 0.0, "y": 0.0, "z": 0.0},
                               groups={"x": "a", "y": "b", "z": "b"}, resamples=100_000, seed=3)
    assert paired.difference == pytest.approx(75.0) and paired.p_value == 0.0
