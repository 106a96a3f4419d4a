"""Ray actors that hold what trials share: database replicas and the value index.

A trial is a Ray task; it reaches the actors through `ActorProxy`, which gives a handle the same methods as the
local object, so `ToolSuite` and the scorer run unchanged in-process (tests) and on a cluster.
"""
from __future__ import annotations

import ray

from ..db.database import Database
from ..retrieval.value_index import ValueIndex


class ActorProxy:
    """Call `proxy.method(*args)` to run `handle.method.remote(*args)` and wait for its result."""

    def __init__(self, handle):
        self._handle = handle

    def __getattr__(self, name):
        method = getattr(self._handle, name)
        return lambda *args, **kwargs: ray.get(method.remote(*args, **kwargs))


@ray.remote(max_restarts=3, max_task_retries=3)
class DatabaseActor:
    """One replica of one database; threaded so concurrent trials' queries overlap (SQLite releases the GIL)."""

    def __init__(self, path: str, db_id: str):
        self.db = Database(path, db_id)

    def table_names(self):
        return self.db.table_names()

    def column_names(self, table):
        return self.db.column_names(table)

    def table_info(self, table, sample_rows=3):
        return self.db.table_info(table, sample_rows)

    def substring_values(self, table, column, value, k=100):
        return self.db.substring_values(table, column, value, k)

    def distinct_values(self, table, column):
        return self.db.distinct_values(table, column)

    def execute(self, sql, timeout_s=60.0, count_cap=1_000_000, keep=100):
        return self.db.execute(sql, timeout_s, count_cap, keep)


@ray.remote(max_restarts=3, max_task_retries=3)
class ValueIndexActor:
    """Holds the embedding model and every FAISS index; asks Ray for a GPU when the cluster has one."""

    def __init__(self, cache_dir: str):
        import os

        import torch

        # Ray pins actors to one OMP thread; index builds run before any trial, so let them use every core.
        torch.set_num_threads(os.cpu_count() or 1)
        self.index = ValueIndex(cache_dir)
        self._build = None

    def start_column(self, db_id, table, column, values) -> int:
        """Begin indexing a column; returns how many values need embedding (0 when the cache has it)."""
        self._build = self.index.start_column(db_id, table, column, values)
        return self._build.remaining

    def step(self) -> int:
        return self._build.step()

    def search(self, db_id, table, column, query, k=100):
        return self.index.search(db_id, table, column, query, k)

    def embedded_values(self) -> int:
        return self.index.embedded_values


def start_value_index(cache_dir: str):
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    return ValueIndexActor.options(num_gpus=gpus, max_concurrency=4).remote(cache_dir)


def start_database(path: str, db_id: str, concurrency: int = 8):
    return DatabaseActor.options(max_concurrency=concurrency).remote(path, db_id)
