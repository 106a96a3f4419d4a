"""One async chat-model interface for every provider, with bounded retries and per-provider rate limits.

A provider client implements `_send(request) -> ChatResponse` and raises `RetryableError` for what is worth
retrying (429, 5xx, timeouts, dropped connections); `complete()` retries those with exponential backoff and jitter,
counts the attempts, and turns a call that still fails into an `InfrastructureError`, so the trial is re-run
instead of scored.
"""
from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass, field

from ..trial import LIMITER_WAIT, InfrastructureError, Message, ToolCall
from ..errors import ConfigurationError  # noqa: F401  (re-exported: the model layer's callers import it here)


class RetryableError(Exception):
    """A provider failure that may pass: rate limit, server error, timeout, dropped connection.

    `retry_after_s` is the provider's own word on when to come back (Retry-After, retry-after-ms, Gemini's
    RetryInfo); `rate_limited` marks a 429, which holds off every request to the model, not only this one.
    """

    def __init__(self, message: str, retry_after_s: float | None = None, rate_limited: bool = False,
                 usage: "Usage | None" = None):
        super().__init__(message)
        self.retry_after_s, self.rate_limited, self.usage = retry_after_s, rate_limited, usage


def retry_after_from_headers(headers) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date), or None."""
    if headers is None:
        return None
    try:
        if headers.get("retry-after-ms") is not None:
            return max(0.0, float(headers.get("retry-after-ms")) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            from email.utils import parsedate_to_datetime

            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class ModelTurnError(Exception):
    """The model answered but gave no usable turn: the prompt or the answer was blocked (`kind="blocked"`), the
    output-token limit cut it off before anything was said (`"cut_off"`), or, where the request asks for it
    (`ChatRequest.retry_empty=False`), an HTTP 200 held nothing at all (`"empty"`). Not retried (the same request
    gets the same refusal); how the turn ends is the caller's, as its benchmark's original ends it (by default an
    agent's trial ends as `agent_error`, a user's or judge's call costs its attempt)."""

    def __init__(self, message: str, usage: "Usage | None" = None, blocked: bool = False, kind: str | None = None):
        super().__init__(message)
        self.usage = usage
        self.kind = kind or ("blocked" if blocked else "cut_off")
        self.blocked = self.kind == "blocked"    # a filter blocked it (no text at all)


def kind_of(error: Exception) -> str | None:
    """The failure kind of an error a client raised (`failures.KINDS`): a turn with no usable text (empty, cut_off,
    blocked), a request refused for its size or any other 400 (refused_for_size, bad_request); None for an
    infrastructure failure, which is re-run."""
    if isinstance(error, ModelTurnError):
        return error.kind
    if isinstance(error, InfrastructureError) and error.source == "model":
        if error.agent_caused:
            return "refused_for_size"
        if error.status == 400:
            return "bad_request"
    return None


REFUSED = (400, 413, 422)      # HTTP statuses that may refuse what a request holds (not auth, not a missing model)
_OVERFLOW = re.compile(r"context|too (long|large|many tokens)|maximum.{0,40}tokens|token (count|limit)|exceed",
                       re.IGNORECASE)


def refused_for_size(status: int, message: str) -> bool:
    """Whether a refusal is about what the conversation holds (its length): 413, or a 400 / 422 saying so. Other
    400s (a bad key, a parameter the provider does not take) are the run's set-up, never the agent's doing."""
    return status == 413 or (status in REFUSED and bool(_OVERFLOW.search(message or "")))


class RequestRefused(Exception):
    """The provider refused the request for its size (a conversation over the context window: HTTP 413, or a 400 /
    422 that says so). Not retried (the same request gets the same refusal); `complete` raises it as an
    `InfrastructureError` marked `agent_caused`, which an agent's turn turns into a scored failure."""


@dataclass(frozen=True)
class Sampling:
    """The request parameters a benchmark sends one role's model, as its original's code sets them (each benchmark's
    table in `sampling.py` gives them per role and model family). None: not sent, the provider's default."""
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    max_tokens: int | None = None
    max_tokens_name: str = "max_completion_tokens"   # the OpenAI-compatible field (or "max_tokens", as some send)
    seed: int | str | None = None          # an int: that seed on every call; "trial": the trial's seed; None: none
    reasoning_effort: str | None = None    # OpenAI reasoning models
    thinking_budget: int | None = None     # Gemini's thinking budget (-1: dynamic, 0: off)
    extra_body: dict | None = None         # provider switches an OpenAI-compatible server reads (enable_thinking ...)
    api: str = "tools"                     # the OpenAI-compatible tool API: tools, or the legacy functions

    def request(self, trial_seed: int | None = None) -> dict:
        """These parameters as `ChatRequest` fields (`seed="trial"` becomes `trial_seed`)."""
        seed = trial_seed if self.seed == "trial" else self.seed
        return {"temperature": self.temperature, "top_p": self.top_p, "presence_penalty": self.presence_penalty,
                "frequency_penalty": self.frequency_penalty,
                "max_tokens": self.max_tokens, "max_tokens_name": self.max_tokens_name, "seed": seed,
                "reasoning_effort": self.reasoning_effort, "thinking_budget": self.thinking_budget,
                "extra_body": self.extra_body, "api": self.api}


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]               # the conversation from this model's point of view
    system: str | None = None
    tools: list[dict] | None = None       # {"name", "description", "parameters": JSON schema}
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    top_p: float | None = None            # nucleus sampling, where a benchmark's original sets it
    presence_penalty: float | None = None  # likewise (AgentEHR's scripts send 1.0 to vLLM-served models)
    frequency_penalty: float | None = None  # likewise (EHRAgent's helpers send 0)
    max_tokens_name: str = "max_completion_tokens"   # OpenAI-compatible: the field the original sends the limit in
    reasoning_effort: str | None = None   # OpenAI reasoning models (sent only where the benchmark's original sends it)
    thinking_budget: int | None = None    # Gemini
    extra_body: dict | None = None        # an OpenAI-compatible server's own switches (vLLM chat_template_kwargs ...)
    api: str = "tools"                    # OpenAI-compatible: `tools` (tool_calls, tool results) or the legacy
                                          # `functions` (function_call, function results), as EHRAgent's AutoGen
    response_schema: "OutputSchema | None" = None   # structured output: the reply is JSON of this schema
    tool_choice: str | None = None        # None: the provider's default (auto); "none": tools shown, none callable
    parallel_tool_calls: bool | None = False   # several calls in one reply: False (sent: one call, the first kept),
                                               # None (allowed, not sent: the provider's default, as PhysAssistBench's
                                               # original leaves it), True (sent: allowed)
    retry_empty: bool = True              # an HTTP 200 with nothing in it: retried as a glitch, or (False) the model's
                                          # empty turn (`ModelTurnError(kind="empty")`), as EHR-ChatQA's original


@dataclass(frozen=True)
class OutputSchema:
    """A structured-output contract (OpenAI `response_format` json_schema, Gemini `responseSchema`)."""
    name: str
    fields: tuple[str, ...]          # string fields, all required, as the original's pydantic formats declare

    def json_schema(self) -> dict:
        return {"type": "object", "properties": {f: {"type": "string"} for f in self.fields},
                "required": list(self.fields), "additionalProperties": False}

    def gemini_schema(self) -> dict:
        """As litellm sends a pydantic format to Gemini (`responseSchema`, the OpenAPI subset), the fields' order
        pinned by `propertyOrdering`, which is the order Gemini writes them in (an explanation before a verdict)."""
        return {"type": "object", "properties": {f: {"type": "string"} for f in self.fields},
                "required": list(self.fields), "property_ordering": list(self.fields)}


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reported: bool = True       # False: the provider sent no usage, so tokens and cost are unknown, not zero

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cached_tokens + other.cached_tokens, self.reported and other.reported)


@dataclass
class ChatResponse:
    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    malformed: str | None = None          # why a tool call could not be parsed (the agent gets it as an error)
    finish_reason: str | None = None      # the provider's, when the turn did not end normally ("length", "MAX_TOKENS")
    provider_parts: list | None = None    # the provider's own parts to send back as they came (thought signatures)
    reasoning: str | None = None          # thinking a caller took out of the text (`split_reasoning`), kept aside


def split_reasoning(text: str | None) -> tuple[str | None, str | None]:
    """(what the model said, what it thought aloud): a Qwen-style model served without a reasoning parser writes its
    thinking into the reply. Whether it is cut is each benchmark's original's business, never the client's: EHR-ChatQA's
    keeps only what follows the last `</think>` of a Qwen agent's reply (`utils.py`,
    `content.split('</think>')[-1].strip()`); the other four keep the whole reply, for their judges and logs. A reply
    without `</think>` (an unclosed `<think>` too) is kept whole, as there."""
    if not text or "</think>" not in text:
        return text, None
    cut = text.rfind("</think>")
    return text[cut + len("</think>"):].strip(), text[:cut].replace("<think>", "").strip()


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter in [0.5, 1]: by default 8 attempts over at least 90 s, so a provider's
    one-minute rate-limit window passes before a call is given up. A provider's Retry-After wins when longer."""
    max_attempts: int = 8
    initial_backoff_s: float = 2.0
    max_backoff_s: float = 60.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        return min(self.max_backoff_s, self.initial_backoff_s * 2 ** attempt) * rng.uniform(0.5, 1.0)


class RateLimiter:
    """At most `concurrency` requests in flight and `per_minute` started per rolling minute, in this process.

    `runtime.rate_limits.ClusterRateLimiter` has the same `slot()` and holds the budget for a whole Ray cluster.
    """

    def __init__(self, concurrency: int = 8, per_minute: int | None = None):
        self._slots = asyncio.Semaphore(concurrency)
        self.per_minute = per_minute
        self._starts: list[float] = []
        self._lock = asyncio.Lock()
        self._paused_until = 0.0

    async def pause(self, seconds: float) -> None:
        """A 429: no request to this model starts for `seconds` (those in flight finish)."""
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    async def __aenter__(self):
        while (wait := self._paused_until - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        await self._slots.acquire()
        if self.per_minute:
            async with self._lock:
                while True:
                    now = time.monotonic()
                    self._starts = [t for t in self._starts if now - t < 60.0]
                    if len(self._starts) < self.per_minute:
                        self._starts.append(now)
                        break
                    await asyncio.sleep(60.0 - (now - self._starts[0]))
        return self

    async def __aexit__(self, *exc):
        self._slots.release()

    def slot(self) -> "RateLimiter":
        return self


class ChatModel:
    """Base of every provider client: retries, rate limiting and attempt counting around `_send`."""

    provider = "base"

    def __init__(self, model: str, retry: RetryPolicy = RetryPolicy(), limiter: RateLimiter | None = None,
                 seed: int = 0):
        self.model = model
        self.retry = retry
        self.limiter = limiter or RateLimiter()
        self._rng = random.Random(seed)
        self.attempts = 0      # requests sent, retries included
        self.calls = 0         # calls that returned a response

    async def _send(self, request: ChatRequest) -> ChatResponse:  # pragma: no cover - implemented by providers
        raise NotImplementedError

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The response; the tokens of responses that were retried or refused are added to it, or, when the call
        fails, ride on the error (`.usage`), so what was spent is always metered."""
        last: Exception | None = None
        spent = Usage()
        for attempt in range(self.retry.max_attempts):
            try:
                queued = time.monotonic()
                async with self.limiter.slot():
                    if (waits := LIMITER_WAIT.get()) is not None:
                        waits[0] += time.monotonic() - queued   # a harness queue, not the agent's time
                    self.attempts += 1
                    response = await self._send(request)
                self.calls += 1
                if spent.input_tokens or spent.output_tokens:
                    response.usage = response.usage + spent
                return response
            except ModelTurnError as e:
                e.usage = (e.usage or Usage()) + spent
                raise
            except RequestRefused as e:
                error = InfrastructureError(f"{self.provider}:{self.model}: the request was refused: {e}"[:1000],
                                            source="model", agent_caused=True)
                error.usage = spent
                raise error from None
            except RetryableError as e:
                last = e
                spent = spent + e.usage if e.usage else spent
                if attempt + 1 < self.retry.max_attempts:
                    wait = max(self.retry.backoff(attempt, self._rng), e.retry_after_s or 0.0)
                    if e.rate_limited:           # every worker holds off this model, not only this call
                        await self.limiter.pause(wait)
                    await asyncio.sleep(wait)
            except Exception as e:  # bad request, context overflow, auth: not worth retrying, still not the agent's
                error = InfrastructureError(f"{self.provider}:{self.model}: {type(e).__name__}: {e}"[:1000],
                                            source="model", status=getattr(e, "status_code", None) or
                                            getattr(e, "code", None))
                error.usage = spent
                raise error from None
        error = InfrastructureError(f"{self.provider}:{self.model} failed {self.retry.max_attempts} times: {last}",
                                    source="model")
        error.usage = spent
        raise error
