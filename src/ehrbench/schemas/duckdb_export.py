"""A built SQLite database written again as DuckDB, its tables in the schemas the real database uses.

MIMIC-IV lives in BigQuery and in local DuckDB copies as `mimiciv_hosp.patients`, `mimiciv_icu.icustays`, ...;
ClinSQL's gold SQL names those schemas, so the rendering does too. Times become TIMESTAMP and dates DATE (SQLite
stores text), so DATETIME_DIFF and friends work after transpiling. The file is written under a temporary name and
renamed, and sits next to the SQLite file it comes from, keyed the same way, so it is rebuilt exactly when that is.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import duckdb
import pandas

from . import SCHEMAS

SCHEMA_PREFIX = "mimiciv_"


def duck_type(column: str, sqlite_type: str) -> str:
    """DuckDB's type for a rendered column: the declared one, but times and dates as what they are."""
    if column in ("dod", "chartdate", "storedate"):
        return "DATE"
    if column.endswith("time"):
        return "TIMESTAMP"
    declared = sqlite_type.upper()
    if "INT" in declared:                                    # INTEGER, INT, BIGINT
        return "BIGINT"
    return "DOUBLE" if any(k in declared for k in ("DOUBLE", "REAL", "FLOAT")) else "VARCHAR"


def export_duckdb(db_id: str, sqlite_path: Path) -> Path:
    """`<sqlite file>.duckdb`, written once from the SQLite file: every table of `db_id` in its module's schema
    (`MODULE[table]` -> mimiciv_<module>), without the builder's row numbers."""
    module = SCHEMAS[db_id]
    path = Path(sqlite_path).with_suffix(".duckdb")
    if path.exists():
        return path
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{Path(sqlite_path).resolve()}?mode=ro", uri=True)
    con = duckdb.connect(str(tmp))
    try:
        for schema in sorted(set(module.MODULE.values())):
            con.execute(f"CREATE SCHEMA {SCHEMA_PREFIX}{schema}")
        for table in module.metadata().sorted_tables:
            columns = [c for c in table.columns if c.name != "row_id"]
            target = f"{SCHEMA_PREFIX}{module.MODULE[table.name]}.{table.name}"
            own = getattr(module, "DUCK_TYPES", {})
            declared = ", ".join(f"{c.name} {own.get((table.name, c.name)) or duck_type(c.name, str(c.type))}"
                                 for c in columns)
            con.execute(f"CREATE TABLE {target} ({declared})")
            cursor = src.execute(f"SELECT {', '.join(c.name for c in columns)} FROM {table.name} ORDER BY rowid")
            names = [c.name for c in columns]
            while batch := cursor.fetchmany(100_000):        # a DataFrame per batch: DuckDB reads it columnar
                frame = pandas.DataFrame.from_records(batch, columns=names)  # noqa: F841  (read by name below)
                con.execute(f"INSERT INTO {target} SELECT * FROM frame")
        con.execute("CHECKPOINT")
    finally:
        con.close()
        src.close()
    os.replace(tmp, path)
    return path


def check_duckdb_file(db_id: str, path: str | Path) -> None:
    """A user's own DuckDB file (e.g. MIMIC-IV built with mimic-code's DuckDB scripts) must hold every table and
    column of the rendering in its module's schema (extra ones are fine; the builder's row numbers are not needed)."""
    from ..errors import ConfigurationError

    module = SCHEMAS[db_id]
    try:
        con = duckdb.connect(str(path), read_only=True)
        try:
            found: dict[str, set[str]] = {}
            for schema, table, column in con.execute("SELECT table_schema, table_name, column_name "
                                                     "FROM information_schema.columns").fetchall():
                found.setdefault(f"{schema}.{table}", set()).add(column)
        finally:
            con.close()
    except duckdb.Error as e:
        raise ConfigurationError(f"data.{db_id}.path={str(path)!r}: not a readable DuckDB database ({e})") from None
    for table in module.metadata().sorted_tables:
        name = f"{SCHEMA_PREFIX}{module.MODULE[table.name]}.{table.name}"
        if name not in found:
            raise ConfigurationError(f"data.{db_id}.path={str(path)!r}: table {name} is missing; the file must have "
                                     f"MIMIC-IV's modules as schemas mimiciv_hosp, mimiciv_icu, mimiciv_derived "
                                     "(charlson, age) and mimiciv_note (docs/benchmarks/clinsql.md)")
        missing = [c.name for c in table.columns if c.name != "row_id" and c.name not in found[name]]
        if missing:
            raise ConfigurationError(f"data.{db_id}.path={str(path)!r}: table {name} lacks column(s) "
                                     f"{', '.join(missing)}")
