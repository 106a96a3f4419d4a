"""EHRAgent's one function, `python(cell)`, as the trial's tool: the cell runs in the code sandbox with the toolset
bound (`toolset.py`); its result, or its error parsed as the original's `run_code` words it, is the observation; an
observation mentioning an error gets one rubber-duck debugging call ("Potential Reasons: ...") unless debugging is
switched off. LoadDB and SQLInterpreter reach the hosted, read-only database through `serve`.
"""
from __future__ import annotations

import asyncio

from ...agents.code_sandbox import CellLimits, CellResult, CodeSandbox
from ...db.limits import QueryError
from ...llm.base import ChatRequest
from ...llm.usage import MeteredModel
from ...trial import Message
from .prompts import DEBUGGER_FALLBACK, DEBUGGER_SYSTEM, prompts

FEEDBACK = "\nPlease make modifications accordingly and make sure the rest code works well with the modification."
SAVE_ANSWER = "Please save the answer to the question in the variable 'answer'."
TOOL_NAMES = {"get_value": "GetValue", "data_filter": "FilterDB", "db_loader": "LoadDB",
              "sql_interpreter": "SQLInterpreter", "date_calculator": "Calendar"}
LOAD_ROWS = 500_000          # LoadDB keeps at most this many rows (the result's byte limit applies too)
_SANDBOXES: dict[asyncio.AbstractEventLoop, CodeSandbox] = {}


def sandbox() -> CodeSandbox:
    """This process's code sandbox (one host per event loop, started on the first cell). The hosts of loops that
    have closed since (each `asyncio.run` is a new loop) are told to exit: nothing else would end them before the
    process does."""
    for closed in [old for old in _SANDBOXES if old.is_closed()]:
        _SANDBOXES.pop(closed).shutdown()
    loop = asyncio.get_running_loop()
    if loop not in _SANDBOXES:
        _SANDBOXES[loop] = CodeSandbox(preload=("pandas", "Levenshtein", "ehrbench.benchmarks.ehragent.toolset"))
    return _SANDBOXES[loop]


def run_code_text(result: CellResult, code: str, limits: CellLimits) -> str:
    """The observation, as the original's run_code words it: str(answer), the reminder to save the answer, or the
    error's type, message and line followed by the request to fix it."""
    if result.ended == "ok":
        lines = [line for line in code.split("\n") if line.strip() and not line.strip().startswith("#")]
        if not lines or "answer" not in lines[-1]:
            return SAVE_ANSWER
        return "None" if result.result is None else result.result
    if result.ended in ("error", "memory"):
        kind, message, number = result.error["type"], result.error["message"], result.error.get("line")
        lines = code.split("\n")
        line = lines[number - 1] if number and 0 < number <= len(lines) else ""
        if kind == "KeyError":
            message = f"KeyError({message})"
            line = next((text for text in reversed(lines) if message.split("'")[1:2] and
                         message.split("'")[1] in text), line)
        elif kind == "TypeError":             # the original names the last line that mentions the tool (or the
            key = ""                          # last line of all when none does, empty after a trailing newline)
            for internal, name in TOOL_NAMES.items():
                if internal in message:
                    message, key = message.replace(internal, name), name
            line = next((text for text in reversed(lines) if key in text), "")
        if kind in ("SyntaxError", "KeyError", "TypeError"):
            text = f'{kind}: {message}. The error messages occur in the code line "{line}".' if line else \
                f"Error: {message}."
        else:                                 # the original cuts the message out of the exception's repr
            text = "Error: " + repr_message(kind, message) + "."
    elif result.ended == "cpu_limit":
        text = f"Error: the code used more than its {limits.cpu_s:g} seconds of CPU time and was stopped."
    elif result.ended == "wall_limit":
        text = f"Error: the code ran longer than {limits.wall_s:g} seconds and was stopped."
    else:
        text = f"Error: the code crashed ({result.error and result.error.get('message')})."
    return text + FEEDBACK


def repr_message(kind: str, message: str) -> str:
    """The original's `str(repr(e)).split("('")[-1].split("')")[0]`: the message when Python quotes it with single
    quotes, the whole repr when the message holds a single quote (Python then uses double quotes)."""
    return f"{kind}({message!r})".split("('")[-1].split("')")[0]


class CodeInterface:
    """The trial's tools for one EHRAgent attempt: `python` only."""

    def __init__(self, db_id: str, db, tables: dict[str, str], question: str, now: str,
                 debugger: MeteredModel | None, limits: CellLimits, sql_timeout_s: float = 60.0):
        self.db_id, self.db, self.tables, self.question, self.now = db_id, db, tables, question, now
        self.debugger, self.limits, self.sql_timeout_s = debugger, limits, sql_timeout_s
        self.last_answer: str | None = None          # str(answer) of the last cell that ran to its end

    async def serve(self, tool: str, args: list):
        """LoadDB and SQLInterpreter for the cell, on the hosted database (read-only, time-limited)."""
        if tool == "load":
            name = str(args[0])
            if name not in self.tables:
                raise KeyError(name)
            stored = self.tables[name]                  # the table's name in the database ("ADMISSIONS")
            try:
                result = await self.db.execute(f'SELECT * FROM "{stored}"', self.sql_timeout_s, LOAD_ROWS, LOAD_ROWS)
            except QueryError as e:
                raise RuntimeError(f"the table {name} is too large for LoadDB ({e}); use SQLInterpreter with a WHERE "
                                   "clause instead") from None
            return {"columns": await self.db.column_names(stored), "rows": [list(r) for r in result.rows]}
        if tool == "sql":
            result = await self.db.execute(str(args[0]), self.sql_timeout_s, 1_000_000, 10_000)
            return [list(r) for r in result.rows]
        raise ValueError(f"unknown tool {tool!r}")

    async def call(self, name: str, arguments: dict) -> str:
        if name != "python":
            return f"Error: Function {name} not found."
        code = arguments.get("cell")
        if not isinstance(code, str):
            return "Error: run_code() missing 1 required positional argument: 'cell'."
        result = await sandbox().run(code, tools="ehrbench.benchmarks.ehragent.toolset",
                                     context={"tables": sorted(self.tables), "now": self.now}, on_tool=self.serve,
                                     limits=self.limits)
        content = run_code_text(result, code, self.limits)
        if result.ended == "ok" and content != SAVE_ANSWER:
            self.last_answer = content
        if self.debugger is not None and ("error" in content or "Error" in content):
            content += "\nPotential Reasons: " + await self._debug(code, content)
        return content

    async def _debug(self, code: str, error_info: str) -> str:
        """Rubber-duck debugging: one model call that lists the single most likely cause."""
        prompt = prompts(self.db_id)["CodeDebugger"].format(question=self.question, code=code, error_info=error_info)
        response = await self.debugger.complete(ChatRequest([Message("user", prompt)], system=DEBUGGER_SYSTEM,
                                                            temperature=0.0, max_tokens=800))
        return (response.text or "").strip() or DEBUGGER_FALLBACK
