"""Figures for the EHR-ChatQA slice: world build, value-index build (cold and warm cache), trial throughput.

    make bench                                   # defaults: demo-sized world, `used` dictionary, 2 trials
    make bench ARGS="--dictionary full"          # the main job's dictionary (~89k ICD descriptions to embed)

Everything is built in a fresh temporary folder, so the index build is cold; then built again to show the cache.
Throughput is measured twice on a local Ray cluster: trials alone, and trials streamed to MLflow as traces.
Absolute times on a shared 2-core machine are noisy; compare ratios within one run.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dictionary", choices=["full", "used"], default="used")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--limit-tasks", type=int, default=20, help="tasks per database and flow")
    args = ap.parse_args()

    import ray

    from ehrbench.benchmarks.ehrchatqa.benchmark import TrialSettings
    from ehrbench.benchmarks.ehrchatqa.tasks import load_task_dir
    from ehrbench.runtime.actors import start_database, start_value_index
    from ehrbench.runtime.runner import build_indexes, run_trials
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.tracking.mlflow_tracker import MlflowTracker, local_store
    from ehrbench.world.generator import WorldSize, generate_world

    tmp = Path(tempfile.mkdtemp(prefix="ehrbench-bench-"))
    spec = WorldSpec(seed=0, size=WorldSize(scale=args.scale), dictionary=args.dictionary)
    t = time.perf_counter()
    world = generate_world(spec.seed, spec.size)
    t_world = time.perf_counter() - t
    print(f"world: {len(world.patients)} patients generated in {t_world:.1f} s")
    paths = {}
    for db_id in ("mimic_iv_star", "eicu_star"):
        t = time.perf_counter()
        paths[db_id] = build_database(db_id, spec, tmp / "db")
        dt = time.perf_counter() - t
        con = sqlite3.connect(paths[db_id])
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        counts = {name: con.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0] for name in tables}
        print(f"\n{db_id}: built in {dt:.1f} s (world generation included), {paths[db_id].stat().st_size / 1e6:.1f} MB, "
              f"{sum(counts.values()):,} rows")
        for name, n in counts.items():
            print(f"  {name:<22} {n:>9,}")

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    dbs = {db_id: start_database(str(p), db_id) for db_id, p in paths.items()}
    for label in ("cold", "warm"):
        index = start_value_index(str(tmp / "index"))
        t = time.perf_counter()
        embedded = build_indexes(dbs, index)
        dt = time.perf_counter() - t
        rate = f", {embedded / dt:.0f} strings/s including the model load" if embedded else ""
        print(f"\nvalue indexes ({label} cache): {dt:.1f} s, {embedded:,} strings embedded{rate}")
        if label == "cold":
            ray.kill(index)
    root = Path(__file__).resolve().parents[1]
    tasks = load_task_dir(root / "data" / "tasks" / "ehrchatqa", list(dbs), ["incre", "adapt"])
    per: dict = {}
    tasks = [t for t in tasks if per.setdefault((t.db_id, t.task_type), []).append(t) or
             len(per[(t.db_id, t.task_type)]) <= args.limit_tasks]
    settings = TrialSettings()
    n = len(tasks) * args.trials
    for label, tracked in (("trials only", False), ("trials + MLflow traces", True)):
        records = []
        tracker = None
        if tracked:
            uri, art = local_store(tmp / "mlruns")
            tracker = MlflowTracker(uri, "bench", "bench", {"bench": True}, artifact_location=art)
        t = time.perf_counter()
        run_trials(tasks, args.trials, dbs, index, settings,
                   lambda r: (records.append(r), tracker.log_trial(r) if tracker else None), progress=False)
        dt = time.perf_counter() - t
        ok = sum(1 for r in records if r.reward == 1.0)
        print(f"\n{label}: {n} trials in {dt:.1f} s = {n / dt:.1f} trials/s ({ok}/{n} succeeded)")
        if tracker:
            tracker.finish()
    ray.shutdown()


if __name__ == "__main__":
    main()
