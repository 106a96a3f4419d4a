import asyncio
import json

import pytest

from ehrbench.benchmarks.ehrchatqa.benchmark import INDEXED_COLUMNS
from ehrbench.benchmarks.ehrchatqa.tools import ToolSuite
from ehrbench.benchmarks.ehrchatqa.web_search import VocabularyWebSearch
from ehrbench.runtime.hosts import LocalHost

from .conftest import EchoIndex


class Tools:
    """A ToolSuite over in-process hosts, called synchronously (each call on its own event loop)."""

    def __init__(self, db, index, web):
        self.suite = ToolSuite("mimic_iv_star", LocalHost(db), LocalHost(index), web, INDEXED_COLUMNS["mimic_iv_star"])

    def call(self, name, arguments):
        return asyncio.run(self.suite.call(name, arguments))


@pytest.fixture(scope="module")
def tools(dbs):
    return Tools(dbs["mimic_iv_star"], EchoIndex(), VocabularyWebSearch())


def test_table_search_lists_tables(tools):
    out = tools.call("table_search", {"tool_input": ""})
    assert out.startswith("admissiondiagnoses, admissionprocedures, clinicalevents")
    assert out.split(", ")[-1] == "procedurecodes"


def test_column_search_matches_the_original_layout_and_per_table_errors(tools):
    out = tools.call("column_search", {"table_names": "demographics, admissiondiagnoses,nope,"})
    blocks = out.split("\n\n\n")
    assert len(blocks) == 4
    assert blocks[0].startswith("CREATE TABLE demographics (\n\trecordid INTEGER NOT NULL,\n\tpatientid INTEGER NOT NULL,"
                                "\n\tgender TEXT NOT NULL,\n\tdateofbirth TEXT NOT NULL,\n\tdateofdeath TEXT,"
                                "\n\tPRIMARY KEY (recordid)\n)\n/*\n3 rows from demographics table:\n"
                                "recordid\tpatientid\tgender\tdateofbirth\tdateofdeath\n")
    assert blocks[0].endswith("\n*/") and blocks[0].count("\n") == 14       # 6 column and key lines, ")", "/*", title, header, 3 rows, "*/"
    # SQLite lists foreign keys last-declared first; each pair has its own line
    assert ",\n\tFOREIGN KEY (codeversion) REFERENCES diagnosiscodes (codeversion),\n\tFOREIGN KEY (icdcode) " \
           "REFERENCES diagnosiscodes (icdcode),\n\tFOREIGN KEY (admissionid) REFERENCES hospitaladmissions " \
           "(admissionid)\n)" in blocks[1]
    assert blocks[2:] == ["Error: table_names {'nope'} not found in database",
                          "Error: table_names {''} not found in database"]


def test_value_substring_search_strings(tools):
    out = tools.call("value_substring_search", {"table": "labtesttypes", "column": "itemname", "value": "TROPONIN"})
    assert out == "Values in labtesttypes.itemname containing 'TROPONIN': ['troponin i', 'troponin t']."
    assert tools.call("value_substring_search", {"table": "labtesttypes", "column": "itemname", "value": "zzz"}) == \
        "No values in labtesttypes.itemname contain 'zzz'."
    assert tools.call("value_substring_search", {"table": "labtesttypes", "column": "nope", "value": "x"}) == (
        "Error retrieving matching values: (sqlite3.OperationalError) no such column: nope\n"
        "[SQL: SELECT COUNT(DISTINCT nope) FROM labtesttypes WHERE nope LIKE ? COLLATE NOCASE]\n"
        "[parameters: ('%x%',)]\n(Background on this error at: https://sqlalche.me/e/20/e3q8)")
    assert tools.call("value_substring_search", {"table": "x'; DROP TABLE y; --", "column": "a", "value": "x"}).startswith(
        "Error retrieving matching values: (sqlite3.OperationalError) no such table: x'; DROP TABLE y; --\n")
    assert tools.call("value_substring_search", {"table": "labtesttypes", "column": "itemname", "value": "x",
                                                 "k": "abc"}) == "Error: invalid literal for int() with base 10: 'abc'"


def test_value_similarity_search_strings(tools, dbs):
    many = Tools(dbs["mimic_iv_star"], EchoIndex(["a", "b"]), None)
    args = {"table": "labtesttypes", "column": "itemname", "value": "Hb"}
    assert many.call("value_similarity_search", args) == "I found close matches in labtesttypes.itemname: ['a', 'b']."
    assert tools.call("value_similarity_search", args) == "I found one close match in labtesttypes.itemname: 'hb'."
    none = Tools(dbs["mimic_iv_star"], EchoIndex([]), None)
    assert none.call("value_similarity_search", args) == "No matches found in labtesttypes.itemname for 'hb'."
    # a column the index does not hold is no error in the original: its filter simply matches nothing
    assert tools.call("value_similarity_search", {"table": "demographics", "column": "gender", "value": "F"}) == \
        "No matches found in demographics.gender for 'f'."


def test_sql_execute_strings(tools):
    assert tools.call("sql_execute", {"query": "SELECT COUNT(*) FROM demographics"}) == "[(100,)]"
    out = tools.call("sql_execute", {"query": "SELECT patientid FROM demographics ORDER BY patientid", "k": "3"})
    head, note = out.split("\n\n")
    assert len(eval(head)) == 3
    assert note == "Note: There are 97 results not shown (out of 100 total results)."
    assert tools.call("sql_execute", {"query": "SELECT * FROM patients"}) == (
        "Error: (sqlite3.OperationalError) no such table: patients\n[SQL: SELECT * FROM patients]\n"
        "(Background on this error at: https://sqlalche.me/e/20/e3q8)")
    assert tools.call("sql_execute", {"query": "DELETE FROM demographics"}) == (
        "Error: (sqlite3.OperationalError) attempt to write a readonly database\n[SQL: DELETE FROM demographics]\n"
        "(Background on this error at: https://sqlalche.me/e/20/e3q8)")
    assert tools.call("sql_execute", {"query": "SELECT 1; SELECT 2"}).startswith(
        "Error: (sqlite3.ProgrammingError) You can only execute one statement at a time.\n[SQL: SELECT 1; SELECT 2]")
    assert tools.call("sql_execute", {"query": " "}) == \
        "Error: This result object does not return rows. It has been closed automatically."
    assert tools.call("sql_execute", {"query": "SELECT 'it''s', NULL, 1.5, printf('%.*c', 400, 'x')"}) == (
        "[(\"it's\", None, 1.5, '" + "x" * 149 + " ... (102 characters truncated) ... " + "x" * 149 + "')]")
    runaway = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r"
    assert tools.call("sql_execute", {"query": runaway, "timeout": 1}) == \
        "Error: Query execution timed out after 1 seconds"


def test_bad_calls_are_worded_as_the_original_dispatcher_words_them(tools):
    assert tools.call("sql_execute", {}) == \
        "Error: SQLExecute.invoke() missing 1 required positional argument: 'query'"
    assert tools.call("sql_execute", {"query": "SELECT 1", "foo": 1}) == \
        "Error: SQLExecute.invoke() got an unexpected keyword argument 'foo'"
    assert tools.call("table_search", {"x": 1}) == "Error: TableSearch.invoke() got an unexpected keyword argument 'x'"
    assert tools.call("web_search", {}) == "Error: WebSearch.invoke() missing 1 required positional argument: 'query'"
    assert tools.call("nope", {}) == "Unknown action nope"


def test_tool_descriptions_are_the_originals(tools):
    from ehrbench.benchmarks.ehrchatqa.tools import tool_schemas

    schemas = {s["name"]: s for s in tool_schemas(INDEXED_COLUMNS["eicu_star"])}
    assert list(schemas) == ["table_search", "column_search", "sql_execute", "value_substring_search",
                             "value_similarity_search", "web_search"]
    assert schemas["value_similarity_search"]["description"] == (
        "Perform a semantic similarity search (embedding-based) to find up to k values similar to a given value in a "
        "specified column. Supported columns: allergy_reaction: ['drug_name', 'allergy_name'], condition: "
        "['condition_name'], fluid_balance: ['fluid_label'], lab: ['lab_name'], prescription: ['drug_name'], "
        "icupatient: ['ethnicity', 'hospital_admission_source'], treatment: ['treatment_name']")
    sql = schemas["sql_execute"]
    assert sql["description"].endswith("The maximum number of results to return is 100.")
    assert sql["parameters"]["properties"]["timeout"]["description"] == \
        "Maximum execution time in seconds before the query is terminated. Default is 60 seconds."
    assert sql["parameters"]["required"] == ["query"] and "default" not in str(sql)


def test_web_search_returns_a_json_list_of_snippets(tools):
    out = tools.call("web_search", {"query": "lopressor generic name"})
    results = json.loads(out)
    assert 1 <= len(results) <= 10 and all(isinstance(r, str) for r in results)
    assert "metoprolol tartrate" in results[0]
    assert out.startswith('[\n  "')                     # indented by 2, as the original dumps it


def test_unknown_web_search_backend_is_refused_at_start():
    from ehrbench import benchmarks
    from ehrbench.llm.base import ConfigurationError

    from .conftest import EHRCHATQA_OPTIONS

    with pytest.raises(ConfigurationError, match="benchmark.web_search='bing': choose one of \\['vocabulary'\\]"):
        benchmarks.load("ehrchatqa", {**EHRCHATQA_OPTIONS, "web_search": "bing"}).check()


def test_agent_system_prompt_is_composed_as_the_original_agent_composes_it():
    """TOOL_CALLING_INSTRUCTION + "\\n" + rules + "\\n\\n" + grading rules + "\\n\\n" + db_rules.txt."""
    from ehrbench.benchmarks.ehrchatqa.prompts import agent_system_prompt

    prompt = agent_system_prompt("mimic_iv_star", "adapt")
    assert prompt.startswith("Instruction:\n- You are a DB agent that helps users")
    assert "Use the value search tools to find relevant entries. \n- To search" in prompt      # its trailing space
    assert "along with your explanation.\nBelow are the general rules for the DB agent:\n" in prompt
    assert "a message or a tool call.\n\nBelow are the grading rules:\n- The DB agent's performance is evaluated " \
           "based on the results in its natural language response" in prompt
    assert "round them to four decimal places.\n\nBelow are the SQL generation rules:\n- Use SQLite" in prompt


def test_names_match_as_sqlite_matches_them_and_values_read_as_stored(tools, dbs):
    out = tools.call("column_search", {"table_names": "Demographics"})
    assert out.startswith("CREATE TABLE Demographics (\n\trecordid INTEGER NOT NULL,")
    assert "\n/*\n3 rows from Demographics table:\n" in out
    assert tools.call("value_substring_search", {"table": "LabTestTypes", "column": "ItemName", "value": "troponin"}) == \
        "Values in LabTestTypes.ItemName containing 'troponin': ['troponin i', 'troponin t']."
    eicu = Tools(dbs["eicu_star"], EchoIndex(), None)
    table = eicu.call("column_search", {"table_names": "hospital"})
    assert "True" not in table and "False" not in table          # booleans as SQLite stores them: 0 / 1
    assert "\n\tteaching_status TEXT," in table                   # as the authors' DDL declares it: text
    assert eicu.call("value_substring_search", {"table": "hospital", "column": "teaching_status", "value": "1"}) == \
        "Values in hospital.teaching_status containing '1': ['1']."


def test_each_tool_names_its_own_signature_and_timeout_takes_any_number(tools):
    assert tools.call("value_similarity_search", {"table": "t", "column": "c"}) == \
        "Error: ValueSimilaritySearch.invoke() missing 1 required positional argument: 'value'"
    assert tools.call("sql_execute", {"query": "SELECT 1", "timeout": 30.5}) == "[(1,)]"


def test_column_search_prints_every_table_as_the_original_prints_it(shared_world):
    """Recorded from the authors' ColumnSearch on ehrbench's own files (tests/fixtures/ehrchatqa_column_search.json):
    the renderings declare every column as the authors' DDL does (INT, DOUBLE PRECISION, REAL, BIGINT, NOT NULL,
    every key), so both print the same text, quirks included (`BIGINT` comes out `BIGINTEGER`)."""
    from pathlib import Path

    from ehrbench.db.database import Database

    from .twins.record import build_databases, database_digest

    fixture = json.loads((Path(__file__).parent / "fixtures" / "ehrchatqa_column_search.json").read_text())
    files = build_databases(sorted(fixture["calls"]), shared_world / "gen")
    assert {db: database_digest(p) for db, p in files.items()} == fixture["world"]["databases"], \
        "the world changed since this fixture was recorded: record it again (its `command`)"
    for db, calls in fixture["calls"].items():
        suite = ToolSuite(db, LocalHost(Database(files[db], db)), LocalHost(EchoIndex()), None, INDEXED_COLUMNS[db])
        for call, printed in calls.items():
            assert asyncio.run(suite.call("column_search", {"table_names": call})) == printed, (db, call)
