"""Confidence intervals and paired comparisons over tasks: what a leaderboard needs so "A beats B" holds up.

A benchmark's headline metric is a mean over tasks of a per-task score (`Benchmark.task_scores`: EHR-ChatQA's SR is
the mean of each task's success rate, PhysAssistBench's mRS the mean of each session's rubric score, ...). The
trials of one task are not independent draws of the metric; the tasks are. So the bootstrap resamples tasks with
replacement, each keeping its score (all its trials together), `resamples` times, and reads the percentile interval
(2.5th and 97.5th percentiles for 95%). Two models on the same tasks are compared by resampling the same task
indices for both (paired): the interval of the difference of means, and a two-sided p-value, twice the share of
resampled differences on the far side of zero (at most 1), the usual bootstrap test of "no difference".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Interval:
    estimate: float          # the mean over tasks
    low: float
    high: float
    tasks: int

    def __str__(self) -> str:
        return f"{self.estimate:.1f} [{self.low:.1f}, {self.high:.1f}]"


@dataclass(frozen=True)
class Comparison:
    difference: float        # mean of a minus mean of b, over the tasks both have
    low: float
    high: float
    p_value: float
    tasks: int

    def __str__(self) -> str:
        return f"{self.difference:+.1f} [{self.low:+.1f}, {self.high:+.1f}], p={self.p_value:.3f}"


def _resampled_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of `resamples` resamples of the rows of `values` (tasks x series), the same task draws for every
    series: shape (resamples, series)."""
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    picks = rng.integers(0, n, size=(resamples, n))
    return values[picks].mean(axis=1)


def bootstrap_interval(scores: Sequence[float], resamples: int = 10_000, level: float = 0.95,
                       seed: int = 0) -> Interval:
    """The mean of per-task `scores` and its percentile bootstrap interval (tasks resampled)."""
    values = np.asarray(scores, dtype=float)
    if values.size == 0:
        raise ValueError("no task scores: nothing to estimate")
    means = _resampled_means(values[:, None], resamples, seed)[:, 0]
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(values.mean()), float(low), float(high), int(values.size))


def paired_comparison(a: Mapping[str, float], b: Mapping[str, float], resamples: int = 10_000,
                      level: float = 0.95, seed: int = 0) -> Comparison:
    """`a` minus `b` over the tasks both scored (task key -> score), with its paired bootstrap interval and p-value."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two runs share no task: nothing to compare")
    diffs = np.asarray([a[t] - b[t] for t in common], dtype=float)
    means = _resampled_means(diffs[:, None], resamples, seed)[:, 0]
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    below, above = float(np.mean(means <= 0)), float(np.mean(means >= 0))
    p = 1.0 if diffs.mean() == 0 else min(1.0, 2 * (below if diffs.mean() > 0 else above))
    return Comparison(float(diffs.mean()), float(low), float(high), p, len(common))
