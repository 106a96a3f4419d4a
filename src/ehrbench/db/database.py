"""A read-only, time-limited SQLite database behind a SQLAlchemy engine.

Agent SQL runs with three guards, none of which trusts the SQL text: the file is opened `immutable=1` (nothing can
write it), a SQLite authorizer allows only reads (so INSERT/UPDATE/DELETE/DROP/ALTER/CREATE, ATTACH, PRAGMA and
load_extension are refused before they run, with the refused action named), and a progress handler stops any
statement at its deadline (runaway joins end with a time-limit error, the connection stays usable).
Identifiers that reach SQL from tool arguments are checked against the reflected schema first.

Because the file cannot change, a query's result is a pure function of its text: successful results are kept in a
bounded LRU cache (trials of one task re-run the same queries, and scoring re-runs the agent's). Failures, time-outs
included, are never cached.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import SingletonThreadPool
from sqlalchemy.schema import CreateTable

_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_BLOCKED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
_AUTHORIZER_ACTIONS = (
    "CREATE_INDEX CREATE_TABLE CREATE_TEMP_INDEX CREATE_TEMP_TABLE CREATE_TEMP_TRIGGER CREATE_TEMP_VIEW "
    "CREATE_TRIGGER CREATE_VIEW DELETE DROP_INDEX DROP_TABLE DROP_TEMP_INDEX DROP_TEMP_TABLE DROP_TEMP_TRIGGER "
    "DROP_TEMP_VIEW DROP_TRIGGER DROP_VIEW INSERT PRAGMA TRANSACTION UPDATE ATTACH DETACH ALTER_TABLE REINDEX "
    "ANALYZE CREATE_VTABLE DROP_VTABLE SAVEPOINT").split()
_ACTION_NAMES = {getattr(sqlite3, "SQLITE_" + n): n.replace("_", " ") for n in _AUTHORIZER_ACTIONS
                 if hasattr(sqlite3, "SQLITE_" + n)}


class QueryError(Exception):
    """Agent SQL that was refused, failed, or ran past its time limit. The message is shown to the agent."""


class UnknownIdentifier(QueryError):
    pass


@dataclass
class QueryResult:
    rows: list[tuple]
    total: int          # rows the query produced (counted up to `count_cap`)
    capped: bool        # True when counting stopped at the cap


def _connect(path: Path) -> sqlite3.Connection:
    uri = f"file:{Path(path).resolve()}?immutable=1"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.enable_load_extension(False) if hasattr(conn, "enable_load_extension") else None
    return conn


class Database:
    def __init__(self, path: str | Path, db_id: str | None = None, cache_size: int = 4096):
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"database file {self.path} does not exist (build it with ehrbench's data step)")
        self.db_id = db_id or self.path.stem
        self.engine = sa.create_engine("sqlite://", creator=lambda: _connect(self.path), poolclass=SingletonThreadPool,
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
        """The CREATE TABLE statement rebuilt from the schema and `sample_rows` rows, as LangChain's SQLDatabase."""
        t = self.table(table)
        create = str(CreateTable(t).compile(self.engine)).rstrip()
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).limit(sample_rows)).fetchall()
        header = "\t".join(c.name for c in t.columns)
        body = "\n".join("\t".join(str(v)[:100] for v in row) for row in rows)
        return f"{create}\n\n/*\n{sample_rows} rows from {table} table:\n{header}\n{body}\n*/"

    # --- values ------------------------------------------------------------------------------------------------
    def _substring_values(self, table: str, column: str, value: str, k: int = 100) -> list:
        col = self.column(table, column)
        stmt = (sa.select(col).distinct().where(sa.func.lower(sa.cast(col, sa.Text)).contains(value.lower(),
                                                                                            autoescape=True))
                .where(col.is_not(None)).limit(k))
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(stmt)]

    def distinct_values(self, table: str, column: str) -> list[str]:
        col = self.column(table, column)
        with self.engine.connect() as conn:
            return sorted(str(r[0]) for r in conn.execute(sa.select(col).distinct().where(col.is_not(None))))

    # --- agent SQL ---------------------------------------------------------------------------------------------
    def _execute(self, sql: str, timeout_s: float = 60.0, count_cap: int = 1_000_000, keep: int = 100) -> QueryResult:
        """Run one read-only statement; keep the first `keep` rows, count the rest up to `count_cap`."""
        refused: list[str] = []

        def authorizer(action, arg1, arg2, dbname, source):
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _BLOCKED_FUNCTIONS:
                refused.append(f"function {arg2}()")
                return sqlite3.SQLITE_DENY
            if action in _READ_ACTIONS:
                return sqlite3.SQLITE_OK
            schema_change = (arg1 or "").startswith("sqlite_")  # CREATE/DROP show up as writes to sqlite_master
            refused.append("a schema change (CREATE / DROP)" if schema_change else _ACTION_NAMES.get(action, str(action)))
            return sqlite3.SQLITE_DENY

        deadline = time.monotonic() + timeout_s
        raw = self.engine.raw_connection()
        try:
            conn: sqlite3.Connection = raw.driver_connection
            conn.set_authorizer(authorizer)
            conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
            try:
                cur = conn.execute(sql)
                rows, total = [], 0
                while total < count_cap:
                    batch = cur.fetchmany(5_000)
                    if not batch:
                        break
                    if len(rows) < keep:
                        rows.extend(batch[: keep - len(rows)])
                    total += len(batch)
                capped = total >= count_cap
                cur.close()
                return QueryResult(rows=rows, total=total, capped=capped)
            except sqlite3.Error as e:
                if refused or "not authorized" in str(e):
                    what = refused[0] if refused else "this statement"
                    raise QueryError(f"query refused: the database is read-only and {what} is not allowed "
                                     f"(only SELECT / WITH queries may run)") from None
                if "interrupted" in str(e) and time.monotonic() > deadline:
                    raise QueryError(f"query exceeded the {timeout_s:g} s time limit and was stopped") from None
                raise QueryError(str(e)) from None
            except (ValueError, sqlite3.Warning) as e:  # e.g. "You can only execute one statement at a time."
                raise QueryError(str(e)) from None
        finally:
            try:
                raw.driver_connection.set_authorizer(None)
                raw.driver_connection.set_progress_handler(None, 0)
            finally:
                raw.close()

    def close(self) -> None:
        self.engine.dispose()
