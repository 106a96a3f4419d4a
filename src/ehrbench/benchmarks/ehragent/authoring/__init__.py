"""Generate the project's EHRAgent question sets from the default world, in EHRSQL's and MIMICSQL's own formats.

    python -m ehrbench.benchmarks.ehragent.authoring [--out data/tasks/ehragent] [--seed 0] [--train 100]

Drafts come from the template families (`ehrsql.py`, `mimicsql.py`); each gold SQL is run after EHRSQL's
post-processing, and a question is kept when it answers (not empty, not all NULL), is not a duplicate, its
answer is short enough to read back (at most 20 values), and its complexity level still has room (`LEVELS`: the
paper's mean tables per question). Sizes are the paper's: MIMIC-III 580, eICU 580, TREQS 996.
A train split (`train/`, 100 questions per database by default, drafted with another seed, none of them in the
evaluation sets) is what a sequential run builds a memory from, to freeze for parallel runs (`memory_file`).
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from ....db.database import Database
from ....db.limits import QueryError
from ..tasks import Task, answer_values, complexity_level, post_process_sql
from . import ehrsql, mimicsql
from .schemas import SCHEMAS

SIZES = {"ehrsql_mimic_iii": 580, "ehrsql_eicu": 580, "treqs": 996}
# Questions per complexity level (distinct tables in the gold SQL). MIMIC-III and eICU: the paper's own counts, the
# one integer split of 580 that gives Table 2's per-level SRs and its "All" (MIMIC-III 342/580 = 58.97 with
# 95/202/167/116, mean 2.52 tables as Table 1; eICU 308/580 = 53.10 with 166/398/16, mean 1.74). TREQS: Table 2's
# per-level SRs fit no integer split of 996, so the mix is the one whose mean is Table 1's 1.48 tables.
LEVELS = {"ehrsql_mimic_iii": {1: 95, 2: 202, 3: 167, 4: 116}, "ehrsql_eicu": {1: 166, 2: 398, 3: 16},
          "treqs": {1: 600, 2: 318, 3: 78}}
FILES = {"ehrsql_mimic_iii": "mimic_iii.json", "ehrsql_eicu": "eicu.json", "treqs": "treqs.jsonl"}
EHRSQL_DB = {"ehrsql_mimic_iii": "mimic_iii", "ehrsql_eicu": "eicu"}
MAX_VALUES = 20
MAX_DRAFTS = 40                  # drafts tried per question kept, before giving up


def quotas(db_id: str, n: int) -> dict[int, int]:
    """`LEVELS` scaled to `n` questions (largest remainders), so a split of any size keeps the paper's mix."""
    shares = LEVELS[db_id]
    total = sum(shares.values())
    exact = {level: n * count / total for level, count in shares.items()}
    out = {level: int(x) for level, x in exact.items()}
    for level in sorted(exact, key=lambda lv: out[lv] - exact[lv])[:n - sum(out.values())]:
        out[level] += 1
    return out


def generate(db: Database, db_id: str, n: int, seed: int = 0, exclude: frozenset[str] = frozenset()) -> list[Task]:
    def rows(sql: str) -> list[tuple]:
        return db.execute(sql, timeout_s=120, keep=100_000).rows

    left = quotas(db_id, n)

    source = mimicsql.drafts(rows, seed) if db_id == "treqs" else ehrsql.drafts(SCHEMAS[db_id], rows, seed)
    tasks, seen = [], set(exclude)
    for tried, (family, question, sql) in enumerate(source):
        if len(tasks) == n:
            break
        if tried > MAX_DRAFTS * n:
            raise RuntimeError(f"{db_id}: only {len(tasks)} of {n} questions answer after {tried} drafts")
        if question in seen or ("'" in question and db_id != "treqs"):   # EHRSQL's post-processing undoes ''
            continue
        ready = sql if db_id == "treqs" else post_process_sql(sql)
        try:
            values = answer_values(rows(ready))
        except QueryError:
            continue
        if not values or len(values) > MAX_VALUES or all(v == "None" for v in values):
            continue
        level = complexity_level(ready)
        if not left.get(level):
            continue
        left[level] -= 1
        seen.add(question)
        qid = hashlib.sha256(f"{db_id}/{question}".encode()).hexdigest()[:24]
        tasks.append(Task(qid, db_id, question, sql, values, level, family))
    return tasks


def save(tasks: list[Task], db_id: str, path: Path, split: str = "test") -> None:
    """EHRSQL's JSON array (with the answer and level added) or MIMICSQL's JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if db_id == "treqs":
        lines = [json.dumps({"key": t.qid, "question_refine": t.question, "sql": t.gold_sql, "family": t.family,
                             "answer": t.answer, "level": t.level}, ensure_ascii=False) for t in tasks]
        path.write_text("\n".join(lines) + "\n")
        return
    items = [json.dumps({"db_id": EHRSQL_DB[db_id], "id": t.qid, "question": t.question, "template": t.question,
                         "query": t.gold_sql, "q_tag": t.family, "is_impossible": False, "split": split,
                         "answer": t.answer, "level": t.level}, ensure_ascii=False) for t in tasks]
    path.write_text("[\n" + ",\n".join(items) + "\n]\n")


def main(argv: list[str] | None = None) -> None:
    from ....schemas import WorldSpec, build_database

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data/tasks/ehragent")
    ap.add_argument("--db-root", default="data/generated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train", type=int, default=100, help="questions per database in the train split")
    args = ap.parse_args(argv)
    for db_id, n in SIZES.items():
        db = Database(build_database(db_id, WorldSpec(seed=args.seed), Path(args.db_root)), db_id)
        tasks = generate(db, db_id, n, args.seed)
        path = Path(args.out) / FILES[db_id]
        save(tasks, db_id, path)
        levels = {lv: sum(t.level == lv for t in tasks) for lv in sorted({t.level for t in tasks})}
        print(f"{path}: {len(tasks)} questions, by level {levels}")
        train = generate(db, db_id, args.train, args.seed + 1, frozenset(t.question for t in tasks))
        save(train, db_id, Path(args.out) / "train" / FILES[db_id], split="train")
        print(f"{Path(args.out) / 'train' / FILES[db_id]}: {len(train)} questions (train split)")
