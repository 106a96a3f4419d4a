"""EHRAgent's question sets beside the paper's: questions per complexity level (Table 2's counts), mean tables per
question (Table 1), the tables each level reads, the answers' types, and the size of count answers.

    make bench-ehragent-tasks
    make bench-ehragent-tasks ARGS="--ehrsql /path/EHRSQL/dataset/ehrsql --mimicsql /path/TREQS/mimicsql_data/mimicsql_natural/dev.json"

Count answers decide how often the original's substring judge passes by chance (gold `1` is in `12`): the share
of single digits and the median are printed for the shipped sets and, given their files, for EHRSQL's own train
questions and MIMICSQL's released questions. Neither release carries answers (they need the credentialed
databases), so those questions are answered here on the world the shipped sets were written from, by their own
gold SQL: what differs then is the choice of questions, not the world. Nothing is timed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ehrbench.benchmarks.ehragent.benchmark import FILES, NAMES  # noqa: E402
from ehrbench.benchmarks.ehragent.statistics import PAPER_LEVELS, PAPER_MEAN_TABLES, summary  # noqa: E402
from ehrbench.benchmarks.ehragent.tasks import load_tasks, resolve_on  # noqa: E402


def on_world(path: Path, db_id: str, root: Path):
    """A released question file, answered by its gold SQL on the default world's rendering."""
    from ehrbench.db import open_database
    from ehrbench.schemas import WorldSpec, build_database

    database = open_database(build_database(db_id, WorldSpec(seed=0), root), db_id)
    kept, _ = resolve_on(load_tasks(path, db_id), database)
    return kept


def count_line(label: str, stats: dict) -> str:
    c = stats["count_golds"]
    share = f"{c['single_digit'] / c['questions']:.0%}" if c["questions"] else "-"
    return (f"| {label} | {stats['questions']} | {c['questions']} | {c['single_digit']} ({share}) | {c['median']} | "
            f"{c['at_least_100']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=str(ROOT / "data" / "tasks" / "ehragent"))
    ap.add_argument("--ehrsql", help="EHRSQL's dataset/ehrsql folder (mimic_iii/train.json, eicu/train.json)")
    ap.add_argument("--mimicsql", help="a MIMICSQL question file (mimicsql_natural/dev.json)")
    ap.add_argument("--db-root", default=str(ROOT / "data" / "generated"))
    args = ap.parse_args()
    shipped = {db: summary(load_tasks(Path(args.tasks) / name, db)) for db, name in FILES.items()}

    print("| database | questions | by level (shipped) | by level (paper, Table 2) | mean tables (shipped / Table 1) |")
    print("| --- | ---: | --- | --- | --- |")
    for db, stats in shipped.items():
        paper = PAPER_LEVELS[db] or "no consistent split"
        print(f"| {NAMES[db]} | {stats['questions']} | {stats['levels']} | {paper} | "
              f"{stats['mean_tables']:.2f} / {PAPER_MEAN_TABLES[db]} |")
    print("\nanswer types:")
    for db, stats in shipped.items():
        print(f"  {NAMES[db]}: " + ", ".join(f"{k} {v / stats['questions']:.0%}" for k, v in stats["answer_types"].items()))
    print("\ntables read per level (questions reading each):")
    for db, stats in shipped.items():
        for level, tables in stats["tables_by_level"].items():
            print(f"  {NAMES[db]} level {level}: " + ", ".join(f"{t} {n}" for t, n in tables.items()))

    print("\n| question set | questions | count questions | single-digit golds | median count | counts >= 100 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for db, stats in shipped.items():
        print(count_line(f"{NAMES[db]} (shipped)", stats))
    others = []
    if args.ehrsql:
        others += [(f"EHRSQL {NAMES[db]} train, on this world", Path(args.ehrsql) / sub / "train.json", db)
                   for db, sub in (("ehrsql_mimic_iii", "mimic_iii"), ("ehrsql_eicu", "eicu"))]
    if args.mimicsql:
        others.append(("MIMICSQL released questions, on this world", Path(args.mimicsql), "treqs"))
    for label, path, db in others:
        print(count_line(label, summary(on_world(path, db, Path(args.db_root)))))


if __name__ == "__main__":
    main()
