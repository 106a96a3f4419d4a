"""The main job end to end through Hydra, against the session's Ray cluster, into a real MLflow sqlite store."""
import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from .conftest import ROOT, mlflow_store
from .multinode import free_port


def test_main_job_reaches_100_and_lands_in_mlflow(ray_cluster, tmp_path, shared_world):
    store = tmp_path / "mlruns"
    cmd = [sys.executable, "-m", "ehrbench", "limit_tasks=2", "trials=3", "data.dictionary=used",
           f"data.root={shared_world / 'gen'}", f"data.index_cache={shared_world / 'vi'}", f"tracking.root={store}",
           f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "│ all_flows           │     8 │ 100.0 │  100.0 │  100.0 │   0.0 │          0 │" in out.stdout

    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    m = run.data.metrics
    assert m["all_flows/SR-3"] == 100.0 and m["all_flows/Pass_at_3"] == 100.0 and m["all_flows/Gap-3"] == 0.0
    assert "SR-3" not in m                 # the pooled figure is ehrbench's, never under the paper's bare names
    assert m["incre/SR-3"] == m["adapt/Pass_hat_3"] == 100.0                   # the paper's, per flow
    assert m["trials_valid"] == 24 and m["mimic_iv_star/adapt/SR-3"] == 100.0
    assert m["category/adapt_ brand-generic name resolution/SR"] == 100.0
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "all/curve/Pass_hat_k")
    assert [(h.step, h.value) for h in history] == [(1, 100.0), (2, 100.0), (3, 100.0)]
    assert run.data.params["benchmark.name"] == "ehrchatqa" and run.data.params["trials"] == "3"
    assert run.data.params["data.embedder.provider"] == "local"            # which embedder built the value index
    traces = mlflow.search_traces(locations=[run.info.experiment_id], return_type="list", max_results=100)
    assert len(traces) == 24
    for trace in traces:   # the rule reward as an assessment; spans in the order and times they happened
        [reward] = [a for a in trace.info.assessments if a.name == "reward"]
        assert reward.value == 1.0 and reward.source.source_type == "CODE"
        spans = trace.data.spans
        root = next(s for s in spans if s.parent_id is None)
        assert all(root.start_time_ns <= s.start_time_ns <= s.end_time_ns <= root.end_time_ns for s in spans)
        kinds = [s.span_type for s in sorted(spans, key=lambda s: s.start_time_ns)]
        assert kinds.count("TOOL") >= 2 and "CHAT_MODEL" in kinds
        steps = {s.span_id for s in spans if s.name in ("agent step", "user turn")}
        assert all(s.parent_id in steps for s in spans if s.span_type == "CHAT_MODEL")   # calls inside their turn
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"results_table.txt", "records.jsonl", "per_task.csv", "pass_k_curve.png", "categories.png",
            "tasks.jsonl", "task_scores.json"} <= artifacts
    scores = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/task_scores.json"))
    assert scores["metric"] == "all_flows/SR-3" and len(scores["scores"]) == 8      # what the leaderboard's interval resamples
    assert sum(scores["scores"].values()) / 8 == m["all_flows/SR-3"]
    # the run's inputs: the task set as a dataset, the prompts in the registry, a description with the scores
    from ehrbench.benchmarks.ehrchatqa.tasks import load_task_dir
    from ehrbench.runtime.checkpoint import task_digest

    from .conftest import TASK_DIR

    [dataset] = run.inputs.dataset_inputs
    all_tasks = load_task_dir(TASK_DIR, ["mimic_iv_star", "eicu_star"], ["incre", "adapt"])
    assert (dataset.dataset.name, dataset.dataset.digest) == ("ehrchatqa-tasks", task_digest(all_tasks))
    assert str(TASK_DIR) in dataset.dataset.source
    linked = {p["name"] for p in json.loads(run.data.tags["mlflow.linkedPrompts"])}
    assert {"ehrchatqa.agent_system.mimic_iv_star.incre", "ehrchatqa.agent_system.eicu_star.adapt",
            "ehrchatqa.user_system", "ehrchatqa.validator_input"} <= linked
    prompt = mlflow.MlflowClient().load_prompt("prompts:/ehrchatqa.user_system@latest")
    assert "{user_instruction}" in prompt.template or "{{user_instruction}}" in prompt.template
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("ehrchatqa: agent reference with model scripted, user scripted; 8 tasks x 3 trials.")
    assert "incre SR-3 100.0" in note and "adapt Pass^3 100.0" in note and "all_flows/SR-3 100.0" in note
    # where its data may go: the synthetic world, the reference agent calling no model, the offline embedder
    assert note.endswith(" Data: mimic_iv_star synthetic, eicu_star synthetic; models: embedder local.")
    assert {k: v for k, v in run.data.params.items() if k.startswith(("data_use.", "data_handling."))} == {
        "data_use.mimic_iv_star": "synthetic", "data_use.eicu_star": "synthetic", "data_handling.embedder": "local"}
    assert run.data.tags["ehrbench.data_use"] == "synthetic"


def test_bad_override_fails_before_any_work(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ehrbench", "agent=nope", f"hydra.run.dir={tmp_path}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Could not find 'agent/nope'" in out.stderr


def test_bad_runtime_option_fails_before_any_work_naming_the_field(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ehrbench", "runtime.max_in_flight=0", f"hydra.run.dir={tmp_path}",
                          f"data.root={tmp_path / 'gen'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == ("ehrbench: runtime.max_in_flight=0: must be an integer of at "
                                                    "least 1 (conf/runtime/*.yaml or the override)")
    assert not (tmp_path / "gen").exists()          # no database was built


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


def test_real_model_run_without_a_key_stops_at_start_naming_the_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY")}
    out = subprocess.run([sys.executable, "-m", "ehrbench", "model=gemini-2.5-flash", "user=gemini-2.0-flash",
                          f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == "ehrbench: model gemini-2.5-flash: set GEMINI_API_KEY (or GOOGLE_API_KEY)"
    # the agent's key set, the paper's user (user=auto) without its key: the variable and the user= choices named
    out = subprocess.run([sys.executable, "-m", "ehrbench", "model=gpt-4o", f"hydra.run.dir={tmp_path}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**env, "OPENAI_API_KEY": "sk-test"})
    assert out.returncode == 2
    message = out.stderr.strip().splitlines()[-1]
    assert message.startswith("ehrbench: model gemini-2.0-flash: set GEMINI_API_KEY (or GOOGLE_API_KEY) (the "
                              "simulated user's model"), message
    assert "user=<gemini-2.0-flash|scripted>" in message and "user=scripted is a departure" in message


def test_llm_run_logs_usage_and_cost_per_role_and_no_key(ray_cluster, tmp_path, shared_world):
    """`model=gpt-4o` and nothing else about users: the paper's user (gemini-2.0-flash at 1.0, reflection) and
    validator (gemini-2.5-flash at 0), the paper's figures per flow. One trial through Ray with the real clients
    against the fake server; usage and cost land in MLflow."""
    import json

    from ehrbench.benchmarks.ehrchatqa.tasks import load_tasks

    from .conftest import TASK_DIR, TEST_KEYS
    from .fake_llm_server import FakeLLMServer, Reply

    task = load_tasks(TASK_DIR / "mimic_iv_star" / "eval_incre.jsonl")[0]
    server = FakeLLMServer().start()
    try:
        # user and checker share gemini-2.0-flash: their replies interleave in call order (one trial in flight);
        # the user's first turn is never verified, as in the original
        server.push(Reply(text="How many patients have this diagnosis?"),
                    Reply(text="Recent ones, both coding versions."), Reply(text="yes"),
                    Reply(text="Double check it covers everything?"), Reply(text="yes"),
                    Reply(text="###END###"), Reply(text="yes"), model="gemini-2.0-flash")
        server.push(Reply(text="What time window?"), Reply(tool="sql_execute", args={"query": task.gold_sql}),
                    Reply(text="Here is the count."), Reply(text="Yes, it does."), model="gpt-4o")
        server.push(Reply(text=json.dumps({"explanation": "ok", "result": "no_error"})), model="gemini-2.5-flash")
        store = mlflow_store(tmp_path / "mlruns")
        cmd = [sys.executable, "-m", "ehrbench", "benchmark=ehrchatqa_mimic", "benchmark.flows=[incre]",
               "limit_tasks=1", "trials=1", "data.dictionary=used", "runtime.max_in_flight=1",
               "model=gpt-4o", f"model.base_url={server.url}/v1",         # user=auto: the paper's user
               f"+user.model.base_url={server.url}", f"+validator.model.base_url={server.url}",
               f"data.root={shared_world / 'gen'}", f"data.index_cache={shared_world / 'vi'}",
               f"tracking.root={store}", f"runtime.address={ray_cluster.address}",
               f"hydra.run.dir={tmp_path / 'out'}"]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    m = run.data.metrics
    assert m["incre/SR-1"] == m["incre/Pass_hat_1"] == 100.0 and m["trials_valid"] == 1     # the paper's, per flow
    assert m["trials_rejected_by_validator"] == 0 and "SR-1" not in m and "incre/SR-1" in m
    assert run.data.params["user.name"] == "gemini-2.0-flash" and run.data.params["user.strategy"] == "reflection"
    assert "user" not in run.data.tags["ehrbench.departures"] and "validator" not in run.data.tags["ehrbench.departures"]
    from .fake_llm_server import _model_of
    from .twins.ehrchatqa import role_of
    from .wire import sent

    assert {(role_of(s.path, s.body), _model_of(s.path, s.body), sent(s.path, s.body)["temperature"])
            for s in server.requests} == {("agent", "gpt-4o", 0.0), ("user", "gemini-2.0-flash", 1.0),
                                          ("verifier", "gemini-2.0-flash", 0.0), ("validator", "gemini-2.5-flash", 0.0)}
    assert (m["calls/agent"], m["calls/user"], m["calls/verifier"], m["calls/validator"]) == (4, 4, 3, 1)
    assert m["input_tokens/agent"] == 40 and m["cost_usd/agent"] == pytest.approx((40 * 2.5 + 20 * 10.0) / 1e6)
    assert m["cost_usd/all"] > m["cost_usd/agent"]
    [trace] = mlflow.search_traces(locations=[run.info.experiment_id], return_type="list")
    [verdict] = [a for a in trace.info.assessments if a.name == "simulation_validity"]
    assert (verdict.value, verdict.source.source_type, verdict.rationale) == ("no_error", "LLM_JUDGE", "ok")
    calls = [s for s in trace.data.spans if s.span_type == "CHAT_MODEL"]
    assert sorted(s.attributes["role"] for s in calls) == sorted(["agent"] * 4 + ["user"] * 4 + ["verifier"] * 3 +
                                                              ["validator"])
    assert sum(s.attributes["input_tokens"] for s in calls if s.attributes["role"] == "agent") == 40
    logged = (json.dumps(run.data.params) + json.dumps(run.data.tags) + out.stdout + out.stderr).encode()
    artifacts = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path / "art"))
    files = [p for p in Path(artifacts).rglob("*") if p.is_file()]
    assert any(p.name == "records.jsonl" for p in files)
    logged += b"".join(p.read_bytes() for p in files)
    assert not any(key.encode() in logged for key in TEST_KEYS.values())


def test_each_role_is_sent_its_originals_parameters_by_gpt_5_mini_and_gemini_2_5_flash(ray_cluster, tmp_path,
                                                                                     shared_world):
    """`benchmark=ehrchatqa_mimic model=<m>`, m playing the agent, the user, its verifier and reflection and the
    validator: every request sends what the original's `get_completion` sends that model (`wire.EXPECTED`)."""
    from .fake_llm_server import Reply
    from .twins.ehrchatqa import role_of
    from .wire import run_with_every_role_on

    run_with_every_role_on(
        "ehrchatqa", ["benchmark=ehrchatqa_mimic", "benchmark.flows=[incre]", "limit_tasks=1", "trials=1",
                      "data.dictionary=used", "runtime.max_in_flight=1", "user=gemini-2.0-flash",
                      f"data.root={shared_world / 'gen'}", f"data.index_cache={shared_world / 'vi'}",
                      f"tracking.root={mlflow_store(tmp_path / 'mlruns')}", f"runtime.address={ray_cluster.address}"],
        role_of, tmp_path, roles=("user", "validator"),
        scripts={"user": [Reply(text="How many patients have this diagnosis?"), Reply(text="Recent ones, please.")],
                 "verifier": [Reply(text="no")]},                           # the second turn goes to reflection
        defaults={"agent": Reply(text="Here is the count."), "user": Reply(text="###END###"),
                  "verifier": Reply(text="yes"),
                  "reflection": Reply(text=json.dumps({"reflection": "one goal", "new_response": "Recent ones."})),
                  "validator": Reply(text=json.dumps({"explanation": "ok", "result": "no_error"}))})


def test_reruns_resume_without_repeating_and_mistyped_or_smaller_ones_never_touch_the_run(ray_cluster, tmp_path,
                                                                                          shared_world):
    """A first run does 1 task per database and flow; mistyped reruns stop at start; the same config with 2 tasks
    runs only the new ones into the same MLflow run; a smaller rerun (1 task, 1 trial) runs nothing and reports
    everything the run established."""
    import json

    store = mlflow_store(tmp_path / "mlruns")
    base = [sys.executable, "-m", "ehrbench", "data.dictionary=used", f"data.root={shared_world / 'gen'}",
            f"data.index_cache={shared_world / 'vi'}", f"tracking.root={store}",
            f"runtime.address={ray_cluster.address}", "tracking.log_traces=false"]

    def rerun(*extra: str, ok: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(base + [*extra, f"hydra.run.dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)
        assert (out.returncode == 0) == ok, out.stderr[-3000:]
        return out

    def the_run():
        mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
        [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")   # one run throughout
        return run

    rerun("trials=2", "limit_tasks=1")
    first = the_run()
    assert first.data.metrics["trials_valid"] == 8 and first.info.status == "FINISHED"
    for bad, line in (("trials=0", "ehrbench: trials=0: must be an integer of at least 1"),
                      ("data.seed=notanint", "ehrbench: data.seed='notanint': must be an integer of at least 0")):
        out = rerun("trials=2", "limit_tasks=2", bad, ok=False)
        assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(line), out.stderr[-2000:]
        assert "Traceback" not in out.stderr
    untouched = the_run()
    assert (untouched.info.status, untouched.data.metrics) == (first.info.status, first.data.metrics)

    rerun("trials=2", "limit_tasks=2")
    [folder] = [p for p in (store / "runs").iterdir()]
    lines = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    keys = [(r["task_key"], r["trial"]) for r in lines]
    assert len(keys) == len(set(keys)) == 4 * 2 * 2          # 4 db/flow pairs x 2 tasks x 2 trials, each once
    run = the_run()
    assert run.info.run_id == first.info.run_id and run.data.tags["ehrbench.resumed"] == "true"
    assert run.data.metrics["trials_valid"] == 16 and run.data.metrics["all_flows/SR-2"] == 100.0
    assert run.data.metrics["tasks"] == 8 and run.info.status == "FINISHED"
    prompt = mlflow.MlflowClient().load_prompt("prompts:/ehrchatqa.user_system@latest")
    assert prompt.version == 1                       # registered once: an unchanged template is not a new version

    out = rerun("trials=1", "limit_tasks=1")         # smaller: nothing new, and it never reports less than before
    assert "over 2 trials per task" in out.stdout
    assert len((folder / "records.jsonl").read_text().splitlines()) == len(lines)
    after = the_run()
    assert after.info.run_id == first.info.run_id and after.info.status == "FINISHED"
    assert {k: after.data.metrics[k] for k in ("trials_valid", "all_flows/SR-2", "tasks", "all_flows/Pass_hat_2")} == \
        {k: run.data.metrics[k] for k in ("trials_valid", "all_flows/SR-2", "tasks", "all_flows/Pass_hat_2")}


def test_checkpoint_ignores_a_torn_last_line(tmp_path):
    from ehrbench.runtime.checkpoint import TrialStore
    from ehrbench.trial import TrialRecord

    store = TrialStore(tmp_path)
    store.append(TrialRecord("db/incre/1", 0, "user_stop", 1.0))
    store.append(TrialRecord("db/incre/1", 1, "infra_error_model", None))
    with store.path.open("a") as f:
        f.write('{"task_key": "db/incre/2", "tri')  # the process died here
    records = store.load()
    assert [(r.task_key, r.trial) for r in records] == [("db/incre/1", 0), ("db/incre/1", 1)]
    assert TrialStore.finished(records) == {("db/incre/1", 0)}   # the infra failure runs again


def test_a_trial_the_validator_rejected_to_the_end_runs_again_on_resume(tmp_path):
    """The process may die between a rejected attempt and its re-run: that trial is not finished; and a trial whose
    every attempt was rejected has no score, so a resume runs it again (EHR-ChatQA's run.py re-runs reward None)."""
    from ehrbench.runtime.checkpoint import TrialStore
    from ehrbench.trial import TrialRecord

    store = TrialStore(tmp_path)
    store.append(TrialRecord("db/incre/1", 0, "rejected_by_validator", None, final=False))   # re-run was coming
    store.append(TrialRecord("db/incre/1", 1, "rejected_by_validator", None, final=True))    # out of re-runs
    store.append(TrialRecord("db/incre/1", 2, "rejected_by_validator", None, final=False))
    store.append(TrialRecord("db/incre/1", 2, "user_stop", 1.0, rerun=1))                    # accepted at last
    assert TrialStore.finished(store.load()) == {("db/incre/1", 2)}


def test_ray_job_submission_to_a_running_cluster(ray_cluster, tmp_path, shared_world):
    """The README's `ray job submit` command against the session's `ray start --head` cluster; status and logs read back."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    store = mlflow_store(tmp_path / "mlruns")
    submit = [ray_bin, "job", "submit", "--address", ray_cluster.dashboard, "--working-dir", ".",
              "--submission-id", "ehrbench-test-job", "--", sys.executable, "jobs/evaluate.py",
              "benchmark=ehrchatqa_mimic", "benchmark.flows=[incre]", "limit_tasks=1", "trials=1",
              "data.dictionary=used", f"data.root={shared_world / 'gen'}", f"data.index_cache={shared_world / 'vi'}",
              f"tracking.root={store}", "runtime.address=auto", f"hydra.run.dir={tmp_path / 'out'}"]
    import time

    for _ in range(30):  # right after `ray start` the job agent may not be up yet
        out = subprocess.run(submit, cwd=ROOT, capture_output=True, text=True, timeout=600)
        if "No available agent" not in out.stdout + out.stderr:
            break
        time.sleep(3)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    status = subprocess.run([ray_bin, "job", "status", "--address", ray_cluster.dashboard, "ehrbench-test-job"],
                            capture_output=True, text=True, timeout=60)
    assert "ehrbench-test-job' succeeded" in status.stdout + status.stderr
    logs = subprocess.run([ray_bin, "job", "logs", "--address", ray_cluster.dashboard, "ehrbench-test-job"],
                          capture_output=True, text=True, timeout=60).stdout
    assert "│ all_flows           │     1 │ 100.0 │  100.0 │  100.0 │   0.0 │          0 │" in logs
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert run.data.metrics["all_flows/SR-1"] == 100.0


def test_a_multirun_sweep_to_an_mlflow_server_gives_one_tagged_run_per_combination(ray_cluster, tmp_path,
                                                                                     shared_world):
    """`-m` over two benchmark variants with tracking=server against a real `mlflow server` on loopback: one run per
    combination, tagged with the sweep, its metrics, traces and artifacts on the server (nothing in a local store);
    the report then compares the sweep's runs side by side."""
    import csv
    import time
    import urllib.request

    from ehrbench.report import main as report

    port = free_port()
    mlflow_store(tmp_path, "server.db")
    server = subprocess.Popen([str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
                               "--port", str(port), "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                               "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        out = subprocess.run([sys.executable, "-m", "ehrbench", "-m", "benchmark=ehrchatqa_mimic,ehrchatqa_eicu",
                              "benchmark.flows=[incre]", "limit_tasks=1", "trials=2", "data.dictionary=used",
                              "tracking=server", f"tracking.uri={uri}", f"tracking.root={tmp_path / 'local'}",
                              f"data.root={shared_world / 'gen'}", f"data.index_cache={shared_world / 'vi'}",
                              f"runtime.address={ray_cluster.address}", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
        assert len(runs) == 2
        assert {r.data.tags["ehrbench.sweep"] for r in runs} == {str(tmp_path / "sweep")}
        assert sorted(r.data.params["benchmark.databases"] for r in runs) == ["['eicu_star']", "['mimic_iv_star']"]
        assert sorted(r.data.tags["ehrbench.sweep_job"] for r in runs) == ["0", "1"]
        for run in runs:
            assert run.data.metrics["all_flows/SR-2"] == 100.0 and run.data.params["tracking.name"] == "server"
            traces = mlflow.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id,
                                          return_type="list")
            assert len(traces) == 2
            assert "records.jsonl" in {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
        assert (tmp_path / "server-artifacts").exists()
        assert not (tmp_path / "local" / "mlflow.db").exists()   # nothing went to a local store

        assert report(["--tracking-uri", uri, "--sweep", str(tmp_path / "sweep"), "--out", str(tmp_path / "report"),
                       "--flows", "incre"]) == 0
        rows = list(csv.DictReader((tmp_path / "report" / "comparison.csv").open()))
        assert len(rows) == 2 and {r["incre SR"] for r in rows} == {"100.0"} and {r["k"] for r in rows} == {"2"}
        assert (tmp_path / "report" / "pass_hat_k.png").stat().st_size > 1000
        assert report(["--tracking-uri", uri, "--sweep", "nope"]) == 2
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_budget_stops_the_run_at_its_cap_keeping_every_finished_trial(ray_cluster, tmp_path, shared_world):
    """budget_usd: each call asks the run's ledger first; the run stops before a call would pass the cap (within one
    call's price of it), KILLED with the reason, every finished trial on disk; the same command with a larger
    budget runs only what was left."""
    from .fake_llm_server import FakeLLMServer, Reply

    per_call = (6000 * 2.5 + 150 * 10.0) / 1e6          # gpt-4o's price, the profile's tokens: $0.0165 a call
    server = FakeLLMServer().start()
    try:
        server.push(*[Reply(text="Here is what I found.", usage=(6000, 150))] * 200, model="gpt-4o")
        store = mlflow_store(tmp_path / "mlruns")

        def run(budget):
            return subprocess.run(
                [sys.executable, "-m", "ehrbench", "benchmark=ehrchatqa_mimic", "benchmark.flows=[incre]",
                 "limit_tasks=2", "trials=2", "data.dictionary=used", "runtime.max_in_flight=1", "model=gpt-4o",
                 "user=scripted",
                 f"model.base_url={server.url}/v1", f"budget_usd={budget}", f"data.root={shared_world / 'gen'}",
                 f"data.index_cache={shared_world / 'vi'}", f"tracking.root={store}",
                 f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"],
                cwd=ROOT, capture_output=True, text=True, timeout=600,
                env={**os.environ, "OPENAI_API_KEY": "sk-test-not-a-secret", "HF_HUB_OFFLINE": "1"})
        cap = 0.1
        out = run(cap)
        assert out.returncode == 0, out.stderr[-3000:]
        calls_before = len(server.requests)
        mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
        [stopped] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
        m = stopped.data.metrics
        assert stopped.info.status == "KILLED" and stopped.data.tags["ehrbench.stopped"].startswith(
            f"budget_usd={cap:g} reached")
        assert cap - per_call < m["cost_usd/all"] <= cap and calls_before == round(m["cost_usd/all"] / per_call)
        assert m["budget/spent_usd"] == pytest.approx(m["cost_usd/all"])
        assert 1 <= m["trials_valid"] < 4                        # what finished is kept; the rest did not start
        again = run(10)
        assert again.returncode == 0, again.stderr[-3000:]
    finally:
        server.stop()
    [run_] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    assert run_.info.run_id == stopped.info.run_id and run_.info.status == "FINISHED"
    assert run_.data.metrics["trials_valid"] == 4                 # the stopped trials ran; none twice
