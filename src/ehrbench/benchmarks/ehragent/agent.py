"""EHRAgent (wshi83/EhrAgent): a medical-knowledge note, long-term memory of solved questions (`Memory`, or `SharedMemory` in sequential mode), planning through a
code interface, execution feedback with rubber-duck debugging (the feedback is `tools.py`'s), at most 10 executions.

The original runs on AutoGen: a chatbot (system message `CHATBOT_SYSTEM`, one function `python(cell)`,
temperature 0) talks with a user proxy that executes its code. Here the chatbot is this agent and the proxy is the
trial loop with `tools.py`: the first model message is the original's init message (the knowledge note from one
extra model call, the memory's four examples closest to the question by Levenshtein distance, the question); a
function call is executed and its result fed back; a reply ending in TERMINATE ends the trial; a reply with neither
gets the proxy's empty auto-reply and the model is asked again; after 10 executions the next reply is the last
(a code cell there is not run, and the question counts as not completed).

`ReferenceAgent` is the oracle: one cell that runs the gold SQL through SQLInterpreter, then TERMINATE.
"""
from __future__ import annotations

import Levenshtein

from ...agents.tool_calling import tool_call_message
from ...llm.base import ChatRequest
from ...llm.usage import MeteredModel
from ...trial import Message, ToolCall
from .prompts import (CHATBOT_SYSTEM, KNOWLEDGE_FALLBACK, KNOWLEDGE_SYSTEM, PYTHON_FUNCTION, initial_memory, prompts)

MAX_EXECUTIONS = 10          # the user proxy's max_consecutive_auto_reply
NUM_SHOTS = 4


class Memory:
    """Long-term memory: {question, knowledge, code} items, the `k` closest to a question by Levenshtein distance
    shown as examples (ties in insertion order, as the original's stable sort)."""

    def __init__(self, items: list[dict]):
        self.items = list(items)

    def examples(self, question: str, k: int = NUM_SHOTS) -> str:
        ranked = sorted(range(len(self.items)), key=lambda i: Levenshtein.distance(question, self.items[i]["question"]))
        return "\n".join("Question: {}\nKnowledge:\n{}\nSolution:\n{}\n".format(
            self.items[i]["question"], self.items[i]["knowledge"], self.items[i]["code"]) for i in ranked[:k])

    def add(self, item: dict) -> None:
        self.items.append(item)

    async def refresh(self) -> None:
        """Bring the items up to date before a question (a frozen memory never changes)."""


class SharedMemory(Memory):
    """Sequential mode: the initial examples, then the run's solved questions of this stream (database and trial
    index) in the order they were solved, read from the run's MemoryActor when the question starts."""

    def __init__(self, initial: list[dict], host, stream: str):
        super().__init__(initial)
        self.initial, self.host, self.stream = list(initial), host, stream

    async def refresh(self) -> None:
        self.items = self.initial + await self.host.items(self.stream)


class EhrAgent:
    def __init__(self, model: MeteredModel, knowledge_model: MeteredModel | None, db_id: str, memory: Memory,
                 seed: int | None = None):
        self.model, self.knowledge_model, self.db_id, self.memory, self.seed = model, knowledge_model, db_id, memory, seed
        self.knowledge = ""
        self._opening: str | None = None
        self._auto_replies: dict[int, list[Message]] = {}    # position in the trial's history -> proxy exchanges

    async def _knowledge(self, question: str) -> str:
        """The medical-knowledge note: one model call on the database's RetrKnowledge prompt (temperature 0, at most
        800 tokens); without a knowledge model (the ablation) the note is empty."""
        if self.knowledge_model is None:
            return ""
        response = await self.knowledge_model.complete(ChatRequest(
            [Message("user", prompts(self.db_id)["RetrKnowledge"].format(question=question))],
            system=KNOWLEDGE_SYSTEM, temperature=0.0, max_tokens=800, seed=self.seed))
        return (response.text or "").strip() or KNOWLEDGE_FALLBACK

    async def act(self, history: list[Message]) -> Message:
        question = history[0].content or ""
        if self._opening is None:
            self.knowledge = await self._knowledge(question)
            await self.memory.refresh()
            self._opening = prompts(self.db_id)["EHRAgent_Message_Prompt"].format(
                examples=self.memory.examples(question), knowledge=self.knowledge, question=question)
        while True:
            conversation = [Message("user", self._opening)]
            for i, message in enumerate(history[1:], start=1):
                conversation += [*self._auto_replies.get(i, []), message]
            conversation += self._auto_replies.get(len(history), [])
            response = await self.model.complete(ChatRequest(conversation, system=CHATBOT_SYSTEM,
                                                             tools=[PYTHON_FUNCTION], temperature=0.0, seed=self.seed))
            replies = sum(1 for m in history if m.role == "tool") + sum(len(v) // 2 for v in self._auto_replies.values())
            last_chance = replies >= MAX_EXECUTIONS
            if response.tool_calls and not last_chance:
                return tool_call_message(response, f"call_{replies + 1}")
            text = response.text or ""
            if text.rstrip().endswith("TERMINATE") or last_chance or response.tool_calls:
                return Message("assistant", text, finish_reason=response.finish_reason,
                               provider_parts=response.provider_parts)
            # neither code nor TERMINATE: the proxy's empty auto-reply, and the model is asked again; the pair stays
            # where it happened in the conversation (before whatever the trial adds next) and counts as a reply
            self._auto_replies.setdefault(len(history), []).extend([Message("assistant", text), Message("user", "")])


class ReferenceAgent:
    """The oracle: runs the gold SQL in one cell, then repeats its result and says TERMINATE."""

    def __init__(self, gold_sql: str, scripted):
        self.gold_sql, self.scripted = gold_sql, scripted

    async def act(self, history: list[Message]) -> Message:
        await self.scripted()
        observations = [m.content for m in history if m.role == "tool"]
        if not observations:
            cell = f"rows = SQLInterpreter({self.gold_sql!r})\nanswer = [value for row in rows for value in row]"
            return Message("assistant", None, tool_call=ToolCall("python", {"cell": cell}, "call_1"))
        return Message("assistant", f"The answer is {observations[-1]}.\nTERMINATE")
