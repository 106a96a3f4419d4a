"""ClinSQL: the project's task set, the loader, the grading pieces, the inference protocol, and the main job (the
reference scores 100 offline; the real agent and the LLM grader through the fake server)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from ehrbench.benchmark import TaskFileError
from ehrbench.benchmarks.clinsql import rubric
from ehrbench.benchmarks.clinsql.agent import ClinSqlAgent
from ehrbench.benchmarks.clinsql.scoring import (Candidate, LlmGrader, ResultsChecker, offline_sql_decisions,
                                                 parents, read_verdict, sql_equivalent)
from ehrbench.benchmarks.clinsql.prompts import clean_sql_response
from ehrbench.benchmarks.clinsql.tasks import DIFFICULTIES, SCENARIOS, load_task, load_tasks
from ehrbench.llm.base import ChatResponse
from ehrbench.trial import InfrastructureError, Message, run_trial

from .conftest import mlflow_store

ROOT = Path(__file__).resolve().parents[1]
PROJECT_TASKS = ROOT / "data" / "tasks" / "clinsql"
SCALE = 2          # the tests' world: ~200 patients, enough for a cohort per template


@pytest.fixture(scope="module")
def small_world(tmp_path_factory):
    """A scale-2 world's MIMIC-IV (built once) and one task per scenario and difficulty authored on it."""
    from ehrbench.benchmarks.clinsql.authoring import main

    base = tmp_path_factory.mktemp("clinsql")
    main(["--out", str(base / "tasks"), "--scale", str(SCALE), "--root", str(base / "gen"), "--per-cell", "1"])
    return base


# --- the project's task set -------------------------------------------------------------------------------------
def test_the_project_task_set_has_every_scenario_and_difficulty_in_clinsqls_shape():
    tasks = load_tasks(PROJECT_TASKS)
    assert len(tasks) >= 300
    cells = {(t.scenario, t.difficulty) for t in tasks}
    assert cells == {(s, d) for s in SCENARIOS for d in DIFFICULTIES}
    for t in tasks:
        assert {c.requirements for c in t.sql_tree.sub_tasks} >= {"Patient Cohort Construction",
                                                                  "Database Integration"}
        assert any(leaf.critical for leaf in t.sql_tree.leaves())
        assert "–" in t.question and "physionet-data.mimiciv_3_1_hosp" in t.gold_sql
        # the reference result passes every results leaf the checker reads: ranges contain the gold values
        gold = Candidate(t.gold_sql, True, t.gold_columns, list(t.gold_rows))
        checker, up = ResultsChecker(t.gold_columns, t.gold_rows, gold), parents(t.results_tree)
        decisions = [checker.decide(leaf, up.get(leaf.id)) for leaf in t.results_tree.leaves()]
        assert all(d.score == 1.0 for d in decisions), (t.key, [d for d in decisions if d.score != 1.0])
    manifest = json.loads((PROJECT_TASKS / "manifest.json").read_text())
    assert manifest["world"] == {"seed": 0, "scale": 100.0} and manifest["tasks"] == len(tasks)


def test_a_task_folder_missing_a_file_names_the_file(tmp_path):
    source = next(p for p in (PROJECT_TASKS / SCENARIOS[0] / "easy_level_queries").iterdir())
    folder = tmp_path / SCENARIOS[0] / "easy_level_queries" / source.name
    shutil.copytree(source, folder)
    (folder / f"result_{source.name}.csv").unlink()
    with pytest.raises(TaskFileError, match=rf"result_{source.name}\.csv: missing \(the gold result\)"):
        load_tasks(tmp_path)
    shutil.copy(source / f"result_{source.name}.csv", folder)
    (folder / "sql_rubric_tree.json").write_text('{"id": "x", "sub_tasks": []}')
    with pytest.raises(TaskFileError, match=r"sql_rubric_tree\.json: root: `requirements` must be"):
        load_task(folder, SCENARIOS[0], "easy")


# --- grading ----------------------------------------------------------------------------------------------------
def _task():
    return load_tasks(PROJECT_TASKS)[len(load_tasks(PROJECT_TASKS)) // 2]


def _decide(task, candidate):
    checker, up = ResultsChecker(task.gold_columns, task.gold_rows, candidate), parents(task.results_tree)
    return {leaf.id: checker.decide(leaf, up.get(leaf.id)) for leaf in task.results_tree.leaves()}


def test_the_checker_fails_failed_empty_renamed_null_and_out_of_range_results():
    task = _task()
    cols, rows = task.gold_columns, [list(r) for r in task.gold_rows]
    failed = _decide(task, Candidate("SELECT 1", False, error="boom"))
    assert failed["csv-file-exists"].score == 0 and rubric.score(task.results_tree, {
        k: d.score for k, d in failed.items()}) == 0.0
    empty = _decide(task, Candidate("SELECT 1", True, cols, []))
    assert empty["csv-file-exists"].score == 0                     # the original could credit this one
    numeric = next(c for c in cols if f"{c}-acceptable" in _decide(task, Candidate("", True, cols, rows)))
    i = cols.index(numeric)
    renamed = _decide(task, Candidate("", True, tuple(c.upper() for c in cols), rows))   # case is not a rename
    assert renamed[f"{numeric}-exists"].score == 1
    fewer = _decide(task, Candidate("", True, cols[:i] + cols[i + 1:], [r[:i] + r[i + 1:] for r in rows]))
    assert fewer[f"{numeric}-exists"].score == 0 and fewer[f"{numeric}-acceptable"].score == 0
    far = _decide(task, Candidate("", True, cols, [r[:i] + [str(float(r[i]) * 50 + 1e6)] + r[i + 1:] for r in rows]))
    assert far[f"{numeric}-acceptable"].score == 0 and "outside" in far[f"{numeric}-acceptable"].rationale
    nulls = _decide(task, Candidate("", True, cols, [r[:i] + [None] + r[i + 1:] for r in rows]))
    assert nulls["no-null-empty-values"].score == 0


def test_columns_match_by_name_then_by_a_free_position_and_ranges_read_in_every_spelling():
    from ehrbench.benchmarks.clinsql.rubric import Node

    checker = ResultsChecker(("a", "b"), [("1", "2")], Candidate("", True, ("b", "c"), [(2, 5)]))
    assert checker.candidate_index("b") == 0 and checker.candidate_index("a") is None   # "b" is taken by name
    assert ResultsChecker(("a", "b"), [], Candidate("", True, ("x", "y"), [])).candidate_index("b") == 1
    one = ResultsChecker(("n",), [("5",)], Candidate("", True, ("n",), [(1500,)]))
    for text, score in (("Values are in the acceptable range (1,000 to 5,000).", 1.0),
                        ("Clinically plausible (e.g., 0–365 days).", 0.0), ("Acceptable (1 to 1e+06).", 1.0),
                        ("Acceptable (1.5 to 2.5).", 0.0)):
        assert one.decide(Node("n-acceptable", text), None).score == score, text


def test_the_offline_sql_grader_passes_only_the_gold_syntax_tree():
    task = _task()
    reformatted = "-- a comment\n" + " ".join(task.gold_sql.split())
    for keyword in ("SELECT", "FROM", "WHERE", "JOIN", "AND", "BETWEEN", " AS "):
        reformatted = reformatted.replace(keyword, keyword.lower())
    assert sql_equivalent(reformatted, task.gold_sql)
    sex = "'M'" if "'M'" in task.gold_sql else "'F'"
    changed = task.gold_sql.replace(sex, "'X'")
    assert changed != task.gold_sql and not sql_equivalent(changed, task.gold_sql)
    assert {d.score for d in offline_sql_decisions(task.sql_tree, changed, task.gold_sql)} == {0.0}
    assert not sql_equivalent("this is not sql", task.gold_sql)
    assert not sql_equivalent(task.gold_sql.rstrip(";") + "; SELECT 1", task.gold_sql)


def test_grader_replies_are_read_strictly():
    assert read_verdict("Score: 1\nExplanation: joins on subject_id") == (1.0, "joins on subject_id")
    assert read_verdict("**Score:** 0.0\nExplanation: no age filter")[0] == 0.0
    assert read_verdict("I would give this a 1 because it is fine") is None   # the original counted it as 1
    assert read_verdict("Score: 0.5\nExplanation: partly") is None            # leaves are 0 or 1
    assert read_verdict("") is None


class StubModel:
    """Answers from a list, recording each prompt."""

    def __init__(self, *texts):
        self.texts, self.prompts = list(texts), []

    async def complete(self, request):
        self.prompts.append(request.messages[-1].content)
        reply = self.texts.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return ChatResponse(text=reply)


def test_under_contract_ehrbench_an_unreadable_reply_is_asked_again_then_fails_never_passes():
    task = _task()
    leaf = next(task.sql_tree.leaves())
    twice = LlmGrader(StubModel("Looks right to me, 1", "Score: 0\nExplanation: wrong cohort"), original=False)
    assert asyncio.run(twice.decide(leaf, "p")).score == 0.0
    never = LlmGrader(StubModel("maybe 1", "still 1?"), original=False)
    with pytest.raises(InfrastructureError, match="no readable 'Score: 0\\|1' after 2 tries"):
        asyncio.run(never.decide(leaf, "p"))


def test_a_judge_reply_that_fails_is_scored_as_the_original_scores_it_and_an_outage_re_runs():
    """Under the original: a judge reply cut off or blocked before any text is read as the empty reply it is (the
    released scorer's parse: 0); a request refused, for its size or otherwise (any 400), is an "Evaluation failed"
    leaf, 0, as the published runs' were; an outage is re-run, never a score. Before, a cut-off reply raised inside
    the grader and re-ran the trial as a harness error."""
    from ehrbench.llm.base import ModelTurnError

    leaf = next(_task().sql_tree.leaves())
    for error in (ModelTurnError("cut", kind="cut_off"), ModelTurnError("blocked", kind="blocked")):
        assert asyncio.run(LlmGrader(StubModel(error)).decide(leaf, "p")).score == 0.0
    for error in (InfrastructureError("HTTP 400: too long", agent_caused=True),
                  InfrastructureError("HTTP 400: content filter", status=400)):
        decision = asyncio.run(LlmGrader(StubModel(error)).decide(leaf, "p"))
        assert decision.score == 0.0 and decision.rationale.startswith("Evaluation failed")
    with pytest.raises(InfrastructureError):
        asyncio.run(LlmGrader(StubModel(InfrastructureError("HTTP 503 x8"))).decide(leaf, "p"))


@pytest.mark.parametrize("error", ["cut_off", "blocked", "refused_for_size", "bad_request"])
def test_an_agent_turn_that_fails_is_a_sample_without_sql_judged_as_the_original_judges_it(error):
    """The original counts a generation that failed (cut off or blocked before any text, a request refused) as
    "Failed to generate SQL" and still judges the sample; before, ehrbench ended the trial as the agent's error,
    never judged."""
    from ehrbench.llm.base import ModelTurnError

    failure = ModelTurnError("x", kind=error) if error in ("cut_off", "blocked") else \
        InfrastructureError("HTTP 400", agent_caused=error == "refused_for_size", status=400)
    said = asyncio.run(ClinSqlAgent(StubModel(failure), None).act([Message("user", "How many?")]))
    assert (said.content, said.tool_call, said.finish_reason) == ("(no SQL)", None, error)


# --- the inference protocol -------------------------------------------------------------------------------------
def test_sql_is_found_in_replies_as_the_original_finds_it():
    assert clean_sql_response("Reasoning...\n```sql\nSELECT 1\n```\nthen\n```sql\nSELECT 2\n```") == "SELECT 2;"
    assert clean_sql_response("Reasoning: use patients.\nSQL:\nWITH x AS (SELECT 1) SELECT * FROM x") == \
        "WITH x AS (SELECT 1) SELECT * FROM x;"
    assert clean_sql_response("I cannot answer.") == "I cannot answer.;"    # the original's own behaviour
    assert clean_sql_response("   ") == ""


class ErrorThenRows:
    """A tool that fails the first `failures` queries, then runs."""

    def __init__(self, failures):
        self.failures, self.seen = failures, []

    async def call(self, name, arguments):
        self.seen.append(arguments["sql"])
        if len(self.seen) <= self.failures:
            return "Error: Binder Error: column anchor_agee not found"
        return "Query ran: 1 rows\nn\n3\n"


@pytest.mark.parametrize("failures, attempts", [(0, 1), (1, 2), (2, 3), (5, 3)])
def test_self_refinement_runs_only_after_an_execution_error_and_at_most_twice(failures, attempts):
    replies = [f"Reasoning {i}\n```sql\nSELECT {i}\n```" for i in range(5)]
    model, tools = StubModel(*replies), ErrorThenRows(failures)
    record = asyncio.run(run_trial("t", 0, ClinSqlAgent(model, "SCHEMA", max_refinements=2), None, tools,
                                   lambda r: asyncio.sleep(0, 1.0), opening="How many?"))
    assert len(tools.seen) == attempts == len(model.prompts)
    assert "Clinical question:\n\"How many?\"" in model.prompts[0] and "SCHEMA" in model.prompts[0]
    for i, prompt in enumerate(model.prompts[1:]):         # each refinement: previous SQL and its error
        assert f"```sql\nSELECT {i};\n```" in prompt and "column anchor_agee not found" in prompt
    assert record.termination == "answered"
    assert record.messages[-1]["content"].endswith(f"```sql\nSELECT {attempts - 1};\n```")


def test_a_reply_without_sql_ends_the_trial_without_executing():
    tools = ErrorThenRows(0)
    record = asyncio.run(run_trial("t", 0, ClinSqlAgent(StubModel("  "), None), None, tools,
                                   lambda r: asyncio.sleep(0, 0.0), opening="q"))
    assert tools.seen == [] and record.termination == "answered"


# --- the tool: BigQuery through sqlglot into the guarded DuckDB ----------------------------------------------------
def test_the_tool_transpiles_runs_and_refuses(small_world):
    from ehrbench.benchmarks.clinsql.tools import BigQueryTools
    from ehrbench.db import open_database
    from ehrbench.runtime.hosts import LocalHost

    [duck] = list((small_world / "gen").glob("mimic_iv-*.duckdb"))
    db = open_database(duck, "mimic_iv")
    try:
        tools = BigQueryTools(LocalHost(db), timeout_s=20, max_rows=50)
        ok = asyncio.run(tools.call("execute_bigquery", {"sql": "SELECT COUNTIF(gender = 'M') AS men FROM "
                                                                "`physionet-data.mimiciv_3_1_hosp.patients`"}))
        assert ok.startswith("Query ran: 1 rows\nmen\n") and tools.last.executed and tools.last.columns == ("men",)
        assert tools.dialect_paths[-1][1] == "table physionet-data.mimiciv_3_1_hosp.patients -> mimiciv_hosp.patients"
        bad = asyncio.run(tools.call("execute_bigquery", {"sql": "SELEC nothing FROM"}))
        assert bad.startswith("Error: ") and not tools.last.executed
        drop = asyncio.run(tools.call("execute_bigquery", {"sql": "DROP TABLE mimiciv_hosp.patients"}))
        assert drop.startswith("Error: ") and not tools.last.executed
        big = asyncio.run(tools.call("execute_bigquery", {"sql": "SELECT subject_id FROM "
                                                                 "`physionet-data.mimiciv_3_1_hosp.patients`"}))
        assert "more than 50 rows" in big and not tools.last.executed
    finally:
        db.close()


# --- the self-check: a reference that reads the question, and mutants with known scores -------------------------
def test_the_reference_reads_every_shipped_question_to_its_gold_query():
    """The reference never sees the gold: from the question (and its cell) alone it writes a query, and on every
    shipped task that query is the gold one, so each question states all its gold needs."""
    from ehrbench.benchmarks.clinsql.reference import read_question

    for task in load_tasks(PROJECT_TASKS):
        assert read_question(task.question, task.scenario, task.difficulty).sql == task.gold_sql, task.key


def test_a_question_that_leaves_a_choice_unstated_cannot_be_read_to_its_gold():
    """The check can fail: a question whose statistic, concept or window is not stated reads to another query or to
    none (then the reference answers without SQL and scores 0)."""
    from ehrbench.benchmarks.clinsql.reference import Unread, read_question

    tasks = load_tasks(PROJECT_TASKS)
    easy = next(t for t in tasks if t.key.startswith("Vital_Signs_Monitoring/easy"))
    stat = next(s for s in ("median", "75th percentile", "25th percentile", "90th percentile") if s in easy.question)
    with pytest.raises(Unread):
        read_question(easy.question.replace(stat, "typical value"), easy.scenario, easy.difficulty)
    medium = next(t for t in tasks if t.key.startswith("Vital_Signs_Monitoring/medium"))
    hours = "48 hours" if "48 hours" in medium.question else "24 hours"
    other = medium.question.replace(hours, "24 hours" if hours == "48 hours" else "48 hours")
    assert read_question(other, medium.scenario, medium.difficulty).sql != medium.gold_sql


def _offline_episode(small_world, task):
    """The benchmark's own tools and scorer for a task of the small world, graded offline (the documented rules)."""
    import yaml

    from ehrbench.benchmark import Hosts, TrialSettings
    from ehrbench.benchmarks.clinsql.benchmark import ClinSqlBenchmark
    from ehrbench.db import open_database
    from ehrbench.llm.usage import UsageMeter
    from ehrbench.runtime.hosts import LocalHost

    options = {**yaml.safe_load((ROOT / "conf" / "benchmark" / "clinsql.yaml").read_text()),
               "task_dir": str(small_world / "tasks"), "grading": "offline", "sql_timeout_s": 20}
    [duck] = list((small_world / "gen").glob("mimic_iv-*.duckdb"))
    db = open_database(duck, "mimic_iv")
    settings = TrialSettings(benchmark="clinsql", benchmark_options=options, agent="reference", user="none")
    return ClinSqlBenchmark(options).episode(task, 0, Hosts({"mimic_iv": LocalHost(db)}, None), settings,
                                             UsageMeter(), 0), db


def _range(requirement):
    from ehrbench.benchmarks.clinsql.scoring import RANGE

    return sorted(float(x.replace(",", "")) for x in RANGE.search(requirement).groups())


def test_mutants_score_what_the_rubric_rules_say_on_paper(small_world):
    """Scripted models, each with one defect, through the real protocol (ClinSqlAgent), tools and offline grading.
    Expected (SQL, Exec) read on paper from the documented rules, for an easy task's tree (SQL categories: any
    critical leaf failed -> 0; results: format (sequential: csv, column, no NULL) weight 1, features weight 2, each
    column's validation sequential: plausible then acceptable): a value outside the acceptable range but plausible
    gives (1 + 2 * 1/2) / 3 = 2/3; an implausible one (1 + 0) / 3 = 1/3; a NULL (2/3 + 0) / 3 = 2/9."""
    from ehrbench.benchmarks.clinsql.agent import ReferenceAgent
    from ehrbench.llm.scripted import ScriptedCall
    from ehrbench.llm.usage import UsageMeter
    from ehrbench.trial import Limits

    task = next(t for t in load_tasks(small_world / "tasks") if t.difficulty == "easy" and len(t.gold_columns) == 1)
    [column] = task.gold_columns
    leaves = {leaf.id: leaf for leaf in task.results_tree.leaves()}
    plausible_hi = _range(leaves[f"{column}-plausible"].requirements)[1]
    acceptable_hi = _range(leaves[f"{column}-acceptable"].requirements)[1]
    assert acceptable_hi < plausible_hi
    sql = task.gold_sql

    def said(q):
        return f"Reasoning.\n```sql\n{q}\n```"
    hostile = said("ATTACH '/tmp/x.db' AS x")
    mutants = {   # name: (model replies, expected SQL score, Exec score, SQL attempts)
        "right": ([said(sql)], 1, 1, 1),
        "right, other formatting": ([said(" ".join(sql.split()).replace("SELECT", "select"))], 1, 1, 1),
        "right values, another query": ([said(f"SELECT * FROM ({sql.rstrip(';')}) AS x")], 0, 1, 1),
        "outside the acceptable range": ([said(f"SELECT {(acceptable_hi + plausible_hi) / 2} AS {column}")],
                                         0, 2 / 3, 1),
        "implausible": ([said(f"SELECT {plausible_hi + 1} AS {column}")], 0, 1 / 3, 1),
        "NULL": ([said(f"SELECT NULL AS {column}")], 0, 2 / 9, 1),
        "no SQL in its reply": (["   "], 0, 0, 0),
        "hostile every time": ([hostile] * 3, 0, 0, 3),
        "hostile, then right": ([hostile, said(sql)], 1, 1, 2),
        "crashes": ([RuntimeError("model bug")], 0, 0, 0),
        "its request refused (context overflow)": ([InfrastructureError("HTTP 400", agent_caused=True)], 0, 0, 0),
    }
    runs = {name: ClinSqlAgent(StubModel(*replies), None) for name, (replies, *_) in mutants.items()}
    runs["the reference (reads the question)"] = ReferenceAgent(task.scenario, task.difficulty,
                                                                ScriptedCall("agent", UsageMeter()))
    mutants["the reference (reads the question)"] = (None, 1, 1, 1)

    async def trial(agent):
        episode, db = _offline_episode(small_world, task)
        try:
            return await run_trial(task.key, 0, agent, None, episode.tools, episode.score, Limits(max_steps=7),
                                   opening=task.question)
        finally:
            db.close()
    for name, agent in runs.items():
        record = asyncio.run(trial(agent))
        _, sql_score, exec_score, attempts = mutants[name]
        parts = record.score_parts
        assert record.valid, (name, record.termination)
        assert (parts.get("offline_sql_score", 0.0), parts.get("offline_exec_score", 0.0)) == \
            pytest.approx((sql_score, exec_score)), (name, record.messages[-3:])
        assert record.reward == pytest.approx(exec_score) and parts.get("attempts", 0) == attempts, name
        assert "sql_score" not in parts and "exec_score" not in parts


# --- the main job -----------------------------------------------------------------------------------------------
def _main(args, cwd=ROOT, timeout=600):
    return subprocess.run([sys.executable, "-m", "ehrbench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_the_reference_scores_100_offline_through_ray_and_mlflow(small_world, ray_cluster, tmp_path):
    """No judge (the reference gets none under grader=auto): the rule checker and the syntax-tree grader decide, and
    the scores carry the offline_ names, not the paper's."""
    store = mlflow_store(tmp_path / "mlruns")
    out = _main(["benchmark=clinsql", f"benchmark.task_dir={small_world / 'tasks'}", f"data.scale={SCALE}",
                 "trials=1", f"data.root={small_world / 'gen'}", f"tracking.root={store}",
                 f"runtime.address={ray_cluster.address}", f"hydra.run.dir={tmp_path / 'out'}"])
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["clinsql"], output_format="list")
    m = run.data.metrics
    assert m["offline_sql_score"] == m["offline_exec_score"] == 100.0 and m["trials_valid"] == 18
    assert "sql_score" not in m and "exec_score" not in m
    assert m["easy/offline_sql_score"] == m["hard/offline_exec_score"] == \
        m["Vital_Signs_Monitoring/offline_exec_score"] == 100.0
    assert m["leaf_pass/sql/Patient_Cohort_Construction"] == 100.0
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"results_table.txt", "scores_by_difficulty.png"} <= artifacts
    [trace, *_] = mlflow.search_traces(locations=[run.info.experiment_id], return_type="list", max_results=5)
    leaves = [a for a in trace.info.assessments if a.name.startswith(("sql/", "results/"))]
    assert leaves and {a.source.source_type for a in leaves} == {"CODE"} and all(a.value == 1.0 for a in leaves)


def test_tasks_authored_for_another_world_stop_the_run_at_start(small_world, tmp_path):
    out = _main(["benchmark=clinsql", f"benchmark.task_dir={small_world / 'tasks'}", "data.scale=3",
                 f"data.root={tmp_path / 'gen'}", f"tracking.root={tmp_path / 'mlruns'}"], timeout=120)
    assert out.returncode != 0
    assert "manifest.json: these tasks come from the world seed 0 scale 2.0" in out.stderr
    assert "python -m ehrbench.benchmarks.clinsql.authoring --seed 0 --scale 3" in out.stderr


def _one_easy_task(small_world, tmp_path):
    """The first easy task, alone in a task folder of its own (with the world's manifest)."""
    task = next(t for t in load_tasks(small_world / "tasks") if t.difficulty == "easy")
    one = tmp_path / "tasks"
    shutil.copytree(small_world / "tasks" / task.scenario / "easy_level_queries" / task.task_id,
                    one / task.scenario / "easy_level_queries" / task.task_id)
    shutil.copy(small_world / "tasks" / "manifest.json", one)
    return task, one


def test_the_real_agent_and_llm_grader_through_the_fake_server(small_world, ray_cluster, tmp_path):
    """`benchmark=clinsql model=gemini-2.5-flash grader=gemini-2.5-flash` with the real google-genai client: a
    failing query, one refinement that runs, then the judge on every leaf, SQL and results, each asked exactly as
    the authors' scorer asks it (`original_prompt`), at temperature 0.2; one reply it cannot read scores as the
    original reads it (a "1" in it: a pass), never asked again.

    The database is given as a file of the user's own (`data.mimic_iv.path`: credentialed): the agent's server on
    loopback is local, the grader is declared zero_retention, and both are recorded; the same grader declared
    public (a gateway on your network that forwards to a provider) is refused before any request reaches it."""
    from ehrbench.benchmarks.clinsql.scoring import Candidate, original_prompt
    from ehrbench.benchmarks.clinsql.tasks import csv_text
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.schemas.duckdb_export import export_duckdb
    from ehrbench.world.generator import WorldSize

    from .fake_llm_server import FakeLLMServer, Reply

    task, one = _one_easy_task(small_world, tmp_path)
    wrong = task.gold_sql.replace("p.anchor_age", "p.anchor_agee", 1)
    n_sql, n_results = len(list(task.sql_tree.leaves())), len(list(task.results_tree.leaves()))
    server = FakeLLMServer().start()
    try:   # agent and grader share the model: the agent's two calls come first, then the grader's (one trial)
        server.push(Reply(text=f"Reasoning: first try.\n```sql\n{wrong}\n```"),
                    Reply(text=f"Reasoning: the column is anchor_age.\n```sql\n{task.gold_sql}\n```"),
                    Reply(text="Seems fine, 1"),               # unreadable: a "1" in it, so a pass
                    *[Reply(text="Score: 1\nExplanation: matches the requirement.")
                      for _ in range(n_sql + n_results - 1)],
                    model="gemini-2.5-flash")
        store = mlflow_store(tmp_path / "mlruns")
        own = export_duckdb("mimic_iv", build_database("mimic_iv", WorldSpec(size=WorldSize(scale=SCALE)),
                                                       small_world / "gen"))
        command = ["benchmark=clinsql", f"benchmark.task_dir={one}", f"data.scale={SCALE}", "trials=1",
                   "model=gemini-2.5-flash", f"+model.base_url={server.url}", "grader=gemini-2.5-flash",
                   f"+grader.model.base_url={server.url}", f"data.root={small_world / 'gen'}",
                   f"data.mimic_iv.path={own}", f"tracking.root={store}", f"runtime.address={ray_cluster.address}",
                   f"hydra.run.dir={tmp_path / 'out'}"]
        refused = _main([*command, "grader.model.data_handling=public"])
        assert refused.returncode == 2 and "the grader role calls gemini-2.5-flash at 127.0.0.1, a public" in \
            refused.stderr and not server.requests, refused.stderr[-2000:]
        out = _main([*command, "grader.model.data_handling=zero_retention"])
        requests = server.requests_for("gemini-2.5-flash")
        prompts = [r.body["contents"][-1]["parts"][0]["text"] for r in requests]
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Clinical question:" in prompts[0] and "failed to run" not in prompts[0]
    assert "anchor_agee" in prompts[1] and "failed to run" in prompts[1]        # the refinement prompt
    error = prompts[1].split("BigQuery error message:\n")[1].split("\n\nYour output")[0]
    assert error.startswith("Binder Error: ") and "anchor_agee" in error and "LINE 1:" in error   # DuckDB's words,
    assert "ray::" not in error and "\x1b" not in error and "File \"" not in error   # whole, through the actor
    candidate = Candidate(clean_sql_response(f"```sql\n{task.gold_sql}\n```"), True, task.gold_columns,
                          [list(r) for r in task.gold_rows])
    gold_csv = csv_text(task.gold_columns, task.gold_rows)
    expected = [original_prompt(leaf, kind, task.question, candidate, task.gold_sql, gold_csv)
                for kind, tree in (("sql", task.sql_tree), ("results", task.results_tree)) for leaf in tree.leaves()]
    assert sorted(prompts[2:]) == sorted(expected)                   # every leaf asked, as the original asks it
    assert all(r.body["generationConfig"]["temperature"] == 0.2 and r.body["generationConfig"]["maxOutputTokens"]
               == 1024 for r in requests[2:])
    agent = requests[0].body["generationConfig"]                       # Gemini 2.5's, as the original's table
    thinking = agent["thinkingConfig"]
    assert (agent["temperature"], agent["topP"], agent["seed"], agent["maxOutputTokens"]) == (1.0, 1.0, 0, 65_535)
    assert thinking.get("thinkingBudget", thinking.get("thinking_budget")) == -1
    assert all("seed" not in r.body["generationConfig"] for r in requests[2:])   # the judge: no seed there
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["clinsql"], output_format="list")
    m = run.data.metrics
    assert m["sql_score"] == m["exec_score"] == 100.0
    assert (m["calls/agent"], m["calls/grader"]) == (2, n_sql + n_results)
    assert m["cost_usd/grader"] > 0
    where = {k: v for k, v in run.data.params.items() if k.startswith(("data_use.", "data_handling."))}
    assert where == {"data_use.mimic_iv": "credentialed", "data_handling.agent": "local",
                     "data_handling.grader": "zero_retention"}
    assert run.data.tags["ehrbench.data_use"] == "credentialed" and run.data.tags[
        "ehrbench.data_handling.grader"] == "zero_retention"
    assert run.data.tags["mlflow.note.content"].endswith(
        "Data: mimic_iv credentialed; models: agent local, grader zero_retention.")
    [trace] = mlflow.search_traces(locations=[run.info.experiment_id], return_type="list")
    judged = [a for a in trace.info.assessments if a.name.startswith(("sql/", "results/"))]
    assert len(judged) == n_sql + n_results and {a.source.source_type for a in judged} == {"LLM_JUDGE"}
    assert {a.rationale for a in judged} == {"matches the requirement.", "Seems fine, 1"}


# --- the authors' judge and extractor, run on shared inputs (tests/fixtures/clinsql_judge_cases.json) ------------
JUDGE = json.loads((Path(__file__).parent / "fixtures" / "clinsql_judge_cases.json").read_text())


def test_each_role_is_sent_its_originals_parameters_by_gpt_5_mini_and_gemini_2_5_flash(small_world, ray_cluster,
                                                                                     tmp_path):
    """`benchmark=clinsql model=<m>`, m writing the SQL and judging it: the agent sends the inference code's
    settings for that family, the judge the rubric scorer's (`wire.EXPECTED`)."""
    from .fake_llm_server import Reply
    from .wire import role_by, run_with_every_role_on

    task, one = _one_easy_task(small_world, tmp_path)
    run_with_every_role_on(
        "clinsql", ["benchmark=clinsql", f"benchmark.task_dir={one}", f"data.scale={SCALE}", "trials=1",
                    "grader=gemini-2.5-flash", f"data.root={small_world / 'gen'}",
                    f"tracking.root={mlflow_store(tmp_path / 'mlruns')}", f"runtime.address={ray_cluster.address}"],
        role_by(("grader", "You are an expert clinical data QA judge"), tools=None, otherwise="agent"), tmp_path,
        roles=("grader",), defaults={"agent": Reply(text=f"Reasoning: as asked.\n```sql\n{task.gold_sql}\n```"),
                                     "grader": Reply(text="Score: 1\nExplanation: matches the requirement.")})


def _csv_candidate(sql: str, text: str) -> Candidate:
    """A candidate whose saved CSV is `text` (the null CSV: a failed query)."""
    import csv
    import io

    from ehrbench.benchmarks.clinsql.scoring import NULL_CSV

    if text.replace("\r\n", "\n") == NULL_CSV:
        return Candidate(sql, False, error="failed")
    columns, *rows = list(csv.reader(io.StringIO(text)))
    return Candidate(sql, True, tuple(columns), [[None if v == "" else v for v in r] for r in rows])


@pytest.mark.parametrize("case", JUDGE["prompts"], ids=lambda c: c["case"])
def test_the_judge_is_asked_exactly_as_the_authors_scorer_asks(case):
    """`original_prompt` against _build_prompt's output on the same sample folder: the question, the candidate SQL
    (none for an empty file), every row of its CSV read back by pandas (NaN for an empty cell, ints with a gap as
    floats, non-ASCII escaped), the one-column null CSV for a failed query, the gold parts when gold files exist."""
    import pandas

    from ehrbench.benchmarks.clinsql.scoring import original_prompt
    from ehrbench.benchmarks.clinsql.rubric import Node

    files = case["files"]
    pick = lambda prefix: next((v for k, v in files.items() if k.startswith(prefix)), None)  # noqa: E731
    candidate = _csv_candidate((pick("sql_") or "").strip(), pick("result_"))
    gold_sql = files.get("gold_sql.sql")
    prompt = original_prompt(Node("leaf", case["requirements"]), case["evaluation_type"],
                             (pick("query_") or "").strip(), candidate, gold_sql.strip() if gold_sql else None,
                             files.get("gold_results.csv"))
    expected = case.get("prompt_pandas3") if pandas.__version__.startswith("3") else case["prompt"]
    assert prompt == (expected or case["prompt"])


@pytest.mark.parametrize("case", JUDGE["replies"], ids=lambda c: repr(c["reply"])[:40])
def test_the_judge_s_reply_is_read_as_the_authors_scorer_reads_it(case):
    from ehrbench.benchmarks.clinsql.scoring import parse_original

    assert parse_original(case["reply"]) == (case["score"], case["explanation"])


@pytest.mark.parametrize("case", JUDGE["extraction"], ids=lambda c: repr(c["reply"])[:40])
def test_the_sql_is_extracted_as_the_authors_extractor_extracts_it(case):
    assert clean_sql_response(case["reply"]) == case["sql"]


def test_a_model_is_never_scored_by_rules_alone_unless_asked(small_world, tmp_path):
    """grader=none with a model stops at start naming both fixes; grader=auto (the default) brings the paper's
    judge, gpt-5-chat, whose missing key stops the run at start too."""
    common = ["benchmark=clinsql", f"benchmark.task_dir={small_world / 'tasks'}", f"data.scale={SCALE}",
              "model=gemini-2.5-flash", "+model.base_url=http://127.0.0.1:9", f"data.root={small_world / 'gen'}",
              f"tracking.root={tmp_path / 'mlruns'}", f"hydra.run.dir={tmp_path / 'out'}"]
    env = {**{k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}, "GEMINI_API_KEY": "fake"}
    none = subprocess.run([sys.executable, "-m", "ehrbench", *common, "grader=none"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**env, "HF_HUB_OFFLINE": "1"})
    assert none.returncode != 0 and "grader=gpt-5-chat" in none.stderr and "benchmark.grading=offline" in none.stderr
    auto = subprocess.run([sys.executable, "-m", "ehrbench", *common], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**env, "HF_HUB_OFFLINE": "1"})
    assert auto.returncode != 0 and "gpt-5-chat" in auto.stderr and "OPENAI_API_KEY" in auto.stderr


def test_the_prompts_carry_the_authors_schema_reference_under_the_original_contract():
    """The authors' mimic4_schema.txt word for word (its 31 tables, its `datetimesevents` spelling, its notes, no
    mimiciv_derived), placed as their generation prompt places it; ehrbench's own is the rendering's tables."""
    from ehrbench.benchmarks.clinsql.prompts import generation_prompt, schema_text

    original = schema_text("original")
    assert len(original) == 6088 and original.count("\n## ") + original.startswith("## ") == 31
    assert "## datetimesevents" in original and "mimiciv_derived" not in original
    assert original.splitlines()[-1].startswith("- **interpretation (microbiology)**")
    prompt = generation_prompt("Q?", original)
    assert f"\n\nMIMIC-IV Schema Reference (HOSP + ICU):\n{original}\n\nClinical question:\n\"Q?\"" in prompt
    assert schema_text("ehrbench") != original and "## age" not in schema_text("ehrbench")


# --- rescoring a finished run (`ehrbench-report rescore`) ---------------------------------------------------------
def _rescore(store, *args):
    return subprocess.run([sys.executable, "-m", "ehrbench.report", "rescore", *args,
                           f"--tracking-uri=sqlite:///{store / 'mlflow.db'}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_a_rescore_gives_the_scores_a_run_with_the_new_option_gets_and_asks_no_model(small_world, ray_cluster,
                                                                                     tmp_path):
    """A judged run (the judge fails every leaf) scored again with the checker on equals a fresh run with the checker
    on, with no request reaching the fake server; a changed judge prompt finds no recorded reply unless the judge is
    asked again (then exactly its leaves are asked); a change to the agent's prompt is refused as a new run."""
    from .fake_llm_server import FakeLLMServer, Reply

    task, one = _one_easy_task(small_world, tmp_path)
    n_leaves = len(list(task.sql_tree.leaves())) + len(list(task.results_tree.leaves()))
    server = FakeLLMServer().start()
    server.defaults["gemini-2.5-flash"] = Reply(text=f"Reasoning: direct.\n```sql\n{task.gold_sql}\n```")
    server.defaults["gpt-5-chat-latest"] = Reply(text="Score: 0\nExplanation: not met.")
    store = mlflow_store(tmp_path / "mlruns")
    common = ["benchmark=clinsql", f"benchmark.task_dir={one}", f"data.scale={SCALE}", "trials=2",
              "model=gemini-2.5-flash", f"+model.base_url={server.url}", "grader=gpt-5-chat",
              f"grader.model.base_url={server.url}", f"data.root={small_world / 'gen'}", f"tracking.root={store}",
              f"runtime.address={ray_cluster.address}"]
    try:
        judged = _main([*common, f"hydra.run.dir={tmp_path / 'a'}"])
        assert judged.returncode == 0, judged.stderr[-3000:]
        checked = _main([*common, "benchmark.leaf_checker=true", f"hydra.run.dir={tmp_path / 'b'}"])
        assert checked.returncode == 0, checked.stderr[-3000:]
        mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
        runs = mlflow.search_runs(experiment_names=["clinsql"], output_format="list", order_by=["start_time ASC"])
        run_a, run_b = (r.data for r in runs)
        assert run_a.metrics["exec_score"] != run_b.metrics["exec_score"]      # the option changes the score
        sent = len(server.requests)

        out = _rescore(store, runs[0].info.run_id[:8], "benchmark.leaf_checker=true")
        assert out.returncode == 0, out.stderr[-3000:]
        assert len(server.requests) == sent                                     # no model call
        [rescored] = [r for r in mlflow.search_runs(experiment_names=["clinsql"], output_format="list")
                      if r.data.tags.get("ehrbench.rescored_from") == runs[0].info.run_id]
        for metric in ("exec_score", "sql_score"):
            assert rescored.data.metrics[metric] == run_b.metrics[metric], metric
        assert rescored.data.metrics["rescore/model_calls"] == 0
        assert rescored.data.metrics["rescore/trials_replayed"] == 2
        assert rescored.data.metrics["calls/grader"] == run_a.metrics["calls/grader"]   # what the trials cost

        out = _rescore(store, runs[0].info.run_id, "benchmark.judge_gold=false")   # the judge's prompt changes
        assert out.returncode == 2 and "--graders ask" in out.stderr, out.stderr[-2000:]
        assert len(server.requests) == sent
        out = _rescore(store, runs[0].info.run_id, "benchmark.judge_gold=false", "--graders", "ask")
        assert out.returncode == 0, out.stderr[-3000:]
        asked = server.requests[sent:]
        assert len(asked) == 2 * n_leaves and all(r.body["model"] == "gpt-5-chat-latest" for r in asked)
        assert all("Reference SQL" not in r.body["messages"][-1]["content"] for r in asked)

        out = _rescore(store, runs[0].info.run_id, "benchmark.schema_in_prompt=false")   # what the agent sees
        assert out.returncode == 2 and "differs from the recorded one" in out.stderr, out.stderr[-2000:]
        out = _rescore(store, runs[0].info.run_id, "model=gpt-4o")
        assert out.returncode == 2 and "changes the trials themselves" in out.stderr
    finally:
        server.stop()
