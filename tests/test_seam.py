"""The benchmark seam is open: a benchmark outside src/ runs through the registry, Ray and MLflow; generic layers
import no benchmark; every benchmark database can be the user's own file, checked against its schema."""
import ast
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from .conftest import ROOT, mlflow_store
from .fake_llm_server import FakeLLMServer, Reply

TOY = Path(__file__).parent / "toy_benchmark"
SRC = ROOT / "src" / "ehrbench"


def test_no_generic_module_imports_a_benchmark_package():
    """Only `benchmarks/<name>/` itself and the registry may name a benchmark package."""
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "benchmarks":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{'.' * node.level}{node.module or ''}"] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{rel}: {n}" for n in names if "benchmarks." in n]
    assert offenders == []


def test_a_toy_benchmark_outside_src_runs_through_registry_ray_and_mlflow_with_a_grader(ray_cluster, tmp_path):
    server = FakeLLMServer().start()
    try:
        for verdict in ({"score": 1, "rationale": "5 is right"}, {"score": 0.5, "rationale": "terse"}):
            server.push(Reply(text=json.dumps(verdict)), model="gemini-2.5-flash")
        store = mlflow_store(tmp_path / "mlruns")
        out = subprocess.run(
            [sys.executable, "-m", "ehrbench", f"hydra.searchpath=[file://{TOY / 'conf'}]", "benchmark=toy",
             "trials=2", "runtime.max_in_flight=1", "grader=gemini-2.5-flash", f"+grader.model.base_url={server.url}",
             f"tracking.root={store}", f"data.root={tmp_path / 'gen'}", f"data.index_cache={tmp_path / 'gen' / 'vi'}",
             f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
            env={**os.environ, "PYTHONPATH": str(TOY)})
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "toy results over 2 trials per task" in out.stdout
    assert not (tmp_path / "gen").exists() or not any((tmp_path / "gen").glob("*.sqlite"))   # it needs no database
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["toy"], output_format="list")
    m = run.data.metrics
    assert (m["SR-2"], m["sums/SR-2"], m["trials_valid"], m["calls/grader"]) == (100.0, 100.0, 2, 2)
    assert m["cost_usd/grader"] > 0 and m["mean_tool_calls"] == 1
    traces = mlflow.search_traces(locations=[run.info.experiment_id], return_type="list")
    grades = sorted(a.value for t in traces for a in t.info.assessments if a.name == "correctness")
    assert grades == [0.5, 1.0]
    assert all(a.source.source_type == "LLM_JUDGE" for t in traces for a in t.info.assessments
               if a.name == "correctness")
    assert [a.value for t in traces for a in t.info.assessments if a.name == "reward"] == [1.0, 1.0]
    records = [json.loads(line) for line in (next((store / "runs").iterdir()) / "records.jsonl").read_text().splitlines()]
    assert {r["termination"] for r in records} == {"answered"} and records[0]["score_parts"] == {"exact": 1.0}
    assert run.inputs.dataset_inputs[0].dataset.name == "toy-tasks"
    assert {p["name"] for p in json.loads(run.data.tags["mlflow.linkedPrompts"])} == {"toy.grader"}


def _copy_without_column(src: Path, dst: Path, table: str, column: str) -> Path:
    shutil.copy(src, dst)
    conn = sqlite3.connect(dst)
    conn.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
    conn.commit()
    conn.close()
    return dst


def test_own_database_files_are_checked_against_the_schema(db_paths, tmp_path):
    from ehrbench.llm.base import ConfigurationError
    from ehrbench.schemas import check_database_file

    check_database_file("mimic_iv_star", db_paths["mimic_iv_star"])          # the right schema passes
    bad = _copy_without_column(db_paths["mimic_iv_star"], tmp_path / "bad.sqlite", "labresults", "resultvalue")
    with pytest.raises(ConfigurationError, match="table 'labresults' lacks column\\(s\\) resultvalue"):
        check_database_file("mimic_iv_star", bad)
    with pytest.raises(ConfigurationError, match="table 'clinicalitemtypes' is missing"):
        check_database_file("mimic_iv_star", db_paths["eicu_star"])
    (tmp_path / "junk.sqlite").write_text("not a database")
    with pytest.raises(ConfigurationError, match="not a readable SQLite database"):
        check_database_file("mimic_iv_star", tmp_path / "junk.sqlite")


def test_the_main_job_runs_on_your_own_database_file_and_refuses_a_wrong_one(ray_cluster, db_paths, tmp_path):
    from ehrbench.schemas import WorldSpec, build_database

    built = build_database("mimic_iv_star", WorldSpec(seed=0, dictionary="used"), tmp_path / "elsewhere")
    own = shutil.copy(built, tmp_path / "my_mimic_iv_star.sqlite")          # a small index: only the codes in use
    base = [sys.executable, "-m", "ehrbench", "benchmark=ehrchatqa_mimic", "benchmark.flows=[incre]", "limit_tasks=1",
            "trials=1", f"data.root={tmp_path / 'gen'}", f"data.index_cache={tmp_path / 'gen' / 'vi'}",
            f"tracking.root={mlflow_store(tmp_path / 'mlruns')}", f"runtime.address={ray_cluster.address}",
            "tracking.log_traces=false", f"hydra.run.dir={tmp_path / 'out'}"]
    out = subprocess.run(base + [f"data.mimic_iv_star.path={own}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "│ all_flows           │     1 │ 100.0 │" in out.stdout
    assert not list((tmp_path / "gen").glob("*.sqlite"))                       # nothing was built: the file was used
    bad = _copy_without_column(db_paths["mimic_iv_star"], tmp_path / "bad.sqlite", "demographics", "gender")
    out = subprocess.run(base + [f"data.mimic_iv_star.path={bad}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (f"ehrbench: data.mimic_iv_star.path='{bad}': table 'demographics' "
                                                   "lacks column(s) gender; the file must have the mimic_iv_star schema")
