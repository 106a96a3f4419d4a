"""The driver side of test_multinode's rate-limiter test, run as its own process against the multi-node cluster.

It starts a model's limiter as a run does (`start_rate_limiters`: beside the driver), holds the model's whole budget
in actors pinned to a node the test names, and reports, one JSON line per step, what the limiter says after the test
has lost that node. The test answers each step with a JSON line on stdin. Every wait has a deadline.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ehrbench.benchmark import TrialSettings
from ehrbench.runtime.rate_limits import ClusterRateLimiter, start_rate_limiters

BUDGET = 2
PREFIX = "lease-driver: "
MODEL = {"provider": "openai-compatible", "model": "lease-test", "timeout_s": 3, "limits": {"concurrency": BUDGET}}


@ray.remote(num_cpus=0, max_restarts=0)
class Holder:
    """A trial's model call that never ends: it holds one lease until its node is lost."""

    async def hold(self, limiter_name: str) -> None:
        async with ClusterRateLimiter(limiter_name).slot():
            await asyncio.sleep(3600)


def say(**fields) -> None:
    print(PREFIX + json.dumps(fields), flush=True)          # Ray may print lines of its own on stdout


def heard() -> dict:
    return json.loads(sys.stdin.readline())


async def whole_budget(limiter_name: str) -> float:
    """The whole budget at once, as a model client's requests take it; returns the seconds they queued."""
    limiter, started = ClusterRateLimiter(limiter_name), time.monotonic()
    entered = asyncio.Event()
    held = 0

    async def one() -> None:
        nonlocal held
        async with limiter.slot():
            held += 1
            if held == BUDGET:
                entered.set()
            await entered.wait()                 # every slot held at the same time

    await asyncio.gather(*(one() for _ in range(BUDGET)))
    return time.monotonic() - started


def main(address: str) -> None:
    ray.init(address=address, log_to_driver=False)
    actors, _ = start_rate_limiters(TrialSettings(agent_model=MODEL))
    [(name, limiter)] = actors.items()
    say(limiter_node=ray.get(limiter.node.remote(), timeout=120), driver_node=ray.get_runtime_context().get_node_id())

    node = heard()["hold_on"]                                # 1. the whole budget held on that node
    pinned = NodeAffinitySchedulingStrategy(node, soft=False)
    holders = [Holder.options(scheduling_strategy=pinned).remote() for _ in range(BUDGET)]
    calls = [h.hold.remote(name) for h in holders]           # noqa: F841 (they never return)
    deadline = time.monotonic() + 120
    while ray.get(limiter.stats.remote(), timeout=60)["in_flight"] < BUDGET:
        assert time.monotonic() < deadline, "the holders never took the budget"
        time.sleep(0.2)
    say(held=ray.get(limiter.stats.remote(), timeout=60))

    heard()                                                  # 2. that node is lost: the whole budget comes back
    queued = asyncio.run(asyncio.wait_for(whole_budget(name), timeout=120))
    say(queued_s=queued, stats=ray.get(limiter.stats.remote(), timeout=60))


if __name__ == "__main__":
    main(sys.argv[1])
