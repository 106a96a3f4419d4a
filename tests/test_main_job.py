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
    traces = mlflow.search_traces(locations=[run.info.experiment_id], return_type="list", max_results=100)
    assert len(traces) == 24
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert "results_table.txt" in artifacts and any(p.endswith(".jsonl") for p in artifacts)


def test_bad_override_fails_before_any_work(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ehrbench", "agent=nope", f"hydra.run.dir={tmp_path}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Could not find 'agent/nope'" in out.stderr


def test_benchmark_override_composes_one_database():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["benchmark=ehrchatqa_eicu", "trials=3"])
    assert list(cfg.benchmark.databases) == ["eicu_star"] and cfg.trials == 3
    assert cfg.benchmark.max_steps == 30 and cfg.benchmark.time_limit_s == 600


def test_malformed_task_file_stops_the_job_naming_file_task_and_field(tmp_path):
    bad = tmp_path / "tasks" / "mimic_iv_star"
    bad.mkdir(parents=True)
    (bad / "eval_incre.jsonl").write_text('[{"task_id": "7", "task_type": "incre", "db_id": "mimic_iv_star", '
                                          '"instruction": "x", "gold_sql": "SELECT 1"}]')
    out = subprocess.run([sys.executable, "-m", "ehrbench", "benchmark=ehrchatqa_mimic", "benchmark.flows=[incre]",
                          f"benchmark.task_dir={tmp_path / 'tasks'}", f"hydra.run.dir={tmp_path / 'out'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert f"{bad / 'eval_incre.jsonl'}: task '7' (#0): missing field 'gold_answer'" in out.stdout + out.stderr


def test_secrets_are_masked_in_params():
    from ehrbench.tracking.mlflow_tracker import flatten

    params = flatten({"model": {"name": "gemini", "api_key": "AIzaSECRET", "auth": {"token": "t0k"}}, "trials": 5})
    assert params == {"model.name": "gemini", "model.api_key": "***", "model.auth.token": "***", "trials": "5"}
