"""EHRAgent's questions: EHRSQL's post-processing, the loaders of EHRSQL's and MIMICSQL's own files, complexity
levels, and the project's question sets (sizes, and every gold SQL answering what its file says on the world)."""
from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from ehrbench.benchmark import TaskFileError
from ehrbench.benchmarks.ehragent.tasks import (complexity_level, load_questions, load_tasks, post_process_sql,
                                                resolve)

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "data" / "tasks" / "ehragent"
FILES = {"ehrsql_mimic_iii": "mimic_iii.json", "ehrsql_eicu": "eicu.json", "treqs": "treqs.jsonl"}
SIZES = {"ehrsql_mimic_iii": 580, "ehrsql_eicu": 580, "treqs": 996}

# The train item of EHRSQL's README (glee4810/EHRSQL), verbatim.
EHRSQL_ITEM = {
    "db_id": "mimic_iii", "question": "what is the ingesting method of methimazole?",
    "template": "what is the intake method of methimazole?",
    "query": "select distinct prescriptions.route from prescriptions where prescriptions.drug = 'methimazole'",
    "value": {"drug_name": "methimazole"}, "q_tag": "what is the intake method of {drug_name}?",
    "t_tag": ["", "", "", "", ""], "o_tag": ["", "", "", "", "", "", "", "", ""],
    "tag": "what is the intake method of {drug_name}?", "department": "['nursing']", "importance": "medium",
    "para_type": "machine", "is_impossible": False, "split": "train", "id": "75379177b6a56fb54e946591"}


def test_post_process_sql_replaces_ehrsql_s_placeholders():
    sql = ("SELECT COUNT(*) > 0 FROM chartevents WHERE chartevents.valuenum BETWEEN heart_rate_lower AND "
           "heart_rate_upper AND datetime(chartevents.charttime,'start of year') = datetime(current_time,"
           "'start of year','-1 year') AND strftime('%y',chartevents.charttime) = '2104' AND "
           "strftime('%j',current_time) - strftime('%j',chartevents.charttime) > 1")
    out = post_process_sql(sql)
    assert "current_time" not in out and "'2105-12-31 23:59:00'" in out
    assert "between 60.0 and 100.0" in out
    assert "strftime('%Y'," in out and "strftime('%J'," in out and "%y" not in out and "%j" not in out
    # two different vitals: EHRSQL leaves the placeholders alone
    both = post_process_sql("select 1 where a between sao2_lower and heart_rate_upper")
    assert "sao2_lower" in both


def test_a_missed_current_time_silently_reads_the_real_clock():
    con = sqlite3.connect(":memory:")
    raw = "select datetime(current_time, 'start of year')"
    assert con.execute(post_process_sql(raw)).fetchone() == ("2105-01-01 00:00:00",)
    assert con.execute(raw).fetchone() != ("2105-01-01 00:00:00",)        # runs, and answers something else


def test_the_model_s_sql_reads_the_clock_at_the_database_s_now():
    """Gold SQL is post-processed to EHRSQL's now; the model's SQL must read the same clock (not the real one)."""
    from ehrbench.benchmarks.ehragent.tasks import at_database_now

    sql = ("select datetime(CURRENT_TIME, '-1 year'), date('now'), current_date, 'now is', \"current_time\", "
           "t.current_timestamp from t where x = 'Now'")
    assert at_database_now(sql) == (
        "select datetime('2105-12-31 23:59:00', '-1 year'), date('2105-12-31 23:59:00'), '2105-12-31', 'now is', "
        "\"current_time\", t.current_timestamp from t where x = '2105-12-31 23:59:00'")
    con = sqlite3.connect(":memory:")
    assert con.execute(at_database_now("select datetime(current_time, '-1 day')")).fetchone()[0] == \
        "2105-12-30 23:59:00"


def test_complexity_level_counts_distinct_tables_of_the_gold_sql():
    assert complexity_level(EHRSQL_ITEM["query"]) == 1
    assert complexity_level("select count(*) > 0 from labevents where labevents.hadm_id in ( select admissions.hadm_id "
                            "from admissions where admissions.subject_id = 1 ) and labevents.itemid in ( select "
                            "d_labitems.itemid from d_labitems where d_labitems.label = 'glucose' )") == 3
    assert complexity_level('SELECT COUNT ( DISTINCT DEMOGRAPHIC."SUBJECT_ID" ) FROM DEMOGRAPHIC INNER JOIN LAB on '
                            'DEMOGRAPHIC.HADM_ID = LAB.HADM_ID WHERE LAB."FLAG" = "abnormal"') == 2


def test_the_loaders_read_ehrsql_and_mimicsql_files_unchanged(tmp_path):
    impossible = {"db_id": "mimic_iii", "question": "tell me the method of disinfection?", "query": "nan",
                  "is_impossible": True, "split": "valid", "id": "x1"}
    path = tmp_path / "ehrsql.json"
    path.write_text(json.dumps([EHRSQL_ITEM, impossible]))
    [q] = load_questions(path, "ehrsql_mimic_iii")
    assert (q.qid, q.question, q.sql) == ("75379177b6a56fb54e946591", EHRSQL_ITEM["template"], EHRSQL_ITEM["query"])
    mimicsql = tmp_path / "train.json"
    mimicsql.write_text(json.dumps({
        "key": "a81dae5ff42498734e857c5b7dc46deb",
        "format": {"table": [0, 2], "cond": [[0, 6, 0, "F"], [2, 3, 0, "Abdomen artery incision"]],
                   "agg_col": [[0, 0]], "sel": 1},
        "question_refine": "how many female patients underwent the procedure of abdomen artery incision?",
        "sql": 'SELECT COUNT ( DISTINCT DEMOGRAPHIC."SUBJECT_ID" ) FROM DEMOGRAPHIC INNER JOIN PROCEDURES on '
               'DEMOGRAPHIC.HADM_ID = PROCEDURES.HADM_ID WHERE DEMOGRAPHIC."GENDER" = "F" AND '
               'PROCEDURES."SHORT_TITLE" = "Abdomen artery incision"',
        "question_refine_tok": [], "sql_tok": []}) + "\n")
    [m] = load_questions(mimicsql, "treqs")
    assert m.qid == "a81dae5ff42498734e857c5b7dc46deb" and m.sql.startswith("SELECT COUNT ( DISTINCT")


def test_a_broken_question_file_names_file_question_and_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{k: v for k, v in EHRSQL_ITEM.items() if k != "query"}]))
    with pytest.raises(TaskFileError, match=r"bad.json: question '75379177b6a56fb54e946591': missing field 'query'"):
        load_questions(path, "ehrsql_mimic_iii")
    bad = tmp_path / "bad_answer.json"
    bad.write_text(json.dumps([{**EHRSQL_ITEM, "answer": [], "level": 2}]))
    with pytest.raises(TaskFileError, match="bad_answer.json: question '75379177b6a56fb54e946591': field 'answer' "
                                            "must be a non-empty list"):
        load_tasks(bad, "ehrsql_mimic_iii")


def test_the_authors_released_selection_loads_its_answers_without_a_level(tmp_path):
    """The EHRSQL-EHRAgent files the authors released hold answers but no level: each question's level is counted
    from its gold SQL (distinct tables), as the generator counts every question's."""
    from ehrbench.benchmarks.ehragent.tasks import complexity_level

    released = tmp_path / "released.json"
    released.write_text(json.dumps([{**EHRSQL_ITEM, "answer": ["oral"]}, {**EHRSQL_ITEM, "id": "second",
                                                                           "answer": "oral"}]))
    first, second = load_tasks(released, "ehrsql_mimic_iii")
    assert (first.answer, second.answer) == (["oral"], ["oral"])
    assert first.level == second.level == complexity_level(first.gold_sql) >= 1


def test_questions_whose_gold_sql_fails_or_finds_nothing_are_dropped(tmp_path):
    from ehrbench.benchmarks.ehragent.tasks import Question

    con = sqlite3.connect(":memory:")
    con.execute("create table t (a int)")
    con.execute("insert into t values (1), (2)")
    qs = [Question("ok", "treqs", "q", "select a from t order by a"), Question("empty", "treqs", "q", "select a from t "
          "where a > 5"), Question("bad", "treqs", "q", "select nope from t"),
          Question("null", "treqs", "q", "select max(a) from t where a > 5")]
    tasks, dropped = resolve(qs, lambda sql: con.execute(sql).fetchall())
    assert [(t.qid, t.answer, t.level) for t in tasks] == [("ok", ["1", "2"], 1)]
    assert [d[0] for d in dropped] == ["empty", "bad", "null"]


def test_the_shipped_sets_hold_the_paper_s_level_counts_and_mean_tables():
    """Table 2's level sizes for MIMIC-III and eICU (the one split that gives its SRs), Table 1's mean tables per
    question for all three; `make bench-ehragent-tasks` prints the rest."""
    from ehrbench.benchmarks.ehragent.statistics import PAPER_LEVELS, PAPER_MEAN_TABLES, answer_type, summary

    for db_id, name in FILES.items():
        stats = summary(load_tasks(TASKS / name, db_id))
        if PAPER_LEVELS[db_id] is not None:
            assert stats["levels"] == PAPER_LEVELS[db_id], db_id
        assert abs(stats["mean_tables"] - PAPER_MEAN_TABLES[db_id]) < 0.005, db_id
        assert sum(stats["answer_types"].values()) == stats["questions"] and len(stats["answer_types"]) >= 4
    assert [answer_type(v) for v in (["3"], ["2.5"], ["2104-01-01 00:00:00"], ["f"], ["a", "b"])] == \
        ["integer", "decimal", "date-time", "text", "list"]


@pytest.fixture(scope="module")
def ehragent_dbs(shared_world, ray_cluster):
    """The default world's three renderings as the session's EHRAgent runs build them (`data.dictionary=used`, in
    patient chunks on its Ray cluster, in the shared data root: built once for both). `used` has the same patients
    and events as `make run`'s `full` and lists only the ICD codes in use; every gold query of the shipped files
    answers the same on both (2,456 queries, checked when this fixture moved off `full`, which cost a minute here)."""
    from ehrbench.db.database import Database
    from ehrbench.schemas import WorldSpec, build_database

    spec = WorldSpec(seed=0, dictionary="used")
    return {db: Database(build_database(db, spec, shared_world / "gen", on_ray=True), db) for db in FILES}


@pytest.mark.parametrize("db_id", list(FILES))
def test_the_project_question_sets_answer_what_their_files_say(ehragent_dbs, db_id):
    tasks = load_tasks(TASKS / FILES[db_id], db_id)
    assert len(tasks) == SIZES[db_id]
    assert len({t.question for t in tasks}) == len(tasks)
    levels = {t.level for t in tasks}
    assert {1, 2} <= levels and max(levels) <= 4
    db = ehragent_dbs[db_id]
    for t in tasks:
        rows = db.execute(t.gold_sql, timeout_s=60, keep=1000).rows
        assert [str(v) for r in rows[:100] for v in r] == t.answer, t.qid
        assert complexity_level(t.gold_sql) == t.level
        assert "current_time" not in t.gold_sql and "_lower" not in t.gold_sql


def test_an_ehrsql_file_without_answers_is_answered_on_the_database(ehragent_dbs, tmp_path):
    """EHRSQL's own file (no answers): loaded as unresolved tasks, answered by their gold SQL on the run's database
    after EHRSQL's post-processing; failing and empty ones dropped; stored answers kept as they are."""
    from ehrbench.benchmarks.ehragent.tasks import resolve_on

    project = json.loads((TASKS / "mimic_iii.json").read_text())[:2]
    own = [{k: v for k, v in item.items() if k not in ("answer", "level")} for item in project]
    own += [{**EHRSQL_ITEM, "id": "empty", "query": "select prescriptions.route from prescriptions where "
             "prescriptions.drug = 'no such drug'"},
            {**EHRSQL_ITEM, "id": "bad", "query": "select nope from prescriptions"},
            {**EHRSQL_ITEM, "id": "clock", "query": "select count(*) from admissions where admissions.dischtime is "
             "null and datetime(admissions.admittime) <= datetime(current_time)"}]
    path = tmp_path / "valid.json"
    path.write_text(json.dumps(own + [{**project[0], "id": "stored", "answer": ["kept"], "level": 3}]))
    tasks = load_tasks(path, "ehrsql_mimic_iii")
    assert [t.answer for t in tasks[:5]] == [None] * 5 and tasks[5].answer == ["kept"]
    kept, dropped = resolve_on(tasks, ehragent_dbs["ehrsql_mimic_iii"])
    assert [t.qid for t in kept] == [project[0]["id"], project[1]["id"], "clock", "stored"]
    assert [t.answer for t in kept[:2]] == [project[0]["answer"], project[1]["answer"]]
    assert [t.level for t in kept[:2]] == [project[0]["level"], project[1]["level"]] and kept[3].level == 3
    current = ehragent_dbs["ehrsql_mimic_iii"].execute(
        "select count(*) from admissions where dischtime is null and admittime <= '2105-12-31 23:59:00'").rows
    assert kept[2].answer == [str(current[0][0])]                     # `current_time` is the database's "now"
    assert [q for q, _ in dropped] == ["empty", "bad"]


@pytest.mark.parametrize("db_id", list(FILES))
def test_the_train_split_answers_on_the_world_and_shares_no_question_with_the_evaluation_set(ehragent_dbs, db_id):
    train = load_tasks(TASKS / "train" / FILES[db_id], db_id)
    assert len(train) == 100
    assert not {t.question for t in train} & {t.question for t in load_tasks(TASKS / FILES[db_id], db_id)}
    for t in train[:20]:
        rows = ehragent_dbs[db_id].execute(t.gold_sql, timeout_s=60, keep=1000).rows
        assert [str(v) for r in rows[:100] for v in r] == t.answer, t.qid


# --- the self-check: a reference that works through the tools, and mutants with known scores -------------------
def _episode(db_id, dbs, task, agent_name="reference"):
    """The benchmark's own episode for a task (its tools on the session's database, its scorer), contract original."""
    import yaml

    from ehrbench.benchmark import TrialSettings
    from ehrbench.benchmarks.ehragent.benchmark import EhrAgentBenchmark
    from ehrbench.llm.usage import UsageMeter

    from .conftest import local_hosts

    options = {**yaml.safe_load((ROOT / "conf" / "benchmark" / "ehragent.yaml").read_text()), "memory": "frozen"}
    bench = EhrAgentBenchmark(options)
    settings = TrialSettings(benchmark="ehragent", benchmark_options=options, agent=agent_name)
    return bench.episode(task, 0, local_hosts(dbs), settings, UsageMeter(), 0)


def _trials(runs):
    """Trials of (episode, task, agent or None for the episode's own), one after another on one event loop (one
    code sandbox for all of them)."""
    import asyncio

    from ehrbench.trial import Limits, run_trial

    async def all_of_them():
        return [await run_trial(task.key, 0, agent or episode.agent, None, episode.tools, episode.score,
                                Limits(max_steps=11), opening=task.question) for episode, task, agent in runs]
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(all_of_them())
    finally:
        loop.close()


@pytest.mark.parametrize("db_id", ["ehrsql_mimic_iii", "ehrsql_eicu"])
def test_the_reference_reaches_the_shipped_answers_through_the_tools(ehragent_dbs, db_id):
    """On the shipped questions, the reference writes its cell from the question alone (LoadDB, FilterDB, GetValue,
    Calendar: never the gold SQL) for at least 40% of them, and every sampled one scores: the tools' types, the
    clock and the scorer agree with the gold SQL on the trial's database. (All of them, 538 cells, were checked when
    this test was written; it runs every 20th here to keep the suite's time.)"""
    from ehrbench.benchmarks.ehragent.reference import tool_plan

    tasks = load_tasks(TASKS / FILES[db_id], db_id)
    planned = [t for t in tasks if tool_plan(db_id, t.question)]
    assert len(planned) >= 0.4 * len(tasks)
    sample = planned[::20]
    for task, record in zip(sample, _trials([(_episode(db_id, ehragent_dbs, t), t, None) for t in sample])):
        cell = record.messages[1]["tool_call"]["arguments"]["cell"]
        assert "LoadDB(" in cell and "SQLInterpreter" not in cell and task.gold_sql not in cell
        assert (record.reward, record.score_parts["completed"]) == (1.0, 1.0), (task.question, record.messages[2])


class Mutant:
    """A scripted agent with one known defect: its replies in order (a str is text, a dict a python cell, an
    exception is raised), then silence."""

    def __init__(self, *replies):
        self.replies = list(replies)

    async def act(self, history):
        from ehrbench.trial import Message, ToolCall

        reply = self.replies.pop(0) if self.replies else None
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, dict):
            return Message("assistant", None, tool_call=ToolCall("python", reply, f"call_{len(history)}"))
        return Message("assistant", reply)


def test_mutants_score_what_the_original_s_rules_say(ehragent_dbs):
    """Each mutant's expected (SR, CR) comes from evaluate.py's rules read on paper, not from ehrbench's scorer:
    completed iff "TERMINATE" is anywhere in the log; successful iff completed and the gold text is in the window
    from the end of the last cell's arguments to the last TERMINATE."""
    from ehrbench.benchmarks.ehragent.reference import tool_plan
    from ehrbench.trial import InfrastructureError

    db_id = "ehrsql_mimic_iii"
    tasks = [t for t in load_tasks(TASKS / FILES[db_id], db_id)
             if tool_plan(db_id, t.question) and t.family == "count the number" and t.answer[0].isdigit()][:3]
    assert len(tasks) == 3
    hostile = {"cell": "SQLInterpreter('drop table admissions')"}
    expected = {   # name: (replies after the right cell, expected SR, CR), on paper
        "right": (["The answer is {a}.\nTERMINATE"], 1, 1),
        "wrong value, said TERMINATE": ([{"cell": "answer = 'nothing'"}, "The answer is nothing.\nTERMINATE"], 0, 1),
        "never says TERMINATE": (["The answer is {a}."] * 12, 0, 0),
        "TERMINATE. mid-text, then TERMINATE": (["The answer is {a}. TERMINATE.", "TERMINATE"], 1, 1),
        "crashes after its cell": ([RuntimeError("agent bug")], 0, 0),
        "its request refused (context overflow)": ([InfrastructureError("HTTP 400", agent_caused=True)], 0, 0),
        "hostile SQL first, then right": (None, 1, 1),
    }
    runs, cases = [], []
    for name, (after, sr, cr) in expected.items():
        for task in tasks:
            right = {"cell": tool_plan(db_id, task.question)}
            replies = [hostile, right, "The answer is {a}.\nTERMINATE"] if after is None else [right, *after]
            replies = [r.format(a=", ".join(task.answer)) if isinstance(r, str) else r for r in replies]
            runs.append((_episode(db_id, ehragent_dbs, task), task, Mutant(*replies)))
            cases.append((name, task, sr, cr, after is None))
    for (name, task, sr, cr, hostile_first), record in zip(cases, _trials(runs)):
        assert record.valid, (name, record.termination)                      # in the denominator, every one
        assert (record.reward, record.score_parts.get("completed", 0.0)) == (sr, cr), (name, task.question)
        if hostile_first:
            assert "readonly database" in record.messages[2]["content"]      # refused; the next cell still works


WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def test_mutant_models_through_the_proxy_score_what_the_original_s_rules_say_on_every_database(ehragent_dbs):
    """The chatbot scripted with one known defect, played through EHRAgent's own proxy (AutoGen's reply order, the
    cell sandbox, the debugger, the original's log and judge) on a count question of each database. Expected (SR,
    CR) from evaluate.py's rules on paper: completed iff TERMINATE is in the log; successful iff the gold is in the
    window from the end of the last cell's arguments (GPT-4's indented JSON) to the last TERMINATE. A right count
    written in words is rejected, as the original's substring judge rejects it."""
    import asyncio

    from ehrbench.agents.code_sandbox import CellLimits
    from ehrbench.benchmarks.ehragent.agent import EhrAgent, Memory
    from ehrbench.benchmarks.ehragent.benchmark import score, table_names
    from ehrbench.benchmarks.ehragent.prompts import initial_memory
    from ehrbench.benchmarks.ehragent.reference import tool_plan
    from ehrbench.benchmarks.ehragent.tools import CodeInterface
    from ehrbench.llm.base import ChatResponse
    from ehrbench.runtime.hosts import LocalHost
    from ehrbench.trial import Limits, ToolCall, run_trial

    from .test_ehragent_proxy import Fixed

    class Chatbot:
        def __init__(self, replies):
            self.replies = list(replies)

        async def complete(self, request):
            reply = self.replies.pop(0) if self.replies else None
            if isinstance(reply, dict):                      # a python call, its arguments as GPT-4 wrote them
                raw = json.dumps(reply, indent=2)
                return ChatResponse(text=None, tool_calls=[ToolCall("python", reply, "", raw=raw)])
            return ChatResponse(text=reply)

    def count_task(db_id):
        for t in load_tasks(TASKS / FILES[db_id], db_id):
            cell = tool_plan(db_id, t.question) if db_id != "treqs" else \
                f"rows = SQLInterpreter({t.gold_sql!r})\nanswer = rows[0][0]"
            if cell and re.match(r"\s*select\s+count", t.gold_sql, re.I) and t.answer[0] in WORDS[1:] + \
                    [str(i) for i in range(1, len(WORDS))]:
                return t, cell
        raise AssertionError(f"no small count question in {db_id}")
    first_table = {"ehrsql_mimic_iii": "admissions", "ehrsql_eicu": "patient", "treqs": "DEMOGRAPHIC"}
    cases = {   # name: replies after the right cell ({a}: the gold; {w}: the gold in words), expected (SR, CR)
        "right": (["The answer is {a}.\nTERMINATE"], 1, 1),
        "wrong value, said TERMINATE": ([{"cell": "answer = 'nothing'"}, "The answer is nothing.\nTERMINATE"], 0, 1),
        "never says TERMINATE, up to the proxy's limit": (["The answer is {a}."] * 12, 0, 0),
        "TERMINATE. mid-text, then TERMINATE": (["The answer is {a}. TERMINATE.", "TERMINATE"], 1, 1),
        "right, in words the judge rejects": ([{"cell": "answer = '{w}'"}, "The answer is {w}.\nTERMINATE"], 0, 1),
        "hostile SQL first, then right": (None, 1, 1),
    }

    async def one(db_id, task, cell, replies):
        host = LocalHost(ehragent_dbs[db_id])
        tools = CodeInterface(db_id, host, table_names(db_id), task.question, "2105-12-31 23:59:00",
                              Fixed("REASON"), CellLimits(cpu_s=10, wall_s=30))
        agent = EhrAgent(Chatbot(replies), Fixed("NOTE"), db_id, Memory(initial_memory(db_id)), proxy=tools)

        async def scored(record):
            return score(task, record, tools, agent, "NOTE", "judged")
        return await run_trial(task.key, 0, agent, None, tools, scored, Limits(max_steps=11), opening=task.question)

    async def all_of_them():
        out = []
        for db_id in FILES:
            task, cell = count_task(db_id)
            gold = task.answer[0]
            for name, (after, sr, cr) in cases.items():
                hostile = {"cell": f"answer = SQLInterpreter('drop table {first_table[db_id]}')"}
                replies = [hostile, {"cell": cell}, "The answer is {a}.\nTERMINATE"] if after is None else \
                    [{"cell": cell}, *after]
                replies = [r.format(a=gold, w=WORDS[int(gold)]) if isinstance(r, str) else
                           {"cell": r["cell"].replace("{w}", WORDS[int(gold)])} for r in replies]
                out.append((db_id, name, sr, cr, after is None, await one(db_id, task, cell, replies)))
        return out
    loop = asyncio.new_event_loop()
    try:
        results = loop.run_until_complete(all_of_them())
    finally:
        loop.close()
    for db_id, name, sr, cr, hostile_first, record in results:
        assert record.valid, (db_id, name, record.termination)
        assert (record.reward, record.score_parts["completed"]) == (sr, cr), (db_id, name)
        if hostile_first:
            assert "readonly" in record.messages[2]["content"], (db_id, record.messages[2]["content"])
