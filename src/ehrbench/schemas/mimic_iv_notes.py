"""The notes of MIMIC-IV's rendering (MIMIC-IV-Note's `discharge` and `radiology`), written from the record.

A discharge summary in MIMIC-IV-Note's layout (de-identified fields as `___`): dates, sex, service, allergies, chief
complaint, history, a hospital course whose numbers are the admission's own lab values, the medications still
running at discharge, the disposition and the coded diagnoses. A radiology report per chest radiograph or head CT,
its impression following the admission's coded conditions. Nothing a note says is absent from the tables: tests
read the numbers, drugs and dates back. Phrasings live in world/data/notes.yaml.
"""
from __future__ import annotations

import functools
import re

from ..world.model import Admission, Patient
from ..world.vocab import load_data, vocabulary
from . import ehrsql_mimic_iii

RADIOLOGY = {"chest x-ray": ("CHEST (PORTABLE AP)", "chest"), "head ct": ("CT HEAD W/O CONTRAST", "head")}
NADIR = {"hemoglobin"}                 # labs a course reports at their lowest; the rest at their peak


@functools.lru_cache(maxsize=None)
def phrases() -> dict:
    return load_data("notes.yaml")


def _curated(a: Admission) -> list[str]:
    v = vocabulary()
    return [d.key for d in a.diagnoses if d.key in v.conditions]


def lab_summary(a: Admission, lab: str) -> float | None:
    """The value a course quotes for a lab: its peak (its nadir for hemoglobin) over the admission."""
    values = [e.value for e in a.labs if e.lab == lab]
    return (min(values) if lab in NADIR else max(values)) if values else None


def chief_complaint(a: Admission) -> str:
    p = phrases()
    acute = [k for k in _curated(a) if vocabulary().conditions[k].acute]
    return next((p["chief_complaint"][k] for k in acute if k in p["chief_complaint"]), p["default_complaint"])


def discharge_medications(a: Admission) -> list:
    """The orders still running at discharge."""
    return [m for m in a.medications if a.discharge is not None and m.end >= a.discharge]


def course_lines(a: Admission) -> list[str]:
    """One line per coded curated condition that has a course phrase and every lab value it quotes."""
    lines = []
    for key in dict.fromkeys(_curated(a)):
        template = phrases()["course"].get(key)
        if template is None:
            continue
        labs = re.findall(r"{(\w+)}", template)
        values = {lab: lab_summary(a, lab) for lab in labs}
        if all(val is not None for val in values.values()):
            lines.append(f"# {key.capitalize()}: " + template.format(**{k: f"{val:g}" for k, val in values.items()}))
    return lines


def admission_vitals(a: Admission) -> str:
    """The exam's vitals line: the first value of each vital charted in the admission's first ICU stay."""
    first: dict[str, float] = {}
    for e in sorted((e for s in a.icu_stays[:1] for e in s.vitals), key=lambda e: e.time):
        first.setdefault(e.vital, e.value)
    return "VS: " + (", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in first.items()) or "stable")


def discharge_text(p: Patient, a: Admission, age: int, service: str, sex: str, admit: str, disch: str) -> str:
    v = vocabulary()
    chronic = [v.conditions[k].lay[0] for k in dict.fromkeys(p.conditions)]
    woman = "woman" if p.gender == "f" else "man"
    history = f"with a history of {', '.join(chronic)} " if chronic else "with no significant past medical history "
    allergies = "\n".join(drug.capitalize() for drug, _ in a.allergies) or "No Known Allergies / Adverse Drug Reactions"
    meds = [f"{n}. {ehrsql_mimic_iii.drug_name(m.drug)} {m.dose:g} {ehrsql_mimic_iii.drug_unit(v.all_drugs[m.drug])} "
            f"{ehrsql_mimic_iii.route(v.all_drugs[m.drug])}"
            for n, m in enumerate(discharge_medications(a), start=1)]
    diagnoses = [v.diagnosis_description(v.all_conditions[d.key].icd9, 9) for d in a.diagnoses]
    return "\n".join([
        " ", "Name:  ___                     Unit No:   ___", " ",
        f"Admission Date:  {admit}              Discharge Date:   {disch}", " ",
        f"Date of Birth:  ___             Sex:   {sex}", " ", f"Service: {service}", " ",
        "Allergies: ", allergies, " ", "Chief Complaint:", chief_complaint(a), " ",
        "History of Present Illness:", f"___ is a {age} year old {woman} {history}who presented with "
        f"{chief_complaint(a)}.", " ",
        "Past Medical History:", *([c.capitalize() for c in chronic] or ["None."]), " ",
        "Social History:", "___", " ", "Family History:", "Noncontributory.", " ",
        "Physical Exam:", "ADMISSION PHYSICAL EXAM:", admission_vitals(a), "GENERAL: Alert, in no acute distress.", " ",
        "Brief Hospital Course:", *(course_lines(a) or ["Uncomplicated course."]), " ",
        "Discharge Medications:", *(meds or ["None."]), " ",
        "Discharge Disposition:", phrases()["disposition"].get(a.discharge_destination or "", "Home"), " ",
        "Discharge Diagnosis:", *(d.capitalize() for d in diagnoses), " ",
        "Followup Instructions:", "___", ""])


def radiology_text(p: Patient, a: Admission, procedure: str, age: int) -> str:
    exam, region = RADIOLOGY[procedure]
    found = [phrases()[region][k] for k in dict.fromkeys(_curated(a)) if k in phrases()[region]]
    impression = " ".join(found) or phrases()[f"{region}_normal"]
    sex = "woman" if p.gender == "f" else "man"
    return "\n".join([f"EXAMINATION:  {exam}", "",
                      f"INDICATION:  ___ year old {sex} ({age}) with {chief_complaint(a)}.", "",
                      "COMPARISON:  None.", "", f"FINDINGS:  {impression}", "", f"IMPRESSION:  {impression}", ""])
