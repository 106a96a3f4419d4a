"""PhysAssistBench's agents: the original's evaluated loop (`eval_runner.run_agent_turn`) and the reference oracle.

`PhysAssistAgent` sees the session opening (the environment info, then the agent's acknowledgement), the whole
conversation so far (its own calls, results and answers of earlier turns), and the full tool set every turn, at
temperature 0.2. Within a turn it may use 8 model rounds (the code's MAX_TOOL_STEPS) and at most 16 tool calls (the
paper's limit; parallel calls in one round are run one after another). It answers when a round brings text and no
call, or after `prepare_to_answer` (the text sent beside that call, if any). Otherwise, rounds or calls spent, or an
empty reply, it is nudged: a temporary message asks for the answer in plain text with no tools, up to 3 times.

`ReferenceAgent` replays each turn's gold actions (reads, interview calls, writes, `prepare_to_answer`) and answers
with the gold answer, which satisfies every rubric item: the harness's self-check (mRS 100 with the rule grader).
"""
from __future__ import annotations

from ...agents.tool_calling import tool_call_message
from ...llm.base import ChatRequest
from ...llm.scripted import ScriptedCall
from ...llm.usage import MeteredModel
from ...trial import Message, ToolCall
from .fhir import api_name, canonical, model_tools
from .sessions import Session

MAX_ROUNDS = 8
MAX_CALLS = 16
NUDGES = 3


def _this_turn(history: list[Message]) -> tuple[int, list[Message]]:
    """(which turn, the messages since its question)."""
    starts = [i for i, m in enumerate(history) if m.role == "user"]
    return len(starts) - 1, history[starts[-1] + 1:] if starts else history


class PhysAssistAgent:
    def __init__(self, model: MeteredModel, session: Session, prompts: dict, temperature: float = 0.2,
                 seed: int | None = None, max_tokens: int = 1024):
        self.model, self.prompts, self.temperature, self.seed = model, prompts, temperature, seed
        self.max_tokens = max_tokens
        self.opening = [Message("user", prompts["session_open"].format(env_info=session.env_info,
                                                                       subject_id=session.subject_id,
                                                                       hadm_id=session.hadm_id)),
                        Message("assistant", prompts["session_ack"])]
        self.tools = model_tools()
        self.turn, self.rounds, self.pending, self.ready_text = -1, 0, [], None

    async def act(self, history: list[Message]) -> Message:
        turn, since = _this_turn(history)
        if turn != self.turn:
            self.turn, self.rounds, self.pending, self.ready_text = turn, 0, [], None
        if self.pending:
            return self.pending.pop(0)
        calls = sum(1 for m in since if m.is_tool_call)
        if any(m.is_tool_call and canonical(m.tool_call.name) == "prepare_to_answer" for m in since):
            return Message("assistant", self.ready_text) if self.ready_text else await self._nudged(history)
        if self.rounds >= MAX_ROUNDS or calls >= MAX_CALLS:
            return await self._nudged(history)
        self.rounds += 1
        response = await self.model.complete(ChatRequest(self.opening + history, system=self.prompts["agent_system"],
                                                         tools=self.tools, temperature=self.temperature,
                                                         seed=self.seed, max_tokens=self.max_tokens))
        if not response.tool_calls:
            if (response.text or "").strip():
                return Message("assistant", response.text, finish_reason=response.finish_reason,
                               provider_parts=response.provider_parts)
            return await self._nudged(history)
        first = tool_call_message(response, f"call_{turn}_{self.rounds}")
        rest = [Message("assistant", None, tool_call=ToolCall(c.name, c.arguments, c.id or f"call_{turn}_{self.rounds}"
                                                               f"_{i}", c.error))
                for i, c in enumerate(response.tool_calls[1:MAX_CALLS - calls], 1)]
        if any(canonical(c.name) == "prepare_to_answer" for c in response.tool_calls):
            self.ready_text = (response.text or "").strip() or None
            first.content = None                      # the text is the turn's answer, given after the call
        self.pending = rest
        return first

    async def _nudged(self, history: list[Message]) -> Message:
        """The answer asked for in plain text, no tools (the nudge is not kept in the conversation)."""
        for _ in range(NUDGES):
            response = await self.model.complete(ChatRequest(
                self.opening + history + [Message("user", self.prompts["nudge"])], system=self.prompts["agent_system"],
                temperature=self.temperature, seed=self.seed, max_tokens=self.max_tokens))
            if (response.text or "").strip():
                return Message("assistant", response.text, finish_reason=response.finish_reason)
        return Message("assistant", "[Error generating final answer]")


class ReferenceAgent:
    """The gold actions of each turn, then its gold answer."""

    def __init__(self, session: Session, call: ScriptedCall):
        self.session, self.call = session, call

    async def act(self, history: list[Message]) -> Message:
        await self.call()
        turn, since = _this_turn(history)
        gold = self.session.turns[min(turn, len(self.session.turns) - 1)]
        done = sum(1 for m in since if m.is_tool_call)
        if done < len(gold.gold_actions):
            action = gold.gold_actions[done]
            args = {"subject_id": self.session.subject_id, "session_id": self.session.session_id,
                    **action["arguments"]} if action["name"].startswith("patient.") else dict(action["arguments"])
            return Message("assistant", None, tool_call=ToolCall(api_name(action["name"]), args,
                                                                 f"gold_{turn}_{done}"))
        return Message("assistant", gold.gold_answer)
