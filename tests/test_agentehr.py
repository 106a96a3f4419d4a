"""AgentEHR: the tools' strings and limits over the censored patient, F1 / Best@K / the error taxonomy, the ReAct
loop (finish, think, forced termination), and the main job (the reference at F1 = 1 through Ray and MLflow; ReAct
with the real OpenAI client through the fake server)."""
from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from ehrbench.benchmarks.agentehr.agent import ReActAgent, first_message
from ehrbench.benchmarks.agentehr.knowledge import Knowledge
from ehrbench.benchmarks.agentehr.patient_db import split_patients
from ehrbench.benchmarks.agentehr.scoring import best_at_k, f1, interaction_errors, parse_prediction
from ehrbench.benchmarks.agentehr.tasks import make_samples, write_candidates
from ehrbench.benchmarks.agentehr.tools import PAPER_TOOLS, AgentEhrTools, limit_output
from ehrbench.benchmarks.agentehr.views import InProcess, PatientViews
from ehrbench.llm.base import ChatResponse
from ehrbench.schemas import WorldSpec, build_database
from ehrbench.trial import Message, ToolCall, run_trial
from ehrbench.world.generator import WorldSize

from .conftest import mlflow_store

ROOT = Path(__file__).resolve().parents[1]
SPEC = WorldSpec(seed=4, size=WorldSize(mimic_patients=30, eicu_patients=0, eicu_hospitals=1), dictionary="used")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("agentehr_tools")
    source = build_database("mimic_iv", SPEC, root)
    folder = split_patients(source, root)
    write_candidates(source, folder / "candidates.db")
    return folder, make_samples(source), source


async def _fake_embed(table, names, query, k):
    return sorted(((n, 1.0 if query.lower() in n.lower() else 0.2) for n in names), key=lambda x: -x[1])[:k]


def _tools(world, sample):
    folder = world[0]
    return AgentEhrTools(InProcess(PatientViews({"mimic_iv": folder})), folder / "candidates.db", sample["subject_id"],
                         sample["prediction_time"], _fake_embed, Knowledge())


def run(coro):
    return asyncio.run(coro)


def test_the_tools_keep_the_original_s_names_strings_and_limits(world):
    sample = max(world[1]["diagnoses_ccs"], key=lambda s: len(s["label"]))
    tools, subject = _tools(world, sample), str(sample["subject_id"])
    assert len(PAPER_TOOLS) == 19
    assert run(tools.call("get_table_names", {"subject_id": subject})).startswith("Error: No EHR data loaded")
    wrong = run(tools.call("load_ehr", {"subject_id": "1", "timestamp": sample["prediction_time"]}))
    assert "not this task's patient" in wrong
    loaded = run(tools.call("load_ehr", {"subject_id": subject, "timestamp": sample["prediction_time"]}))
    assert loaded.startswith("Loading Candidate Tables:") and " - Loading 'labevents' with " in loaded
    names = run(tools.call("get_table_names", {"subject_id": subject}))
    assert names.startswith("Available Tables:\n\nEHR Tables:\n") and "diagnoses_ccs_candidates" in names
    many = run(tools.call("get_unique_values", {"subject_id": subject, "table_name": "labevents",
                                                "column_name": "labevent_id"}))
    assert many.startswith("Error: The column 'labevent_id' has ") and "Here are the first 10 examples: [" in many
    assert run(tools.call("get_unique_values", {"subject_id": subject, "table_name": "admissions",
                                                "column_name": "insurance"})).startswith("['")
    cand = run(tools.call("get_records_by_keyword", {"subject_id": subject, "table_name": "diagnoses_ccs_candidates",
                                                     "keyword": "heart"}))
    assert cand == ("Error: The tool `get_records_by_keyword` cannot be used to search the Candidate Table: "
                    "`diagnoses_ccs_candidates`.")
    sql = run(tools.call("run_sql_query", {"subject_id": subject, "sql_query": "SELECT COUNT(*) AS n FROM labevents"}))
    assert sql.split()[0] == "n"
    assert run(tools.call("run_sql_query", {"subject_id": subject, "sql_query": "SELEC * FROM labevents"})) == (
        "SQL Execution Error: Execution failed on sql 'SELEC * FROM labevents': near \"SELEC\": syntax error")
    assert run(tools.call("run_sql_query", {"subject_id": subject, "sql_query": "SELECT 1"})).startswith(
        "Error: The SQL query does not seem to reference any available tables. Available tables: ['")
    assert run(tools.call("run_sql_query", {"subject_id": subject, "sql_query": "SELECT * FROM labevents WHERE 0"})
               ) == "Query executed successfully but returned no results."
    # the labelled diagnoses are coded at discharge, after the prediction time: not there yet
    assert run(tools.call("run_sql_query", {"subject_id": subject, "sql_query": f"SELECT * FROM diagnoses_icd "
                                            f"WHERE hadm_id = {sample['hadm_id']}"})).startswith("Query executed")
    fuzzy = run(tools.call("get_candidates_by_fuzzy_matching", {"table_name": "diagnoses_ccs_candidates",
                                                                "keywords": ["heart failur"]}))
    assert fuzzy.startswith("--- Results for keyword 'heart failur' (threshold: 0, limit: 5) ---")
    assert "similarity_score" in fuzzy and len(fuzzy.strip().splitlines()) == 7
    semantic = run(tools.call("get_candidates_by_semantic_similarity", {"table_name": "diagnoses_ccs_candidates",
                                                                        "query": "Septicemia"}))
    assert "Found 1 unique candidate names (threshold: 0.5, limit: 5)" in semantic
    knowledge = run(tools.call("retrieve_pubmed", {"query": "sepsis antibiotics"}))
    assert knowledge.startswith("[ehrbench substitute for the PubMed corpus") and "Document [0] (Title: " in knowledge
    assert run(tools.call("get_records_by_time", {"subject_id": subject})).startswith("Error executing tool")
    assert run(tools.call("nope", {})) == "Error: Unknown tool 'nope'."
    assert limit_output("x" * 9000).endswith("... (totally 9000 str, and has been cut to 8000 str)")
    run(tools.close())


def test_model_sql_meets_the_time_size_and_row_limits(world, monkeypatch):
    import ehrbench.benchmarks.agentehr.tools as tools_module

    monkeypatch.setattr(tools_module, "SQL_TIMEOUT_S", 0.5)
    monkeypatch.setattr(tools_module, "MAX_ROWS", 1000)
    sample = world[1]["labevents"][0]
    tools, subject = _tools(world, sample), str(sample["subject_id"])
    run(tools.call("load_ehr", {"subject_id": subject, "timestamp": sample["prediction_time"]}))

    def sql(text):                     # the original runs a query only if it names a table (a substring will do)
        return run(tools.call("run_sql_query", {"subject_id": subject, "sql_query": text + " -- patients"}))
    endless = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r"
    assert sql(endless) == (f"SQL Execution Error: Execution failed on sql '{endless} -- patients': query exceeded "
                            "the 0.5 s time limit and was stopped")
    assert "1,000,000-byte limit on one value" in sql("SELECT hex(zeroblob(5000000))")
    assert "more than 1,000 rows" in sql("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
                                         "WHERE n < 5000) SELECT n FROM r")
    assert sql("DELETE FROM labevents").startswith("SQL Execution Error: Execution failed on sql 'DELETE FROM "
                                                   "labevents -- patients': not authorized")
    assert sql("SELECT COUNT(*) AS n FROM labevents").split()[0] == "n"        # the connection is still usable
    run(tools.close())


def test_f1_best_at_k_and_the_taxonomy():
    assert f1(["Septicemia (except in labor)", "x"], ["septicemia (except in labor)"]) == \
        {"f1": pytest.approx(2 / 3), "precision": 0.5, "recall": 1.0}
    assert f1([], ["a"])["f1"] == 0.0
    assert parse_prediction('```json\n["A", "B"]\n```') == ["A", "B"]
    assert parse_prediction('I think [{"name": "A"}] is right') == ["A"]
    assert parse_prediction("__import__('os').system('x')") == []          # never eval
    assert parse_prediction("['A', \"it's B\"]") == ["A", "it's B"]          # a Python literal, read as one
    assert parse_prediction("[__import__('os').getcwd()]") == []
    assert parse_prediction('["a]b", "c"]') == ["a]b", "c"]                 # the original stopped at the first ]
    assert best_at_k([0.2, 0.4, 0.6], 1) == pytest.approx(0.4)
    assert best_at_k([0.2, 0.4, 0.6], 2) == pytest.approx((0.4 * 1 + 0.6 * 2) / 3)
    assert best_at_k([0.2, 0.4, 0.6], 3) == pytest.approx(0.6)
    same = [("get_latest_records", {"table_name": "labevents"}, "x")] * 5
    e = interaction_errors(same, [])
    assert e["tool_repeat"] == 1 and e["no_prediction"] == 1 and e["single_tool_loop"] == 0
    loop = [("get_records_by_keyword", {"table_name": "labevents", "keyword": f"creatinine {i % 2}"}, "")
            for i in range(10)]
    assert interaction_errors(loop, ["a"])["single_tool_loop"] == 1
    assert interaction_errors([("nope", {}, "Error: Unknown tool 'nope'.")], ["a"])["tool_usage_error"] == 1
    assert interaction_errors([("finish", {}, "Error: malformed tool call: bad JSON")], ["a"])["tool_usage_error"] == 1
    missing = "Error: Column 'foo' not found in table 'labevents'."          # bad arguments: the paper's appendix E
    assert interaction_errors([("get_records_by_value", {}, missing)], ["a"])["tool_usage_error"] == 1
    assert interaction_errors([("think", {}, "Thinking Finish")], ["a"])["tool_usage_error"] == 0
    loads = [("load_ehr", {"subject_id": "1"}, "Loading")] + [("get_latest_records", {"table_name": "x"}, "")] * 4
    assert interaction_errors(loads, ["a"])["tool_repeat"] == 0            # the agent's own load is not the model's
    assert interaction_errors([("think", {"response": "x"}, "")], ["a"])["no_candidate_tool"] == 1


class ScriptModel:
    """Replies from a list; records each request's tools."""

    def __init__(self, *replies):
        self.replies, self.requests = list(replies), []

    async def complete(self, request):
        self.requests.append(request)
        return self.replies.pop(0)


def _call(name, **args):
    return ChatResponse(tool_calls=[ToolCall(name, args, f"c{name}")])


def test_react_loads_first_finishes_with_a_list_and_turns_text_into_think(world):
    sample = world[1]["transfers"][0]
    tools = _tools(world, sample)
    subject = str(sample["subject_id"])
    model = ScriptModel(_call("get_table_names", subject_id=subject), *[ChatResponse(text="Let me think.")] * 5,
                        _call("finish", response=["Medicine", "Surgery"]))
    agent = ReActAgent(model, sample["subject_id"], sample["prediction_time"])
    record = run(run_trial("k", 0, agent, None, tools, lambda r: asyncio.sleep(0, 0.0),
                           opening=first_message("transfers", sample["subject_id"], sample["prediction_time"])))
    names = [m["tool_call"]["name"] for m in record.messages if m.get("tool_call")]
    assert names == ["load_ehr", "get_table_names", "think"]       # five replies without a call, one think step
    assert len(model.requests) == 7 and all(r.messages == model.requests[1].messages for r in model.requests[1:6])
    assert record.messages[-1]["content"] == "['Medicine', 'Surgery']"      # str(response), as the original kept it
    assert record.messages[0]["content"].startswith("<agent_instruction>")
    assert f"Patient Subject ID: {sample['subject_id']}" in record.messages[0]["content"]
    offered = {t["name"] for t in model.requests[0].tools}                  # knowledge off: MedRAG cannot ship
    assert offered == {t for t in PAPER_TOOLS if not t.startswith("retrieve_")} and len(offered) == 15
    assert {t["name"] for t in ReActAgent(model, 1, "2150-01-01 00:00:00", knowledge=True).tools} == set(PAPER_TOOLS)


def test_an_observation_repeated_five_times_forces_the_finish(world):
    sample = world[1]["transfers"][0]
    tools, subject = _tools(world, sample), str(sample["subject_id"])
    model = ScriptModel(*[_call("get_table_names", subject_id=subject) for _ in range(6)],
                        _call("finish", response=["Medicine"]))
    agent = ReActAgent(model, sample["subject_id"], sample["prediction_time"])
    record = run(run_trial("k", 0, agent, None, tools, lambda r: asyncio.sleep(0, 0.0), opening="q"))
    assert all(len(r.tools) > 1 for r in model.requests[:6])       # five alike (four repeats) go on
    last = model.requests[-1]                                        # six alike: the original's max_same_steps 5
    assert len(model.requests) == 7 and [t["name"] for t in last.tools] == ["finish"]
    assert "MAX_TURNS_REACHED" in last.messages[-1].content
    assert record.messages[-1]["content"] == "['Medicine']"


def test_finish_answers_as_the_original_read_them_and_empty_replies_think(world):
    from ehrbench.benchmarks.agentehr.agent import answer

    assert answer(["A", "B"]).content == "['A', 'B']"                       # str(response), as MCPAgent kept it
    assert answer('["A", "B"]').content == '["A", "B"]'
    assert answer([{"name": "A"}]).content == "[{'name': 'A'}]"
    assert answer("Medicine").content == "Medicine" and answer(None).content == "[]"
    sample = world[1]["transfers"][0]
    model = ScriptModel(*[ChatResponse(text="")] * 5, _call("finish", response='["Medicine"]'))
    agent = ReActAgent(model, sample["subject_id"], sample["prediction_time"])
    record = run(run_trial("k", 0, agent, None, _tools(world, sample), lambda r: asyncio.sleep(0, 0.0), opening="q"))
    assert [m["tool_call"]["name"] for m in record.messages if m.get("tool_call")] == ["load_ehr", "think"]
    assert record.messages[-1]["content"] == '["Medicine"]'


class Refusing:
    """A summarizer whose provider refuses the request for its size (the agent's doing)."""

    def __init__(self):
        self.requests = []

    async def complete(self, request):
        from ehrbench.trial import InfrastructureError

        self.requests.append(request)
        raise InfrastructureError("413: request too large", source="model", agent_caused=True)


def test_the_cap_deletes_the_oldest_steps_for_good_and_the_summarizer_reads_what_is_left(world):
    """Past the cap the oldest step after the load goes (a call with its result), for good, as the original deletes
    messages[3] in place: the next model call and the summary prompt both lack it; the first message, the load, the
    summary note and the newest step stay."""
    from ehrbench.benchmarks.agentehr.agent import SummarizingAgent
    from ehrbench.llm.tokens import Estimate

    sample = world[1]["transfers"][0]
    tools, subject = _tools(world, sample), str(sample["subject_id"])
    tables = ("labevents", "chartevents", "admissions", "transfers", "services", "omr", "emar", "icustays",
              "pharmacy", "prescriptions", "labevents", "chartevents")
    model = ScriptModel(*[_call("get_records_by_keyword", subject_id=subject, table_name=t, keyword=f"zq{i}x")
                          for i, t in enumerate(tables)], _call("finish", response=["Medicine"]))
    summarizer = ScriptModel(ChatResponse(text="<summary>on a ward</summary>"),
                             ChatResponse(text="<summary>qqlastqq</summary>"))
    agent = SummarizingAgent(model, summarizer, "retrosum", "transfers", sample["subject_id"],
                             sample["prediction_time"], every=10, tokens=Estimate())
    counter = Estimate()
    opening = first_message("transfers", sample["subject_id"], sample["prediction_time"])
    start = counter.count([Message("user", opening)], agent.tools)
    agent.max_context_tokens = start + 1300       # the opening, the load and about four short steps
    record = run(run_trial("k", 0, agent, None, tools, lambda r: asyncio.sleep(0, 0.0), opening=opening))
    assert record.messages[-1]["content"] == "['Medicine']"
    for r in model.requests:          # under the cap, or nothing left to delete but the newest step
        calls = [m for m in r.messages if m.tool_call]
        assert counter.count(r.messages, r.tools) <= agent.max_context_tokens or len(calls) == 2, r.messages
    keywords = [[m.tool_call.arguments.get("keyword") for m in r.messages if m.tool_call] for r in model.requests]
    assert keywords[0] == [None]                                     # the load alone
    last = keywords[-1]
    assert last == [None, "zq11x"]                                   # the oldest went, the newest stayed
    for before, after in zip(keywords, keywords[1:]):                # deleted for good: never shown again
        gone = [k for k in before if k not in after]
        assert all(k not in later for later in keywords[keywords.index(after):] for k in gone)
    summary_prompt = summarizer.requests[0].messages[0].content      # after step 9: only what the model was shown
    shown_then = keywords[8] + ["zq8x"]          # the last call before it (load and steps 0-7, less what went), step 8
    assert 2 < len(keywords[8]) < 9
    assert all((f"zq{i}x" in summary_prompt) == (f"zq{i}x" in shown_then) for i in range(9))
    final_note = [m for m in model.requests[-1].messages if "Below is a summary" in (m.content or "")]
    assert len(final_note) == 1 and "on a ward" in final_note[0].content     # the note is never deleted
    assert len(summarizer.requests) == 2 and "qqlastqq" not in str(model.requests)   # RetroSum's summary after finish

    refused = SummarizingAgent(ScriptModel(*[_call("get_table_names", subject_id=subject)] * 10,
                                           _call("finish", response=["Medicine"])), Refusing(), "retrosum",
                               "transfers", sample["subject_id"], sample["prediction_time"], every=10)
    record = run(run_trial("k", 1, refused, None, tools, lambda r: asyncio.sleep(0, 0.0), opening=opening))
    assert record.messages[-1]["content"] == "['Medicine']" and refused.refused_summaries == 2
    assert refused.summary is None                                   # no summary, the trial goes on and is scored


def _history_baseline(source, task: str, sample: dict) -> list[str]:
    """What "the same as last time" predicts, written from the raw database and the original's censoring on paper
    (a table is cut by its first time column, strictly before t; a date-only column counts from 23:59 of its day),
    with CCS and ATC names from the vocabulary files, not the candidate tables."""
    from ehrbench.benchmarks.agentehr.tasks import _atc, ccs_name

    db, t, subject = sqlite3.connect(source), sample["prediction_time"], sample["subject_id"]

    def rows(sql, *args):
        return db.execute(sql, (subject, *args)).fetchall()
    if task == "diagnoses_ccs":         # charttime: the admission's discharge less a minute (the original adds it)
        seen = rows("SELECT a.hadm_id FROM admissions a WHERE a.subject_id = ? AND a.admittime < ?1 AND "
                    "datetime(a.dischtime, '-1 minute') < ?2 AND EXISTS (SELECT 1 FROM diagnoses_icd d WHERE "
                    "d.hadm_id = a.hadm_id) ORDER BY a.admittime DESC LIMIT 1".replace("?1", "?").replace("?2", "?"),
                    t, t)
        codes = rows("SELECT icd_code, icd_version FROM diagnoses_icd WHERE subject_id = ? AND hadm_id = ?",
                     seen[0][0]) if seen else []
        names = [ccs_name("diagnoses", v, c) for c, v in codes]
    elif task == "procedures_ccs":      # chartdate: date-only, so 23:59 of its day
        days = rows("SELECT MAX(date(chartdate)) FROM procedures_icd WHERE subject_id = ? AND "
                    "datetime(date(chartdate), '+23 hours', '+59 minutes') < ?", t)
        codes = rows("SELECT icd_code, icd_version FROM procedures_icd WHERE subject_id = ? AND date(chartdate) = ?",
                     days[0][0])
        names = [ccs_name("procedures", v, c) for c, v in codes]
    elif task == "labevents":
        names = [n for (n,) in rows("SELECT d.label FROM labevents l JOIN d_labitems d USING (itemid) WHERE "
                                    "l.subject_id = ? AND l.charttime = (SELECT MAX(charttime) FROM labevents WHERE "
                                    "subject_id = ?1 AND charttime < ?)".replace("?1", "?"), subject, t)]
    elif task == "prescriptions":
        names = [(_atc((0, 0, 0, d)) or {}).get("name") for (d,) in rows(
            "SELECT drug FROM prescriptions WHERE subject_id = ? AND starttime = (SELECT MAX(starttime) FROM "
            "prescriptions WHERE subject_id = ?1 AND starttime < ?)".replace("?1", "?"), subject, t)]
    elif task == "microbiologyevents":  # chartdate is the first time column; date-only unless it holds a time
        sample_values = [v for (v,) in rows("SELECT chartdate FROM microbiologyevents WHERE subject_id = ? AND "
                                            "chartdate IS NOT NULL LIMIT 10")]
        date_only = not any(len(v) > 10 and " " in v for v in sample_values)
        seen_at = "datetime(date(chartdate), '+23 hours', '+59 minutes')" if date_only else "datetime(chartdate)"
        day = rows(f"SELECT MAX(date(chartdate)) FROM microbiologyevents WHERE subject_id = ? AND {seen_at} < ?", t)
        names = [n for (n,) in rows("SELECT test_name FROM microbiologyevents WHERE subject_id = ? AND "
                                    "date(chartdate) = ?", day[0][0])]
    else:
        names = [n for (n,) in rows("SELECT careunit FROM transfers WHERE subject_id = ? AND intime < ? AND "
                                    "eventtype = 'transfer' AND careunit IS NOT NULL ORDER BY intime DESC LIMIT 1",
                                    t)]
    db.close()
    return sorted({n for n in names if n})


@pytest.mark.parametrize("task", ["diagnoses_ccs", "procedures_ccs", "labevents", "prescriptions",
                                  "microbiologyevents", "transfers"])
def test_the_reference_predicts_from_the_censored_view_what_an_independent_reading_predicts(world, task):
    """The reference reaches its answer through load_ehr and run_sql_query on the trial's censored view (it is never
    given the labels), and its answer is what the history baseline gives when written independently from the raw
    database; its F1 is the paper's formula on that answer. Some of its answers are wrong: F1 < 1 somewhere."""
    from ehrbench.benchmarks.agentehr.agent import ReferenceAgent

    async def scripted():
        return None
    f1s = []
    for sample in world[1][task][:12]:
        agent = ReferenceAgent(task, sample["subject_id"], sample["prediction_time"], scripted)
        tools = _tools(world, sample)
        record = run(run_trial("k", 0, agent, None, tools, lambda r: asyncio.sleep(0, 0.0), opening="q"))
        run(tools.close())
        assert [m["tool_call"]["name"] for m in record.messages if m.get("tool_call")] == ["load_ehr",
                                                                                          "run_sql_query"]
        predicted = parse_prediction(record.messages[-1]["content"])
        expected = _history_baseline(world[2], task, sample)
        assert sorted(predicted) == expected, (sample, record.messages[-2]["content"])
        truth = {x["name"].lower() for x in sample["label"]}
        hit = len(truth & {p.lower() for p in predicted})
        p, r = (hit / len(predicted) if predicted else 0), hit / len(truth)
        f1s.append(2 * p * r / (p + r) if p + r else 0.0)
        assert f1(predicted, [x["name"] for x in sample["label"]])["f1"] == pytest.approx(f1s[-1])
    assert min(f1s) < 1.0


def _main(args, timeout=600):
    return subprocess.run([sys.executable, "-m", "ehrbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_the_reference_runs_every_task_and_subset_through_ray_and_mlflow(ray_cluster, tmp_path, shared_world):
    store = mlflow_store(tmp_path / "mlruns")
    out = _main(["benchmark=agentehr", "limit_tasks=3", "trials=2", "data.dictionary=used",
                 f"data.root={shared_world / 'gen'}", f"tracking.root={store}",
                 f"runtime.address={ray_cluster.address}",
                 f"hydra.run.dir={tmp_path / 'out'}"])
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["agentehr"], output_format="list")
    m = run_.data.metrics
    tasks = ("diagnoses_ccs", "procedures_ccs", "labevents", "prescriptions", "microbiologyevents", "transfers")
    assert all(0.0 <= m[f"{t}/F1"] <= 1.0 for t in tasks)                              # the history baseline
    assert all(0.0 <= m[f"{t}/mimic_iii/F1"] <= 1.0 for t in tasks)                    # the schema shift
    assert m["common/F1"] == pytest.approx(sum(m[f"{t}/common/F1"] for t in tasks) / len(tasks))
    assert m["errors/tool_usage_error"] == 0.0 and m["trials_valid"] >= 2 * 6 * 3 * 3
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_.info.run_id)}
    assert {"f1_by_task.png", "best_at_k.png", "results_table.txt"} <= artifacts


def test_react_with_the_real_openai_client_through_the_fake_server(ray_cluster, tmp_path, shared_world):
    from .fake_llm_server import FakeLLMServer, Reply

    items = json.loads((ROOT / "data/tasks/agentehr/transfers.json").read_text())
    one = tmp_path / "tasks"
    one.mkdir()
    (one / "transfers.json").write_text(json.dumps(items[:1]))
    (one / "manifest.json").write_text((ROOT / "data/tasks/agentehr/manifest.json").read_text())
    label = items[0]["label"][0]["name"]
    server = FakeLLMServer().start()
    try:
        server.push(Reply(tool="get_candidates_by_keyword", args={"table_name": "transfers_candidates",
                                                                  "keyword": label.split()[0]}),
                    Reply(tool="get_candidates_by_semantic_similarity", args={"table_name": "transfers_candidates",
                                                                              "query": label}),
                    Reply(tool="finish", args={"response": [label, "Some Other Unit"]}), model="gpt-4o")
        store = mlflow_store(tmp_path / "mlruns")
        out = _main(["benchmark=agentehr", f"benchmark.task_dir={one}", "benchmark.tasks=[transfers]", "trials=1",
                     "benchmark.mimic_iii=false", "data.dictionary=used",   # the shared world, as built above
                     "model=gpt-4o", f"model.base_url={server.url}/v1", f"data.root={shared_world / 'gen'}",
                     f"tracking.root={store}", f"runtime.address={ray_cluster.address}",
                     f"hydra.run.dir={tmp_path / 'out'}"])
        requests = server.requests_for("gpt-4o")
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(requests) == 3
    assert all((r.body["temperature"], r.body["max_tokens"]) == (0.7, 4096) and "seed" not in r.body and
               "top_p" not in r.body for r in requests)             # agent_llms.py for an OpenAI model: no top_p
    semantic = requests[2].body["messages"][-1]["content"]          # on the run's value index actor
    assert semantic.startswith(f"--- Semantic search results for '{label}' ---\nFound ")
    assert re.search(rf"\n *{re.escape(label)}\s+1\.0+(\n|$)", semantic)           # the label itself, cosine 1
    first = requests[0].body["messages"]
    assert first[0]["content"].startswith("<agent_instruction>") and first[1]["tool_calls"][0]["function"][
        "name"] == "load_ehr"
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["agentehr"], output_format="list")
    assert run_.data.metrics["F1"] == pytest.approx(2 / 3) and run_.data.metrics["calls/agent"] == 3


@pytest.mark.parametrize("mode", ["resum", "retrosum"])
def test_summaries_every_ten_steps_reset_or_keep_the_context(world, mode):
    from ehrbench.benchmarks.agentehr.agent import SummarizingAgent

    sample = world[1]["transfers"][0]
    tools, subject = _tools(world, sample), str(sample["subject_id"])
    steps = [_call("get_latest_records", subject_id=subject, table_name=t)
             for t in ("labevents", "chartevents", "admissions", "transfers", "services", "omr", "emar", "icustays",
                       "pharmacy", "prescriptions", "labevents")]
    model = ScriptModel(*steps, _call("finish", response=["Medicine"]))
    summarizer = ScriptModel(*[ChatResponse(text="<summary>\n- Essential Information: the patient is on a ward.\n"
                                                "</summary>")] * 2)
    agent = SummarizingAgent(model, summarizer, mode, "transfers", sample["subject_id"], sample["prediction_time"],
                             every=10)
    record = run(run_trial("k", 0, agent, None, tools, lambda r: asyncio.sleep(0, 0.0),
                           opening=first_message("transfers", sample["subject_id"], sample["prediction_time"])))
    assert record.messages[-1]["content"] == "['Medicine']"
    [summary_request, *after_finish] = summarizer.requests           # after step 9 (and, RetroSum, after finish)
    assert len(after_finish) == (1 if mode == "retrosum" else 0)
    prompt = summary_request.messages[0].content
    assert prompt.startswith("You are an expert at analyzing conversation history") and "Conversation History" in prompt
    assert "'name': 'load_ehr'" not in prompt and "get_latest_records" in prompt      # from messages[3:]
    assert summary_request.tools is None
    after = model.requests[9].messages                              # the call right after the summary
    shown = [m for m in after if "Below is a summary of the previous conversation" in (m.content or "")]
    assert len(shown) == 1 and "the patient is on a ward" in shown[0].content
    if mode == "resum":                                             # reset: first message, load, its result, summary
        assert len(after) == 4 and after[3].role == "assistant"
    else:                                                           # kept: everything, the summary where it was made
        assert len(after) == 1 + 2 * 10 + 1 and shown[0].role == "user" and after[-1] is shown[0]


def test_patients_go_to_their_shard_and_views_close_however_the_trial_ends(ray_cluster, world):
    """Two ServiceShard actors hold the per-patient views: each episode's view opens on the shard its patient hashes
    to, and is gone once the trial ends, at the step limit as well as answered."""
    import ray

    from ehrbench.benchmark import Hosts, TrialSettings
    from ehrbench.benchmarks.agentehr.benchmark import Sample
    from ehrbench.db.sharding import shard_of
    from ehrbench.episode import run_task_trial
    from ehrbench.runtime.actors import ActorNames, start_services
    from ehrbench.runtime.hosts import PatientRouter, ServiceHost
    from ehrbench.trial import Limits

    folder, samples, _ = world
    source = folder.parent / (folder.name.removeprefix("agentehr-") + ".sqlite")
    settings = TrialSettings(benchmark="agentehr", benchmark_options={"max_turns": 100}, agent="reference",
                             user="none")
    shards = start_services({"patients": 2}, settings, {"mimic_iv": str(source)}, ActorNames())["patients"]
    router = PatientRouter([ServiceHost(h) for h in shards])
    by_shard = {}
    for s in samples["labevents"]:
        by_shard.setdefault(shard_of(s["subject_id"], 2), s)
    assert len(by_shard) == 2                                   # the fixture's patients fill both shards

    async def opened():
        tools = [AgentEhrTools(router.for_patient(s["subject_id"]), folder / "candidates.db", s["subject_id"],
                               s["prediction_time"]) for s in by_shard.values()]
        for t in tools:
            await t.call("load_ehr", {"subject_id": str(t.subject_id), "timestamp": t.prediction_time})
        counts = [await router.shards[i].open_episodes() for i in range(2)]
        answers = [await t.call("run_sql_query", {"subject_id": str(t.subject_id),
                                                  "sql_query": "SELECT DISTINCT subject_id FROM admissions"})
                   for t in tools]
        for t in tools:
            await t.close()
        return counts, answers, [await router.shards[i].open_episodes() for i in range(2)]
    counts, answers, after = run(opened())
    assert counts == [1, 1] and after == [0, 0]
    assert [a.split()[-1] for a in answers] == [str(s["subject_id"]) for s in by_shard.values()]

    for limit in (2, 30):                                       # the step limit, then answered
        sample = by_shard[0]
        task = Sample("labevents", sample["subject_id"], sample["hadm_id"], sample["prediction_time"],
                      tuple(x["name"] for x in sample["label"]), "common", str(folder), str(folder / "candidates.db"))
        [record] = run(run_task_trial(task, 0, Hosts({}, services={"patients": router}),
                                      TrialSettings(benchmark="agentehr", benchmark_options={"max_turns": 100},
                                                    agent="reference", user="none",
                                                    limits=Limits(max_steps=limit))))
        assert record.termination == ("max_steps" if limit == 2 else "answered"), record.error
        assert [ray.get(h.call.remote("open_episodes")) for h in shards] == [0, 0]


class Mutant:
    """A scripted agent with one known defect: load_ehr (as every agent does first), then its replies in order (a
    (name, arguments) pair is a tool call, an exception is raised, anything else is finish's response)."""

    def __init__(self, sample, *replies):
        from ehrbench.benchmarks.agentehr.agent import load_call

        self.load = load_call(sample.subject_id, sample.prediction_time)
        self.replies = list(replies)

    async def act(self, history):
        from ehrbench.benchmarks.agentehr.agent import answer
        from ehrbench.trial import Message

        if not any(m.is_tool_call for m in history):
            return self.load
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, tuple):
            return Message("assistant", None, tool_call=ToolCall(reply[0], reply[1], f"c{len(history)}"))
        return answer(reply)


def test_mutants_score_and_err_as_the_original_s_rules_say(world):
    """Each mutant's F1 and error flags follow from the original's test.py and the paper's taxonomy read on paper
    (set arithmetic done here, not by ehrbench's scorer), through the benchmark's own episode and scorer."""
    import yaml

    from ehrbench.benchmark import Hosts, TrialSettings
    from ehrbench.benchmarks.agentehr.benchmark import AgentEhrBenchmark, Sample
    from ehrbench.llm.usage import UsageMeter

    folder, samples, _ = world
    item = max(samples["diagnoses_ccs"], key=lambda s: len(s["label"]))
    labels = list(dict.fromkeys(x["name"] for x in item["label"]))
    assert len(labels) >= 2
    sample = Sample("diagnoses_ccs", int(item["subject_id"]), item.get("hadm_id"), item["prediction_time"],
                    tuple(labels), "common", str(folder), str(folder / "candidates.db"))
    subject = str(sample.subject_id)
    options = yaml.safe_load((ROOT / "conf" / "benchmark" / "agentehr.yaml").read_text())
    bench = AgentEhrBenchmark(options)
    search = ("get_candidates_by_keyword", {"table_name": "diagnoses_ccs_candidates", "keyword": labels[0]})
    n = len(labels)
    half = 2 * (1 / 1) * (1 / n) / (1 + 1 / n)            # one right name of n: P = 1, R = 1/n
    mutants = {   # name: (replies, expected F1, the error flags expected set)
        "right, after a candidate search": ([search, labels], 1.0, set()),
        "right, never searched the candidates": ([labels], 1.0, {"no_candidate_tool"}),
        "a bare name (the original read nothing)": ([search, labels[0]], 0.0, {"no_prediction"}),
        "text around the list": ([search, f"Predictions: {labels}"], 1.0, set()),
        "one name, padded (predictions are not stripped)": ([search, [f" {labels[0]} "]], 0.0, set()),
        "one name of n": ([search, [labels[0]]], half, set()),
        "the same call five times running": ([*[("get_table_names", {"subject_id": subject})] * 5, search, labels],
                                             1.0, {"tool_repeat"}),
        "a column that is not there": ([("get_records_by_value", {"subject_id": subject, "table_name": "admissions",
                                                                  "column_name": "nope", "value": "x"}), search,
                                        labels], 1.0, {"tool_usage_error"}),
    }
    hosts = Hosts(databases={})
    for name, (replies, expected, flags) in mutants.items():
        episode = bench.episode(sample, 0, hosts, TrialSettings(benchmark="agentehr", benchmark_options=options),
                                UsageMeter(), 0)
        record = run(run_trial(sample.key, 0, Mutant(sample, *replies), None, episode.tools, episode.score,
                               opening="q"))
        assert record.reward == pytest.approx(expected), name
        raised = {k.split("/")[1] for k, v in record.score_parts.items() if k.startswith("error/") and v}
        assert raised == flags, (name, raised)
    episode = bench.episode(sample, 0, hosts, TrialSettings(benchmark="agentehr", benchmark_options=options),
                            UsageMeter(), 0)
    crashed = run(run_trial(sample.key, 0, Mutant(sample, search, RuntimeError("bug")), None, episode.tools,
                            episode.score, opening="q"))
    assert (crashed.termination, crashed.reward, crashed.valid) == ("agent_error", 0.0, True)   # counted, scored 0


@pytest.mark.parametrize("kind", ["cut_off", "blocked"])
def test_a_turn_with_no_text_is_a_reply_without_a_call_and_a_failed_summary_is_no_summary(world, kind):
    """The original's llm_layer reads a reply cut off or blocked before any text as one without a call: asked again
    (5 tries in all), then a think step, the trial going on; its summarize_conversation returns None on any error,
    so a summary that fails so (or is refused: too long, any 400) leaves the last one in place. Before, either
    ended the trial as the agent's error, F1 0. An outage is still re-run."""
    from ehrbench.benchmarks.agentehr.agent import SummarizingAgent
    from ehrbench.llm.base import ModelTurnError
    from ehrbench.trial import InfrastructureError

    class Failing:
        def __init__(self, error, then=()):
            self.error, self.then, self.calls = error, list(then), 0

        async def complete(self, request):
            self.calls += 1
            if self.calls <= 5 or not self.then:
                raise self.error
            return self.then.pop(0)

    sample = world[1]["transfers"][0]
    tools, subject = _tools(world, sample), str(sample["subject_id"])
    opening = first_message("transfers", sample["subject_id"], sample["prediction_time"])
    model = Failing(ModelTurnError("x", kind=kind), then=[_call("finish", response=["Medicine"])])
    record = run(run_trial("k", 0, ReActAgent(model, sample["subject_id"], sample["prediction_time"]), None, tools,
                           lambda r: asyncio.sleep(0, 0.0), opening=opening))
    steps = [m["tool_call"]["name"] for m in record.messages if m.get("tool_call")]
    assert steps == ["load_ehr", "think"] and model.calls == 6      # five asks, a think step, then the finish
    assert record.termination == "answered" and record.messages[-1]["content"] == "['Medicine']"
    for failure in (ModelTurnError("x", kind=kind), InfrastructureError("HTTP 400", status=400)):
        agent = SummarizingAgent(ScriptModel(*[_call("get_table_names", subject_id=subject)] * 10,
                                             _call("finish", response=["Medicine"])), Failing(failure), "retrosum",
                                 "transfers", sample["subject_id"], sample["prediction_time"], every=10)
        record = run(run_trial("k", 1, agent, None, tools, lambda r: asyncio.sleep(0, 0.0), opening=opening))
        assert record.messages[-1]["content"] == "['Medicine']" and agent.refused_summaries == 2
    outage = SummarizingAgent(ScriptModel(*[_call("get_table_names", subject_id=subject)] * 10),
                              Failing(InfrastructureError("HTTP 503 x8")), "resum", "transfers",
                              sample["subject_id"], sample["prediction_time"], every=10)
    record = run(run_trial("k", 2, outage, None, tools, lambda r: asyncio.sleep(0, 0.0), opening=opening))
    assert record.termination == "infra_error_model"
