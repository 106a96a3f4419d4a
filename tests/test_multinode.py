"""Distributed for real: four Ray nodes on this machine (a head that runs no trials, three worker nodes started with
`ray start --address`), actors placed by role, the same results as on one node; worker nodes lost mid-run (raylet
and workers killed by process id) while others join: every trial finished exactly once, retries counted, the lost
actors re-created elsewhere from cached files; a model's rate-limit leases held on a lost node come back. The
head-side faults are tested here, once, on the four nodes (one node is the same path with fewer nodes): the driver
SIGKILLed, then the MLflow server gone mid-run, each followed by a rerun."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from .conftest import ROOT, mlflow_store
from .multinode import MultiNodeCluster, cluster_env
from .test_faults import _records, _wait_for_records   # the checkpoint read as the run's loader reads it

ROLES = {"w1": {"ehrbench_trials": 1000},
         "w2": {"ehrbench_trials": 1000, "ehrbench_data": 1000},
         "w3": {"ehrbench_data": 1000, "ehrbench_users": 1000, "ehrbench_index": 1000}}


@pytest.fixture(scope="module")
def multinode(tmp_path_factory):
    """One multi-node cluster for the module; stopped by its own process groups, never `ray stop`."""
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="ehrb-mn-"))      # short: Ray's socket paths stay under 107 bytes
    cluster = MultiNodeCluster(scratch, cluster_env(scratch))
    try:
        cluster.start_head()
        cluster.add_nodes(ROLES)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)      # its logs and Ray's session folder


@pytest.fixture(scope="module")
def shared(shared_world):
    """Databases and the value index, built once for the session (every node reads the same folders)."""
    return shared_world


def _job(tmp_path: Path, shared: Path, address: str, *extra: str, traces: bool = False) -> list[str]:
    return [sys.executable, "-m", "ehrbench", "trials=2", "limit_tasks=3", "data.dictionary=used",
            f"data.root={shared / 'gen'}", f"data.index_cache={shared / 'vi'}",
            f"tracking.root={mlflow_store(tmp_path / 'mlruns')}",
            f"runtime.address={address}", "runtime.user_simulators=1", "runtime.db_replicas=2",
            f"tracking.log_traces={str(traces).lower()}", f"hydra.run.dir={tmp_path / 'out'}", *extra]


def _run(cmd: list[str], env=None, timeout: float = 900) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _run_info(tmp_path: Path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    return run


def _start_mlflow_server(tmp_path: Path, port: int) -> subprocess.Popen:
    import urllib.request

    mlflow_store(tmp_path, "server.db")
    server = subprocess.Popen([str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
                               "--port", str(port), "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                               "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server
        except OSError:
            time.sleep(0.25)
    raise AssertionError("mlflow server did not start")


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)   # the server and its workers (its own session)
    server.wait(timeout=30)


def test_actors_land_on_their_roles_nodes_and_results_equal_the_single_node_run(multinode, ray_cluster, shared,
                                                                               tmp_path):
    multi, single = tmp_path / "multi", tmp_path / "single"
    runs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            for cmd, env in ((_job(multi, shared, multinode.address, "runtime.placement=roles"), multinode.env),
                             (_job(single, shared, ray_cluster.address), None))]    # two clusters: side by side
    for proc in runs:
        err = proc.communicate(timeout=900)[1]
        assert proc.returncode == 0, err[-3000:]
    run = _run_info(multi)
    placed = json.loads(Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="placement.json",
                                                                 dst_path=str(tmp_path / "dl"))).read_text())
    offers = multinode.node_ids()
    head = next(n for n, roles in offers.items() if roles == ["ehrbench_head"])
    for role, resource in (("trials", "ehrbench_trials"), ("data", "ehrbench_data"), ("users", "ehrbench_users"),
                           ("index", "ehrbench_index")):
        nodes = set(placed[role].values())
        assert nodes and all(resource in offers[n] for n in nodes), (role, placed[role])
        assert head not in nodes                                           # the head runs none of them
    assert len(set(placed["trials"].values())) == 2                        # trial workers spread over w1 and w2
    assert run.data.tags["ehrbench.nodes"] == "3"
    assert run.data.metrics["all_flows/SR-2"] == 100.0
    rewards = lambda path: sorted((r["task_key"], r["trial"], r["reward"], r["termination"])  # noqa: E731
                                  for r in _records(path) if r["termination"] == "user_stop")
    assert rewards(multi) == rewards(single) and len(rewards(multi)) == 2 * 3 * 4


def _similarity_answers(records: list[dict], since: float) -> list[str]:
    """What value_similarity_search answered in attempts started after `since`."""
    out = []
    for r in (r for r in records if r["started_at"] > since):
        calls = {m["tool_call"]["id"]: m["tool_call"]["name"] for m in r["messages"] if m.get("tool_call")}
        out += [m["content"] for m in r["messages"]
                if m["role"] == "tool" and calls.get(m["tool_call_id"]) == "value_similarity_search"]
    return out


def test_nodes_lost_mid_run_cost_retries_never_a_trial_and_their_actors_come_back_elsewhere(multinode, shared,
                                                                                           tmp_path):
    """The node holding trial workers and a database replica, then the node holding the user simulator, the value
    index and the other replica, each lost mid-run (SIGKILL to its raylet and workers) while a node with its roles
    joins: every trial finishes exactly once, the broken attempts are counted and run again, and every actor of a
    lost node is re-created on a live node offering its role, from the cached files (nothing rebuilt, re-embedded)."""
    cmd = _job(tmp_path, shared, multinode.address, "runtime.placement=roles", "model.latency_s=0.3",
               "user.latency_s=0.3", "limit_tasks=6", "runtime.max_in_flight=8", "runtime.trial_workers=4",
               "runtime.max_attempts=5")             # two losses: a trial may be broken by each, then run again
    manifests = lambda: set((shared / "vi" / "manifests").glob("*.json"))  # noqa: E731
    others = manifests()                            # other runs' (a killed driver's stays: tiny, never read again)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=multinode.env)
    _wait_for_records(tmp_path, 6, proc, timeout=600)
    assert proc.poll() is None, "the run ended before a node could be lost"
    assert manifests() - others, "the run wrote no manifest for a restarted index to reload from"
    cached = lambda: {p.name: p.stat().st_mtime_ns for folder in (shared / "gen", shared / "vi")  # noqa: E731
                      for p in folder.rglob("*") if p.is_file() and "manifests" not in p.parts}
    files = cached()                               # the world's databases and the value indexes, as built
    [placed] = list((tmp_path / "mlruns").rglob("placement.json"))
    start = json.loads(placed.read_text())
    named = lambda roles: next(n for n in multinode.nodes if multinode.offers[n] == roles)  # noqa: E731
    first, second = named(ROLES["w2"]), named(ROLES["w3"])
    lost = {multinode.node_id(first), multinode.node_id(second)}
    assert multinode.node_id(first) in start["trials"].values(), "no trial worker on the node to lose"
    assert set(start["index"].values()) == {multinode.node_id(second)}

    multinode.replace_node(first)                   # trial workers and a database replica go with it
    _wait_for_records(tmp_path, len(_records(tmp_path)) + 4, proc, timeout=600)      # the run goes on
    finished = sum(1 for r in _records(tmp_path) if r["termination"] == "user_stop")
    assert proc.poll() is None and finished <= 2 * 6 * 4 - 8, "too few trials left to lose the second node"
    index_lost_at = time.time()
    second_new = multinode.replace_node(second)     # the user simulator, the value index, the other replica
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]

    records = _records(tmp_path)
    finished = [(r["task_key"], r["trial"]) for r in records if r["termination"] == "user_stop"]
    assert len(finished) == len(set(finished)) == 2 * 6 * 4                # every trial exactly once, none lost
    infra = [r for r in records if r["termination"].startswith("infra_error")]
    assert infra, "the lost nodes took no trial with them"
    run = _run_info(tmp_path)
    assert run.data.metrics["all_flows/SR-2"] == 100.0 and run.data.metrics["incomplete"] == 0
    assert run.data.metrics["trial_resubmissions"] == len(infra)           # each broken attempt ran again

    end = json.loads(Path(mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="placement_end.json", dst_path=str(tmp_path / "dl"))).read_text())
    offers = multinode.node_ids()
    for role, resource in (("trials", "ehrbench_trials"), ("data", "ehrbench_data"), ("users", "ehrbench_users"),
                           ("index", "ehrbench_index")):
        nodes = set(end[role].values())
        assert not nodes & lost and all(resource in offers[n] for n in nodes), (role, end[role])
    assert set(end["index"].values()) == set(end["users"].values()) == {multinode.node_id(second_new)}
    assert cached() == files                        # replicas reopened their files, the index its cache: no rebuild
    answers = _similarity_answers(records, index_lost_at)
    assert answers and all(a.startswith("I found") for a in answers)       # the restarted index serves every column
    assert manifests() == others                    # the run's manifest dropped at its end


def test_leases_held_on_a_lost_node_come_back_and_the_limiter_lives_beside_the_driver(multinode, tmp_path):
    """A model's budget (2 requests in flight) held by calls on a node that is then lost: the leases expire and the
    whole budget can be taken again. The limiter itself lives on the driver's node, which no node loss takes."""
    import queue
    import threading

    from .lease_driver import PREFIX

    errors = tmp_path / "lease_driver.err"
    proc = subprocess.Popen([sys.executable, "-m", "tests.lease_driver", multinode.address], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors.open("w"), env=multinode.env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def heard(timeout_s: float = 300) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                assert proc.poll() is None, errors.read_text()[-3000:]
                continue
            if line.startswith(PREFIX):                      # Ray may print lines of its own on stdout
                return json.loads(line[len(PREFIX):])
        raise AssertionError(f"the lease driver said nothing in {timeout_s} s")

    def tell(**fields) -> None:
        proc.stdin.write(json.dumps(fields) + "\n")
        proc.stdin.flush()

    try:
        names = {multinode.node_id(name): name for name in multinode.nodes}
        started = heard()
        assert started["limiter_node"] == started["driver_node"]             # beside the driver
        holder = next(n for n in names if n != started["limiter_node"])
        tell(hold_on=holder)
        assert heard()["held"]["in_flight"] == 2                            # the whole budget is held there
        multinode.replace_node(names[holder])                               # the node's roles come back
        tell(lost=holder)
        after = heard()
        assert after["stats"]["expired_leases"] == 2                        # taken back at their expiry: the
        assert after["stats"]["granted"] == 4 and after["stats"]["in_flight"] == 0    # budget whole again
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, errors.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_driver_killed_then_the_mlflow_server_down_on_several_nodes_lose_nothing(multinode, shared, tmp_path):
    """The head-side faults, one after the other on one run. The driver SIGKILLed mid-run (no `finally` runs). The
    same command resumes, and its tracking server goes away mid-run: it fails loudly, with every finished trial on
    disk. With the server back, the same command once more completes the same MLflow run: no trial lost or run twice,
    and every trial has exactly one trace (those the killed and the failed drivers had not written, the last run
    writes)."""
    from .multinode import free_port

    port = free_port()
    # no retries: the killed server refuses connections at once and the run fails then; a live server slowed down by
    # the run's own start on these two cores has its answer waited for (MLflow's default 120 s)
    env = {**multinode.env, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "120"}
    cmd = _job(tmp_path, shared, multinode.address, "runtime.placement=roles", "limit_tasks=4",
               "runtime.max_in_flight=8", "model.latency_s=0.1", "tracking=server",
               f"tracking.uri=http://127.0.0.1:{port}", "tracking.write_traces=during", traces=True)
    total = 2 * 4 * 4
    keys_on_disk = lambda: [(r["task_key"], r["trial"]) for r in _records(tmp_path)]  # noqa: E731
    server = _start_mlflow_server(tmp_path, port)
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        _wait_for_records(tmp_path, 8, proc, timeout=600)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        killed = set(keys_on_disk())
        assert 8 <= len(killed) < total                                 # killed part-way

        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        _wait_for_records(tmp_path, len(killed) + 4, proc, timeout=600)
        _stop(server)                                                   # the server goes away mid-run
        out, err = proc.communicate(timeout=600)
        assert proc.returncode != 0, (out + err)[-3000:]                # loudly
        failed = keys_on_disk()
        assert len(failed) == len(set(failed)) and killed < set(failed)   # what it finished is on disk, once

        server = _start_mlflow_server(tmp_path, port)                   # back again
        out = _run(cmd, env=env)
        assert "resuming run" in out.stderr + out.stdout
        keys = keys_on_disk()
        assert len(keys) == len(set(keys)) == total and set(failed) <= set(keys)    # no duplicate, no loss
        mlflow.set_tracking_uri(f"http://127.0.0.1:{port}")
        [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")     # one run throughout
        assert run.data.metrics["trials_valid"] == total and run.data.metrics["all_flows/SR-2"] == 100.0
        assert run.info.status == "FINISHED" and os.path.exists(tmp_path / "server.db")
        traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id,
                                      include_spans=False, return_type="list", max_results=1000)
        assert sorted(t.info.tags["mlflow.traceName"] for t in traces) == sorted(f"{t}#{i}" for t, i in keys)
    finally:
        _stop(server)
