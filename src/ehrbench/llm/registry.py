"""Models from config: a `conf/model/*.yaml` mapping becomes a client. Adding a model is a YAML file, not code.

Clients are cached per process by their config, so every trial a worker runs shares one connection pool and one
rate limiter per model.
"""
from __future__ import annotations

import json

from .base import ChatModel, ConfigurationError, RateLimiter, RetryPolicy
from .usage import Price

_CLIENTS: dict[str, ChatModel] = {}


def _create(cfg: dict) -> ChatModel:
    provider = cfg.get("provider")
    retry = RetryPolicy(**cfg.get("retry", {}))
    limits = cfg.get("limits", {})
    common = {"retry": retry, "limiter": RateLimiter(limits.get("concurrency", 8), limits.get("per_minute")),
              "timeout_s": cfg.get("timeout_s", 120.0)}
    if provider == "gemini":
        from .gemini import GeminiModel

        return GeminiModel(cfg["model"], base_url=cfg.get("base_url"), thinking_budget=cfg.get("thinking_budget"),
                           **common)
    if provider == "openai-compatible":
        from .openai_compatible import OpenAICompatibleModel

        return OpenAICompatibleModel(cfg["model"], base_url=cfg.get("base_url"),
                                     api_key_env=cfg.get("api_key_env", "OPENAI_API_KEY"),
                                     supports_temperature=cfg.get("supports_temperature", True), **common)
    raise ConfigurationError(f"model provider {provider!r} is unknown; use gemini or openai-compatible "
                             f"(model config: {cfg.get('name')})")


def build_model(cfg: dict) -> ChatModel:
    key = json.dumps(cfg, sort_keys=True, default=str)
    if key not in _CLIENTS:
        client = _create(cfg)
        if cfg.get("cache_dir"):
            from .cache import CachedModel

            client = CachedModel(client, cfg["cache_dir"])
        _CLIENTS[key] = client
    return _CLIENTS[key]


def price_of(cfg: dict) -> Price:
    return Price(**cfg.get("price", {}))
