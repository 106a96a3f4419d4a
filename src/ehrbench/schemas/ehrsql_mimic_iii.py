"""EHRSQL MIMIC-III (glee4810/EHRSQL, dataset/ehrsql/mimic_iii/mimic_iii.sql): the world's hospital-0 patients as
EHRSQL's 17-table MIMIC-III.

What EHRSQL's preprocessing does, done to the world: values lowercase; every patient moved onto EHRSQL's clock
(`ehrsql_clock`: 2100-2105, now = 2105-12-31 23:59:00), so a patient still in the hospital has a NULL DISCHTIME
(and a NULL DISCHARGE_LOCATION) and an ICU stay still open a NULL OUTTIME; ADMISSIONS.AGE is the age at admission;
DIAGNOSES_ICD.CHARTTIME is the admission time and PROCEDURES_ICD.CHARTTIME the discharge time (so an open
admission has no procedure rows yet); COST charges every diagnosis, lab, procedure and prescription row at one
fixed price per code, item or drug, drawn around a per-type mean (EVENT_ID = the row's ROW_ID). Codes are ICD-9
(MIMIC-III has no ICD-10) with CMS's short and long titles; chart, input and output items are MIMIC-III's CareVue
items (world/data/mimic_iii.yaml).
"""
from __future__ import annotations

import functools
import random

from sqlalchemy import INT, SMALLINT, TIMESTAMP, VARCHAR, Column, Double, ForeignKey, MetaData, Table

from ..world.generator import WorldSize
from ..world.model import Patient
from ..world.vocab import icd9_titles, mimic_iii, mimic_iii_value, vocabulary
from .ehrsql_clock import shift_of, shifted
from .writer import Ids, Rows

DB_ID = "ehrsql_mimic_iii"


def metadata() -> MetaData:
    md = MetaData()
    I, V, TS, D = INT, VARCHAR, TIMESTAMP, Double
    row = lambda: Column("ROW_ID", I, primary_key=True, autoincrement=False)  # noqa: E731
    subject = lambda: Column("SUBJECT_ID", I, nullable=False)  # noqa: E731
    hadm = lambda: Column("HADM_ID", I, ForeignKey("ADMISSIONS.HADM_ID"), nullable=False)  # noqa: E731
    icu = lambda: Column("ICUSTAY_ID", I, ForeignKey("ICUSTAYS.ICUSTAY_ID"), nullable=False)  # noqa: E731
    Table("PATIENTS", md, row(), Column("SUBJECT_ID", I, nullable=False, unique=True),
          Column("GENDER", V(5), nullable=False), Column("DOB", TS, nullable=False), Column("DOD", TS))
    Table("ADMISSIONS", md, row(), Column("SUBJECT_ID", I, ForeignKey("PATIENTS.SUBJECT_ID"), nullable=False),
          Column("HADM_ID", I, nullable=False, unique=True), Column("ADMITTIME", TS, nullable=False),
          Column("DISCHTIME", TS), Column("ADMISSION_TYPE", V(50), nullable=False),
          Column("ADMISSION_LOCATION", V(50), nullable=False), Column("DISCHARGE_LOCATION", V(50)),
          Column("INSURANCE", V(255), nullable=False), Column("LANGUAGE", V(10)), Column("MARITAL_STATUS", V(50)),
          Column("ETHNICITY", V(200), nullable=False), Column("AGE", I, nullable=False))
    for name in ("D_ICD_DIAGNOSES", "D_ICD_PROCEDURES"):
        Table(name, md, row(), Column("ICD9_CODE", V(10), nullable=False, unique=True),
              Column("SHORT_TITLE", V(50), nullable=False), Column("LONG_TITLE", V(255), nullable=False))
    Table("D_LABITEMS", md, row(), Column("ITEMID", I, nullable=False, unique=True),
          Column("LABEL", V(200), nullable=False))
    Table("D_ITEMS", md, row(), Column("ITEMID", I, nullable=False, unique=True), Column("LABEL", V(200), nullable=False),
          Column("LINKSTO", V(50), nullable=False))
    for name, codes in (("DIAGNOSES_ICD", "D_ICD_DIAGNOSES"), ("PROCEDURES_ICD", "D_ICD_PROCEDURES")):
        Table(name, md, row(), subject(), hadm(), Column("ICD9_CODE", V(10), ForeignKey(f"{codes}.ICD9_CODE"),
                                                        nullable=False),
              Column("CHARTTIME", TS, nullable=False))
    Table("LABEVENTS", md, row(), subject(), hadm(), Column("ITEMID", I, ForeignKey("D_LABITEMS.ITEMID"), nullable=False),
          Column("CHARTTIME", TS), Column("VALUENUM", D), Column("VALUEUOM", V(20)))
    Table("PRESCRIPTIONS", md, row(), subject(), hadm(), Column("STARTDATE", TS, nullable=False),
          Column("ENDDATE", TS), Column("DRUG", V(100), nullable=False), Column("DOSE_VAL_RX", V(120), nullable=False),
          Column("DOSE_UNIT_RX", V(120), nullable=False), Column("ROUTE", V(120), nullable=False))
    Table("COST", md, row(), subject(), hadm(), Column("EVENT_TYPE", V(20), nullable=False),
          Column("EVENT_ID", I, nullable=False), Column("CHARGETIME", TS, nullable=False),
          Column("COST", D, nullable=False))
    Table("CHARTEVENTS", md, row(), subject(), hadm(), icu(),
          Column("ITEMID", I, ForeignKey("D_ITEMS.ITEMID"), nullable=False), Column("CHARTTIME", TS, nullable=False),
          Column("VALUENUM", D), Column("VALUEUOM", V(50)))
    Table("INPUTEVENTS_CV", md, row(), subject(), hadm(), icu(), Column("CHARTTIME", TS, nullable=False),
          Column("ITEMID", I, ForeignKey("D_ITEMS.ITEMID"), nullable=False), Column("AMOUNT", D))
    Table("OUTPUTEVENTS", md, row(), subject(), hadm(), icu(), Column("CHARTTIME", TS, nullable=False),
          Column("ITEMID", I, ForeignKey("D_ITEMS.ITEMID"), nullable=False), Column("VALUE", D))
    Table("MICROBIOLOGYEVENTS", md, row(), subject(), hadm(), Column("CHARTTIME", TS, nullable=False),
          Column("SPEC_TYPE_DESC", V(100)), Column("ORG_NAME", V(100)))
    Table("ICUSTAYS", md, row(), subject(), hadm(), Column("ICUSTAY_ID", I, nullable=False),
          Column("FIRST_CAREUNIT", V(20), nullable=False), Column("LAST_CAREUNIT", V(20), nullable=False),
          Column("FIRST_WARDID", SMALLINT, nullable=False), Column("LAST_WARDID", SMALLINT, nullable=False),
          Column("INTIME", TS, nullable=False), Column("OUTTIME", TS))
    Table("TRANSFERS", md, row(), subject(), hadm(), Column("ICUSTAY_ID", I), Column("EVENTTYPE", V(20), nullable=False),
          Column("CAREUNIT", V(20)), Column("WARDID", SMALLINT), Column("INTIME", TS, nullable=False),
          Column("OUTTIME", TS))
    return md


# MIMIC-III-like id pools: label -> (low, high, how many the world draws given what all its patients took).
ID_POOLS = {
    "mimic3/subjects": (2, 100_000, lambda taken: taken["mimic3/subjects"]),
    "mimic3/admissions": (100_001, 200_000, lambda taken: taken["mimic3/admissions"]),
    "mimic3/icustays": (200_001, 300_000, lambda taken: taken["mimic3/icustays"]),
}


def patient_range(size: WorldSize) -> tuple[int, int]:
    """The world's patient indices this database renders: the MIMIC site's, as MIMIC-IV* renders (the first
    `size.ehrsql_patients` of them where EHRSQL's sample size is set)."""
    return 0, min(size.n_mimic, size.ehrsql_patients or size.n_mimic)


def site_patients(size: WorldSize) -> tuple[int, int]:
    """All of the MIMIC site's patients (TREQS holds every MIMIC-III admission)."""
    return 0, size.n_mimic


def procedure_codes() -> dict[str, str]:
    """ICD-9 procedure code -> title, for every procedure of the world and the distractor codes."""
    v = vocabulary()
    codes = {p.icd9[0]: p.icd9[1] for p in v.all_procedures.values()}
    codes.update({code: title for code, version, title in v.extra_procedure_codes if version == 9})
    return codes


def short_title(title: str) -> str:
    """MIMIC-III's SHORT_TITLE holds at most 24 characters; CMS's abbreviations are not in the vocabulary packages
    for procedures, so the long title is cut there."""
    return title[:24].rstrip().capitalize()


def render_shared(seed: int, size: WorldSize, dictionary: str, used: set, rows: Rows) -> None:
    """The dictionaries: every ICD-9 diagnosis (`full`, as MIMIC-III) or only those in use, the procedure codes, the
    lab items, and the CareVue chart, input and output items."""
    titles, m3, v = icd9_titles(), mimic_iii(), vocabulary()
    for code in sorted(titles) if dictionary == "full" else sorted(used):
        short, long = titles[code]
        rows.add("D_ICD_DIAGNOSES", ICD9_CODE=code.lower(), SHORT_TITLE=short.lower(), LONG_TITLE=long.lower())
    for code, title in sorted(procedure_codes().items()):
        rows.add("D_ICD_PROCEDURES", ICD9_CODE=code.lower(), SHORT_TITLE=short_title(title).lower(),
                 LONG_TITLE=title.lower())
    for lab in sorted(v.all_labs.values(), key=lambda x: x["mimic_id"]):
        rows.add("D_LABITEMS", ITEMID=lab["mimic_id"], LABEL=lab["mimic"])
    for group, linksto in (("chart_items", "chartevents"), ("input_items", "inputevents_cv"),
                           ("output_items", "outputevents")):
        for item in sorted(m3[group].values(), key=lambda x: x["itemid"]):
            rows.add("D_ITEMS", ITEMID=item["itemid"], LABEL=item["label"].lower(), LINKSTO=linksto)


def cost_means(seed: int) -> dict[str, float]:
    """EHRSQL's four per-type mean prices, each a Poisson(10) draw."""
    import numpy as np

    means = np.random.default_rng(random.Random(f"{seed}/ehrsql-cost-means").getrandbits(32)).poisson(10, size=4)
    return dict(zip(("diagnoses_icd", "labevents", "procedures_icd", "prescriptions"), map(float, means)))


@functools.lru_cache(maxsize=None)
def concept_price(seed: int, event_type: str, concept, mean: float) -> float:
    """One fixed price per code, item or drug, N(mean, 1) rounded to cents, as EHRSQL prices them (remembered: a
    rendering prices the same few thousand concepts hundreds of thousands of times)."""
    return round(random.Random(f"{seed}/ehrsql-cost/{event_type}/{concept}").gauss(mean, 1.0), 2)


def day(t):
    """MIMIC-III's prescriptions are dated, not timed."""
    return None if t is None else t.replace(hour=0, minute=0, second=0)


def lower(value: str | None) -> str | None:
    return None if value is None else value.lower()


def drug_name(generic: str) -> str:
    """PRESCRIPTIONS.DRUG as MIMIC-III spells the generic (its own case; EHRSQL lowercases it)."""
    tail = vocabulary().tail.drugs.get(generic)
    return tail.mimic if tail else mimic_iii()["drugs"].get(generic) or generic[:1].upper() + generic[1:]


def drug_unit(drug) -> str:
    """PRESCRIPTIONS.DOSE_UNIT_RX as MIMIC-III writes it ("mg", "mEq", "mL", "TAB")."""
    return drug.mimic_unit or mimic_iii()["drug_units"].get(drug.unit, drug.unit)


def route(drug) -> str:
    """PRESCRIPTIONS.ROUTE as MIMIC-III writes it (PO, IV, IV DRIP, PO/NG, ...)."""
    return mimic_iii()["routes"].get(drug.route, drug.route.upper())


def lab_unit(spec: dict) -> str | None:
    """LABEVENTS.VALUEUOM as MIMIC-III writes it: a tail item carries its own."""
    return spec["mimic_unit"] if "mimic_unit" in spec else mimic_iii()["lab_units"][spec["unit"]]


def render_patients(patients: list[Patient], seed: int, rows: Rows, ids: Ids) -> set:
    """A chunk of patients' rows; returns the ICD-9 diagnosis codes they have, for the `used` dictionary."""
    v, m3 = vocabulary(), mimic_iii()
    add = rows.add
    means = cost_means(seed)
    used = set()

    def charge(event_type, subject, hadm, event_id, concept, when):
        add("COST", SUBJECT_ID=subject, HADM_ID=hadm, EVENT_TYPE=event_type, EVENT_ID=event_id, CHARGETIME=when,
            COST=concept_price(seed, event_type, concept, means[event_type]))

    for p in patients:
        shift = shift_of(seed, p)
        t = lambda when: shifted(when, shift)  # noqa: E731
        subject = ids.next("mimic3/subjects")
        add("PATIENTS", SUBJECT_ID=subject, GENDER=p.gender, DOB=t(p.dob), DOD=t(p.dod))
        ethnicity = mimic_iii_value("ethnicities", p.ethnicity, seed, p.index)
        for n, a in enumerate(p.admissions):
            hadm = ids.next("mimic3/admissions")
            destination = m3["died"] if a.died else m3["discharge_destinations"].get(a.discharge_destination)
            add("ADMISSIONS", SUBJECT_ID=subject, HADM_ID=hadm, ADMITTIME=t(a.admit), DISCHTIME=t(a.discharge),
                ADMISSION_TYPE=m3["admission_types"][a.admission_type].lower(),
                ADMISSION_LOCATION=m3["admit_sources"][a.admit_source].lower(),
                DISCHARGE_LOCATION=None if a.current else lower(destination),
                INSURANCE=mimic_iii_value("insurance", a.insurance, seed, p.index, n).lower(),
                LANGUAGE=lower(mimic_iii_value("languages", a.language, seed, p.index, n)),
                MARITAL_STATUS=lower(m3["marital"].get(a.marital)), ETHNICITY=ethnicity.lower(),
                AGE=a.age)
            base = {"SUBJECT_ID": subject, "HADM_ID": hadm}
            for code in dict.fromkeys(v.all_conditions[d.key].icd9 for d in a.diagnoses):
                used.add(code)
                r = add("DIAGNOSES_ICD", **base, ICD9_CODE=code.lower(), CHARTTIME=t(a.admit))
                charge("diagnoses_icd", subject, hadm, r, code.lower(), t(a.admit))
            if not a.current:                      # charted at discharge: an open admission has none yet
                for code in dict.fromkeys(v.all_procedures[e.key].icd9[0].lower() for e in a.procedures):
                    r = add("PROCEDURES_ICD", **base, ICD9_CODE=code, CHARTTIME=t(a.discharge))
                    charge("procedures_icd", subject, hadm, r, code, t(a.discharge))
            for e in a.labs:
                spec = v.all_labs[e.lab]
                r = add("LABEVENTS", **base, ITEMID=spec["mimic_id"], CHARTTIME=t(e.time), VALUENUM=e.value,
                        VALUEUOM=lower(lab_unit(spec)))
                charge("labevents", subject, hadm, r, spec["mimic_id"], t(e.time))
            for m in a.medications:
                drug = v.all_drugs[m.drug]
                name = drug_name(m.drug).lower()
                r = add("PRESCRIPTIONS", **base, STARTDATE=t(day(m.start)), ENDDATE=t(day(m.end)), DRUG=name,
                        DOSE_VAL_RX=f"{m.dose:g}", DOSE_UNIT_RX=drug_unit(drug).lower(),
                        ROUTE=route(drug).lower())
                charge("prescriptions", subject, hadm, r, name, t(day(m.start)))
            for mi in a.micro:
                add("MICROBIOLOGYEVENTS", **base, CHARTTIME=t(mi.time), SPEC_TYPE_DESC=v.micro[mi.kind]["mimic_specimen"],
                    ORG_NAME=mi.organism)
            _render_stays(p, a, base, t, rows, ids)
    return used


def _render_stays(p: Patient, a, base: dict, t, rows: Rows, ids: Ids) -> None:
    """ICU stays with their charted vitals, inputs and outputs, and the admission's transfers (admit, transfer,
    discharge; a ward has a WARDID but no CAREUNIT, as in MIMIC-III)."""
    v, m3 = vocabulary(), mimic_iii()
    add = rows.add
    moves = []
    for stay in a.icu_stays:
        sid = ids.next("mimic3/icustays")
        first, last = m3["care_units"][stay.first_unit], m3["care_units"][stay.last_unit]
        add("ICUSTAYS", **base, ICUSTAY_ID=sid, FIRST_CAREUNIT=first["unit"].lower(),
            LAST_CAREUNIT=last["unit"].lower(), FIRST_WARDID=first["ward"], LAST_WARDID=last["ward"],
            INTIME=t(stay.intime), OUTTIME=t(stay.outtime))
        icu = {**base, "ICUSTAY_ID": sid}
        height = m3["chart_items"]["height"]
        add("CHARTEVENTS", **icu, ITEMID=height["itemid"], CHARTTIME=t(stay.intime), VALUENUM=stay.height_cm,
            VALUEUOM=height["unit"])
        for e in stay.vitals:
            add("CHARTEVENTS", **icu, ITEMID=m3["chart_items"][e.vital]["itemid"], CHARTTIME=t(e.time),
                VALUENUM=e.value, VALUEUOM=v.vitals[e.vital]["unit"])
        for f in stay.fluids:
            if f.direction == "intake":
                add("INPUTEVENTS_CV", **icu, CHARTTIME=t(f.time), ITEMID=m3["input_items"][f.item]["itemid"],
                    AMOUNT=f.amount)
            else:
                add("OUTPUTEVENTS", **icu, CHARTTIME=t(f.time), ITEMID=m3["output_items"][f.item]["itemid"],
                    VALUE=f.amount)
        moves.append((stay.intime, sid, first["unit"].lower(), first["ward"], stay.outtime))
    for unit, tin, tout in a.wards:
        moves.append((tin, None, None, m3["wards"][unit], tout))
    moves.sort(key=lambda m: m[0])
    for k, (tin, sid, unit, ward, tout) in enumerate(moves):
        add("TRANSFERS", **base, ICUSTAY_ID=sid, EVENTTYPE="admit" if k == 0 else "transfer", CAREUNIT=unit,
            WARDID=ward, INTIME=t(tin), OUTTIME=t(tout))
    if a.discharge is not None:
        add("TRANSFERS", **base, ICUSTAY_ID=None, EVENTTYPE="discharge", CAREUNIT=None, WARDID=None,
            INTIME=t(a.discharge), OUTTIME=None)
