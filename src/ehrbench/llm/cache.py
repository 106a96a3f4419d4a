"""Opt-in on-disk response cache keyed by the full request, for reproducible re-runs (`model.cache_dir=...`).

The key hashes the provider, the model and every field of the request (messages, system prompt, tools,
temperature, seed, max tokens), so a cached reply is only reused for the same call; the messages' timings and the
provider's own parts are left out, as a re-run never has the same ones. Writes are atomic.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from ..trial import ToolCall
from .base import ChatModel, ChatRequest, ChatResponse
from .replay import replay_key


def request_key(provider: str, model: str, request: ChatRequest) -> str:
    """The provider, the model and what the request asks (`replay.replay_key`: every field and every message's
    role, text and tool call, but not when the messages were made nor the provider's own parts), so a multi-step
    agent's later calls hit the cache on a re-run too."""
    return hashlib.sha256(json.dumps([provider, model, replay_key(request)]).encode()).hexdigest()


class CachedModel(ChatModel):
    """Wraps a client; a hit costs no request (and no tokens: usage is reported as zero)."""

    def __init__(self, inner: ChatModel, cache_dir: str | Path):
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hits = 0

    @property
    def attempts(self) -> int:
        return self.inner.attempts

    async def complete(self, request: ChatRequest) -> ChatResponse:
        path = self.dir / f"{request_key(self.provider, self.model, request)}.json"
        if path.exists():
            self.hits += 1
            data = json.loads(path.read_text())
            return ChatResponse(text=data["text"], tool_calls=[ToolCall(**c) for c in data["tool_calls"]],
                                malformed=data["malformed"])
        response = await self.inner.complete(request)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"text": response.text, "tool_calls": [asdict(c) for c in response.tool_calls],
                                   "malformed": response.malformed, "usage": asdict(response.usage)}))
        os.replace(tmp, path)
        return response

