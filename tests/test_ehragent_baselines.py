"""The paper's baselines on EHRAgent's tools (`baselines.py`): ReAct's tool calls mean the same as EHRAgent's code,
Self-Debugging asks for an explanation after a failed or empty query, LLM2SQL runs one query once, and all three are
scored by EHRAgent's judges (run end to end with a scripted model on a rendered EHRSQL MIMIC-III)."""
import asyncio
import sqlite3

import pytest

from ehrbench.agents.code_sandbox import CellLimits
from ehrbench.benchmarks.ehragent.baselines import SQL_FIX, BaselineAgent, BaselineTools, extract_sql
from ehrbench.benchmarks.ehragent.benchmark import score, table_names
from ehrbench.benchmarks.ehragent.tasks import Task
from ehrbench.benchmarks.ehragent.tools import FEEDBACK, CodeInterface
from ehrbench.db.database import Database
from ehrbench.llm.base import ChatResponse
from ehrbench.runtime.hosts import LocalHost
from ehrbench.trial import Limits, ToolCall, run_trial

DB = "ehrsql_mimic_iii"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.world.generator import WorldSize

    return build_database(DB, WorldSpec(seed=1, size=WorldSize(mimic_patients=8), dictionary="used"),
                          tmp_path_factory.mktemp("ehrsql"))


def interface(path) -> CodeInterface:
    return CodeInterface(DB, LocalHost(Database(path, DB)), table_names(DB), "q", "2105-12-31 23:59:00", None,
                         CellLimits())


def run(coro):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


class Model:
    def __init__(self, *replies):
        self.replies, self.requests = list(replies), []

    async def complete(self, request):
        self.requests.append(request)
        return self.replies.pop(0)


def test_react_tool_calls_mean_what_the_same_code_means(db_path):
    con = sqlite3.connect(db_path)
    subject, hadms = con.execute("SELECT SUBJECT_ID, GROUP_CONCAT(HADM_ID, ', ') FROM (SELECT * FROM ADMISSIONS "
                                 "ORDER BY ROW_ID) GROUP BY SUBJECT_ID LIMIT 1").fetchone()
    tools = BaselineTools(interface(db_path), "react")
    listed = run(tools.call("GetValue", {"table": "admissions", "conditions": f"SUBJECT_ID={subject}",
                                         "argument": "HADM_ID, list"}))
    assert sorted(listed.strip("[]").replace("'", "").split(", ")) == sorted(str(hadms).split(", "))
    count = con.execute("SELECT COUNT(*) FROM PATIENTS").fetchone()[0]
    assert run(tools.call("SQLInterpreter", {"sql": "SELECT COUNT(*) FROM patients"})) == f"[({count},)]"
    missing = run(tools.call("LoadDB", {"table": "no_such_table"}))
    assert "KeyError" in missing and FEEDBACK not in missing            # the tool's own error, no code advice
    assert run(tools.call("python", {"cell": "answer = 1"})) == "Error: Function python not found."


def test_self_debugging_asks_to_explain_and_fix_failed_or_empty_queries(db_path):
    tools = BaselineTools(interface(db_path), "self_debugging")
    assert run(tools.call("execute_sql", {"sql": "SELEC 1"})).endswith(SQL_FIX)
    assert run(tools.call("execute_sql", {"sql": "SELECT 1 WHERE 0"})) == "[]\n" + SQL_FIX
    assert run(tools.call("execute_sql", {"sql": "SELECT 7"})) == "[(7,)]"


def test_extract_sql_takes_the_last_fenced_block_or_the_whole_reply():
    assert extract_sql("Here:\n```sql\nSELECT 1\n```\nor better\n```sql\nSELECT 2;\n```") == "SELECT 2;"
    assert extract_sql("SELECT 3") == "SELECT 3"


@pytest.mark.parametrize("kind", ["llm2sql", "self_debugging", "react"])
def test_each_baseline_answers_end_to_end_and_is_scored_like_ehragent(db_path, kind):
    count = sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM ADMISSIONS").fetchone()[0]
    task = Task("q1", DB, "how many admissions are there?", "SELECT COUNT(*) FROM admissions", [str(count)], 1)
    good = "SELECT COUNT(*) FROM admissions"
    replies = {"llm2sql": [ChatResponse(text=f"```sql\n{good}\n```")],
               "self_debugging": [ChatResponse(tool_calls=[ToolCall("execute_sql", {"sql": "SELECT COUNT(*) FROM adm"})]),
                                  ChatResponse(tool_calls=[ToolCall("execute_sql", {"sql": good})]),
                                  ChatResponse(text=f"The answer is {count}.\nTERMINATE")],
               "react": [ChatResponse(tool_calls=[ToolCall("GetValue", {"table": "admissions", "conditions": "",
                                                                        "argument": "HADM_ID, count"})]),
                         ChatResponse(text=f"There are {count} admissions.\nTERMINATE")]}[kind]
    model = Model(*replies)
    tools = BaselineTools(interface(db_path), kind)
    agent = BaselineAgent(kind, model, DB, LocalHost(Database(db_path, DB)), table_names(DB))

    async def scored(record):
        return score(task, record, tools)
    record = run(run_trial(task.key, 0, agent, None, tools, scored, Limits(max_steps=11), opening=task.question))
    assert record.reward == 1.0 and record.score_parts["completed"] == 1.0, record.messages
    assert not model.replies                                            # every scripted reply was asked for
    system = model.requests[0].system
    assert "CREATE TABLE" in system and "ADMISSIONS" in system          # the tables, as the database shows them
    if kind == "react":
        assert {t["name"] for t in model.requests[0].tools} == {"LoadDB", "FilterDB", "GetValue", "SQLInterpreter",
                                                                "Calendar", "Calculate"}
    if kind == "self_debugging":
        assert SQL_FIX in record.messages[2]["content"]                 # the failed query came back with the request


def test_llm2sql_with_a_failing_query_is_not_completed(db_path):
    task = Task("q1", DB, "how many?", "SELECT 1", ["1"], 1)
    tools = BaselineTools(interface(db_path), "llm2sql")
    agent = BaselineAgent("llm2sql", Model(ChatResponse(text="SELECT nope FROM nowhere")), DB,
                          LocalHost(Database(db_path, DB)), table_names(DB))

    async def scored(record):
        return score(task, record, tools)
    record = run(run_trial(task.key, 0, agent, None, tools, scored, Limits(), opening=task.question))
    assert record.reward == 0.0 and record.score_parts["completed"] == 0.0


@pytest.mark.parametrize("kind", ["react", "llm2sql", "self_debugging"])
def test_agent_choice_builds_the_baseline_on_the_benchmark_s_tools(db_path, kind):
    """`agent=react|llm2sql|self_debugging` with benchmark=ehragent: the episode holds the baseline and its tools,
    and no debugger or knowledge model is asked for (those are EHRAgent's)."""
    from types import SimpleNamespace

    from ehrbench.benchmark import Hosts
    from ehrbench.benchmarks.ehragent.benchmark import EhrAgentBenchmark

    roles = []
    settings = SimpleNamespace(agent=kind, agent_latency_s=0.0, agent_model={"name": "m"},
                               model_for=lambda role, meter: roles.append(role) or Model())
    options = {"databases": [DB], "memory": "frozen", "knowledge": True, "debugging": True, "cell_cpu_s": 30,
               "cell_wall_s": 60, "cell_memory_mb": 2048, "sql_timeout_s": 60}
    task = Task("q1", DB, "q?", "SELECT 1", ["1"], 1)
    episode = EhrAgentBenchmark(options).episode(task, 0, Hosts({DB: LocalHost(Database(db_path, DB))}), settings,
                                                 None, 7)
    assert isinstance(episode.agent, BaselineAgent) and episode.agent.kind == kind
    assert isinstance(episode.tools, BaselineTools) and episode.tools.code.debugger is None
    assert roles == ["agent"]


def test_memory_admits_as_main_py_judged_or_as_the_named_improvement(db_path):
    """Sequential memory's item: {question, knowledge note, last cell}. The original (`judged`) admits what main.py's
    judge passes on the log's window, TERMINATE or not; `successful` only completed, passed questions; `completed`
    any that said TERMINATE; never without the sequential mode (knowledge None)."""
    from types import SimpleNamespace

    from ehrbench.trial import TrialRecord

    agent = SimpleNamespace(opening="the prompt", unexecuted=None)
    task = Task("q1", DB, "how many?", "SELECT 1", ["41"], 1)
    cell = {"cell": "answer = 40"}
    messages = [
        {"role": "user", "content": task.question},
        {"role": "assistant", "content": None, "tool_call": {"name": "python", "arguments": {"cell": "x = 1"}}},
        {"role": "tool", "content": "1"},
        {"role": "assistant", "content": None, "tool_call": {"name": "python", "arguments": cell}},
        {"role": "tool", "content": "40"},
        {"role": "assistant", "content": "The answer is 40.\nTERMINATE"}]
    record = TrialRecord(task.key, 2, "answered", None, messages=messages)
    tools = interface(db_path)
    ran = {"stream": f"{DB}#2/last_cell", "key": "last", "item": {"code": "answer = 40"}}   # the proxy's `code`
    assert score(task, record, tools, agent, "note").memory == [ran]              # wrong answer: not remembered
    [item, last] = score(task, record, tools, agent, "note", "completed").memory
    assert (item, last) == ({"stream": f"{DB}#2", "key": task.key,
                             "item": {"question": "how many?", "knowledge": "note", "code": "answer = 40"}}, ran)
    solved = Task("q1", DB, "how many?", "SELECT 1", ["40"], 1)
    assert score(solved, record, tools, agent, "note").memory[0]["item"]["code"] == "answer = 40"
    assert score(solved, record, tools, agent, None).memory == []
    unfinished = TrialRecord(task.key, 2, "answered", None, messages=messages[:-1] + [
        {"role": "assistant", "content": "It is 40, I think."}])
    result = score(solved, unfinished, tools, agent, "note")                      # no TERMINATE: not completed,
    assert (result.parts["completed"], result.reward) == (0.0, 0.0) and len(result.memory) == 2   # yet judged in
    assert score(solved, unfinished, tools, agent, "note", "successful").memory == [ran]
    # a question that ran no cell is remembered with the chain's last cell, as the original's proxy kept it
    agent.memory = SimpleNamespace(previous_cell="answer = 39")
    agent.opening = "the prompt\nSolution:"          # the window of a log with no cell opens at its last Solution:
    no_cell = TrialRecord(task.key, 2, "answered", None, messages=[messages[0], {
        "role": "assistant", "content": "The answer is 40.\nTERMINATE"}])
    assert score(solved, no_cell, tools, agent, "note").memory == [
        {"stream": f"{DB}#2", "key": task.key, "item": {"question": "how many?", "knowledge": "note",
                                                        "code": "answer = 39"}}]


def test_a_bad_memory_file_is_refused_at_start_naming_file_line_and_field(tmp_path):
    from ehrbench.benchmarks.ehragent.benchmark import EhrAgentBenchmark
    from ehrbench.llm.base import ConfigurationError

    options = {"databases": [DB], "memory": "frozen", "memory_seed": 42, "knowledge": True, "debugging": True,
               "cell_cpu_s": 30, "cell_wall_s": 60, "cell_memory_mb": 2048, "sql_timeout_s": 60,
               "task_dir": str(tmp_path)}
    bad = tmp_path / "memory.jsonl"
    bad.write_text('{"db_id": "ehrsql_mimic_iii", "question": "q", "knowledge": "k", "code": "c"}\n{"db_id": "x"}\n')
    with pytest.raises(ConfigurationError, match=r"memory.jsonl: line 2: field 'question' missing"):
        EhrAgentBenchmark({**options, "memory_file": str(bad)}).check()
    with pytest.raises(ConfigurationError, match="needs benchmark.memory=frozen"):
        EhrAgentBenchmark({**options, "memory": "sequential", "memory_file": str(bad)}).check()


def test_autogen_is_ehragent_s_chat_without_knowledge_debugging_or_memory(db_path):
    """The paper's AutoGen baseline (Table 4): the same chat, code interface and four initial examples, no knowledge
    note, no debugger, no long-term memory; scored from the original's log as EHRAgent is."""
    from types import SimpleNamespace

    from ehrbench.benchmark import Hosts
    from ehrbench.benchmarks.ehragent.agent import EhrAgent
    from ehrbench.benchmarks.ehragent.benchmark import EhrAgentBenchmark
    from ehrbench.benchmarks.ehragent.prompts import initial_memory

    roles = []
    settings = SimpleNamespace(agent="autogen", agent_latency_s=0.0, agent_model={"name": "m"},
                               model_for=lambda role, meter: roles.append(role) or Model())
    options = {"databases": [DB], "memory": "sequential", "knowledge": True, "debugging": True, "cell_cpu_s": 30,
               "cell_wall_s": 60, "cell_memory_mb": 2048, "sql_timeout_s": 60}
    task = Task("q1", DB, "q?", "SELECT 1", ["1"], 1)
    episode = EhrAgentBenchmark(options).episode(task, 0, Hosts({DB: LocalHost(Database(db_path, DB))}), settings,
                                                 None, 7)
    assert isinstance(episode.agent, EhrAgent) and episode.agent.knowledge_model is None
    assert episode.tools.debugger is None and roles == ["agent"]
    assert episode.agent.memory.items == initial_memory(DB)


def test_the_contract_and_every_departure_from_it_are_named():
    """contract=original by default; the improvements are opt-ins, named with the ablations in what the run records."""
    from pathlib import Path

    import yaml

    from ehrbench.benchmarks.ehragent.benchmark import EhrAgentBenchmark
    from ehrbench.llm.base import ConfigurationError

    conf = yaml.safe_load((Path(__file__).parents[1] / "conf" / "benchmark" / "ehragent.yaml").read_text())
    default = EhrAgentBenchmark(conf)
    default.check()
    assert default.contract() == ("original", []) and default.memory_from() == "judged"
    mixed = EhrAgentBenchmark({**conf, "memory": "frozen", "memory_from": "successful", "num_shots": 8})
    assert mixed.contract() == ("original", ["memory_from=successful", "memory=frozen (w/o long-term memory)",
                                             "num_shots=8"])
    improved = EhrAgentBenchmark({**conf, "contract": "ehrbench"})
    assert improved.contract() == ("ehrbench", []) and improved.memory_from() == "successful"
    assert (default.choice("error_text"), improved.choice("error_text")) == ("original", "informative")
    assert EhrAgentBenchmark({**conf, "error_text": "informative"}).contract() == ("original",
                                                                                  ["error_text=informative"])
    assert (default.prompt_set("treqs"), EhrAgentBenchmark({**conf, "treqs_prompts": "eicu"}).prompt_set("treqs"),
            default.prompt_set("ehrsql_eicu")) == ("treqs", "ehrsql_eicu", "ehrsql_eicu")
    for option, value in (("error_text", "terse"), ("treqs_prompts", "mimic")):
        with pytest.raises(ConfigurationError, match=f"benchmark.{option}='{value}': choose"):
            EhrAgentBenchmark({**conf, option: value}).check()
    with pytest.raises(ConfigurationError, match="benchmark.contract='paper': choose original"):
        EhrAgentBenchmark({**conf, "contract": "paper"}).check()
    with pytest.raises(ConfigurationError, match="benchmark.num_shots=-1"):
        EhrAgentBenchmark({**conf, "num_shots": -1}).check()
