"""The paper's baselines on EHRAgent's own tools and sandbox (paper section 4.1, Table 2):

- `react`: ReAct, tool use without a code interface: the six tools as separate function calls (a table is named,
  not held in a variable), the tools' error messages as its only feedback.
- `llm2sql`: LLM2SQL, one model call writes one SQL query, which is run once; no feedback.
- `self_debugging`: Self-Debugging, SQL through a code interface with execution feedback: an error or an empty result
  goes back with the request to explain the query and fix it, for at most 10 executions.

Every call runs as a cell in the same sandbox as EHRAgent's (same limits, same read-only database, same error
texts). The public code has no baselines, so their prompts are ehrbench's: the database description of EHRAgent's
prompt, each table's CREATE TABLE text, and the chatbot's rule "Reply TERMINATE when the task is done"; all three are
scored as EHRAgent is (TERMINATE, then the original's judge on the last observation and the final reply). They get
no examples: EHRAgent's four examples are tool-code, not SQL, and ReAct cannot hold a table in a variable.
"""
from __future__ import annotations

import re

from ...agents.tool_calling import tool_call_message
from ...llm.base import ChatRequest, Sampling
from ...llm.usage import MeteredModel
from ...trial import Message, ToolCall
from .prompts import prompts
from .tools import FEEDBACK, CodeInterface

MAX_EXECUTIONS = 10
RULES = ("Reply with the final answer followed by TERMINATE when the task is done (for example: 'The answer is 5.\n"
         "TERMINATE'). Yes/no answers are 1 or 0.")
SQL_FIX = "Explain the SQL query line by line, find what is wrong, and reply with the fixed query."


def _tool(name: str, description: str, **params: str) -> dict:
    return {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
        "required": list(params)}}


REACT_TOOLS = [
    _tool("LoadDB", "Load a table and show its columns and first rows.", table="the table's name"),
    _tool("FilterDB", "Rows of a table that meet the conditions (FilterDB's syntax: 'COL=value||COL>value', "
          "'COL in [a, b]', 'max(COL)').", table="the table's name", conditions="the conditions"),
    _tool("GetValue", "Values of a column of the (filtered) table: 'COL' or 'COL, op' with op in mean, max, min, sum, "
          "list.", table="the table's name", conditions="FilterDB conditions, or '' for the whole table",
          argument="the column, and optionally the operation"),
    _tool("SQLInterpreter", "Run one read-only SQL query and return its rows.", sql="the query"),
    _tool("Calendar", "The date after a duration from now, e.g. '-1 year'.", duration="the duration"),
    _tool("Calculate", "Evaluate an arithmetic formula.", formula="the formula"),
]
SQL_TOOL = [_tool("execute_sql", "Run one read-only SQL query and return its rows.", sql="the query")]


def react_cell(name: str, args: dict) -> str:
    """The one-line program a ReAct tool call stands for."""
    a = {k: str(v) for k, v in args.items()}
    table = f"LoadDB({a.get('table', '')!r})"
    filtered = f"FilterDB({table}, {a.get('conditions', '')!r})" if a.get("conditions", "").strip() else table
    return {"LoadDB": f"answer = {table}.head(5)",
            "FilterDB": f"answer = {filtered}",
            "GetValue": f"answer = GetValue({filtered}, {a.get('argument', '')!r})",
            "SQLInterpreter": f"answer = SQLInterpreter({a.get('sql', '')!r})",
            "Calendar": f"answer = Calendar({a.get('duration', '')!r})",
            "Calculate": f"answer = Calculate({a.get('formula', '')!r})"}.get(name, "")


class BaselineTools:
    """ReAct's six tools, or the SQL baselines' `execute_sql`, each call run as a cell by EHRAgent's interface."""

    def __init__(self, code: CodeInterface, kind: str):
        self.code, self.kind = code, kind

    @property
    def last_answer(self):
        return self.code.last_answer

    async def call(self, name: str, arguments: dict) -> str:
        if self.kind == "react":
            cell = react_cell(name, arguments)
        else:
            cell = f"answer = SQLInterpreter({str(arguments.get('sql', ''))!r})" if name == "execute_sql" else ""
        if not cell:
            return f"Error: Function {name} not found."
        out = await self.code.call("python", {"cell": cell})
        out = out.replace(FEEDBACK, "")                      # the code-interface's advice does not fit a tool call
        if self.kind == "self_debugging" and ("Error" in out or out in ("[]", "None")):
            out += "\n" + SQL_FIX
        return out


async def schema_text(db, tables: dict[str, str]) -> str:
    return "\n\n".join([await db.table_info(stored, 0) for stored in tables.values()])


def description(db_id: str) -> str:
    """The database description at the head of EHRAgent's prompt (before its tool list)."""
    return prompts(db_id)["EHRAgent_Message_Prompt"].split("Write a python code")[0].strip()


class BaselineAgent:
    """ReAct and Self-Debugging: a tool-calling loop (at most 10 executions, then one last reply); LLM2SQL: one
    query, run once, its result as the answer."""

    def __init__(self, kind: str, model: MeteredModel, db_id: str, db, tables: dict[str, str], seed: int | None = None,
                 sampling: Sampling = Sampling(temperature=0.0)):
        self.kind, self.model, self.db_id, self.db, self.tables, self.seed = kind, model, db_id, db, tables, seed
        self.params = sampling.request(seed)
        self._system: str | None = None

    async def system(self) -> str:
        if self._system is None:
            task = ("Answer the question with the tools." if self.kind == "react" else
                    "Answer the question with one SQLite query." + (" Reply with the query only, in a ```sql block."
                                                                    if self.kind == "llm2sql" else ""))
            self._system = (f"{description(self.db_id)}\nThe tables:\n{await schema_text(self.db, self.tables)}\n\n"
                            f"{task} {RULES if self.kind != 'llm2sql' else ''}".strip())
        return self._system

    async def act(self, history: list[Message]) -> Message:
        if self.kind == "llm2sql":
            return await self._llm2sql(history)
        executions = sum(1 for m in history if m.role == "tool")
        last_chance = executions >= MAX_EXECUTIONS
        response = await self.model.complete(ChatRequest(
            history, system=await self.system(), tools=None if last_chance else
            (REACT_TOOLS if self.kind == "react" else SQL_TOOL), **self.params))
        if response.tool_calls and not last_chance:
            return tool_call_message(response, f"call_{executions + 1}")
        return Message("assistant", response.text or "", finish_reason=response.finish_reason,
                       provider_parts=response.provider_parts)

    async def _llm2sql(self, history: list[Message]) -> Message:
        observations = [m.content or "" for m in history if m.role == "tool"]
        if observations:        # the query ran: its result is the answer; an error leaves the question unanswered
            result = observations[-1]
            return Message("assistant", result if "Error" in result else f"The answer is {result}.\nTERMINATE")
        response = await self.model.complete(ChatRequest(history, system=await self.system(), **self.params))
        return Message("assistant", None, tool_call=ToolCall("execute_sql", {"sql": extract_sql(response.text or "")},
                                                             "call_1"))


def extract_sql(text: str) -> str:
    """The query in a ```sql block (or any fenced block), else the whole reply."""
    fenced = re.findall(r"```(?:sql|sqlite)?\s*\n?(.*?)```", text, flags=re.S | re.I)
    return (fenced[-1] if fenced else text).strip()
