"""AgentEHR's samples, written from the MIMIC-IV rendering by the original's label rules (data_preprocess/
meta_sql_data_generation.py), and its candidate tables.

A sample is {subject_id, hadm_id, prediction_time, task, label: [{name, ...codes}]} (the original's task file item;
only `name` is scored). One sample per patient and task, at a seeded random event of theirs:
- diagnoses_ccs: t = the admission's dischtime - 2 min; labels = the CCS categories of its ICD codes;
- procedures_ccs: t = chartdate 23:58; labels = the CCS categories of that day's ICD procedures;
- labevents: t = charttime - 1 min; labels = the d_labitems labels of every lab drawn at that time;
- prescriptions: t = starttime - 1 min; labels = the ATC groups (4th level) of the orders started then, from
  `data/atc.yaml`; orders of drugs without a group are dropped, as the original drops NDCs without an ATC name;
- microbiologyevents: t = charttime - 1 min; labels = the test names at that time;
- transfers: t = intime - 1 min of a transfer (eventtype 'transfer'); labels = its care unit.
CCS comes from `data/ccs.yaml` (HCUP's grouper, written by scripts/derive_agentehr_vocab.py). Candidate tables hold
every name a task can be answered with (all 283 CCS diagnosis categories, all procedure categories, every lab label,
ATC group, test name and care unit of the world).
"""
from __future__ import annotations

import functools
import random
import sqlite3
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import yaml

TASKS = ("diagnoses_ccs", "procedures_ccs", "labevents", "prescriptions", "microbiologyevents", "transfers")
CANDIDATE_TABLES = {"diagnoses_ccs": "diagnoses_ccs_candidates", "procedures_ccs": "procedures_ccs_candidates",
                    "labevents": "labevents_candidates", "prescriptions": "prescriptions_atc_candidates",
                    "microbiologyevents": "microbiologyevents_candidates", "transfers": "transfers_candidates"}


@functools.lru_cache(maxsize=1)
def ccs() -> dict:
    return yaml.safe_load(resources.files("ehrbench.benchmarks.agentehr.data").joinpath("ccs.yaml").read_text())


def ccs_name(kind: str, version: int, code: str) -> str | None:
    """The CCS category name of an ICD code (kind: diagnoses | procedures), None when HCUP has none."""
    table = ccs()
    number = table[kind].get(int(version), {}).get(code)
    names = table["diagnosis_categories" if kind == "diagnoses" else "procedure_categories"]
    return None if number is None else names[number]


@functools.lru_cache(maxsize=1)
def atc() -> dict:
    return yaml.safe_load(resources.files("ehrbench.benchmarks.agentehr.data").joinpath("atc.yaml").read_text())


@functools.lru_cache(maxsize=1)
def atc_by_drug_name() -> dict[str, str]:
    """prescriptions.drug as the rendering spells it -> its ATC group's name."""
    from ...schemas.ehrsql_mimic_iii import drug_name

    table, out = atc(), {}
    for generic, code in table["drugs"].items():
        spelled = drug_name(generic)         # two generics may share a spelling ("Insulin"): the one named so wins
        if spelled not in out or generic == spelled.lower():
            out[spelled] = table["groups"][code]
    return out


def _minus(when: str, minutes: int) -> str:
    return str(datetime.fromisoformat(when) - timedelta(minutes=minutes))


def _one_per_patient(rows: list[tuple], rng: random.Random, patients: set[int] | None) -> list[tuple]:
    """A seeded random row per patient (rows start with subject_id; only `patients`' when given), in id order."""
    by_patient: dict[int, list[tuple]] = {}
    for row in rows:
        if patients is None or row[0] in patients:
            by_patient.setdefault(row[0], []).append(row)
    return [rng.choice(sorted(by_patient[s])) for s in sorted(by_patient)]


def split_patients_for_memory(source: str | Path, seed: int = 42) -> tuple[set[int], set[int]]:
    """(test, train) patients: a seeded half of the world's patients is kept for the evolving memory's train split,
    so no experience is ever learned on a patient it is later tested on."""
    conn = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    try:
        patients = [s for (s,) in conn.execute("SELECT subject_id FROM patients ORDER BY subject_id")]
    finally:
        conn.close()
    random.Random(f"{seed}/train").shuffle(patients)
    half = len(patients) // 2
    return set(patients[half:]), set(patients[:half])


def make_samples(source: str | Path, seed: int = 42, patients: set[int] | None = None) -> dict[str, list[dict]]:
    """task -> samples, from a built MIMIC-IV rendering (SQLite); only `patients`' when given."""
    conn = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    out: dict[str, list[dict]] = {}
    try:
        rng = random.Random(f"{seed}/diagnoses_ccs")
        picks = _one_per_patient(conn.execute("SELECT subject_id, hadm_id, dischtime FROM admissions "
                                              "WHERE dischtime IS NOT NULL").fetchall(), rng,
                                 patients)
        out["diagnoses_ccs"] = []
        for subject, hadm, disch in picks:
            codes = conn.execute("SELECT icd_code, icd_version, seq_num FROM diagnoses_icd WHERE hadm_id = ? "
                                 "ORDER BY seq_num", (hadm,)).fetchall()
            labels = [{"name": ccs_name("diagnoses", v, c), "icd_code": c, "icd_version": v, "seq_num": s}
                      for c, v, s in codes]
            out["diagnoses_ccs"].append({"subject_id": subject, "hadm_id": hadm, "prediction_time": _minus(disch, 2),
                                         "task": "diagnoses_ccs", "label": [x for x in labels if x["name"]]})
        rng = random.Random(f"{seed}/procedures_ccs")
        picks = _one_per_patient(conn.execute("SELECT DISTINCT subject_id, chartdate FROM procedures_icd").fetchall(),
                                 rng, patients)
        out["procedures_ccs"] = []
        for subject, day in picks:
            codes = conn.execute("SELECT hadm_id, icd_code, icd_version FROM procedures_icd WHERE subject_id = ? AND "
                                 "chartdate = ? ORDER BY seq_num", (subject, day)).fetchall()
            labels = [{"name": ccs_name("procedures", v, c), "icd_code": c, "icd_version": v} for _, c, v in codes]
            out["procedures_ccs"].append({"subject_id": subject, "hadm_id": codes[0][0],
                                          "prediction_time": f"{day[:10]} 23:58:00", "task": "procedures_ccs",
                                          "label": [x for x in labels if x["name"]]})
        groups = atc_by_drug_name()
        rows = [r for r in conn.execute("SELECT subject_id, starttime, hadm_id, drug FROM prescriptions").fetchall()
                if r[3] in groups]
        times = _one_per_patient(sorted({(r[0], r[1]) for r in rows}), random.Random(f"{seed}/prescriptions"), patients)
        at: dict[tuple, list] = {}
        for r in rows:
            at.setdefault((r[0], r[1]), []).append(r)
        out["prescriptions"] = [{"subject_id": s, "hadm_id": at[s, t][0][2], "prediction_time": _minus(t, 1),
                                 "task": "prescriptions",
                                 "label": [{"name": groups[r[3]], "drug": r[3]} for r in at[s, t]]} for s, t in times]
        for task, sql, label in (
                ("labevents", "SELECT l.subject_id, l.charttime, l.hadm_id, d.label, l.itemid FROM labevents l "
                              "JOIN d_labitems d USING (itemid)", lambda r: {"name": r[3], "itemid": r[4]}),
                ("microbiologyevents", "SELECT subject_id, charttime, hadm_id, test_name FROM microbiologyevents "
                                       "WHERE charttime IS NOT NULL", lambda r: {"name": r[3]}),
                ("transfers", "SELECT subject_id, intime, hadm_id, careunit FROM transfers "
                              "WHERE eventtype = 'transfer'", lambda r: {"name": r[3]})):
            rows = conn.execute(sql).fetchall()
            times = _one_per_patient(sorted({(r[0], r[1]) for r in rows}), random.Random(f"{seed}/{task}"), patients)
            at: dict[tuple, list] = {}
            for r in rows:
                at.setdefault((r[0], r[1]), []).append(r)
            out[task] = [{"subject_id": s, "hadm_id": at[s, t][0][2], "prediction_time": _minus(t, 1), "task": task,
                          "label": [label(r) for r in at[s, t]]} for s, t in times]
    finally:
        conn.close()
    return {task: [s for s in samples if s["label"]] for task, samples in out.items()}


def write_candidates(source: str | Path, path: str | Path) -> Path:
    """The candidate database: one table per task with a `candidate` column (and the codes where there are)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    out = sqlite3.connect(tmp)
    try:
        table = ccs()
        out.execute("CREATE TABLE diagnoses_ccs_candidates (candidate TEXT, ccs_category INTEGER)")
        out.executemany("INSERT INTO diagnoses_ccs_candidates VALUES (?, ?)",
                        [(n, k) for k, n in table["diagnosis_categories"].items()])
        out.execute("CREATE TABLE procedures_ccs_candidates (candidate TEXT, ccs_category INTEGER)")
        out.executemany("INSERT INTO procedures_ccs_candidates VALUES (?, ?)",
                        [(n, k) for k, n in table["procedure_categories"].items()])
        out.execute("CREATE TABLE prescriptions_atc_candidates (candidate TEXT, atc_code TEXT)")
        out.executemany("INSERT INTO prescriptions_atc_candidates VALUES (?, ?)",
                        [(n, code) for code, n in atc()["groups"].items()])
        out.execute("CREATE TABLE labevents_candidates (candidate TEXT, itemid INTEGER, fluid TEXT, category TEXT)")
        out.executemany("INSERT INTO labevents_candidates VALUES (?, ?, ?, ?)",
                        src.execute("SELECT label, itemid, fluid, category FROM d_labitems ORDER BY itemid"))
        from ...world.vocab import vocabulary

        tests = sorted({spec["mimic_test"].upper() for spec in vocabulary().micro.values()})
        out.execute("CREATE TABLE microbiologyevents_candidates (candidate TEXT PRIMARY KEY)")
        out.executemany("INSERT INTO microbiologyevents_candidates VALUES (?)", [(x,) for x in tests])
        units = sorted({u for (u,) in src.execute("SELECT DISTINCT careunit FROM transfers "
                                                  "WHERE careunit IS NOT NULL")})
        out.execute("CREATE TABLE transfers_candidates (candidate TEXT PRIMARY KEY)")
        out.executemany("INSERT INTO transfers_candidates VALUES (?)", [(u,) for u in units])
        out.commit()
    finally:
        out.close()
        src.close()
    tmp.replace(path)
    return path
