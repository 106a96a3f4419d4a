"""PhysAssistBench's agents: the original's evaluated loop (`eval_runner.run_agent_turn`) and the reference oracle.

`PhysAssistAgent` sees the session opening (the environment info, then the agent's acknowledgement), the whole
conversation so far (its own calls, results and answers of earlier turns), and the full tool set every turn, at
temperature 0.2. Within a turn it may use 8 model rounds (the code's MAX_TOOL_STEPS), each with any number of
parallel calls, run one after another in order (the code's; `call_cap=16`, the paper's text, is ehrbench's opt-in).
It answers when a round brings text and no call, or after `prepare_to_answer` (the text sent beside that call, if
any). Otherwise (rounds spent, an empty reply, or a round the provider refused or cut off) it is nudged: a temporary
message asks for the answer in plain text, the tools sent with `tool_choice="none"`, up to 3 times; a nudge the
provider refuses gives "[Error generating final answer]", which is judged like any answer, and the session goes
on. Provider outages (429, 5xx) are retried by the client and then re-run the trial, as infrastructure.

`ReferenceAgent` replays each turn's gold actions (reads, interview calls, writes, `prepare_to_answer`), checks
that every result is the one the session file stored, and only then answers with the gold answer (written from
those results), which satisfies every rubric item: the harness's self-check (rule_mRS 100 with the rule grader).
"""
from __future__ import annotations

from ...agents.tool_calling import tool_call_message
from ...failures import kind_of
from ...llm.base import ChatRequest, ModelTurnError, Sampling
from ...llm.scripted import ScriptedCall
from ...llm.usage import MeteredModel
from ...trial import InfrastructureError, Message, ToolCall
from .compact import compact
from .fhir import api_name, canonical, model_tools
from .tasks import Session

MAX_ROUNDS = 8
NUDGES = 3


def _refused(e: Exception) -> bool:
    """A failure of the agent's own request (refused for its size or any other 400, cut off, blocked): the
    original's loop breaks out of the round and nudges; outages are not this (they re-run the trial)."""
    return kind_of(e) is not None


def _sent(history: list[Message]) -> list[Message]:
    """The conversation as the original keeps it: an empty answer (three empty nudges) is never appended."""
    return [m for m in history if not (m.role == "assistant" and not m.is_tool_call and not (m.content or "").strip())]


def _this_turn(history: list[Message]) -> tuple[int, list[Message]]:
    """(which turn, the messages since its question)."""
    starts = [i for i, m in enumerate(history) if m.role == "user"]
    return len(starts) - 1, history[starts[-1] + 1:] if starts else history


class PhysAssistAgent:
    def __init__(self, model: MeteredModel, session: Session, prompts: dict,
                 sampling: Sampling = Sampling(temperature=0.2, max_tokens=1024, max_tokens_name="max_tokens"),
                 seed: int | None = None, call_cap: int | None = None):
        """`sampling`: what every request sends (the benchmark's table), `seed` filling a `"trial"` seed."""
        self.model, self.prompts, self.params, self.seed = model, prompts, sampling.request(seed), seed
        self.call_cap = call_cap
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
        if self.rounds >= MAX_ROUNDS or (self.call_cap is not None and calls >= self.call_cap):
            return await self._nudged(history)
        self.rounds += 1
        try:
            response = await self.model.complete(ChatRequest(
                self.opening + _sent(history), system=self.prompts["agent_system"], tools=self.tools,
                tool_choice="auto", parallel_tool_calls=None if self.call_cap is None else False, **self.params))
        except (ModelTurnError, InfrastructureError) as e:
            if not _refused(e):
                raise
            return await self._nudged(history)
        if not response.tool_calls:
            if (response.text or "").strip():
                return Message("assistant", response.text, finish_reason=response.finish_reason,
                               provider_parts=response.provider_parts)
            return await self._nudged(history)
        allowed = response.tool_calls if self.call_cap is None else response.tool_calls[:self.call_cap - calls]
        first = tool_call_message(response, f"call_{turn}_{self.rounds}")
        rest = [Message("assistant", None, tool_call=ToolCall(c.name, c.arguments, c.id or f"call_{turn}_{self.rounds}"
                                                               f"_{i}", c.error))
                for i, c in enumerate(allowed[1:], 1)]
        if any(canonical(c.name) == "prepare_to_answer" for c in allowed):
            self.ready_text = (response.text or "").strip() or None
            first.content = None                      # the text is the turn's answer, given after the call
        self.pending = rest
        return first

    async def _nudged(self, history: list[Message]) -> Message:
        """The answer asked for in plain text, the tools shown but none callable (the nudge is not kept in the
        conversation), as `eval_runner.py`: an empty answer (one cut off or blocked before any text too) is asked
        for again, 3 times in all, then the answer is empty; a refused nudge is "[Error generating final answer]"."""
        for _ in range(NUDGES):
            try:
                response = await self.model.complete(ChatRequest(
                    self.opening + _sent(history) + [Message("user", self.prompts["nudge"])],
                    system=self.prompts["agent_system"], tools=self.tools, tool_choice="none",
                    parallel_tool_calls=None if self.call_cap is None else False, **self.params))
            except ModelTurnError:       # cut off or blocked before any text: an empty answer, asked again
                continue
            except InfrastructureError as e:
                if not _refused(e):
                    raise
                return Message("assistant", "[Error generating final answer]")
            if (response.text or "").strip():
                return Message("assistant", response.text, finish_reason=response.finish_reason)
        return Message("assistant", "")


class ReferenceAgent:
    """The self-check's agent: each turn's gold actions through the tools, then a check that what they returned is
    what the session file stored for them (a record search exactly, as the model sees it; an interview reply one of
    that tool's stored replies; a write created), and only then the gold answer, which was written from those very
    results. A result that differs is answered with what differed, which the graders fail: a reference at 100 on
    the shipped sessions means every gold action's live result equals its stored one."""

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
        differs = self.differences(min(turn, len(self.session.turns) - 1), since)
        if differs:
            return Message("assistant", f"The tools disagree with the session file: {differs[0]}")
        return Message("assistant", gold.gold_answer)

    def differences(self, turn: int, since: list[Message]) -> list[str]:
        """Each gold call of this turn whose live result is not the stored one."""
        results = {m.tool_call_id: m.content or "" for m in since if m.role == "tool"}
        calls = [m.tool_call for m in since if m.is_tool_call]
        stored = (self.session.raw.get("answer_list") or [])[turn] if self.session.raw else []
        replies: dict[str, set[str]] = {}
        for actions in self.session.raw.get("answer_list") or []:
            for step in actions:
                obs = step.get("observation")
                if isinstance(obs, dict) and "patient_response" in obs:
                    texts = [obs["patient_response"], *(obs.get("patient_responses_all_literacy") or {}).values()]
                    replies.setdefault(step["action"]["name"], set()).update(
                        compact({"patient_response": t}) for t in texts)
        out = []
        for call, step in zip(calls, stored):
            name, seen = canonical(call.name), results.get(call.id, "")
            if name == "prepare_to_answer":
                continue
            if name.startswith("patient."):
                ok = seen in replies.get(name, set())
            elif name.endswith(".create"):
                ok = seen.startswith(f"{name.split('.')[0]} created:")
            else:
                ok = seen == compact(step.get("observation"))
            if not ok:
                out.append(f"{name} returned {seen[:300]!r}")
        return out
