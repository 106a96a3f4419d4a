"""Shared pieces of the task generators: value sampling against the built database, answer rendering, phrasing.

A template is a function `(ctx) -> Iterator[Draft]`. It samples values from the database (so every task has a
non-empty answer, as the annotators' "value sampling" did), writes the gold SQL in EHR-ChatQA's CTE style and the
instruction in its SQL-to-text narrative, with lay terms in place of stored values. The driver executes each gold
SQL and stores its result as the gold answer.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterator

from num2words import num2words

from ....db.database import Database
from ....world.vocab import Vocabulary, vocabulary


@dataclass
class Draft:
    sentences: list[str]       # first: the broad goal; then one constraint per sentence, in reveal order
    gold_sql: str
    category: str
    key: str                   # dedup key: drafts with the same key are the same task

    @property
    def instruction(self) -> str:
        return " ".join(self.sentences)


@dataclass
class Context:
    db: Database
    rng: random.Random
    vocab: Vocabulary = field(default_factory=vocabulary)

    def rows(self, sql: str) -> list[tuple]:
        return self.db.execute(sql, timeout_s=120, keep=1_000_000).rows

    def column(self, sql: str) -> list:
        return [r[0] for r in self.rows(sql)]

    def sample(self, items: list, n: int) -> list:
        items = list(items)
        self.rng.shuffle(items)
        return items[:n]


Template = Callable[[Context], Iterator[Draft]]


def q(value: str) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


def words(n: int) -> str:
    return num2words(int(n))


def render_answer(rows: list[tuple]) -> list[list]:
    """AdaptQA gold answers: counts as words, decimals rounded to 4 places, text as stored (paper A.6.2)."""
    out = []
    for row in rows:
        vals = []
        for v in row:
            if isinstance(v, bool) or v is None:
                vals.append(str(v))
            elif isinstance(v, int):
                vals.append(words(v))
            elif isinstance(v, float):
                vals.append(f"{round(v, 4):g}" if abs(v) < 1e15 else str(v))
            else:
                vals.append(str(v))
        out.append(vals)
    return out


def lay(options: tuple[str, ...] | list[str], rng: random.Random) -> str:
    return rng.choice(list(options))


WINDOWS = [(30, "30 days"), (60, "60 days"), (90, "90 days"), (180, "180 days"), (365, "365 days")]
AGGREGATES = {"last": ("the most recent value", "DESC"), "first": ("the first value", "ASC")}
