"""Patient partitions of a database, for benchmarks whose every question is about one patient (EHRAgent, AgentEHR).

`split_by_patient(path, db_id, n)` writes `n` SQLite files: each holds the rows of the patients whose id hashes to
it (`shard_of`) and a full copy of the tables that belong to no patient (code dictionaries, hospitals). A table
belongs to a patient directly (it has the patient column) or through a stay column of the patient table (eICU's
`unit_id`). Splits are cached next to the source, keyed by its name and `n`, and written atomically.
A question about patient P runs on shard `shard_of(P, n)` and sees exactly P's rows (tests check it against the
whole database).
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ShardPlan:
    patient_table: str                                 # the table that lists patients
    patient_column: str                                # their id, in that table and in tables that carry it
    via: dict[str, str] = field(default_factory=dict)  # column of other tables -> same column of the patient table


PLANS = {
    "mimic_iv_star": ShardPlan("demographics", "patientid"),
    "eicu_star": ShardPlan("icupatient", "patient_id", via={"unit_id": "unit_id"}),
}


def shard_of(patient_id, n: int) -> int:
    """Stable across processes and machines (not Python's salted hash)."""
    return int.from_bytes(hashlib.sha256(str(patient_id).encode()).digest()[:8], "big") % n


def _row_filter(plan: ShardPlan, columns: list[str]) -> str | None:
    if plan.patient_column in columns:
        return f'ehrbench_shard("{plan.patient_column}") = :shard'
    for column, patient_table_column in plan.via.items():
        if column in columns:
            return (f'"{column}" IN (SELECT "{patient_table_column}" FROM src."{plan.patient_table}" '
                    f'WHERE ehrbench_shard("{plan.patient_column}") = :shard)')
    return None   # a table of no patient: copied whole


def split_by_patient(path: str | Path, db_id: str, n: int, out_dir: str | Path | None = None) -> list[Path]:
    if db_id not in PLANS:
        raise KeyError(f"no patient sharding plan for {db_id!r}; known: {sorted(PLANS)}")
    if n < 1:
        raise ValueError(f"shard count must be at least 1, got {n}")
    path = Path(path)
    out = Path(out_dir or path.parent / "shards")
    out.mkdir(parents=True, exist_ok=True)
    targets = [out / f"{path.stem}.patients-{i}-of-{n}.sqlite" for i in range(n)]
    plan = PLANS[db_id]
    for i, target in enumerate(targets):
        if target.exists():
            continue
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        tmp.unlink(missing_ok=True)
        con = sqlite3.connect(tmp)
        try:
            con.create_function("ehrbench_shard", 1, lambda pid: shard_of(pid, n), deterministic=True)
            con.execute("ATTACH DATABASE ? AS src", (str(path.resolve()),))
            tables = con.execute("SELECT name, sql FROM src.sqlite_master WHERE type='table' "
                                 "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()
            for name, ddl in tables:
                con.execute(ddl)
                columns = [r[1] for r in con.execute(f'PRAGMA src.table_info("{name}")')]
                where = _row_filter(plan, columns)
                con.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}"' + (f" WHERE {where}" if where else ""),
                            {"shard": i} if where else {})
            for (ddl,) in con.execute("SELECT sql FROM src.sqlite_master WHERE type='index' AND sql IS NOT NULL"):
                con.execute(ddl)
            con.commit()
            con.execute("DETACH DATABASE src")
            con.execute("VACUUM")
        finally:
            con.close()
        os.replace(tmp, target)
    return targets
