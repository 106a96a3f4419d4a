"""Models from config: a `conf/model/*.yaml` mapping becomes a client. Adding a model is a YAML file, not code.

Clients are cached per event loop by their config, so every trial a worker runs shares one connection pool per
model (async HTTP clients belong to the loop that made them). A config whose `limits.cluster_actor` names a
`RateLimiterActor` (set by the runtime on a Ray cluster) draws on that cluster-wide budget, through the limiter the
runtime supplies (`use_shared_limiters`); otherwise the budget is this process's own.
"""
from __future__ import annotations

import asyncio
import json
import weakref
from typing import Callable

from .base import ChatModel, ConfigurationError, RateLimiter, RetryPolicy
from .usage import Price

_CLIENTS: "weakref.WeakKeyDictionary[object, dict[str, ChatModel]]" = weakref.WeakKeyDictionary()
_SHARED_LIMITER: "Callable[[str], RateLimiter] | None" = None


def use_shared_limiters(factory: "Callable[[str], RateLimiter]") -> None:
    """Where a runtime shares rate limits (the Ray cluster's limiter actors, `runtime/rate_limits.py`), it supplies
    the client side here: `factory(name)` gives the limiter a config's `limits.cluster_actor` names. The model layer
    so never reaches up into the runtime."""
    global _SHARED_LIMITER
    _SHARED_LIMITER = factory
_CLIENTS_OUTSIDE_LOOPS: dict[str, ChatModel] = {}


def _create(cfg: dict) -> ChatModel:
    provider = cfg.get("provider")
    retry = RetryPolicy(**cfg.get("retry", {}))
    limits = cfg.get("limits", {})
    if limits.get("cluster_actor"):
        if _SHARED_LIMITER is None:
            raise ConfigurationError(f"model {cfg.get('name')}: limits.cluster_actor={limits['cluster_actor']!r} "
                                     "names a cluster-wide limiter, but no runtime supplies one in this process "
                                     "(import ehrbench.runtime first, or leave cluster_actor out)")
        limiter = _SHARED_LIMITER(limits["cluster_actor"])
    else:
        limiter = RateLimiter(limits.get("concurrency", 8), limits.get("per_minute"))
    common = {"retry": retry, "limiter": limiter,
              "timeout_s": cfg.get("timeout_s", 120.0)}
    if provider == "gemini":
        from .gemini import GeminiModel

        return GeminiModel(cfg["model"], base_url=cfg.get("base_url"), **common)
    if provider == "openai-compatible":
        from .openai_compatible import OpenAICompatibleModel

        return OpenAICompatibleModel(cfg["model"], base_url=cfg.get("base_url"),
                                     api_key_env=cfg.get("api_key_env", "OPENAI_API_KEY"),
                                     supports_temperature=cfg.get("supports_temperature", True), **common)
    raise ConfigurationError(f"model provider {provider!r} is unknown; use gemini or openai-compatible "
                             f"(model config: {cfg.get('name')})")


def build_model(cfg: dict) -> ChatModel:
    key = json.dumps(cfg, sort_keys=True, default=str)
    try:
        clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    except RuntimeError:  # outside any loop: the driver's start-up check
        clients = _CLIENTS_OUTSIDE_LOOPS
    if key not in clients:
        client = _create(cfg)
        if cfg.get("cache_dir"):
            from .cache import CachedModel

            client = CachedModel(client, cfg["cache_dir"])
        clients[key] = client
    return clients[key]


def price_of(cfg: dict) -> Price:
    return Price(**cfg.get("price", {}))
