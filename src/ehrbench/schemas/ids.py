"""Demo-like identifiers: unique, seeded, and independent of the order other ids are drawn in."""
from __future__ import annotations

import random


def unique_ids(seed: int, label: str, n: int, low: int, high: int) -> list[int]:
    """`n` distinct integers in [low, high), drawn once per (seed, label) and returned in ascending order."""
    rng = random.Random(f"{seed}/ids/{label}")
    return sorted(rng.sample(range(low, high), n))


def seeded_amount(seed: int, kind: str, key: int, mean: float) -> float:
    """A charge that depends only on (seed, kind, key), so re-rendering gives the same amount."""
    return round(random.Random(f"{seed}/amount/{kind}/{key}").uniform(0.6, 1.4) * mean, 2)
