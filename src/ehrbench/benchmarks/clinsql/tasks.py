"""ClinSQL tasks, read from (and written to) the original's folder layout, unchanged:

    <root>/<Scenario>/<easy|medium|hard>_level_queries/<NNN>/
        query_NNN.txt  sql_NNN.sql  result_NNN.csv  sql_rubric_tree.json  results_rubric_tree.json

So the project's tasks (data/tasks/clinsql) and ClinSQL's own (data/splits/validation of Barryshen1/ClinSQL, with a
MIMIC-IV DuckDB of your own) load the same way. A folder missing a file, or with a file that cannot be read, is a
`TaskFileError` naming the file and what to do.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from ...benchmark import TaskFileError
from .rubric import Node, RubricError, parse

SCENARIOS = ("Patient_Demographics_and_Admissions", "Vital_Signs_Monitoring", "Laboratory_Results_Analysis",
             "Medication_Management", "Diagnostic_Procedures", "Disease_Diagnosis_and_Outcomes")
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Task:
    scenario: str
    difficulty: str
    task_id: str                      # the folder's 3-digit number
    question: str
    gold_sql: str                     # BigQuery dialect
    gold_columns: tuple[str, ...]
    gold_rows: tuple[tuple[str, ...], ...]   # as the CSV holds them (text; empty = NULL)
    sql_tree: Node
    results_tree: Node

    @property
    def key(self) -> str:
        return f"{self.scenario}/{self.difficulty}/{self.task_id}"

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.difficulty, self.scenario)

    def to_json(self) -> dict:
        return {"key": self.key, "scenario": self.scenario, "difficulty": self.difficulty, "task_id": self.task_id,
                "question": self.question, "gold_sql": self.gold_sql, "gold_csv": csv_text(self.gold_columns,
                                                                                              self.gold_rows),
                "sql_rubric_tree": self.sql_tree.to_json(), "results_rubric_tree": self.results_tree.to_json()}


def csv_text(columns, rows) -> str:
    """A result as ClinSQL's result CSVs hold it (pandas' to_csv without the index: NULL is empty)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def _read(path: Path, what: str) -> str:
    if not path.is_file():
        raise TaskFileError(f"{path}: missing ({what}); every task folder holds query_NNN.txt, sql_NNN.sql, "
                            "result_NNN.csv, sql_rubric_tree.json and results_rubric_tree.json")
    return path.read_text(encoding="utf-8")


def load_task(folder: Path, scenario: str, difficulty: str) -> Task:
    n = folder.name
    question = _read(folder / f"query_{n}.txt", "the question").strip()
    gold_sql = _read(folder / f"sql_{n}.sql", "the gold BigQuery SQL").strip()
    if not question or not gold_sql:
        raise TaskFileError(f"{folder}: the question or the gold SQL is empty; write them into "
                            f"query_{n}.txt and sql_{n}.sql")
    table = list(csv.reader(io.StringIO(_read(folder / f"result_{n}.csv", "the gold result"))))
    if not table:
        raise TaskFileError(f"{folder / f'result_{n}.csv'}: empty; it must hold a header row (the gold result)")
    trees = {}
    for kind in ("sql", "results"):
        path = folder / f"{kind}_rubric_tree.json"
        try:
            trees[kind] = parse(json.loads(_read(path, f"the {kind} rubric tree")), str(path))
        except json.JSONDecodeError as e:
            raise TaskFileError(f"{path}: not valid JSON ({e}); fix the file") from None
        except RubricError as e:
            raise TaskFileError(f"{e} (task {scenario}/{difficulty}/{n})") from None
    return Task(scenario, difficulty, n, question, gold_sql, tuple(table[0]), tuple(map(tuple, table[1:])),
                trees["sql"], trees["results"])


def load_tasks(root: Path) -> list[Task]:
    """Every task under `root`, scenarios in ClinSQL's order, then difficulty, then number."""
    root = Path(root)
    if not root.is_dir():
        raise TaskFileError(f"{root}: no such folder; benchmark.task_dir must hold <Scenario>/<difficulty>_level_"
                            "queries/<NNN>/ folders (the project's are in data/tasks/clinsql)")
    tasks = []
    for scenario in sorted((p for p in root.iterdir() if p.is_dir()),
                           key=lambda p: (SCENARIOS.index(p.name) if p.name in SCENARIOS else 99, p.name)):
        for difficulty in DIFFICULTIES:
            level = scenario / f"{difficulty}_level_queries"
            if level.is_dir():
                tasks += [load_task(f, scenario.name, difficulty) for f in sorted(level.iterdir()) if f.is_dir()]
    if not tasks:
        raise TaskFileError(f"{root}: no task folders found; expected <Scenario>/<easy|medium|hard>_level_queries/"
                            "<NNN>/ with query_NNN.txt and the rest")
    return tasks


def write_task(task: Task, root: Path) -> Path:
    """The task's folder in the original layout (what `load_task` reads back)."""
    folder = Path(root) / task.scenario / f"{task.difficulty}_level_queries" / task.task_id
    folder.mkdir(parents=True, exist_ok=True)
    n = task.task_id
    (folder / f"query_{n}.txt").write_text(task.question, encoding="utf-8")
    (folder / f"sql_{n}.sql").write_text(task.gold_sql + "\n", encoding="utf-8")
    (folder / f"result_{n}.csv").write_text(csv_text(task.gold_columns, task.gold_rows), encoding="utf-8")
    for kind, tree in (("sql", task.sql_tree), ("results", task.results_tree)):
        (folder / f"{kind}_rubric_tree.json").write_text(json.dumps(tree.to_json(), indent=2, ensure_ascii=False)
                                                         + "\n", encoding="utf-8")
    return folder
