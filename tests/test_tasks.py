import json
from collections import Counter

import pytest

from ehrbench.benchmarks.ehrchatqa.scoring import render_answer
from ehrbench.benchmarks.ehrchatqa.tasks import TaskFileError, load_task_dir, load_tasks

from .conftest import TASK_DIR

DBS, FLOWS = ["mimic_iv_star", "eicu_star"], ["incre", "adapt"]


@pytest.fixture(scope="module")
def tasks():
    return load_task_dir(TASK_DIR, DBS, FLOWS)


def test_task_set_sizes_and_adapt_categories(tasks):
    counts = Counter((t.db_id, t.task_type) for t in tasks)
    for db in DBS:
        assert counts[(db, "incre")] >= 140 and counts[(db, "adapt")] >= 40
        cats = {t.category for t in tasks if t.db_id == db and t.task_type == "adapt"}
        assert len(cats) == 8, cats


def test_every_gold_sql_runs_and_gold_answer_is_its_result(tasks, dbs):
    for t in tasks:
        rows = dbs[t.db_id].execute(t.gold_sql, timeout_s=60, keep=10_000).rows
        expected = [list(r) for r in rows] if t.task_type == "incre" else render_answer(rows)
        assert expected == t.gold_answer, t.key


def test_no_task_is_answered_by_a_bare_zero(tasks):
    # under the lenient IncreQA rule any failed COUNT query would match a gold answer of [[0]]
    assert [t.key for t in tasks if t.gold_answer in ([[0]], [[0.0]], [["zero"]])] == []


def test_adapt_numeric_answers_are_words(tasks):
    counts = [t for t in tasks if t.task_type == "adapt" and "words" in t.instruction]
    assert counts and all(not t.gold_answer[0][0].isdigit() for t in counts)


def test_original_format_loads_unchanged(tmp_path):
    original = [{"task_id": "6", "task_type": "incre", "db_id": "mimic_iv_star",
                 "instruction": "Your goal is to find ...", "gold_sql": "SELECT 1", "gold_answer": [[1]]}]
    path = tmp_path / "eval_incre.jsonl"
    path.write_text(json.dumps(original))
    [task] = load_tasks(path)
    assert (task.key, task.gold_answer, task.category) == ("mimic_iv_star/incre/6", [[1]], None)


@pytest.mark.parametrize("raw,message", [
    ({"task_type": "incre"}, "task #0: missing field 'task_id'"),
    ({"task_id": "1", "task_type": "multi", "db_id": "mimic_iv_star", "instruction": "x", "gold_sql": "s",
      "gold_answer": [[1]]}, "task '1' (#0): field 'task_type' is 'multi'; use one of ['incre', 'adapt']"),
    ({"task_id": "2", "task_type": "incre", "db_id": "mimic_iv_star", "instruction": "x", "gold_sql": "s",
      "gold_answer": "nineteen"}, "task '2' (#0): field 'gold_answer' must be a list of rows"),
])
def test_malformed_task_files_name_file_task_and_field(tmp_path, raw, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps([raw]))
    with pytest.raises(TaskFileError) as err:
        load_tasks(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"task_id": "1"}\n{oops\n')
    with pytest.raises(TaskFileError, match=r"bad.jsonl: line 2: not valid JSON"):
        load_tasks(path)
