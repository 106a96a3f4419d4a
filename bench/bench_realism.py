"""How often queries written against the real MIMIC-III / eICU find rows in the synthetic world's rendering.

    make bench-realism ARGS="--questions /path/to/TREQS/mimicsql_data/mimicsql_natural/dev.json --db treqs"
    make bench-realism ARGS="--questions /path/to/EHRSQL/dataset/ehrsql/mimic_iii/valid.json --db ehrsql_mimic_iii"

The question file is read unchanged by EHRAgent's loader (EHRSQL's or MIMICSQL's format, EHRSQL's post-processing).
Its authors never saw this world, so the share of their queries that find something is a measure of the world's
realism: a cohort question ("how many patients with primary disease X are female") should find patients, as it would
in a hospital's database. Queries that name one real patient or admission (`subject_id = 2560`) cannot match a
synthetic world and are counted apart, as are those that name one (MIMICSQL's `NAME = "Paul Edwards"`).
"Finds rows": the query runs and its result holds a value other than NULL, 0 or an empty string. The world is built
in a fresh temporary folder (or reused from --root).
"""
from __future__ import annotations

import argparse
import os
import re
import sqlite3
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PATIENT_LITERAL = re.compile(r"(subject_id|hadm_id|uniquepid|patientunitstayid|icustay_id)\"?\s*=\s*['\"]?\d"
                             r"|\bname\"?\s*=\s*['\"]",
                             re.I)     # an id or a patient's name compared with a literal (a join compares columns)


def finds_rows(rows: list[tuple]) -> bool:
    return any(v not in (None, 0, 0.0, "", "0") for row in rows for v in row)


def tables_of(sql: str) -> str:
    import sqlglot
    from sqlglot import exp

    try:
        return "+".join(sorted({t.name.upper() for t in sqlglot.parse_one(sql, read="sqlite").find_all(exp.Table)}))
    except sqlglot.errors.ParseError:
        return "?"


def main() -> None:
    from ehrbench.benchmarks.ehragent.tasks import load_questions
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.world.generator import WorldSize

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", required=True, help="an EHRSQL or MIMICSQL question file")
    ap.add_argument("--db", required=True, choices=["ehrsql_mimic_iii", "ehrsql_eicu", "treqs"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--root", help="a folder to build (or reuse) the world in; default: a temporary one")
    args = ap.parse_args()
    questions = load_questions(args.questions, args.db)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_database(args.db, WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale)),
                              Path(args.root or tmp))
        con = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        outcome: dict[str, Counter] = defaultdict(Counter)
        by_tables: dict[str, Counter] = defaultdict(Counter)
        for q in questions:
            kind = "names a real patient/admission" if PATIENT_LITERAL.search(q.sql) else "cohort"
            try:
                found = finds_rows(con.execute(q.sql).fetchmany(100))
                result = "finds rows" if found else "finds nothing"
            except sqlite3.Error:
                result = "fails"
            outcome[kind][result] += 1
            if kind == "cohort":
                by_tables[tables_of(q.sql)][result] += 1
    print(f"{len(questions)} questions of {args.questions} on {args.db} (world seed {args.seed}, scale {args.scale})")
    for kind, c in sorted(outcome.items()):
        n = sum(c.values())
        print(f"  {kind:32s} {n:5d}: finds rows {100 * c['finds rows'] / n:5.1f}%, finds nothing "
              f"{100 * c['finds nothing'] / n:5.1f}%, fails {100 * c['fails'] / n:5.1f}%")
    print("  cohort questions by tables:")
    for tables, c in sorted(by_tables.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(c.values())
        print(f"    {tables:40s} {n:5d}: finds rows {100 * c['finds rows'] / n:5.1f}%")


if __name__ == "__main__":
    main()
