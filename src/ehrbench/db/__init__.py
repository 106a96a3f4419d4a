"""Databases behind one interface: SQLite files (`Database`) and DuckDB files (`DuckDatabase`), both guarded."""
from __future__ import annotations

from pathlib import Path


def open_database(path: str | Path, db_id: str | None = None):
    """The guarded engine for a file: DuckDB for `.duckdb` / `.ddb`, SQLite otherwise."""
    if Path(path).suffix in (".duckdb", ".ddb"):
        from .duckdb_database import DuckDatabase

        return DuckDatabase(path, db_id)
    from .database import Database

    return Database(path, db_id)
