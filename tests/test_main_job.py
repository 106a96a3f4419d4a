"""The main job end to end through Hydra, against the session's Ray cluster, into a real MLflow sqlite store."""
import os
import subprocess
import sys

import mlflow

from .conftest import ROOT


def test_main_job_reaches_100_and_lands_in_mlflow(ray_cluster, tmp_path):
    store = tmp_path / "mlruns"
    cmd = [sys.executable, "-m", "ehrbench", "limit_tasks=2", "trials=3", "data.dictionary=used",
           f"data.root={tmp_path / 'gen'}", f"data.index_cache={tmp_path / 'gen' / 'vi'}", f"tracking.root={store}",
           f"runtime.address={ray_cluster.address_info['address']}", f"hydra.run.dir={tmp_path / 'out'}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "│ all                 │     8 │ 100.0 │  100.0 │  100.0 │   0.0 │          0 │" in out.stdout

    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert run.data.metrics["SR-3"] == 100.0 and run.data.metrics["trials_valid"] == 24
    assert run.data.params["benchmark.name"] == "ehrchatqa" and run.data.params["trials"] == "3"
    traces = mlflow.search_traces(experiment_ids=[run.info.experiment_id], return_type="list", max_results=100)
    assert len(traces) == 24
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert "results_table.txt" in artifacts and any(p.endswith(".jsonl") for p in artifacts)


def test_bad_override_fails_before_any_work(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ehrbench", "agent=nope", f"hydra.run.dir={tmp_path}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Could not find 'agent/nope'" in out.stderr
