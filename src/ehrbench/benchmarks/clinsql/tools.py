"""The harness's side of ClinSQL's protocol as the trial's one tool: `execute_bigquery(sql)`.

The original sends the model's BigQuery SQL to BigQuery; here sqlglot transpiles it (`dialect.py`) and the hosted,
read-only MIMIC-IV DuckDB runs it behind the database guards (time, memory, result size, one SELECT). A transpile
failure is the model's error and comes back like an execution error. The observation is what a BigQuery client
would show (the error text, or the row count and the first rows); the whole result is kept for grading as
`last` (a `Candidate`), with the dialect path each query took.
"""
from __future__ import annotations

from ...db.limits import QueryError
from .dialect import TranspileError, bigquery_to_duckdb
from .scoring import Candidate
from .tasks import csv_text

TOOL = "execute_bigquery"
PREVIEW_ROWS = 20
UNLIMITED = 10 ** 9          # rows, when there is no row limit


class BigQueryTools:
    """`max_rows=None`: no row limit, as the original's BigQuery client fetched every row (the database's byte limit
    on a result still holds)."""

    def __init__(self, db, timeout_s: float = 300.0, max_rows: int | None = None):
        self.db, self.timeout_s, self.max_rows = db, timeout_s, max_rows
        self.last = Candidate()
        self.dialect_paths: list[list[str]] = []      # per executed query: sqlglot read bigquery -> duckdb + steps

    async def call(self, name: str, arguments: dict) -> str:
        if name != TOOL:
            return f"Error: unknown tool {name!r}; the only tool is {TOOL}"
        sql = str(arguments.get("sql") or "")
        self.last = Candidate(sql=sql)
        try:
            duck = bigquery_to_duckdb(sql)
        except TranspileError as e:
            self.last.error = str(e)
            self.dialect_paths.append(["bigquery -> duckdb: failed"])
            return f"Error: {e}"
        self.dialect_paths.append(["bigquery -> duckdb (sqlglot)", *duck.steps])
        cap = UNLIMITED if self.max_rows is None else self.max_rows
        try:
            result = await self.db.execute(duck.sql, self.timeout_s, cap + 1, cap)
        except QueryError as e:
            self.last.error = str(e)
            return f"Error: {e}"
        if self.max_rows is not None and result.total > self.max_rows:
            self.last.error = f"the result has more than {self.max_rows:,} rows; aggregate it (cohort statistics)"
            return f"Error: {self.last.error}"
        self.last = Candidate(sql, True, tuple(result.columns), list(result.rows))
        shown = csv_text(result.columns, result.rows[:PREVIEW_ROWS])
        more = f"... {result.total - PREVIEW_ROWS} more rows\n" if result.total > PREVIEW_ROWS else ""
        return f"Query ran: {result.total} rows\n{shown}{more}"
