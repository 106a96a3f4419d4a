"""Schedules trials as Ray tasks with a bounded number in flight, and re-runs what infrastructure broke.

A trial whose worker died (Ray raises) or that ended in an infrastructure error is submitted again, up to
`max_attempts`; its broken attempts are kept as records (reward None) and never scored. Finished records are handed
to `on_record` as they arrive, so the caller can stream them to MLflow and to disk.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Callable

import ray
from tqdm import tqdm

from ..benchmarks.ehrchatqa.benchmark import INDEXED_COLUMNS, TrialSettings, run_task_trial
from ..benchmarks.ehrchatqa.tasks import Task
from ..benchmarks.ehrchatqa.web_search import web_search_backend
from ..trial import Termination, TrialRecord
from .actors import ActorProxy

log = logging.getLogger(__name__)


@ray.remote(num_cpus=0.25, max_retries=2)
def trial_task(task: Task, trial: int, attempt: int, db_handle, index_handle,
               settings: TrialSettings) -> list[TrialRecord]:
    """Every attempt of one trial: validator-rejected re-runs first, the final one last."""
    records = run_task_trial(task, trial, ActorProxy(db_handle), ActorProxy(index_handle),
                             web_search_backend(settings.web_search), settings)
    for record in records:
        record.attempt = attempt
    return records


def build_indexes(db_handles: dict, index_handle) -> int:
    """Index every pre-indexed column of every database; returns the strings embedded (0 when all were cached)."""
    jobs = [(db_id, t, c) for db_id in db_handles for t, cols in INDEXED_COLUMNS[db_id].items() for c in cols]
    pending = []
    for db_id, table, column in jobs:
        values = ray.get(db_handles[db_id].distinct_values.remote(table, column))
        pending.append((f"{db_id}.{table}.{column}", len(values), values))
    total = sum(n for _, n, _ in pending)
    with tqdm(total=total, desc="value indexes", unit="value", unit_scale=True) as bar:
        for name, n, values in pending:
            bar.set_postfix_str(name)
            remaining = ray.get(index_handle.start_column.remote(*name.split(".", 2), values))
            bar.update(n - remaining)
            while remaining:
                left = ray.get(index_handle.step.remote())
                bar.update(remaining - left)
                remaining = left
    return ray.get(index_handle.embedded_values.remote())


@dataclass
class RunStats:
    submitted: int = 0
    infra_retries: int = 0
    worker_failures: int = 0


def run_trials(tasks: list[Task], trials: int, db_handles: dict, index_handle, settings: TrialSettings,
               on_record: Callable[[TrialRecord], None], max_in_flight: int = 64, max_attempts: int = 3,
               skip: set[tuple[str, int]] = frozenset(), progress: bool = True) -> RunStats:
    queue = deque((t, i, 0) for t in tasks for i in range(trials) if (t.key, i) not in skip)
    stats = RunStats()
    in_flight: dict = {}
    bar = tqdm(total=len(queue), desc="trials", unit="trial", disable=not progress)
    while queue or in_flight:
        while queue and len(in_flight) < max_in_flight:
            task, i, attempt = queue.popleft()
            ref = trial_task.remote(task, i, attempt, db_handles[task.db_id], index_handle, settings)
            in_flight[ref] = (task, i, attempt)
            stats.submitted += 1
        done, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in done:
            task, i, attempt = in_flight.pop(ref)
            try:
                records: list[TrialRecord] = ray.get(ref)
            except ray.exceptions.RayError as e:  # the worker or an actor died: costs a retry, not the trial
                stats.worker_failures += 1
                records = [TrialRecord(task.key, i, Termination.INFRA_TOOL.value, None, error=f"ray: {e}"[:500],
                                       attempt=attempt)]
            for record in records:
                on_record(record)
            record = records[-1]
            if record.valid or record.termination == Termination.REJECTED.value:  # done: scored, or incomplete
                bar.update(1)
            elif attempt + 1 < max_attempts:
                stats.infra_retries += 1
                queue.append((task, i, attempt + 1))
            else:
                log.warning("trial %s#%d failed %d times on infrastructure; reported incomplete", task.key, i,
                            max_attempts)
                bar.update(1)
    bar.close()
    return stats
