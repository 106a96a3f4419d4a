"""Cluster-wide rate limits: one `RateLimiterActor` per model, shared by every trial worker of the run.

A provider's quota (requests in flight, requests per minute) belongs to the account, not to a process: with eight
workers each holding its own limiter, a "concurrency: 8" model would see 64 requests at once. So the driver starts
one named limiter actor per model config that sets `limits`, writes its name into that config
(`limits.cluster_actor`), and every client built from it draws a lease from the actor for each request.
A lease not returned within `lease_s` (its worker died mid-request) expires, so a crash never shrinks the budget.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from dataclasses import replace

import ray


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class RateLimiterActor:
    def __init__(self, concurrency: int, per_minute: int | None = None, lease_s: float = 600.0,
                 window_s: float = 60.0):
        self.concurrency, self.per_minute, self.lease_s, self.window_s = concurrency, per_minute, lease_s, window_s
        self.leases: dict[int, float] = {}          # lease id -> expiry
        self.starts: deque[float] = deque()         # request starts within the window
        self._ids = itertools.count()
        self._changed = asyncio.Condition()
        self.granted = 0
        self.peak = 0
        self.paused_until = 0.0
        self.pauses = 0

    def _wait_s(self, now: float) -> float:
        """0 when a request may start now, else how long until that could change."""
        for lease, expiry in list(self.leases.items()):
            if expiry <= now:
                del self.leases[lease]
        while self.starts and now - self.starts[0] >= self.window_s:
            self.starts.popleft()
        waits = [self.paused_until - now] if self.paused_until > now else []
        if len(self.leases) >= self.concurrency:
            waits.append(min(self.leases.values()) - now)
        if self.per_minute and len(self.starts) >= self.per_minute:
            waits.append(self.window_s - (now - self.starts[0]))
        return max(waits, default=0.0)

    async def acquire(self) -> int:
        async with self._changed:
            while (wait := self._wait_s(time.monotonic())) > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=wait)
            now = time.monotonic()
            lease = next(self._ids)
            self.leases[lease] = now + self.lease_s
            self.starts.append(now)
            self.granted += 1
            self.peak = max(self.peak, len(self.leases))
            return lease

    async def release(self, lease: int) -> None:
        async with self._changed:
            self.leases.pop(lease, None)
            self._changed.notify()

    async def pause(self, seconds: float) -> None:
        """A worker saw a 429: no lease is granted to any worker for `seconds` (leases held are kept)."""
        async with self._changed:
            self.paused_until = max(self.paused_until, time.monotonic() + seconds)
            self.pauses += 1

    async def stats(self) -> dict:
        return {"granted": self.granted, "peak_in_flight": self.peak, "in_flight": len(self.leases),
                "pauses": self.pauses}


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


def limiter_name(cfg: dict) -> str:
    """One budget per provider and model; a sweep that changes the limits gets a fresh one."""
    limits = cfg.get("limits") or {}
    return (f"ehrbench-limit/{cfg.get('provider')}/{cfg.get('model')}/"
            f"c{limits.get('concurrency', 8)}-m{limits.get('per_minute') or 'inf'}")


def start_rate_limiters(settings) -> tuple[dict, object]:
    """One limiter actor per distinct model of the settings; returns them and the settings pointing at them."""
    actors: dict[str, object] = {}
    changes = {}
    for field_name, cfg in settings.models().items():
        if cfg.get("provider") == "scripted":
            continue
        limits = dict(cfg.get("limits") or {})
        name = limiter_name(cfg)
        if name not in actors:
            actors[name] = RateLimiterActor.options(name=name, get_if_exists=True, max_concurrency=100_000).remote(
                limits.get("concurrency", 8), limits.get("per_minute"), lease_s=float(cfg.get("timeout_s", 120)) * 2)
        changes[field_name] = {**cfg, "limits": {**limits, "cluster_actor": name}}
    return actors, replace(settings, **changes)
