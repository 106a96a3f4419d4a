"""The six EHR-ChatQA tools, written once and parameterised by database.

Names, arguments and returned strings follow the public implementation (specs/ehr-chatqa.md, Tools). The tools
format; the work is done by a database and a value index reached through async hosts (`runtime/hosts.py`: an
in-process object in tests, Ray actors on a cluster) and a web-search backend, so the same ToolSuite runs in both.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from ...db.limits import QueryError, QueryResult
from .web_search import WebSearch


class DatabaseLike(Protocol):
    async def table_names(self) -> list[str]: ...
    async def column_names(self, table: str) -> list[str]: ...
    async def table_info(self, table: str, sample_rows: int = 3) -> str: ...
    async def substring_values(self, table: str, column: str, value: str, k: int = 100) -> list: ...
    async def execute(self, sql: str, timeout_s: float = 60.0, count_cap: int = 1_000_000,
                      keep: int = 100) -> QueryResult: ...


class IndexLike(Protocol):
    async def search(self, db_id: str, table: str, column: str, query: str, k: int = 100) -> list[str]: ...


class ToolArgumentError(ValueError):
    pass


TOOL_SCHEMAS: list[dict] = [
    {"name": "table_search", "description": "List all tables in the database.",
     "parameters": {"type": "object", "properties": {"tool_input": {"type": "string", "description": "ignored"}}}},
    {"name": "column_search", "description": "Show the columns of the given tables with 3 sample rows.",
     "parameters": {"type": "object", "properties": {"table_names": {
         "type": "string", "description": "comma-separated table names"}}, "required": ["table_names"]}},
    {"name": "value_substring_search", "description": "Find stored values of a column containing a substring.",
     "parameters": {"type": "object", "properties": {
         "table": {"type": "string"}, "column": {"type": "string"}, "value": {"type": "string"},
         "k": {"type": "integer", "default": 100}}, "required": ["table", "column", "value"]}},
    {"name": "value_similarity_search",
     "description": "Find stored values of a pre-indexed column similar in meaning to a value (embedding search).",
     "parameters": {"type": "object", "properties": {
         "table": {"type": "string"}, "column": {"type": "string"}, "value": {"type": "string"},
         "k": {"type": "integer", "default": 100}}, "required": ["table", "column", "value"]}},
    {"name": "sql_execute", "description": "Execute one read-only SQLite query and return up to k rows.",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string"}, "k": {"type": "integer", "default": 100}}, "required": ["query"]}},
    {"name": "web_search", "description": "Search the web for clinical knowledge not in the database.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
]
TOOL_NAMES = tuple(s["name"] for s in TOOL_SCHEMAS)


def _str_arg(args: dict, name: str) -> str:
    if name not in args or args[name] is None:
        raise ToolArgumentError(f"missing required argument '{name}'")
    if not isinstance(args[name], (str, int, float)):
        raise ToolArgumentError(f"argument '{name}' must be a string")
    return str(args[name])


def _k_arg(args: dict, default: int = 100) -> int:
    try:
        k = int(args.get("k", default))
    except (TypeError, ValueError):
        raise ToolArgumentError(f"argument 'k' must be an integer, got {args.get('k')!r}") from None
    if k < 1:
        raise ToolArgumentError("argument 'k' must be at least 1")
    return k


@dataclass
class ToolSuite:
    db_id: str
    db: DatabaseLike
    index: IndexLike
    web: WebSearch
    indexed_columns: dict[str, list[str]]
    sql_timeout_s: float = 60.0

    async def call(self, name: str, arguments: dict[str, Any] | None) -> str:
        """Run one tool call; every failure comes back as an `Error: ...` observation, never as an exception."""
        if name not in TOOL_NAMES:
            return f"Error: unknown tool {name!r}; available tools: {', '.join(TOOL_NAMES)}"
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return f"Error: arguments of {name} must be a JSON object"
        try:
            return await getattr(self, name)(arguments)
        except (ToolArgumentError, QueryError) as e:
            return f"Error: {e}"

    # --- schema exploration ----------------------------------------------------------------------------------
    async def table_search(self, args: dict) -> str:
        return ", ".join(await self.db.table_names())

    async def column_search(self, args: dict) -> str:
        names = [n.strip() for n in _str_arg(args, "table_names").split(",") if n.strip()]
        missing = set(names) - set(await self.db.table_names())
        if missing or not names:
            return f"Error: table_names {missing or {''}} not found in database"
        return "\n\n".join([await self.db.table_info(n) for n in names])

    # --- value exploration -----------------------------------------------------------------------------------
    async def _table_column(self, args: dict) -> tuple[str, str]:
        table, column = _str_arg(args, "table"), _str_arg(args, "column")
        if table not in await self.db.table_names():
            raise ToolArgumentError(f"table {table!r} not found in database")
        if column not in await self.db.column_names(table):
            raise ToolArgumentError(f"column {column!r} not found in table {table!r}")
        return table, column

    async def value_substring_search(self, args: dict) -> str:
        table, column = await self._table_column(args)
        value, k = _str_arg(args, "value"), _k_arg(args)
        values = await self.db.substring_values(table, column, value, k)
        if not values:
            return f"No values in {table}.{column} contain '{value}'."
        return f"Values in {table}.{column} containing '{value}': {values}."

    async def value_similarity_search(self, args: dict) -> str:
        table, column = await self._table_column(args)
        value, k = _str_arg(args, "value"), _k_arg(args)
        if column not in self.indexed_columns.get(table, []):
            searchable = "; ".join(f"{t}: {', '.join(c)}" for t, c in sorted(self.indexed_columns.items()))
            return (f"Error: {table}.{column} is not pre-indexed for similarity search; indexed columns are "
                    f"{searchable}. Use value_substring_search for other columns.")
        values = await self.index.search(self.db_id, table, column, value, k)
        if not values:
            return f"No matches found in {table}.{column} for '{value}'."
        if len(values) == 1:
            return f"I found one close match in {table}.{column}: {values}."
        return f"I found close matches in {table}.{column}: {values}."

    # --- execution and knowledge -----------------------------------------------------------------------------
    async def sql_execute(self, args: dict) -> str:
        query, k = _str_arg(args, "query"), _k_arg(args)
        result = await self.db.execute(query, timeout_s=self.sql_timeout_s, keep=k)
        text = str(result.rows[:k])
        if result.total > k:
            more = "more than " if result.capped else ""
            text += (f"\n\nNote: There are {more}{result.total - k} results not shown "
                     f"(out of {more}{result.total} total results).")
        return text

    async def web_search(self, args: dict) -> str:
        return json.dumps(self.web.search(_str_arg(args, "query"), max_results=10), ensure_ascii=False)
