"""Metrics over repeated trials, as pure functions; which ones a benchmark reports is its own business.

For a task with n valid trials of which c succeeded (EHR-ChatQA section 5.1):
  SR-k    = c / n                      (mean reward)
  Pass@k  = 1 - C(n-c, k) / C(n, k)    (at least one of k sampled trials succeeds)
  Pass^k  = C(c, k) / C(n, k)          (all k sampled trials succeed)
  Gap-k   = Pass@k - Pass^k
Aggregates average over tasks; tasks with fewer than k valid trials are reported as incomplete, never scored.

For graded (not pass/fail) answers (AgentEHR):
  set F1  = 2PR / (P + R), P = |Y & Y*| / |Y|, R = |Y & Y*| / |Y*|, case-insensitive exact strings; empty -> 0
  Best@K  = expected max score over K of N runs = sum_{i=K..N} C(i-1, K-1) / C(N, K) * s_i, scores ascending
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return comb(c, k) / comb(n, k)


@dataclass(frozen=True)
class Summary:
    k: int
    tasks: int           # tasks scored (with at least k valid trials)
    incomplete: int      # tasks with fewer than k valid trials: reported, not scored
    sr: float            # percentages, as the paper reports them
    pass_at: float
    pass_hat: float

    @property
    def gap(self) -> float:
        return self.pass_at - self.pass_hat

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """Metric names MLflow accepts ('@' and '^' are not allowed): SR-k, Pass_at_k, Pass_hat_k, Gap-k."""
        k = self.k
        return {f"{prefix}SR-{k}": self.sr, f"{prefix}Pass_at_{k}": self.pass_at, f"{prefix}Pass_hat_{k}": self.pass_hat,
                f"{prefix}Gap-{k}": self.gap, f"{prefix}tasks": self.tasks, f"{prefix}incomplete": self.incomplete}


def summarize(rewards_by_task: dict[str, list[float]], k: int) -> Summary:
    """`rewards_by_task`: task key -> rewards of its valid trials (0/1). Percentages over complete tasks."""
    done = {t: r for t, r in rewards_by_task.items() if len(r) >= k}
    incomplete = len(rewards_by_task) - len(done)
    if not done:
        return Summary(k, 0, incomplete, 0.0, 0.0, 0.0)
    sr = pa = ph = 0.0
    for rewards in done.values():
        n, c = len(rewards), int(sum(1 for r in rewards if r >= 1.0))
        sr += c / n
        pa += pass_at_k(n, c, k)
        ph += pass_hat_k(n, c, k)
    m = len(done)
    return Summary(k, m, incomplete, 100 * sr / m, 100 * pa / m, 100 * ph / m)


def curve(rewards_by_task: dict[str, list[float]], ks: range) -> list[Summary]:
    """Pass@k / Pass^k for each k (paper Figure 3a)."""
    return [summarize(rewards_by_task, k) for k in ks]


def set_f1(predicted, gold) -> float:
    """Set F1 with case-insensitive exact string match; an empty prediction (or gold) scores 0."""
    pred = {str(p).strip().lower() for p in predicted}
    true = {str(g).strip().lower() for g in gold}
    hit = len(pred & true)
    if not pred or not true or not hit:
        return 0.0
    precision, recall = hit / len(pred), hit / len(true)
    return 2 * precision * recall / (precision + recall)


def best_at_k(scores: list[float], k: int) -> float:
    """Expected maximum of `k` scores drawn without replacement from the `n` runs' `scores`."""
    n = len(scores)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    ordered = sorted(scores)
    return sum(comb(i - 1, k - 1) * ordered[i - 1] for i in range(k, n + 1)) / comb(n, k)
