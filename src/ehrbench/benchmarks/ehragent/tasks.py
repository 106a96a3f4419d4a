"""EHRAgent's questions: EHRSQL's files (MIMIC-III, eICU), MIMICSQL's (TREQS), and the project's own in the same
formats, each read unchanged.

- EHRSQL: a JSON array of items with `id`, `db_id`, `template` (the un-paraphrased question EHRAgent feeds),
  `question`, `query` and `is_impossible`; the query is lowercase and keeps EHRSQL's placeholders (`current_time`,
  `heart_rate_lower`, `%y`), which `post_process_sql` replaces exactly as EHRSQL's evaluate.py does before running it.
  Unanswerable items (`is_impossible`) are skipped.
- MIMICSQL: one JSON object per line with `key`, `question_refine` and `sql` (values double-quoted, which SQLite reads
  as strings where no column has that name).

A question's answer is its gold SQL executed on the database (`resolve`): questions whose SQL fails or returns
nothing are dropped, as EHRAgent's authors did. The project's files also store the answer (`answer`) and the
complexity level (`level`, distinct tables in the gold SQL), so a run does not depend on re-executing them; a test
checks both against the database. Items without an answer (EHRSQL's and MIMICSQL's own files) load as unresolved
tasks (`answer` None), which the benchmark resolves on the run's database once it is ready (`resolve_on`).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ...benchmark import TaskFileError, read_json_records

DB_IDS = ("ehrsql_mimic_iii", "ehrsql_eicu", "treqs")
EHRSQL_NOW = "2105-12-31 23:59:00"
# EHRSQL evaluate.py: the normal ranges its `<vital>_lower` / `<vital>_upper` placeholders stand for
VITAL_RANGES = {"temperature": (35.5, 38.1), "sao2": (95.0, 100.0), "heart rate": (60.0, 100.0),
                "respiration": (12.0, 18.0), "systolic bp": (90.0, 120.0), "diastolic bp": (60.0, 90.0),
                "mean bp": (60.0, 110.0)}
MAX_ANSWER_ROWS = 100          # EHRSQL compares the first 100 rows of a result


def post_process_sql(query: str, current_time: str = EHRSQL_NOW) -> str:
    """EHRSQL's post_process_sql (evaluate.py), step for step. `current_time` is a valid SQLite keyword (the real
    clock's time of day), so a query whose placeholder is not replaced runs without error and answers wrongly."""
    query = query.lower()
    if "current_time" in query:
        query = query.replace("current_time", f"'{current_time}'")
    lower = re.findall(r"[ \n]+([a-zA-Z0-9_]+_lower)", query)
    upper = re.findall(r"[ \n]+([a-zA-Z0-9_]+_upper)", query)
    if lower and upper:
        names = list(set(re.findall(r"([a-zA-Z0-9_]+)_lower", lower[0]) + re.findall(r"([a-zA-Z0-9_]+)_upper", upper[0])))
        if len(names) == 1 and names[0].replace("_", " ") in VITAL_RANGES:
            low, high = VITAL_RANGES[names[0].replace("_", " ")]
            query = query.replace(lower[0], f"{low}").replace(upper[0], f"{high}")
    query = query.replace("''", "'").replace("< =", "<=")
    query = query.replace("%y", "%Y").replace("%j", "%J")
    return query.replace("'now'", f"'{current_time}'")


_CLOCK = re.compile(r"('(?:[^']|'')*')|(\"(?:[^\"]|\"\")*\")|(?<![.\w])(current_timestamp|current_time|current_date)\b",
                    re.IGNORECASE)


def at_database_now(sql: str, now: str = EHRSQL_NOW) -> str:
    """The model's SQL with SQLite's clock read at the database's now, as EHRSQL's post-processing reads the gold
    SQL's: `current_time`, `current_timestamp` and the string 'now' (any case) become now, `current_date` its date.
    String literals and quoted names are otherwise left alone, and nothing else changes (no lowercasing)."""
    def fix(m: re.Match) -> str:
        literal, quoted, keyword = m.groups()
        if literal is not None:
            return f"'{now}'" if literal.lower() == "'now'" else literal
        if quoted is not None:
            return quoted
        return f"'{now[:10]}'" if keyword.lower() == "current_date" else f"'{now}'"
    return _CLOCK.sub(fix, sql)


@dataclass(frozen=True)
class Question:
    """One question as its file gives it, before its gold SQL has run."""
    qid: str
    db_id: str
    question: str
    sql: str                     # ready to run (placeholders replaced)
    family: str = ""             # template family (q_tag or the project's name), for reports


@dataclass(frozen=True)
class Task:
    qid: str
    db_id: str
    question: str
    gold_sql: str
    answer: list[str] | None     # the gold result's values, row by row, as strings (EHRAgent's ground truth);
                                 # None until resolved on the database (a file without answers)
    level: int                   # complexity: distinct tables in the gold SQL (I-IV)
    family: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        return f"{self.db_id}/{self.qid}"

    @property
    def groups(self) -> tuple[str, ...]:
        """Report axes, coarse to fine: the database, the complexity level, both."""
        return (self.db_id, f"level {self.level}", f"{self.db_id}/level {self.level}")

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        return d


def tables_read(sql: str) -> set[str]:
    """The tables named in the query's FROM and JOIN clauses (lowercase; a CTE's name is not a table)."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read="sqlite")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return {t.name.lower() for t in tree.find_all(exp.Table) if t.name.lower() not in ctes}


def complexity_level(sql: str) -> int:
    """Distinct tables the query reads (EHRAgent's complexity level)."""
    return len(tables_read(sql)) or 1


def answer_values(rows: list[tuple]) -> list[str]:
    """A result as EHRAgent's ground truth: every value of the first 100 rows, in order, as a string."""
    return [str(v) for row in rows[:MAX_ANSWER_ROWS] for v in row]


def resolve(questions: list[Question], run: Callable[[str], list[tuple]]) -> tuple[list[Task], list[tuple[str, str]]]:
    """Tasks for the questions whose gold SQL runs and returns something; the rest as (qid, why), dropped."""
    tasks, dropped = [], []
    for q in questions:
        try:
            rows = run(q.sql)
        except Exception as e:  # noqa: BLE001 - any failure of the gold SQL drops the question, saying why
            dropped.append((q.qid, f"gold SQL failed: {e}"))
            continue
        values = answer_values(rows)
        if not values or all(v == "None" for v in values):
            dropped.append((q.qid, "gold SQL returned nothing"))
            continue
        tasks.append(Task(q.qid, q.db_id, q.question, q.sql, values, complexity_level(q.sql), q.family))
    return tasks, dropped


# --- files -------------------------------------------------------------------------------------------------------
def _read_items(path: Path) -> list:
    """A JSON array (EHRSQL) or one JSON object per line (MIMICSQL)."""
    return read_json_records(path, "the project's question sets are in data/tasks/ehragent")


def _field(item: dict, path: Path, position: int, *names: str) -> str:
    for name in names:
        if isinstance(item.get(name), str) and item[name].strip():
            return item[name]
    ident = item.get("id") or item.get("key") or f"#{position}"
    raise TaskFileError(f"{path}: question {ident!r}: missing field {' or '.join(map(repr, names))} (a non-empty "
                        "string); EHRSQL items need id, template and query; MIMICSQL items key, question_refine, sql")


def load_questions(path: str | Path, db_id: str) -> list[Question]:
    """The answerable questions of one EHRSQL or MIMICSQL file (the project's files use the same formats)."""
    return [q for q, _ in _questions_with_items(Path(path), db_id)]


def _questions_with_items(path: Path, db_id: str) -> list[tuple[Question, dict]]:
    if db_id not in DB_IDS:
        raise TaskFileError(f"{path}: unknown database {db_id!r}; use one of {list(DB_IDS)}")
    out, seen = [], set()
    for i, item in enumerate(_read_items(path)):
        if not isinstance(item, dict):
            raise TaskFileError(f"{path}: question #{i}: expected a JSON object, got {type(item).__name__}")
        if db_id == "treqs":
            q = Question(str(item.get("key") or _field(item, path, i, "key")), db_id,
                         _field(item, path, i, "question_refine", "question"), _field(item, path, i, "sql"),
                         item.get("family", ""))
        else:
            if item.get("is_impossible") in (True, "true", "True"):
                continue
            q = Question(str(item.get("id") or _field(item, path, i, "id")), db_id,
                         _field(item, path, i, "template", "question"),
                         post_process_sql(_field(item, path, i, "query")), item.get("q_tag", ""))
        if q.qid in seen:
            raise TaskFileError(f"{path}: question {q.qid!r}: duplicate id")
        seen.add(q.qid)
        out.append((q, item))
    return out


def load_tasks(path: str | Path, db_id: str) -> list[Task]:
    """A question set: the project's (each question with its stored answer and level, written by the generator),
    the authors' released EHRSQL-EHRAgent selection (answers, no level: the level is counted from the gold SQL, as
    for every question), or EHRSQL's / MIMICSQL's own (no answers: unresolved tasks, level 0 until resolved)."""
    path = Path(path)
    tasks = []
    for q, item in _questions_with_items(path, db_id):
        answer, level = item.get("answer"), item.get("level")
        if answer is None and level is None:
            tasks.append(Task(q.qid, db_id, q.question, q.sql, None, 0, q.family))
            continue
        if isinstance(answer, str) and answer:
            answer = [answer]
        if answer is not None and level is None:
            level = complexity_level(q.sql)
        if not isinstance(answer, list) or not answer or not isinstance(level, int):
            raise TaskFileError(f"{path}: question {q.qid!r}: field 'answer' must be a non-empty list (or a string) "
                                "and 'level', where given, an integer (or give neither, to answer it on the run's "
                                "database); regenerate with `python -m ehrbench.benchmarks.ehragent.authoring`")
        tasks.append(Task(q.qid, db_id, q.question, q.sql, [str(a) for a in answer], level, q.family))
    return tasks


def resolve_on(tasks: list[Task], database, timeout_s: float = 60.0) -> tuple[list[Task], list[tuple[str, str]]]:
    """The tasks with their answers: stored ones kept, unresolved ones answered by running their gold SQL on
    `database` (a guarded `db.Database`, EHRSQL's first 100 rows); the (qid, why) of those dropped."""
    from tqdm import tqdm

    todo = [Question(t.qid, t.db_id, t.question, t.gold_sql, t.family) for t in tasks if t.answer is None]
    if not todo:
        return tasks, []

    def rows(sql: str) -> list[tuple]:
        return database.execute(sql, timeout_s, MAX_ANSWER_ROWS, MAX_ANSWER_ROWS).rows
    answered, dropped = resolve(tqdm(todo, desc=f"gold answers ({todo[0].db_id})", unit="question"), rows)
    by_id = {t.qid: t for t in answered}
    return [t if t.answer is not None else by_id[t.qid] for t in tasks if t.answer is not None or t.qid in by_id], \
        dropped
