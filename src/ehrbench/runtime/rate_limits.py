"""Cluster-wide rate limits: one `RateLimiterActor` per model, shared by every trial worker of the run.

A provider's quota (requests in flight, requests per minute) belongs to the account, not to a process: with eight
workers each holding its own limiter, a "concurrency: 8" model would see 64 requests at once. So the driver starts
one named limiter actor per model config that sets `limits`, writes its name into that config
(`limits.cluster_actor`), and every client built from it draws a lease from the actor for each request.
A lease not returned within `lease_s` (its worker died mid-request, or its whole node was lost) expires, so a crash
never shrinks the budget. Limiters live beside the driver, so losing any other node leaves them whole. Should a
limiter itself die, Ray restarts it (calls in flight are retried on the new one); it starts with no leases, and lease
ids carry the incarnation that granted them, so a lease of the old one returned late releases nothing of the new
one's. For that short while up to twice the budget may be in flight.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import deque
from dataclasses import replace

import ray

from ..llm.registry import use_shared_limiters
from .actors import Placed


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class RateLimiterActor(Placed):
    def __init__(self, concurrency: int, per_minute: int | None = None, lease_s: float = 600.0,
                 window_s: float = 60.0):
        self.concurrency, self.per_minute, self.lease_s, self.window_s = concurrency, per_minute, lease_s, window_s
        self.leases: dict[str, float] = {}          # lease id -> expiry
        self.starts: deque[float] = deque()         # request starts within the window
        self._incarnation = uuid.uuid4().hex[:8]    # a restarted limiter's ids never match its predecessor's
        self._ids = itertools.count()
        self._changed = asyncio.Condition()
        self.granted = 0
        self.peak = 0
        self.paused_until = 0.0
        self.pauses = 0
        self.expired = 0                            # leases never returned (holder lost), taken back at expiry

    def _expire(self, now: float) -> None:
        for lease, expiry in list(self.leases.items()):
            if expiry <= now:
                del self.leases[lease]
                self.expired += 1

    def _wait_s(self, now: float) -> float:
        """0 when a request may start now, else how long until that could change."""
        self._expire(now)
        while self.starts and now - self.starts[0] >= self.window_s:
            self.starts.popleft()
        waits = [self.paused_until - now] if self.paused_until > now else []
        if len(self.leases) >= self.concurrency:
            waits.append(min(self.leases.values()) - now)
        if self.per_minute and len(self.starts) >= self.per_minute:
            waits.append(self.window_s - (now - self.starts[0]))
        return max(waits, default=0.0)

    async def acquire(self) -> str:
        async with self._changed:
            while (wait := self._wait_s(time.monotonic())) > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=wait)
            now = time.monotonic()
            lease = f"{self._incarnation}-{next(self._ids)}"
            self.leases[lease] = now + self.lease_s
            self.starts.append(now)
            self.granted += 1
            self.peak = max(self.peak, len(self.leases))
            return lease

    async def release(self, lease: str) -> None:
        async with self._changed:
            self.leases.pop(lease, None)
            self._changed.notify()

    async def pause(self, seconds: float) -> None:
        """A worker saw a 429: no lease is granted to any worker for `seconds` (leases held are kept)."""
        async with self._changed:
            self.paused_until = max(self.paused_until, time.monotonic() + seconds)
            self.pauses += 1

    async def stats(self) -> dict:
        self._expire(time.monotonic())
        return {"granted": self.granted, "peak_in_flight": self.peak, "in_flight": len(self.leases),
                "pauses": self.pauses, "expired_leases": self.expired}


class ClusterRateLimiter:
    """The client side: `async with limiter.slot():` holds one lease of the named actor for one request."""

    def __init__(self, actor_name: str):
        self.actor_name = actor_name
        self._actor = None

    def _handle(self):
        if self._actor is None:
            self._actor = ray.get_actor(self.actor_name)
        return self._actor

    async def pause(self, seconds: float) -> None:
        """A 429 here holds off every worker of the cluster for this model."""
        await self._handle().pause.remote(seconds)

    @contextlib.asynccontextmanager
    async def slot(self):
        lease = await self._handle().acquire.remote()
        try:
            yield
        finally:
            await self._handle().release.remote(lease)


use_shared_limiters(ClusterRateLimiter)     # model clients built in any process of the runtime draw on these


def limiter_name(cfg: dict) -> str:
    """One budget per provider and model; a sweep that changes the limits gets a fresh one."""
    limits = cfg.get("limits") or {}
    return (f"ehrbench-limit/{cfg.get('provider')}/{cfg.get('model')}/"
            f"c{limits.get('concurrency', 8)}-m{limits.get('per_minute') or 'inf'}")


WINDOW_S = 60.0         # a provider's per-minute limit counts the requests that reached it in the last minute
WINDOW_GUARD_S = 1.0    # a request reaches the provider a little after its slot is granted (more under load): a
                        # window one second longer keeps the provider's own count under its limit (bench-rate-limits)


def _beside_the_driver():
    """Limiters live on the driver's node (the head, under `ray job submit`): the one node whose loss ends the run
    anyway, so no other node's loss empties a budget. Hard affinity: Ray's soft affinity passes over a node with no
    CPUs (the head that runs no trials) for any other."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


# The driver holds every limiter it started for as long as it lives: a named actor dies with its creator's last
# handle, and a suite's children side by side share one per model (the first child to need it starts it), so a
# child that finishes must not take its limiter with it (`bench-rate-limits --suite` lost trials so). Keyed by Ray
# job, so a driver that reconnects to another cluster starts afresh.
_HELD: dict[tuple[str, str], object] = {}


def start_rate_limiters(settings) -> tuple[dict, object]:
    """One limiter actor per distinct model of the settings, beside the driver (the one this driver already holds,
    if any); returns them and the settings pointing at them."""
    job = ray.get_runtime_context().get_job_id()
    actors: dict[str, object] = {}
    changes = {}
    for field_name, cfg in settings.models().items():
        if cfg.get("provider") == "scripted":
            continue
        limits = dict(cfg.get("limits") or {})
        name = limiter_name(cfg)
        if name not in actors:
            if (job, name) not in _HELD:
                _HELD[(job, name)] = RateLimiterActor.options(
                    name=name, get_if_exists=True, max_concurrency=100_000,
                    scheduling_strategy=_beside_the_driver()).remote(
                    limits.get("concurrency", 8), limits.get("per_minute"),
                    lease_s=float(cfg.get("timeout_s", 120)) * 2, window_s=WINDOW_S + WINDOW_GUARD_S)
            actors[name] = _HELD[(job, name)]
        changes[field_name] = {**cfg, "limits": {**limits, "cluster_actor": name}}
    return actors, replace(settings, **changes)


def limiter_metrics(limiters: dict, wait_s: float = 30.0) -> dict[str, float]:
    """Each model's budget as the run used it: peak leases in flight, 429 pauses, leases lost with their holder. A
    limiter that does not answer in `wait_s` is left out (the run's results matter more than its budget's figures)."""
    out = {}
    for name, actor in limiters.items():
        try:
            stats = ray.get(actor.stats.remote(), timeout=wait_s)
        except ray.exceptions.RayError:
            continue
        model = name.removeprefix("ehrbench-limit/")
        out |= {f"rate_limit_{key}/{model}": float(stats[key]) for key in ("peak_in_flight", "pauses",
                                                                         "expired_leases")}
    return out
