"""The scripted model's "call": the offline default's stand-in for a model round trip.

The reference agent and the scripted user decide without a model, but each decision awaits one `ScriptedCall`,
which waits `latency_s` (0 by default; `model.latency_s=0.5` in the throughput bench) and is metered as one call of
its role. So a scripted run exercises the runtime exactly as a real provider would: one awaited call per agent step
and per user turn, counted in `calls/<role>`.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from .base import Usage
from .usage import Price, UsageMeter


@dataclass
class ScriptedCall:
    role: str
    meter: UsageMeter
    latency_s: float = 0.0

    async def __call__(self) -> None:
        started = time.time()
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        self.meter.add(self.role, Usage(), Price(), started, "scripted")
