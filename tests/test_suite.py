"""`python -m ehrbench suite=...`: several benchmarks in one command on one Ray cluster, one parent MLflow run with a
child per (benchmark, model) that is exactly the run the benchmark alone logs, a leaderboard on the parent, and a
suite killed mid-way that resumes without repeating a trial."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import mlflow
import pytest

from .conftest import ROOT, mlflow_store


def _command(store, ray_cluster, shared_world, tmp_path, *extra):
    # a suite of the user's own (two benchmarks whose worlds the session has built), the quick slice, a slow model
    return [sys.executable, "-m", "ehrbench", "suite=quick", "suite.only=[ehrchatqa,physassist]",
            "model.latency_s=0.3", "data.dictionary=used", f"data.root={shared_world / 'gen'}",
            f"data.index_cache={shared_world / 'vi'}", f"tracking.root={store}",
            f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}", *extra]


def test_a_suite_runs_each_benchmark_as_its_own_run_and_a_killed_one_resumes_without_repeating(
        ray_cluster, tmp_path, shared_world):
    store = mlflow_store(tmp_path / "mlruns")
    cmd = _command(store, ray_cluster, shared_world, tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = ""
    deadline = time.monotonic() + 600
    while "trials:" not in seen and time.monotonic() < deadline:      # the first child's trials are under way
        line = first.stdout.readline()
        if not line:
            break
        seen += line
    assert "suite quick: 2 runs (ehrchatqa, physassist x scripted)" in seen and "[1/2] ehrchatqa" in seen, seen[-2000:]
    time.sleep(2)
    first.send_signal(signal.SIGTERM)
    rest, _ = first.communicate(timeout=300)
    assert first.returncode == 130, (seen + rest)[-3000:]

    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [parent] = mlflow.search_runs(experiment_names=["suite"], output_format="list")
    assert parent.info.status == "KILLED"
    assert mlflow.get_experiment_by_name("physassist") is None          # stopped in its first child

    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "suite quick: leaderboard" in again.stdout and "ehrchatqa SR-2" in again.stdout
    [parent] = mlflow.search_runs(experiment_names=["suite"], output_format="list")     # the same parent, resumed
    assert parent.info.status == "FINISHED"
    children = mlflow.search_runs(experiment_names=["ehrchatqa", "physassist"], output_format="list")
    assert len(children) == 2 and all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    for child in children:                        # every trial once: the killed child went on where it stopped
        path = mlflow.artifacts.download_artifacts(f"runs:/{child.info.run_id}/records.jsonl",
                                                   dst_path=str(tmp_path / child.info.run_id))
        records = [json.loads(line) for line in open(path)]
        finals = Counter((r["task_key"], r["trial"]) for r in records if r["final"] and r["reward"] is not None)
        assert set(finals.values()) == {1} and child.data.params["trials"] == "2"
        assert child.data.params["limit_tasks"] == "1"                 # the slice, recorded on the child
    m = parent.data.metrics
    assert m["ehrchatqa/scripted/SR-2"] == 100.0 and m["ehrchatqa/scripted/SR-2/low"] == 100.0
    assert m["physassist/scripted/rule_mRS"] == 100.0
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(parent.info.run_id)}
    assert {"leaderboard.csv", "leaderboard.md", "leaderboard.png", "suite_plan.json"} <= artifacts

    alone = subprocess.run([sys.executable, "-m", "ehrbench", "benchmark=physassist", "trials=2", "limit_tasks=1",
                            "model.latency_s=0.3", "data.dictionary=used", f"data.root={shared_world / 'gen'}",
                            f"data.index_cache={shared_world / 'vi'}", f"tracking.root={store}",
                            f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'alone'}"],
                           cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert alone.returncode == 0, alone.stderr[-3000:]
    # the benchmark alone is the suite's child: the same run, nothing run again
    assert len(mlflow.search_runs(experiment_names=["physassist"], output_format="list")) == 1
    assert "0 trials to run" in alone.stdout + alone.stderr or "already finished" in alone.stdout + alone.stderr


def test_a_suite_refuses_an_unknown_model_or_a_benchmark_option_outside_its_entries(tmp_path):
    base = [sys.executable, "-m", "ehrbench", "suite=quick", f"tracking.root={tmp_path / 'm'}",
            f"hydra.run.dir={tmp_path / 'out'}"]
    out = subprocess.run([*base, "models=[gpt-4o,no-such-model]"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "models: 'no-such-model' is not a conf/model choice" in out.stderr
    out = subprocess.run([*base, "benchmark.flows=[incre]"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "give a benchmark's own options in its entry" in out.stderr
