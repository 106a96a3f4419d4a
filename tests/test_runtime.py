"""Runtime parts on their own: patient shards, cluster-wide rate limits, user simulator actors, trial workers."""
import asyncio
import os
import time

import pytest
import ray

from ehrbench.benchmarks.ehrchatqa.tasks import load_task_dir
from ehrbench.db.database import Database
from ehrbench.db.sharding import shard_of, split_by_patient
from ehrbench.runtime.hosts import LocalHost, PatientRouter

from .conftest import TASK_DIR, ehrchatqa_settings

PER_PATIENT = {   # a per-patient question on each database, and a table that belongs to no patient
    "mimic_iv_star": ("SELECT COUNT(*), SUM(resultvalue) FROM labresults WHERE patientid = {p}",
                      "SELECT patientid FROM demographics", "diagnosiscodes"),
    "eicu_star": ("SELECT COUNT(*), SUM(lab.lab_result) FROM lab JOIN icupatient ON lab.unit_id = icupatient.unit_id "
                  "WHERE icupatient.patient_id = '{p}'", "SELECT DISTINCT patient_id FROM icupatient", "hospital"),
}


@pytest.mark.parametrize("db_id", sorted(PER_PATIENT))
def test_patient_shards_hold_exactly_each_patients_rows(db_paths, tmp_path, db_id):
    question, patients_sql, shared_table = PER_PATIENT[db_id]
    files = split_by_patient(db_paths[db_id], db_id, 3, tmp_path)
    whole = Database(db_paths[db_id], db_id)
    shards = [Database(f, db_id) for f in files]
    router = PatientRouter([LocalHost(s) for s in shards])
    patients = [r[0] for r in whole.execute(patients_sql, keep=10_000).rows]
    on_shard = [{r[0] for r in s.execute(patients_sql, keep=10_000).rows} for s in shards]
    owners = [sum(1 for held in on_shard if p in held) for p in patients]
    assert owners == [1] * len(patients)                       # every patient on exactly one shard
    assert {shard_of(p, 3) for p in patients} == {0, 1, 2}      # and all three shards used

    async def same_answers():
        for p in patients[:25]:
            routed = await router.for_patient(p).execute(question.format(p=p))
            assert routed.rows == whole.execute(question.format(p=p)).rows, p
    asyncio.run(same_answers())
    count = f'SELECT COUNT(*) FROM "{shared_table}"'
    assert all(s.execute(count).rows == whole.execute(count).rows for s in shards)   # dictionaries copied whole
    stamps = [f.stat().st_mtime_ns for f in files]
    assert [f.stat().st_mtime_ns for f in split_by_patient(db_paths[db_id], db_id, 3, tmp_path)] == stamps


def test_patient_shard_actors_answer_like_the_whole_database(ray_cluster, db_paths, tmp_path):
    from ehrbench.runtime.actors import start_patient_shards

    path = str(db_paths["mimic_iv_star"])
    router = start_patient_shards(path, "mimic_iv_star", 2)
    whole = Database(path)
    question = PER_PATIENT["mimic_iv_star"][0]
    patients = [r[0] for r in whole.execute("SELECT patientid FROM demographics LIMIT 10").rows]

    async def answers():
        return [(await router.for_patient(p).execute(question.format(p=p))).rows for p in patients]
    assert asyncio.run(answers()) == [whole.execute(question.format(p=p)).rows for p in patients]


def test_a_query_error_crosses_the_actor_boundary_in_the_database_s_own_words(ray_cluster, db_paths):
    """A bad query sent to a DatabaseShard actor raises the QueryError the database gave, as a local database
    would: no Ray traceback, actor id, colour codes or this machine's file paths reach a tool (and so a model)."""
    from ehrbench.db.limits import QueryError
    from ehrbench.runtime.actors import start_patient_shards

    path = str(db_paths["mimic_iv_star"])
    router = start_patient_shards(path, "mimic_iv_star", 2)
    bad = "SELECT no_such_column FROM demographics"
    with pytest.raises(QueryError) as local:
        Database(path, "mimic_iv_star").execute(bad)

    async def remote():
        with pytest.raises(QueryError) as e:
            await router.for_patient(1).execute(bad)
        return str(e.value)
    message = asyncio.run(remote())
    assert message == str(local.value) and "no such column" in message
    assert not any(part in message for part in ("ray::", "actor_id", "\x1b[", "Traceback", ".py\""))


def test_cluster_rate_limit_holds_across_worker_processes(ray_cluster):
    """Two processes hammer one model limited to 3 requests in flight and 8 per 2-second window."""
    from ehrbench.runtime.rate_limits import ClusterRateLimiter, RateLimiterActor

    name = f"test-limit-{time.time_ns()}"
    limiter = RateLimiterActor.options(name=name, max_concurrency=1000).remote(3, 8, lease_s=30, window_s=2.0)

    @ray.remote(num_cpus=0)
    def client(n: int) -> list[float]:
        async def one(lim):
            async with lim.slot():
                started = time.time()
                await asyncio.sleep(0.1)
                return started

        async def many():
            lim = ClusterRateLimiter(name)
            return await asyncio.gather(*(one(lim) for _ in range(n)))
        return asyncio.run(many())

    starts = sorted(s for batch in ray.get([client.remote(6), client.remote(6)]) for s in batch)
    stats = ray.get(limiter.stats.remote())
    assert stats["granted"] == 12 and stats["peak_in_flight"] == 3 and stats["in_flight"] == 0
    assert starts[8] - starts[0] >= 1.9          # the 9th request waited for the window to roll
    assert sum(1 for s in starts if s - starts[0] < 1.9) == 8


def test_expired_lease_of_a_dead_client_is_given_back(ray_cluster):
    from ehrbench.runtime.rate_limits import RateLimiterActor

    limiter = RateLimiterActor.options(max_concurrency=100).remote(1, None, lease_s=0.5)
    ray.get(limiter.acquire.remote(), timeout=10)          # taken and never released (its holder "died")
    t = time.monotonic()
    ray.get(limiter.acquire.remote(), timeout=10)          # a lease that never expired would time out here
    assert 0.4 <= time.monotonic() - t < 5
    assert ray.get(limiter.stats.remote())["expired_leases"] == 1


def test_a_restarted_limiter_answers_the_request_waiting_on_it_and_a_late_old_lease_releases_nothing(ray_cluster):
    """Should a limiter die, Ray restarts it: the request waiting on the dead one is retried on the new one (which holds
    no leases, so it is granted), and a lease of the old one returned late releases nothing of the new one's."""
    from ehrbench.runtime.rate_limits import RateLimiterActor

    limiter = RateLimiterActor.options(max_concurrency=100).remote(1, None, lease_s=600)
    old = ray.get(limiter.acquire.remote(), timeout=10)
    waiting = limiter.acquire.remote()                     # the budget of 1 is spent: this one waits
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(waiting, timeout=1)
    ray.kill(limiter, no_restart=False)                    # it dies with the request in flight; Ray restarts it
    new = ray.get(waiting, timeout=60)                     # retried on the new one, which has no leases
    assert old.split("-")[0] != new.split("-")[0]         # ids carry the incarnation
    ray.get(limiter.release.remote(old))                   # the old holder returns its lease late
    assert ray.get(limiter.stats.remote())["in_flight"] == 1           # the new lease is still held
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(limiter.acquire.remote(), timeout=2)                   # so the budget of 1 is still spent
    ray.kill(limiter)


def test_a_database_shard_on_a_node_without_its_file_names_the_file_the_node_and_the_fix(ray_cluster, tmp_path,
                                                                                         monkeypatch):
    from ehrbench.runtime.actors import DatabaseShard

    shard = DatabaseShard.options(max_restarts=0).remote(str(tmp_path / "not-here.sqlite"), "mimic_iv_star")
    with pytest.raises(ray.exceptions.RayActorError) as lost:
        ray.get(shard.table_names.remote(), timeout=60)
    assert "not-here.sqlite is not on node" in str(lost.value)
    assert "put data.root on a volume every node mounts" in str(lost.value)
    from ehrbench.runtime import hosts
    from ehrbench.trial import InfrastructureError

    monkeypatch.setattr(hosts, "LOST_CALL_WAITS_S", (0.1, None))
    with pytest.raises(InfrastructureError, match="not on node .*put data.root on a volume"):   # what the trial's
        asyncio.run(hosts.ActorHost([shard]).table_names())                                  # record says


@ray.remote(num_cpus=0, max_restarts=2, max_task_retries=0)
class SlowToRestart:
    """An actor whose restart takes longer than a lost call's retries (as one waiting for a node to join)."""

    def __init__(self, restart_s: float):
        if ray.get_runtime_context().was_current_actor_reconstructed:
            time.sleep(restart_s)

    def table_names(self) -> list[str]:
        return ["admissions"]

    def crash(self) -> None:
        os._exit(1)                                      # as its node lost: Ray restarts it


def test_a_call_to_an_actor_that_is_restarting_waits_for_it_instead_of_failing_the_attempt(ray_cluster):
    """Ray answers a call to a restarting actor at once (ActorUnavailableError); a trial's call waits the restart
    out (hosts.RESTART_PATIENCE_S), so a node that takes a while to come back costs time, not every attempt."""
    from ehrbench.runtime.hosts import LOST_CALL_WAITS_S, ActorHost, through_restarts

    restart_s = 1.5 * sum(w for w in LOST_CALL_WAITS_S if w)        # longer than a lost call's retries
    actor = SlowToRestart.remote(restart_s)
    assert ray.get(actor.table_names.remote(), timeout=60) == ["admissions"]
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.crash.remote(), timeout=60)
    started = time.monotonic()                                             # it is restarting now

    async def both():                                                      # each waits for the same restart
        return await asyncio.gather(ActorHost([actor]).table_names(),                        # a tool's call
                                    through_restarts(lambda: actor.table_names.remote()))    # a user's conversation
    assert asyncio.run(both()) == [["admissions"], ["admissions"]]
    assert time.monotonic() - started >= restart_s * 0.8                   # they did wait for the restart
    ray.kill(actor)


def test_placement_names_each_actors_node_and_reports_one_gone_for_good_as_lost(ray_cluster, db_paths):
    from ehrbench.runtime.actors import ActorNames, start_database
    from ehrbench.runtime.runner import Runtime, placement

    shards = start_database(str(db_paths["mimic_iv_star"]), "mimic_iv_star", replicas=2)
    where = placement(Runtime(ActorNames(), {"mimic_iv_star": shards}, None))
    node = ray.get_runtime_context().get_node_id()
    assert where == {"data": {"data/0": node, "data/1": node}}             # the one node of the session cluster
    ray.kill(shards[1])                                                    # gone, no restart
    deadline = time.monotonic() + 60                                       # the kill is asynchronous: a call
    while time.monotonic() < deadline:                                     # made at once may still be answered
        try:
            ray.get(shards[1].node.remote(), timeout=60)
        except ray.exceptions.ActorDiedError:
            break
        time.sleep(0.2)
    assert placement(Runtime(ActorNames(), {"mimic_iv_star": shards}, None))["data"] == {"data/0": node,
                                                                                           "data/1": "lost"}
    ray.kill(shards[0])


def test_trials_through_workers_and_user_simulator_actors(ray_cluster, shared_world):
    """Two trial workers and two user simulator actors; every trial scores, each actor served many users."""
    from ehrbench.benchmarks.ehrchatqa.benchmark import INDEXED_COLUMNS
    from ehrbench.config import RuntimeOptions
    from ehrbench.runtime.runner import build_indexes, release, run_trials, start_runtime, start_workers
    from ehrbench.schemas import WorldSpec, build_database

    # the main job's `data.dictionary=used` world (a small index), shared with the session's main-job tests
    path = build_database("mimic_iv_star", WorldSpec(seed=0, dictionary="used"), shared_world / "gen")
    tasks = load_task_dir(TASK_DIR, ["mimic_iv_star"], ["incre", "adapt"])[::10]
    options = RuntimeOptions(max_in_flight=32, trial_workers=2, user_simulators=2, db_replicas=2)
    runtime = start_runtime({"mimic_iv_star": str(path)}, str(shared_world / "vi"), options)
    build_indexes(runtime.databases, runtime.index, INDEXED_COLUMNS)
    start_workers(runtime, ehrchatqa_settings(user_latency_s=0.05), options)
    served = []
    records = []

    def on_record(r):
        records.append(r)
        if len(records) == 10:
            served.extend(ray.get([u.open_conversations.remote() for u in runtime.users]))
    stats = run_trials(tasks, 2, runtime.workers, on_record, max_in_flight=32, progress=False)
    assert len(records) == 2 * len(tasks) and all(r.reward == 1.0 for r in records)
    assert stats.worker_failures == 0 and len(runtime.workers) == 2 and len(runtime.databases["mimic_iv_star"]) == 2
    assert sum(served) > 2                       # conversations open at once, spread over both actors
    assert all(r.usage["user"]["calls"] == r.user_turns for r in records)      # user usage came back to the trial
    assert ray.get([u.open_conversations.remote() for u in runtime.users]) == [0, 0]   # all closed
    release(runtime)


def test_the_recipe_cluster_has_a_token_of_its_own_and_refuses_clients_without_it(ray_cluster, tmp_path):
    """`jobs/start-ray-head.sh` made a private token and started the head with authentication on."""
    import os
    import stat
    import subprocess
    import sys
    from pathlib import Path

    token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
    assert len(token.read_text().strip()) == 64 and stat.S_IMODE(token.stat().st_mode) == 0o600
    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 64)
    probe = f"import ray; ray.init(address='{ray_cluster.address}'); print('connected')"
    refused, right = [subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=env)                 # both at once
                      for env in ({**os.environ, "RAY_AUTH_TOKEN_PATH": str(wrong)}, None)]
    out, err = refused.communicate(timeout=180)
    assert refused.returncode != 0 and "connected" not in out
    assert "auth" in (out + err).lower()
    out, _ = right.communicate(timeout=180)
    assert right.returncode == 0 and "connected" in out


def test_chained_trials_run_one_at_a_time_in_order_and_retries_hold_the_chain(ray_cluster):
    """A benchmark's `schedule`: each chain's trials never overlap and start in the chain's order, a broken attempt is
    re-run before the chain goes on, and separate chains still run side by side."""
    import time as clock
    from types import SimpleNamespace

    import ray

    from ehrbench.runtime.runner import run_trials
    from ehrbench.trial import Termination, TrialRecord

    @ray.remote(max_concurrency=16)
    class SlowWorker:
        async def run(self, task, trial, attempt):
            import asyncio
            start = clock.time()
            await asyncio.sleep(0.05)
            broken = task.key == "b2" and attempt == 0             # its first attempt breaks on infrastructure
            term = Termination.INFRA_TOOL if broken else Termination.ANSWERED
            return [TrialRecord(task.key, trial, term.value, None if broken else 1.0, started_at=start,
                                duration_s=clock.time() - start, attempt=attempt)]

    tasks = {k: SimpleNamespace(key=k) for k in ("a1", "a2", "a3", "b1", "b2", "b3")}
    chains = [[(tasks["a3"], 0), (tasks["a1"], 0), (tasks["a2"], 0)], [(tasks["b1"], 0), (tasks["b2"], 0), (tasks["b3"], 0)]]
    records: list = []
    stats = run_trials(list(tasks.values()), 1, [SlowWorker.remote()], records.append, progress=False, chains=chains,
                       skip={("b3", 0)})
    assert stats.infra_retries == 1 and not any(r.task_key == "b3" for r in records)
    for chain, expected in ((0, ["a3", "a1", "a2"]), (1, ["b1", "b2", "b2"])):
        mine = sorted((r for r in records if r.task_key[0] == "ab"[chain]), key=lambda r: r.started_at)
        assert [r.task_key for r in mine] == expected
        assert all(b.started_at >= a.started_at + a.duration_s for a, b in zip(mine, mine[1:]))   # never overlapping
    a3, b1 = (next(r for r in records if r.task_key == k) for k in ("a3", "b1"))
    assert abs(a3.started_at - b1.started_at) < 0.05 * 0.9                # the two chains started side by side


def test_the_memory_actor_keeps_one_item_per_key_in_first_stored_order(ray_cluster):
    import ray

    from ehrbench.runtime.actors import MemoryActor

    memory = MemoryActor.remote()
    ray.get(memory.fill.remote([]))
    ray.get(memory.put.remote([{"stream": "s", "key": "q2", "item": {"v": 1}}, {"stream": "s", "key": "q1", "item": {"v": 2}},
                               {"stream": "t", "key": "q1", "item": {"v": 3}}]))
    ray.get(memory.put.remote([{"stream": "s", "key": "q2", "item": {"v": 4}}]))      # a retried trial stores again
    assert ray.get(memory.items.remote("s")) == [{"v": 4}, {"v": 2}]
    assert ray.get(memory.items.remote("t")) == [{"v": 3}] and ray.get(memory.items.remote("u")) == []
    ray.kill(memory)


def test_the_memory_is_filled_from_scored_records_and_refilled_after_a_restart(ray_cluster):
    """`fill_memory` / `remember` (the driver): only final, scored records teach; a memory actor that died restarts
    refusing reads until the driver, told by its next put, has filled it again from every record on disk."""
    import ray

    from ehrbench.__main__ import fill_memory, remember
    from ehrbench.runtime.actors import MemoryActor
    from ehrbench.trial import Termination, TrialRecord

    item = lambda key: [{"stream": "s", "key": key, "item": {"q": key}}]  # noqa: E731
    records = [TrialRecord("ok", 0, Termination.ANSWERED.value, 1.0, memory=item("ok")),
               TrialRecord("broken", 0, Termination.INFRA_TOOL.value, None, memory=item("broken")),
               TrialRecord("rerun", 0, Termination.ANSWERED.value, 1.0, memory=item("rerun"), final=False)]
    memory = MemoryActor.remote()
    with pytest.raises(ray.exceptions.RayTaskError, match="being filled again"):
        ray.get(memory.items.remote("s"))                               # never read before it is filled
    fill_memory(memory, records)                                        # a resumed run's start
    fill_memory(None, records)                                          # a benchmark without memory: nothing to do
    assert ray.get(memory.items.remote("s")) == [{"q": "ok"}]
    later = TrialRecord("later", 0, Termination.ANSWERED.value, 1.0, memory=item("later"))
    records.append(later)
    ray.kill(memory, no_restart=False)                                  # it dies; Ray restarts it, empty
    for _ in range(100):
        try:
            ray.get(memory.items.remote("s"))
        except ray.exceptions.RayActorError:
            time.sleep(0.1)                                             # still restarting
            continue
        except ray.exceptions.RayTaskError:
            break                                                       # back, and refusing reads
    remember(memory, [later], records)                                  # its put says "restarted": filled again
    assert ray.get(memory.items.remote("s")) == [{"q": "ok"}, {"q": "later"}]
    ray.kill(memory)


def test_a_run_starts_no_more_service_shards_than_it_has_tasks():
    """A trial reaches one shard of a service (routed by its patient): a one-task run starts one shard, not four."""
    from ehrbench.__main__ import service_shards
    from ehrbench.benchmark import Resources

    resources = Resources(services={"patients": 4, "records": 2})
    assert service_shards(resources, 1) == {"patients": 1, "records": 1}
    assert service_shards(resources, 3) == {"patients": 3, "records": 2}
    assert service_shards(resources, 100) == service_shards(resources, None) == {"patients": 4, "records": 2}
    assert service_shards(resources, 0) == {"patients": 1, "records": 1}


def test_runs_of_one_driver_share_the_hosted_data_over_the_same_files_and_the_last_out_lets_it_go(
        ray_cluster, db_paths, tmp_path):
    """Two runs over the same two files use the same database and index actors (one embedding model, one manifest);
    a run over one of them shares that database alone; the index outlives the first run and goes, with its
    manifest, after the last. Inside `kept()` (a suite) a set no run uses stays up until the block ends."""
    from ehrbench.config import RuntimeOptions
    from ehrbench.runtime.runner import build_indexes, release, start_runtime
    from ray.util.state import get_actor

    from ehrbench.runtime.shared import hosted_now, kept

    paths = {db: str(p) for db, p in db_paths.items()}
    options = RuntimeOptions(db_replicas=1, user_simulators=0)
    columns = {"mimic_iv_star": {"hospitaladmissions": ["admissiontype"]}}
    manifests = lambda: set((tmp_path / "vi" / "manifests").glob("*.json"))  # noqa: E731
    ours = lambda: {k: n for k, n in hosted_now().items() if k not in before}  # noqa: E731
    before = hosted_now()

    def gone(actor_id: str) -> None:
        deadline = time.monotonic() + 60
        while get_actor(actor_id).state != "DEAD":                          # Ray ends the actors no one holds
            assert time.monotonic() < deadline, f"actor {actor_id} outlived the last run that used it"
            time.sleep(0.5)

    first = start_runtime(paths, str(tmp_path / "vi"), options)
    assert build_indexes(first.databases, first.index, columns) > 0           # embedded once
    second = start_runtime(paths, str(tmp_path / "vi"), options)
    assert build_indexes(second.databases, second.index, columns) == 0       # the first run's index, already built
    alone = start_runtime({"eicu_star": paths["eicu_star"]}, str(tmp_path / "vi"), options, with_index=False)
    assert second.index._actor_id == first.index._actor_id
    assert second.names.index == first.names.index != f"{first.names.prefix}/index"
    assert [a._actor_id for a in second.databases["mimic_iv_star"]] == \
        [a._actor_id for a in first.databases["mimic_iv_star"]]
    assert alone.databases["eicu_star"][0]._actor_id == first.databases["eicu_star"][0]._actor_id
    assert ray.get_actor(second.names.database("eicu_star", 0))._actor_id == alone.databases["eicu_star"][0]._actor_id
    assert len(manifests()) == 1 and sorted(ours().values()) == [2, 2, 3]    # eicu by three runs, the rest by two
    index = first.index._actor_id.hex()
    release(first)
    assert ray.get(second.index.search.remote("mimic_iv_star", "hospitaladmissions", "admissiontype", "urgent", 1))
    assert len(manifests()) == 1                                             # the second run still needs it
    release(second)
    release(alone)
    assert manifests() == set() and ours() == {}
    del first, second, alone
    gone(index)

    eicu = {"eicu_star": paths["eicu_star"]}
    with kept():
        one = start_runtime(eicu, str(tmp_path / "vi"), options)
        shard, index = one.databases["eicu_star"][0]._actor_id, one.index._actor_id.hex()
        shard_name = one.names.database("eicu_star", 0)
        release(one)
        del one                                                             # only the registry holds them now
        assert sorted(ours().values()) == [0, 0]                            # up, used by no run, kept
        two = start_runtime(eicu, str(tmp_path / "vi"), options, with_index=False)
        assert two.databases["eicu_star"][0]._actor_id == shard             # the next run finds the same actor
        release(two)
        del two
        # another index while the kept one is idle: the idle one goes first (it must not hold a GPU from the next)
        three = start_runtime({"mimic_iv_star": paths["mimic_iv_star"]}, str(tmp_path / "vi"), options)
        gone(index)
        assert sorted(ours().values()) == [0, 1, 1]                         # eicu kept; mimic and its index in use
        release(three)
        # a kept database whose actor died for good is replaced, never handed to the next run
        ray.kill(ray.get_actor(shard_name), no_restart=True)
        gone(shard.hex())
        four = start_runtime(eicu, str(tmp_path / "vi"), options, with_index=False)
        assert four.databases["eicu_star"][0]._actor_id != shard
        assert ray.get(four.databases["eicu_star"][0].table_names.remote())
        release(four)
    assert ours() == {} and manifests() == set()                            # the suite's end lets every set go
