"""TREQS / MIMICSQL (wangpinggl/TREQS, evaluation/process_mimic_db): the world's hospital-0 patients as the five
tables TREQS derives from MIMIC-III.

TREQS joins MIMIC-III's tables into DEMOGRAPHIC (one row per admission: ADMISSIONS with PATIENTS, a synthetic NAME,
AGE = admission year - birth year, DAYS_STAY = whole days), DIAGNOSES and PROCEDURES (codes with their short and
long titles), PRESCRIPTIONS (DRUG_DOSE = value and unit glued) and LAB (VALUE_UNIT glued, FLAG, the item's label,
fluid and category), and writes them with pandas, whose inferred types this rendering declares (a numeric column
must be INTEGER or REAL: MIMICSQL's SQL compares `AGE < "71"`, which compares as text on a TEXT column). Values keep
MIMIC-III's case. The patients and ids are EHRSQL MIMIC-III's (same id pools); the clock is MIMIC-III's own, which
TREQS kept: each patient's dates moved into the future by a random offset of their own (here whole 52-week blocks,
keeping weekday and season, so that first admissions spread over 2100-2200), and a patient older than 89 at their
first admission given a date of birth 300 years before it. TREQS's MIMIC-III held finished admissions only, so an
admission still open at the world's now is left out.
"""
from __future__ import annotations

import functools
import hashlib
import random
from datetime import datetime, timedelta

from sqlalchemy import INTEGER, REAL, TEXT, Column, MetaData, Table

from ..world.generator import WorldSize
from ..world.model import Patient
from ..world.vocab import icd9_titles, mimic_iii, mimic_iii_value, vocabulary
from . import ehrsql_mimic_iii
from .ehrsql_clock import shifted
from .writer import Ids, Rows

DB_ID = "treqs"
ID_POOLS = ehrsql_mimic_iii.ID_POOLS
patient_range = ehrsql_mimic_iii.site_patients     # all of them, whatever EHRSQL's sample

COLUMNS = {
    "DEMOGRAPHIC": [("SUBJECT_ID", INTEGER), ("HADM_ID", INTEGER), ("NAME", TEXT), ("MARITAL_STATUS", TEXT),
                    ("AGE", INTEGER), ("DOB", TEXT), ("GENDER", TEXT), ("LANGUAGE", TEXT), ("RELIGION", TEXT),
                    ("ADMISSION_TYPE", TEXT), ("DAYS_STAY", INTEGER), ("INSURANCE", TEXT), ("ETHNICITY", TEXT),
                    ("EXPIRE_FLAG", INTEGER), ("ADMISSION_LOCATION", TEXT), ("DISCHARGE_LOCATION", TEXT),
                    ("DIAGNOSIS", TEXT), ("DOD", TEXT), ("DOB_YEAR", INTEGER), ("DOD_YEAR", REAL), ("ADMITTIME", TEXT),
                    ("DISCHTIME", TEXT), ("ADMITYEAR", INTEGER)],
    "DIAGNOSES": [("SUBJECT_ID", INTEGER), ("HADM_ID", INTEGER), ("ICD9_CODE", TEXT), ("SHORT_TITLE", TEXT),
                  ("LONG_TITLE", TEXT)],
    "PROCEDURES": [("SUBJECT_ID", INTEGER), ("HADM_ID", INTEGER), ("ICD9_CODE", INTEGER), ("SHORT_TITLE", TEXT),
                   ("LONG_TITLE", TEXT)],
    "PRESCRIPTIONS": [("SUBJECT_ID", INTEGER), ("HADM_ID", INTEGER), ("ICUSTAY_ID", REAL), ("DRUG_TYPE", TEXT),
                      ("DRUG", TEXT), ("FORMULARY_DRUG_CD", TEXT), ("ROUTE", TEXT), ("DRUG_DOSE", TEXT)],
    "LAB": [("SUBJECT_ID", INTEGER), ("HADM_ID", INTEGER), ("ITEMID", INTEGER), ("CHARTTIME", TEXT), ("FLAG", TEXT),
            ("VALUE_UNIT", TEXT), ("LABEL", TEXT), ("FLUID", TEXT), ("CATEGORY", TEXT)],
}


def metadata() -> MetaData:
    md = MetaData()
    for name, columns in COLUMNS.items():
        Table(name, md, *(Column(col, kind) for col, kind in columns))
    return md


def render_shared(seed: int, size: WorldSize, dictionary: str, used: set, rows: Rows) -> None:
    """Nothing: TREQS has no dictionary tables (titles sit on every diagnosis and procedure row)."""


@functools.lru_cache(maxsize=1)
def _faker():
    from faker import Faker

    return Faker("en_US")


def synthetic_name(seed: int, patient: Patient) -> str:
    """A made-up name of the patient's gender, as TREQS's id2name.csv gives every SUBJECT_ID one."""
    fake = _faker()
    fake.seed_instance(int.from_bytes(hashlib.sha256(f"{seed}/name/{patient.index}".encode()).digest()[:8], "big"))
    return fake.name_female() if patient.gender == "f" else fake.name_male()


def lab_label(label: str) -> str:
    """D_LABITEMS's case: words capitalised, abbreviations in parentheses upper ("Alanine Aminotransferase (ALT)")."""
    words = label.title().split(" ")
    return " ".join(w.upper() if w.startswith("(") and w.endswith(")") and len(w) <= 6 else w for w in words)


def lab_category(key: str) -> str:
    m3 = mimic_iii()
    return "Blood Gas" if key in m3["blood_gas_labs"] else "Hematology" if key in m3["hematology_labs"] else "Chemistry"


def mimic_iii_shift(seed: int, patient: Patient) -> timedelta:
    """MIMIC-III's per-patient date shift: 0-100 years in 52-week blocks, drawn from (seed, patient) alone."""
    return timedelta(weeks=52 * random.Random(f"{seed}/mimic-iii-shift/{patient.index}").randint(0, 101))


def mimic_iii_dob(patient: Patient, shift: timedelta) -> datetime:
    """The shifted date of birth; over 89 at the first admission, 300 years before that admission (MIMIC-III)."""
    dob = patient.dob + shift
    first = patient.admissions[0] if patient.admissions else None
    if first is None or first.age <= 89:
        return dob
    return dob.replace(year=(first.admit + shift).year - 300, day=min(dob.day, 28) if dob.month == 2 else dob.day)


def render_patients(patients: list[Patient], seed: int, rows: Rows, ids: Ids) -> set:
    """A chunk of patients' rows: a DEMOGRAPHIC row per finished admission and its coded, prescribed and lab rows."""
    v, m3, titles, procedures = vocabulary(), mimic_iii(), icd9_titles(), ehrsql_mimic_iii.procedure_codes()
    add = rows.add
    for p in patients:
        shift = mimic_iii_shift(seed, p)
        t = lambda when: shifted(when, shift)  # noqa: E731
        subject = ids.next("mimic3/subjects")
        name, religion = synthetic_name(seed, p), mimic_iii_value("religions", None, seed, p.index)
        ethnicity = mimic_iii_value("ethnicities", p.ethnicity, seed, p.index)
        dob, dod = mimic_iii_dob(p, shift), p.dod + shift if p.dod else None
        for n, a in enumerate(p.admissions):
            hadm = ids.next("mimic3/admissions")
            stays = [ids.next("mimic3/icustays") for _ in a.icu_stays]
            if a.current:
                continue
            admit, disch = a.admit + shift, a.discharge + shift
            primary = next((d.key for d in a.diagnoses if v.all_conditions[d.key].acute), None) or \
                (a.diagnoses[0].key if a.diagnoses else "observation")
            add("DEMOGRAPHIC", SUBJECT_ID=subject, HADM_ID=hadm, NAME=name, MARITAL_STATUS=m3["marital"].get(a.marital),
                AGE=admit.year - dob.year, DOB=dob.isoformat(" ", "seconds"), GENDER=p.gender.upper(),
                LANGUAGE=mimic_iii_value("languages", a.language, seed, p.index, n),
                RELIGION=religion, ADMISSION_TYPE=m3["admission_types"][a.admission_type], DAYS_STAY=(disch - admit).days,
                INSURANCE=mimic_iii_value("insurance", a.insurance, seed, p.index, n), ETHNICITY=ethnicity,
                EXPIRE_FLAG=int(p.dod is not None), ADMISSION_LOCATION=m3["admit_sources"][a.admit_source],
                DISCHARGE_LOCATION=m3["died"] if a.died else m3["discharge_destinations"][a.discharge_destination],
                DIAGNOSIS=mimic_iii_value("admitting_diagnoses", primary, seed, p.index, n), DOD=t(p.dod), DOB_YEAR=dob.year,
                DOD_YEAR=float(dod.year) if dod else None, ADMITTIME=t(a.admit), DISCHTIME=t(a.discharge),
                ADMITYEAR=admit.year)
            base = {"SUBJECT_ID": subject, "HADM_ID": hadm}
            for code in dict.fromkeys(v.all_conditions[d.key].icd9 for d in a.diagnoses):
                short, long = titles[code]
                add("DIAGNOSES", **base, ICD9_CODE=code, SHORT_TITLE=short, LONG_TITLE=long)
            for code in dict.fromkeys(v.all_procedures[e.key].icd9[0] for e in a.procedures):
                title = procedures[code]
                add("PROCEDURES", **base, ICD9_CODE=int(code), SHORT_TITLE=ehrsql_mimic_iii.short_title(title),
                    LONG_TITLE=title[:1].upper() + title[1:])
            stay_at = [(s.intime, s.outtime, sid) for s, sid in zip(a.icu_stays, stays)]
            for m in a.medications:
                drug = v.all_drugs[m.drug]
                unit = ehrsql_mimic_iii.drug_unit(drug)
                icu = next((float(sid) for tin, tout, sid in stay_at if tin <= m.start and (tout is None or m.start < tout)),
                           None)
                add("PRESCRIPTIONS", **base, ICUSTAY_ID=icu, DRUG_TYPE=drug.drug_type,
                    DRUG=ehrsql_mimic_iii.drug_name(m.drug),
                    FORMULARY_DRUG_CD=f"{m.drug.replace(' ', '')[:4].upper()}{m.dose:g}".replace(".", ""),
                    ROUTE=ehrsql_mimic_iii.route(drug), DRUG_DOSE=f"{m.dose:g}{unit}")
            for e in a.labs:
                spec = v.all_labs[e.lab]
                unit = ehrsql_mimic_iii.lab_unit(spec) or ""
                abnormal = abs(e.value - spec["mean"]) > 2 * spec["sd"]
                add("LAB", **base, ITEMID=spec["mimic_id"], CHARTTIME=t(e.time), FLAG="abnormal" if abnormal else None,
                    VALUE_UNIT=f"{e.value:g}{unit}", LABEL=spec.get("label") or lab_label(spec["mimic"]),
                    FLUID=spec.get("fluid", "Blood"), CATEGORY=spec.get("category") or lab_category(e.lab))
    return set()
