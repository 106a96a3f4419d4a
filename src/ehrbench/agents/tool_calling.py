"""The baseline tool-calling agent of EHR-ChatQA (paper Appendix C): one tool call per step, temperature 0.

The conversation goes to the model as is; the model answers with one tool call or one message. A call the model
could not form (arguments that are not a JSON object) goes back to the trial as a call with an `error`, which the
trial answers with an error observation, so the agent can correct itself and go on.
"""
from __future__ import annotations

from ..llm.base import ChatRequest
from ..llm.usage import MeteredModel
from ..trial import Message, ToolCall


def tool_call_message(response, fallback_id: str) -> Message:
    """A model response's first tool call as the agent's message; a call it could not form carries its error."""
    call = response.tool_calls[0]
    return Message("assistant", response.text, tool_call=ToolCall(
        call.name, call.arguments, call.id or fallback_id,
        f"malformed tool call: {response.malformed}" if response.malformed else call.error),
        finish_reason=response.finish_reason, provider_parts=response.provider_parts)


class ToolCallingAgent:
    def __init__(self, model: MeteredModel, system_prompt: str, tools: list[dict], temperature: float = 0.0,
                 seed: int | None = None, max_tokens: int | None = None):
        self.model, self.system, self.tools = model, system_prompt, tools
        self.temperature, self.seed, self.max_tokens = temperature, seed, max_tokens
        self._calls = 0

    async def act(self, history: list[Message]) -> Message:
        response = await self.model.complete(ChatRequest(history, system=self.system, tools=self.tools,
                                                   temperature=self.temperature, seed=self.seed,
                                                   max_tokens=self.max_tokens))
        if response.tool_calls:
            self._calls += 1
            return tool_call_message(response, f"call_{self._calls}")
        return Message("assistant", response.text or "", finish_reason=response.finish_reason,
                       provider_parts=response.provider_parts)
