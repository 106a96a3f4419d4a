"""ClinSQL's inference protocol as an agent: chain of thought, then self-refinement only on an execution error.

The first model call gets the chain-of-thought prompt (schema, question); the SQL in its reply
(`clean_sql_response`) is executed through the tool. If it fails (a BigQuery-to-DuckDB transpile error counts), a
fresh prompt with the schema, the question, the previous SQL and the error asks for a fix, up to
`max_refinements` times (the original: 2, so 3 attempts). A query that runs ends the trial, even with no rows, as
in the original; so does a reply with no SQL in it. Every call is one fresh prompt, not a conversation.

What each call sends is the original's per model family (`sampling.py`, the benchmark's table).

`ReferenceAgent` is the self-check: it writes its SQL from the question alone (`reference.py`), never the gold.
"""
from __future__ import annotations

from ...failures import kind_of
from ...llm.base import ChatRequest, ModelTurnError, Sampling
from ...llm.usage import MeteredModel
from ...trial import InfrastructureError, Message, ToolCall
from .prompts import clean_sql_response, generation_prompt, refinement_prompt
from .reference import Unread, read_question
from .tools import TOOL


def _attempts(history: list[Message]) -> list[tuple[str, str]]:
    """(sql, observation) of each executed attempt so far."""
    calls = {m.tool_call.id: m.tool_call.arguments.get("sql", "") for m in history if m.is_tool_call}
    return [(calls.get(m.tool_call_id, ""), m.content or "") for m in history if m.role == "tool"]


def _final(sql: str, text: str = "") -> Message:
    return Message("assistant", f"{text}\n\n```sql\n{sql}\n```".strip() if sql else (text or "(no SQL)"))


class ClinSqlAgent:
    def __init__(self, model: MeteredModel, schema: str | None, max_refinements: int = 2, seed: int | None = None,
                 sampling: Sampling = Sampling(temperature=0.1)):
        self.model, self.schema, self.max_refinements = model, schema, max_refinements
        self.settings = sampling.request(seed)

    async def act(self, history: list[Message]) -> Message:
        question = history[0].content or ""
        done = _attempts(history)
        if done:
            sql, observation = done[-1]
            if not observation.startswith("Error:") or len(done) > self.max_refinements:
                return _final(sql)
            prompt = refinement_prompt(question, sql, observation[len("Error:"):].strip(), self.schema)
        else:
            prompt = generation_prompt(question, self.schema)
        try:
            response = await self.model.complete(ChatRequest([Message("user", prompt)], **self.settings))
        except (ModelTurnError, InfrastructureError) as e:
            if (kind := kind_of(e)) is None:   # an outage: the trial is re-run
                raise
            # cut off or blocked before any text, or refused (its size, any 400): the original's generation failed,
            # and the sample is judged as one without SQL
            return Message("assistant", "(no SQL)", finish_reason=kind)
        sql = clean_sql_response(response.text or "")
        if not sql:                         # the original stops here: "Failed to generate SQL"
            return Message("assistant", response.text or "(no SQL)", finish_reason=response.finish_reason)
        return Message("assistant", response.text, tool_call=ToolCall(TOOL, {"sql": sql}, f"call_{len(done) + 1}"),
                       finish_reason=response.finish_reason)


class ReferenceAgent:
    """Reads the question (`reference.read_question`: the anchor, the cohort and each choice the question names,
    never the gold), runs the SQL of its reading through the tool, then answers with it. A question it cannot read
    gets an answer without SQL, scored as any model's would be."""

    def __init__(self, scenario: str, difficulty: str, scripted):
        self.scenario, self.difficulty, self.scripted = scenario, difficulty, scripted

    async def act(self, history: list[Message]) -> Message:
        await self.scripted()
        done = _attempts(history)
        if done:
            return _final(done[-1][0], "The query ran.")
        try:
            sql = read_question(history[0].content or "", self.scenario, self.difficulty).sql
        except Unread as e:
            return Message("assistant", f"I could not read this question: {e}.")
        return Message("assistant", None, tool_call=ToolCall(TOOL, {"sql": sql}, "call_1"))
