"""The Ray actors of a run: database shards, the value index, simulated users, and the trial workers.

- `DatabaseShard`: one database file (a whole-database replica, or one patient partition made by
  `db/sharding.py`); threaded, so concurrent trials' queries overlap (SQLite releases the GIL).
- `ValueIndexActor`: the embedding model and every FAISS index; asks Ray for a GPU when the cluster has one.
- `UserSimulatorActor`: hosts many simulated users' conversations at once, on one event loop.
- `MemoryActor`: a run's shared memory (EHRAgent's long-term memory in sequential mode), filled by the driver.
- `ServiceShard`: one shard of a benchmark's own service (`Benchmark.service`), e.g. AgentEHR's censored patient
  views; trials reach the shard that holds their patient (`PatientRouter`).
- `TrialWorker`: runs many trials at once on one event loop. A trial spends nearly all its time awaiting a model,
  so a worker's concurrency is bounded by the model provider's limits, not by threads or cores.

Actors restart when they die (max_restarts); calls in flight on a dead actor fail, and the runner re-submits the
trial, so a crash costs an attempt, never a trial. The shared actors are named (`ActorNames`) and trial workers look
them up by name: Ray cannot reliably restart an actor whose constructor was given other actors' handles
(ray-project/ray#53727).
"""
from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

import ray

from ..benchmark import Hosts, TrialSettings
from ..db import open_database
from ..db.sharding import split_by_patient
from ..episode import Conversation, replay_task_trial, run_task_trial
from ..llm.usage import UsageMeter
from ..retrieval.value_index import ValueIndex
from ..trial import InfrastructureError, Turn, TrialRecord
from .hosts import ActorHost, PatientRouter, ServiceHost, through_restarts


ROLE_RESOURCES = {"trials": "ehrbench_trials", "data": "ehrbench_data", "users": "ehrbench_users",
                  "index": "ehrbench_index"}
INDEX_GPU_SHARE = 0.25      # of one GPU per value index: four indexes (all-MiniLM-L6-v2 and their FAISS columns) to a GPU


@dataclass(frozen=True)
class ActorNames:
    """The names of one run's shared actors: `<prefix>/db/<db_id>/<replica>`, `<prefix>/index`, `<prefix>/user/<i>`.
    Databases and the index may be hosted sets the run shares with others of its driver (`shared.py`): they are
    named under their set's own prefix (`hosted`)."""
    prefix: str = field(default_factory=lambda: f"ehrbench-{uuid.uuid4().hex[:10]}")
    hosted: dict = field(default_factory=dict)      # ("db", db_id) or ("index",) -> the hosted set's prefix
    replicas: dict = field(default_factory=dict)    # db_id -> replicas
    users: int = 0
    index_hosted: bool = True                       # False: the benchmark embeds nothing
    memory_hosted: bool = False                     # True: the benchmark's agents share a run-wide memory
    services: dict = field(default_factory=dict)    # the benchmark's services: name -> shards
    placement: str = "spread"                       # spread: over every node; roles: on the nodes offering the role

    def place(self, role: str) -> dict:
        """Ray options for an actor of `role` (trials, data, users, index): spread over the nodes, and with
        `runtime.placement=roles` only on nodes that offer the role's custom resource (`ROLE_RESOURCES`, given by
        `ray start --resources`), so a cluster operator decides which nodes run trials and which hold data."""
        out: dict = {"scheduling_strategy": "SPREAD"}
        if self.placement == "roles":      # an actor given resources would also hold a CPU for its lifetime (Ray's
            out.update(resources={ROLE_RESOURCES[role]: 0.001}, num_cpus=0)    # default): ours wait on I/O
        return out

    def database(self, db_id: str, i: int) -> str:
        return f"{self.hosted.get(('db', db_id), self.prefix)}/db/{db_id}/{i}"

    @property
    def index(self) -> str:
        return f"{self.hosted.get(('index',), self.prefix)}/index"

    def user(self, i: int) -> str:
        return f"{self.prefix}/user/{i}"

    @property
    def memory(self) -> str:
        return f"{self.prefix}/memory"

    def service(self, name: str, i: int) -> str:
        return f"{self.prefix}/service/{name}/{i}"


class Placed:
    """Every actor says which node it runs on (the run records where each role landed)."""

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


@ray.remote(max_restarts=3, max_task_retries=0)
class DatabaseShard(Placed):
    """One database file: a whole-database replica, or one patient partition of it.

    Ray does not retry its calls: a query that failed on its merits raises `QueryError` (retrying cannot fix it) and
    is never sent again; a call lost with a dead actor is sent again by the trial's `ActorHost` once the actor has
    restarted (a few waits), then fails the attempt as an infrastructure error, which the runner re-runs.
    """

    def __init__(self, path: str, db_id: str):
        import os

        if not os.path.exists(path):          # on another machine than the one that built it
            raise FileNotFoundError(f"database file {path} is not on node {self.node()}: on a cluster of several "
                                    "machines put data.root on a volume every node mounts (docs/clusters.md, "
                                    "Several nodes)")
        self.db = open_database(path, db_id)

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

    def execute(self, sql, timeout_s=60.0, count_cap=1_000_000, keep=100, sort_key=None):
        return self.db.execute(sql, timeout_s, count_cap, keep, sort_key)

    def read_large(self, sql, timeout_s, max_rows, max_bytes):
        return self.db.read_large(sql, timeout_s, max_rows, max_bytes)


@ray.remote(max_restarts=3, max_task_retries=0)
class ServiceShard(Placed):
    """One shard of a benchmark's service: the object `Benchmark.service` builds, its methods called remotely.
    Threaded (`max_concurrency`), so one trial's slow call does not hold up the others'."""

    def __init__(self, settings: TrialSettings, name: str, shard: int, shards: int, paths: dict[str, str]):
        from .. import benchmarks

        bench = benchmarks.load(settings.benchmark, settings.benchmark_options)
        self.obj = bench.service(name, shard, shards, paths)

    def call(self, method: str, *args):     # one entry point: Ray knows an actor's methods by its class
        return getattr(self.obj, method)(*args)


def start_services(services: dict[str, int], settings: TrialSettings, paths: dict[str, str], names: ActorNames,
                   concurrency: int = 16) -> dict[str, list]:
    """Every shard of every service, spread over the cluster's nodes, named for the trial workers."""
    return {name: [ServiceShard.options(max_concurrency=concurrency, name=names.service(name, i),
                                        **names.place("data")).remote(settings, name, i, n, paths)
                   for i in range(n)] for name, n in services.items()}


@ray.remote(max_restarts=3, max_task_retries=3)
class ValueIndexActor(Placed):
    """Holds the embedding model and every FAISS index; asks Ray for a GPU when the cluster has one. Restarted (its
    node lost), it serves its columns again from the cache, by its manifest (`ValueIndex.manifest`)."""

    def __init__(self, cache_dir: str, embedder: dict | None = None, manifest: str | None = None):
        import os

        import torch

        from ..retrieval.embedder import build_embedder

        # Ray pins actors to one OMP thread; index builds run before any trial, so let them use every core.
        torch.set_num_threads(os.cpu_count() or 1)
        restarted = bool(manifest) and ray.get_runtime_context().was_current_actor_reconstructed
        self.index = ValueIndex(cache_dir, build_embedder(embedder), manifest, restarted=restarted)
        self._build = None
        if hasattr(self.index.embedder, "warm"):   # a local model: loaded while the run starts, not at its first query
            self.index.embedder.warm()

    def start_column(self, db_id, table, column, values) -> int:
        """Begin indexing a column; returns how many values need embedding (0 when the cache has it)."""
        self._build = self.index.start_column(db_id, table, column, values)
        return self._build.remaining

    def step(self) -> int:
        return self._build.step()

    def search(self, db_id, table, column, query, k=100):
        return self.index.search(db_id, table, column, query, k)

    def scored(self, db_id, table, column, query, k=100):
        return self.index.scored(db_id, table, column, query, k)

    def encode(self, texts):
        return self.index.encode(texts)

    def embedded_values(self) -> int:
        return self.index.embedded_values

    def forget(self) -> None:
        self.index.forget()

    def device(self) -> str:
        return str(self.index.embedder.device)

    def embedder_name(self) -> str:
        return self.index.embedder.name


@ray.remote(num_cpus=0, max_restarts=3, max_task_retries=0)
class UserSimulatorActor(Placed):
    """Many simulated users at once: one `Conversation` per trial attempt, keyed by a conversation id."""

    def __init__(self):
        self.conversations: dict[str, Conversation] = {}

    async def open(self, conversation_id: str, task, settings: TrialSettings, seed: int,
                   mistakes: list[str]) -> None:
        self.conversations[conversation_id] = Conversation(task, settings, seed, mistakes)

    async def reply(self, conversation_id: str, history) -> Turn:
        return await self.conversations[conversation_id].reply(history)

    async def answer_tool(self, conversation_id: str, name: str, arguments: dict) -> str:
        return await self.conversations[conversation_id].answer_tool(name, arguments)

    async def close(self, conversation_id: str) -> UsageMeter:
        conversation = self.conversations.pop(conversation_id, None)
        return conversation.meter if conversation else UsageMeter()

    async def open_conversations(self) -> int:
        return len(self.conversations)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class MemoryActor(Placed):
    """A run's shared memory: streams of items, each kept under a key so that storing a trial's items again (a
    retried or resumed trial) replaces them instead of adding a copy.

    Only the driver stores, and only records already on disk. An actor that died restarts empty and *not filled*:
    it refuses reads (the trial that asked is re-run, an infrastructure error) until the driver, told so by its
    next `put`, has stored every checkpointed item again (`fill`), so no trial ever sees a partial memory."""

    def __init__(self):
        self.streams: dict[str, dict[str, dict]] = {}
        self.filled = False

    def fill(self, items: list[dict]) -> None:
        """Everything the run has learned so far (at start, and after a restart)."""
        self.streams = {}
        self.put(items)
        self.filled = True

    def put(self, items: list[dict]) -> bool:
        """Store items; False when the actor has restarted since it was filled (the driver then fills it)."""
        for entry in items:
            self.streams.setdefault(entry["stream"], {})[entry["key"]] = entry["item"]
        return self.filled

    def items(self, stream: str) -> list[dict]:
        """The stream's items in the order they were first stored."""
        if not self.filled:
            raise RuntimeError("the run's memory restarted and is being filled again; this attempt is re-run")
        return list(self.streams.get(stream, {}).values())


def start_memory(names: ActorNames):
    return MemoryActor.options(name=names.memory, **names.place("data")).remote()


class RemoteConversation:
    """A trial's handle on its user in a UserSimulatorActor; a lost actor is the user's infrastructure failure."""

    def __init__(self, handle, conversation_id: str):
        self.handle, self.id = handle, conversation_id

    async def reply(self, history) -> Turn:
        try:
            return await self.handle.reply.remote(self.id, history)
        except (ray.exceptions.RayError, KeyError) as e:
            raise InfrastructureError(f"user simulator actor failed: {type(e).__name__}: {e}"[:500],
                                      source="user") from None

    async def answer_tool(self, name: str, arguments: dict) -> str:
        try:
            return await self.handle.answer_tool.remote(self.id, name, arguments)
        except (ray.exceptions.RayError, KeyError) as e:
            raise InfrastructureError(f"user simulator actor failed: {type(e).__name__}: {e}"[:500],
                                      source="user") from None

    async def close(self) -> UsageMeter:
        try:
            return await self.handle.close.remote(self.id)
        except ray.exceptions.RayError:
            return UsageMeter()   # the actor died with the usage it metered; the trial is re-run anyway


class RemoteUsers:
    """Opens each conversation on the next UserSimulatorActor in turn."""

    def __init__(self, handles: list):
        self.handles = handles
        self._turn = itertools.cycle(handles)

    async def open(self, task, settings: TrialSettings, seed: int, mistakes: list[str]) -> RemoteConversation:
        handle, conversation_id = next(self._turn), uuid.uuid4().hex
        try:
            await through_restarts(lambda: handle.open.remote(conversation_id, task, settings, seed, list(mistakes)))
        except ray.exceptions.RayError as e:
            raise InfrastructureError(f"user simulator actor unavailable: {e}"[:500], source="user") from None
        return RemoteConversation(handle, conversation_id)


@ray.remote(num_cpus=0, max_restarts=5, max_task_retries=0)
class TrialWorker(Placed):
    """Runs up to `max_concurrency` trials at once; every tool, user and model call is awaited."""

    def __init__(self, names: ActorNames, settings: TrialSettings):
        self.hosts = Hosts({db_id: ActorHost([ray.get_actor(names.database(db_id, i)) for i in range(n)])
                            for db_id, n in names.replicas.items()},
                           ActorHost(ray.get_actor(names.index)) if names.index_hosted else None,
                           ActorHost(ray.get_actor(names.memory)) if names.memory_hosted else None,
                           {name: PatientRouter([ServiceHost(ray.get_actor(names.service(name, i))) for i in range(n)])
                            for name, n in names.services.items()})
        self.settings = settings
        self.users = RemoteUsers([ray.get_actor(names.user(i)) for i in range(names.users)]) if names.users else None

    async def run(self, task, trial: int, attempt: int) -> list[TrialRecord]:
        """Every attempt of one trial: validator-rejected re-runs first, the final one last."""
        records = await run_task_trial(task, trial, self.hosts, self.settings, self.users)
        for record in records:
            record.attempt = attempt
        return records

    async def replay(self, task, record: TrialRecord, ask: frozenset, mistakes: tuple[str, ...]
                     ) -> tuple[TrialRecord, str | None, int]:
        """A finished trial scored again from its recorded model calls (`episode.replay_task_trial`)."""
        return await replay_task_trial(task, record, self.hosts, self.settings, self.users, ask, mistakes)


def start_value_index(cache_dir: str, name: str | None = None, embedder: dict | None = None,
                      names: ActorNames | None = None, manifest: str | None = None):
    local = (embedder or {}).get("provider", "local") == "local"     # an API embedder needs no GPU
    # a share of one GPU, not all of it: a suite's children side by side may each hold an index (EHR-ChatQA's and
    # AgentEHR's differ), and the small embedding model and the indexes fit one GPU together
    gpus = INDEX_GPU_SHARE if local and ray.cluster_resources().get("GPU", 0) >= 1 else 0
    place = names.place("index") if names else {}
    # num_cpus=0: an actor given any resource (num_gpus, even 0) would otherwise hold a CPU for its lifetime, and
    # a suite's children side by side would hold every CPU of a small machine with their indexes, leaving none to
    # place the next child's (bench-rate-limits --suite found it hanging so)
    return ValueIndexActor.options(**{"num_cpus": 0, **place}, num_gpus=gpus, max_concurrency=4, name=name).remote(
        cache_dir, embedder, manifest)


def start_database(path: str, db_id: str, replicas: int = 1, concurrency: int = 8,
                   names: ActorNames | None = None) -> list:
    """`replicas` whole-database shards of one file, spread over the cluster's nodes."""
    place = names.place("data") if names else {"scheduling_strategy": "SPREAD"}
    return [DatabaseShard.options(max_concurrency=concurrency, name=names.database(db_id, i) if names else None,
                                  **place).remote(path, db_id) for i in range(replicas)]


def start_patient_shards(path: str, db_id: str, n: int) -> PatientRouter:
    """Split a database into `n` patient partitions (cached) and host each in its own DatabaseShard."""
    files = split_by_patient(path, db_id, n)
    return PatientRouter([ActorHost(DatabaseShard.options(scheduling_strategy="SPREAD").remote(str(f), db_id))
                          for f in files])


def start_user_simulators(names: ActorNames) -> list:
    return [UserSimulatorActor.options(max_concurrency=10_000, name=names.user(i), **names.place("users")).remote()
            for i in range(names.users)]


def start_trial_workers(n: int, per_worker: int, names: ActorNames, settings: TrialSettings) -> list:
    return [TrialWorker.options(max_concurrency=per_worker, **names.place("trials")).remote(names, settings)
            for _ in range(n)]
