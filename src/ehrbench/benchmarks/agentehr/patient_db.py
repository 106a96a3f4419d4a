"""AgentEHR's storage: one SQLite file per patient holding every table that carries `subject_id`, and a reference file
with the dictionaries (the tables that belong to no patient), split from a built MIMIC-IV rendering.

    <folder>/patient_<subject_id>.db     patients, admissions, labevents, ..., discharge, radiology
    <folder>/reference.db                d_icd_diagnoses, d_icd_procedures, d_labitems, d_items

MIMIC-IV's derived tables (age, charlson) are left out: they summarise whole admissions, so they would carry what is
only known at discharge into every earlier moment (the original's per-patient files hold ed/hosp/icu/note only).
The folder is keyed by the source file's name (itself keyed by the world and the code), written under a temporary
name and renamed, so it is built once and reused; patients are split in chunks, so memory stays bounded.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

EXCLUDED = ("age", "charlson")          # mimiciv_derived
CHUNK = 200                             # patients held in memory at once while splitting


def _tables(conn: sqlite3.Connection) -> dict[str, list[tuple[str, str]]]:
    names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {n: [(r[1], r[2]) for r in conn.execute(f'PRAGMA table_info("{n}")') if r[1].lower() != "row_id"]
            for n in names}


def _create(conn: sqlite3.Connection, table: str, columns: list[tuple[str, str]]) -> str:
    conn.execute(f'CREATE TABLE "{table}" ({", ".join(f"{c} {t}" for c, t in columns)})')
    return f'INSERT INTO "{table}" VALUES ({", ".join("?" * len(columns))})'


def split_patients(source: str | Path, root: str | Path) -> Path:
    """The per-patient folder for a MIMIC rendering `source` (MIMIC-IV, or EHRSQL's MIMIC-III with its upper-case
    names, kept as they are: the schema shift), built once and reused."""
    source, root = Path(source), Path(root)
    folder = root / f"agentehr-{source.stem}"
    if (folder / "reference.db").exists():
        return folder
    tmp = root / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    src = sqlite3.connect(f"file:{source.resolve()}?mode=ro", uri=True)
    try:
        tables = {n: c for n, c in _tables(src).items() if n.lower() not in EXCLUDED}
        per_patient = {n: c for n, c in tables.items() if "subject_id" in {name.lower() for name, _ in c}}
        ref = sqlite3.connect(tmp / "reference.db")
        for name, columns in tables.items():
            if name not in per_patient:
                insert = _create(ref, name, columns)
                ref.executemany(insert, src.execute(f'SELECT {", ".join(c for c, _ in columns)} FROM "{name}"'))
        ref.commit()
        ref.close()
        subjects = [s for (s,) in src.execute("SELECT subject_id FROM patients ORDER BY subject_id")]
        for i in range(0, len(subjects), CHUNK):
            chunk = subjects[i:i + CHUNK]
            rows: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
            marks = ", ".join("?" * len(chunk))
            for name, columns in per_patient.items():
                cols = ", ".join(c for c, _ in columns)
                at = [c.lower() for c, _ in columns].index("subject_id")
                for row in src.execute(f'SELECT {cols} FROM "{name}" WHERE subject_id IN ({marks}) ORDER BY rowid',
                                       chunk):
                    rows[row[at]][name].append(row)
            for subject in chunk:
                conn = sqlite3.connect(tmp / f"patient_{subject}.db")
                for name, columns in per_patient.items():
                    conn.executemany(_create(conn, name, columns), rows[subject][name])
                conn.commit()
                conn.close()
    finally:
        src.close()
    os.replace(tmp, folder)
    return folder


def patient_file(folder: str | Path, subject_id: int | str) -> Path:
    return Path(folder) / f"patient_{int(subject_id)}.db"
