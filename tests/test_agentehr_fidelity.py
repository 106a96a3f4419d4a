"""AgentEHR against its authors' own code (BlueZeros/AgentEHR c03bd0cd, run outside the project on these inputs):
how `finish`'s answer is read and scored (src/test.py f1_score: tests/fixtures/agentehr_finish_f1_cases.json),
and what a keyword search finds and prints (record_tools.py, candidate_tools.py on the table as its EHR server
serves it: tests/fixtures/agentehr_keyword_cases.json); the contract recorded, and the original's sampling sent to
vLLM-served models only."""
import asyncio
import json
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
    assert bench.sampling(vllm) == {"top_p": 0.8, "presence_penalty": 1.0} and bench.sampling(gpt) == {}
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
