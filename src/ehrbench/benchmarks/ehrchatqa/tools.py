"""The six EHR-ChatQA tools, written once and parameterised by database.

What the model is told (names, descriptions, arguments) and what it gets back (every returned string, errors
included) follow the authors' code (glee4810/EHR-ChatQA src/envs/<db>/tools/, and `Env.step` for unknown tools and
bad arguments). The work is done by a database and a value index reached through async hosts (`runtime/hosts.py`:
an in-process object in tests, Ray actors on a cluster) and a web-search backend, so the same ToolSuite runs in
both. ehrbench checks table and column names before any SQL is built from them; the outcome is worded as the
original's SQL error would word it. It also bounds what the original leaves open: a query's time (the agent's
`timeout`, at most `max_sql_timeout_s`) and the size of what a query may return (db/limits.py).
"""
from __future__ import annotations

import functools
import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Protocol

from ...db.database import as_original_sqlalchemy, dbapi_error_text
from ...db.limits import QueryError, QueryResult, QueryTimeout
from .web_search import WebSearch


class DatabaseLike(Protocol):
    async def table_names(self) -> list[str]: ...
    async def column_names(self, table: str) -> list[str]: ...
    async def table_info(self, table: str, sample_rows: int = 3) -> str: ...
    async def substring_values(self, table: str, column: str, value: str, k: int = 100) -> list: ...
    async def execute(self, sql: str, timeout_s: float = 60.0, count_cap: int = 1_000_000,
                      keep: int = 100, sort_key=None) -> QueryResult: ...


class IndexLike(Protocol):
    async def search(self, db_id: str, table: str, column: str, query: str, k: int = 100) -> list[str]: ...


class ToolArgumentError(ValueError):
    pass


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}


_S = {"type": "string"}
_TABLE_COLUMN = {"table": {**_S, "description": "The table name."}, "column": {**_S, "description": "The column name."}}
SIMILARITY_DESCRIPTION = ("Perform a semantic similarity search (embedding-based) to find up to k values similar to a "
                          "given value in a specified column. Supported columns: {columns}")


def tool_schemas(indexed_columns: dict[str, list[str]]) -> list[dict]:
    """The six tools as the original describes them to the model, in its order; the similarity search lists the
    columns it can search in this database."""
    columns = ", ".join(f"{table}: {cols!r}" for table, cols in indexed_columns.items())
    return [
        _fn("table_search", "Get the list of table names in the database.",
            {"tool_input": {**_S, "description": "An empty string; no input required."}}, []),
        _fn("column_search", "Get the columns of a specific table and its sample rows.",
            {"table_names": {**_S, "description": "A comma-separated list of table names to retrieve schema and "
                                                  "sample rows for."}}, ["table_names"]),
        _fn("sql_execute", "Execute a SQL query against the database and get back the result. If the query is not "
                           "correct, an error message will be returned. The maximum number of results to return is 100.",
            {"query": {**_S, "description": "A valid SQL query to execute."},
             "k": {"type": "integer", "description": "The maximum number of results to return. Default is 100."},
             "timeout": {"type": "integer", "description": "Maximum execution time in seconds before the query is "
                                                           "terminated. Default is 60 seconds."}}, ["query"]),
        _fn("value_substring_search", "Retrieve up to k values from a column that contains the specified substring.",
            {**_TABLE_COLUMN, "value": {**_S, "description": "The substring to search for."},
             "k": {"type": "integer", "description": "The maximum number of values to return. Default is 100."}},
            ["table", "column", "value"]),
        _fn("value_similarity_search", SIMILARITY_DESCRIPTION.format(columns=columns),
            {**_TABLE_COLUMN, "value": {**_S, "description": "The value to search for similar matches."},
             "k": {"type": "integer", "description": "The number of similar values to return. Default is 100."}},
            ["table", "column", "value"]),
        _fn("web_search", "Perform a web search to obtain external knowledge.",
            {"query": {**_S, "description": "The search query."}}, ["query"]),
    ]


TOOL_NAMES = ("table_search", "column_search", "sql_execute", "value_substring_search", "value_similarity_search",
              "web_search")


# The original's tool signatures: calling them with the model's arguments raises Python's own TypeError for a
# missing or unexpected argument, which the original shows the agent as "Error: <message>".
class TableSearch:
    def invoke(self, tool_input: str = ""): return {}
class ColumnSearch:  # noqa: E302
    def invoke(self, table_names): return {"table_names": table_names}
class SQLExecute:  # noqa: E302
    def invoke(self, query, k=100, timeout=60): return {"query": query, "k": k, "timeout": timeout}
class ValueSubstringSearch:  # noqa: E302
    def invoke(self, table, column, value, k=100): return {"table": table, "column": column, "value": value, "k": k}
class ValueSimilaritySearch:  # noqa: E302
    def invoke(self, table, column, value, k=100): return {"table": table, "column": column, "value": value, "k": k}
class WebSearchTool:  # noqa: E302
    def invoke(self, query): return {"query": query}


WebSearchTool.__name__ = WebSearchTool.__qualname__ = "WebSearch"
WebSearchTool.invoke.__qualname__ = "WebSearch.invoke"
SIGNATURES = {"table_search": TableSearch, "column_search": ColumnSearch, "sql_execute": SQLExecute,
              "value_substring_search": ValueSubstringSearch, "value_similarity_search": ValueSimilaritySearch,
              "web_search": WebSearchTool}


def _int(value) -> int:
    """`k` and `timeout` as the original reads them: a string goes through int() (its error is the agent's)."""
    value = int(value) if isinstance(value, str) else value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolArgumentError(f"expected an integer, got {value!r}")
    return value


def _seconds(value) -> float:
    """`timeout` as the original reads it: a string through int(), a number as given."""
    value = int(value) if isinstance(value, str) else value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolArgumentError(f"expected a number of seconds, got {value!r}")
    return value


def _stored_name(name: str, stored: list[str]) -> str | None:
    if name in stored:
        return name
    return next((s for s in stored if s.lower() == name.lower()), None)


def _value_repr(value) -> str:
    """A value inside a result row as SQLAlchemy's Row repr shows it: reprs over 300 characters are cut."""
    rep = repr(value)
    if len(rep) > 300:
        rep = rep[:150] + f" ... ({len(rep) - 300} characters truncated) ... " + rep[-150:]
    return rep


def rows_text(rows: list[tuple]) -> str:
    return "[" + ", ".join("(" + ", ".join(_value_repr(v) for v in row) + ("," if len(row) == 1 else "") + ")"
                           for row in rows) + "]"


@functools.lru_cache(maxsize=1)
def _bind_engine():
    import sqlalchemy as sa

    return sa.create_engine("sqlite://")


def through_text(query: str) -> tuple[str, str | None]:
    """The query as the original's sql_execute sends it, through SQLAlchemy's `text()`: (the SQL that reaches the
    database, None), or (query, SQLAlchemy's error) when it cannot run. `text()` reads `:name` after a non-word
    character as a bind parameter, inside a string literal too (`WHERE note = 'see :abc'`), and no values are sent:
    "(sqlalchemy.exc.InvalidRequestError) A value is required for bind parameter 'abc'"; and it unescapes `\\:`
    to `:`. SQLAlchemy raises before anything reaches a database (here an empty in-memory one)."""
    import sqlalchemy as sa

    clause = sa.text(query)
    try:
        compiled = clause.compile(dialect=_bind_engine().dialect)
        if not compiled.params:
            return str(compiled), None
        with _bind_engine().connect() as conn:
            conn.execute(clause)
    except sa.exc.StatementError as e:
        return query, as_original_sqlalchemy(str(e))
    except sa.exc.SQLAlchemyError:
        return query, None
    return query, None


@dataclass
class ToolSuite:
    db_id: str
    db: DatabaseLike
    index: IndexLike
    web: WebSearch
    indexed_columns: dict[str, list[str]]
    sql_timeout_s: float = 60.0         # sql_execute's default `timeout`
    max_sql_timeout_s: float = 600.0    # the most an agent's `timeout` may ask for (the original has no cap)
    bind_parameters: bool = False       # read `:name` as SQLAlchemy's text() does (the original's sql_execute)

    async def call(self, name: str, arguments: dict[str, Any] | None) -> str:
        """Run one tool call; every failure comes back as an observation, never as an exception."""
        if name not in SIGNATURES:
            return f"Unknown action {name}"
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return f"Error: arguments of {name} must be a JSON object"
        try:
            bound = SIGNATURES[name]().invoke(**arguments)
        except TypeError as e:                 # a missing or unexpected argument, in Python's words
            return f"Error: {e}"
        try:
            return await getattr(self, name)(**bound)
        except (ValueError, QueryError) as e:  # a bad value (int('abc')), a refused or failed query
            return f"Error: {e}"

    # --- schema exploration ----------------------------------------------------------------------------------
    async def table_search(self) -> str:
        return ", ".join(await self.db.table_names())

    async def column_search(self, table_names) -> str:
        blocks = []
        for table in str(table_names).split(","):
            table = table.strip()
            stored = await self._stored_table(table)
            if stored is None:
                blocks.append(f"Error: table_names {{'{table}'}} not found in database")
                continue
            text = await self.db.table_info(stored)
            if stored != table:               # SQLite ignores the case of names; the original echoes what was typed
                text = text.replace(f"CREATE TABLE {stored} (", f"CREATE TABLE {table} (", 1).replace(
                    f"3 rows from {stored} table:", f"3 rows from {table} table:", 1)
            blocks.append(text)
        return "\n\n\n".join(blocks)

    # --- value exploration -----------------------------------------------------------------------------------
    async def _stored_table(self, name: str) -> str | None:
        """The table's stored name, matched as SQLite matches names (ignoring case), or None."""
        return _stored_name(name, await self.db.table_names())

    async def value_substring_search(self, table, column, value, k=100) -> str:
        table, column, value, k = str(table), str(column), str(value), _int(k)
        stored_table = await self._stored_table(table)
        stored_column = _stored_name(column, await self.db.column_names(stored_table)) if stored_table else None
        if stored_column is None:             # SQLite's complaint, worded as the original's SQLAlchemy shows it
            problem = f"no such table: {table}" if stored_table is None else f"no such column: {column}"
            sql = f"SELECT COUNT(DISTINCT {column}) FROM {table} WHERE {column} LIKE ? COLLATE NOCASE"
            return "Error retrieving matching values: " + dbapi_error_text(sql, sqlite3.OperationalError(problem),
                                                                           (f"%{value}%",))
        values = await self.db.substring_values(stored_table, stored_column, value, k) if k > 0 else []
        if not values:
            return f"No values in {table}.{column} contain '{value}'."
        return f"Values in {table}.{column} containing '{value}': {values}."

    async def value_similarity_search(self, table, column, value, k=100) -> str:
        table, column, k = str(table), str(column), _int(k)
        value = str(value).lower()
        searchable = column in self.indexed_columns.get(table, [])
        values = await self.index.search(self.db_id, table, column, value, k) if searchable and k > 0 else []
        if not values:               # the original's filter matches nothing for a column it did not index
            return f"No matches found in {table}.{column} for '{value}'."
        if len(values) == 1:
            return f"I found one close match in {table}.{column}: '{values[0]}'."
        return f"I found close matches in {table}.{column}: {values}."

    # --- execution and knowledge -----------------------------------------------------------------------------
    async def sql_execute(self, query, k=100, timeout=None) -> str:
        query, k = str(query), _int(k)
        timeout = self.sql_timeout_s if timeout is None else _seconds(timeout)
        limit_s = min(timeout, self.max_sql_timeout_s) if timeout > 0 else self.max_sql_timeout_s
        if k < 0:
            raise ToolArgumentError("k must be 0 or more")
        if self.bind_parameters:
            query, unbound = through_text(query)
            if unbound:
                return f"Error: {unbound}"
        try:
            result = await self.db.execute(query, timeout_s=limit_s, keep=k)
        except QueryTimeout:
            return f"Error: Query execution timed out after {timeout:g} seconds"
        text = rows_text(result.rows[:k])
        if result.total > k:
            more = "more than " if result.capped else ""
            text += (f"\n\nNote: There are {more}{result.total - k} results not shown "
                     f"(out of {more}{result.total} total results).")
        return text

    async def web_search(self, query) -> str:
        results = self.web.search(str(query), max_results=10)
        return json.dumps([r["snippet"] for r in results], ensure_ascii=False, indent=2)
