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


def test_column_search_rebuilds_ddl_with_three_rows_and_names_unknown_tables(tools):
    out = tools.call("column_search", {"table_names": "demographics, icuepisodes"})
    assert "CREATE TABLE demographics (" in out and "PRIMARY KEY (recordid)" in out
    assert "/*\n3 rows from demographics table:\nrecordid\tpatientid\tgender\tdateofbirth\tdateofdeath\n" in out
    assert "FOREIGN KEY(admissionid) REFERENCES hospitaladmissions (admissionid)" in out
    assert out.count("*/") == 2 and "*/\n\n\nCREATE TABLE icuepisodes" in out
    assert tools.call("column_search", {"table_names": "patients"}) == "Error: table_names {'patients'} not found in database"


def test_value_substring_search_strings(tools):
    out = tools.call("value_substring_search", {"table": "labtesttypes", "column": "itemname", "value": "TROPONIN"})
    assert out == "Values in labtesttypes.itemname containing 'TROPONIN': ['troponin i', 'troponin t']."
    assert tools.call("value_substring_search", {"table": "labtesttypes", "column": "itemname", "value": "zzz"}) == \
        "No values in labtesttypes.itemname contain 'zzz'."
    assert tools.call("value_substring_search", {"table": "labtesttypes", "column": "nope", "value": "x"}) == \
        "Error: column 'nope' not found in table 'labtesttypes'"
    assert tools.call("value_substring_search", {"table": "x'; DROP TABLE y; --", "column": "a", "value": "x"}).startswith(
        "Error: table \"x'; DROP TABLE y; --\" not found")


def test_value_similarity_search_strings(tools, dbs):
    many = Tools(dbs["mimic_iv_star"], EchoIndex(["a", "b"]), None)
    args = {"table": "labtesttypes", "column": "itemname", "value": "hb"}
    assert many.call("value_similarity_search", args) == "I found close matches in labtesttypes.itemname: ['a', 'b']."
    assert tools.call("value_similarity_search", args) == "I found one close match in labtesttypes.itemname: ['hb']."
    none = Tools(dbs["mimic_iv_star"], EchoIndex([]), None)
    assert none.call("value_similarity_search", args) == "No matches found in labtesttypes.itemname for 'hb'."
    assert tools.call("value_similarity_search", {"table": "demographics", "column": "gender", "value": "f"}).startswith(
        "Error: demographics.gender is not pre-indexed")


def test_sql_execute_strings(tools):
    assert tools.call("sql_execute", {"query": "SELECT COUNT(*) FROM demographics"}) == "[(100,)]"
    out = tools.call("sql_execute", {"query": "SELECT patientid FROM demographics ORDER BY patientid", "k": 3})
    head, note = out.split("\n\n")
    assert len(eval(head)) == 3
    assert note == "Note: There are 97 results not shown (out of 100 total results)."
    assert tools.call("sql_execute", {"query": "SELECT * FROM patients"}) == "Error: no such table: patients"
    assert tools.call("sql_execute", {"query": "DELETE FROM demographics"}).startswith("Error: query refused")
    assert tools.call("sql_execute", {}) == "Error: missing required argument 'query'"
    assert tools.call("nope", {}).startswith("Error: unknown tool 'nope'")


def test_web_search_answers_brand_generic_from_the_vocabulary(tools):
    results = json.loads(tools.call("web_search", {"query": "lopressor generic name"}))
    assert 1 <= len(results) <= 10
    assert "metoprolol tartrate" in results[0]["snippet"]


def test_unknown_web_search_backend_is_refused_at_start():
    from ehrbench import benchmarks
    from ehrbench.llm.base import ConfigurationError

    from .conftest import EHRCHATQA_OPTIONS

    with pytest.raises(ConfigurationError, match="benchmark.web_search='bing': choose one of \\['vocabulary'\\]"):
        benchmarks.load("ehrchatqa", {**EHRCHATQA_OPTIONS, "web_search": "bing"}).check()
