"""Token usage and cost per role (agent, user, verifier, reflection, validator, judge) for one trial.

Prices come from each model's config (`price`: dollars per million input, output and cached-input tokens), so a
new model or a price change is a YAML edit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .base import ChatModel, ChatRequest, ChatResponse, Usage


@dataclass(frozen=True)
class Price:
    input: float = 0.0      # $ per 1M input tokens
    output: float = 0.0     # $ per 1M output tokens
    cached: float = 0.0     # $ per 1M cached input tokens

    def cost(self, usage: Usage) -> float:
        fresh = max(0, usage.input_tokens - usage.cached_tokens)
        return (fresh * self.input + usage.cached_tokens * self.cached + usage.output_tokens * self.output) / 1e6


@dataclass
class UsageMeter:
    """Accumulates usage and cost by role; one per trial attempt."""
    by_role: dict[str, dict] = field(default_factory=dict)

    def add(self, role: str, usage: Usage, price: Price) -> None:
        row = self.by_role.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0,
                                             "cached_tokens": 0, "cost_usd": 0.0})
        row["calls"] += 1
        row["input_tokens"] += usage.input_tokens
        row["output_tokens"] += usage.output_tokens
        row["cached_tokens"] += usage.cached_tokens
        row["cost_usd"] += price.cost(usage)


@dataclass
class MeteredModel:
    """A model as one role sees it: its calls are charged to that role in the trial's meter."""
    model: ChatModel
    role: str
    meter: UsageMeter
    price: Price = Price()

    def complete(self, request: ChatRequest) -> ChatResponse:
        from .bridge import run_sync

        response = run_sync(self.model.complete(request))
        self.meter.add(self.role, response.usage, self.price)
        return response
