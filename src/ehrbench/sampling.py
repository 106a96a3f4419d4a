"""What each model is sent: a benchmark's request parameters, per role and model family, as its authors' code sets
them (the fidelity contract's second rule).

A model conf says how to reach a provider (endpoint, key, prices, limits, and what its API accepts:
`supports_temperature: false` for models that take no sampling parameters); the parameters of every call belong to
the benchmark. Each benchmark declares one `SamplingTable`: rows of (roles, model family, parameters, where its
original sets them), read top to bottom, a later row overriding an earlier one where both match, so a table starts
with the original's default rule (what a model it never ran gets) and refines it per family. The benchmark's docs
page shows the table, generated from it (`markdown`). `benchmark.sampling.<role>.<parameter>=...` overrides a
role's parameters for one run, recorded as a departure from the contract.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Callable

from .errors import ConfigurationError
from .llm.base import Sampling


def _id(model: dict) -> str:
    return str(model.get("model") or model.get("name") or "").lower()


# model families, as the originals tell models apart: (what the docs call it, whether a model conf belongs to it)
FAMILIES: dict[str, tuple[str, Callable[[dict], bool]]] = {
    "any": ("any model", lambda m: True),
    "no-sampling": ("a model whose API takes no temperature (`supports_temperature: false`: the o-series, GPT-5 but "
                    "gpt-5-chat, deepseek-reasoner)", lambda m: m.get("supports_temperature") is False),
    "gpt-5-chat": ("gpt-5-chat", lambda m: _id(m).startswith("gpt-5-chat")),
    "gpt-5-small": ("gpt-5-mini, gpt-5-nano", lambda m: bool(re.match(r"gpt-5-(mini|nano)", _id(m)))),
    "gpt-5": ("GPT-5 models (not gpt-5-chat)", lambda m: _id(m).startswith("gpt-5") and "chat" not in _id(m)),
    "gpt-4.1-or-o": ("GPT-4.1 and the o-series", lambda m: bool(re.match(r"(gpt-4\.1|o\d)", _id(m)))),
    "gemini": ("Gemini (google-genai)", lambda m: m.get("provider") == "gemini"),
    "gemini-2.5-pro": ("Gemini 2.5 Pro", lambda m: "gemini-2.5-pro" in _id(m)),
    "gemini-2.5": ("Gemini 2.5", lambda m: "gemini-2.5" in _id(m)),
    "vllm": ("a model served by vLLM (`server: vllm` in its conf)", lambda m: m.get("server") == "vllm"),
    "qwen3": ("Qwen3 models", lambda m: "qwen3" in _id(m)),
    "deepseek": ("DeepSeek models", lambda m: "deepseek" in _id(m)),
    "deepseek-reasoner": ("DeepSeek's reasoner", lambda m: "deepseek" in _id(m) and "reasoner" in _id(m)),
    "mistral": ("Mistral models", lambda m: "mistral" in _id(m)),
    "grok": ("Grok models", lambda m: "grok" in _id(m)),
}
PARAMETERS = tuple(f.name for f in fields(Sampling))


@dataclass(frozen=True)
class Rule:
    """One row: for these roles ("*": every role) and this model family, these parameters (the others as an
    earlier row left them; a value of None is not sent), as the original sets them at `source`."""
    roles: tuple[str, ...]
    family: str
    params: dict
    source: str

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"unknown model family {self.family!r}; known: {sorted(FAMILIES)}")
        unknown = set(self.params) - set(PARAMETERS)
        if unknown:
            raise ValueError(f"unknown request parameters {sorted(unknown)}; known: {list(PARAMETERS)}")

    def matches(self, role: str, model: dict) -> bool:
        return ("*" in self.roles or role in self.roles) and FAMILIES[self.family][1](model)


@dataclass(frozen=True)
class SamplingTable:
    rules: tuple[Rule, ...]
    note: str = ""                  # what the docs say under the table (the original's client, its defaults)

    def params(self, role: str, model: dict | None, overrides: dict | None = None) -> Sampling:
        """The parameters `role` sends `model` (a model conf), then the run's `benchmark.sampling.<role>`."""
        chosen: dict = {}
        for rule in self.rules:
            if rule.matches(role, model or {}):
                chosen.update(rule.params)
        chosen.update((overrides or {}).get(role) or {})
        return Sampling(**chosen)

    def markdown(self) -> str:
        rows = ["| roles | models | parameters | the original |", "| --- | --- | --- | --- |"]
        for r in self.rules:
            shown = ", ".join(f"`{k}={_show(v)}`" for k, v in r.params.items()) or "none"
            rows.append(f"| {', '.join(r.roles) if '*' not in r.roles else 'every role'} | "
                        f"{FAMILIES[r.family][0]} | {shown} | {r.source} |")
        return "\n".join(rows) + (f"\n\n{self.note}" if self.note else "")


def _show(value) -> str:
    if value is None:
        return "not sent"
    return str(value).replace("|", "\\|") if not isinstance(value, dict) else str(value).replace("'", '"')


def check_overrides(overrides, roles: tuple[str, ...]) -> dict:
    """`benchmark.sampling`: role -> {parameter: value}; an unknown role or parameter stops the run, named."""
    if overrides in (None, {}):
        return {}
    if not isinstance(overrides, dict):
        raise ConfigurationError(f"benchmark.sampling={overrides!r}: a mapping role -> parameters, e.g. "
                                 "+benchmark.sampling.agent.reasoning_effort=high")
    for role, params in overrides.items():
        if role not in roles:
            raise ConfigurationError(f"benchmark.sampling.{role}: not a role of this benchmark; its roles are "
                                     f"{list(roles)}")
        for name in params or {}:
            if name not in PARAMETERS:
                raise ConfigurationError(f"benchmark.sampling.{role}.{name}: not a request parameter; the "
                                         f"parameters are {list(PARAMETERS)}")
    return overrides


def departures(overrides: dict) -> list[str]:
    """The run's parameter overrides, as a contract departure."""
    return [f"sampling.{role}.{k}={v} (the original's table says otherwise)"
            for role, params in (overrides or {}).items() for k, v in (params or {}).items()]


def with_seed(sampling: Sampling, seed: int | str | None) -> Sampling:
    return replace(sampling, seed=seed)
