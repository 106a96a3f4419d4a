"""A read-only, time- and size-limited DuckDB database: the same guards and the same interface as `Database`.

DuckDB has no authorizer, so the guards come from its own settings and from the statement list it parses:
- the file is opened `read_only`, external access (files, HTTP, ATTACH of other files, COPY) and extension
  auto-loading are off, and the configuration is locked, so a query cannot turn any of them back on;
- exactly one statement, and it must be a SELECT (DuckDB's parser says so: `extract_statements`), so INSERT,
  UPDATE, DELETE, CREATE, DROP, ATTACH, PRAGMA, SET, COPY, INSTALL and LOAD are refused with their kind named;
- a timer interrupts a statement at its deadline (the connection stays usable);
- `memory_limit` bounds the engine's buffer memory and `max_temp_directory_size` what it may spill to disk (as much
  again), so a sort or join that must hold more is stopped; results stream, and `fetch_bounded` (db/limits.py)
  bounds what reaches Python: one value and the kept rows;
- DuckDB's strings live outside its `memory_limit` (`repeat('x', 400000000)` over ten rows builds 4 GB), so
  `DuckDatabase` runs the engine (`DuckEngine`) in sandboxed child processes with a hard address-space cap
  (`db/sandbox.py`): a query that outgrows it costs that child, which is replaced, and the agent is told the limit.
ClinSQL's MIMIC-IV rendering is the first user (issue 13); agent SQL reaches it through the same tools and hosts.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path

import duckdb

from .limits import MemoryLimitError, QueryError, QueryLimits, QueryResult, QueryTimeout, fetch_bounded
from .schema_text import TableShape, create_table_text
from .database import UnknownIdentifier


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _table(name: str) -> str:
    """A table as SQL names it: `patients`, or `mimiciv_hosp.patients` for one in a schema of its own."""
    return ".".join(_quote(part) for part in name.split(".", 1))


class _Schema:
    """Table and column lookups from `schema` (table -> [(column, type)]), read once: the file never changes."""
    schema: dict[str, list[tuple[str, str]]]

    def table_names(self) -> list[str]:
        return sorted(self.schema)

    def column_names(self, table: str) -> list[str]:
        if table not in self.schema:
            raise UnknownIdentifier(f"table {table!r} not found in database")
        return [c for c, _ in self.schema[table]]


class DuckEngine(_Schema):
    """The DuckDB engine itself, in one process; used through `DuckDatabase`, which sandboxes it."""

    def __init__(self, path: str | Path, db_id: str | None = None, cache_size: int = 4096,
                 limits: QueryLimits = QueryLimits(), spill_dir: str | None = None):
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"database file {self.path} does not exist (build it with ehrbench's data step)")
        self.db_id = db_id or self.path.stem
        self.limits = limits
        self._spill = tempfile.mkdtemp(prefix="duckdb-", dir=spill_dir)    # one per process: DuckDB numbers its
                                                                           # spill files per process
        self._local = threading.local()
        self._lock = threading.Lock()
        with self._connection_for_schema() as conn:
            rows = conn.execute(
                "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_catalog = current_database() AND table_schema NOT IN ('information_schema', 'pg_catalog')"
                " ORDER BY table_schema, table_name, ordinal_position").fetchall()
        self.schema: dict[str, list[tuple[str, str]]] = {}
        for schema, table, column, kind in rows:      # tables outside `main` by their qualified name (MIMIC-IV's)
            self.schema.setdefault(table if schema == "main" else f"{schema}.{table}", []).append((column, kind))
        self.execute = lru_cache(maxsize=cache_size)(self._execute)    # exceptions are not cached
        self.substring_values = lru_cache(maxsize=cache_size)(self._substring_values)

    def schema_columns(self) -> dict[str, list[tuple[str, str]]]:
        return self.schema

    def _connect(self) -> duckdb.DuckDBPyConnection:
        megabytes = f"{self.limits.max_heap_bytes // 2**20}MB"
        config = {"access_mode": "READ_ONLY", "memory_limit": megabytes, "temp_directory": self._spill,
                  "max_temp_directory_size": megabytes, "threads": 2, "autoinstall_known_extensions": False,
                  "autoload_known_extensions": False}
        conn = duckdb.connect(str(self.path), read_only=True, config=config)
        conn.execute("SET enable_external_access = false")
        conn.execute("SET lock_configuration = true")
        return conn

    def _conn(self) -> duckdb.DuckDBPyConnection:
        """One connection per thread (DuckDB connections are not shared across threads)."""
        if not hasattr(self._local, "conn"):
            with self._lock:
                self._local.conn = self._connect()
        return self._local.conn

    def _connection_for_schema(self):
        return duckdb.connect(str(self.path), read_only=True)

    # --- schema ------------------------------------------------------------------------------------------------

    def _column(self, table: str, column: str) -> str:
        if column not in self.column_names(table):
            raise UnknownIdentifier(f"column {column!r} not found in table {table!r}")
        return _quote(column)

    def table_info(self, table: str, sample_rows: int = 3) -> str:
        self.column_names(table)
        rows = self.execute(f"SELECT * FROM {_table(table)} LIMIT {int(sample_rows)}").rows
        return create_table_text(TableShape(table, [(c, k, False) for c, k in self.schema[table]]), rows)

    # --- values ------------------------------------------------------------------------------------------------
    def _substring_values(self, table: str, column: str, value: str, k: int = 100) -> list:
        col = self._column(table, column)
        sql = (f"SELECT DISTINCT {col} FROM {_table(table)} WHERE {col} IS NOT NULL AND "
               f"contains(lower(CAST({col} AS VARCHAR)), lower(?)) LIMIT {int(k)}")
        return [r[0] for r in self._conn().execute(sql, [value]).fetchall()]

    def distinct_values(self, table: str, column: str) -> list[str]:
        col = self._column(table, column)
        rows = self._conn().execute(f"SELECT DISTINCT {col} FROM {_table(table)} WHERE {col} IS NOT NULL").fetchall()
        return sorted(str(r[0]) for r in rows)

    # --- agent SQL ---------------------------------------------------------------------------------------------
    def _execute(self, sql: str, timeout_s: float = 60.0, count_cap: int = 1_000_000, keep: int = 100,
                 sort_key=None) -> QueryResult:
        conn = self._conn()
        try:
            statements = conn.extract_statements(sql)
        except duckdb.Error as e:
            raise QueryError(str(e)) from None
        if len(statements) != 1:
            raise QueryError("You can only execute one statement at a time.")
        kind = statements[0].type
        if kind != duckdb.StatementType.SELECT:
            raise QueryError(f"query refused: the database is read-only and {kind.name} is not allowed "
                             "(only SELECT / WITH queries may run)")
        timer = threading.Timer(timeout_s, conn.interrupt)
        started = time.monotonic()
        timer.start()
        try:
            cursor = conn.execute(sql)
            return fetch_bounded(cursor, keep, count_cap, self.limits, sort_key)
        except duckdb.InterruptException:
            raise QueryTimeout(f"query exceeded the {timeout_s:g} s time limit and was stopped") from None
        except (duckdb.OutOfMemoryException, MemoryError):
            raise MemoryLimitError(f"query stopped: it needed more than the database's "
                             f"{self.limits.max_heap_bytes:,}-byte memory limit") from None
        except duckdb.PermissionException as e:
            raise QueryError(f"query refused: {str(e).splitlines()[0]}") from None
        except (duckdb.FatalException, duckdb.InternalException) as e:
            raise RuntimeError(f"DuckDB engine failed (not the query's fault): {e}") from None
        except duckdb.Error as e:
            if time.monotonic() - started >= timeout_s:
                raise QueryTimeout(f"query exceeded the {timeout_s:g} s time limit and was stopped") from None
            raise QueryError(str(e).strip()) from None      # the whole message: its hints and the LINE pointer
        finally:
            timer.cancel()

    def close(self) -> None:
        if hasattr(self._local, "conn"):
            self._local.conn.close()


class DuckDatabase(_Schema):
    """A DuckDB file behind the same interface as `Database`, its engine in memory-capped child processes."""
    ENGINE = "ehrbench.db.duckdb_database:DuckEngine"
    BASELINE_BYTES = 2**30          # a child's address space before any query (Python, DuckDB, thread stacks)

    def __init__(self, path: str | Path, db_id: str | None = None, cache_size: int = 4096,
                 limits: QueryLimits = QueryLimits(), workers: int = 2):
        from .sandbox import Sandbox

        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"database file {self.path} does not exist (build it with ehrbench's data step)")
        self.db_id = db_id or self.path.stem
        self.limits = limits
        self.spill_dir = tempfile.mkdtemp(prefix="ehrbench-duckdb-")    # the engines' temp files; removed on close
        self.sandbox = Sandbox(self.ENGINE, (str(self.path), self.db_id),
                               {"cache_size": 1, "limits": limits, "spill_dir": self.spill_dir},
                               workers=workers, address_space_bytes=self.BASELINE_BYTES + limits.max_heap_bytes)
        self.schema = self.sandbox.call("schema_columns")
        self.execute = lru_cache(maxsize=cache_size)(self._execute)    # exceptions are not cached
        self.substring_values = lru_cache(maxsize=cache_size)(self._substring_values)


    def table_info(self, table: str, sample_rows: int = 3) -> str:
        self.column_names(table)
        return self.sandbox.call("table_info", table, sample_rows)

    def _substring_values(self, table: str, column: str, value: str, k: int = 100) -> list:
        return self.sandbox.call("substring_values", table, column, value, k)

    def distinct_values(self, table: str, column: str) -> list[str]:
        return self.sandbox.call("distinct_values", table, column, deadline_s=600.0)

    def _execute(self, sql: str, timeout_s: float = 60.0, count_cap: int = 1_000_000, keep: int = 100,
                 sort_key=None) -> QueryResult:
        return self.sandbox.call("execute", sql, timeout_s, count_cap, keep, sort_key, deadline_s=timeout_s)

    def close(self) -> None:
        self.sandbox.close()
        shutil.rmtree(self.spill_dir, ignore_errors=True)
