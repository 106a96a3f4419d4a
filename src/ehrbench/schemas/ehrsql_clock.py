"""EHRSQL's clock, shared by the EHRSQL MIMIC-III and EHRSQL eICU renderings (TREQS keeps MIMIC-III's own).

EHRSQL moved every patient's history by a whole number of 365-day years so that the first admission falls in a
year of 2100-2105, drawn with weights 1:2:3:4:5:6 (later years likelier; `first_admit_year_sampler`), and called
2105-12-31 23:59:00 "now". The world's history spans the year before its own now (2100-12-31 23:59), so each patient
is moved back from EHRSQL's now by 0-5 such years, drawn the same way; a patient still in the hospital stays at
0, so their open admission is open at EHRSQL's now. The draw depends only on (seed, patient), so every chunking and
every rendering moves a patient the same way, and intervals within a history are kept to the minute.
"""
from __future__ import annotations

import random
from datetime import datetime, timedelta

from ..world.model import NOW, Patient

EHRSQL_NOW = datetime(2105, 12, 31, 23, 59, 0)
YEAR_WEIGHTS = (1, 2, 3, 4, 5, 6)        # first admission in 2100, 2101, ..., 2105


def years_back(seed: int, patient: Patient) -> int:
    """How many 365-day years before EHRSQL's now this patient's history is placed (0 while they are admitted)."""
    if any(a.current for a in patient.admissions):
        return 0
    rng = random.Random(f"{seed}/ehrsql-year/{patient.index}")
    return len(YEAR_WEIGHTS) - 1 - rng.choices(range(len(YEAR_WEIGHTS)), weights=YEAR_WEIGHTS)[0]


def shift_of(seed: int, patient: Patient) -> timedelta:
    return (EHRSQL_NOW - NOW) - timedelta(days=365 * years_back(seed, patient))


def shifted(t: datetime | None, shift: timedelta) -> str | None:
    """A world time on EHRSQL's clock, written as EHRSQL writes times."""
    return None if t is None else (t + shift).isoformat(" ", "seconds")
