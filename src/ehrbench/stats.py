"""Confidence intervals and paired comparisons over tasks: what a leaderboard needs so "A beats B" holds up.

A benchmark's headline metric is a mean over tasks of a per-task score (`Benchmark.task_scores`: EHR-ChatQA's SR is
the mean of each task's success rate, PhysAssistBench's mRS the mean of each session's rubric score, ...). The
trials of one task are not independent draws of the metric; the tasks are. So the bootstrap resamples tasks with
replacement, each keeping its score (all its trials together), `resamples` times, and reads the percentile interval
(2.5th and 97.5th percentiles for 95%). Two models on the same tasks are compared by resampling the same task
indices for both (paired): the interval of the difference of means, and a two-sided p-value, twice the share of
resampled differences on the far side of zero (at most 1), the usual bootstrap test of "no difference".

Where the metric averages groups of tasks rather than tasks (AgentEHR's F1: the mean over its task categories of the
mean over each category's samples), tasks are resampled within their group and the statistic is that mean of group
means (a stratified bootstrap); a paired difference of such means is the same mean of the per-task differences.
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


def _resampled_means(values: np.ndarray, groups: Sequence[str] | None, resamples: int, seed: int) -> np.ndarray:
    """The statistic (mean over tasks, or mean over groups of the group's mean) on `resamples` resamples of the
    tasks, each group's tasks drawn with replacement from that group."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(groups if groups is not None else ["all"] * len(values))
    per_group = []
    for g in sorted(set(labels.tolist())):
        members = values[labels == g]
        picks = rng.integers(0, members.size, size=(resamples, members.size))
        per_group.append(members[picks].mean(axis=1))
    return np.mean(per_group, axis=0)


def point_estimate(values: np.ndarray, groups: Sequence[str] | None) -> float:
    """The metric itself: the mean over tasks, or by `groups` the mean of group means."""
    if groups is None:
        return float(values.mean())
    labels = np.asarray(groups)
    return float(np.mean([values[labels == g].mean() for g in sorted(set(labels.tolist()))]))


def bootstrap_interval(scores: Sequence[float], resamples: int = 10_000, level: float = 0.95, seed: int = 0,
                       groups: Sequence[str] | None = None) -> Interval:
    """The mean of per-task `scores` (by `groups`: the mean of group means) and its percentile bootstrap interval."""
    values = np.asarray(scores, dtype=float)
    if values.size == 0:
        raise ValueError("no task scores: nothing to estimate")
    means = _resampled_means(values, groups, resamples, seed)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(point_estimate(values, groups), float(low), float(high), int(values.size))


def paired_comparison(a: Mapping[str, float], b: Mapping[str, float], resamples: int = 10_000,
                      level: float = 0.95, seed: int = 0, groups: Mapping[str, str] | None = None) -> Comparison:
    """`a` minus `b` over the tasks both scored (task key -> score), with its paired bootstrap interval and p-value;
    `groups` (task key -> group) for a metric that averages groups."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two runs share no task: nothing to compare")
    diffs = np.asarray([a[t] - b[t] for t in common], dtype=float)
    labels = [groups[t] for t in common] if groups else None
    means = _resampled_means(diffs, labels, resamples, seed)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    observed = point_estimate(diffs, labels)
    below, above = float(np.mean(means <= 0)), float(np.mean(means >= 0))
    p = 1.0 if observed == 0 else min(1.0, 2 * (below if observed > 0 else above))
    return Comparison(observed, float(low), float(high), p, len(common))
