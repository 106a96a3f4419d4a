"""Trace writing: how many trial traces (spans and assessments included) MLflow stores per second.

    make bench-traces                              # sqlite store and an `mlflow server` (SQL backend) on loopback
    python bench/bench_traces.py --traces 2000 --stores sqlite

Real records first: every EHR-ChatQA task runs once with the reference agent and the scripted user, in this
process (the demo world, `used` dictionary). They are then written `--traces` times over (trial numbers vary)
through `MlflowTracker.log_trial`, exactly as the main job writes them, and timed from the first `log_trial` to the
end of `finish()` (every trace and assessment stored). Each store is checked afterwards: every trace is there with
all its spans and assessments.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def trial_records() -> list:
    """One record per task: the reference agent's trials, run in this process."""
    from ehrbench import benchmarks
    from ehrbench.benchmark import Hosts, TrialSettings
    from ehrbench.benchmarks.ehrchatqa.benchmark import INDEXED_COLUMNS
    from ehrbench.db.database import Database
    from ehrbench.episode import run_task_trial
    from ehrbench.retrieval.value_index import ValueIndex
    from ehrbench.runtime.hosts import LocalHost
    from ehrbench.schemas import WorldSpec, build_database

    generated = ROOT / "data" / "generated"
    spec = WorldSpec(seed=0, dictionary="used")
    dbs = {db: Database(build_database(db, spec, generated), db) for db in ("mimic_iv_star", "eicu_star")}
    index = ValueIndex(generated / "value_index")
    for db_id, tables in INDEXED_COLUMNS.items():
        for table, columns in tables.items():
            for column in columns:
                index.add_column(db_id, table, column, dbs[db_id].distinct_values(table, column))
    options = {"name": "ehrchatqa", "databases": list(dbs), "flows": ["incre", "adapt"], "sql_timeout_s": 60,
               "task_dir": str(ROOT / "data" / "tasks" / "ehrchatqa"), "web_search": "vocabulary"}
    tasks = benchmarks.load("ehrchatqa", options).tasks()
    hosts = Hosts({db: LocalHost(d) for db, d in dbs.items()}, LocalHost(index))
    settings = TrialSettings("ehrchatqa", options)

    async def all_trials():
        return await asyncio.gather(*(run_task_trial(t, 0, hosts, settings) for t in tasks))
    return [records[-1] for records in asyncio.run(all_trials())]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` on loopback with a SQL (sqlite) backend; returns the process and its URI."""
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{root / 'server.db'}",
                             "--default-artifact-root", str(root / "server-artifacts"), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)
            return proc, uri
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not start within 120 s")


def write(records: list, n: int, uri: str, artifacts: str | None, label: str) -> float:
    """Write `n` traces through the tracker; returns traces per second (first log_trial to the end of finish)."""
    import mlflow

    from ehrbench.tracking.mlflow_tracker import MlflowTracker

    tracker = MlflowTracker(uri, "bench-traces", label, {"bench": label}, artifact_location=artifacts)
    start = time.perf_counter()
    for i in range(n):
        base = records[i % len(records)]
        tracker.log_trial(dataclasses.replace(base, trial=i // len(records)))
    tracker.finish()
    rate = n / (time.perf_counter() - start)
    run = tracker.run.info
    traces = mlflow.search_traces(locations=[run.experiment_id], run_id=run.run_id, return_type="list",
                                  max_results=n + 1)
    spans = sum(len(t.data.spans) for t in traces)
    rewards = sum(1 for t in traces for a in t.info.assessments if a.name == "reward")
    expected_spans = sum(_span_count(records[i % len(records)]) for i in range(n))
    status = "all stored" if (len(traces), spans, rewards) == (n, expected_spans, n) else \
        f"MISSING: {len(traces)} traces, {spans}/{expected_spans} spans, {rewards} rewards"
    print(f"  {label:<28} {n:>6} traces {rate:>8.1f} traces/s   ({spans / len(traces):.1f} spans each; {status})")
    return rate


def _span_count(record) -> int:
    return 1 + len(record.messages) + len(record.model_calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=1000)
    ap.add_argument("--stores", nargs="+", default=["sqlite", "server"], choices=["sqlite", "server"])
    args = ap.parse_args()

    from ehrbench.tracking.mlflow_tracker import local_store

    t = time.perf_counter()
    records = trial_records()
    print(f"{len(records)} trial records in {time.perf_counter() - t:.1f} s "
          f"({sum(_span_count(r) for r in records) / len(records):.1f} spans, "
          f"{sum(1 + bool(r.validation) + len(r.assessments) for r in records) / len(records):.1f} assessments each)")
    tmp = Path(tempfile.mkdtemp(prefix="ehrbench-traces-"))
    if "sqlite" in args.stores:
        uri, art = local_store(tmp / "mlruns")
        write(records, args.traces, uri, art, "sqlite store (default)")
    if "server" in args.stores:
        proc, uri = start_server(tmp)
        try:
            write(records, args.traces, uri, None, "mlflow server, SQL backend")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
