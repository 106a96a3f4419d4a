"""EHRAgent's code interface against the original's own outputs: 60 code cells run with wshi83/EhrAgent's run_code
and tools on a toy MIMIC-III (tests/fixtures/ehragent_toy_mimic, ehragent_run_code_cases.json) give the same
observation here, through the sandbox, the toolset and the feedback formatting; the few deliberate differences are
listed with their reason in the fixture. Also: the initial memory as the original parses it, and example retrieval."""
import asyncio
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from ehrbench.agents.code_sandbox import CellLimits
from ehrbench.benchmarks.ehragent.agent import Memory
from ehrbench.benchmarks.ehragent.prompts import initial_memory
from ehrbench.benchmarks.ehragent.toolset import calculate, date_calculator
from ehrbench.benchmarks.ehragent.tools import CodeInterface

FIXTURES = Path(__file__).parent / "fixtures"
CASES = json.loads((FIXTURES / "ehragent_run_code_cases.json").read_text())


class ToyDB:
    """The toy tables as the original's LoadDB read them (pandas' read_csv types), behind the hosted-database API."""

    def __init__(self):
        self.con = sqlite3.connect(":memory:")
        for f in (FIXTURES / "ehragent_toy_mimic").glob("*.csv"):
            pd.read_csv(f).to_sql(f.stem, self.con, index=False)

    async def execute(self, sql, timeout_s=60, count_cap=0, keep=100, sort_key=None):
        class Result:
            rows = self.con.execute(sql).fetchall()
        return Result()

    async def column_names(self, table):
        return [c[1] for c in self.con.execute(f'PRAGMA table_info("{table}")')]


@pytest.fixture(scope="module")
def observations():
    tools = CodeInterface("ehrsql_mimic_iii", ToyDB(), {t.lower(): t for t in ("ADMISSIONS", "COST", "D_ICD_DIAGNOSES",
                                                                               "ICUSTAYS")},
                          "q", "2105-12-31 23:59:00", None, CellLimits(cpu_s=5, wall_s=20))

    async def run_all():
        return {c["name"] + "#" + str(i): await tools.call("python", {"cell": c["code"]}) for i, c in enumerate(CASES)}
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run_all())
    finally:
        loop.close()


@pytest.mark.parametrize("i, case", list(enumerate(CASES)), ids=[c["name"] for c in CASES])
def test_each_cell_is_observed_as_the_original_observed_it(observations, i, case):
    assert observations[case["name"] + "#" + str(i)] == case.get("expected", case["original"])


def test_deviations_from_the_original_are_few_and_explained():
    deviations = [c for c in CASES if "deviation" in c]
    assert len(deviations) <= 11 and all(c["deviation"] for c in deviations)


def test_calendar_counts_from_the_database_now_and_calculate_is_arithmetic_only():
    assert date_calculator("-1 year", "2105-12-31 23:59:00") == "2104-12-31 23:59:00"
    assert date_calculator("0 year", "2105-12-31 23:59:00") == "2105-12-31 23:59:00"
    assert calculate("(1.5 + 2) * 2^3") == "28.0" and calculate("sqrt(16)") == "4.0"
    for bad in ("__import__('os').system('true')", "open('x')", "9**99999999"):
        with pytest.raises(Exception, match="Invalid input query for Calculator"):
            calculate(bad)


def test_initial_memory_is_parsed_as_the_original_parses_it():
    original = json.loads((FIXTURES / "ehragent_init_memory_mimic.json").read_text())
    assert initial_memory("ehrsql_mimic_iii") == original
    assert len(initial_memory("ehrsql_eicu")) == 4 and len(initial_memory("treqs")) == 4


def test_memory_shows_the_k_closest_questions_first():
    memory = Memory([{"question": q, "knowledge": "k", "code": "c"} for q in
                     ("count the patients", "what is the cost of x?", "count the patient", "zzz")])
    shown = memory.examples("count the patients", k=2)
    assert shown.index("Question: count the patients\n") < shown.index("Question: count the patient\n")
    assert "zzz" not in shown and "cost" not in shown
