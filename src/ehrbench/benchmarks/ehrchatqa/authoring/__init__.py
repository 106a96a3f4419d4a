"""Generate the project's EHR-ChatQA task sets from templates filled with values of the default world.

    python -m ehrbench.benchmarks.ehrchatqa.authoring [--out data/tasks/ehrchatqa] [--seed 0]

Each gold SQL is executed and its result stored as the gold answer (AdaptQA counts as words). Drafts whose answer
is empty, all NULL or a bare zero are dropped, duplicates are dropped, and each template contributes at most
`per_template`.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

from ....db.database import Database
from ..tasks import FILE_FOR_TYPE, Task, save_tasks
from functools import partial

from . import adapt, eicu_star, incre, mimic_iv_star
from ..scoring import render_answer
from .common import Context

SCHEMAS = {"mimic_iv_star": mimic_iv_star.SCHEMA, "eicu_star": eicu_star.SCHEMA}
MINIMUM = {"incre": 140, "adapt": 40}


def _usable(rows: list[tuple]) -> bool:
    """Non-empty, no NULL in the first column (the original's rules can never match a gold holding None), not a
    bare zero (under the lenient IncreQA rule any failed COUNT would match it), and short enough to read back."""
    if not rows or len(rows) > 30 or any(not r or r[0] is None for r in rows):
        return False
    return not (len(rows) == 1 and rows[0][0] in (0, 0.0, "0"))


def generate(db: Database, db_id: str, seed: int = 0, per_template: int = 16) -> dict[str, list[Task]]:
    schema = SCHEMAS[db_id]
    flows = {"incre": [(t.__name__, partial(t, s=schema)) for t in incre.TEMPLATES],
             "adapt": [(t.__name__, partial(t, s=schema)) for t in adapt.SCENARIOS]}
    out: dict[str, list[Task]] = {}
    for flow, templates in flows.items():
        tasks, seen = [], set()
        for name, template in templates:
            ctx = Context(db=db, rng=random.Random(f"{seed}/{db_id}/{name}"))
            kept = 0
            for draft in template(ctx):
                if draft.key in seen or kept >= per_template:
                    continue
                rows = db.execute(draft.gold_sql, timeout_s=120, keep=1000).rows
                if not _usable(rows):
                    continue
                seen.add(draft.key)
                kept += 1
                answer = [list(r) for r in rows] if flow == "incre" else render_answer(rows)
                tasks.append(Task(task_id=str(len(tasks)), task_type=flow, db_id=db_id, instruction=draft.instruction,
                                  gold_sql=draft.gold_sql, gold_answer=answer, category=draft.category))
        if len(tasks) < MINIMUM[flow]:
            raise RuntimeError(f"{db_id}/{flow}: only {len(tasks)} tasks generated, need {MINIMUM[flow]}")
        out[flow] = tasks
    return out


def main(argv: list[str] | None = None) -> None:
    from ....schemas import WorldSpec, build_database

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data/tasks/ehrchatqa")
    ap.add_argument("--db-root", default="data/generated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for db_id in SCHEMAS:
        db = Database(build_database(db_id, WorldSpec(seed=args.seed), Path(args.db_root)), db_id)
        for flow, tasks in generate(db, db_id, args.seed).items():
            path = Path(args.out) / db_id / FILE_FOR_TYPE[flow]
            save_tasks(tasks, path)
            print(f"{path}: {len(tasks)} tasks")


if __name__ == "__main__":
    main()
