"""PhysAssistBench's FHIR layer, read side: a patient's record as FHIR R4-shaped resources (the public code's
tools/fhir/adapter.py, ported from its per-patient MIMIC-IV CSVs onto the per-patient SQLite files of the world's
MIMIC-IV rendering, `benchmarks/agentehr/patient_db.py`).

The shapes, filters and orders are the original's, its quirks included, because the tools and the gold answers are
written against them: a lab `code` is a substring of the lab's label and, when no label matches, no filter at all;
`_count` always cuts the newest-first list; dates compare as strings (a bare `date_to` day excludes that day's
timed events); ICU vitals fall back to the clinic's omr results only when the patient has no chartevents; fields
outside FHIR keep the original's underscore names (`_seq_num`, `_stay_id`, `_mimic`, `_anchor_age`).
Not yet ported: medications, reports, documents, care plans (issue 15).
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

CATEGORY = "http://terminology.hl7.org/CodeSystem/observation-category"
ABNORMAL = {"system": "http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation", "code": "A",
            "display": "Abnormal"}


class PatientRecord:
    """One patient's tables (their per-patient file) and the dictionaries (the reference file), read-only."""

    def __init__(self, patient_file: str | Path, reference_file: str | Path):
        self.subject_id = int(Path(patient_file).stem.split("_")[1])
        self._conn = sqlite3.connect(f"file:{Path(patient_file).resolve()}?mode=ro", uri=True)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("ATTACH DATABASE ? AS ref", (f"file:{Path(reference_file).resolve()}?mode=ro",))

    def rows(self, sql: str, params: tuple = ()) -> list[dict]:
        return [dict(r) for r in self._conn.execute(sql, params)]

    def close(self) -> None:
        self._conn.close()


def bundle(resources: list[dict], resource_type: str) -> dict:
    """A searchset Bundle, as the original wraps every search."""
    return {"resourceType": "Bundle", "type": "searchset", "total": len(resources),
            "entry": [{"resource": r} for r in resources], "_fhir_resource_type": resource_type}


def _present(value) -> bool:
    return value is not None and value != ""


def patient(record: PatientRecord) -> dict | None:
    rows = record.rows("SELECT gender, anchor_age, dod FROM patients")
    if not rows:
        return None
    row, subject = rows[0], record.subject_id
    out: dict = {"resourceType": "Patient", "id": str(subject),
                 "identifier": [{"system": "mimic-iv", "value": str(subject)}],
                 "gender": {"M": "male", "F": "female"}.get(str(row["gender"] or "").upper(), "unknown")}
    if row["anchor_age"] is not None:
        out["_anchor_age"] = int(row["anchor_age"])
    if _present(row["dod"]):
        out["deceasedDateTime"] = str(row["dod"])
    return out


def encounters(record: PatientRecord, hadm_id: int | None = None) -> list[dict]:
    rows = record.rows("SELECT * FROM admissions" + (" WHERE hadm_id = ?" if hadm_id else ""),
                       (hadm_id,) if hadm_id else ())
    out = []
    for row in rows:
        hadm = str(row["hadm_id"])
        enc: dict = {"resourceType": "Encounter", "id": f"encounter-{hadm}", "status": "finished",
                     "class": {"code": "IMP", "display": "inpatient encounter"},
                     "subject": {"reference": f"Patient/{record.subject_id}"}}
        period = {k: str(row[c]) for k, c in (("start", "admittime"), ("end", "dischtime")) if _present(row[c])}
        if period:
            enc["period"] = period
        enc["identifier"] = [{"system": "mimic-iv/hadm", "value": hadm}]
        for field in ("admission_type", "admission_location", "discharge_location", "insurance", "language",
                      "marital_status", "race"):
            if _present(row.get(field)):
                enc.setdefault("_mimic", {})[field] = str(row[field])
        if row.get("hospital_expire_flag") is not None:
            enc.setdefault("_mimic", {})["hospital_expire_flag"] = int(row["hospital_expire_flag"])
        out.append(enc)
    return out


def conditions(record: PatientRecord, hadm_id: int | None = None, code: str | None = None) -> list[dict]:
    """Encounter diagnoses by admission and seq_num (the principal first); `code` is an ICD code prefix."""
    rows = record.rows("SELECT t.hadm_id, t.seq_num, t.icd_code, t.icd_version, d.long_title FROM diagnoses_icd t "
                       "LEFT JOIN ref.d_icd_diagnoses d USING (icd_code, icd_version)"
                       + (" WHERE t.hadm_id = ?" if hadm_id else "") + " ORDER BY t.hadm_id, t.seq_num",
                       (hadm_id,) if hadm_id else ())
    out = []
    for row in rows:
        icd = str(row["icd_code"] or "").strip()
        if code and not icd.startswith(code.upper()):
            continue
        text = row["long_title"] or icd
        system = "http://hl7.org/fhir/sid/icd-10-cm" if str(row["icd_version"]) == "10" else \
            "http://hl7.org/fhir/sid/icd-9-cm"
        out.append({
            "resourceType": "Condition", "id": f"condition-{record.subject_id}-{icd}-{row['hadm_id']}",
            "clinicalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical",
                                           "code": "active"}]},
            "category": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-category",
                                      "code": "encounter-diagnosis", "display": "Encounter Diagnosis"}]}],
            "code": {"coding": [{"system": system, "code": icd, "display": text}], "text": text},
            "subject": {"reference": f"Patient/{record.subject_id}"},
            "encounter": {"reference": f"Encounter/encounter-{row['hadm_id']}"},
            **({"_seq_num": int(row["seq_num"])} if row["seq_num"] is not None else {})})
    return out


def _category(code: str, display: str) -> list[dict]:
    return [{"coding": [{"system": CATEGORY, "code": code, "display": display}]}]


def lab_observations(record: PatientRecord, hadm_id: int | None = None, item_name: str | None = None,
                     _count: int = 20, date_from: str | None = None, date_to: str | None = None) -> list[dict]:
    """Lab results, newest first, at most `_count`: `item_name` a label substring (ignored when nothing matches)."""
    labels = {r["itemid"]: r["label"] for r in record.rows("SELECT itemid, label FROM ref.d_labitems")}
    rows = record.rows("SELECT * FROM labevents" + (" WHERE hadm_id = ?" if hadm_id else ""),
                       (hadm_id,) if hadm_id else ())
    if item_name:
        matched = {i for i, label in labels.items() if isinstance(label, str) and item_name.lower() in label.lower()}
        if matched:
            rows = [r for r in rows if r["itemid"] in matched]
    if date_from:
        rows = [r for r in rows if r["charttime"] is not None and str(r["charttime"]) >= date_from]
    if date_to:
        rows = [r for r in rows if r["charttime"] is not None and str(r["charttime"]) <= date_to]
    rows.sort(key=lambda r: str(r["charttime"] or ""), reverse=True)
    out = []
    for row in rows[:_count]:
        label = labels.get(row["itemid"], f"itemid:{row['itemid']}")
        obs: dict = {"resourceType": "Observation", "id": f"lab-{row['labevent_id']}", "status": "final",
                     "category": _category("laboratory", "Laboratory"),
                     "code": {"coding": [{"system": "mimic-iv/itemid", "code": str(row["itemid"]), "display": label}],
                              "text": label},
                     "subject": {"reference": f"Patient/{record.subject_id}"}}
        if row["hadm_id"] is not None:
            obs["encounter"] = {"reference": f"Encounter/encounter-{row['hadm_id']}"}
        if _present(row["charttime"]):
            obs["effectiveDateTime"] = str(row["charttime"])
        unit = row["valueuom"] or ""
        if row["valuenum"] is not None:
            obs["valueQuantity"] = {"value": float(row["valuenum"]), "unit": unit}
        elif _present(row["value"]):
            obs["valueString"] = str(row["value"])
        if str(row["flag"] or "").upper() in ("ABNORMAL", "DELTA"):
            obs["interpretation"] = [{"coding": [ABNORMAL]}]
        bounds = {k: {"value": float(row[c]), "unit": unit}
                  for k, c in (("low", "ref_range_lower"), ("high", "ref_range_upper")) if row[c] is not None}
        if bounds:
            obs["referenceRange"] = [bounds]
        out.append(obs)
    return out


def vital_observations(record: PatientRecord, stay_id: int | None = None, vital_name: str | None = None,
                       _count: int = 50) -> list[dict]:
    """ICU vitals (chartevents, a d_items label substring), newest first; the clinic's omr results when none are
    found (as the original: no vitals in the ICU, or none in that stay)."""
    items = {r["itemid"]: (r["label"] or "", r["unitname"] or "")
             for r in record.rows("SELECT itemid, label, unitname FROM ref.d_items")}
    rows = record.rows("SELECT * FROM chartevents" + (" WHERE stay_id = ?" if stay_id is not None else ""),
                       (stay_id,) if stay_id is not None else ())
    if vital_name:
        matched = {i for i, (label, _) in items.items() if vital_name.lower() in label.lower()}
        if matched:
            rows = [r for r in rows if r["itemid"] in matched]
    rows.sort(key=lambda r: str(r["charttime"] or ""), reverse=True)
    out = []
    for row in rows[:_count]:
        label, unit = items.get(row["itemid"], (f"itemid:{row['itemid']}", ""))
        obs: dict = {"resourceType": "Observation",
                     "id": f"vital-{record.subject_id}-{row['itemid']}-{row['charttime'] or ''}", "status": "final",
                     "category": _category("vital-signs", "Vital Signs"),
                     "code": {"coding": [{"system": "mimic-iv/icu-itemid", "code": str(row["itemid"]),
                                          "display": label}], "text": label},
                     "subject": {"reference": f"Patient/{record.subject_id}"}}
        if row["stay_id"] is not None:
            obs["_stay_id"] = str(row["stay_id"])
        if _present(row["charttime"]):
            obs["effectiveDateTime"] = str(row["charttime"])
        if row["valuenum"] is not None:
            obs["valueQuantity"] = {"value": float(row["valuenum"]), "unit": unit}
        elif _present(row["value"]):
            obs["valueString"] = str(row["value"])
        out.append(obs)
    if out:
        return out
    omr = record.rows("SELECT rowid - 1 AS i, * FROM omr")          # i: the row's place in the file, as the
    # original's DataFrame index
    if vital_name:
        omr = [r for r in omr if vital_name.lower() in str(r["result_name"] or "").lower()]
    omr.sort(key=lambda r: str(r["chartdate"] or ""), reverse=True)
    for row in omr[:_count]:
        name = row["result_name"] or "unknown"
        obs = {"resourceType": "Observation", "id": f"omr-{record.subject_id}-{row['i']}", "status": "final",
               "category": _category("vital-signs", "Vital Signs"),
               "code": {"coding": [{"system": "mimic-iv/omr", "display": name}], "text": name},
               "subject": {"reference": f"Patient/{record.subject_id}"}}
        if _present(row["chartdate"]):
            obs["effectiveDateTime"] = str(row["chartdate"])
        if _present(row["result_value"]):
            obs["valueString"] = str(row["result_value"])
        out.append(obs)
    return out
