"""AgentEHR's data path: per-patient file build rate, and what a censored episode costs to open and to query.

    make bench-agentehr                       # scales 2 (the samples' world) and 10
    make bench-agentehr ARGS="--scales 2 50"

Each scale's MIMIC-IV rendering is built (or reused) in a fresh folder and split into per-patient files; then, for
up to 200 (patient, prediction time) pairs at the patients' own events, the episode's censored copies are made
(`CensoredPatient`, what load_ehr does) and two typical tool queries run on them. Throughput with many trials in
flight: `python bench/bench_throughput.py --benchmark agentehr --concurrency 256`. Absolute times on a shared 2-core
machine are noisy; compare ratios within one run.
"""
from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    from ehrbench.benchmarks.agentehr.censoring import CensoredPatient
    from ehrbench.benchmarks.agentehr.patient_db import split_patients
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.world.generator import WorldSize

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[2.0, 10.0])
    args = parser.parse_args()
    print(f"{'scale':>6} {'patients':>9} {'split s':>8} {'patients/s':>11} {'open p50 ms':>12} {'open p95':>9} "
          f"{'query p50 ms':>13} {'query p95':>10}")
    with tempfile.TemporaryDirectory(prefix="bench-agentehr-") as tmp:
        for scale in args.scales:
            source = build_database("mimic_iv", WorldSpec(seed=0, size=WorldSize(scale=scale)), Path(tmp))
            t = time.perf_counter()
            folder = split_patients(source, Path(tmp))
            split_s = time.perf_counter() - t
            files = sorted(folder.glob("patient_*.db"))
            rng = random.Random(0)
            opens, queries = [], []
            for path in rng.sample(files, min(200, len(files))):
                times = [x for (x,) in sqlite3.connect(path).execute("SELECT charttime FROM labevents")]
                if not times:
                    continue
                cutoff = rng.choice(times)
                t = time.perf_counter()
                view = CensoredPatient(path, cutoff, folder / "reference.db")
                opens.append(1000 * (time.perf_counter() - t))
                t = time.perf_counter()
                view.query("SELECT * FROM labevents ORDER BY charttime DESC LIMIT 20")
                view.query("SELECT label, COUNT(*) FROM chartevents GROUP BY label")
                queries.append(1000 * (time.perf_counter() - t) / 2)
                view.close()
            print(f"{scale:>6g} {len(files):>9} {split_s:>8.1f} {len(files) / split_s:>11.0f} "
                  f"{np.percentile(opens, 50):>12.1f} {np.percentile(opens, 95):>9.1f} "
                  f"{np.percentile(queries, 50):>13.2f} {np.percentile(queries, 95):>10.2f}")


if __name__ == "__main__":
    main()
