"""Starts a run's actors, schedules its trials with a bounded number in flight, and re-runs what infrastructure broke.

Trials go to `TrialWorker` actors, each running many at once on its event loop; the driver keeps at most
`max_in_flight` trials submitted and gives each to the least-loaded worker. How many of them talk to a model at
once is the model's own budget (`limits` in its config), enforced cluster-wide by one `RateLimiterActor` per model.
A trial whose worker died (Ray raises) or that ended in an infrastructure error is submitted again, up to
`max_attempts`; its broken attempts are kept as records (reward None) and never scored. Finished records are handed
to `on_record` as they arrive, so the caller can stream them to MLflow and to disk.
"""
from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable

import ray
from tqdm import tqdm

from ..benchmark import TrialSettings
from ..config import RuntimeOptions
from ..trial import Termination, TrialRecord
from .actors import (ROLE_RESOURCES, ActorNames, start_database, start_memory, start_services,
                     start_trial_workers, start_user_simulators, start_value_index)
from .rate_limits import start_rate_limiters
from .shared import acquire, hosted_key
from .shared import release as shared_release

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """The actors of one run (held here, so they live as long as the run). Its databases and index are hosted sets
    it may share with the driver's other runs (`shared`, their keys), released when it ends (`release`)."""
    names: ActorNames
    databases: dict[str, list]
    index: object
    memory: object = None
    services: dict = field(default_factory=dict)
    workers: list = field(default_factory=list)
    users: list = field(default_factory=list)
    limiters: dict = field(default_factory=dict)
    shared: list = field(default_factory=list)          # (key, what the last run out does with the set)


def start_runtime(paths: dict[str, str], index_cache: str, options: RuntimeOptions = RuntimeOptions(),
                  with_index: bool = True, embedder: dict | None = None, with_memory: bool = False,
                  services: dict[str, int] | None = None, settings: TrialSettings | None = None) -> Runtime:
    """Database shards and the value index (shared with the driver's other runs over the same files: a suite's
    children), the run's own shared memory, the benchmark's services (built from `settings`) and user simulators;
    trial workers come once the settings are final."""
    hosted: dict = {}              # filled below with the prefix of each hosted set this run shares
    names = ActorNames(replicas={db_id: options.db_replicas for db_id in paths}, users=options.user_simulators,
                       index_hosted=with_index, memory_hosted=with_memory, services=dict(services or {}),
                       placement=options.placement, hosted=hosted)
    check_placement(names, bool(paths or services or with_memory))
    runtime = Runtime(names, {}, None)
    try:
        for db_id, path in paths.items():
            key = hosted_key("db", db_id, path, options.db_replicas, options.placement)
            got = acquire(key, lambda prefix: start_database(path, db_id, options.db_replicas,
                                                             names=replace(names, prefix=prefix)),
                          kind="db", alive=answers)
            runtime.shared.append((key, None))
            hosted[("db", db_id)], runtime.databases[db_id] = got.prefix, got.handles
        if with_index:
            # its manifest (what a restarted index reloads) is named by the set's own prefix: no other set, this
            # driver's or another's, drops it while this one needs it
            key = hosted_key("index", index_cache, embedder, sorted(paths.items()), options.placement)
            got = acquire(key, lambda prefix: start_value_index(index_cache, f"{prefix}/index", embedder, names,
                                                                prefix),
                          kind="index", alive=answers, alone=True)
            runtime.shared.append((key, _forget))
            hosted[("index",)], runtime.index = got.prefix, got.handles
        runtime.memory = start_memory(names) if with_memory else None
        runtime.services = start_services(names.services, settings, paths, names) if names.services else {}
        runtime.users = start_user_simulators(names)
    except BaseException:
        release(runtime)
        raise
    return runtime


def check_placement(names: ActorNames, has_data: bool) -> None:
    """`runtime.placement=roles` needs a node offering each role the run uses; otherwise stop at start, saying how."""
    from ..llm.base import ConfigurationError

    if names.placement != "roles":
        return
    needed = ["trials"] + (["data"] if has_data else []) + (["users"] if names.users else []) + \
        (["index"] if names.index_hosted else [])
    offered = ray.cluster_resources()
    missing = [ROLE_RESOURCES[r] for r in needed if offered.get(ROLE_RESOURCES[r], 0) <= 0]
    if missing:
        raise ConfigurationError(
            f"runtime.placement=roles: no node of the cluster offers {missing}; start the nodes that should hold "
            f"them with ray start --address=<head> --resources='{{\"{missing[0]}\": 1000}}' (docs/clusters.md), "
            "or run with runtime.placement=spread")


def placement(runtime: Runtime, wait_s: float = 60.0) -> dict[str, dict[str, str]]:
    """Which node each actor is on, by role (recorded with the run at its start and at its end: an actor whose node
    was lost has been re-created elsewhere). An actor gone for good (its restarts spent) is "lost", one still
    restarting when `wait_s` runs out "restarting": the run reports either way."""
    actors = {"trials": runtime.workers, "users": runtime.users,
              "data": [a for shards in runtime.databases.values() for a in shards]
              + [a for shards in runtime.services.values() for a in shards]
              + ([runtime.memory] if runtime.memory is not None else []),
              "index": [runtime.index] if runtime.index is not None else [],
              "limits": list(runtime.limiters.values())}
    asked = {role: [a.node.remote() for a in handles] for role, handles in actors.items() if handles}
    deadline = time.monotonic() + wait_s
    return {role: {f"{role}/{i}": _node_of(ref, deadline) for i, ref in enumerate(refs)}
            for role, refs in asked.items()}


def _node_of(ref, deadline: float) -> str:
    try:
        return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
    except ray.exceptions.ActorDiedError:
        return "lost"
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError):
        return "restarting"


def node_count(where: dict[str, dict[str, str]]) -> int:
    """How many nodes hold the run's actors ("lost" and "restarting" are not nodes)."""
    return len({n for nodes in where.values() for n in nodes.values()} - {"lost", "restarting"})


def start_workers(runtime: Runtime, settings: TrialSettings, options: RuntimeOptions = RuntimeOptions()) -> \
        TrialSettings:
    """Rate limiters and trial workers; returns the settings with the cluster-wide limiters in."""
    runtime.limiters, settings = start_rate_limiters(settings)
    n = options.trial_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    per_worker = math.ceil(options.max_in_flight / n) + 1
    runtime.workers = start_trial_workers(n, per_worker, runtime.names, settings)
    return settings


def release(runtime: Runtime) -> None:
    """The run is over: it lets go of its hosted sets; the last run out of the value index has it drop its
    manifest (the cached indexes stay)."""
    for key, on_last in runtime.shared:
        shared_release(key, on_last)
    runtime.shared = []


def answers(handles) -> bool:
    """A kept set's actors still answer: False once one is gone for good (its restarts spent); one still restarting
    counts as there (its calls wait for it, as any run's would)."""
    try:
        ray.get([h.node.remote() for h in (handles if isinstance(handles, list) else [handles])], timeout=60)
    except ray.exceptions.RayActorError:
        return False
    except ray.exceptions.GetTimeoutError:
        pass
    return True


def _forget(index) -> None:
    try:
        ray.get(index.forget.remote(), timeout=30)
    except ray.exceptions.RayError as e:
        log.warning("the value index could not drop its manifest: %s", e)


def build_indexes(databases: dict[str, list], index_handle, indexed_columns: dict[str, dict[str, list[str]]],
                  values: dict[tuple[str, str, str], list[str]] | None = None) -> int:
    """Index every listed column (db -> table -> columns) and value list ((name, table, column) -> values, a
    benchmark's own); returns the strings embedded (0 when all were cached)."""
    if index_handle is None:
        return 0
    jobs = [(db_id, t, c) for db_id in databases for t, cols in indexed_columns.get(db_id, {}).items() for c in cols]
    pending = []
    for db_id, table, column in jobs:
        found = ray.get(databases[db_id][0].distinct_values.remote(table, column))
        pending.append((f"{db_id}.{table}.{column}", len(found), found))
    pending += [(".".join(where), len(v), list(v)) for where, v in (values or {}).items()]
    total = sum(n for _, n, _ in pending)
    before = ray.get(index_handle.embedded_values.remote())     # a shared index counts other runs' embedding too
    with tqdm(total=total, desc="value indexes", unit="value", unit_scale=True) as bar:
        for name, n, values in pending:
            bar.set_postfix_str(name)
            remaining = ray.get(index_handle.start_column.remote(*name.split(".", 2), values))
            bar.update(n - remaining)
            while remaining:
                left = ray.get(index_handle.step.remote())
                bar.update(remaining - left)
                remaining = left
    return ray.get(index_handle.embedded_values.remote()) - before


@dataclass
class RunStats:
    infra_retries: int = 0
    worker_failures: int = 0
    budget_stopped: bool = False     # a call would have passed budget_usd: nothing more was submitted


def run_trials(tasks: list, trials: int, workers: list, on_record: Callable[[TrialRecord], None],
               max_in_flight: int = 256, max_attempts: int = 3, skip: set[tuple[str, int]] = frozenset(),
               progress: bool = True, chains: list[list[tuple]] | None = None,
               stopped: Callable[[], bool] | None = None) -> RunStats:
    """Every (task, trial) not in `skip`. `chains` (the benchmark's `schedule`): sequences whose trials run one at a
    time in order, the next submitted once the one before has its final record (on_record has returned).
    `stopped()` true (a suite's run stopped from another thread, where no signal reaches): KeyboardInterrupt, as a
    Ctrl-C would raise, so the run stops the same way."""
    chains = chains if chains is not None else [[(t, i)] for t in tasks for i in range(trials)]
    pending = [deque((t, i) for t, i in chain if (t.key, i) not in skip) for chain in chains]
    pending = [chain for chain in pending if chain]
    queue = deque((*chain.popleft(), 0, c) for c, chain in enumerate(pending))    # each chain's head
    stats = RunStats()
    in_flight: dict = {}
    load = [0] * len(workers)
    # A worker that was lost is restarting: no new trial goes to it until its cool-down ends (doubling while it
    # keeps failing), then one trial at a time until one comes back, so the trials it lost are not spent, attempt
    # after attempt, on an actor that is not back yet.
    down_until = [0.0] * len(workers)
    strikes = [0] * len(workers)
    bar = tqdm(total=len(queue) + sum(map(len, pending)), desc="trials", unit="trial", disable=not progress)
    while queue or in_flight:
        if stopped is not None and stopped():
            bar.close()
            raise KeyboardInterrupt("the suite was stopped")
        while queue and len(in_flight) < max_in_flight:
            now = time.monotonic()
            up = [w for w in range(len(workers)) if down_until[w] <= now and (strikes[w] == 0 or load[w] == 0)]
            if not up:
                break                                      # every worker is restarting: wait for one below
            task, i, attempt, c = queue.popleft()
            w = min(up, key=load.__getitem__)
            ref = workers[w].run.remote(task, i, attempt)
            in_flight[ref] = (task, i, attempt, c, w)
            load[w] += 1
        refs = list(in_flight)
        if not refs:
            time.sleep(0.5)
            continue
        ready, _ = ray.wait(refs, num_returns=1, timeout=1.0)              # wait for one trial (a second at most:
        if not ready:                                                      # signal handlers run between waits),
            continue
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)        # then take every one that is back
        for ref in ready:
            task, i, attempt, c, w = in_flight.pop(ref)
            load[w] -= 1
            try:
                records: list[TrialRecord] = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:  # the worker died:
                stats.worker_failures += 1                                                  # a retry, not the trial
                if down_until[w] <= time.monotonic():               # one strike per outage, not per lost trial
                    strikes[w] += 1
                    down_until[w] = time.monotonic() + min(30.0, 2.0 * 2 ** (strikes[w] - 1))
                records = [TrialRecord(task.key, i, Termination.INFRA_WORKER.value, None,
                                       error=f"trial worker lost: {type(e).__name__}: {e}"[:500], attempt=attempt)]
            except ray.exceptions.RayError as e:
                records = [TrialRecord(task.key, i, Termination.INFRA_HARNESS.value, None,
                                       error=f"{type(e).__name__}: {e}"[:1500], attempt=attempt)]
            else:
                strikes[w] = 0                                     # it answered: back in service
            for record in records:
                on_record(record)
            record = records[-1]
            if record.termination == Termination.INFRA_BUDGET.value:   # the cap is reached: submit nothing more,
                if not stats.budget_stopped:                           # let the trials in flight come back
                    log.warning("budget_usd reached: no more trials are started; %d in flight", len(in_flight))
                stats.budget_stopped = True
                queue.clear()
                pending = [deque() for _ in pending]
                continue
            if record.valid or record.termination == Termination.REJECTED.value:  # done: scored, or incomplete
                bar.update(1)
            elif attempt + 1 < max_attempts and not stats.budget_stopped:
                stats.infra_retries += 1
                queue.append((task, i, attempt + 1, c))
                continue
            else:
                log.warning("trial %s#%d failed %d times on infrastructure; reported incomplete", task.key, i,
                            max_attempts)
                bar.update(1)
            if pending[c]:                                         # the chain's next trial, now that this one ended
                queue.append((*pending[c].popleft(), 0, c))
    bar.close()
    return stats
