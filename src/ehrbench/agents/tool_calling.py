"""The baseline tool-calling agent of EHR-ChatQA (paper Appendix C): one tool call per step, temperature 0.

The conversation goes to the model as is; the model answers with one tool call or one message. What happens when
the model's turn goes wrong is the `FailurePolicy`:
- `ORIGINAL`, the authors' `get_action` (glee4810/EHR-ChatQA `src/utils.py`): arguments that are not a JSON object
  are not shown to the model, and a request the provider refuses (an HTTP 400 not about the context's size) is
  not given up: either is asked again with the same conversation after a 3 s wait (the waits count toward the
  agent's time, so a model that never forms the call, or a request always refused, runs out of time: reward 0); a
  conversation over the model's context window becomes an empty reply, which the user answers and which then ends
  the conversation (`trial.CONTEXT_EXCEEDED`); an HTTP 200 with no choices is an empty reply (""); a turn cut off
  before saying anything or blocked by a filter is a reply with no text at all (None: the user reads "", and the
  validator leaves the trial unjudged, "the agent generated an empty response"), and so is a finished reply with
  neither text nor a call (the original keeps its `content: None`). Each seen in its twin run.
- `EHRBENCH`: a malformed call is answered with an error observation (the agent gets a turn to correct it); an
  overflow, a cut-off or a blocked turn ends the trial as the agent's error, scored 0.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

from ..llm.base import ChatRequest, ModelTurnError, Sampling, split_reasoning
from ..llm.usage import MeteredModel
from ..trial import CONTEXT_EXCEEDED, LIMITER_WAIT, InfrastructureError, Message, ToolCall


def tool_call_message(response, fallback_id: str) -> Message:
    """A model response's first tool call as the agent's message; a call it could not form carries its error."""
    call = response.tool_calls[0]
    return Message("assistant", response.text, tool_call=ToolCall(
        call.name, call.arguments, call.id or fallback_id,
        f"malformed tool call: {response.malformed}" if response.malformed else call.error),
        finish_reason=response.finish_reason, provider_parts=response.provider_parts)


@dataclass(frozen=True)
class FailurePolicy:
    reask_malformed: bool = False     # ask again (same conversation) instead of showing the agent the error
    reask_wait_s: float = 3.0         # between re-asks (the original's time.sleep(3))
    reask_budget_s: float = 600.0     # stop re-asking once this act has taken this long (the trial's time limit)
    max_reasks: int = 1000            # the original's max_retries
    pass_failed_turns: bool = False   # overflow / cut-off / blocked / empty turns become empty replies, not errors
    reask_refused: bool = False       # an HTTP 400 not about size: asked again as a malformed call is, not re-run


ORIGINAL = FailurePolicy(reask_malformed=True, pass_failed_turns=True, reask_refused=True)
EHRBENCH = FailurePolicy()


class ToolCallingAgent:
    def __init__(self, model: MeteredModel, system_prompt: str, tools: list[dict],
                 sampling: Sampling = Sampling(temperature=0.0), seed: int | None = None,
                 policy: FailurePolicy = EHRBENCH, cut_reasoning: bool = False,
                 read_text_calls: Callable[[str], tuple[str | None, list[ToolCall]] | None] | None = None):
        """`sampling`: what every request sends (the benchmark's table); `seed`: the trial's, where it asks for one;
        `cut_reasoning`: keep only what follows the last `</think>` of a reply (`split_reasoning`);
        `read_text_calls`: reads calls the model wrote as text (text -> (text, calls), None where it wrote none;
        `ValueError` where it cannot: asked again, as a malformed call), replacing the reply's own."""
        self.model, self.system, self.tools = model, system_prompt, tools
        self.params = sampling.request(seed)
        self.policy, self.cut_reasoning, self.read_text_calls = policy, cut_reasoning, read_text_calls
        self._calls = 0

    def _read_written_call(self, response) -> None:
        """A call written as text becomes the reply's call (its text what came before it), as the model's own."""
        parsed = self.read_text_calls(response.text) if self.read_text_calls and response.text else None
        if parsed is not None:
            response.text, response.tool_calls = parsed[0], parsed[1][:1]
            response.malformed, response.provider_parts = None, None

    async def act(self, history: list[Message]) -> Message:
        policy = self.policy
        request = ChatRequest(history, system=self.system, tools=self.tools, retry_empty=not policy.pass_failed_turns,
                              **self.params)
        started, waits = time.monotonic(), LIMITER_WAIT.get()
        queued_before = waits[0] if waits else 0.0

        def spent() -> float:              # this act's time as the trial counts it (rate-limiter queues left out)
            return time.monotonic() - started - ((waits[0] - queued_before) if waits else 0.0)

        def may_reask(reasks: int) -> bool:
            return reasks < policy.max_reasks and spent() <= policy.reask_budget_s
        reasks = 0
        while True:
            try:
                response = await self.model.complete(request)
            except InfrastructureError as e:
                if e.agent_caused and policy.pass_failed_turns:
                    return Message("assistant", "", finish_reason=CONTEXT_EXCEEDED)
                if not (policy.reask_refused and e.status == 400 and not e.agent_caused):
                    raise
                if not may_reask(reasks):       # refused until the time ran out: the trial's time limit ends it
                    return Message("assistant", "", finish_reason="refused")
            except ModelTurnError as e:
                if not policy.pass_failed_turns:
                    raise
                if e.kind == "empty":
                    return Message("assistant", "", finish_reason="empty")
                return Message("assistant", None, finish_reason="blocked" if e.blocked else "length")
            else:
                try:
                    self._read_written_call(response)
                except ValueError:              # the original's parser raised: asked again until the time is up
                    if not may_reask(reasks):
                        return Message("assistant", "", finish_reason="refused")
                else:
                    if not (response.malformed and policy.reask_malformed and may_reask(reasks)):
                        break
            await asyncio.sleep(policy.reask_wait_s)
            reasks += 1
        if self.cut_reasoning:
            response.text, response.reasoning = split_reasoning(response.text)
        if response.tool_calls:
            self._calls += 1
            return tool_call_message(response, f"call_{self._calls}")
        text = response.text if policy.pass_failed_turns else response.text or ""   # the original keeps a None
        return Message("assistant", text, finish_reason=response.finish_reason, provider_parts=response.provider_parts)
