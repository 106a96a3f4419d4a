"""OpenAI-compatible chat completions (OpenAI, vLLM, other servers) through the official `openai` client.

One tool call per step unless the request allows several (`parallel_tool_calls` True, or None: not sent, the
provider's default, as PhysAssistBench's original leaves it): `parallel_tool_calls=False` is sent, and if a server
still returns several calls only the first is kept.
Arguments that are not a JSON object come back as `malformed` (with several calls, the first such problem).
The request parameters are the request's (each benchmark's `sampling.py` table): `reasoning_effort`, `extra_body`
and the output limit under the name the benchmark's original sends it (`max_completion_tokens` or `max_tokens`). A
model whose API takes no sampling parameters (`supports_temperature: false` in its conf: OpenAI's reasoning models)
is sent no temperature, top_p or presence penalty, and its limit as `max_completion_tokens`, the only name it takes.
"""
from __future__ import annotations

import json
import os

import openai

from ..trial import Message, ToolCall
from .base import (ChatModel, ChatRequest, ChatResponse, ConfigurationError, ModelTurnError, RequestRefused,
                   RetryableError, Usage, refused_for_size,
                   retry_after_from_headers)


def to_openai_messages(system: str | None, messages: list[Message], api: str = "tools") -> list[dict]:
    """The conversation in OpenAI's chat format; a tool result carries its tool's `name` beside `tool_call_id`, as
    EHR-ChatQA's harness sends it (`tool_calling_agent.py`). `api="functions"`: the legacy shape EHRAgent's AutoGen
    0.2 sends, a call as the assistant's `function_call` and its result as a `function` message with the name."""
    out: list[dict] = [{"role": "system", "content": system}] if system else []
    names: dict[str, str] = {}
    for m in messages:
        if m.role == "tool":
            if api == "functions":
                out.append({"role": "function", "name": names.get(m.tool_call_id or "", ""),
                            "content": m.content or ""})
                continue
            result = {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content or ""}
            if (m.tool_call_id or "") in names:
                result["name"] = names[m.tool_call_id or ""]
            out.append(result)
        elif m.tool_call is not None:
            names[m.tool_call.id or ""] = m.tool_call.name
            call = m.tool_call
            function = {"name": call.name, "arguments": json.dumps(call.arguments)}
            if api == "functions" and call.raw is not None:     # AutoGen 0.2 sends the model's own text back
                function["arguments"] = call.raw
            out.append({"role": "assistant", "content": m.content, "function_call": function} if api == "functions"
                       else {"role": "assistant", "content": m.content, "tool_calls": [{
                           "id": call.id, "type": "function", "function": function}]})
        elif m.role == "assistant" and m.content is None:     # a turn with no text at all (cut off, blocked): null,
            out.append({"role": "assistant", "content": None})  # as EHR-ChatQA's original sends it back (its twin)
        else:
            out.append({"role": m.role, "content": m.content or ""})
    return out


def _as_tool_call(function_call):
    """A legacy `function_call` read as a tool call (it has no id: the caller numbers it)."""
    from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall, Function

    return ChatCompletionMessageToolCall(id="", type="function", function=Function(
        name=function_call.name or "", arguments=function_call.arguments or ""))


def parse_arguments(raw: str | None) -> tuple[dict, str | None]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as e:
        return {}, f"tool call arguments are not valid JSON ({e.msg}): {raw!r:.200}"
    if not isinstance(args, dict):
        return {}, f"tool call arguments must be a JSON object, got {type(args).__name__}"
    return args, None


class OpenAICompatibleModel(ChatModel):
    provider = "openai-compatible"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 120.0, supports_temperature: bool = True, **kwargs):
        super().__init__(model, **kwargs)
        self.supports_temperature = supports_temperature  # reasoning models (o-series) refuse the parameter
        key = os.environ.get(api_key_env)
        if not key and base_url is None:
            raise ConfigurationError(f"model {model}: set {api_key_env} (or give model.base_url for a local server)")
        self.client = openai.AsyncOpenAI(api_key=key or "EMPTY", base_url=base_url, timeout=timeout_s, max_retries=0)

    async def _send(self, request: ChatRequest) -> ChatResponse:
        kwargs: dict = {"model": self.model, "messages": to_openai_messages(request.system, request.messages,
                                                                            request.api)}
        if request.tools and request.api == "functions":
            kwargs["functions"] = list(request.tools)
        elif request.tools:
            kwargs["tools"] = [{"type": "function", "function": t} for t in request.tools]
            if request.parallel_tool_calls is not None:
                kwargs["parallel_tool_calls"] = request.parallel_tool_calls
            if request.tool_choice:
                kwargs["tool_choice"] = request.tool_choice
        if request.reasoning_effort:
            kwargs["reasoning_effort"] = request.reasoning_effort
        if request.extra_body:
            kwargs["extra_body"] = request.extra_body
        if request.response_schema:
            schema = request.response_schema
            kwargs["response_format"] = {"type": "json_schema", "json_schema": {
                "name": schema.name, "schema": schema.json_schema(), "strict": True}}
        temperature = request.temperature if self.supports_temperature else None
        top_p = request.top_p if self.supports_temperature else None
        for key, value in (("temperature", temperature), ("top_p", top_p),
                           ("presence_penalty", request.presence_penalty if self.supports_temperature else None),
                           ("frequency_penalty", request.frequency_penalty if self.supports_temperature else None),
                           ("seed", request.seed),
                           (request.max_tokens_name if self.supports_temperature else "max_completion_tokens",
                            request.max_tokens)):
            if value is not None:
                kwargs[key] = value
        try:
            completion = await self.client.chat.completions.create(**kwargs)
        except openai.RateLimitError as e:
            raise RetryableError(f"HTTP 429: {e}", retry_after_from_headers(e.response.headers),
                                 rate_limited=True) from None
        except (openai.APITimeoutError, openai.APIConnectionError) as e:
            raise RetryableError(f"{type(e).__name__}: {e}") from None
        except openai.APIStatusError as e:
            if e.status_code >= 500:
                raise RetryableError(f"HTTP {e.status_code}: {e}", retry_after_from_headers(e.response.headers)) \
                    from None
            if refused_for_size(e.status_code, str(e)):
                raise RequestRefused(f"HTTP {e.status_code}: {e}") from None
            raise
        usage = Usage(reported=False)
        if completion.usage:
            details = getattr(completion.usage, "prompt_tokens_details", None)
            usage = Usage(completion.usage.prompt_tokens, completion.usage.completion_tokens,
                          getattr(details, "cached_tokens", 0) or 0)
        if not completion.choices:              # HTTP 200 with nothing in it: worth another try, unless asked
            if not request.retry_empty:
                raise ModelTurnError("empty response: the server sent no choices", usage, kind="empty")
            raise RetryableError("empty response: the server sent no choices", usage=usage)
        choice = completion.choices[0]
        message, finish = choice.message, choice.finish_reason
        if getattr(message, "function_call", None) is not None and not message.tool_calls:   # the legacy shape
            message.tool_calls = [_as_tool_call(message.function_call)]
        if not message.content and not message.tool_calls:
            if finish == "length":
                raise ModelTurnError("the model was cut off at its output-token limit before saying anything "
                                     "(finish_reason=length)", usage)
            if finish == "content_filter":
                raise ModelTurnError("the provider's content filter blocked the answer "
                                     "(finish_reason=content_filter)", usage, blocked=True)
        response = ChatResponse(text=message.content, usage=usage,
                                finish_reason=finish if finish not in (None, "stop", "tool_calls") else None)
        calls = (message.tool_calls or [])[:1 if request.parallel_tool_calls is False else None]
        response.tool_calls = []
        for call in calls:
            args, problem = parse_arguments(call.function.arguments)
            response.tool_calls.append(ToolCall(call.function.name, args, call.id, raw=call.function.arguments))
            response.malformed = response.malformed or problem
        return response
