"""Gemini through google-genai: function calling with automatic calling off, thinking budget, usage metadata.

The key comes from GEMINI_API_KEY or GOOGLE_API_KEY. `base_url` points the client elsewhere (a proxy, or the
tests' fake server on loopback).
"""
from __future__ import annotations

import os

from google import genai
from pydantic import ValidationError
from google.genai import errors, types

from ..trial import Message, ToolCall
from .base import (ChatModel, ChatRequest, ChatResponse, ConfigurationError, ModelTurnError, RequestRefused,
                   RetryableError, Usage, refused_for_size,
                   retry_after_from_headers)

try:  # google-genai moved its transport from httpx to httpx2; timeouts and dropped connections come from either
    import httpx2 as _transport
except ImportError:  # pragma: no cover - older google-genai
    import httpx as _transport
try:  # with aiohttp installed (Ray brings it) the async client uses it instead
    from aiohttp import ClientError as _AiohttpError
except ImportError:  # pragma: no cover
    _AiohttpError = _transport.TransportError
TRANSIENT = (_transport.TransportError, _AiohttpError, TimeoutError)

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


# Finish reasons for an answer the provider withheld (as opposed to one the model ended itself).
BLOCKED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "OTHER"}


def _name(value) -> str | None:
    return None if value is None else getattr(value, "name", None) or str(value)


def to_contents(messages: list[Message]) -> list[types.Content]:
    """The conversation as Gemini contents: the model's own parts where it sent them (thought signatures kept),
    and never an empty text part (Gemini refuses them)."""
    contents: list[types.Content] = []
    for m in messages:
        if m.role == "assistant" and m.provider_parts:
            contents.append(types.Content(role="model", parts=[types.Part.model_validate(p) for p in m.provider_parts]))
        elif m.role == "tool":
            name = next((c.tool_call.name for c in reversed(messages[:messages.index(m)]) if c.tool_call), "tool")
            # as litellm's Gemini route sends it (EHR-ChatQA's original; its twin): the result under "content", in
            # a turn with no role (the API reads it as the user's)
            part = types.Part(function_response=types.FunctionResponse(name=name, response={"content": m.content}))
            contents.append(types.Content(parts=[part]))
        elif m.tool_call is not None:
            call = types.Part(function_call=types.FunctionCall(name=m.tool_call.name, args=m.tool_call.arguments))
            contents.append(types.Content(role="model", parts=([types.Part(text=m.content)] if m.content else [])
                                          + [call]))
        elif m.content:
            contents.append(types.Content(role="model" if m.role == "assistant" else "user",
                                          parts=[types.Part(text=m.content)]))
    return contents


def declaration(tool: dict) -> types.FunctionDeclaration:
    """A tool as litellm's Gemini route declares it (EHR-ChatQA's original; its twin): the schema under `parameters`,
    the OpenAPI subset Gemini reads; one outside that subset (`$defs`, `anyOf`, ...) under `parametersJsonSchema`."""
    schema = tool.get("parameters")
    if schema:
        try:
            return types.FunctionDeclaration(name=tool["name"], description=tool.get("description"),
                                             parameters=types.Schema.model_validate(schema))
        except ValidationError:
            pass
    return types.FunctionDeclaration(name=tool["name"], description=tool.get("description"),
                                     parameters_json_schema=schema)


def gemini_retry_after(error) -> float | None:
    """The wait Gemini asks for: RetryInfo's retryDelay ("5s") in the error details, else a Retry-After header."""
    details = (error.details or {}).get("error", {}).get("details", []) if isinstance(error.details, dict) else []
    for item in details if isinstance(details, list) else []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            try:
                return max(0.0, float(str(item.get("retryDelay", "")).rstrip("s")))
            except ValueError:
                pass
    return retry_after_from_headers(getattr(error.response, "headers", None))


class GeminiModel(ChatModel):
    provider = "gemini"

    def __init__(self, model: str, base_url: str | None = None, timeout_s: float = 120.0, **kwargs):
        super().__init__(model, **kwargs)
        key = next((os.environ[v] for v in KEY_VARIABLES if os.environ.get(v)), None)
        if not key:
            raise ConfigurationError(f"model {model}: set GEMINI_API_KEY (or GOOGLE_API_KEY)")
        options = types.HttpOptions(base_url=base_url, timeout=int(timeout_s * 1000)) if base_url else \
            types.HttpOptions(timeout=int(timeout_s * 1000))
        self.client = genai.Client(api_key=key, http_options=options)

    async def _send(self, request: ChatRequest) -> ChatResponse:
        config = types.GenerateContentConfig(
            system_instruction=request.system, temperature=request.temperature, top_p=request.top_p,
            presence_penalty=request.presence_penalty, frequency_penalty=request.frequency_penalty,
            seed=request.seed,
            max_output_tokens=request.max_tokens,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
        if request.tools:
            config.tools = [types.Tool(function_declarations=[declaration(t) for t in request.tools])]
            if request.tool_choice == "none":       # the tools shown, none callable (a final-answer nudge)
                config.tool_config = types.ToolConfig(
                    function_calling_config=types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.NONE))
        if request.response_schema:
            config.response_mime_type = "application/json"
            config.response_schema = request.response_schema.gemini_schema()
        if request.thinking_budget is not None:
            config.thinking_config = types.ThinkingConfig(thinking_budget=request.thinking_budget)
        try:
            result = await self.client.aio.models.generate_content(
                model=self.model, contents=to_contents(request.messages), config=config)
        except errors.APIError as e:
            if e.code == 429 or (e.code or 0) >= 500:
                raise RetryableError(f"HTTP {e.code}: {e.message}", gemini_retry_after(e),
                                     rate_limited=e.code == 429) from None
            if refused_for_size(e.code or 0, e.message or ""):
                raise RequestRefused(f"HTTP {e.code}: {e.message}") from None
            raise
        except TRANSIENT as e:
            raise RetryableError(f"{type(e).__name__}: {e}") from None
        meta = result.usage_metadata
        usage = Usage((meta.prompt_token_count or 0),
                      (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0),
                      meta.cached_content_token_count or 0) if meta else Usage(reported=False)
        if not result.candidates:
            blocked = result.prompt_feedback.block_reason if result.prompt_feedback else None
            if blocked:
                raise ModelTurnError(f"the provider blocked the prompt (blockReason={_name(blocked)})", usage,
                                     blocked=True)
            if not request.retry_empty:
                raise ModelTurnError("empty response: the server sent no candidates", usage, kind="empty")
            raise RetryableError("empty response: the server sent no candidates", usage=usage)
        candidate = result.candidates[0]
        finish = _name(candidate.finish_reason)
        parts = (candidate.content.parts or []) if candidate.content else []
        # The text parts, also beside a function call (thoughts left out), as OpenAI-compatible servers send it
        text = "".join(p.text for p in parts if p.text and not p.thought)
        if not text and not any(p.function_call for p in parts):
            if finish == "MAX_TOKENS":
                raise ModelTurnError("the model was cut off at its output-token limit before saying anything "
                                     "(finishReason=MAX_TOKENS)", usage)
            if finish in BLOCKED:
                raise ModelTurnError(f"the provider blocked the answer (finishReason={finish})", usage, blocked=True)
        response = ChatResponse(text=text or None, usage=usage,
                                finish_reason=finish if finish not in (None, "STOP") else None)
        if any(p.thought_signature for p in parts):   # sent back as they came, or the next call is refused
            # up to the first call only: the turn's one call gets one response, and Gemini refuses a turn whose
            # calls outnumber its responses (the original keeps `tool_calls[:1]` before litellm rebuilds the turn)
            first = next((i for i, p in enumerate(parts) if p.function_call), len(parts) - 1)
            response.provider_parts = [p.model_dump(mode="json", exclude_none=True) for p in parts[:first + 1]]
        calls = result.function_calls or []
        if calls:
            call = calls[0]
            if isinstance(call.args, dict) or call.args is None:
                response.tool_calls = [ToolCall(call.name or "", dict(call.args or {}), call.id or "")]
            else:
                response.tool_calls = [ToolCall(call.name or "", {}, call.id or "")]
                response.malformed = f"tool call arguments must be a JSON object, got {call.args!r:.200}"
        return response
