"""AgentEHR's agents: the ReAct loop of the public code (MCPBaseAgent), and the reference.

The first user message is the original's: `<agent_instruction>` with its base instruction, then the task's
instruction and the patient's subject id and current time (`prompts.yaml`, copied from the public code). The agent
loads the EHR itself as step 0 (a load_ehr call the model did not make, as the original inserts it), then the model
makes one tool call per step; `finish(response=[...])` ends the trial with `str(response)` as the answer. A reply
with no tool call (even an empty one) is asked for again, the same request, up to five calls in all (the original's
llm_layer); the fifth's text becomes a `think` call, as the original turns it into a think action. At most
`max_turns` (100) steps; the same observation repeated five times running also stops ReAct (the original's
max_same_steps); then, as the original's forced termination, the termination instruction is sent with
`finish` as the only tool. The context is held under the paper's 64,000-token cap, less the reply's 4,096 and a
1,000 margin, counted with the tools' schemas by the model's tokenizer (`llm/tokens.py`): past it the oldest step
after the load (a call with its result) is deleted for good, as the original deletes messages[3] in place, so a
summarizer later sees the trial without it too. The first message, the load, a summary note and the newest step
stay. With the evolving memory
(`memory.Recall`), the retrieved experience is appended to the first user message from the first model call on.

`ReferenceAgent` predicts from the censored view through the tools, never from the labels: load_ehr, one
run_sql_query for the newest events of the task's kind named through the candidate tables, finish with them.
"""
from __future__ import annotations

import functools
import json
from importlib import resources

import yaml

from ...failures import kind_of
from ...llm.base import ChatRequest, ChatResponse, InfrastructureError, ModelTurnError, Sampling
from ...llm.tokens import Estimate, TokenCounter
from ...llm.usage import MeteredModel
from ...trial import Message, ToolCall
from .tools import SPECS

MAX_TURNS = 100
ASKS = 5                      # model calls for one step while the reply has no tool call (the original's max_try)
MAX_SAME = 5                  # repeats of one observation (6 alike in a row) that stop ReAct
MAX_CONTEXT_TOKENS = 64_000   # the paper's context cap (the scripts' max_seq_len)
OUTPUT_TOKENS = 4_096         # kept free for the reply (max_new_tokens), with the original's 1,000-token margin


@functools.lru_cache(maxsize=1)
def prompts() -> dict:
    return yaml.safe_load(resources.files("ehrbench.benchmarks.agentehr.data").joinpath("prompts.yaml").read_text())


def instruction(task: str, subject_id: int, current_time: str) -> str:
    """The task's instruction (the original's `task.instruction`): its prompt, the patient and the current time."""
    p = prompts()
    return p["task_template"].format(specific=p["tasks"][task], current_time=current_time, subject_id=subject_id)


def first_message(task: str, subject_id: int, current_time: str) -> str:
    return (f"<agent_instruction>\n{prompts()['base_instruction']}\n</agent_instruction>\n\n"
            f"{instruction(task, subject_id, current_time)}")


def answer(response) -> Message:
    """finish's `response` as the trial's answer: `str(response)`, as the original's MCPAgent kept it (a list as
    Python prints it); the benchmark reads the names out of it as its contract says (`scoring.py`)."""
    return Message("assistant", "[]" if response is None else response if isinstance(response, str) else
                   str(response))


def load_call(subject_id: int, current_time: str) -> Message:
    return Message("assistant", None, tool_call=ToolCall("load_ehr", {"subject_id": str(subject_id),
                                                                      "timestamp": current_time}, "call_0"))


class ReActAgent:
    def __init__(self, model: MeteredModel, subject_id: int, current_time: str,
                 sampling: Sampling = Sampling(temperature=0.0), seed: int | None = None, max_turns: int = MAX_TURNS,
                 recall=None, knowledge: bool = False, tokens: TokenCounter | None = None):
        """`sampling`: what every request sends (the benchmark's table), `seed` filling a `"trial"` seed."""
        self.model, self.subject_id, self.current_time = model, subject_id, current_time
        self.params, self.seed, self.max_turns = sampling.request(seed), seed, max_turns
        self.tools = [s for s in SPECS if s["name"] != "load_ehr"              # knowledge: the retrieve_* tools too
                      and (knowledge or not s["name"].startswith("retrieve_"))]
        self.tokens = tokens or Estimate()
        self.max_context_tokens = MAX_CONTEXT_TOKENS - OUTPUT_TOKENS - 1000
        self.dropped: set[int] = set()       # history positions deleted from the context, for good
        self.recall = recall                 # the evolving memory (memory.Recall): asked once, after the load
        self.experience: str | None = None   # what it added to the first user message

    def _with_experience(self, conversation: list[Message]) -> list[Message]:
        if not self.experience:
            return conversation
        first = conversation[0]
        return [Message(first.role, (first.content or "") + self.experience)] + conversation[1:]

    def kept(self, history: list[Message], start: int = 0, stop: int | None = None) -> list[Message]:
        """history[start:stop] without what the context cap deleted."""
        return [history[i] for i in range(start, len(history) if stop is None else stop) if i not in self.dropped]

    def conversation(self, history: list[Message]) -> list[Message]:
        """What the model is shown of the trial so far (summarizing agents show less)."""
        return self.kept(history)

    def fit(self, history: list[Message], tools: list[dict]) -> list[Message]:
        """The conversation under the cap: while it counts more tokens, the oldest step after the load (its call
        and results) is deleted for good, as the original's _truncate_messages deletes messages[3]."""
        while True:
            conversation = self._with_experience(self.conversation(history))
            if self.tokens.count(conversation, tools) <= self.max_context_tokens:
                return conversation
            oldest = next((i for i in range(3, len(history)) if i not in self.dropped and history[i].is_tool_call), None)
            end = None if oldest is None else next((j for j in range(oldest + 1, len(history))
                                                    if history[j].role != "tool"), None)
            if end is None:             # only the newest step is left: sent as it is (a refusal is the agent's)
                return conversation
            self.dropped.update(range(oldest, end))

    def _stuck(self, history: list[Message]) -> bool:
        """The step limit, or the same observation repeated MAX_SAME times running (the original's same_steps)."""
        observations = [m.content for m in history if m.role == "tool"][1:]      # after load_ehr's
        steps = sum(1 for m in history if m.is_tool_call) - 1            # load_ehr is step 0
        return steps >= self.max_turns or (len(observations) > MAX_SAME and
                                           len(set(observations[-(MAX_SAME + 1):])) == 1)

    async def act(self, history: list[Message]) -> Message:
        if not any(m.is_tool_call for m in history):
            return load_call(self.subject_id, self.current_time)
        if self.recall is not None and self.experience is None:
            self.experience = await self.recall()
        forced = self._stuck(history)
        tools = [s for s in self.tools if s["name"] == "finish"] if forced else self.tools
        conversation = self.fit(history, tools) + \
            ([Message("user", prompts()["termination_instruction"])] if forced else [])
        for _ in range(ASKS):             # a reply without a call is asked for again, the same request, as the
            try:                           # original's llm_layer does (max_try 5)
                response = await self.model.complete(ChatRequest(conversation, tools=tools, **self.params))
            except ModelTurnError as e:    # cut off or blocked before any text: a reply without a call, as there
                response = ChatResponse(finish_reason=e.kind)
            if response.tool_calls:
                break
        call = response.tool_calls[0] if response.tool_calls else None
        if call is not None and call.name == "finish" and not response.malformed:
            return answer(call.arguments.get("response"))
        if forced:
            return Message("assistant", response.text or "[]", finish_reason=response.finish_reason)
        if call is None:                   # five replies without a call: the last becomes a think step
            call_id = f"call_{len(history)}"
            return Message("assistant", None, tool_call=ToolCall("think", {"response": response.text or ""}, call_id),
                           finish_reason=response.finish_reason)   # not the text's parts: they hold no call
        from ...agents.tool_calling import tool_call_message

        return tool_call_message(response, f"call_{len(history)}")


# The reference's one question per task: the newest events of the task's kind the censored view shows, named as
# the candidate table names them (CCS and ATC through its code columns), as one " | "-joined cell.
_LATEST = {
    "diagnoses_ccs": "SELECT DISTINCT c.candidate AS name FROM {diagnoses} d JOIN diagnoses_ccs_candidates c ON "
                     "c.icd_code = d.{icd} AND c.icd_version = {version} WHERE d.hadm_id = (SELECT a.hadm_id FROM "
                     "{admissions} a WHERE a.hadm_id IN (SELECT hadm_id FROM {diagnoses}) ORDER BY a.admittime DESC "
                     "LIMIT 1)",
    "procedures_ccs": "SELECT DISTINCT c.candidate AS name FROM {procedures} p JOIN procedures_ccs_candidates c ON "
                      "c.icd_code = p.{icd} AND c.icd_version = {pversion} WHERE date(p.{pdate}) = (SELECT "
                      "MAX(date({pdate})) FROM {procedures})",
    "labevents": "SELECT DISTINCT label AS name FROM {labs} WHERE charttime = (SELECT MAX(charttime) FROM {labs})",
    "prescriptions": "SELECT DISTINCT c.candidate AS name FROM {rx} p JOIN prescriptions_atc_candidates c ON "
                     "lower(c.drug) = lower(p.drug) WHERE p.{start} = (SELECT MAX({start}) FROM {rx})",
    "microbiologyevents": "SELECT DISTINCT {test} AS name FROM {micro} WHERE date({mdate}) = (SELECT MAX(date({mdate})) "
                          "FROM {micro})",
    "transfers": "SELECT careunit AS name FROM {transfers} WHERE eventtype = 'transfer' AND careunit IS NOT NULL "
                 "ORDER BY intime DESC LIMIT 1",
}
_NAMES = {       # the two renderings' table and column names (EHRSQL's MIMIC-III: upper case, ICD-9, no dates)
    "mimic_iv": dict(diagnoses="diagnoses_icd", admissions="admissions", icd="icd_code", version="d.icd_version",
                     procedures="procedures_icd", pversion="p.icd_version", pdate="chartdate", labs="labevents",
                     rx="prescriptions", start="starttime", micro="microbiologyevents", test="test_name",
                     mdate="chartdate", transfers="transfers"),
    "ehrsql_mimic_iii": dict(diagnoses="DIAGNOSES_ICD", admissions="ADMISSIONS", icd="ICD9_CODE", version="'9'",
                             procedures="PROCEDURES_ICD", pversion="'9'", pdate="CHARTTIME", labs="LABEVENTS",
                             rx="PRESCRIPTIONS", start="STARTDATE", micro="MICROBIOLOGYEVENTS",
                             test="SPEC_TYPE_DESC", mdate="CHARTTIME", transfers="TRANSFERS"),
}
SEPARATOR = " | "


def latest_sql(task: str, source: str = "mimic_iv") -> str:
    """The reference's query for a task over a rendering's censored view: one cell, the names joined."""
    inner = _LATEST[task].format(**_NAMES[source])
    return f"SELECT group_concat(name, '{SEPARATOR}') AS names FROM ({inner})"


class ReferenceAgent:
    """The history baseline, reached through the tools as an agent would: load_ehr, then one run_sql_query asking
    the censored view for the newest events of the task's kind (the last admission's diagnoses, the last day's
    procedures and cultures, the last draw's labs, the last orders, the last transfer's unit), named through the
    candidate tables, then finish with the names it read. It never sees the labels: its F1 is what predicting "the
    same as last time" earns, and `tests/test_agentehr.py` recomputes it from the raw database independently."""

    def __init__(self, task: str, subject_id: int, prediction_time: str, scripted, source: str = "mimic_iv"):
        self.task, self.subject_id, self.prediction_time = task, subject_id, prediction_time
        self.scripted, self.source = scripted, source

    async def act(self, history: list[Message]) -> Message:
        await self.scripted()
        calls = sum(1 for m in history if m.is_tool_call)
        if calls == 0:
            return load_call(self.subject_id, self.prediction_time)
        if calls == 1:
            return Message("assistant", None, tool_call=ToolCall(
                "run_sql_query", {"subject_id": str(self.subject_id), "sql_query": latest_sql(self.task, self.source)},
                "call_1"))
        return answer(read_names(history[-1].content or ""))


def read_names(observation: str) -> list[str]:
    """The names out of the query's printed one-cell table ("names" over the joined value); none for an error, no
    rows, or a NULL."""
    lines = observation.splitlines()
    if len(lines) != 2 or lines[0].strip() != "names":
        return []
    value = lines[1].strip()
    return [] if value in ("", "None", "nan") else [n.strip() for n in value.split(SEPARATOR.strip())
                                                     if n.strip()]


SUMMARY_EVERY = 10


def _as_text(m: Message) -> str:
    """A message as the original's summarizer sees it: the chat message's dict, as Python prints it."""
    out: dict = {"role": m.role, "content": m.content}
    if m.tool_call:
        out["tool_calls"] = [{"function": {"name": m.tool_call.name, "arguments": json.dumps(m.tool_call.arguments)}}]
    return str(out)


class SummarizingAgent(ReActAgent):
    """ReSum and RetroSum (MCPReSumAgent, MCPRetroSumAgent): after every `every` steps (steps 9, 19, ...), one model
    call without tools writes a summary from the question (role + task instruction), the last summary and the
    conversation since the load (the original's messages[3:], or [4:] once a summary exists).
    - ReSum resets the context to the first message, the load and its result, and the summary (as an assistant
      message), then goes on from there;
    - RetroSum (`add_drop`) keeps the whole history (less what the context cap deleted) and places the newest
      summary, as a user message, where it was made, dropping the previous one; once it has finished, it writes one
      more summary, as MCPRetroSumAgent.react does after its loop (it costs tokens; ehrbench's memory does not use it,
      see memory.py).
    The summarizer reads the conversation the model was last shown: what the cap deleted is gone for it too. A
    summary request the provider refuses for its size leaves the last summary in place, as the original's
    summarize_conversation returns None on any error. Neither stops on repeated observations (the original's loops
    do not check them). Summary calls are metered as the `summarizer` role."""

    def __init__(self, model: MeteredModel, summarizer: MeteredModel, mode: str, task: str, subject_id: int,
                 current_time: str, sampling: Sampling = Sampling(temperature=0.0), seed: int | None = None,
                 max_turns: int = MAX_TURNS, every: int = SUMMARY_EVERY, recall=None, knowledge: bool = False,
                 tokens: TokenCounter | None = None, summarizer_sampling: Sampling | None = None):
        super().__init__(model, subject_id, current_time, sampling, seed, max_turns, recall, knowledge, tokens)
        self.summary_params = (summarizer_sampling or sampling).request(seed)
        if mode not in ("resum", "retrosum"):
            raise ValueError(f"summary mode {mode!r}: resum or retrosum")
        self.summarizer, self.mode, self.every = summarizer, mode, every
        self.instruction = instruction(task, subject_id, current_time)
        self.summary: str | None = None
        self.at: int | None = None          # where in the trial's history the summary stands
        self.refused_summaries = 0
        self._summarized_after = 0

    def _stuck(self, history: list[Message]) -> bool:
        """The step limit only: the original's ReSum and RetroSum loops never check repeated observations."""
        return sum(1 for m in history if m.is_tool_call) - 1 >= self.max_turns

    def conversation(self, history: list[Message]) -> list[Message]:
        if self.summary is None:
            return self.kept(history)
        p = prompts()
        if self.mode == "resum":
            note = Message("assistant", p["summary_observation"].format(question=self.instruction,
                                                                        summary=self.summary))
            return history[:3] + [note] + self.kept(history, self.at)
        note = Message("user", p["summary_observation"].format(question=self.instruction, summary=self.summary))
        return self.kept(history, 0, self.at) + [note] + self.kept(history, self.at)

    async def _summarize(self, history: list[Message]) -> None:
        p = prompts()
        context = self.conversation(history)
        recent = "\n".join(_as_text(m) for m in context[4 if self.summary else 3:])
        question = f"{p['role']}\n\n{self.instruction}"
        template = p["summary_next"] if self.summary else p["summary_first"]
        prompt = (template.replace("{{{question}}}", question).replace("{{{recent_history_messages}}}", recent)
                  .replace("{{{last_summary}}}", self.summary or ""))
        try:
            response = await self.summarizer.complete(ChatRequest([Message("user", prompt)], **self.summary_params))
        except (InfrastructureError, ModelTurnError) as e:
            if kind_of(e) is None:          # an outage: the trial is re-run
                raise
            # refused (too long, any 400), cut off or blocked before any text: the original's
            # summarize_conversation returns None on any error, and the loop goes on without a new summary
            self.refused_summaries += 1
            return
        if (response.text or "").strip():
            self.summary, self.at = response.text.strip(), len(history)

    async def act(self, history: list[Message]) -> Message:
        steps = sum(1 for m in history if m.is_tool_call) - 1       # actions after load_ehr
        if steps > self._summarized_after and (steps + 1) % self.every == 0 and steps < self.max_turns:
            self._summarized_after = steps
            await self._summarize(history)
        action = await super().act(history)
        if self.mode == "retrosum" and not action.is_tool_call:     # finished: RetroSum's summary after its loop
            await self._summarize(history)
        return action
