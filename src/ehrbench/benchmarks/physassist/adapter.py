"""PhysAssistBench's FHIR layer, read side: a patient's record as FHIR R4-shaped resources (the public code's
tools/fhir/adapter.py, ported from its per-patient MIMIC-IV CSVs onto the per-patient SQLite files of the world's
MIMIC-IV rendering, `benchmarks/agentehr/patient_db.py`).

The shapes, filters and orders are the original's, its quirks included, because the tools and the gold answers are
written against them: a lab `code` is a substring of the lab's label and, when no label matches, no filter at all;
`_count` always cuts the newest-first list; dates compare as strings (a bare `date_to` day excludes that day's
timed events); ICU vitals fall back to the clinic's omr results only when the patient has no chartevents; fields
outside FHIR keep the original's underscore names (`_seq_num`, `_stay_id`, `_mimic`, `_anchor_age`).
The tools over these (search arguments, `date_to`, writes) are `fhir.py`; what the model sees of a result,
`compact.py`.
"""
from __future__ import annotations

import functools
import re
import sqlite3
import threading
from pathlib import Path

CATEGORY = "http://terminology.hl7.org/CodeSystem/observation-category"
ABNORMAL = {"system": "http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation", "code": "A",
            "display": "Abnormal"}


class PatientRecord:
    """One patient's tables (their per-patient file) and the dictionaries (the reference file), read-only."""

    def __init__(self, patient_file: str | Path, reference_file: str | Path):
        self.subject_id = int(Path(patient_file).stem.split("_")[1])
        self._conn = sqlite3.connect(f"file:{Path(patient_file).resolve()}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()           # a shard answers on many threads: one query at a time per patient
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("ATTACH DATABASE ? AS ref", (f"file:{Path(reference_file).resolve()}?mode=ro",))
        self.reference_file = str(Path(reference_file).resolve())

    def rows(self, sql: str, params: tuple = ()) -> list[dict]:
        with self._lock:
            return [dict(r) for r in self._conn.execute(sql, params)]

    def table(self, name: str, hadm_id: int | None = None) -> list[dict]:
        """A table's rows in file order (`i`: the row's place, the original's DataFrame index), one admission's
        when `hadm_id` is given."""
        return self.rows(f'SELECT rowid - 1 AS i, * FROM "{name}"' + (" WHERE hadm_id = ?" if hadm_id else ""),
                         (hadm_id,) if hadm_id else ())

    def close(self) -> None:
        with self._lock:
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
    rows = record.table("admissions", hadm_id)
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


@functools.lru_cache(maxsize=4)
def icd_titles(reference_file: str) -> dict[tuple[str, str], str]:
    """The diagnosis dictionary, read once per process (the reference file has no index to join on)."""
    conn = sqlite3.connect(f"file:{reference_file}?mode=ro", uri=True)
    try:
        return {(c, str(v)): t for c, v, t in conn.execute("SELECT icd_code, icd_version, long_title "
                                                           "FROM d_icd_diagnoses")}
    finally:
        conn.close()


def conditions(record: PatientRecord, hadm_id: int | None = None, code: str | None = None) -> list[dict]:
    """Encounter diagnoses by admission and seq_num (the principal first); `code` is an ICD code prefix."""
    rows = record.rows("SELECT hadm_id, seq_num, icd_code, icd_version FROM diagnoses_icd"
                       + (" WHERE hadm_id = ?" if hadm_id else "") + " ORDER BY hadm_id, seq_num",
                       (hadm_id,) if hadm_id else ())
    titles = icd_titles(record.reference_file)
    out = []
    for row in rows:
        icd = str(row["icd_code"] or "").strip()
        if code and not icd.startswith(code.upper()):
            continue
        text = titles.get((row["icd_code"], str(row["icd_version"]))) or icd
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
    rows = record.table("labevents", hadm_id)
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


def _contains(pattern: str, text) -> bool:
    """pandas' `str.contains(pattern, case=False)`, as the original filters names: a regular expression (a literal
    substring when the pattern is not one)."""
    try:
        return re.search(pattern, str(text or ""), re.IGNORECASE) is not None
    except re.error:
        return pattern.lower() in str(text or "").lower()


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def medication_requests(record: PatientRecord, hadm_id: int | None = None, medication: str | None = None,
                        status: str | None = None) -> list[dict]:
    """Prescriptions, newest start first; status from the times (a stop: completed; a start only: active)."""
    rows = record.table("prescriptions", hadm_id)
    if medication:
        rows = [r for r in rows if _contains(medication, r["drug"])]
    rows.sort(key=lambda r: str(r["starttime"] or ""), reverse=True)
    out = []
    for row in rows:
        start, stop = row["starttime"], row["stoptime"]
        state = "completed" if start and stop else "active" if start else "unknown"
        if status and state != status:
            continue
        drug = row["drug"] or "unknown"
        resource: dict = {"resourceType": "MedicationRequest", "id": f"rx-{record.subject_id}-{row['i']}",
                          "status": state, "intent": "order",
                          "medicationCodeableConcept": {"coding": [{"system": "mimic-iv/drug", "display": drug}],
                                                        "text": drug},
                          "subject": {"reference": f"Patient/{record.subject_id}"}}
        if row["hadm_id"] is not None:
            resource["encounter"] = {"reference": f"Encounter/encounter-{row['hadm_id']}"}
        dosage: dict = {}
        text = []
        if _present(row["dose_val_rx"]) and _present(row["dose_unit_rx"]):
            text.append(f"{row['dose_val_rx']}{row['dose_unit_rx']}")
            dosage["doseAndRate"] = [{"doseQuantity": {"value": _number(row["dose_val_rx"]),
                                                       "unit": row["dose_unit_rx"]}}]
        if _present(row["route"]):
            text.append(row["route"])
            dosage["route"] = {"text": row["route"]}
        if start:
            dosage["timing"] = {"repeat": {"boundsPeriod": {"start": str(start), **({"end": str(stop)} if stop
                                                                                      else {})}}}
        elif stop:
            dosage["timing"] = {"repeat": {}}
        if text:
            dosage["text"] = " ".join(text)
        if dosage:
            resource["dosageInstruction"] = [dosage]
        if _present(row["drug_type"]):
            resource["_drug_type"] = row["drug_type"]
        out.append(resource)
    return out


def medication_administrations(record: PatientRecord, hadm_id: int | None = None, medication: str | None = None,
                               _count: int = 100) -> list[dict]:
    """eMAR events, newest first; cut to `_count` only when neither a drug nor an admission narrows them."""
    rows = record.table("emar", hadm_id)
    if medication:
        rows = [r for r in rows if _contains(medication, r["medication"])]
    rows.sort(key=lambda r: str(r["charttime"] or ""), reverse=True)
    if not medication and not hadm_id:
        rows = rows[:_count]
    out = []
    for row in rows:
        resource: dict = {"resourceType": "MedicationAdministration", "id": f"emar-{record.subject_id}-{row['i']}",
                          "status": "completed", "medicationCodeableConcept": {"text": row["medication"] or "unknown"},
                          "subject": {"reference": f"Patient/{record.subject_id}"}}
        if row["hadm_id"] is not None:
            resource["context"] = {"reference": f"Encounter/encounter-{row['hadm_id']}"}
        if _present(row["charttime"]):
            resource["effectiveDateTime"] = str(row["charttime"])
        if _present(row["event_txt"]):
            resource["_event_txt"] = row["event_txt"]
        out.append(resource)
    return out


def procedures(record: PatientRecord, hadm_id: int | None = None) -> list[dict]:
    """ICD procedures in file order (the original keeps the code as its text)."""
    rows = record.table("procedures_icd", hadm_id)
    out = []
    for row in rows:
        icd = str(row["icd_code"] or "").strip()
        system = "http://hl7.org/fhir/sid/icd-10-pcs" if str(row["icd_version"]) == "10" else \
            "http://hl7.org/fhir/sid/icd-9-cm/procedure"
        resource: dict = {"resourceType": "Procedure", "id": f"proc-{record.subject_id}-{row['i']}",
                          "status": "completed", "code": {"coding": [{"system": system, "code": icd}], "text": icd},
                          "subject": {"reference": f"Patient/{record.subject_id}"}}
        if row["hadm_id"] is not None:
            resource["encounter"] = {"reference": f"Encounter/encounter-{row['hadm_id']}"}
        if row["seq_num"] is not None:
            resource["_seq_num"] = int(row["seq_num"])
        out.append(resource)
    return out


# report_type synonyms, so that "X-RAY" finds "CHEST (PORTABLE AP)" (the original's _REPORT_ALIASES)
REPORT_ALIASES = {"X-RAY": ["CHEST", "PORTABLE", "AP", "PA", "RADIOGRAPH"], "CXR": ["CHEST", "PORTABLE", "AP", "PA"],
                  "CHEST": ["CHEST"], "CT": ["CT"], "MRI": ["MRI", "MR "],
                  "XRAY": ["CHEST", "PORTABLE", "AP", "RADIOGRAPH"], "ULTRASOUND": ["US ", "ULTRASOUND", "SONO"],
                  "ECHO": ["ECHO"], "CULTURE": []}
MICRO_WORDS = ("micro", "culture", "blood", "urine", "sputum", "csf", "wound")


def diagnostic_reports(record: PatientRecord, hadm_id: int | None = None, report_type: str | None = None,
                       _count: int = 5) -> list[dict]:
    """Radiology reports (the newest `_count`, text cut to 3,000 characters), then microbiology results, one per
    specimen and time, while fewer than 2 x `_count` reports are listed; microbiology only when no report_type is
    given or it names a specimen or culture."""
    out: list[dict] = []
    notes = record.table("radiology", hadm_id)
    if report_type:
        kw = report_type.upper().strip()
        terms = [kw] + REPORT_ALIASES.get(kw, [])
        notes = [n for n in notes if any(t in str(n["note_type"] or "").upper() or t in str(n["text"] or "")[:200]
                                         .upper() for t in terms)]
    notes.sort(key=lambda n: str(n["charttime"] or ""), reverse=True)
    for note in notes[:_count]:
        text = str(note["text"] or "")[:3000]
        note_type = note["note_type"] or "Radiology"
        first = next((ln.strip() for ln in text.split("\n") if ln.strip() and not ln.strip().startswith("INDICATION")),
                     note_type)
        resource: dict = {"resourceType": "DiagnosticReport", "id": f"dr-{note['note_id'] or record.subject_id}",
                          "status": "final",
                          "category": [{"coding": [{"system": "http://loinc.org", "code": "LP29684-5",
                                                    "display": "Radiology"}]}],
                          "code": {"text": (first[:120] if first else note_type)},
                          "subject": {"reference": f"Patient/{record.subject_id}"},
                          "presentedForm": [{"contentType": "text/plain", "data": text}]}
        if note["hadm_id"] is not None:
            resource["encounter"] = {"reference": f"Encounter/encounter-{note['hadm_id']}"}
        if _present(note["charttime"]):
            resource["effectiveDateTime"] = str(note["charttime"])
        out.append(resource)
    if report_type is not None and not any(w in report_type.lower() for w in MICRO_WORDS):
        return out
    micro = record.table("microbiologyevents", hadm_id)
    if report_type:
        kw = report_type.upper()
        micro = [m for m in micro if kw in str(m["spec_type_desc"] or "").upper() or
                 kw in str(m["org_name"] or "").upper()]
    micro.sort(key=lambda m: str(m["charttime"] or ""), reverse=True)
    seen: set = set()
    for m in micro:
        specimen = m["spec_type_desc"] or "Specimen"
        key = (specimen, m["charttime"])
        if key in seen:
            continue
        seen.add(key)
        if len(out) >= _count * 2:
            break
        detail = f"Specimen: {specimen} | Organism: {m['org_name'] or 'No growth / pending'}"
        if _present(m["ab_name"]):
            detail += f" | Antibiotic: {m['ab_name']} ({m['interpretation'] or '?'})"
        resource = {"resourceType": "DiagnosticReport", "id": f"micro-{record.subject_id}-{m['charttime'] or len(out)}",
                    "status": "final",
                    "category": [{"coding": [{"system": "http://loinc.org", "code": "LP7820-4",
                                              "display": "Microbiology"}]}],
                    "code": {"text": specimen}, "subject": {"reference": f"Patient/{record.subject_id}"},
                    "presentedForm": [{"contentType": "text/plain", "data": detail}]}
        if hadm_id:                                          # the original links only when the search named one
            resource["encounter"] = {"reference": f"Encounter/encounter-{hadm_id}"}
        if _present(m["charttime"]):
            resource["effectiveDateTime"] = str(m["charttime"])
        out.append(resource)
    return out


def document_references(record: PatientRecord, hadm_id: int | None = None, type_code: str | None = None,
                        keyword: str | None = None, _count: int = 5) -> list[dict]:
    """Discharge summaries, then radiology reports: each the newest `_count`, text cut to 4,000 characters."""
    out = []
    for table, code, display in (("discharge", "discharge-summary", "Discharge Summary"),
                                 ("radiology", "radiology", "Radiology Report")):
        if type_code and code not in type_code.lower() and type_code.lower() not in code:
            continue
        notes = record.table(table, hadm_id)
        if keyword:
            notes = [n for n in notes if _contains(keyword, n["text"])]
        notes.sort(key=lambda n: str(n["charttime"] or ""), reverse=True)
        for note in notes[:_count]:
            resource: dict = {"resourceType": "DocumentReference", "status": "current",
                              "id": f"docref-{note['note_id'] or record.subject_id}",
                              "type": {"coding": [{"system": "http://loinc.org", "code": code, "display": display}],
                                       "text": display},
                              "subject": {"reference": f"Patient/{record.subject_id}"},
                              "content": [{"attachment": {"contentType": "text/plain",
                                                          "data": str(note["text"] or "")[:4000]}}]}
            if note["hadm_id"] is not None:
                resource["context"] = {"encounter": [{"reference": f"Encounter/encounter-{note['hadm_id']}"}]}
            if _present(note["charttime"]):
                resource["date"] = str(note["charttime"])
            out.append(resource)
    return out


# sections of a discharge note read as care plans: (category, display, the section's body)
CARE_PLAN_SECTIONS = (
    ("discharge-planning", "Discharge Instructions",
     re.compile(r"(?i)discharge\s+instructions?\s*[:\-]?\s*(.*?)(?=\n[A-Z][A-Z]|\Z)", re.DOTALL)),
    ("discharge-planning", "Discharge Condition",
     re.compile(r"(?i)discharge\s+condition\s*[:\-]?\s*(.*?)(?=\n[A-Z][A-Z]|\Z)", re.DOTALL)),
    ("followup", "Followup Instructions",
     re.compile(r"(?i)follow[\-\s]?up\s+instructions?\s*[:\-]?\s*(.*?)(?=\n[A-Z][A-Z]|\Z)", re.DOTALL)),
    ("treatment", "Treatment Plan", re.compile(r"(?i)\bplan\s*[:\-]\s*(.*?)(?=\n[A-Z][A-Z]|\Z)", re.DOTALL)),
)


def care_plans(record: PatientRecord, hadm_id: int | None = None, category: str | None = None) -> list[dict]:
    """Sections of the first three discharge notes (in file order), each body cut to 1,000 characters."""
    notes = record.table("discharge", hadm_id)
    out = []
    for note in notes[:3]:
        for code, display, pattern in CARE_PLAN_SECTIONS:
            if category and code != category:
                continue
            found = pattern.search(str(note["text"] or ""))
            body = found.group(1).strip()[:1000] if found else ""
            if not body:
                continue
            resource: dict = {"resourceType": "CarePlan", "status": "completed", "intent": "plan",
                              "id": f"careplan-{note['note_id'] or record.subject_id}-{code}",
                              "category": [{"coding": [{"system": "http://hl7.org/fhir/us/core/CodeSystem/"
                                                                  "careplan-category", "code": code,
                                                        "display": display}], "text": display}],
                              "subject": {"reference": f"Patient/{record.subject_id}"}, "note": [{"text": body}]}
            if note["hadm_id"] is not None:
                resource["encounter"] = {"reference": f"Encounter/encounter-{note['hadm_id']}"}
            if _present(note["charttime"]):
                resource["period"] = {"end": str(note["charttime"])}
            out.append(resource)
    return out


def allergies(record: PatientRecord, hadm_id: int | None = None) -> list[dict]:
    """The first discharge note's Allergies section: "no known allergy" (SNOMED 716186003), or its text."""
    notes = record.table("discharge", hadm_id)
    if not notes:
        return []
    found = re.search(r"(?i)allerg(?:ies|y)[:\s]*(.*?)(?=\n[A-Z]|\Z)", str(notes[0]["text"] or ""), re.DOTALL)
    if not found:
        return []
    text = found.group(1).strip()[:500]
    patient_ref = {"reference": f"Patient/{record.subject_id}"}
    if not text or text.lower() in ("nka", "nkda", "none", "no known allergies"):
        return [{"resourceType": "AllergyIntolerance", "id": f"allergy-{record.subject_id}-nka",
                 "clinicalStatus": {"coding": [{"code": "active"}]},
                 "verificationStatus": {"coding": [{"code": "confirmed"}]},
                 "code": {"coding": [{"system": "http://snomed.info/sct", "code": "716186003",
                                      "display": "No known allergy"}]}, "patient": patient_ref}]
    return [{"resourceType": "AllergyIntolerance", "id": f"allergy-{record.subject_id}-1",
             "clinicalStatus": {"coding": [{"code": "active"}]}, "code": {"text": text}, "patient": patient_ref,
             "note": [{"text": text}]}]
