"""A hard spending cap for a run, held for the whole cluster: `budget_usd=...`.

One `BudgetLedger` actor per run (named after the run) keeps what the run has spent and what its calls in flight
have reserved. Every metered model call asks it first (`llm/usage.py`, `MeteredModel`): the call goes ahead only if
spent + reserved + what this call is expected to cost stays within the cap, and it reserves that much; when the call
returns, its real cost replaces the reservation. The expected cost of a call is the largest one this model and
role has cost in the run so far (before any, the estimate's figure per call), so calls running side by side across
the cluster can never pass the cap together, and the run stops within one call's price of it. A refused call
raises `BudgetExhausted`: the trial stops unscored (`infra_error_budget`, run again by a resume with a larger
budget), the runner submits nothing more, and the run ends KILLED, saying why.
"""
from __future__ import annotations

import ray

from ..llm.usage import use_spending_caps
from ..trial import InfrastructureError


class BudgetExhausted(InfrastructureError):
    def __init__(self, message: str):
        super().__init__(message, source="budget")


@ray.remote(num_cpus=0)
class BudgetLedger:
    def __init__(self, cap_usd: float):
        self.cap, self.spent, self.reserved = float(cap_usd), 0.0, 0.0
        self.largest: dict[str, float] = {}
        self.refused = 0

    def reserve(self, key: str, guess_usd: float) -> float | None:
        """Reserve the expected cost of one call of `key` (model/role); None: it would pass the cap."""
        expected = max(self.largest.get(key, guess_usd), 0.0)
        if self.spent + self.reserved + expected > self.cap:
            self.refused += 1
            return None
        self.reserved += expected
        return expected

    def settle(self, key: str, reserved_usd: float, cost_usd: float) -> None:
        self.reserved = max(0.0, self.reserved - reserved_usd)
        self.spent += cost_usd
        self.largest[key] = max(self.largest.get(key, 0.0), cost_usd)

    def state(self) -> dict:
        return {"cap_usd": self.cap, "spent_usd": self.spent, "refused_calls": self.refused}


def ledger_name(run: str) -> str:
    return f"ehrbench-budget-{run}"


def start_ledger(run: str, cap_usd: float):
    """The run's ledger, owned by the driver (a resumed run starts a fresh one: the cap is on this invocation's
    spending); the driver kills it when the run ends."""
    return BudgetLedger.options(name=ledger_name(run), max_concurrency=1000).remote(cap_usd)


class Budget:
    """A trial's view of the run's ledger, for `MeteredModel` (found by name in any worker process); `guesses`: a
    role's expected cost of one call before the run has made any."""

    def __init__(self, run: str, guesses: dict[str, float]):
        self.run, self.guesses = run, guesses
        self._ledger = None

    def _handle(self):
        if self._ledger is None:
            self._ledger = ray.get_actor(ledger_name(self.run))
        return self._ledger

    async def reserve(self, key: str, role: str) -> float:
        reserved = await self._handle().reserve.remote(key, self.guesses.get(role, 0.0))
        if reserved is None:
            raise BudgetExhausted(f"budget_usd reached: the next {key} call would pass the run's cap")
        return reserved

    async def settle(self, key: str, reserved: float, cost: float) -> None:
        await self._handle().settle.remote(key, reserved, cost)


use_spending_caps(Budget)      # model clients in any process of the runtime ask this run's ledger
