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

    def grouped(self, sql: str) -> dict:
        """`SELECT key, value ...` as {key: set of values}."""
        out: dict = {}
        for key, value in self.rows(sql):
            out.setdefault(key, set()).add(value)
        return out

    def sample(self, items: list, n: int) -> list:
        items = list(items)
        self.rng.shuffle(items)
        return items[:n]


Template = Callable[[Context], Iterator[Draft]]


def q(value: str) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


def in_list(values) -> str:
    """Sorted SQL literals for an IN (...) list."""
    return ", ".join(q(v) for v in sorted(values))


def present_unless(source: str, column: str, target, wanted, cte: str = "found") -> str:
    """Gold SQL of the AdaptQA pivot: the patient's stored `wanted` values, unless any `target` value is there.

    `source` is "FROM ... WHERE <this patient>", `column` the (qualified) column holding the values.
    """
    name = column.rsplit(".", 1)[-1]
    return (f"WITH target AS ( SELECT 1 {source} AND {column} IN ({in_list(target)}) ), "
            f"{cte} AS ( SELECT DISTINCT {column} {source} AND {column} IN ({in_list(wanted)}) ) "
            f"SELECT {name} FROM {cte} WHERE NOT EXISTS (SELECT 1 FROM target)")


def lay(options: tuple[str, ...] | list[str], rng: random.Random) -> str:
    return rng.choice(list(options))


WINDOWS = [(30, "30 days"), (60, "60 days"), (90, "90 days"), (180, "180 days"), (365, "365 days")]
