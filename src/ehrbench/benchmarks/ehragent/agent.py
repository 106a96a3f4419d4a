"""EHRAgent (wshi83/EhrAgent): a medical-knowledge note, long-term memory of solved questions (`Memory`, or
`SharedMemory` in sequential mode), planning through a code interface, execution feedback with rubber-duck debugging
(the feedback is `tools.py`'s), at most 10 executions.

The original runs on AutoGen 0.2.0: a chatbot (system message `CHATBOT_SYSTEM`, one function `python(cell)`,
temperature 0) talks with a user proxy (`MedAgent`) that answers each of its replies. Here the chatbot is this agent
and the proxy's answers are the trial's tool calls, so every exchange is in the record. The proxy answers a reply
in AutoGen's order:
1. after 10 answers it stops (the 11th reply is the last, a function call in it never run);
2. a reply whose text ends in TERMINATE ends the question, even beside a function call (which is then not run);
3. a function call runs (`python`: the cell, with the original's feedback and debugging);
4. fenced code blocks in a plain-text reply run as AutoGen's own executor ran them (`autogen_code`);
5. anything else gets the empty auto-reply (`autogen_reply`); a reply with no content at all ends the chat.
A function call whose arguments are not JSON goes the original's way: AutoGen's repair of raw newlines, then the
cell cut out of the raw text and run anyway.

`ReferenceAgent` answers with one cell written from the question's words (`reference.py`), then TERMINATE.
"""
from __future__ import annotations

import json

import Levenshtein

from ...failures import kind_of
from ...llm.base import ChatRequest, ModelTurnError, Sampling
from ...llm.usage import MeteredModel
from ...trial import InfrastructureError, Message, ToolCall
from .prompts import CHATBOT_SYSTEM, KNOWLEDGE_FALLBACK, KNOWLEDGE_SYSTEM, PYTHON_FUNCTION, prompts
from .tools import HELPER_SAMPLING, code_blocks, helper_text

MAX_EXECUTIONS = 10          # the user proxy's max_consecutive_auto_reply
NUM_SHOTS = 4


def repaired_json(raw: str) -> str:
    """AutoGen's `_format_json_str`: newlines outside strings dropped, raw newlines and tabs inside them escaped."""
    out, inside, last = [], False, " "
    for char in raw:
        if last != "\\" and char == '"':
            inside = not inside
        last = char
        if char == "\n" and not inside:
            continue
        out.append("\\n" if inside and char == "\n" else "\\t" if inside and char == "\t" else char)
    return "".join(out)


def recovered_call(call: ToolCall) -> ToolCall:
    """A call whose arguments were not a JSON object, as the original's proxy ran it: parsed after AutoGen's repair,
    else the cell cut out of the raw text (`raw.split(': "')[-1].split('", ')[0]`), run anyway."""
    try:
        arguments = json.loads(repaired_json(call.raw or ""))
    except json.JSONDecodeError:
        arguments = {"cell": (call.raw or "").split(': "')[-1].split('", ')[0]}
    return ToolCall(call.name, arguments if isinstance(arguments, dict) else {}, call.id, raw=call.raw)


class Memory:
    """Long-term memory: {question, knowledge, code} items, the `k` closest to a question by Levenshtein distance
    shown as examples (ties in insertion order, as the original's stable sort)."""

    def __init__(self, items: list[dict]):
        self.items = list(items)
        self.previous_cell = ""        # the last cell the proxy ran before this question (`SharedMemory`)

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
        """The stream's items, and the last cell the chain's proxy ran (the original's `user_proxy.code` lives on
        from one question to the next)."""
        self.items = self.initial + await self.host.items(self.stream)
        last = await self.host.items(last_cell_stream(self.stream))
        self.previous_cell = last[-1]["code"] if last else ""


def last_cell_stream(stream: str) -> str:
    """Where a chain keeps the last cell its proxy ran (one item, replaced by each question that ran a cell)."""
    return f"{stream}/last_cell"


class EhrAgent:
    def __init__(self, model: MeteredModel, knowledge_model: MeteredModel | None, db_id: str, memory: Memory,
                 seed: int | None = None, num_shots: int = NUM_SHOTS, max_executions: int = MAX_EXECUTIONS,
                 proxy=None, sampling: dict[str, Sampling] | None = None):
        """`db_id`: whose prompt file the agent writes from (its database's, or eICU's for TREQS with
        `treqs_prompts=eicu`); `sampling`: what the chatbot's (`agent`) and the knowledge call's requests send (the
        benchmark's table; by default the original's), `seed` filling a `"trial"` seed."""
        self.model, self.knowledge_model, self.db_id, self.memory, self.seed = model, knowledge_model, db_id, memory, seed
        sampling = {"agent": Sampling(temperature=0.0), "knowledge": HELPER_SAMPLING, **(sampling or {})}
        self.params = {role: s.request(seed) for role, s in sampling.items()}
        self.num_shots, self.max_executions, self.proxy = num_shots, max_executions, proxy
        self.knowledge = ""
        self.opening: str | None = None          # the proxy's first message (note, examples, question)
        self.unexecuted: ToolCall | None = None  # a function call in the last reply, which the proxy never ran

    async def _knowledge(self, question: str) -> str:
        """The medical-knowledge note: the database's RetrKnowledge prompt (the table's parameters); without a
        knowledge model (the ablation) the note is empty. As the original's `retrieve_knowledge` (2 tries): an empty
        reply, one cut off or blocked before any text, or a request the provider refuses, is tried once more, then
        the original's fallback text stands in and the question goes on."""
        if self.knowledge_model is None:
            return ""
        return await helper_text(self.knowledge_model, ChatRequest(
            [Message("user", prompts(self.db_id)["RetrKnowledge"].format(question=question))],
            system=KNOWLEDGE_SYSTEM, **self.params["knowledge"]), KNOWLEDGE_FALLBACK)

    def conversation(self, history: list[Message]) -> list[Message]:
        """The chat as the model sees it: the proxy's first message, then each reply and the proxy's answer (a
        function's result as a tool message, the code-block output and the empty auto-reply as user messages)."""
        out = [Message("user", self.opening)]
        pseudo: set[str] = set()
        for message in history[1:]:
            call = message.tool_call
            if call is not None and call.name in ("autogen_code", "autogen_reply"):
                pseudo.add(call.id)
                out.append(Message("assistant", message.content))
            elif message.role == "tool" and message.tool_call_id in pseudo:
                out.append(Message("user", message.content))
            else:
                out.append(message)
        return out

    async def act(self, history: list[Message]) -> Message:
        question = history[0].content or ""
        if self.opening is None:
            self.knowledge = await self._knowledge(question)
            await self.memory.refresh()
            self.opening = prompts(self.db_id)["EHRAgent_Message_Prompt"].format(
                examples=self.memory.examples(question, self.num_shots), knowledge=self.knowledge, question=question)
        if self.proxy is not None and self.proxy.crash:     # the original's proxy raised: the chat is over
            return Message("assistant", None)
        try:
            response = await self.model.complete(ChatRequest(self.conversation(history), system=CHATBOT_SYSTEM,
                                                             tools=[PYTHON_FUNCTION], **self.params["agent"]))
        except ModelTurnError:     # cut off or blocked before any text: no reply, so AutoGen's chat ends there
            return Message("assistant", None, finish_reason="no text")
        except InfrastructureError as e:      # a request refused (any 400): the original's question is lost there,
            if kind_of(e) == "bad_request":   # counted unanswered (main.py catches it): the agent's failure, scored
                e.agent_caused = True
            raise
        text, answered = response.text, sum(1 for m in history if m.role == "tool")
        call = response.tool_calls[0] if response.tool_calls else None
        if call is not None and (response.malformed or call.error):
            call = recovered_call(call) if call.raw is not None else \
                ToolCall(call.name, call.arguments, call.id, response.malformed or call.error)

        def reply(tool_call: ToolCall | None = None) -> Message:
            if tool_call is not None and not tool_call.id:
                tool_call.id = f"call_{answered + 1}"
            return Message("assistant", text, tool_call=tool_call, finish_reason=response.finish_reason,
                           provider_parts=response.provider_parts)
        if answered >= self.max_executions:               # 1. the proxy's limit: this reply is the last
            self.unexecuted = call
            return reply()
        if text is not None and text.rstrip().endswith("TERMINATE"):      # 2. before anything else
            return reply()
        if call is not None:                              # 3. a function call
            return reply(call)
        if text is None:                                  # nothing to answer: AutoGen's chat ends
            return reply()
        if code_blocks(text):                             # 4. fenced code in the text
            return reply(ToolCall("autogen_code", {"text": text}))
        return reply(ToolCall("autogen_reply", {}))      # 5. the empty auto-reply


class ReferenceAgent:
    """The reference: one cell written from the question (`reference.tool_plan`: LoadDB, FilterDB, GetValue,
    Calendar on the trial's database), or for a template it has no plan for, the gold SQL through SQLInterpreter;
    then it repeats the cell's result and says TERMINATE."""

    def __init__(self, db_id: str, question: str, gold_sql: str, scripted):
        from .reference import SQL_FALLBACK, tool_plan

        self.cell = tool_plan(db_id, question) or (
            SQL_FALLBACK + f"rows = SQLInterpreter({gold_sql!r})\nanswer = [value for row in rows for value in row]")
        self.scripted = scripted

    async def act(self, history: list[Message]) -> Message:
        await self.scripted()
        observations = [m.content for m in history if m.role == "tool"]
        if not observations:
            return Message("assistant", None, tool_call=ToolCall("python", {"cell": self.cell}, "call_1"))
        return Message("assistant", f"The answer is {observations[-1]}.\nTERMINATE")
