"""Write rendered tables into a SQLite file through SQLAlchemy, deterministically.

Rows are inserted in the order the renderer gives them, into a fresh file written under a temporary name and
renamed at the end, so a crash never leaves a half-built database behind and two builds are byte-identical.
"""
from __future__ import annotations

import os
from itertools import count
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def fmt_time(t: datetime | None) -> str | None:
    return None if t is None else t.strftime(TIME_FORMAT)


def write_sqlite(metadata: sa.MetaData, rows: dict[str, list[dict]], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    engine = sa.create_engine(f"sqlite:///{tmp}")
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            for table in metadata.sorted_tables:
                data = rows.get(table.name, [])
                if data:
                    conn.execute(table.insert(), data)
        with engine.connect() as conn:  # compact and drop free pages so identical content gives identical bytes
            conn.exec_driver_sql("VACUUM")
    finally:
        engine.dispose()
    os.replace(tmp, path)
    return path


class Rows:
    """Rows of every table of `metadata`, each given the next integer of its table's primary key."""

    def __init__(self, metadata: sa.MetaData):
        self.tables: dict[str, list[dict]] = {name: [] for name in metadata.tables}
        self._pk = {name: t.primary_key.columns.values()[0].name for name, t in metadata.tables.items()
                    if t.primary_key.columns}
        self._next = {name: count() for name in metadata.tables}

    def add(self, table: str, **values) -> int:
        key = next(self._next[table])
        pk = self._pk.get(table)
        self.tables[table].append({pk: key, **values} if pk else values)
        return key
