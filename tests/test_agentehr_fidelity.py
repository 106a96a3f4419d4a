"""AgentEHR against its authors' own code (BlueZeros/AgentEHR c03bd0cd, run outside the project on these inputs):
how `finish`'s answer is read and scored (src/test.py f1_score: tests/fixtures/agentehr_finish_f1_cases.json),
and what a keyword search finds and prints (record_tools.py, candidate_tools.py on the table as its EHR server
serves it: tests/fixtures/agentehr_keyword_cases.json); the contract recorded, and the original's sampling sent to
vLLM-served models only."""
import asyncio
import json
import re
import sqlite3
from pathlib import Path

import pytest

from ehrbench.benchmarks.agentehr.scoring import f1, parse_ehrbench, parse_original
from ehrbench.benchmarks.agentehr.tools import AgentEhrTools, _keyword_rows, _served

FIXTURES = Path(__file__).parent / "fixtures"
FINISH = json.loads((FIXTURES / "agentehr_finish_f1_cases.json").read_text())
KEYWORD = json.loads((FIXTURES / "agentehr_keyword_cases.json").read_text())


@pytest.mark.parametrize("case", FINISH["parse_cases"], ids=[c["input"][:30] for c in FINISH["parse_cases"]])
def test_finish_is_read_as_the_original_read_it(case):
    """The same names (as a set: the original kept a set); where the original crashed the whole evaluation (a
    name list mixing in a number) the answer reads as nothing. Nothing is ever evaluated."""
    got = parse_original(case["input"])
    if isinstance(case["original"], dict):                        # {"raised": ...}: the original's crash
        assert got == []
    else:
        assert set(got) == set(case["original"])


@pytest.mark.parametrize("case", FINISH["f1_cases"], ids=[c["task_answer_string"][:30] for c in FINISH["f1_cases"]])
def test_f1_is_the_original_s(case):
    got = f1(parse_original(case["task_answer_string"]), case["labels"], strip=False)
    want = case["original_score"] or {"f1_score": 0.0, "precision": 0.0, "recall": 0.0}   # its crash: nothing
    assert got == pytest.approx({"f1": want["f1_score"], "precision": want["precision"], "recall": want["recall"]})


def test_ehrbench_s_reading_is_the_named_improvement():
    """contract=ehrbench: a bare name is one name, brackets inside names are kept, predictions are stripped."""
    assert parse_ehrbench("Sepsis") == ["Sepsis"] and parse_original("Sepsis") == []
    assert parse_ehrbench("['Fracture [left]', 'B']") == ["Fracture [left]", "B"]
    assert f1([" Sepsis "], ["Sepsis"])["f1"] == 1.0 and f1([" Sepsis "], ["Sepsis"], strip=False)["f1"] == 0.0


def _table():
    t = KEYWORD["table"]
    return t["columns"], [tuple(r) for r in t["rows"]]


@pytest.mark.parametrize("case", [c for c in KEYWORD["records_cases"] if c["table_name"] == "labevents"],
                         ids=lambda c: c["keyword"])
def test_keyword_search_covers_every_column_as_the_original(case):
    """Every column as text (ids, numbers, dates, NULL as 'nan' / 'None'), case-insensitive, a regular expression."""
    columns, rows = _table()
    if isinstance(case["original"], dict):                       # the original raised re.error
        with pytest.raises(Exception, match="unterminated subpattern"):
            _keyword_rows(_served(columns, rows), case["keyword"])
        return
    found = _keyword_rows(_served(columns, rows), case["keyword"])
    text = found.to_string(index=False) if not found.empty else \
        f"No records found in table 'labevents' containing the keyword '{case['keyword']}'."
    assert text == case["original"]


def test_candidate_keyword_search_answers_as_the_original(tmp_path):
    table = KEYWORD["candidate_table"]
    path = tmp_path / "candidates.db"
    con = sqlite3.connect(path)
    con.execute(f'CREATE TABLE "{table["name"]}" (ccs_code INTEGER, candidate TEXT)')
    con.executemany(f'INSERT INTO "{table["name"]}" VALUES (?, ?)', table["rows"])
    con.commit()
    con.close()
    tools = AgentEhrTools(None, path, 1, "2150-01-03 00:00:00")
    for case in KEYWORD["candidate_cases"]:
        got = asyncio.run(tools.call("get_candidates_by_keyword", {"table_name": case["table_name"],
                                                                   "keyword": case["keyword"]}))
        if isinstance(case["original"], dict):                   # re.error: the tool's error, as MCP reports it
            assert got.startswith("Error executing tool get_candidates_by_keyword: missing ), unterminated")
        else:
            assert got == case["original"], case["keyword"]
    unoffered = asyncio.run(tools.call("retrieve_pubmed", {"query": "sepsis"}))      # knowledge off (the default)
    assert unoffered == "Error: Unknown tool 'retrieve_pubmed'."


def test_the_original_s_vllm_sampling_goes_to_vllm_models_only_and_the_contract_is_recorded():
    import yaml

    from ehrbench.benchmarks.agentehr.benchmark import AgentEhrBenchmark

    root = Path(__file__).parents[1]
    conf = yaml.safe_load((root / "conf" / "benchmark" / "agentehr.yaml").read_text())
    vllm = yaml.safe_load((root / "conf" / "model" / "vllm-qwen3-32b.yaml").read_text())
    gpt = yaml.safe_load((root / "conf" / "model" / "gpt-4o.yaml").read_text())
    bench = AgentEhrBenchmark(conf)
    served, openai = bench.sampling("agent", vllm), bench.sampling("summarizer", gpt)
    assert (served.temperature, served.top_p, served.presence_penalty, served.max_tokens) == (0.7, 0.8, 1.0, 4096)
    assert served.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}       # a qwen3 on vLLM
    assert (openai.temperature, openai.top_p, openai.presence_penalty, openai.max_tokens_name) == \
        (0.7, None, None, "max_tokens")
    assert openai.seed is None and served.seed is None                 # the original seeds no call
    assert bench.contract() == ("original", ["knowledge=false (no retrieve_* tools: MedRAG's corpora cannot ship)"])
    assert bench.headline_metric == "common/F1"
    assert bench.parse("Predictions: ['A','B']") == ["A", "B"]
    assert AgentEhrBenchmark({**conf, "contract": "ehrbench"}).parse("Sepsis") == ["Sepsis"]


def test_no_time_limit_as_the_original_and_a_bad_one_is_refused():
    """The original bounds a trial by its steps alone: `time_limit_s: null` is no limit (a trial is never cut and
    left unscored for its model's speed); a number sets one; nonsense stops the run at start."""
    import math

    import yaml

    from ehrbench.config import TrialLimits
    from ehrbench.llm.base import ConfigurationError

    conf = yaml.safe_load((Path(__file__).parents[1] / "conf" / "benchmark" / "agentehr.yaml").read_text())
    assert conf["time_limit_s"] is None and math.isinf(TrialLimits(time_limit_s=None).limits().time_limit_s)
    assert TrialLimits(time_limit_s=90).limits().time_limit_s == 90.0
    with pytest.raises((ConfigurationError, ValueError), match="time_limit_s"):
        TrialLimits(time_limit_s=-1)


def test_the_tools_are_declared_as_the_public_code_declares_them():
    """Names, descriptions, parameter descriptions and types word for word (`data/tools.yaml`, from the public
    code's @mcp.tool declarations): the longer texts the model reads, a string or a list where the original takes
    either; the knowledge tools say they are a substitute."""
    from ehrbench.benchmarks.agentehr.tools import PAPER_TOOLS, SPECS

    specs = {s["name"]: s for s in SPECS}
    assert len(PAPER_TOOLS) == 19 and "load_ehr" in specs and "read_resource_data" not in specs
    assert specs["get_records_by_keyword"]["description"].endswith(
        "It is useful for finding the record without specific the column name. Not that this tool cannot be used to "
        "search from Candidate Tables.")
    fuzzy = specs["get_candidates_by_fuzzy_matching"]["parameters"]["properties"]["keywords"]
    assert [t.get("type") for t in fuzzy["anyOf"]] == ["string", "array"]
    assert specs["finish"]["parameters"]["properties"]["response"]["type"] == "array"
    assert specs["retrieve_pubmed"]["description"].endswith("(ehrbench: a substitute corpus built from the benchmark "
                                                           "world's vocabulary.)")


# --- censoring=original: the authors' EHRManager on one shared patient (tests/fixtures/agentehr_censoring_*.json) ---

def _censoring_case(tmp_path):
    """The fixture's patient written as ehrbench stores one (typed columns, NULLs), its dictionaries and candidate
    tables, and the rules with the fixture's dictionary joins (the original's link_information.json)."""
    import dataclasses
    import sqlite3

    from ehrbench.benchmarks.agentehr.censoring import MIMIC_IV

    given = json.loads((FIXTURES / "agentehr_censoring_input.json").read_text())
    cases = json.loads((FIXTURES / "agentehr_censoring_cases.json").read_text())

    def write(path, tables):
        conn = sqlite3.connect(path)
        for name, t in tables.items():
            conn.execute(f'CREATE TABLE "{name}" ({", ".join(chr(34) + c + chr(34) for c in t["columns"])})')
            conn.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(t["columns"]))})', t["rows"])
        conn.commit()
        conn.close()
    write(tmp_path / "patient.db", given["tables"])
    write(tmp_path / "reference.db", given["reference"])
    write(tmp_path / "candidates.db", {n: {"columns": t["columns"], "rows": [["" if v is None else v for v in r]
                                                                             for r in t["rows"]]}
                                       for n, t in given["candidates"].items()})
    reference = given["reference"]
    links = {link["table_name"]: (link["link_table"], tuple(link["link_column"]) if isinstance(
        link["link_column"], list) else (link["link_column"],), tuple(c for c in reference[link["link_table"]]["columns"]
                                                                      if c not in link["link_column"]))
             for link in given["link_info"] if link["table_name"] != "prescriptions"}   # ndc: below
    return cases, dataclasses.replace(MIMIC_IV, links=links)


def test_original_censoring_shows_what_the_authors_ehrmanager_showed(tmp_path):
    """Every table at nine times around three admissions, cell for cell: cut by the first time column, date-only
    columns read at 23:59, the added diagnoses_icd.charttime and admissions.text, pharmacy emptied, ndc zero-filled,
    dictionaries joined. The fixture stored a missing value as 'None' (its input was JSON); from MIMIC's CSVs, as
    ehrbench serves it, it is 'nan'."""
    from ehrbench.benchmarks.agentehr.censoring import CensoredPatient

    cases, rules = _censoring_case(tmp_path)
    for load in cases["loads"]:
        view = CensoredPatient(tmp_path / "patient.db", load["timestamp"], tmp_path / "reference.db", rules,
                               "original", tmp_path / "candidates.db")
        logged = dict(re.findall(r"Loading '(\w+)' with (\d+) rows", load["log"].split("Loading EHR Tables:")[1]))
        assert {t: str(n) for t, n in view.counts.items()} == logged, load["timestamp"]
        for table, served in load["tables"].items():
            expected_columns = [c for c in served if not (table == "prescriptions" and c in ("atc_code", "name"))]
            columns, rows = view.query(f'SELECT * FROM "{table}"')
            expected = [[{"None": "nan", "0000000None": "00000000nan"}.get(v, v) for v in r]
                        for r in zip(*(served[c] for c in expected_columns))]
            if expected:                      # an empty frame moves the join keys (a pandas quirk, not kept)
                assert columns == expected_columns, (load["timestamp"], table)
            else:
                assert set(columns) == set(expected_columns), (load["timestamp"], table)
            assert [list(r) for r in rows] == expected, (load["timestamp"], table)
        view.close()


def test_run_sql_query_answers_as_the_original_over_the_view_and_the_candidate_tables(tmp_path, monkeypatch):
    """The fixture's queries through the tool: text cells (valuenum > 5 compares text, as there), candidate tables
    joinable, no table named -> the original's error with the table list, pandas' wording of an SQL error. Lines are
    compared word by word (a 'None' cell there is 'nan' here, so column widths differ)."""
    import shutil

    from ehrbench.benchmarks.agentehr import censoring, views

    cases, rules = _censoring_case(tmp_path)
    folder = tmp_path / "split"
    folder.mkdir()
    shutil.copy(tmp_path / "patient.db", folder / f"patient_{cases['subject_id']}.db")
    shutil.copy(tmp_path / "reference.db", folder / "reference.db")
    monkeypatch.setitem(views.RULES, "fixture", rules)
    assert censoring.RULES["fixture"] is rules
    for case in [c for c in cases["sql"] if "atc_code" not in c["sql"]]:     # the dataset's ndc link: not here
        tools = AgentEhrTools(views.InProcess(views.PatientViews({"fixture": folder})), tmp_path / "candidates.db",
                              cases["subject_id"], case["timestamp"], source="fixture", censoring="original")
        asyncio.run(tools.call("load_ehr", {"subject_id": str(cases["subject_id"]), "timestamp": case["timestamp"]}))
        got = asyncio.run(tools.call("run_sql_query", {"subject_id": str(cases["subject_id"]),
                                                       "sql_query": case["sql"]}))
        words = [[{"None": "nan"}.get(w, w) for w in line.split()] for line in case["output"].splitlines()]
        if case["output"].startswith("Error: The SQL query"):       # the same tables, listed in the file's order
            assert got.split("Available tables:")[0] == case["output"].split("Available tables:")[0]
            listed = case["output"].split("Available tables: ")[1]
            assert sorted(eval(got.split("Available tables: ")[1])) == sorted(eval(listed))  # noqa: S307 - a list
        else:
            assert [line.split() for line in got.splitlines()] == words, case["sql"]


class _Scripted:
    """A model replying from the fixture's script (text, a tool call, or an error)."""

    def __init__(self, replies):
        from ehrbench.llm.base import ChatResponse
        from ehrbench.trial import ToolCall

        self.replies, self.requests = [], []
        for i, r in enumerate(replies):
            self.replies.append(ChatResponse(text=r["text"]) if "text" in r else
                                ChatResponse(tool_calls=[ToolCall(r["tool"], r["args"], f"c{i}")]))

    async def complete(self, request):
        self.requests.append(request)
        return self.replies.pop(0)


class _Outputs:
    """Tools answering each call with the fixture's fixed text."""

    def __init__(self, outputs):
        self.outputs, self.calls = outputs, []

    async def call(self, name, arguments):
        self.calls.append(name)
        return self.outputs.get(name, "Loading EHR Tables: ..." if name == "load_ehr" else
                                f"Error: Unknown tool '{name}'.")

    async def close(self):
        pass


AGENT_LOOP = json.loads((FIXTURES / "agentehr_agent_loop_cases.json").read_text())


@pytest.mark.parametrize("name", sorted(AGENT_LOOP["cases"]))
def test_the_react_loop_asks_stops_and_answers_as_the_original(name):
    """The authors' MCPBaseAgent on scripted replies: how many model calls, which tools ran, the answer, its F1.
    Where ehrbench differs on purpose the test says so: a model that always raises is the provider's fault here
    (the trial is re-run; the original's run crashed), a mixed-type list crashed the original's scorer (here it reads
    as no answer), and a forced finish answered with another tool ran that tool there (an empty answer
    either way)."""
    from ehrbench.benchmarks.agentehr.agent import ReActAgent
    from ehrbench.trial import run_trial

    case = AGENT_LOOP["cases"][name]
    if "raise" in case["input"]["replies"][0]:
        assert case["llm_run_calls"] == 5 and case["execution_steps"] == []       # five tries, then a crash
        return
    model, tools = _Scripted(case["input"]["replies"]), _Outputs(AGENT_LOOP["tool_outputs"])
    agent = ReActAgent(model, 1, "2150-01-03 00:00:00", max_turns=case["input"].get("max_exec_steps", 100))

    async def score(record):
        return None
    record = asyncio.run(run_trial("k", 0, agent, None, tools, score, opening="<task prompt>"))
    assert len(model.requests) == case["llm_run_calls"]
    served = [n for n in tools.calls if n != "load_ehr"]
    original = [c[0] for c in case["mcp_calls"]]
    forced_other_tool = case["completion"] == "active"
    assert served == (original[:-1] if forced_other_tool else original)
    answer = record.messages[-1]["content"]
    assert answer == ("[]" if forced_other_tool else case["task_answer"])
    predicted = parse_original(answer)
    if "score" in case:
        assert sorted(predicted) == sorted(case.get("prediction") or [])
        assert f1(predicted, AGENT_LOOP["ground_truth"])["f1"] == pytest.approx(case["score"]["f1_score"])
    else:                                                 # the original's scorer raised on ['Sepsis', 1]
        assert "score_raised" in case and predicted == []


TAXONOMY = json.loads((FIXTURES / "agentehr_error_taxonomy_cases.json").read_text())
# What the paper's appendix E definitions say of each trajectory the authors' agent loop produced (the public code has
# no classifier to run: the fixture's meta). Only the classes that apply are listed; the rest are 0.
EXPECTED_ERRORS = {
    "column_not_found_then_finish": {"tool_usage_error"},             # "Error: Column 'foo' not found ..."
    "unknown_tool_then_finish": {"tool_usage_error"},                 # the MCP client's "Unknown tool: get_foo"
    "five_identical_calls_then_finish": {"tool_repeat", "no_candidate_tool"},
    "six_identical_calls_loop_breaker": {"tool_repeat", "no_candidate_tool"},
    "no_finish_model_ignores_termination": {"tool_repeat", "no_prediction"},
    "same_tool_different_args_x5_then_finish": {"no_candidate_tool"},  # five calls: short of a single-tool loop (10)
    "two_tool_cycle_x3_then_finish": {"no_candidate_tool"},            # six calls: short of a cyclic loop (> 15)
    "no_candidate_tool_used_then_finish": {"no_candidate_tool"},
    "text_reply_without_tool_call_then_finish": {"no_candidate_tool"},
    "finish_with_empty_list": {"no_prediction"},
    "finish_with_unparsable_string": {"no_prediction"},
    "saved_trajectory_ending_in_error_observation": {"no_prediction", "tool_usage_error"},   # no finish at all
}


@pytest.mark.parametrize("case", TAXONOMY["cases"], ids=lambda c: c["name"])
def test_the_error_taxonomy_over_the_authors_trajectories(case):
    """The authors' saved trajectories (execution_steps: the action, str(params), the observation), classified by
    `interaction_errors`; the prediction is the original's reading of the answer (a trajectory without a finish has
    none: ehrbench does not re-score from the last observation as the original's --resume did)."""
    import ast

    from ehrbench.benchmarks.agentehr.scoring import ERRORS, interaction_errors

    steps = case["execution_steps"]
    calls = [(s["action"], ast.literal_eval(s["params"]), s["observation"]) for s in steps if s["action"] != "finish"]
    answer = case["original_runtime"].get("task_answer", "")
    predicted = parse_original(answer) if any(s["action"] == "finish" for s in steps) else []
    assert sorted(predicted) == sorted(case["original_runtime"].get("prediction", []))
    errors = interaction_errors(calls, predicted)
    assert {k for k in ERRORS if errors[k]} == EXPECTED_ERRORS[case["name"]]


def test_a_bad_censoring_or_clinsql_grading_option_stops_the_run_naming_field_and_choices():
    """Each new option read at start: an unknown value is refused with the field and its choices; the defaults are
    the original's (censoring=original; contract=ehrbench brings ehrbench's rule and records it)."""
    import yaml

    from ehrbench.benchmarks.agentehr.benchmark import AgentEhrBenchmark
    from ehrbench.benchmarks.clinsql.benchmark import ClinSqlBenchmark
    from ehrbench.llm.base import ConfigurationError

    conf = Path(__file__).parents[1] / "conf" / "benchmark"
    agentehr = {**yaml.safe_load((conf / "agentehr.yaml").read_text()), "world": {"seed": 0, "scale": 2}}
    assert AgentEhrBenchmark(agentehr).censoring() == "original"
    ehrbench = AgentEhrBenchmark({**agentehr, "contract": "ehrbench"})
    assert ehrbench.censoring() == "ehrbench" and any("censoring=ehrbench" in d for d in ehrbench.contract()[1])
    with pytest.raises(ConfigurationError, match=r"benchmark.censoring='strict'.*original.*ehrbench"):
        AgentEhrBenchmark({**agentehr, "censoring": "strict"}).check()
    clinsql = {**yaml.safe_load((conf / "clinsql.yaml").read_text()), "world": {"seed": 0, "scale": 100}}
    for field, value, says in (("grading", "rules", "judge .* or offline"), ("leaf_checker", "yes", "true or false"),
                               ("judge_gold", 1, "true or false"), ("contract", "paper", "original .* or ehrbench"),
                               ("max_rows", 0, "integer >= 1")):
        with pytest.raises(ConfigurationError, match=rf"benchmark.{field}=.*{says}"):
            ClinSqlBenchmark({**clinsql, field: value}).check()
    assert ClinSqlBenchmark(clinsql).leaf_checker() is False
    assert ClinSqlBenchmark({**clinsql, "contract": "ehrbench"}).leaf_checker() is True
