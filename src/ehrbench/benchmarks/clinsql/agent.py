"""ClinSQL's inference protocol as an agent: chain of thought, then self-refinement only on an execution error.

The first model call gets the chain-of-thought prompt (schema, question); the SQL in its reply
(`clean_sql_response`) is executed through the tool. If it fails (a BigQuery-to-DuckDB transpile error counts), a
fresh prompt with the schema, the question, the previous SQL and the error asks for a fix, up to
`max_refinements` times (the original: 2, so 3 attempts). A query that runs ends the trial, even with no rows, as
in the original; so does a reply with no SQL in it. Every call is one fresh prompt, not a conversation.

Sampling is the original's per model family (`sampling`, utils/model_specs.py and the evaluators): the GPT-5 family
at temperature 1.0; GPT-4.1 and the o-series with 2,048 output tokens and no temperature; Gemini 2.5 at temperature
1, top_p 0.95 (Pro) or 1 (Flash), seed 0 and 65,535 tokens (its thinking is the API's default, dynamic, as the
original's budget -1); Grok at 0.1; Mistral at 0.1 with 2,048 tokens; a vLLM-served model at 0.2, top_p 0.9 and
32,768 tokens; anything else at the original's default, 0.1.

`ReferenceAgent` is the self-check: it writes its SQL from the question alone (`reference.py`), never the gold.
"""
from __future__ import annotations

import re

from ...llm.base import ChatRequest
from ...llm.usage import MeteredModel
from ...trial import Message, ToolCall
from .prompts import clean_sql_response, generation_prompt, refinement_prompt
from .reference import Unread, read_question
from .tools import TOOL


def _attempts(history: list[Message]) -> list[tuple[str, str]]:
    """(sql, observation) of each executed attempt so far."""
    calls = {m.tool_call.id: m.tool_call.arguments.get("sql", "") for m in history if m.is_tool_call}
    return [(calls.get(m.tool_call_id, ""), m.content or "") for m in history if m.role == "tool"]


def _final(sql: str, text: str = "") -> Message:
    return Message("assistant", f"{text}\n\n```sql\n{sql}\n```".strip() if sql else (text or "(no SQL)"))


def sampling(model: dict | None) -> dict:
    """The original's settings for a model conf (by its `model` name, or `server: vllm`): ChatRequest fields."""
    model = model or {}
    name = str(model.get("model") or model.get("name") or "").lower()
    if model.get("server") == "vllm":
        return {"temperature": 0.2, "top_p": 0.9, "max_tokens": 32_768}
    if "gpt-5" in name:
        return {"temperature": 1.0}
    if "gpt-4.1" in name or re.match(r"^o\d", name):
        return {"max_tokens": 2048}
    if "gemini" in name:
        return {"temperature": 1.0, "top_p": 0.95 if "pro" in name else 1.0, "seed": 0, "max_tokens": 65_535}
    if "mistral" in name:
        return {"temperature": 0.1, "max_tokens": 2048}
    return {"temperature": 0.1}                      # grok, and the original's dataclass default


class ClinSqlAgent:
    def __init__(self, model: MeteredModel, schema: str | None, max_refinements: int = 2, seed: int | None = None,
                 settings: dict | None = None):
        self.model, self.schema, self.max_refinements = model, schema, max_refinements
        self.settings = dict(settings if settings is not None else {"temperature": 0.1})
        self.settings.setdefault("seed", seed)

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
        response = await self.model.complete(ChatRequest([Message("user", prompt)], **self.settings))
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
