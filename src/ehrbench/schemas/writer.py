"""Rows as renderers produce them, and the SQLite files they are written to.

A database is written in parts (one per chunk of patients, see `build.py`) and merged into one file. Every file is
written under a temporary name in one transaction and renamed at the end, so a crash never leaves a half-built
database behind, and the same rows in the same order give the same bytes however many parts they came in.
"""
from __future__ import annotations

import os
import sqlite3
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from itertools import count
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.compiler import compiles

from .ids import unique_ids

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class INT(sa.types.Integer):
    """`INT` in the DDL, as EHR-ChatQA's authors declare their integers (`mimic_iv_star.sql`, `eicu_star.sql`): the
    generic type writes `INTEGER`, which the original's `column_search` prints as `INTEGEREGER`. SQLite gives both
    INTEGER affinity; as a primary key `INT` is not the rowid, so it keeps an index of its own, as theirs do."""
    cache_ok = True


@compiles(INT)
def _int(type_, compiler, **kw) -> str:
    return "INT"


def fmt_time(t: datetime | None) -> str | None:
    """TIME_FORMAT, written the fast way (isoformat is ~5x quicker than strftime; the world's years have 4 digits)."""
    return None if t is None else t.isoformat(" ", "seconds")


class Rows:
    """Rows of every table of `metadata`, each given the next integer of its table's primary key, counting from
    `start` (the rows earlier chunks of the world gave that table)."""

    def __init__(self, metadata: sa.MetaData, start: dict[str, int] | None = None):
        self.start = start = start or {}
        self.tables: dict[str, list[dict]] = {name: [] for name in metadata.tables}
        self._pk = {name: t.primary_key.columns.values()[0].name for name, t in metadata.tables.items()
                    if t.primary_key.columns}
        self._next = {name: count(start.get(name, 0)) for name in metadata.tables}

    def add(self, table: str, **values) -> int:
        key = next(self._next[table])
        pk = self._pk.get(table)
        self.tables[table].append({pk: key, **values} if pk else values)
        return key

    def counts(self) -> dict[str, int]:
        return {name: len(rows) for name, rows in self.tables.items()}


class Ids:
    """The demo-like ids (`unique_ids`) a renderer hands out, one pool per label, taken in order.

    A pool is one sorted draw for the whole world, so its size must be known before any id is handed out. Counting
    (`slices=None`) hands out stand-ins 0, 1, 2, ... and counts how many each chunk takes; writing hands out the
    chunk's own slice of each pool (`pool_slices`)."""

    def __init__(self, slices: dict[str, list[int]] | None = None):
        self.slices = slices
        self.taken: Counter[str] = Counter()

    def next(self, label: str) -> int:
        i = self.taken[label]
        self.taken[label] += 1
        return i if self.slices is None else self.slices[label][i]


def pool_slices(seed: int, pools: dict, taken_per_chunk: list[Counter]) -> list[dict[str, list[int]]]:
    """Each chunk's slice of every pool. `pools`: label -> (low, high, size from the world's total taken)."""
    total = sum(taken_per_chunk, Counter())
    slices: list[dict[str, list[int]]] = [{} for _ in taken_per_chunk]
    for label, (low, high, size) in pools.items():
        n = size(total)
        if n > high - low:
            raise ValueError(f"the world needs {n:,} ids for {label!r} but its range holds {high - low:,}; "
                             "lower data.scale")
        pool, at = unique_ids(seed, label, n, low, high), 0
        for chunk, taken in zip(slices, taken_per_chunk):
            chunk[label] = pool[at:at + taken[label]]
            at += taken[label]
    return slices


def _ddl(metadata: sa.MetaData) -> list[str]:
    dialect = sqlite_dialect.dialect()
    statements = []
    for table in metadata.sorted_tables:
        statements.append(str(sa.schema.CreateTable(table).compile(dialect=dialect)).strip())
        statements += [str(sa.schema.CreateIndex(ix).compile(dialect=dialect)) for ix in table.indexes]
    return statements


def _insert(table: sa.Table) -> str:
    return f'INSERT INTO "{table.name}" VALUES ({", ".join("?" * len(table.columns))})'


class _NewFile:
    """A SQLite file written in one transaction under a temporary name, renamed into place on success."""

    def __init__(self, metadata: sa.MetaData, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        self.tmp.unlink(missing_ok=True)
        self.metadata = metadata

    def __enter__(self) -> sqlite3.Connection:
        self.con = sqlite3.connect(self.tmp, isolation_level=None)
        self.con.execute("PRAGMA journal_mode=OFF")      # the file is not in place until renamed: no journal needed
        self.con.execute("PRAGMA synchronous=OFF")
        self.con.execute("BEGIN")
        for statement in _ddl(self.metadata):
            self.con.execute(statement)
        return self.con

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is None:
                self.con.execute("COMMIT")
        finally:
            self.con.close()
        if kind is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def write_part(metadata: sa.MetaData, rows: dict[str, list[dict]], path: Path) -> Path:
    """One chunk's rows as a SQLite file of the full schema."""
    with _NewFile(metadata, path) as con:
        for table in metadata.sorted_tables:
            names = [c.name for c in table.columns]
            con.executemany(_insert(table), (tuple(r.get(n) for n in names) for r in rows.get(table.name, ())))
    return Path(path)


def merge_parts(metadata: sa.MetaData, parts: Iterable[Path], path: Path) -> Path:
    """The database: every part's rows copied table by table, parts in order, streamed (memory stays flat)."""
    parts = list(parts)
    with _NewFile(metadata, path) as con:
        for table in metadata.sorted_tables:
            for part in parts:
                src = sqlite3.connect(f"file:{Path(part).resolve()}?mode=ro", uri=True)
                try:
                    con.executemany(_insert(table), src.execute(f'SELECT * FROM "{table.name}" ORDER BY rowid'))
                finally:
                    src.close()
    return Path(path)
