"""PhysAssistBench's FHIR layer: search latency per tool, what compaction costs and saves, the FHIR export's rate.

    make bench-physassist                       # the sessions' world (seed 0, scale 2)
    python bench/bench_physassist.py --patients 50 --repeat 3

Each read tool is called as the sessions call it (the patient's last admission, the arguments the gold actions use)
on every chosen patient's record, through `fhir.run_search` (argument cleaning, the date bound); the result is then
compacted as the agent sees it (`compact.compact`). Latency is per call on one thread (p50 / p95 over patients and
repeats); the compaction line gives its cost and the characters before (the result as JSON) and after. The last
line times the FHIR export (validation included) on the chosen patients. Throughput at 256 sessions in flight:
`python bench/bench_throughput.py --benchmark physassist --concurrency 256 --waves 3`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patients", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=2.0)
    args = ap.parse_args()

    from ehrbench.benchmarks.agentehr.patient_db import split_patients
    from ehrbench.benchmarks.physassist.adapter import PatientRecord
    from ehrbench.benchmarks.physassist.compact import compact
    from ehrbench.benchmarks.physassist.export import export
    from ehrbench.benchmarks.physassist.fhir import run_search
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.world.generator import WorldSize

    source = build_database("mimic_iv", WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale)),
                            ROOT / "data" / "generated")
    folder = split_patients(source, source.parent)
    paths = sorted(folder.glob("patient_*.db"))[:args.patients]
    calls: dict[str, list[float]] = {}
    compaction: list[tuple[float, int, int]] = []
    for path in paths:
        record = PatientRecord(path, folder / "reference.db")
        last = record.rows("SELECT hadm_id, dischtime FROM admissions ORDER BY admittime DESC LIMIT 1")
        if not last:
            continue
        s, hadm, day = record.subject_id, last[0]["hadm_id"], str(last[0]["dischtime"])[:10]
        tools = {
            "Patient.read": {"subject_id": s},
            "Encounter.search": {"subject_id": s, "hadm_id": hadm},
            "Condition.search": {"subject_id": s, "hadm_id": hadm},
            "Observation.search (lab code)": ("Observation.search", {"subject_id": s, "hadm_id": hadm,
                                                                     "category": "laboratory", "code": "Potassium",
                                                                     "_count": 50}),
            "Observation.search (newest 20)": ("Observation.search", {"subject_id": s}),
            "Observation.search (vitals)": ("Observation.search", {"subject_id": s, "category": "vital-signs"}),
            "MedicationRequest.search": {"subject_id": s, "hadm_id": hadm},
            "MedicationAdministration.search": {"subject_id": s, "hadm_id": hadm},
            "DiagnosticReport.search": {"subject_id": s, "hadm_id": hadm},
            "DocumentReference.search": {"subject_id": s, "hadm_id": hadm},
            "CarePlan.search": {"subject_id": s, "hadm_id": hadm},
        }
        for label, spec in tools.items():
            name, arguments = spec if isinstance(spec, tuple) else (label, spec)
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                result = run_search(record, name, arguments, day)
                calls.setdefault(label, []).append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                shown = compact(result)
                compaction.append((time.perf_counter() - t0, len(json.dumps(result, default=str)), len(shown)))
        record.close()
    print(f"FHIR search on {len(paths)} patients x {args.repeat} (world seed {args.seed} scale {args.scale:g}), "
          "ms per call:")
    print(f"  {'tool':<34} {'p50':>7} {'p95':>7}")
    for label, values in calls.items():
        print(f"  {label:<34} {1000 * percentile(values, 0.5):>7.2f} {1000 * percentile(values, 0.95):>7.2f}")
    cost = [c for c, _, _ in compaction]
    before, after = sum(b for _, b, _ in compaction), sum(a for _, _, a in compaction)
    print(f"compaction: p50 {1e6 * percentile(cost, 0.5):.0f} us, p95 {1e6 * percentile(cost, 0.95):.0f} us per "
          f"result; {before / len(compaction):,.0f} characters as JSON -> {after / len(compaction):,.0f} shown "
          f"({100 * after / before:.1f}%, median ratio {statistics.median(a / max(1, b) for _, b, a in compaction):.2f})")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        counts = export(folder, Path(tmp) / "fhir.ndjson", len(paths))
        wall = time.perf_counter() - t0
    total = sum(counts.values())
    print(f"FHIR export: {len(paths)} patients, {total:,} resources validated in {wall:.1f} s "
          f"({total / wall:,.0f} resources/s)")


if __name__ == "__main__":
    main()
