"""ClinSQL's costs: the MIMIC-IV DuckDB's build time and size at 1x and at the tasks' world, the gold queries'
latency through the harness's path (sqlglot BigQuery -> DuckDB, then the guarded, sandboxed DuckDB), and what the
judge costs per task.

    make bench-clinsql                          # scale 1 and the tasks' world (manifest.json), the project's tasks
    make bench-clinsql ARGS="--scales 1 10 100"

Builds run in this process in a fresh folder (seed 0, the `full` dictionary). Gold latency is measured on the world
the tasks were authored on (each query once after one warm-up query). Judge cost under `contract=original`: one
call per leaf of both trees, each the authors' prompt (`original_prompt`, with the gold as `judge_gold=true`) built
for the gold candidate; tokens are estimated as characters / 4 (prompt) plus ~40 for the "Score / Explanation"
reply. Absolute times on a shared 2-core machine are noisy; compare ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def build(scale: float, folder: Path) -> tuple[Path, float, float]:
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.schemas.duckdb_export import export_duckdb
    from ehrbench.world.generator import WorldSize

    t = time.perf_counter()
    sqlite = build_database("mimic_iv", WorldSpec(seed=0, size=WorldSize(scale=scale)), folder)
    built = time.perf_counter() - t
    t = time.perf_counter()
    duck = export_duckdb("mimic_iv", sqlite)
    return duck, built, time.perf_counter() - t


def main() -> None:
    from ehrbench.benchmarks.clinsql.dialect import bigquery_to_duckdb
    from ehrbench.benchmarks.clinsql.scoring import Candidate, original_prompt
    from ehrbench.benchmarks.clinsql.tasks import csv_text, load_tasks
    from ehrbench.db import open_database

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=float, nargs="+", default=None, help="default: 1 and the tasks' world")
    parser.add_argument("--task-dir", default=str(ROOT / "data" / "tasks" / "clinsql"))
    args = parser.parse_args()
    tasks = load_tasks(Path(args.task_dir))
    world = float(json.loads((Path(args.task_dir) / "manifest.json").read_text())["world"]["scale"])
    args.scales = args.scales or [1.0, world]
    with tempfile.TemporaryDirectory(prefix="bench-clinsql-") as tmp:
        print(f"{'scale':>6} {'patients':>9} {'build s':>8} {'duckdb s':>9} {'sqlite MB':>10} {'duckdb MB':>10}")
        ducks = {}
        for scale in args.scales:
            duck, built, exported = build(scale, Path(tmp))
            ducks[scale] = duck
            db = open_database(duck, "mimic_iv")
            patients = db.execute("SELECT COUNT(*) FROM mimiciv_hosp.patients").rows[0][0]
            db.close()
            print(f"{scale:>6g} {patients:>9} {built:>8.1f} {exported:>9.1f} "
                  f"{duck.with_suffix('.sqlite').stat().st_size / 1e6:>10.1f} {duck.stat().st_size / 1e6:>10.1f}")

        scale = world if world in ducks else max(ducks)
        db = open_database(ducks[scale], "mimic_iv")
        transpile, run, by_level = [], [], defaultdict(list)
        try:
            db.execute("SELECT 1")
            for task in tasks:
                t = time.perf_counter()
                sql = bigquery_to_duckdb(task.gold_sql).sql
                t1 = time.perf_counter()
                db.execute(sql, 60.0, 100_000, 100_000)
                t2 = time.perf_counter()
                transpile.append(1000 * (t1 - t))
                run.append(1000 * (t2 - t1))
                by_level[task.difficulty].append(1000 * (t2 - t))
        finally:
            db.close()
        print(f"\ngold SQL on the {scale:g}x world, {len(tasks)} tasks (ms): transpile p50 "
              f"{np.percentile(transpile, 50):.1f} p95 {np.percentile(transpile, 95):.1f}; run p50 "
              f"{np.percentile(run, 50):.1f} p95 {np.percentile(run, 95):.1f}")
        for level in ("easy", "medium", "hard"):
            if by_level[level]:
                print(f"  {level:<6} transpile + run p50 {np.percentile(by_level[level], 50):.1f} "
                      f"p95 {np.percentile(by_level[level], 95):.1f}")

    calls, tokens = defaultdict(list), defaultdict(list)
    for task in tasks:
        gold = Candidate(task.gold_sql, True, task.gold_columns, list(task.gold_rows))
        gold_csv = csv_text(task.gold_columns, task.gold_rows)
        asked = [(leaf, "sql") for leaf in task.sql_tree.leaves()] + \
            [(leaf, "results") for leaf in task.results_tree.leaves()]
        chars = sum(len(original_prompt(leaf, kind, task.question, gold, task.gold_sql, gold_csv))
                    for leaf, kind in asked)
        calls[task.difficulty].append(len(asked))
        tokens[task.difficulty].append(chars / 4 + 40 * len(asked))
    print("\nthe judge per task (every leaf of both trees, the authors' prompt with the gold):")
    for level in ("easy", "medium", "hard"):
        print(f"  {level:<6} calls {statistics.mean(calls[level]):.1f}  tokens ~{statistics.mean(tokens[level]):,.0f}")
    every = [c for v in calls.values() for c in v]
    every_tokens = [c for v in tokens.values() for c in v]
    print(f"  all    calls {statistics.mean(every):.1f}  tokens ~{statistics.mean(every_tokens):,.0f} "
          f"(gpt-5-chat at $1.25/M input: ~${statistics.mean(every_tokens) * 1.25 / 1e6 * 1000:.2f} per 1,000 "
          "tasks, input only)")


if __name__ == "__main__":
    main()
