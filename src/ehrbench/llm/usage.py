"""Token usage and cost per role (agent, user, verifier, reflection, validator, judge) for one trial.

Prices come from each model's config (`price`: dollars per million input, output and cached-input tokens), so a
new model or a price change is a YAML edit.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..trial import InfrastructureError
from .base import ChatModel, ChatRequest, ChatResponse, ModelTurnError, Usage
from .replay import error_json, replay_key, response_json

log = logging.getLogger(__name__)
_WARNED_NO_USAGE: set[str] = set()


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
    """Accumulates usage and cost by role, and each call's timing (the model spans of the trace); one per attempt.

    Call start times `t` are wall-clock (comparable across processes and nodes, so a user simulator actor's meter
    merges as is); the trial makes them relative to its own start.
    """
    by_role: dict[str, dict] = field(default_factory=dict)
    calls: list[dict] = field(default_factory=list)
    exchanges: list[dict] = field(default_factory=list)   # each call's request key and response (`llm/replay.py`)

    def add(self, role: str, usage: Usage, price: Price, started: float | None = None, model: str = "",
            failed: bool = False) -> None:
        """One call's usage. A call without usage is counted apart (`calls_without_usage`, a warning once per
        model), so cost figures are never silently low; a failed call (`failed`) is metered for what it spent."""
        row = self.by_role.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0,
                                             "cached_tokens": 0, "cost_usd": 0.0, "calls_without_usage": 0,
                                             "failed_calls": 0})
        row["calls"] += 1
        row["failed_calls"] += int(failed)
        if not usage.reported:
            row["calls_without_usage"] += 1
            if model not in _WARNED_NO_USAGE:
                _WARNED_NO_USAGE.add(model)
                log.warning("model %s sent a response without token usage: its tokens and cost are unknown, not "
                            "zero (counted in calls_without_usage/%s)", model, role)
        row["input_tokens"] += usage.input_tokens
        row["output_tokens"] += usage.output_tokens
        row["cached_tokens"] += usage.cached_tokens
        row["cost_usd"] += price.cost(usage)
        if started is not None:
            self.calls.append({"role": role, "model": model, "t": started,
                               "dt": round(time.time() - started, 4), "input_tokens": usage.input_tokens,
                               "output_tokens": usage.output_tokens, "cached_tokens": usage.cached_tokens})

    def merge(self, other: "UsageMeter") -> None:
        """Fold in usage metered elsewhere (a user simulator actor's share of the trial)."""
        for role, row in other.by_role.items():
            mine = self.by_role.setdefault(role, dict.fromkeys(row, 0))
            for key, value in row.items():
                mine[key] = mine.get(key, 0) + value
        self.calls.extend(other.calls)
        self.calls.sort(key=lambda c: c["t"])
        self.exchanges.extend(other.exchanges)


_SPENDING_CAP = None


def use_spending_caps(factory) -> None:
    """Where a runtime holds a run's spending cap (`budget_usd`: the cluster's ledger actor, `runtime/budget.py`), it
    supplies the client side here: `factory(run, guesses)` gives what `MeteredModel.budget` asks before each call."""
    global _SPENDING_CAP
    _SPENDING_CAP = factory


def spending_cap(run: str, guesses: dict[str, float]):
    if _SPENDING_CAP is None:
        raise RuntimeError("budget_usd is set but no runtime supplies the ledger in this process (import "
                           "ehrbench.runtime first)")
    return _SPENDING_CAP(run, guesses)


@dataclass
class MeteredModel:
    """A model as one role sees it: its calls are charged to that role in the trial's meter."""
    model: ChatModel
    role: str
    meter: UsageMeter
    price: Price = Price()
    budget: object | None = None     # the run's spending cap (`runtime/budget.Budget`): asked before every call

    async def complete(self, request: ChatRequest) -> ChatResponse:
        key = f"{self.model.model}/{self.role}"
        reserved = await self.budget.reserve(key, self.role) if self.budget else 0.0
        started, usage = time.time(), Usage()
        exchange = {"role": self.role, "key": replay_key(request)}
        try:
            response = await self.model.complete(request)
            usage = response.usage
        except (InfrastructureError, ModelTurnError) as e:     # what the failed call spent is still paid for
            usage = getattr(e, "usage", None) or Usage()
            self.meter.add(self.role, usage, self.price, started, self.model.model, failed=True)
            self.meter.exchanges.append({**exchange, "error": error_json(e)})
            raise
        finally:
            if self.budget:
                await self.budget.settle(key, reserved, self.price.cost(usage))
        self.meter.add(self.role, response.usage, self.price, started, self.model.model)
        self.meter.exchanges.append({**exchange, "response": response_json(response)})
        return response
