"""Distributed for real: four Ray nodes on this machine (a head that runs no trials, three worker nodes started with
`ray start --address`), actors placed by role, the same results as on one node, and a worker node lost mid-run
(raylet and workers killed by process id) while another joins: every trial finished exactly once, retries counted;
the driver killed and rerun, and the MLflow server gone mid-run, as on one node."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from .conftest import ROOT
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
        for name, resources in ROLES.items():
            cluster.add_node(name, resources)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Databases and the value index built once for every run of the module."""
    return tmp_path_factory.mktemp("multinode_data")


def _job(tmp_path: Path, shared: Path, address: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ehrbench", "trials=2", "limit_tasks=3", "data.dictionary=used",
            f"data.root={shared / 'gen'}", f"data.index_cache={shared / 'vi'}", f"tracking.root={tmp_path / 'mlruns'}",
            f"runtime.address={address}", "runtime.user_simulators=1", "runtime.db_replicas=2",
            "tracking.log_traces=false", f"hydra.run.dir={tmp_path / 'out'}", *extra]


def _run(cmd: list[str], env=None, timeout: float = 900) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _run_info(tmp_path: Path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    return run


def test_actors_land_on_their_roles_nodes_and_results_equal_the_single_node_run(multinode, ray_cluster, shared,
                                                                               tmp_path):
    multi, single = tmp_path / "multi", tmp_path / "single"
    _run(_job(multi, shared, multinode.address, "runtime.placement=roles"), env=multinode.env)
    _run(_job(single, shared, ray_cluster.address))
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
    assert run.data.metrics["SR-2"] == 100.0
    rewards = lambda path: sorted((r["task_key"], r["trial"], r["reward"], r["termination"])  # noqa: E731
                                  for r in _records(path) if r["termination"] == "user_stop")
    assert rewards(multi) == rewards(single) and len(rewards(multi)) == 2 * 3 * 4


def test_a_node_lost_mid_run_costs_retries_never_a_trial_and_a_new_node_is_used(multinode, shared, tmp_path):
    cmd = _job(tmp_path, shared, multinode.address, "runtime.placement=roles", "model.latency_s=0.3",
               "user.latency_s=0.3", "limit_tasks=6", "runtime.max_in_flight=8", "runtime.trial_workers=4")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=multinode.env)
    _wait_for_records(tmp_path, 6, proc, timeout=600)
    assert proc.poll() is None, "the run ended before the node could be lost"
    [placed] = list((tmp_path / "mlruns").rglob("placement.json"))
    on = set(json.loads(placed.read_text())["trials"].values())
    offers = multinode.node_ids()
    [w2] = [n for n, roles in offers.items() if roles == ["ehrbench_data", "ehrbench_trials"]]
    assert w2 in on, "no trial worker on w2 to lose"
    multinode.lose_node("w2")                        # trial workers and a database replica go with it
    multinode.add_node("w4", ROLES["w2"])            # a node comes (back) with the same roles
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    records = _records(tmp_path)
    finished = [(r["task_key"], r["trial"]) for r in records if r["termination"] == "user_stop"]
    assert len(finished) == len(set(finished)) == 2 * 6 * 4                # every trial exactly once, none lost
    infra = [r for r in records if r["termination"].startswith("infra_error")]
    assert infra, "the lost node took no trial with it"
    run = _run_info(tmp_path)
    assert run.data.metrics["SR-2"] == 100.0 and run.data.metrics["incomplete"] == 0
    assert run.data.metrics["trial_resubmissions"] == len(infra)           # each broken attempt ran again
    assert multinode.alive() >= 4


def test_the_driver_killed_on_several_nodes_resumes_without_duplicates_or_loss(multinode, shared, tmp_path):
    """The head-side fault of tests/test_faults.py, on the four nodes: the driver SIGKILLed mid-run, then rerun."""
    import signal

    cmd = _job(tmp_path, shared, multinode.address, "runtime.placement=roles", "limit_tasks=5",
               "runtime.max_in_flight=8", "model.latency_s=0.1")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=multinode.env)
    _wait_for_records(tmp_path, 8, proc, timeout=600)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    before = {(r["task_key"], r["trial"]) for r in _records(tmp_path)}
    assert 8 <= len(before) < 2 * 5 * 4                                 # killed part-way
    out = _run(cmd, env=multinode.env)
    keys = [(r["task_key"], r["trial"]) for r in _records(tmp_path)]
    assert len(keys) == len(set(keys)) == 2 * 5 * 4 and before <= set(keys)     # no duplicate, no loss
    assert "resuming run" in out.stderr + out.stdout
    assert _run_info(tmp_path).data.metrics["SR-2"] == 100.0


def test_the_mlflow_server_down_on_several_nodes_loses_nothing_and_a_rerun_completes(multinode, shared, tmp_path):
    """The other head-side fault of tests/test_faults.py, on the four nodes: the tracking server gone mid-run."""
    import os

    from .multinode import free_port
    from .test_faults import _start_mlflow_server, _stop

    port = free_port()
    env = {**multinode.env, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    cmd = _job(tmp_path, shared, multinode.address, "runtime.placement=roles", "limit_tasks=5",
               "runtime.max_in_flight=8", "model.latency_s=0.1", "tracking=server",
               f"tracking.uri=http://127.0.0.1:{port}")
    server = _start_mlflow_server(tmp_path, port)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _wait_for_records(tmp_path, 8, proc)
    _stop(server)                                                       # the server goes away mid-run
    proc.communicate(timeout=600)
    assert proc.returncode != 0                                         # loudly
    on_disk = {(r["task_key"], r["trial"]) for r in _records(tmp_path)}
    assert len(on_disk) >= 8                                            # nothing that finished is lost
    server = _start_mlflow_server(tmp_path, port)                       # back again
    try:
        _run(cmd, env=env)
        keys = [(r["task_key"], r["trial"]) for r in _records(tmp_path)]
        assert len(keys) == len(set(keys)) == 2 * 5 * 4 and on_disk <= set(keys)
        mlflow.set_tracking_uri(f"http://127.0.0.1:{port}")
        [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
        assert run.data.metrics["SR-2"] == 100.0 and os.path.exists(tmp_path / "server.db")
    finally:
        _stop(server)
