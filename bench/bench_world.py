"""World figures: database build time and size, value-index build (cold and cached), sql_execute latency.

    make bench                                        # demo-sized world (scale 1), `used` dictionary
    make bench ARGS="--dictionary full"               # the main job's dictionary (~88k ICD descriptions to embed)
    make bench ARGS="--scale 100 --databases mimic_iv_star"   # 100x the demo: 10,000 MIMIC-IV* patients

Everything is built in a fresh temporary folder, so builds and the index are cold; the index is then loaded again
to show the cache. sql_execute latency: every task's gold SQL of that database (they run unchanged on any scale,
the schema being the same), executed through the same `Database.execute` the tool uses, first run (nothing cached)
and again (served from the result cache). Peak memory is the process's maximum resident set.
Absolute times on a shared 2-core machine are noisy; compare ratios within one run.
"""
from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dictionary", choices=["full", "used"], default="used")
    ap.add_argument("--scale", type=float, default=1.0, help="patients x scale (1.0 = demo-sized)")
    ap.add_argument("--databases", nargs="+", default=["mimic_iv_star", "eicu_star"])
    ap.add_argument("--skip-index", action="store_true")
    args = ap.parse_args()

    from ehrbench.benchmarks.ehrchatqa.benchmark import INDEXED_COLUMNS
    from ehrbench.benchmarks.ehrchatqa.tasks import load_task_dir
    from ehrbench.db.database import Database
    from ehrbench.db.limits import QueryError
    from ehrbench.retrieval.value_index import ValueIndex
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.world.generator import WorldSize

    tmp = Path(tempfile.mkdtemp(prefix="ehrbench-bench-"))
    # a world of only the benchmarked databases' patients: MIMIC-IV* alone needs no eICU patients generated
    size = WorldSize(scale=args.scale, mimic_patients=100 if "mimic_iv_star" in args.databases else 0,
                     eicu_patients=1700 if "eicu_star" in args.databases else 0)
    spec = WorldSpec(seed=0, size=size, dictionary=args.dictionary)
    print(f"world: scale {args.scale:g} ({size.n_mimic:,} MIMIC-IV* and {size.n_eicu:,} eICU* patients), "
          f"{args.dictionary} dictionary")
    paths = {}
    for db_id in args.databases:
        t = time.perf_counter()
        paths[db_id] = build_database(db_id, spec, tmp / "db")
        dt = time.perf_counter() - t
        con = sqlite3.connect(paths[db_id])
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        counts = {name: con.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0] for name in tables}
        con.close()
        print(f"\n{db_id}: built in {dt:.1f} s (world generation included), {paths[db_id].stat().st_size / 1e6:.1f} MB, "
              f"{sum(counts.values()):,} rows; peak memory so far {peak_rss_gb():.1f} GB")
        for name, n in counts.items():
            print(f"  {name:<22} {n:>11,}")

    if not args.skip_index:
        for label in ("cold", "cached"):
            index = ValueIndex(tmp / "index")
            t = time.perf_counter()
            for db_id, path in paths.items():
                db = Database(path, db_id)
                for table, columns in INDEXED_COLUMNS[db_id].items():
                    for column in columns:
                        index.add_column(db_id, table, column, db.distinct_values(table, column))
            dt = time.perf_counter() - t
            n = index.embedded_values
            rate = f", {n / dt:.0f} strings/s including the model load" if n else ""
            print(f"\nvalue indexes ({label}): {dt:.1f} s, {n:,} strings embedded{rate}")

    tasks = load_task_dir(ROOT / "data" / "tasks" / "ehrchatqa", list(paths), ["incre", "adapt"])
    print("\nsql_execute latency over every task's gold SQL (ms)")
    print(f"  {'database':<15} {'queries':>7} {'first p50':>10} {'first p95':>10} {'first max':>10} "
          f"{'cached p50':>11} {'timeouts':>9}")
    for db_id, path in paths.items():
        db = Database(path, db_id)
        first, again, timeouts = [], [], 0
        for task in (t for t in tasks if t.db_id == db_id):
            for runs in (first, again):
                t = time.perf_counter()
                try:
                    db.execute(task.gold_sql, timeout_s=60.0)
                except QueryError:
                    timeouts += runs is first
                runs.append(1000 * (time.perf_counter() - t))
        q = statistics.quantiles(first, n=20)
        print(f"  {db_id:<15} {len(first):>7} {statistics.median(first):>10.1f} {q[18]:>10.1f} {max(first):>10.1f} "
              f"{statistics.median(again):>11.3f} {timeouts:>9}")
    print(f"\npeak memory: {peak_rss_gb():.1f} GB")


if __name__ == "__main__":
    main()
