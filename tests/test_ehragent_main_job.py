"""`python -m ehrbench benchmark=ehragent`: the reference agent scores 100 on all three databases through Ray and
MLflow, and the real EHRAgent (knowledge note, code cells in the sandbox, debugging, TERMINATE) runs with the real
OpenAI client against the fake server, each helper call metered under its own role."""
import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow

from ehrbench.benchmarks.ehragent.tasks import load_tasks

from .conftest import mlflow_store

ROOT = Path(__file__).resolve().parents[1]


def test_the_reference_agent_scores_100_on_every_database(ray_cluster, tmp_path, shared_world):
    store = mlflow_store(tmp_path / "mlruns")
    cmd = [sys.executable, "-m", "ehrbench", "benchmark=ehragent", "limit_tasks=2", "trials=2", "data.dictionary=used",
           f"data.root={shared_world / 'gen'}", f"tracking.root={store}",
           f"runtime.address={ray_cluster.address}",
           f"hydra.run.dir={tmp_path / 'out'}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehragent"], output_format="list")
    m = run.data.metrics
    assert m["all_databases/SR"] == m["all_databases/SR_strict"] == m["all_databases/CR"] == 100.0
    assert "SR" not in m                  # the pooled figure is ehrbench's, never under the paper's bare name
    assert m["MIMIC-III/SR"] == m["eICU/SR"] == m["TREQS/SR"] == 100.0
    assert m["trials_valid"] >= 2 * 2 * 3
    tags = run.data.tags                                   # the contract it kept, where a reader looks for it
    assert (tags["ehrbench.contract"], tags["ehrbench.departures"]) == ("original", "")
    assert run.data.params["benchmark.contract"] == "original"
    assert "Contract: original, the paper's headline setting." in tags["mlflow.note.content"]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"results_table.txt", "sr_by_level.png"} <= artifacts
    traces = mlflow.search_traces(locations=[run.info.experiment_id], return_type="list", max_results=100)
    assert traces and all(any(s.span_type == "TOOL" for s in t.data.spans) for t in traces)   # each code cell


def test_ehragent_with_a_real_model_through_the_fake_server(ray_cluster, tmp_path, shared_world):
    from .fake_llm_server import FakeLLMServer, Reply

    source = ROOT / "data" / "tasks" / "ehragent" / "mimic_iii.json"
    task = load_tasks(source, "ehrsql_mimic_iii")[0]
    (tmp_path / "tasks").mkdir()                    # a question set of that one question
    (tmp_path / "tasks" / "mimic_iii.json").write_text(json.dumps(json.loads(source.read_text())[:1]))
    good_cell = f"rows = SQLInterpreter({task.gold_sql!r})\nanswer = [v for row in rows for v in row]"
    server = FakeLLMServer().start()
    try:   # in call order: knowledge note, a failing cell, its debugging, a good cell, the answer
        server.push(Reply(text="- The admissions table holds the visits."),
                    Reply(tool="python", args={"cell": "db = LoadDB('admission')\nanswer = len(db)"}),
                    Reply(text="The table is called admissions."),
                    # as GPT-4 wrote arguments (indented): the original's judge window ends at their `"\n}`
                    Reply(tool="python", raw_args=json.dumps({"cell": good_cell}, indent=2)),
                    Reply(text=f"The answer is {', '.join(task.answer)}.\nTERMINATE"), model="gpt-4o")
        store = mlflow_store(tmp_path / "mlruns")
        cmd = [sys.executable, "-m", "ehrbench", "benchmark=ehragent", "benchmark.databases=[ehrsql_mimic_iii]",
               f"benchmark.task_dir={tmp_path / 'tasks'}", "trials=1", "data.dictionary=used", "model=gpt-4o",
               f"model.base_url={server.url}/v1", f"data.root={shared_world / 'gen'}", f"tracking.root={store}",
               f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        requests = server.requests_for("gpt-4o")
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehragent"], output_format="list")
    m = run.data.metrics
    assert m["all_databases/SR"] == m["all_databases/CR"] == m["all_databases/SR_strict"] == 100.0
    assert (m["calls/agent"], m["calls/knowledge"], m["calls/debugger"]) == (3, 1, 1)
    chatbot = [json.dumps(r.body) for r in requests if '"functions"' in json.dumps(r.body)]   # AutoGen 0.2's shape
    assert all("tools" not in r.body for r in requests)
    assert [m["role"] for m in requests[3].body["messages"]][-2:] == ["assistant", "function"]   # its result
    assert "KeyError" in chatbot[1] and "Potential Reasons: The table is called admissions." in chatbot[1]
    assert "(END OF EXAMPLES)" in chatbot[0] and "The admissions table holds the visits." in chatbot[0]
    helpers = [r.body for r in requests if "functions" not in r.body]   # the knowledge note and the debugger
    assert len(helpers) == 2 and all(b["top_p"] == 0.95 and b["temperature"] == 0 for b in helpers)
    assert all(b["max_tokens"] == 800 and "max_completion_tokens" not in b for b in helpers)   # medagent.py's name
    assert not any("seed" in r.body for r in requests)                 # the original sends none (cache_seed is local)


def test_each_role_is_sent_its_originals_parameters_by_gpt_5_mini_and_gemini_2_5_flash(ray_cluster, tmp_path,
                                                                                     shared_world):
    """`benchmark=ehragent model=<m>`: the chatbot (AutoGen's legacy functions for an OpenAI model), the knowledge
    note and the debugger each send what the original sends that model (`wire.EXPECTED`)."""
    from ehrbench.benchmarks.ehragent.prompts import DEBUGGER_SYSTEM, KNOWLEDGE_SYSTEM

    from .fake_llm_server import Reply
    from .wire import role_by, run_with_every_role_on

    source = ROOT / "data" / "tasks" / "ehragent" / "mimic_iii.json"
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "mimic_iii.json").write_text(json.dumps(json.loads(source.read_text())[:1]))
    run_with_every_role_on(
        "ehragent", ["benchmark=ehragent", "benchmark.databases=[ehrsql_mimic_iii]",
                     f"benchmark.task_dir={tmp_path / 'tasks'}", "trials=1", "data.dictionary=used",
                     f"data.root={shared_world / 'gen'}", f"tracking.root={mlflow_store(tmp_path / 'mlruns')}",
                     f"runtime.address={ray_cluster.address}"],
        role_by(("debugger", DEBUGGER_SYSTEM[:60]), ("knowledge", KNOWLEDGE_SYSTEM)), tmp_path,
        scripts={"agent": [Reply(tool="python", args={"cell": "db = LoadDB('admission')\nanswer = len(db)"}),
                           Reply(text="The answer is 1.\nTERMINATE")]},   # a failing cell: the debugger is asked
        defaults={"knowledge": Reply(text="- The admissions table holds the visits."),
                  "debugger": Reply(text="The table is called admissions.")})


def test_sequential_memory_gives_the_next_question_the_solved_one_as_an_example(ray_cluster, tmp_path, shared_world):
    """memory=sequential, as the original's main.py: the questions in the seeded order, one at a time; a solved
    question (its question, knowledge note and last cell) is an example for the next; an unsolved one is not."""
    from ehrbench.benchmarks.ehragent.benchmark import EhrAgentBenchmark

    from .fake_llm_server import FakeLLMServer, Reply

    source = ROOT / "data" / "tasks" / "ehragent" / "mimic_iii.json"
    (tmp_path / "tasks").mkdir()
    # one question asked three times under three ids: every memory item is then the nearest example to the next
    # question (Levenshtein distance 0), whatever the question set's phrasing, so what is kept is what is shown
    [row] = json.loads(source.read_text())[:1]
    three = [{**row, "id": f"{row['id']}-{i}"} for i in range(3)]
    (tmp_path / "tasks" / "mimic_iii.json").write_text(json.dumps(three))
    tasks = load_tasks(tmp_path / "tasks" / "mimic_iii.json", "ehrsql_mimic_iii")
    options = {"databases": ["ehrsql_mimic_iii"], "memory": "sequential", "memory_seed": 0}   # the default order
    [chain] = EhrAgentBenchmark(options).schedule(tasks, 1)
    first, second, third = (t for t, _ in chain)
    cell = lambda t: f"rows = SQLInterpreter({t.gold_sql!r})\nanswer = [v for row in rows for v in row]"  # noqa: E731
    server = FakeLLMServer().start()
    # per question, in the seeded order: knowledge note, one cell, the final reply (the second one is wrong; the
    # third runs no cell and answers in its text, which main.py's judge passes)
    try:
        for t, knowledge, final in ((first, "NOTE-ONE", f"{', '.join(first.answer)}"), (second, "NOTE-TWO", "no idea"),
                                    (third, "NOTE-THREE", f"{', '.join(third.answer)}")):
            cells = [] if t is third else [Reply(tool="python", raw_args=json.dumps(   # indented, as GPT-4 wrote
                {"cell": cell(t) if t is first else "answer = -987654"}, indent=2))]
            server.push(Reply(text=knowledge), *cells, Reply(text=f"The answer is {final}.\nTERMINATE"),
                        model="gpt-4o")
        store = mlflow_store(tmp_path / "mlruns")
        cmd = [sys.executable, "-m", "ehrbench", "benchmark=ehragent", "benchmark.databases=[ehrsql_mimic_iii]",
               "benchmark.memory=sequential", f"benchmark.task_dir={tmp_path / 'tasks'}", "trials=1",
               "data.dictionary=used", "model=gpt-4o", f"model.base_url={server.url}/v1",
               f"data.root={shared_world / 'gen'}",
               f"tracking.root={store}", f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        requests = [json.dumps(r.body) for r in server.requests_for("gpt-4o")
                    if '"functions"' in json.dumps(r.body)]
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    openings = requests[0::2]                          # each question's first chatbot request holds its examples
    example = lambda t, note, code: json.dumps(f"Question: {t.question}\nKnowledge:\n{note}\nSolution:\n{code}")[1:-1]  # noqa: E731
    assert [example(first, "NOTE-ONE", cell(first)) in o for o in openings] == [False, True, True]   # solved: kept
    assert not any(example(second, "NOTE-TWO", "answer = -987654") in o for o in openings)         # unsolved: not
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehragent"], output_format="list")
    assert run.data.params["benchmark.memory"] == "sequential"
    assert round(run.data.metrics["all_databases/SR"], 1) == 66.7
    # what it learned is an artifact, in the order learned, which a frozen run loads (memory_file)
    learned = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="memory.jsonl",
                                                       dst_path=str(tmp_path / "art")))
    lines = [json.loads(line) for line in learned.read_text().splitlines()]
    # the third ran no cell: the original stores its proxy's `code`, the second question's last cell
    assert [(m["key"], m["knowledge"], m["code"]) for m in lines] == [(first.key, "NOTE-ONE", cell(first)),
                                                                       (third.key, "NOTE-THREE", "answer = -987654")]
    frozen = EhrAgentBenchmark({**options, "memory": "frozen", "memory_file": str(learned), "knowledge": True,
                                "debugging": True, "cell_cpu_s": 1, "cell_wall_s": 1, "cell_memory_mb": 512,
                                "sql_timeout_s": 1, "task_dir": str(tmp_path / "tasks")})
    frozen.check()
    from ehrbench.benchmarks.ehragent.benchmark import memory_file_items
    assert [m["question"] for m in memory_file_items(str(learned))["ehrsql_mimic_iii"]] == [first.question,
                                                                                           third.question]
    from types import SimpleNamespace

    from ehrbench.benchmark import Hosts
    settings = SimpleNamespace(agent="ehragent", agent_model={"name": "m"}, model_for=lambda role, meter: None)
    agent = frozen.episode(second, 0, Hosts({"ehrsql_mimic_iii": None}), settings, None, 1).agent
    assert [m["question"] for m in agent.memory.items[4:]] == [first.question, third.question]   # after the 4 shots


def test_a_question_file_without_answers_runs_on_the_run_s_database(ray_cluster, tmp_path, shared_world):
    """`benchmark.question_files.<db>=` EHRSQL's own file (no answers): answered on the run's database once it is
    built, the unanswerable dropped with a warning, and the rest run (the reference agent at 100)."""
    source = json.loads((ROOT / "data" / "tasks" / "ehragent" / "mimic_iii.json").read_text())[:3]
    own = [{k: v for k, v in item.items() if k not in ("answer", "level")} for item in source]
    own.append({**own[0], "id": "unanswerable", "query": "select nope from admissions"})
    (tmp_path / "valid.json").write_text(json.dumps(own))
    store = mlflow_store(tmp_path / "mlruns")
    cmd = [sys.executable, "-m", "ehrbench", "benchmark=ehragent", "benchmark.databases=[ehrsql_mimic_iii]",
           f"+benchmark.question_files.ehrsql_mimic_iii={tmp_path / 'valid.json'}", "benchmark.task_dir=/nonexistent",
           "trials=1", "data.dictionary=used", f"data.root={shared_world / 'gen'}", f"tracking.root={store}",
           f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    logs = out.stdout + out.stderr
    assert "3 of 4 questions answered" in logs and "unanswerable: gold SQL failed" in logs, logs[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehragent"], output_format="list")
    assert run.data.metrics["all_databases/SR"] == 100.0 and run.data.metrics["trials_valid"] == 3
