"""World builds at scale: build time, rows, file size and peak memory of every rendering at 1x, 10x, 100x.

    make bench-scale                                  # 1x, 10x, 100x of MIMIC-IV* and eICU*, as Ray tasks
    make bench-scale ARGS="--scales 1 10 --in-process"    # the single-process chunked build instead
    make bench-scale ARGS="--scales 1 10 --databases ehrsql_mimic_iii ehrsql_eicu treqs"   # EHRAgent's renderings
    make bench-scale ARGS="--scales 84 --databases ehrsql_mimic_iii --size ehrsql_patients=1000 vitals_every_min=30,5 vitals_window_h=0"

Each build runs in a fresh child process (so its peak memory is its own) in a fresh folder, with the `full`
dictionary (the main job's). With Ray, the child starts a local Ray cluster of this machine's CPUs and stops it
afterwards; the peak memory is then the driver's plus the largest of any build task's worker (each worker holds one
chunk of patients at a time, and at most `2 x CPUs` parts wait in the driver).
Absolute times on a shared 2-core machine are noisy; compare ratios within one run.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _build(db_id: str, scale: float, folder: str, on_ray: bool, chunk: int, out, fields: dict | None = None) -> None:
    from ehrbench.schemas import WorldSpec, database_path
    from ehrbench.schemas.build import build_in_process, build_on_ray
    from ehrbench.world.generator import WorldSize

    spec = WorldSpec(seed=0, size=WorldSize(scale=scale, **(fields or {})), dictionary="full")
    path = database_path(db_id, spec, Path(folder))
    t = time.perf_counter()
    worker_mb = 0.0
    if on_ray:
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)
        try:
            path, worker_mb = build_on_ray(db_id, spec, path, chunk_patients=chunk)
        finally:
            ray.shutdown()
    else:
        build_in_process(db_id, spec, path, chunk_patients=chunk)
    out.put((str(path), time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, worker_mb))


def main() -> None:
    from ehrbench.schemas import SCHEMAS
    from ehrbench.schemas.build import CHUNK_PATIENTS
    from ehrbench.world.generator import WorldSize

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=float, nargs="+", default=[1, 10, 100])
    ap.add_argument("--databases", nargs="+", default=["mimic_iv_star", "eicu_star"], choices=sorted(SCHEMAS))
    ap.add_argument("--in-process", action="store_true", help="build in one process instead of as Ray tasks")
    ap.add_argument("--chunk-patients", type=int, default=CHUNK_PATIENTS)
    ap.add_argument("--size", nargs="*", default=[], metavar="FIELD=VALUE",
                    help="other WorldSize fields (a,b for a pair; 0 for None), e.g. ehrsql_patients=1000")
    args = ap.parse_args()
    fields = {}
    for item in args.size:
        name, _, value = item.partition("=")
        numbers = tuple(int(v) for v in value.split(","))
        fields[name] = (numbers if len(numbers) > 1 else numbers[0]) or None
    how = "in one process" if args.in_process else f"as Ray tasks on {os.cpu_count()} CPUs"
    print(f"world builds {how}, {args.chunk_patients} patients per chunk, full dictionary\n")
    print(f"{'database':<15} {'scale':>6} {'patients':>9} {'rows':>12} {'size MB':>9} {'build s':>8} "
          f"{'rows/s':>9} {'peak MB':>8}  peak = driver + largest worker")
    ctx = multiprocessing.get_context("spawn")
    for scale in args.scales:
        size = WorldSize(scale=scale, **fields)
        for db_id in args.databases:
            folder = tempfile.mkdtemp(prefix="ehrbench-scale-")
            try:
                out = ctx.Queue()
                child = ctx.Process(target=_build, args=(db_id, scale, folder, not args.in_process,
                                                         args.chunk_patients, out, fields))
                child.start()
                path, seconds, driver_mb, worker_mb = out.get()
                child.join()
                con = sqlite3.connect(path)
                tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                rows = sum(con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables)
                con.close()
                per_table = rows / len(tables)
                first, stop = SCHEMAS[db_id].patient_range(size)
                patients = stop - first
                peak = f"{driver_mb + worker_mb:>8,.0f}  {driver_mb:,.0f} + {worker_mb:,.0f}" if worker_mb else \
                    f"{driver_mb:>8,.0f}"
                print(f"{db_id:<15} {scale:>5g}x {patients:>9,} {rows:>12,} {Path(path).stat().st_size / 1e6:>9,.1f} "
                      f"{seconds:>8.1f} {rows / seconds:>9,.0f} {peak}  ({per_table:,.0f} rows per table)", flush=True)
            finally:
                shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
