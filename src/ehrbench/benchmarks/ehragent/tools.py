"""EHRAgent's one function, `python(cell)`, as the trial's tool: the cell runs in the code sandbox with the toolset
bound (`toolset.py`); its result, or its error parsed as the original's `run_code` words it, is the observation; an
observation mentioning an error gets one rubber-duck debugging call ("Potential Reasons: ...") unless debugging is
switched off. LoadDB and SQLInterpreter reach the hosted, read-only database through `serve`: LoadDB's table travels as CSV text
(the original read CSV files), SQLInterpreter's SQL runs with the clock at the database's now (`at_database_now`),
and both return everything, as the original did, up to a size that fits the sandbox (past it they say so, never
cut silently).

AutoGen's user proxy answered more than function calls (`agent.py` decides which answer a reply gets); its other
two answers are tools here too, so every exchange stays in the trial's record: `autogen_code` runs the fenced code
blocks of a plain-text reply as AutoGen's own executor did (a script without the toolset, "exitcode: ... Code
output: ..."), and `autogen_reply` is the proxy's empty auto-reply.
"""
from __future__ import annotations

import asyncio
import builtins
import csv
import functools
import io
import re

from ...agents.code_sandbox import CellLimits, CellResult, CodeSandbox
from ...db.limits import QueryError
from ...failures import kind_of
from ...llm.base import ChatRequest, ModelTurnError, Sampling
from ...llm.usage import MeteredModel
from .sampling import TABLE as SAMPLING
from ...trial import InfrastructureError, Message
from .prompts import DEBUGGER_FALLBACK, DEBUGGER_SYSTEM, prompts
from .tasks import at_database_now

FEEDBACK = "\nPlease make modifications accordingly and make sure the rest code works well with the modification."
SAVE_ANSWER = "Please save the answer to the question in the variable 'answer'."
TOOL_NAMES = {"get_value": "GetValue", "data_filter": "FilterDB", "db_loader": "LoadDB",
              "sql_interpreter": "SQLInterpreter", "date_calculator": "Calendar"}
READ_BYTES = 40_000_000      # LoadDB's table, SQLInterpreter's result: all of it up to this size (the sandbox's
READ_ROWS = 10_000_000       # messages carry 64 MiB), past it an error that says so
# AutoGen 0.2.0's code_utils: a fenced block and the language of an unnamed one
CODE_BLOCK = re.compile(r"```[ \t]*(\w+)?[ \t]*\r?\n(.*?)\r?\n[ \t]*```", re.DOTALL)
PSEUDO_TOOLS = ("autogen_code", "autogen_reply")
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


@functools.lru_cache(maxsize=None)
def code_header() -> list[str]:
    """The lines the original's run_code executed above every cell (`exec(CodeHeader + cell)`, prompts_mimic.py's
    CodeHeader whatever the database): they shift the line numbers in a syntax error's repr, and its error parser
    searches them with the cell's."""
    return prompts("ehrsql_mimic_iii")["CodeHeader"].split("\n")[:-1]


@functools.lru_cache(maxsize=None)
def unbound_error_line() -> str:
    """This Python's words for the UnboundLocalError the original's parser raised on a KeyError whose key is on no
    line (its `error_line` never set); the proxy then showed `Error: <them>`."""
    def parse():
        if False:
            error_line = ""
        return error_line  # noqa: F821
    try:
        parse()
    except UnboundLocalError as e:
        return str(e)
    return ""


def original_syntax_text(kind: str, message: str, line: int | None, detail: list) -> str:
    """run_code's words for a syntax error (SyntaxError, IndentationError, TabError), cut out of the exception's repr
    as the original cut it: `repr(e).split('(')[0]`, `.split(',')[0].split('(')[1]`, `.split('"')[1]` when the repr
    names SyntaxError, else the message between `('` and `')`. The repr is this Python's, as the original's
    `exec(CodeHeader + cell)` made it (file `<string>`, lines after the header's). Where the cut fails (no `"` in
    the repr) the parser raised out of run_code and the proxy showed `Error: list index out of range`, without the
    request to fix it."""
    offset, text, end_line, end_offset = detail
    shift = len(code_header())
    error = getattr(builtins, kind)(message, ("<string>", line + shift if line else line, offset, text,
                                              end_line + shift if end_line else end_line, end_offset))
    rendered = repr(error)
    if "SyntaxError" not in rendered:
        return "Error: " + rendered.split("('")[-1].split("')")[0] + "." + FEEDBACK
    try:
        error_type, error_message = rendered.split("(")[0], rendered.split(",")[0].split("(")[1]
        error_line = rendered.split('"')[1]
    except IndexError as e:
        return f"Error: {e}"
    if error_type and error_line:
        return f'{error_type}: {error_message}. The error messages occur in the code line "{error_line}".' + FEEDBACK
    return f"Error: {error_message}." + FEEDBACK


def run_code_text(result: CellResult, code: str, limits: CellLimits, error_text: str = "original") -> str:
    """The observation, as the original's run_code words it: str(answer), the reminder to save the answer, or the
    error's type, message and line followed by the request to fix it. `error_text="informative"` (ehrbench's
    option) words every syntax error as type, message and line, and names the failing line of a KeyError whose key
    no line holds, where the original's parser garbled or crashed on them."""
    if result.ended == "ok":
        lines = [line for line in code.split("\n") if line.strip() and not line.strip().startswith("#")]
        if not lines or "answer" not in lines[-1]:
            return SAVE_ANSWER
        return "None" if result.result is None else result.result
    if result.ended in ("error", "memory"):
        kind, message, number = result.error["type"], result.error["message"], result.error.get("line")
        lines = code.split("\n")
        line = lines[number - 1] if number and 0 < number <= len(lines) else ""
        if error_text == "original" and "detail" in result.error:
            return original_syntax_text(kind, message, number, result.error["detail"])
        if kind == "KeyError":
            message = f"KeyError({message})"
            key = message.split("'")[1] if message.split("'")[1:2] else None
            searched = code_header() + lines if error_text == "original" else lines    # the original's: both
            found = next((text for text in reversed(searched) if key is not None and key in text), None)
            if found is None and error_text == "original":     # its parser raised out of run_code (no quote to
                return "Error: " + ("list index out of range" if key is None else unbound_error_line())  # cut, no line)
            line = found if found is not None else line
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


def code_blocks(text: str) -> list[tuple[str, str]]:
    """AutoGen's `extract_code`: the (language, code) of each fenced block; an unnamed block's language inferred as
    AutoGen did (`sh` for a pip or python command line, `python` when it compiles, else unknown)."""
    blocks = []
    for lang, code in CODE_BLOCK.findall(text or ""):
        if not lang:
            if code.startswith(("python ", "pip", "python3 ")):
                lang = "sh"
            else:
                try:
                    compile(code, "test", "exec")
                    lang = "python"
                except SyntaxError:
                    lang = "unknown"
        blocks.append((lang, code))
    return blocks


def script_log(result: CellResult, code: str, timeout_s: float) -> tuple[int, str]:
    """A python block's (exit code, log) as AutoGen's executor reported a script run on its own: its output, or
    Python's traceback with the script's file name removed."""
    if result.ended == "ok":
        return 0, result.stdout or ""
    if result.ended in ("cpu_limit", "wall_limit"):
        return 1, "Timeout"
    error = result.error or {"type": "Error", "message": "the script crashed", "line": None}
    number, lines = error.get("line"), code.split("\n")
    frame = (f'  File "", line {number}, in <module>\n    {lines[number - 1].strip()}\n'
             if number and 0 < number <= len(lines) else "")
    return 1, f"Traceback (most recent call last):\n{frame}{error['type']}: {error['message']}\n"


def csv_text(columns: list[str], rows: list) -> str:
    """A table as the CSV file the original's LoadDB read: NULL empty, numbers as Python writes them."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def sqlite_words(error: Exception) -> str:
    """What the original's run_code read off a SQLite error: SQLite's own message, without SQLAlchemy's wrapping."""
    text = str(error)
    m = re.match(r"\(sqlite3\.\w+\) (.*?)\n\[SQL:", text, re.DOTALL)
    return m.group(1) if m else text


def repr_message(kind: str, message: str) -> str:
    """The original's `str(repr(e)).split("('")[-1].split("')")[0]`: the message when Python quotes it with single
    quotes, the whole repr when the message holds a single quote (Python then uses double quotes) or when there is
    no message at all (`AssertionError()`, a bare `assert`)."""
    rendered = f"{kind}({message!r})" if message else f"{kind}()"
    return rendered.split("('")[-1].split("')")[0]


# the knowledge and debugger calls' parameters for a model that takes them all (medagent.py: the table's rows),
# and how often each is tried before its fallback text (`max_attempts = 2` there)
HELPER_SAMPLING = SAMPLING.params("debugger", {})
HELPER_TRIES = 2


async def helper_text(model: MeteredModel, request: ChatRequest, fallback: str) -> str:
    """A knowledge or debugger call as `medagent.py` makes it: up to `HELPER_TRIES` tries while the reply is empty,
    cut off or blocked before any text, or refused (its size, any 400), then `fallback`; an outage re-runs the
    trial."""
    for _ in range(HELPER_TRIES):
        try:
            text = ((await model.complete(request)).text or "").strip()
        except (InfrastructureError, ModelTurnError) as e:
            if kind_of(e) is None:
                raise
            continue
        if text:
            return text
    return fallback


class CodeInterface:
    """The trial's tools for one EHRAgent attempt: `python` only."""

    def __init__(self, db_id: str, db, tables: dict[str, str], question: str, now: str,
                 debugger: MeteredModel | None, limits: CellLimits, sql_timeout_s: float = 60.0,
                 debugger_sampling: Sampling = HELPER_SAMPLING, error_text: str = "original",
                 prompt_set: str | None = None):
        self.db_id, self.db, self.tables, self.question, self.now = db_id, db, tables, question, now
        self.error_text = error_text                 # original | informative (run_code_text)
        self.prompt_set = prompt_set or db_id        # whose prompt file the debugger's prompt comes from
        self.debugger, self.limits, self.sql_timeout_s = debugger, limits, sql_timeout_s
        self.debugger_params = debugger_sampling.request()
        self.last_answer: str | None = None          # str(answer) of the last cell that ran to its end
        self.code = ""                               # the last cell run (what the debugger is shown)
        self.crash: str | None = None                # the original's proxy would have raised this: question lost

    async def serve(self, tool: str, args: list):
        """LoadDB and SQLInterpreter for the cell, on the hosted database (read-only, time-limited)."""
        if tool == "load":
            name = str(args[0])
            if name not in self.tables:
                raise KeyError(name)
            stored = self.tables[name]                  # the table's name in the database ("ADMISSIONS")
            try:
                result = await self.db.read_large(f'SELECT * FROM "{stored}"', self.sql_timeout_s, READ_ROWS,
                                                  READ_BYTES)
            except QueryError as e:
                raise RuntimeError(f"the table {name} is too large for LoadDB here ({e}); use SQLInterpreter with "
                                   "a WHERE clause instead") from None
            return csv_text(await self.db.column_names(stored), result.rows)
        if tool == "sql":
            try:
                result = await self.db.read_large(at_database_now(str(args[0]), self.now), self.sql_timeout_s,
                                                  READ_ROWS, READ_BYTES)
            except QueryError as e:
                raise RuntimeError(sqlite_words(e)) from None
            if len(result.rows) > READ_ROWS:
                raise RuntimeError(f"the query returned more than {READ_ROWS:,} rows, more than SQLInterpreter "
                                   "returns here; add a WHERE clause, an aggregate or a LIMIT")
            return [list(r) for r in result.rows]
        raise ValueError(f"unknown tool {tool!r}")

    async def run_blocks(self, text: str) -> str:
        """`autogen_code`: AutoGen's execute_code_blocks on a plain-text reply. Python blocks run in the sandbox
        without the toolset (AutoGen ran them as scripts of their own); the first failure stops the rest."""
        logs, exitcode = "", 0
        for lang, code in code_blocks(text):
            if lang in ("python", "Python"):
                result = await sandbox().run(code, limits=self.limits, result_name="__no_result__")
                exitcode, log = script_log(result, code, self.limits.wall_s)
            elif lang in ("bash", "shell", "sh"):
                exitcode, log = 1, "shell blocks are not run by ehrbench's sandbox"
            else:
                exitcode, log = 1, f"unknown language {lang}"
            logs += "\n" + log
            if exitcode != 0:
                break
        return f"exitcode: {exitcode} ({'execution succeeded' if exitcode == 0 else 'execution failed'})\n" \
            f"Code output: {logs}"

    async def call(self, name: str, arguments: dict) -> str:
        if name == "autogen_code":
            return await self.run_blocks(str(arguments.get("text") or ""))
        if name == "autogen_reply":
            return ""
        if name != "python":
            content = f"Error: Function {name} not found."      # debugged with the last cell, as the original
        else:
            code = arguments.get("cell")
            if not isinstance(code, str):     # the original's proxy raised here and lost the whole question
                self.crash = "'cell'"
                return "Error: run_code() missing 1 required positional argument: 'cell'."
            self.code = code
            result = await sandbox().run(code, tools="ehrbench.benchmarks.ehragent.toolset",
                                         context={"tables": sorted(self.tables), "now": self.now},
                                         on_tool=self.serve, limits=self.limits)
            content = run_code_text(result, code, self.limits, self.error_text)
            if result.ended == "ok" and content != SAVE_ANSWER:
                self.last_answer = content
        if self.debugger is not None and ("error" in content or "Error" in content):
            content += "\nPotential Reasons: " + await self._debug(self.code, content)
        return content

    async def _debug(self, code: str, error_info: str) -> str:
        """Rubber-duck debugging: one call listing the single most likely cause (the table's parameters). As the
        original's `code_debugger` (2 tries): an empty reply, one cut off or blocked before any text, or a request
        the provider refuses, is tried once more, then the original's fallback text stands in."""
        prompt = prompts(self.prompt_set)["CodeDebugger"].format(question=self.question, code=code, error_info=error_info)
        return await helper_text(self.debugger, ChatRequest([Message("user", prompt)], system=DEBUGGER_SYSTEM,
                                                            **self.debugger_params), DEBUGGER_FALLBACK)
