"""Models from config: a `conf/model/*.yaml` mapping becomes a client. Adding a model is a YAML file, not code.

Clients are cached per event loop by their config, so every trial a worker runs shares one connection pool per
model (async HTTP clients belong to the loop that made them). A config whose `limits.cluster_actor` names a
`RateLimiterActor` (set by the runtime on a Ray cluster) draws on that cluster-wide budget; otherwise the budget is
this process's own.
"""
from __future__ import annotations

import asyncio
import json
import weakref

from .base import ChatModel, ConfigurationError, RateLimiter, RetryPolicy
from .usage import Price

_CLIENTS: "weakref.WeakKeyDictionary[object, dict[str, ChatModel]]" = weakref.WeakKeyDictionary()
_CLIENTS_OUTSIDE_LOOPS: dict[str, ChatModel] = {}


def _create(cfg: dict) -> ChatModel:
    provider = cfg.get("provider")
    retry = RetryPolicy(**cfg.get("retry", {}))
    limits = cfg.get("limits", {})
    if limits.get("cluster_actor"):
        from ..runtime.rate_limits import ClusterRateLimiter

        limiter = ClusterRateLimiter(limits["cluster_actor"])
    else:
        limiter = RateLimiter(limits.get("concurrency", 8), limits.get("per_minute"))
    common = {"retry": retry, "limiter": limiter,
              "timeout_s": cfg.get("timeout_s", 120.0)}
    if provider == "gemini":
        from .gemini import GeminiModel

        return GeminiModel(cfg["model"], base_url=cfg.get("base_url"), thinking_budget=cfg.get("thinking_budget"),
                           **common)
    if provider == "openai-compatible":
        from .openai_compatible import OpenAICompatibleModel

        return OpenAICompatibleModel(cfg["model"], base_url=cfg.get("base_url"),
                                     api_key_env=cfg.get("api_key_env", "OPENAI_API_KEY"),
                                     supports_temperature=cfg.get("supports_temperature", True),
                                     reasoning_effort=cfg.get("reasoning_effort"), **common)
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
