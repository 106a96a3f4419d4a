"""EHR-ChatQA's reference agent: an oracle that knows the task's gold SQL, used as the harness's self-check.

It behaves like a careful agent would (lists tables, reads the schemas of the tables the query touches, looks up
the stored values the query compares against, then answers each user turn with a fresh `sql_execute`), but the
SQL it runs is the gold SQL. It must score 100% on every task: a failure is a bug in the task or the harness.
Each action awaits one scripted model call (`llm/scripted.py`), so it paces like a model-driven agent.
"""
from __future__ import annotations

import ast
from functools import lru_cache

import sqlglot
from sqlglot import exp

from ...llm.scripted import ScriptedCall
from ...trial import Message, ToolCall
from .scoring import render_answer


def plan_exploration(sql: str, indexed: dict[str, list[str]], max_values: int = 2) -> list[ToolCall]:
    """table_search, column_search over the query's tables, and value searches for its string literals."""
    key = tuple((t, tuple(c)) for t, c in sorted(indexed.items()))
    return [ToolCall(c.name, dict(c.arguments)) for c in _plan(sql, key, max_values)]


@lru_cache(maxsize=4096)
def _plan(sql: str, indexed_key: tuple, max_values: int) -> tuple[ToolCall, ...]:
    """Parsing is the agent's main cost; every trial of a task plans the same, so plan once per process."""
    indexed = {t: list(c) for t, c in indexed_key}
    tree = sqlglot.parse_one(sql, read="sqlite")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    tables = sorted({t.name for t in tree.find_all(exp.Table)} - ctes)
    aliases = {t.alias_or_name: t.name for t in tree.find_all(exp.Table) if t.name not in ctes}
    calls = [ToolCall("table_search", {"tool_input": ""}), ToolCall("column_search", {"table_names": ", ".join(tables)})]
    seen = set()
    for lit in tree.find_all(exp.Literal):
        parent = lit.parent
        while isinstance(parent, (exp.Tuple, exp.Paren)):
            parent = parent.parent
        col = parent.find(exp.Column) if isinstance(parent, (exp.EQ, exp.In, exp.Like)) and lit.is_string else None
        if col is None or col.table not in aliases and len(tables) != 1:
            continue
        table = aliases.get(col.table, tables[0])
        value = lit.this.strip("%").strip()
        if not value or (table, col.name) in seen or len(seen) >= max_values:
            continue
        seen.add((table, col.name))
        calls.append(ToolCall("value_substring_search", {"table": table, "column": col.name, "value": value[:40]}))
        if col.name in indexed.get(table, []):
            calls.append(ToolCall("value_similarity_search", {"table": table, "column": col.name, "value": value, "k": 5}))
    return tuple(calls)


def rows_from_observation(observation: str) -> list[tuple]:
    return ast.literal_eval(observation.split("\n\nNote:")[0])


class ReferenceAgent:
    def __init__(self, task, indexed_columns: dict[str, list[str]], think: ScriptedCall | None = None):
        self.task, self.think = task, think
        self.plan = plan_exploration(task.gold_sql, indexed_columns)
        for i, call in enumerate(self.plan):
            call.id = f"call_{i}"

    async def act(self, history: list[Message]) -> Message:
        if self.think:
            await self.think()
        if self.plan:
            return Message("assistant", tool_call=self.plan.pop(0))
        last = history[-1]
        if last.role == "tool" and history[-2].tool_call and history[-2].tool_call.name == "sql_execute":
            return Message("assistant", self._answer(rows_from_observation(last.content or "[]")))
        if last.role == "user" and "double check" in (last.content or "").lower():
            return Message("assistant", "Yes. I re-ran the query with every condition you gave me; "
                                        + self._last_answer(history))
        return Message("assistant", tool_call=ToolCall("sql_execute", {"query": self.task.gold_sql, "k": 100},
                                                       id=f"sql_{len(history)}"))

    def _answer(self, rows: list[tuple]) -> str:
        if self.task.task_type == "adapt":
            values = ", ".join(v for row in render_answer(rows) for v in row)
            return f"Here is what I found: <answer>{values}</answer>"
        return f"The query returned: {rows}"

    def _last_answer(self, history: list[Message]) -> str:
        for m in reversed(history):
            if m.role == "assistant" and m.content and not m.is_tool_call and "I re-ran" not in m.content:
                return m.content
        return ""
