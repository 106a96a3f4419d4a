"""A read-only, time- and size-limited SQLite database behind a SQLAlchemy engine.

Agent SQL runs with four guards, none of which trusts the SQL text: the file is opened `immutable=1` (nothing can
write it), a SQLite authorizer allows only reads (so INSERT/UPDATE/DELETE/DROP/ALTER/CREATE, ATTACH, setting
PRAGMAs and load_extension are refused before they run, with the refused action named; read-only introspection
such as `pragma_table_info('t')` is allowed), a progress handler stops any statement at its deadline (runaway joins
end with a time-limit error, the connection stays usable), and size limits (`db/limits.py`) bound one value
(SQLite's length limit), the kept rows of a result, the columns of a row and SQLite's heap, so no query can exhaust
the memory of the process that hosts the database. Identifiers that reach SQL from tool arguments are checked
against the reflected schema first.

Because the file cannot change, a query's result is a pure function of its text: successful results are kept in a
bounded LRU cache (trials of one task re-run the same queries, and scoring re-runs the agent's). Failures, time-outs
included, are never cached.
"""
from __future__ import annotations

import re
import sqlite3
import threading
import time
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import SingletonThreadPool

from .limits import QueryError, QueryLimits, QueryResult, QueryTimeout, fetch_bounded
from .schema_text import TableShape, create_table_text

_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_BLOCKED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
_AUTHORIZER_ACTIONS = (
    "CREATE_INDEX CREATE_TABLE CREATE_TEMP_INDEX CREATE_TEMP_TABLE CREATE_TEMP_TRIGGER CREATE_TEMP_VIEW "
    "CREATE_TRIGGER CREATE_VIEW DELETE DROP_INDEX DROP_TABLE DROP_TEMP_INDEX DROP_TEMP_TABLE DROP_TEMP_TRIGGER "
    "DROP_TEMP_VIEW DROP_TRIGGER DROP_VIEW INSERT PRAGMA TRANSACTION UPDATE ATTACH DETACH ALTER_TABLE REINDEX "
    "ANALYZE CREATE_VTABLE DROP_VTABLE SAVEPOINT").split()
_ACTION_NAMES = {getattr(sqlite3, "SQLITE_" + n): n.replace("_", " ") for n in _AUTHORIZER_ACTIONS
                 if hasattr(sqlite3, "SQLITE_" + n)}
# PRAGMAs that only read the schema: allowed as statements and as table-valued functions (pragma_table_info('t')).
_READ_ONLY_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                      "foreign_key_list", "collation_list", "function_list", "database_list"}


_WRITES = {"INSERT", "UPDATE", "DELETE", "ALTER TABLE", "a schema change (CREATE / DROP)"} | {
    n.replace("_", " ") for n in _AUTHORIZER_ACTIONS if n.startswith(("CREATE", "DROP"))}


class UnknownIdentifier(QueryError):
    pass


# EHR-ChatQA's harness pins SQLAlchemy 2.0.43 (its requirements.txt), whose error links name version 20; the
# SQLAlchemy installed here may be newer (its links say 21): the agent reads the original's (seen in its twin run).
SQLALCHEMY_LINK = (re.compile(r"https://sqlalche\.me/e/\d+/"), "https://sqlalche.me/e/20/")


def as_original_sqlalchemy(text: str) -> str:
    """SQLAlchemy's error text with the link the original's pinned SQLAlchemy writes."""
    pattern, link = SQLALCHEMY_LINK
    return pattern.sub(link, text)


def dbapi_error_text(sql: str, error: Exception, params: tuple | None = None) -> str:
    """A SQLite error worded as the original harness shows it: SQLAlchemy's text, class, statement and link."""
    return as_original_sqlalchemy(str(sa.exc.DBAPIError.instance(sql, params, error, sqlite3.Error)))


def _connect(path: Path, limits: QueryLimits) -> sqlite3.Connection:
    uri = f"file:{Path(path).resolve()}?immutable=1"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.enable_load_extension(False) if hasattr(conn, "enable_load_extension") else None
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, limits.max_columns)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 1_000_000)
    conn.execute(f"PRAGMA hard_heap_limit = {int(limits.max_heap_bytes)}")   # before the authorizer exists
    for name in ("printf", "format"):
        conn.create_function(name, -1, _bounded_printf(limits.max_value_bytes), deterministic=True)
    return conn


def _bounded_printf(max_bytes: int):
    """SQLite's printf() quietly returns NULL past the length limit; this one says why, so the agent is told.

    The formatting itself is SQLite's, done on a private in-memory connection with the same limit.
    """
    local = threading.local()

    def printf(*args):
        if not hasattr(local, "conn"):
            local.conn = sqlite3.connect(":memory:")
            local.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_bytes)
        marks = ", ".join("?" * len(args))
        value = local.conn.execute(f"SELECT printf({marks})", args).fetchone()[0] if args else None
        if value is None and args and args[0] is not None:
            raise sqlite3.DataError("string or blob too big")
        return value
    return printf


class Database:
    def __init__(self, path: str | Path, db_id: str | None = None, cache_size: int = 4096,
                 limits: QueryLimits = QueryLimits()):
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"database file {self.path} does not exist (build it with ehrbench's data step)")
        self.db_id = db_id or self.path.stem
        self.limits = limits
        self.engine = sa.create_engine("sqlite://", creator=lambda: _connect(self.path, limits),
                                       poolclass=SingletonThreadPool,
                                    pool_size=64)  # one connection per thread; never closed under a running query
        self.metadata = sa.MetaData()
        self.metadata.reflect(self.engine)
        self.execute = lru_cache(maxsize=cache_size)(self._execute)    # exceptions are not cached
        self.substring_values = lru_cache(maxsize=cache_size)(self._substring_values)
        self.table_info = lru_cache(maxsize=256)(self._table_info)

    # --- schema ------------------------------------------------------------------------------------------------
    def table_names(self) -> list[str]:
        return sorted(self.metadata.tables)

    def column_names(self, table: str) -> list[str]:
        return [c.name for c in self.table(table).columns]

    def table(self, name: str) -> sa.Table:
        try:
            return self.metadata.tables[name]
        except KeyError:
            raise UnknownIdentifier(f"table {name!r} not found in database") from None

    def column(self, table: str, column: str) -> sa.Column:
        t = self.table(table)
        if column not in t.columns:
            raise UnknownIdentifier(f"column {column!r} not found in table {table!r}")
        return t.columns[column]

    def _table_info(self, table: str, sample_rows: int = 3) -> str:
        """The table as column_search shows it (db/schema_text.py), read with the PRAGMAs the original uses."""
        self.table(table)
        with self.engine.connect() as conn:
            run = lambda sql: conn.exec_driver_sql(sql).fetchall()  # noqa: E731
            info = run(f'PRAGMA table_info("{table}")')             # cid, name, type, notnull, default, pk
            shape = TableShape(table, [(r[1], r[2], bool(r[3])) for r in info],
                               primary_key=[r[1] for r in sorted(info, key=lambda r: r[5]) if r[5]],
                               foreign_keys=[(r[3], r[2], r[4]) for r in run(f'PRAGMA foreign_key_list("{table}")')])
            for index in run(f'PRAGMA index_list("{table}")'):      # seq, name, unique, origin, partial
                if index[3] == "u":
                    shape.unique.append(run(f"PRAGMA index_info('{index[1]}')")[0][2])
            rows = run(f'SELECT * FROM "{table}" LIMIT {int(sample_rows)}')   # stored values, as plain SQL reads them
        return create_table_text(shape, rows)

    # --- values ------------------------------------------------------------------------------------------------
    def _substring_values(self, table: str, column: str, value: str, k: int = 100) -> list:
        self.column(table, column)          # both names checked against the schema before they reach SQL
        # As the original: plain SQL (stored values, 0/1 not True/False), LIKE '%value%' with its % and _ still
        # wildcards, case-insensitive for ASCII
        sql = (f'SELECT DISTINCT "{column}" FROM "{table}" WHERE "{column}" LIKE ? AND "{column}" IS NOT NULL '
               f"LIMIT {int(k)}")
        with self.engine.connect() as conn:
            return [r[0] for r in conn.exec_driver_sql(sql, (f"%{value}%",))]

    def distinct_values(self, table: str, column: str) -> list[str]:
        col = self.column(table, column)
        with self.engine.connect() as conn:
            return sorted(str(r[0]) for r in conn.execute(sa.select(col).distinct().where(col.is_not(None))))

    # --- agent SQL ---------------------------------------------------------------------------------------------
    def read_large(self, sql: str, timeout_s: float, max_rows: int, max_bytes: int) -> QueryResult:
        """A result that may be far larger than the usual limit (EHRAgent's LoadDB reads whole tables, as its
        original read whole CSV files): up to `max_rows` rows and `max_bytes` of values, past either an error that
        says so. Never cached: a few such results would crowd out everything else."""
        from dataclasses import replace

        return self._execute(sql, timeout_s, max_rows + 1, max_rows + 1,
                             limits=replace(self.limits, max_result_bytes=max_bytes))

    def _execute(self, sql: str, timeout_s: float = 60.0, count_cap: int = 1_000_000, keep: int = 100,
                 sort_key=None, limits: QueryLimits | None = None) -> QueryResult:
        """Run one read-only statement; keep the first `keep` rows (the smallest under `sort_key`), count the rest."""
        limits = limits or self.limits
        refused: list[str] = []

        def authorizer(action, arg1, arg2, dbname, source):
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _BLOCKED_FUNCTIONS:
                refused.append(f"function {arg2}()")
                return sqlite3.SQLITE_DENY
            if action in _READ_ACTIONS:
                return sqlite3.SQLITE_OK
            if action == sqlite3.SQLITE_PRAGMA:
                if (arg1 or "").lower() in _READ_ONLY_PRAGMAS:
                    return sqlite3.SQLITE_OK
                refused.append(f"PRAGMA {arg1}")
                return sqlite3.SQLITE_DENY
            if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and not refused:
                # Table-valued pragmas (pragma_table_info) ask this while reading the schema; SQLite never lets a
                # statement modify sqlite_master itself, and CREATE / DROP are refused by their own action first.
                return sqlite3.SQLITE_OK
            writes_schema = action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_DELETE) and arg1 == "sqlite_master"
            refused.append("a schema change (CREATE / DROP)" if writes_schema else _ACTION_NAMES.get(action, str(action)))
            return sqlite3.SQLITE_DENY

        deadline = time.monotonic() + timeout_s
        raw = self.engine.raw_connection()
        try:
            conn: sqlite3.Connection = raw.driver_connection
            conn.set_authorizer(authorizer)
            conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
            try:
                cur = conn.execute(sql)
                if cur.description is None:      # an empty statement: SQLAlchemy's words in the original
                    raise QueryError("This result object does not return rows. It has been closed automatically.")
                result = fetch_bounded(cur, keep, count_cap, limits, sort_key)
                cur.close()
                return result
            except sqlite3.Error as e:
                if refused and refused[0] in _WRITES:   # the original's immutable file says it this way
                    raise QueryError(dbapi_error_text(sql, sqlite3.OperationalError(
                        "attempt to write a readonly database"))) from None
                if refused or "not authorized" in str(e):
                    what = refused[0] if refused else "this statement"
                    raise QueryError(f"query refused: the database is read-only and {what} is not allowed "
                                     f"(only SELECT / WITH queries may run)") from None
                if "interrupted" in str(e) and time.monotonic() > deadline:
                    raise QueryTimeout(f"query exceeded the {timeout_s:g} s time limit and was stopped") from None
                if "too big" in str(e) or "user-defined function raised" in str(e):
                    raise QueryError(f"query stopped: a value would be larger than the {self.limits.max_value_bytes:,}"
                                     "-byte limit on one value; select a shorter part (substr)") from None
                if "too many columns" in str(e):
                    raise QueryError(f"query refused: more than {self.limits.max_columns} columns in one result "
                                     "row") from None
                if "out of memory" in str(e):
                    raise QueryError(f"query stopped: it needed more than the database's "
                                     f"{self.limits.max_heap_bytes:,}-byte memory limit") from None
                raise QueryError(dbapi_error_text(sql, e)) from None
            except (ValueError, sqlite3.Warning) as e:  # e.g. "You can only execute one statement at a time."
                raise QueryError(dbapi_error_text(sql, sqlite3.ProgrammingError(str(e)))) from None
        finally:
            try:
                raw.driver_connection.set_authorizer(None)
                raw.driver_connection.set_progress_handler(None, 0)
            finally:
                raw.close()

    def close(self) -> None:
        self.engine.dispose()
