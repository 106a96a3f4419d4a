"""`python -m ehrbench suite=...`: five benchmarks and two models in one command on one Ray cluster, through the
fake server: the estimate first, one parent MLflow run with a child per (benchmark, model) that is exactly the run
the benchmark alone logs, a leaderboard with intervals on the parent, and a suite killed mid-way that resumes
without repeating a trial."""
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


def hosted_actors() -> dict[str, tuple[tuple[str, str], str]]:
    """Every database and value-index actor the cluster has known, alive or not: id -> ((its set's prefix, its
    database or "index"), its class)."""
    from ray.util.state import list_actors

    out = {}
    for kind in ("DatabaseShard", "ValueIndexActor"):
        for a in list_actors(filters=[("class_name", "=", kind)], limit=10_000, raise_on_missing_output=False):
            if a.name:        # `<set prefix>/db/<db_id>/<replica>` or `<set prefix>/index`
                parts = a.name.split("/")
                out[a.actor_id] = ((parts[0], parts[2] if parts[1] == "db" else "index"), kind)
    return out


def _command(store, ray_cluster, shared_world, tmp_path, url, clinsql_tasks):
    """The issue's command, `suite=quick 'models=[gpt-4o,o4-mini]'`, both models (and the two judges the papers
    use) pointed at the fake server; ClinSQL on tasks written for the tests' small world, AgentEHR's trajectories cut
    to 4 steps on one task type (a text-only model never finishes one sooner)."""
    return [sys.executable, "-m", "ehrbench", "suite=quick", "models=[gpt-4o,o4-mini]", f"++model.base_url={url}",
            "suite.benchmarks.ehrchatqa=['user=scripted']",       # no Gemini user here: a departure, named apart
            f"suite.benchmarks.clinsql=['benchmark.task_dir={clinsql_tasks}','data.scale=2','grader=gpt-5-chat',"
            f"'grader.model.base_url={url}']",
            f"suite.benchmarks.physassist=['grader=gpt-5-mini','grader.model.base_url={url}']",
            "suite.benchmarks.agentehr=['benchmark.max_turns=4','benchmark.patient_shards=1',"
            "'benchmark.tasks=[transfers]','benchmark.mimic_iii=false']",
            "data.dictionary=used", f"data.root={shared_world / 'gen'}", f"data.index_cache={shared_world / 'vi'}",
            f"tracking.root={store}", f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"]


def test_a_suite_of_five_benchmarks_and_two_models_runs_in_one_command_and_resumes_without_repeating(
        ray_cluster, tmp_path, shared_world):
    """The estimate first; one parent and a child per (benchmark, model), each the run the benchmark alone logs; the
    leaderboard with intervals; a suite killed in its first child goes on where it stopped, every trial once."""
    from ehrbench.benchmarks.clinsql.authoring import main as write_clinsql_tasks

    from .fake_llm_server import FakeLLMServer, Reply

    write_clinsql_tasks(["--out", str(tmp_path / "clinsql"), "--scale", "2", "--root", str(shared_world / "gen"),
                         "--per-cell", "1"])
    server = FakeLLMServer()
    server.defaults = {"gpt-4o": Reply(text="I could not find that in the records."),
                       "o4-mini": Reply(text="I could not find that in the records."),
                       "gpt-5-chat-latest": Reply(text="Score: 1\nExplanation: met."),
                       "gpt-5-mini-2025-08-07": Reply(text='{"scores": [1], "reasoning": ["ok"]}')}
    server.start()
    store = mlflow_store(tmp_path / "mlruns")
    cmd = _command(store, ray_cluster, shared_world, tmp_path, f"{server.url}/v1", tmp_path / "clinsql")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "sk-test-not-a-secret"}
    try:
        first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        seen = ""
        deadline = time.monotonic() + 600
        while "trials:" not in seen and time.monotonic() < deadline:      # the first child's trials are under way
            line = first.stdout.readline()
            if not line:
                break
            seen += line
        assert "suite quick: 10 runs (agentehr, clinsql, ehragent, ehrchatqa, physassist x gpt-4o, o4-mini)" in seen
        estimate = seen.index("suite quick: estimate over 10 runs")       # the estimate before any child runs
        assert estimate < seen.index("[1/10] ehrchatqa with gpt-4o"), seen[-3000:]
        time.sleep(2)
        first.send_signal(signal.SIGTERM)
        rest, _ = first.communicate(timeout=300)
        assert first.returncode == 130, (seen + rest)[-3000:]
        mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
        [parent] = mlflow.search_runs(experiment_names=["suite"], output_format="list")
        assert parent.info.status == "KILLED"
        assert mlflow.get_experiment_by_name("physassist") is None          # stopped in its first child

        before = set(hosted_actors())
        again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200)
        assert again.returncode == 0, again.stderr[-3000:]
        hosted = {a: n for a, n in hosted_actors().items() if a not in before}      # what the resumed suite started
    finally:
        server.stop()
    board = again.stdout[again.stdout.index("suite quick: leaderboard"):]
    for column in ("ehrchatqa scripted_user/all_flows/SR-2", "ehragent all_databases/SR", "agentehr F1",
                   "clinsql exec_score", "physassist mRS"):
        assert column in board, board[:3000]
    assert "gpt-4o" in board and "o4-mini" in board
    [parent] = mlflow.search_runs(experiment_names=["suite"], output_format="list")     # the same parent, resumed
    assert parent.info.status == "FINISHED"
    benchmarks = ["ehrchatqa", "ehragent", "agentehr", "clinsql", "physassist"]
    children = mlflow.search_runs(experiment_names=benchmarks, output_format="list")
    assert len(children) == 10 and all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert {(c.data.params["benchmark.name"], c.data.params["model.name"]) for c in children} == \
        {(b, m) for b in benchmarks for m in ("gpt-4o", "o4-mini")}
    spans = sorted((c.info.start_time, c.info.end_time) for c in children if "ehrbench.resumed" not in c.data.tags)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))   # side by side (2 at once)
    for child in children:                        # every trial once: the killed child went on where it stopped
        path = mlflow.artifacts.download_artifacts(f"runs:/{child.info.run_id}/records.jsonl",
                                                   dst_path=str(tmp_path / child.info.run_id))
        records = [json.loads(line) for line in open(path)]
        finals = Counter((r["task_key"], r["trial"]) for r in records if r["final"] and r["reward"] is not None)
        assert finals and set(finals.values()) == {1} and child.data.params["trials"] == "2"
        assert child.data.params["limit_tasks"] == "1"                 # the slice, recorded on the child
        assert child.data.metrics["calls/agent"] > 0                   # the model, not a reference, answered
    m = parent.data.metrics
    for b, metric in (("ehrchatqa", "scripted_user/all_flows/SR-2"), ("ehragent", "all_databases/SR"),
                      ("agentehr", "F1"), ("clinsql", "exec_score"),
                      ("physassist", "mRS")):
        for model in ("gpt-4o", "o4-mini"):
            assert m[f"{b}/{model}/{metric}/low"] <= m[f"{b}/{model}/{metric}"] <= m[f"{b}/{model}/{metric}/high"]
    assert m["clinsql/gpt-4o/exec_score"] == 100.0                        # the fake judge passes
    assert m["ehrchatqa/gpt-4o/scripted_user/all_flows/SR-2"] == 0.0
    # one set of hosted databases and indexes per world for the whole suite: every (kind, key) started once, though
    # ten children (two models, one after the other and side by side) used them
    instances: dict[str, set] = {}
    for (prefix, what), kind in hosted.values():       # prefix: ehrbench-<the set's key>-<this instance>
        instances.setdefault(f"{kind} {prefix.rsplit('-', 1)[0]} {what}", set()).add(prefix)
    assert instances and all(len(v) == 1 for v in instances.values()), instances
    assert len([k for k in instances if k.startswith("DatabaseShard")]) < len(children)   # fewer than the runs
    asked = Counter(r.body.get("model") for r in server.requests)
    assert asked["gpt-4o"] > 0 and asked["o4-mini"] > 0 and asked["gpt-5-chat-latest"] > 0
    assert all("temperature" not in r.body for r in server.requests if r.body.get("model") == "o4-mini")
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(parent.info.run_id)}
    assert {"leaderboard.csv", "leaderboard.md", "leaderboard.png", "suite_plan.json"} <= artifacts

    alone = subprocess.run([sys.executable, "-m", "ehrbench", "benchmark=physassist", "trials=2", "limit_tasks=1",
                            "model=o4-mini", f"model.base_url={server.url}/v1", "grader=gpt-5-mini",
                            f"grader.model.base_url={server.url}/v1", "data.dictionary=used",
                            f"data.root={shared_world / 'gen'}", f"data.index_cache={shared_world / 'vi'}",
                            f"tracking.root={store}", f"runtime.address={ray_cluster.address}",
                            f"hydra.run.dir={tmp_path / 'alone'}"],
                           cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert alone.returncode == 0, alone.stderr[-3000:]
    # the benchmark alone is the suite's child: the same run, nothing run again (the server is down by now)
    assert len(mlflow.search_runs(experiment_names=["physassist"], output_format="list")) == 2
    assert "0 trials to run" in alone.stdout + alone.stderr or "already finished" in alone.stdout + alone.stderr


def test_a_suite_refuses_an_unknown_model_or_a_benchmark_option_outside_its_entries(tmp_path):
    base = [sys.executable, "-m", "ehrbench", "suite=quick", f"tracking.root={tmp_path / 'm'}",
            f"hydra.run.dir={tmp_path / 'out'}"]
    out = subprocess.run([*base, "models=[gpt-4o,no-such-model]"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "models: 'no-such-model' is not a conf/model choice" in out.stderr
    out = subprocess.run([*base, "benchmark.flows=[incre]"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "give a benchmark's own options in its entry" in out.stderr
