"""One async chat-model interface for every provider, with bounded retries and per-provider rate limits.

A provider client implements `_send(request) -> ChatResponse` and raises `RetryableError` for what is worth
retrying (429, 5xx, timeouts, dropped connections); `complete()` retries those with exponential backoff and jitter,
counts the attempts, and turns a call that still fails into an `InfrastructureError`, so the trial is re-run
instead of scored.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from ..trial import LIMITER_WAIT, InfrastructureError, Message, ToolCall


class RetryableError(Exception):
    """A provider failure that may pass: rate limit, server error, timeout, dropped connection."""


class ConfigurationError(Exception):
    """A model that cannot be used as configured (a missing API key, an unknown provider); stops the run at start."""


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]               # the conversation from this model's point of view
    system: str | None = None
    tools: list[dict] | None = None       # {"name", "description", "parameters": JSON schema}
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    response_schema: "OutputSchema | None" = None   # structured output: the reply is JSON of this schema


@dataclass(frozen=True)
class OutputSchema:
    """A structured-output contract (OpenAI `response_format` json_schema, Gemini `response_json_schema`)."""
    name: str
    fields: tuple[str, ...]          # string fields, all required, as the original's pydantic formats declare

    def json_schema(self) -> dict:
        return {"type": "object", "properties": {f: {"type": "string"} for f in self.fields},
                "required": list(self.fields), "additionalProperties": False}


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cached_tokens + other.cached_tokens)


@dataclass
class ChatResponse:
    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    malformed: str | None = None          # why a tool call could not be parsed (the agent gets it as an error)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 30.0

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

    async def __aenter__(self):
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
        last: Exception | None = None
        for attempt in range(self.retry.max_attempts):
            try:
                queued = time.monotonic()
                async with self.limiter.slot():
                    if (waits := LIMITER_WAIT.get()) is not None:
                        waits[0] += time.monotonic() - queued   # a harness queue, not the agent's time
                    self.attempts += 1
                    response = await self._send(request)
                self.calls += 1
                return response
            except RetryableError as e:
                last = e
                if attempt + 1 < self.retry.max_attempts:
                    await asyncio.sleep(self.retry.backoff(attempt, self._rng))
            except Exception as e:  # bad request, context overflow, auth: not worth retrying, still not the agent's
                raise InfrastructureError(f"{self.provider}:{self.model}: {type(e).__name__}: {e}"[:1000],
                                          source="model") from None
        raise InfrastructureError(f"{self.provider}:{self.model} failed {self.retry.max_attempts} times: {last}",
                                  source="model")
