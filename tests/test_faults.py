"""Faults with real processes: a trial worker and a database actor killed mid-run, the driver killed and re-run."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow

from .conftest import ROOT


def _main_job(tmp_path: Path, cluster, *extra: str, traces: bool = False) -> list[str]:
    return [sys.executable, "-m", "ehrbench", "trials=2", "data.dictionary=used", f"data.root={tmp_path / 'gen'}",
            f"data.index_cache={tmp_path / 'gen' / 'vi'}", f"tracking.root={tmp_path / 'mlruns'}",
            f"runtime.address={cluster.address}", f"tracking.log_traces={str(traces).lower()}",
            f"hydra.run.dir={tmp_path / 'out'}", *extra]


def _pids(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _records(tmp_path: Path) -> list[dict]:
    """The checkpoint's records; a line the killed driver left half-written is skipped, as the run's loader does."""
    [folder] = [p for p in (tmp_path / "mlruns" / "runs").iterdir() if "." not in p.name]
    out = []
    for line in (folder / "records.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _wait_for_records(tmp_path: Path, n: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if len(_records(tmp_path)) >= n:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} records before the job ended or timed out")


def test_killed_worker_and_actor_cost_a_retry_not_a_trial(ray_cluster, tmp_path):
    proc = subprocess.Popen(_main_job(tmp_path, ray_cluster, "limit_tasks=12"), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_records(tmp_path, 10, proc)
    killed = [p for pattern in ("ray::TrialWorker", "ray::DatabaseShard") for p in _pids(pattern)[:1]]
    assert killed, "no trial worker or database actor to kill"
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    records = _records(tmp_path)
    finished = [(r["task_key"], r["trial"]) for r in records if r["termination"] == "user_stop"]
    assert len(finished) == len(set(finished)) == 4 * 12 * 2          # every trial exactly once, none lost
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert run.data.metrics["SR-2"] == 100.0 and run.data.metrics["incomplete"] == 0
    infra = sum(1 for r in records if r["termination"].startswith("infra_error"))
    assert run.data.metrics["trial_resubmissions"] == infra            # each broken attempt ran again


def test_driver_killed_mid_run_then_rerun_resumes_without_duplicates_or_loss(ray_cluster, tmp_path):
    cmd = _main_job(tmp_path, ray_cluster, "limit_tasks=15", traces=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_records(tmp_path, 20, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    before = {(r["task_key"], r["trial"]) for r in _records(tmp_path)}
    assert 20 <= len(before) < 4 * 15 * 2                               # killed part-way
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    keys = [(r["task_key"], r["trial"]) for r in _records(tmp_path)]
    assert len(keys) == len(set(keys)) == 4 * 15 * 2                    # no duplicate, no loss
    assert before <= set(keys)
    assert "resuming run" in out.stderr + out.stdout
    # every trial has exactly one trace: those the killed driver had not written are written by the rerun
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, include_spans=False,
                                  return_type="list", max_results=1000)
    names = sorted(t.info.tags["mlflow.traceName"] for t in traces)
    assert names == sorted(f"{task}#{trial}" for task, trial in keys)


def _start_mlflow_server(tmp_path: Path, port: int) -> subprocess.Popen:
    import urllib.request

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
    os.killpg(server.pid, signal.SIGKILL)   # the server and its workers
    server.wait(timeout=30)


def test_mlflow_server_down_fails_loudly_with_nothing_lost_and_a_rerun_completes(ray_cluster, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    cmd = _main_job(tmp_path, ray_cluster, "limit_tasks=12", "tracking=server",
                    f"tracking.uri=http://127.0.0.1:{port}")
    server = _start_mlflow_server(tmp_path, port)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _wait_for_records(tmp_path, 10, proc)
    _stop(server)                                                       # the server goes away mid-run
    out, err = proc.communicate(timeout=600)
    assert proc.returncode != 0                                         # loudly
    on_disk = {(r["task_key"], r["trial"]) for r in _records(tmp_path)}
    assert len(on_disk) >= 10                                           # nothing that finished is lost

    server = _start_mlflow_server(tmp_path, port)                       # back again
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        keys = [(r["task_key"], r["trial"]) for r in _records(tmp_path)]
        assert len(keys) == len(set(keys)) == 4 * 12 * 2 and on_disk <= set(keys)
        mlflow.set_tracking_uri(f"http://127.0.0.1:{port}")
        [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
        assert run.data.metrics["trials_valid"] == 4 * 12 * 2 and run.data.metrics["SR-2"] == 100.0
    finally:
        _stop(server)


def test_sigterm_marks_the_run_killed_and_a_rerun_resumes_it_to_finished(ray_cluster, tmp_path):
    cmd = _main_job(tmp_path, ray_cluster, "limit_tasks=15")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_records(tmp_path, 10, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "stopped by a signal" in out + err, (out + err)[-4000:]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert run.info.status == "KILLED"
    stopped = len(_records(tmp_path))
    assert 10 <= stopped < 4 * 15 * 2
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    [again] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert again.data.metrics["trials_valid"] == 4 * 15 * 2
