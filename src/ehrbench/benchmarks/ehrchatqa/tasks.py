"""EHR-ChatQA task files: one JSON array per (database, flow), despite the `.jsonl` name, as the original ships them.

The loader reads the original files unchanged and the project's own task sets (same fields, plus an optional
`category`), and fails at start on a malformed file with the file, the task and the field named.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ...benchmark import TaskFileError, read_json_records

TASK_TYPES = ("incre", "adapt")
DB_IDS = ("mimic_iv_star", "eicu_star")
FILE_FOR_TYPE = {"incre": "eval_incre.jsonl", "adapt": "eval_adapt.jsonl"}


@dataclass(frozen=True)
class Task:
    task_id: str
    task_type: str          # "incre" | "adapt"
    db_id: str              # "mimic_iv_star" | "eicu_star"
    instruction: str
    gold_sql: str
    gold_answer: list[list]
    category: str | None = None   # AdaptQA category (paper Table 10) or IncreQA template family

    @property
    def key(self) -> str:
        """Unique across databases and flows (task ids repeat across files in the original)."""
        return f"{self.db_id}/{self.task_type}/{self.task_id}"

    @property
    def groups(self) -> tuple[str, ...]:
        """Report axes, coarse to fine: the database, the flow, both."""
        return (self.db_id, self.task_type, f"{self.db_id}/{self.task_type}")

    def to_json(self) -> dict:
        d = asdict(self)
        if d["category"] is None:
            del d["category"]
        return d


def _fail(path: Path, where: str, msg: str) -> TaskFileError:
    return TaskFileError(f"{path}: {where}: {msg}")


def parse_task(raw: object, path: Path, position: int) -> Task:
    where = f"task #{position}"
    if not isinstance(raw, dict):
        raise _fail(path, where, f"expected a JSON object, got {type(raw).__name__}")
    if "task_id" in raw:
        where = f"task {raw['task_id']!r} (#{position})"
    for field in ("task_id", "task_type", "db_id", "instruction", "gold_sql", "gold_answer"):
        if field not in raw:
            raise _fail(path, where, f"missing field '{field}' (every task needs task_id, task_type, db_id, "
                                     "instruction, gold_sql, gold_answer)")
    for field in ("instruction", "gold_sql"):
        if not isinstance(raw[field], str) or not raw[field].strip():
            raise _fail(path, where, f"field '{field}' must be a non-empty string")
    if raw["task_type"] not in TASK_TYPES:
        raise _fail(path, where, f"field 'task_type' is {raw['task_type']!r}; use one of {list(TASK_TYPES)}")
    if raw["db_id"] not in DB_IDS:
        raise _fail(path, where, f"field 'db_id' is {raw['db_id']!r}; use one of {list(DB_IDS)}")
    answer = raw["gold_answer"]
    if not isinstance(answer, list) or not all(isinstance(row, list) for row in answer):
        raise _fail(path, where, "field 'gold_answer' must be a list of rows (lists), e.g. [[\"nineteen\"]]")
    category = raw.get("category")
    if category is not None and not isinstance(category, str):
        raise _fail(path, where, "field 'category' must be a string when present")
    return Task(task_id=str(raw["task_id"]), task_type=raw["task_type"], db_id=raw["db_id"],
                instruction=raw["instruction"], gold_sql=raw["gold_sql"], gold_answer=answer, category=category)


def load_tasks(path: str | Path) -> list[Task]:
    """Tasks of one file: a JSON array (the original format) or one JSON object per line."""
    path = Path(path)
    data = read_json_records(path, "generate the project's task sets with `python -m ehrbench.benchmarks.ehrchatqa."
                                   "authoring` or point benchmark.task_dir elsewhere")
    tasks = [parse_task(raw, path, i) for i, raw in enumerate(data)]
    seen: set[str] = set()
    for t in tasks:
        if t.key in seen:
            raise TaskFileError(f"{path}: task {t.task_id!r}: duplicate task_id within {t.db_id}/{t.task_type}")
        seen.add(t.key)
    return tasks


def save_tasks(tasks: list[Task], path: str | Path) -> None:
    """Write in the original format (a JSON array, one task per line for readable diffs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = ",\n".join(json.dumps(t.to_json(), ensure_ascii=False) for t in tasks)
    path.write_text(f"[\n{body}\n]\n")


def load_task_dir(task_dir: str | Path, db_ids: list[str], flows: list[str]) -> list[Task]:
    """All tasks under `task_dir/<db_id>/eval_<flow>.jsonl` for the chosen databases and flows."""
    tasks: list[Task] = []
    for db_id in db_ids:
        for flow in flows:
            if flow not in FILE_FOR_TYPE:
                raise TaskFileError(f"unknown flow {flow!r}; use {list(FILE_FOR_TYPE)}")
            path = Path(task_dir) / db_id / FILE_FOR_TYPE[flow]
            file_tasks = load_tasks(path)
            for t in file_tasks:
                if t.db_id != db_id or t.task_type != flow:
                    raise TaskFileError(f"{path}: task {t.task_id!r}: db_id/task_type {t.db_id}/{t.task_type} does "
                                        f"not match the file's place ({db_id}/{flow})")
            tasks.extend(file_tasks)
    return tasks
