"""The world answers the questions people ask of it: every cohort question of the probe finds rows (issue 9).

The probe (tests/probe/<db>.yaml) was written from the schemas alone, before looking at any rows; a question that
finds nobody marks something the world lacks (time near "now", a string convention, an everyday ICU item).
`bench/probe_world.py` reports the share on the full-size world.
"""
import sqlite3
from pathlib import Path

import pytest
import yaml

PROBE = Path(__file__).parent / "probe"
QUESTIONS = [(db, item["q"], item["sql"]) for db in ("mimic_iv_star", "eicu_star")
             for item in yaml.safe_load((PROBE / f"{db}.yaml").read_text())]


def test_the_probe_asks_at_least_60_questions_of_each_database():
    assert {db: sum(1 for d, _, _ in QUESTIONS if d == db) >= 60 for db in ("mimic_iv_star", "eicu_star")} == \
        {"mimic_iv_star": True, "eicu_star": True}


@pytest.mark.parametrize("db, question, sql", QUESTIONS, ids=[f"{db}: {q}" for db, q, _ in QUESTIONS])
def test_probe_question_finds_rows(db_paths, db, question, sql):
    with sqlite3.connect(f"file:{db_paths[db]}?immutable=1", uri=True) as con:
        rows = con.execute(sql).fetchall()
    assert rows, f"{db}: nobody found for {question!r}"
