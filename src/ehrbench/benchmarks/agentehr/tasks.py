"""AgentEHR's samples, written from the MIMIC-IV rendering by the original's label rules (data_preprocess/
meta_sql_data_generation.py), and its candidate tables.

A sample is {subject_id, hadm_id, prediction_time, task, label: [{name, ...codes}]} (the original's task file item;
only `name` is scored). One sample per patient and task, at a seeded random event of theirs:
- diagnoses_ccs: t = the admission's dischtime - 2 min; labels = the CCS categories of its ICD codes;
- procedures_ccs: t = chartdate 23:58; labels = the CCS categories of that day's ICD procedures;
- labevents: t = charttime - 1 min; labels = the d_labitems labels of every lab drawn at that time;
- prescriptions: t = starttime - 1 min; labels = the ATC groups (4th level) of the orders started then, from
  `data/atc.yaml`; orders of drugs without a group are dropped, as the original drops NDCs without an ATC name;
- microbiologyevents: t = chartdate - 1 min (the day before, 23:59); labels = the test names of that day;
- transfers: t = intime - 1 min of a transfer (eventtype 'transfer'); labels = its care unit.
CCS comes from `data/ccs.yaml` (HCUP's grouper, written by scripts/derive_agentehr_vocab.py). Candidate tables hold
every name a task can be answered with (all 283 CCS diagnosis categories, all procedure categories, every lab label,
ATC group, test name and care unit of the world).
"""
from __future__ import annotations

import functools
import random
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Callable

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


@dataclass(frozen=True)
class LabelRule:
    """One task's label rule over one rendering: rows (subject_id, event time, hadm_id, *label columns); the
    prediction time from the event time; a row's label ({name, ...codes}, None when it has no name)."""
    sql: str
    at: Callable[[str], str]
    label: Callable[[tuple], dict | None]


def _minus_minutes(n: int) -> Callable[[str], str]:
    return lambda when: _minus(when, n)


def _day_end(when: str) -> str:
    return f"{when[:10]} 23:58:00"


def _ccs(kind: str, name_at: int, version_at: int | None, code_keys: tuple[str, ...]):
    def label(row: tuple) -> dict | None:
        version = 9 if version_at is None else row[version_at]
        name = ccs_name(kind, version, row[name_at])
        return None if name is None else {"name": name, **dict(zip(code_keys, row[name_at:]))}
    return label


def _atc(row: tuple) -> dict | None:
    group = atc_by_drug_name().get(row[3]) or _atc_lower().get(str(row[3]).lower())
    return None if group is None else {"name": group, "drug": row[3]}


@functools.lru_cache(maxsize=1)
def _atc_lower() -> dict[str, str]:
    return {k.lower(): v for k, v in atc_by_drug_name().items()}


# The original's rules (data_preprocess/meta_sql_data_generation.py: t = the first time column - 1 minute, labels =
# the events at that time), per rendering. EHRSQL's MIMIC-III has no procedure dates but times; its procedures are
# known at the end of their day, as MIMIC-IV's dated ones. Its microbiology has no chartdate: its charttime is first.
RULES: dict[str, dict[str, LabelRule]] = {
    "mimic_iv": {
        "diagnoses_ccs": LabelRule(
            "SELECT a.subject_id, a.dischtime, a.hadm_id, d.icd_code, d.icd_version, d.seq_num FROM admissions a "
            "JOIN diagnoses_icd d USING (hadm_id) WHERE a.dischtime IS NOT NULL ORDER BY d.seq_num",
            _minus_minutes(2), _ccs("diagnoses", 3, 4, ("icd_code", "icd_version", "seq_num"))),
        "procedures_ccs": LabelRule(
            "SELECT subject_id, chartdate, hadm_id, icd_code, icd_version FROM procedures_icd ORDER BY seq_num",
            _day_end, _ccs("procedures", 3, 4, ("icd_code", "icd_version"))),
        "labevents": LabelRule(
            "SELECT l.subject_id, l.charttime, l.hadm_id, d.label, l.itemid FROM labevents l JOIN d_labitems d "
            "USING (itemid)", _minus_minutes(1), lambda r: {"name": r[3], "itemid": r[4]}),
        "prescriptions": LabelRule("SELECT subject_id, starttime, hadm_id, drug FROM prescriptions",
                                   _minus_minutes(1), _atc),
        "microbiologyevents": LabelRule(       # the first time column is chartdate: every test of the day
            "SELECT subject_id, chartdate, hadm_id, test_name FROM microbiologyevents WHERE chartdate IS NOT NULL",
            _minus_minutes(1), lambda r: {"name": r[3]}),
        "transfers": LabelRule(
            "SELECT subject_id, intime, hadm_id, careunit FROM transfers WHERE eventtype = 'transfer'",
            _minus_minutes(1), lambda r: {"name": r[3]}),
    },
    "ehrsql_mimic_iii": {
        "diagnoses_ccs": LabelRule(
            "SELECT a.SUBJECT_ID, a.DISCHTIME, a.HADM_ID, d.ICD9_CODE FROM ADMISSIONS a JOIN DIAGNOSES_ICD d "
            "USING (HADM_ID) WHERE a.DISCHTIME IS NOT NULL ORDER BY d.ROW_ID",
            _minus_minutes(2), _ccs("diagnoses", 3, None, ("icd9_code",))),
        "procedures_ccs": LabelRule(
            "SELECT SUBJECT_ID, date(CHARTTIME), HADM_ID, ICD9_CODE FROM PROCEDURES_ICD ORDER BY ROW_ID",
            _day_end, _ccs("procedures", 3, None, ("icd9_code",))),
        "labevents": LabelRule(
            "SELECT l.SUBJECT_ID, l.CHARTTIME, l.HADM_ID, d.LABEL, l.ITEMID FROM LABEVENTS l JOIN D_LABITEMS d "
            "USING (ITEMID)", _minus_minutes(1), lambda r: {"name": r[3], "itemid": r[4]}),
        "prescriptions": LabelRule("SELECT SUBJECT_ID, STARTDATE, HADM_ID, DRUG FROM PRESCRIPTIONS",
                                   _minus_minutes(1), _atc),
        "microbiologyevents": LabelRule(
            "SELECT SUBJECT_ID, CHARTTIME, HADM_ID, SPEC_TYPE_DESC FROM MICROBIOLOGYEVENTS WHERE CHARTTIME IS NOT NULL",
            _minus_minutes(1), lambda r: {"name": r[3]}),
        "transfers": LabelRule(
            "SELECT SUBJECT_ID, INTIME, HADM_ID, CAREUNIT FROM TRANSFERS WHERE EVENTTYPE = 'transfer' AND CAREUNIT "
            "IS NOT NULL", _minus_minutes(1), lambda r: {"name": r[3]}),
    },
}


def make_samples(source: str | Path, seed: int = 42, patients: set[int] | None = None,
                 rendering: str = "mimic_iv") -> dict[str, list[dict]]:
    """task -> samples from a built rendering (SQLite: mimic_iv, or ehrsql_mimic_iii); only `patients`' when given.
    One per patient and task, at a seeded random one of their labelled events."""
    conn = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    out: dict[str, list[dict]] = {}
    try:
        for task, rule in RULES[rendering].items():
            rows = [r for r in conn.execute(rule.sql) if rule.label(r)]     # unlabelled rows (a drug without an
                                                                            # ATC group) are not events to predict
            stream = task if rendering == "mimic_iv" else f"{rendering}/{task}"
            times = _one_per_patient(sorted({(r[0], r[1]) for r in rows}), random.Random(f"{seed}/{stream}"),
                                     patients)
            at: dict[tuple, list] = {}
            for r in rows:
                at.setdefault((r[0], r[1]), []).append(r)
            out[task] = [{"subject_id": s, "hadm_id": at[s, t][0][2], "prediction_time": rule.at(t), "task": task,
                          "label": [x for r in at[s, t] if (x := rule.label(r))]} for s, t in times]
    finally:
        conn.close()
    return {task: [s for s in samples if s["label"]] for task, samples in out.items()}


def write_candidates(source: str | Path, path: str | Path, mimic_iii: str | Path | None = None) -> Path:
    """The candidate database: one table per task with a `candidate` column (and the codes where there are). With
    the EHRSQL MIMIC-III rendering, its lab labels, specimen types and care units join the lists (names new to them
    case-insensitively), as the original aggregates both databases' items."""
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
        labs = src.execute("SELECT label, itemid, fluid, category FROM d_labitems ORDER BY itemid").fetchall()
        from ...world.vocab import vocabulary

        tests = sorted({spec["mimic_test"].upper() for spec in vocabulary().micro.values()})
        units = sorted({u for (u,) in src.execute("SELECT DISTINCT careunit FROM transfers "
                                                  "WHERE careunit IS NOT NULL")})
        if mimic_iii is not None:
            iii = sqlite3.connect(f"file:{Path(mimic_iii).resolve()}?mode=ro", uri=True)
            try:
                labs += [(n, i, None, None) for n, i in iii.execute("SELECT LABEL, ITEMID FROM D_LABITEMS ORDER BY "
                                                                    "ITEMID")]
                tests += [x for (x,) in iii.execute("SELECT DISTINCT SPEC_TYPE_DESC FROM MICROBIOLOGYEVENTS WHERE "
                                                    "SPEC_TYPE_DESC IS NOT NULL ORDER BY 1")]
                units += [x for (x,) in iii.execute("SELECT DISTINCT CAREUNIT FROM TRANSFERS WHERE CAREUNIT IS NOT "
                                                    "NULL ORDER BY 1")]
            finally:
                iii.close()
        out.executemany("INSERT INTO labevents_candidates VALUES (?, ?, ?, ?)", _first_of_each(labs))
        out.execute("CREATE TABLE microbiologyevents_candidates (candidate TEXT PRIMARY KEY)")
        out.executemany("INSERT INTO microbiologyevents_candidates VALUES (?)", _first_of_each((x,) for x in tests))
        out.execute("CREATE TABLE transfers_candidates (candidate TEXT PRIMARY KEY)")
        out.executemany("INSERT INTO transfers_candidates VALUES (?)", _first_of_each((u,) for u in units))
        out.commit()
    finally:
        out.close()
        src.close()
    tmp.replace(path)
    return path


def _first_of_each(rows) -> list[tuple]:
    """Rows whose first value (a name) is new, case-insensitively."""
    seen: set[str] = set()
    out = []
    for row in rows:
        if str(row[0]).lower() not in seen:
            seen.add(str(row[0]).lower())
            out.append(tuple(row))
    return out
