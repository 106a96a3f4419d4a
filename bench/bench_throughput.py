"""Runtime throughput: does ehrbench keep a model provider busy? And what does a trial cost the harness?

    make bench-throughput                                    # 16, 64, 256 trials in flight at 0.5 s per model call
    python bench/bench_throughput.py --latency 1.0 --concurrency 64 256 --waves 4
    python bench/bench_throughput.py --benchmark ehragent --concurrency 256   # EHRAgent: a sandboxed cell per trial
    python bench/bench_throughput.py --benchmark agentehr --concurrency 256   # AgentEHR: censored copies per trial

The scripted model and user wait `--latency` seconds per call (`model.latency_s`, `user.latency_s`), so each trial is
a sequence of awaited "model calls" with real tool calls (SQL on the database shards, value search on the index)
between them, exactly as with a real provider. With `c` trials in flight the ideal is `c / latency` calls per second;
the bench reports the achieved rate over the steady state (while at least `c` trials were running) and over the whole
run (ramp-up and tail included), and the harness's own cost per trial with zero latency.
Runs on a local Ray cluster with every core of this machine; results go to a list (no MLflow), unless --mlflow.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def steady_state(records, concurrency: int) -> tuple[float, float, int]:
    """(seconds, calls started, trials) in the window where at least `concurrency` trials were running."""
    edges = sorted([(r.started_at, 1) for r in records] + [(r.started_at + r.duration_s, -1) for r in records])
    running, start, windows = 0, None, []
    for t, step in edges:
        running += step
        if running >= concurrency and start is None:
            start = t
        elif running < concurrency and start is not None:
            windows.append((start, t))
            start = None
    if not windows:
        return 0.0, 0, 0
    lo, hi = windows[0][0], windows[-1][1]
    calls = sum(1 for r in records for c in r.model_calls if lo <= r.started_at + c["t"] < hi)
    return hi - lo, calls, len(windows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per model call")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--waves", type=int, default=6, help="trials per run = waves x concurrency")
    ap.add_argument("--zero-latency-trials", type=int, default=880)
    ap.add_argument("--user-simulators", type=int, default=0, help="UserSimulatorActors (0: users in the workers)")
    ap.add_argument("--mlflow", action="store_true", help="stream every trial to MLflow as a trace, as the main job")
    ap.add_argument("--benchmark", default="ehrchatqa", help="conf/benchmark/<name>.yaml, with its reference agent")
    ap.add_argument("--address", default=None, help="an existing Ray cluster (bench/bench_scaleout.py starts them)")
    ap.add_argument("--placement", default="spread", choices=["spread", "roles"], help="runtime.placement")
    args = ap.parse_args()

    import ray

    from ehrbench import benchmarks
    from ehrbench.benchmark import TrialSettings
    from ehrbench.config import RuntimeOptions
    from ehrbench.runtime.runner import build_indexes, release, run_trials, start_runtime, start_workers
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.tracking.mlflow_tracker import MlflowTracker, local_store

    import yaml

    bench_options = yaml.safe_load((ROOT / "conf" / "benchmark" / f"{args.benchmark}.yaml").read_text())
    bench_options["task_dir"] = str(ROOT / bench_options["task_dir"])
    bench = benchmarks.load(args.benchmark, bench_options)
    from ehrbench.world.generator import WorldSize

    spec = WorldSpec(seed=0, size=WorldSize(scale=float(bench_options.get("world_scale", 1))), dictionary="used")
    from ehrbench.schemas.duckdb_export import export_duckdb

    resources = bench.resources()
    paths = {db: str(build_database(db, spec, ROOT / "data" / "generated")) for db in resources.databases}
    paths.update({db: str(export_duckdb(db, Path(paths[db]))) for db in resources.duckdb})
    tasks = bench.resolve_tasks(bench.tasks(), paths)          # as the main job: answers, per-patient files
    user = "none" if bench.users == ("none",) else "scripted"
    cores = os.cpu_count()
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}}
    if args.address:
        ray.init(address=args.address, log_to_driver=False, runtime_env=env)
    else:
        ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, runtime_env=env)
    runtime = start_runtime(paths, str(ROOT / "data" / "generated" / "value_index"),
                            RuntimeOptions(user_simulators=args.user_simulators, placement=args.placement),
                            services=resources.services, settings=TrialSettings(args.benchmark, bench_options))
    if bench.resources().indexed_columns:
        build_indexes(runtime.databases, runtime.index, bench.resources().indexed_columns)
    tmp = Path(tempfile.mkdtemp(prefix="ehrbench-throughput-"))
    print(f"{args.benchmark}: {cores} cores, {len(tasks)} tasks, model latency {args.latency:g} s per call, "
          f"users {'in ' + str(args.user_simulators) + ' UserSimulatorActors' if args.user_simulators else 'in the trial workers'}"
          f"{', every trial traced to MLflow' if args.mlflow else ''}\n")

    def run(n_trials: int, concurrency: int, latency: float, label: str):
        options = RuntimeOptions(max_in_flight=concurrency, user_simulators=args.user_simulators,
                                 placement=args.placement)
        for worker in runtime.workers:
            ray.kill(worker)
        settings = TrialSettings(args.benchmark, bench_options, user=user, agent_latency_s=latency,
                                 user_latency_s=latency)
        start_workers(runtime, settings, options)
        ray.get([w.run.remote(tasks[0], 99, 0) for w in runtime.workers])        # workers up before the clock
        trials = -(-n_trials // len(tasks))
        order = [(t.key, i) for i in range(trials) for t in tasks]
        skip = set(order[n_trials:])    # exactly n_trials: every task's first trial, then second ones, ...
        records = []
        tracker = None
        if args.mlflow:
            uri, art = local_store(tmp / "mlruns")
            tracker = MlflowTracker(uri, "throughput", label, {"bench": label}, artifact_location=art)

        def on_record(r):
            records.append(r)
            if tracker:
                tracker.log_trial(r)
        start = time.perf_counter()
        run_trials(tasks, trials, runtime.workers, on_record, max_in_flight=concurrency, skip=skip, progress=False)
        wall = time.perf_counter() - start
        if tracker:
            tracker.finish()
            tail = time.perf_counter() - start - wall
            print(f"  ({label}: the last trace stored {tail:.1f} s after the last trial ended)")
        return records, wall

    print("zero latency: the harness's own cost per trial")
    records, wall = run(args.zero_latency_trials, 256, 0.0, "zero-latency")
    ok = sum(1 for r in records if r.reward == 1.0)
    if not ok:
        print("  first error:", records[0].termination, (records[0].error or "")[-1500:])
    calls = sum(len(r.model_calls) for r in records)
    print(f"  {len(records)} trials ({ok} succeeded, {calls / len(records):.1f} model calls and "
          f"{sum(r.tool_calls for r in records) / len(records):.1f} tool calls each) in {wall:.1f} s: "
          f"{len(records) / wall:.1f} trials/s = {1000 * wall / len(records):.1f} ms of the machine per trial "
          f"({1000 * wall * cores / len(records):.0f} core-ms)\n")

    print(f"{'in flight':>9} {'trials':>7} {'wall s':>7} {'ideal calls/s':>14} {'steady calls/s':>15} "
          f"{'steady %':>9} {'whole-run %':>12}")
    for c in args.concurrency:
        records, wall = run(args.waves * c, c, args.latency, f"c{c}")
        ideal = c / args.latency
        span, calls, _ = steady_state(records, c)
        total_calls = sum(len(r.model_calls) for r in records)
        bad = sum(1 for r in records if r.reward != 1.0)
        steady = calls / span if span else float("nan")
        print(f"{c:>9} {len(records):>7} {wall:>7.1f} {ideal:>14.0f} {steady:>15.1f} {100 * steady / ideal:>8.1f}% "
              f"{100 * total_calls / wall / ideal:>11.1f}%" + (f"  ({bad} trials not at reward 1)" if bad else ""))
    release(runtime)          # the value index drops its manifest
    ray.shutdown()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
