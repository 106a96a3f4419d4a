"""Faults with real processes: the driver stopped by SIGTERM and re-run, a trial worker and a database actor killed
mid-rerun. The driver SIGKILLed and the MLflow server gone mid-run are tested on four nodes
(tests/test_multinode.py)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow

from .conftest import ROOT, mlflow_store


def _main_job(tmp_path: Path, cluster, world: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ehrbench", "trials=2", "data.dictionary=used", f"data.root={world / 'gen'}",
            f"data.index_cache={world / 'vi'}", f"tracking.root={mlflow_store(tmp_path / 'mlruns')}",
            f"runtime.address={cluster.address}", "tracking.log_traces=false",
            f"hydra.run.dir={tmp_path / 'out'}", *extra]


def _pids(cluster, pattern: str) -> list[int]:
    """Processes of the session's own cluster (the session its head started; Ray's workers lead process groups of
    their own inside it) whose command line matches `pattern`: never another Ray cluster's."""
    out = subprocess.run(["pgrep", "-s", str(cluster.pid), "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


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
    if proc.poll() is None:
        raise AssertionError(f"fewer than {n} records after {timeout} s")
    err = proc.communicate()[1] if proc.stderr is not None else "(not captured)"
    raise AssertionError(f"the job ended (exit {proc.returncode}) before {n} records: {err[-3000:]}")


def test_sigterm_then_killed_actors_mid_rerun_cost_retries_never_a_trial(ray_cluster, tmp_path, shared_world):
    """SIGTERM to the driver marks its MLflow run KILLED; the same command resumes it, and a trial worker and a
    database actor SIGKILLed mid-rerun cost retries (counted), never a trial: it finishes the same run, each trial
    exactly once."""
    cmd = _main_job(tmp_path, ray_cluster, shared_world, "limit_tasks=6")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_records(tmp_path, 10, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "stopped by a signal" in out + err, (out + err)[-4000:]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert run.info.status == "KILLED"
    stopped = len(_records(tmp_path))
    assert 10 <= stopped < 4 * 6 * 2
    assert not [r for r in _records(tmp_path) if r["termination"].startswith("infra_error")]

    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_records(tmp_path, stopped + 10, proc)
    killed = [p for pattern in ("ray::TrialWorker", "ray::DatabaseShard") for p in _pids(ray_cluster, pattern)[:1]]
    assert len(killed) == 2, "no trial worker or database actor to kill"
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    records = _records(tmp_path)
    finished = [(r["task_key"], r["trial"]) for r in records if r["termination"] == "user_stop"]
    assert len(finished) == len(set(finished)) == 4 * 6 * 2           # every trial exactly once, none lost
    [again] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert again.data.metrics["all_flows/SR-2"] == 100.0 and again.data.metrics["incomplete"] == 0
    assert again.data.metrics["trials_valid"] == 4 * 6 * 2
    infra = sum(1 for r in records if r["termination"].startswith("infra_error"))
    assert again.data.metrics["trial_resubmissions"] == infra          # each broken attempt ran again
