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
CCS comes from `data/ccs.yaml` (HCUP's grouper, written by scripts/derive_agentehr_vocab.py). A diagnosis code
without a CCS category is labelled UNKNOWN_TITLE, as the original labels it. Candidate tables (`write_candidates`,
one database per rendering) are built as the original's candidate_processing.py builds them.
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


UNKNOWN_TITLE = "UNKNOWN_TITLE"     # the original's name for a diagnosis code its CCS table does not map


def _ccs(kind: str, name_at: int, version_at: int | None, code_keys: tuple[str, ...], unknown: bool = False):
    """A row's CCS label; an unmapped code is UNKNOWN_TITLE where the original kept it so (diagnoses), else none
    (the original's procedures task assumed every code maps)."""
    def label(row: tuple) -> dict | None:
        version = 9 if version_at is None else row[version_at]
        name = ccs_name(kind, version, row[name_at]) or (UNKNOWN_TITLE if unknown else None)
        return None if name is None else {"name": name, **dict(zip(code_keys, row[name_at:]))}
    return label


def _atc(row: tuple) -> dict | None:
    group = atc_by_drug_name().get(row[3]) or _atc_lower().get(str(row[3]).lower())
    return None if group is None else {"name": group, "drug": row[3]}


@functools.lru_cache(maxsize=1)
def _atc_lower() -> dict[str, str]:
    return {k.lower(): v for k, v in atc_by_drug_name().items()}


# The original's rules (data_preprocess/meta_sql_data_generation.py: t = the first time column - 1 minute, labels =
# the events at that time), per rendering. EHRSQL's MIMIC-III has no procedure dates but times: t is the time less a
# minute, as for any timed event. Its microbiology has no chartdate: its charttime is first.
RULES: dict[str, dict[str, LabelRule]] = {
    "mimic_iv": {
        "diagnoses_ccs": LabelRule(
            "SELECT a.subject_id, a.dischtime, a.hadm_id, d.icd_code, d.icd_version, d.seq_num FROM admissions a "
            "JOIN diagnoses_icd d USING (hadm_id) WHERE a.dischtime IS NOT NULL ORDER BY d.seq_num",
            _minus_minutes(2), _ccs("diagnoses", 3, 4, ("icd_code", "icd_version", "seq_num"), unknown=True)),
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
            _minus_minutes(2), _ccs("diagnoses", 3, None, ("icd9_code",), unknown=True)),
        "procedures_ccs": LabelRule(           # its first time column is a time: that time - 1 min
            "SELECT SUBJECT_ID, CHARTTIME, HADM_ID, ICD9_CODE FROM PROCEDURES_ICD ORDER BY ROW_ID",
            _minus_minutes(1), _ccs("procedures", 3, None, ("icd9_code",))),
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


def label_counts(source: str | Path, rendering: str = "mimic_iv") -> dict[str, dict[str, int]]:
    """task -> label name -> how many events carry it in the whole rendering (every patient): the original's
    item_set/<task>.csv, which its Common / Rare sampling weighs samples by."""
    conn = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    try:
        out: dict[str, dict[str, int]] = {}
        for task, rule in RULES[rendering].items():
            counts: dict[str, int] = {}
            for row in conn.execute(rule.sql):
                if (label := rule.label(row)) is not None:
                    counts[label["name"]] = counts.get(label["name"], 0) + 1
            out[task] = counts
        return out
    finally:
        conn.close()


def draw_subsets(items: list[dict], counts: dict[str, int], size: int, seed: int = 42) -> list[dict]:
    """The original's label_wise_sample.py, run twice: a sample weighs the mean over its labels of 1 / the label's
    count in the corpus; Common draws `size` samples without replacement, with probability in proportion to that
    weight, from those weighing at most the mean weight, Rare from those weighing at least it (a sample at the mean
    may be in both). Each drawn item carries its `subset`."""
    import numpy as np

    weights = [float(np.mean([1 / counts[x["name"]] for x in it["label"] if counts.get(x["name"])]))
               if any(counts.get(x["name"]) for x in it["label"]) else 0.0 for it in items]
    mean = sum(weights) / len(weights) if weights else 0.0
    out = []
    for subset, keep in (("common", lambda w: w <= mean), ("rare", lambda w: w >= mean)):
        pool = [(i, w) for i, w in enumerate(weights) if w > 0 and keep(w)]
        if not pool:
            continue
        p = np.array([w for _, w in pool])
        rng = np.random.default_rng([seed, 0 if subset == "common" else 1])
        chosen = rng.choice(len(pool), size=min(size, len(pool)), replace=False, p=p / p.sum())
        out += [{**items[pool[j][0]], "subset": subset} for j in chosen]
    return out


# The candidate tables as the original's candidate_processing.py builds them from one database: its d_ccs_* and
# d_atc tables whole (one row per code, every column as text, the name renamed `candidate`), and the distinct names
# of microbiology tests and of care units moved to by a transfer (eventtype 'transfer'). Per rendering: the SQL of
# (lab dictionary, test names, care units, prescribed drugs).
CANDIDATE_SQL = {
    "mimic_iv": ("SELECT itemid, label, fluid, category FROM d_labitems ORDER BY itemid",
                 "SELECT DISTINCT test_name FROM microbiologyevents WHERE test_name IS NOT NULL ORDER BY rowid",
                 "SELECT DISTINCT careunit FROM transfers WHERE eventtype = 'transfer' AND careunit IS NOT NULL "
                 "ORDER BY rowid",
                 "SELECT DISTINCT drug FROM prescriptions WHERE drug IS NOT NULL ORDER BY drug"),
    "ehrsql_mimic_iii": ("SELECT ITEMID, LABEL, NULL, NULL FROM D_LABITEMS ORDER BY ITEMID",
                         "SELECT DISTINCT SPEC_TYPE_DESC FROM MICROBIOLOGYEVENTS WHERE SPEC_TYPE_DESC IS NOT NULL "
                         "ORDER BY ROW_ID",
                         "SELECT DISTINCT CAREUNIT FROM TRANSFERS WHERE EVENTTYPE = 'transfer' AND CAREUNIT IS NOT "
                         "NULL ORDER BY ROW_ID",
                         "SELECT DISTINCT DRUG FROM PRESCRIPTIONS WHERE DRUG IS NOT NULL ORDER BY DRUG"),
}


def _text_rows(rows) -> list[tuple]:
    """convert_d_to_db's cells: str of each value, '' for a missing one."""
    return [tuple("" if v is None else str(v) for v in r) for r in rows]


def write_candidates(source: str | Path, path: str | Path, rendering: str = "mimic_iv") -> Path:
    """The candidate database of one rendering, each task's table with a `candidate` column: CCS categories one row
    per ICD code (icd_code, icd_version, ccs_code, candidate), ATC groups one row per prescribed drug (drug,
    atc_code, candidate: the world's orders carry no NDC), the lab dictionary (itemid, candidate, fluid, category),
    and the distinct test names and transfer care units. The world's codes stand for HCUP's and the ATC index's."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    out = sqlite3.connect(tmp)
    labs_sql, tests_sql, units_sql, drugs_sql = CANDIDATE_SQL[rendering]

    def table(name: str, columns: tuple[str, ...], rows, key: bool = False) -> None:
        spec = ", ".join(f"{c} TEXT" + (" PRIMARY KEY" if key else "") for c in columns)
        out.execute(f"CREATE TABLE {name} ({spec})")
        out.executemany(f"INSERT OR IGNORE INTO {name} VALUES ({', '.join('?' * len(columns))})", _text_rows(rows))
    try:
        ccs_table = ccs()
        versions = (9,) if rendering == "ehrsql_mimic_iii" else (9, 10)
        for kind, names, task in (("diagnoses", "diagnosis_categories", "diagnoses_ccs"),
                                  ("procedures", "procedure_categories", "procedures_ccs")):
            table(CANDIDATE_TABLES[task], ("icd_code", "icd_version", "ccs_code", "candidate"),
                  [(code, v, number, ccs_table[names][number]) for v in versions
                   for code, number in sorted(ccs_table[kind].get(v, {}).items())])
        groups = atc()["groups"]
        drugs = [(d, _atc_code(d)) for (d,) in src.execute(drugs_sql)]
        table(CANDIDATE_TABLES["prescriptions"], ("drug", "atc_code", "candidate"),
              [(d, code, groups[code]) for d, code in drugs if code])
        table(CANDIDATE_TABLES["labevents"], ("itemid", "candidate", "fluid", "category"), src.execute(labs_sql))
        table(CANDIDATE_TABLES["microbiologyevents"], ("candidate",), src.execute(tests_sql), key=True)
        table(CANDIDATE_TABLES["transfers"], ("candidate",), src.execute(units_sql), key=True)
        out.commit()
    finally:
        out.close()
        src.close()
    tmp.replace(path)
    return path


def _atc_code(drug: str) -> str | None:
    """The ATC group code of a drug as the rendering spells it."""
    by_name = {name.lower(): code for code, name in atc()["groups"].items()}
    group = atc_by_drug_name().get(drug) or _atc_lower().get(str(drug).lower())
    return None if group is None else by_name.get(group.lower())
