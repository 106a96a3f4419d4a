"""MIMIC-IV under its own names (hosp and icu modules): the rendering ClinSQL, AgentEHR and PhysAssistBench share.

The same patients and ids as MIMIC-IV* (the MIMIC site's patients, the same id pools taken in the same order), in
MIMIC-IV's tables and columns: patients with anchor_age / anchor_year / anchor_year_group, admissions, transfers,
diagnoses_icd and procedures_icd (codes without dots, icd_version 9 or 10, seq_num), the dictionaries,
labevents with reference ranges and abnormal flags, prescriptions, microbiologyevents, icustays, chartevents,
inputevents and outputevents with MIMIC-IV's item ids (220045 heart rate, 220210 respiratory rate, 220277 SpO2,
220052 arterial mean pressure, 223762 temperature; 50912 creatinine, 51003 troponin T, ...).

MIMIC-IV's clock: each patient's dates are moved by an offset of their own (whole 52-week blocks, keeping weekday
and season) so that years fall in 2110-2210; anchor_year is the shifted year of the first admission, anchor_age the
age then (91 above 89, as MIMIC-IV groups the oldest), and the age at any admission is anchor_age + its year -
anchor_year, as ClinSQL's gold SQL computes it. Values are spelled as MIMIC-IV spells them ("EW EMER.", "EMERGENCY
ROOM", "Medicare", "Medical Intensive Care Unit (MICU)", "Creatinine").
"""
from __future__ import annotations

import functools
import hashlib
import random
from datetime import datetime, timedelta

from sqlalchemy import Column, Double, Integer, MetaData, Table, Text

from ..world.generator import WorldSize
from ..world.model import NOW, Patient
from ..world.vocab import icd_diagnoses, load_data, vocabulary
from . import ehrsql_mimic_iii, mimic_iv_notes, mimic_iv_star, treqs
from .writer import Ids, Rows, fmt_time

DB_ID = "mimic_iv"
ID_POOLS = mimic_iv_star.ID_POOLS          # the same subject_id, hadm_id and stay_id as MIMIC-IV*
patient_range = mimic_iv_star.patient_range



@functools.lru_cache(maxsize=None)
def spelling() -> dict:
    """MIMIC-IV's spellings of the world's race, insurance and care units (world/data/mimic_iv.yaml)."""
    return load_data("mimic_iv.yaml")


def _expand(prefixes: list[str]) -> tuple[str, ...]:
    """ "430-438" -> 430, 431, ..., 438; "I60-I69" and "042-044" likewise (same letters, same width)."""
    out = []
    for item in prefixes:
        if "-" not in item:
            out.append(item)
            continue
        lo, hi = item.split("-")
        head = lo.rstrip("0123456789")
        width = len(lo) - len(head)
        out += [f"{head}{n:0{width}d}" for n in range(int(lo[len(head):]), int(hi[len(head):]) + 1)]
    return tuple(out)


@functools.lru_cache(maxsize=None)
def charlson_table() -> dict:
    """world/data/charlson.yaml with its ranges expanded: {category: {9: prefixes, 10: prefixes}}, weights, pairs."""
    data = load_data("charlson.yaml")
    data["prefixes"] = {c: {9: _expand(v["icd9"]), 10: _expand(v["icd10"])} for c, v in data["categories"].items()}
    assert set(data["prefixes"]) == set(CHARLSON_CATEGORIES), "charlson.yaml: categories differ from the table's"
    return data


CHARLSON_CATEGORIES = ("myocardial_infarct", "congestive_heart_failure", "peripheral_vascular_disease",
                       "cerebrovascular_disease", "dementia", "chronic_pulmonary_disease", "rheumatic_disease",
                       "peptic_ulcer_disease", "mild_liver_disease", "diabetes_without_cc", "diabetes_with_cc",
                       "paraplegia", "renal_disease", "malignant_cancer", "severe_liver_disease",
                       "metastatic_solid_tumor", "aids")


def charlson(codes: list[str], version: int, age: int) -> dict[str, int]:
    """One admission's Charlson flags, age score and index, as MIMIC-IV's derived table computes them."""
    table = charlson_table()
    flags = {c: int(any(code.startswith(table["prefixes"][c][version]) for code in codes)) for c in CHARLSON_CATEGORIES}
    age_score = next((score for bound, score in table["age_score"] if age <= bound), 4)
    index = age_score + sum(w * flags[c] for c, w in table["weights"].items())
    index += sum(max(w1 * flags[c1], w2 * flags[c2]) for c1, w1, c2, w2 in table["pairs"])
    return {"age_score": age_score, **flags, "charlson_comorbidity_index": index}


# Table -> columns (name, type), MIMIC-IV v3.1's order; the first column of a table without a natural key is a
# row number the builder hands out (MIMIC-IV has labevent_id, microevent_id; the others get `row_id`).
I, T, D = Integer, Text, Double
COLUMNS: dict[str, list[tuple[str, type]]] = {
    "patients": [("subject_id", I), ("gender", T), ("anchor_age", I), ("anchor_year", I), ("anchor_year_group", T),
                 ("dod", T)],
    "admissions": [("subject_id", I), ("hadm_id", I), ("admittime", T), ("dischtime", T), ("deathtime", T),
                   ("admission_type", T), ("admit_provider_id", T), ("admission_location", T),
                   ("discharge_location", T), ("insurance", T), ("language", T), ("marital_status", T), ("race", T),
                   ("edregtime", T), ("edouttime", T), ("hospital_expire_flag", I)],
    "transfers": [("subject_id", I), ("hadm_id", I), ("transfer_id", I), ("eventtype", T), ("careunit", T),
                  ("intime", T), ("outtime", T)],
    "diagnoses_icd": [("subject_id", I), ("hadm_id", I), ("seq_num", I), ("icd_code", T), ("icd_version", I)],
    "d_icd_diagnoses": [("icd_code", T), ("icd_version", I), ("long_title", T)],
    "procedures_icd": [("subject_id", I), ("hadm_id", I), ("seq_num", I), ("chartdate", T), ("icd_code", T),
                       ("icd_version", I)],
    "d_icd_procedures": [("icd_code", T), ("icd_version", I), ("long_title", T)],
    "labevents": [("labevent_id", I), ("subject_id", I), ("hadm_id", I), ("specimen_id", I), ("itemid", I),
                  ("order_provider_id", T), ("charttime", T), ("storetime", T), ("value", T), ("valuenum", D),
                  ("valueuom", T), ("ref_range_lower", D), ("ref_range_upper", D), ("flag", T), ("priority", T),
                  ("comments", T)],
    "d_labitems": [("itemid", I), ("label", T), ("fluid", T), ("category", T)],
    "prescriptions": [("subject_id", I), ("hadm_id", I), ("pharmacy_id", I), ("poe_id", T), ("poe_seq", I),
                      ("order_provider_id", T), ("starttime", T), ("stoptime", T), ("drug_type", T), ("drug", T),
                      ("formulary_drug_cd", T), ("gsn", T), ("ndc", T), ("prod_strength", T), ("form_rx", T),
                      ("dose_val_rx", T), ("dose_unit_rx", T), ("form_val_disp", T), ("form_unit_disp", T),
                      ("doses_per_24_hrs", D), ("route", T)],
    "microbiologyevents": [("microevent_id", I), ("subject_id", I), ("hadm_id", I), ("micro_specimen_id", I),
                           ("order_provider_id", T), ("chartdate", T), ("charttime", T), ("spec_itemid", I),
                           ("spec_type_desc", T), ("test_seq", I), ("storedate", T), ("storetime", T),
                           ("test_itemid", I), ("test_name", T), ("org_itemid", I), ("org_name", T),
                           ("isolate_num", I), ("quantity", T), ("ab_itemid", I), ("ab_name", T),
                           ("dilution_text", T), ("dilution_comparison", T), ("dilution_value", D),
                           ("interpretation", T), ("comments", T)],
    "icustays": [("subject_id", I), ("hadm_id", I), ("stay_id", I), ("first_careunit", T), ("last_careunit", T),
                 ("intime", T), ("outtime", T), ("los", D)],
    "chartevents": [("subject_id", I), ("hadm_id", I), ("stay_id", I), ("caregiver_id", I), ("charttime", T),
                    ("storetime", T), ("itemid", I), ("value", T), ("valuenum", D), ("valueuom", T), ("warning", I)],
    "d_items": [("itemid", I), ("label", T), ("abbreviation", T), ("linksto", T), ("category", T), ("unitname", T),
                ("param_type", T), ("lownormalvalue", D), ("highnormalvalue", D)],
    "inputevents": [("subject_id", I), ("hadm_id", I), ("stay_id", I), ("caregiver_id", I), ("starttime", T),
                    ("endtime", T), ("storetime", T), ("itemid", I), ("amount", D), ("amountuom", T), ("rate", D),
                    ("rateuom", T), ("orderid", I), ("linkorderid", I), ("ordercategoryname", T),
                    ("secondaryordercategoryname", T), ("ordercomponenttypedescription", T),
                    ("ordercategorydescription", T), ("patientweight", D), ("totalamount", D),
                    ("totalamountuom", T), ("isopenbag", I), ("continueinnextdept", I), ("statusdescription", T),
                    ("originalamount", D), ("originalrate", D)],
    "outputevents": [("subject_id", I), ("hadm_id", I), ("stay_id", I), ("caregiver_id", I), ("charttime", T),
                     ("storetime", T), ("itemid", I), ("value", D), ("valueuom", T)],
    "procedureevents": [("subject_id", I), ("hadm_id", I), ("stay_id", I), ("caregiver_id", I), ("starttime", T),
                        ("endtime", T), ("storetime", T), ("itemid", I), ("value", D), ("valueuom", T),
                        ("location", T), ("locationcategory", T), ("orderid", I), ("linkorderid", I),
                        ("ordercategoryname", T), ("ordercategorydescription", T), ("patientweight", D),
                        ("isopenbag", I), ("continueinnextdept", I), ("statusdescription", T),
                        ("originalamount", D), ("originalrate", D)],
    "services": [("subject_id", I), ("hadm_id", I), ("transfertime", T), ("prev_service", T), ("curr_service", T)],
    "pharmacy": [("subject_id", I), ("hadm_id", I), ("pharmacy_id", I), ("poe_id", T), ("starttime", T),
                 ("stoptime", T), ("medication", T), ("proc_type", T), ("status", T), ("entertime", T),
                 ("verifiedtime", T), ("route", T), ("frequency", T), ("disp_sched", T), ("infusion_type", T),
                 ("sliding_scale", T), ("doses_per_24_hrs", D), ("duration", D), ("duration_interval", T),
                 ("dispensation", T), ("fill_quantity", T)],
    "emar": [("subject_id", I), ("hadm_id", I), ("emar_id", T), ("emar_seq", I), ("poe_id", T), ("pharmacy_id", I),
             ("enter_provider_id", T), ("charttime", T), ("medication", T), ("event_txt", T), ("scheduletime", T),
             ("storetime", T)],
    "omr": [("subject_id", I), ("chartdate", T), ("seq_num", I), ("result_name", T), ("result_value", T)],
    "drgcodes": [("subject_id", I), ("hadm_id", I), ("drg_type", T), ("drg_code", T), ("description", T),
                 ("drg_severity", I), ("drg_mortality", I)],
    "datetimeevents": [("subject_id", I), ("hadm_id", I), ("stay_id", I), ("caregiver_id", I), ("charttime", T),
                       ("storetime", T), ("itemid", I), ("value", T), ("valueuom", T), ("warning", I)],
    # mimiciv_note
    "discharge": [("note_id", T), ("subject_id", I), ("hadm_id", I), ("note_type", T), ("note_seq", I),
                  ("charttime", T), ("storetime", T), ("text", T)],
    "radiology": [("note_id", T), ("subject_id", I), ("hadm_id", I), ("note_type", T), ("note_seq", I),
                  ("charttime", T), ("storetime", T), ("text", T)],
    # mimiciv_derived, as mimic-code's concepts define them
    "age": [("subject_id", I), ("hadm_id", I), ("admittime", T), ("anchor_age", I), ("anchor_year", I), ("age", I)],
    "charlson": [("subject_id", I), ("hadm_id", I), ("age_score", I)] + [(c, I) for c in CHARLSON_CATEGORIES]
                + [("charlson_comorbidity_index", I)],
}
MODULE = {name: "hosp" for name in COLUMNS} | {name: "icu" for name in ("icustays", "chartevents", "d_items",
                                                                        "inputevents", "outputevents",
                                                                        "procedureevents", "datetimeevents")} \
    | {"age": "derived", "charlson": "derived", "discharge": "note", "radiology": "note"}
OWN_KEY = {"labevents": "labevent_id", "microbiologyevents": "microevent_id"}
DUCK_TYPES = {("datetimeevents", "value"): "TIMESTAMP"}      # a date-time item's value is a time in MIMIC-IV


def metadata() -> MetaData:
    md = MetaData()
    for name, columns in COLUMNS.items():
        key = OWN_KEY.get(name)
        cols = [Column(c, t, primary_key=(c == key), autoincrement=False) for c, t in columns]
        if key is None:
            cols.insert(0, Column("row_id", Integer, primary_key=True, autoincrement=False))
        Table(name, md, *cols)
    return md


def shift_of(seed: int, patient: Patient) -> timedelta:
    """MIMIC-IV's per-patient date shift: 10-109 years in 52-week blocks, drawn from (seed, patient) alone."""
    return timedelta(weeks=52 * random.Random(f"{seed}/mimic-iv-shift/{patient.index}").randint(10, 109))


def anchor(seed: int, patient: Patient, shift: timedelta) -> tuple[int, int, str]:
    """(anchor_age, anchor_year, anchor_year_group): the age in the shifted year of the first admission (of now,
    for a patient never admitted)."""
    when = patient.admissions[0].admit if patient.admissions else NOW
    age = when.year - patient.dob.year - ((when.month, when.day) < (patient.dob.month, patient.dob.day))
    age = age if age <= 89 else 91
    group = random.Random(f"{seed}/mimic-iv-year-group/{patient.index}").choice(spelling()["anchor_year_groups"])
    return age, (when + shift).year, group


def title(text: str) -> str:
    """MIMIC-IV's case for care units (as it spells them) and items: words capitalised, an abbreviation upper."""
    if text in spelling()["care_units"]:
        return spelling()["care_units"][text]
    words = text.title().split(" ")
    return " ".join(w.upper() if w.startswith("(") and w.endswith(")") else w for w in words)


def lab_item(spec: dict, key: str) -> tuple[str, str, str]:
    """(label, fluid, category) of a lab item as d_labitems writes it."""
    if "label" in spec:                                        # a long-tail item keeps MIMIC's own spelling
        return spec["label"], spec["fluid"], spec["category"]
    return treqs.lab_label(spec["mimic"]), "Blood", treqs.lab_category(key)


def specimen(hadm: int, when: datetime) -> int:
    """A specimen id: what is drawn together (one admission, one time) shares one, as MIMIC-IV's labs do."""
    return int(hashlib.sha256(f"{hadm}/{when:%Y%m%d%H%M}".encode()).hexdigest()[:7], 16)


def render_shared(seed: int, size: WorldSize, dictionary: str, used: set, rows: Rows) -> None:
    """The dictionaries: ICD diagnoses (every code or those in use), procedures, lab and chart items."""
    v = vocabulary()
    for version in (9, 10):
        table = icd_diagnoses(version)
        codes = sorted(table) if dictionary == "full" else sorted(c for c, ver in used if ver == version)
        for code in codes:
            rows.add("d_icd_diagnoses", icd_code=code, icd_version=version, long_title=table[code])
    procs = {}
    for proc in v.all_procedures.values():
        procs.setdefault((proc.icd9[0], 9), proc.icd9[1])
        procs.setdefault((proc.icd10[0], 10), proc.icd10[1])
    for (code, version), long_title in sorted(procs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rows.add("d_icd_procedures", icd_code=code, icd_version=version,
                 long_title=long_title[:1].upper() + long_title[1:])
    for key, spec in sorted(v.all_labs.items(), key=lambda kv: kv[1]["mimic_id"]):
        label, fluid, category = lab_item(spec, key)
        rows.add("d_labitems", itemid=spec["mimic_id"], label=label, fluid=fluid, category=category)
    for item in sorted({i["itemid"]: i for i in spelling()["procedure_items"].values()}.values(),
                       key=lambda i: i["itemid"]):
        rows.add("d_items", itemid=item["itemid"], label=item["label"], abbreviation=item["label"],
                 linksto="procedureevents", category=item["category"], unitname="min", param_type="Processes",
                 lownormalvalue=None, highnormalvalue=None)
    for item in sorted(spelling()["datetime_items"].values(), key=lambda i: i["itemid"]):
        rows.add("d_items", itemid=item["itemid"], label=item["label"], abbreviation=item["label"],
                 linksto="datetimeevents", category=item["category"], unitname=None, param_type="Date time",
                 lownormalvalue=None, highnormalvalue=None)
    for group, linksto, category in ((v.vitals, "chartevents", "Routine Vital Signs"),
                                     (v.inputs, "inputevents", "Fluids/Intake"),
                                     (v.outputs, "outputevents", "Output")):
        for item in sorted(group.values(), key=lambda x: x["mimic_id"]):
            rows.add("d_items", itemid=item["mimic_id"], label=title(item["mimic"]),
                     abbreviation=title(item["abbreviation"]), linksto=linksto, category=category,
                     unitname=item["unit"], param_type="Numeric",
                     lownormalvalue=None, highnormalvalue=None)


def _procedure_events(add, icu: dict, a, stay, t) -> None:
    """The stay's bedside procedures MIMIC-IV charts in procedureevents (ventilation, lines, dialysis, imaging), with
    their durations in minutes; those done outside the stay are in procedures_icd only."""
    items, end_of_stay = spelling()["procedure_items"], stay.outtime or NOW
    for e in a.procedures:
        if e.key not in items or not stay.intime <= e.time < end_of_stay:
            continue
        rng = random.Random(f"procedureevent/{icu['stay_id']}/{e.key}/{e.time:%Y%m%d%H%M}")
        hours = {"mechanical ventilation short": rng.uniform(12, 90),
                 "mechanical ventilation long": rng.uniform(96, 200),
                 "continuous renal replacement": rng.uniform(24, 72)}.get(e.key, rng.uniform(0.2, 1.0))
        end = min(e.time + timedelta(hours=hours), end_of_stay)
        minutes = round((end - e.time).total_seconds() / 60)
        add("procedureevents", **icu, caregiver_id=None, starttime=t(e.time), endtime=t(end), storetime=t(end),
            itemid=items[e.key]["itemid"], value=float(minutes), valueuom="min", location=None, locationcategory=None,
            orderid=None, linkorderid=None, ordercategoryname=items[e.key]["category"],
            ordercategorydescription="Task" if minutes < 120 else "ContinuousProcess", patientweight=stay.weight_kg,
            isopenbag=0, continueinnextdept=0, statusdescription="FinishedRunning", originalamount=float(minutes),
            originalrate=None)


def morning_panels(labs: list, routine: set | list) -> dict:
    """(lab, time) -> when it is charted: a day's routine labs (the basic panel and blood count) come from one
    draw, charted at that day's first routine time, as a hospital's morning labs are; other labs keep their time."""
    first: dict = {}
    for e in labs:                                       # sorted by time: the first of a day is its draw
        if e.lab in routine:
            first.setdefault(e.time.date(), e.time)
    return {(e.lab, e.time): first[e.time.date()] for e in labs if e.lab in routine}


def _admit_or_transfer(moves: list) -> str:
    """MIMIC-IV's eventtype for a move into a unit: the first one after the ED (if any) is the admission."""
    return "admit" if all(kind == "ED" for kind, *_ in moves) else "transfer"


def principal_first(a) -> list:
    """The admission's diagnoses with the reason for it first (MIMIC-IV's seq_num 1 is the principal diagnosis):
    its acute conditions in the world's order, then the chronic ones and the rest."""
    conditions = vocabulary().conditions
    return sorted(a.diagnoses, key=lambda d: not (d.key in conditions and conditions[d.key].acute))


def _drg(add, base: dict, a, diagnoses: list) -> None:
    """HCFA (MS-DRG) and APR-DRG rows for the principal diagnosis; APR severity and mortality (1-4) from the
    admission's burden (secondary diagnoses, ICU, death)."""
    table = spelling()["drg"]
    key = next((d.key for d in diagnoses if d.key in table), None)
    if key is None:
        return
    severity = min(4, 1 + (len(diagnoses) > 6) + bool(a.icu_stays) + a.died)
    mortality = min(4, 1 + bool(a.icu_stays) + 2 * a.died)
    add("drgcodes", **base, drg_type="HCFA", drg_code=table[key]["hcfa"][0], description=table[key]["hcfa"][1],
        drg_severity=None, drg_mortality=None)
    add("drgcodes", **base, drg_type="APR", drg_code=table[key]["apr"][0], description=table[key]["apr"][1].title(),
        drg_severity=severity, drg_mortality=mortality)


def frequency(generic: str, route: str) -> tuple[str, int]:
    """(frequency, doses per 24 h): one per drug, from its route's usual schedules."""
    options = spelling()["frequencies"][next((r for r in ("IV", "PO") if route.startswith(r)), "other")]
    name, doses = options[int(hashlib.sha256(generic.encode()).hexdigest(), 16) % len(options)]
    return name, doses


MAX_ADMINISTRATIONS = 14      # eMAR rows per order (longer orders keep their first two weeks)


def _orders(add, base: dict, a, counters: dict, t) -> None:
    """Each medication order three ways, as MIMIC-IV links them: prescriptions (the order), pharmacy (its
    dispensing, same pharmacy_id and poe_id) and emar (each scheduled administration, a few not given)."""
    v, subject = vocabulary(), base["subject_id"]
    for i, m in enumerate(a.medications):
        drug = v.all_drugs[m.drug]
        counters["poe"] += 1
        poe_id, pharmacy_id = f"{subject}-{counters['poe']}", base["hadm_id"] * 1000 + i
        name, route = ehrsql_mimic_iii.drug_name(m.drug), ehrsql_mimic_iii.route(drug)
        freq, per_day = frequency(m.drug, route)
        add("prescriptions", **base, pharmacy_id=pharmacy_id, poe_id=poe_id, poe_seq=counters["poe"],
            order_provider_id=None, starttime=t(m.start), stoptime=t(m.end), drug_type=drug.drug_type, drug=name,
            formulary_drug_cd=None, gsn=None, ndc=None, prod_strength=None, form_rx=None, dose_val_rx=f"{m.dose:g}",
            dose_unit_rx=ehrsql_mimic_iii.drug_unit(drug), form_val_disp=None, form_unit_disp=drug.form.upper(),
            doses_per_24_hrs=float(per_day), route=route)
        days = (m.end - m.start).total_seconds() / 86400
        add("pharmacy", **base, pharmacy_id=pharmacy_id, poe_id=poe_id, starttime=t(m.start), stoptime=t(m.end),
            medication=name, proc_type="IV Piggyback" if route.startswith("IV") else "Unit Dose",
            status="Discontinued" if m.end < a.end else "Active", entertime=t(m.start - timedelta(minutes=20)),
            verifiedtime=t(m.start - timedelta(minutes=5)), route=route, frequency=freq,
            disp_sched=None, infusion_type=None, sliding_scale=None, doses_per_24_hrs=float(per_day),
            duration=round(days, 2), duration_interval="Days", dispensation="Omnicell", fill_quantity=None)
        rng = random.Random(f"emar/{pharmacy_id}")
        when, step = m.start, timedelta(hours=24 / per_day)
        for _ in range(MAX_ADMINISTRATIONS if "ONCE" not in freq else 1):
            if when > m.end:
                break
            counters["emar"] += 1
            given = rng.random() >= 0.05
            add("emar", **base, emar_id=f"{subject}-{counters['emar']}", emar_seq=counters["emar"], poe_id=poe_id,
                pharmacy_id=pharmacy_id, enter_provider_id=None,
                charttime=t(when + timedelta(minutes=rng.randint(0, 40))), medication=name,
                event_txt="Administered" if given else "Not Given", scheduletime=t(when),
                storetime=t(when + timedelta(minutes=rng.randint(40, 90))))
            when += step


def _omr(add, p: Patient, subject: int, seed: int, shift: timedelta) -> None:
    """Outpatient measurements (omr): a clinic visit 1-12 weeks before most admissions, with blood pressure,
    weight, height and BMI in MIMIC-IV's result names and text values (pounds and inches)."""
    height_cm = next((s.height_cm for a in p.admissions for s in a.icu_stays), None) or \
        min(200.0, max(148.0, random.Random(f"omr/{seed}/{p.index}").gauss(176 if p.gender == "m" else 162, 7)))
    for n, a in enumerate(p.admissions):
        rng = random.Random(f"omr/{seed}/{p.index}/{n}")     # not the subject_id: counting passes stand-ins
        if rng.random() > 0.7:
            continue
        day = (a.admit - timedelta(days=rng.randint(7, 84)) + shift).strftime("%Y-%m-%d")
        weight = min(160.0, max(45.0, next((s.weight_kg for s in a.icu_stays if s.weight_kg), None)
                                 or rng.gauss(80, 14)))
        results = [("Blood Pressure", f"{round(rng.gauss(128, 14))}/{round(rng.gauss(76, 9))}"),
                   ("Weight (Lbs)", f"{weight * 2.20462:.1f}"), ("Height (Inches)", f"{height_cm / 2.54:.0f}"),
                   ("BMI (kg/m2)", f"{weight / (height_cm / 100) ** 2:.1f}")]
        for name, value in results:
            add("omr", subject_id=subject, chartdate=day, seq_num=1, result_name=name, result_value=value)


def _datetime_events(add, icu: dict, p: Patient, a, stay, t) -> None:
    """Date-time items of a stay: the dialysis catheter's insertion when dialysis starts in the ICU, and, for a
    patient with chronic kidney disease, the last outpatient dialysis before the stay."""
    items = spelling()["datetime_items"]
    dialysis = [e for e in a.procedures if e.key in ("hemodialysis", "continuous renal replacement",
                                                     "peritoneal dialysis")
                and stay.intime <= e.time < (stay.outtime or NOW)]
    if dialysis:
        when = dialysis[0].time - timedelta(hours=1)
        add("datetimeevents", **icu, caregiver_id=None, charttime=t(when), storetime=t(when + timedelta(minutes=30)),
            itemid=items["dialysis catheter insertion"]["itemid"], value=t(when), valueuom="Date and Time",
            warning=0)
    if "chronic kidney disease" in p.conditions:
        last = stay.intime - timedelta(days=random.Random(f"lastdialysis/{icu['stay_id']}").randint(1, 4))
        add("datetimeevents", **icu, caregiver_id=None, charttime=t(stay.intime + timedelta(hours=1)),
            storetime=t(stay.intime + timedelta(hours=2)), itemid=items["last dialysis"]["itemid"],
            value=t(last.replace(hour=0, minute=0, second=0)), valueuom="Date", warning=0)


def _notes(add, base: dict, p: Patient, a, age: int, service: str, seq: dict, t) -> None:
    """The admission's radiology reports (chest radiographs, head CTs) and, once discharged alive, its summary."""
    subject = base["subject_id"]
    for e in a.procedures:
        if e.key in mimic_iv_notes.RADIOLOGY:
            seq["RR"] += 1
            add("radiology", **base, note_id=f"{subject}-RR-{seq['RR']}", note_type="RR", note_seq=seq["RR"],
                charttime=t(e.time), storetime=t(e.time + timedelta(hours=2)),
                text=mimic_iv_notes.radiology_text(p, a, e.key, age))
    if a.discharge is not None and not a.died:
        seq["DS"] += 1
        when = t(a.discharge)
        add("discharge", **base, note_id=f"{subject}-DS-{seq['DS']}", note_type="DS", note_seq=seq["DS"],
            charttime=when, storetime=t(a.discharge + timedelta(hours=6)),
            text=mimic_iv_notes.discharge_text(p, a, age, spelling()["service_names"][service], p.gender.upper(),
                                               t(a.admit)[:10], when[:10]))


def render_patients(patients: list[Patient], seed: int, rows: Rows, ids: Ids) -> set:
    """A chunk of patients' rows; returns the (ICD code, version) pairs of their diagnoses, for the dictionary."""
    v = vocabulary()
    add = rows.add
    used = set()
    for p in patients:
        shift = shift_of(seed, p)
        t = lambda when: fmt_time(when + shift) if when else None  # noqa: E731
        day = lambda when: (when + shift).strftime("%Y-%m-%d")  # noqa: E731
        subject = ids.next("mimic/patients")
        age, year, group = anchor(seed, p, shift)
        add("patients", subject_id=subject, gender=p.gender.upper(), anchor_age=age, anchor_year=year,
            anchor_year_group=group, dod=day(p.dod) if p.dod else None)
        note_seq = {"DS": 0, "RR": 0}
        counters = {"poe": 0, "emar": 0}
        _omr(add, p, subject, seed, shift)
        for a in p.admissions:
            hadm = ids.next("mimic/admissions")
            ed = a.wards[0] if a.wards and a.wards[0][0] == "emergency department" else None
            add("admissions", subject_id=subject, hadm_id=hadm, admittime=t(a.admit), dischtime=t(a.discharge),
                deathtime=t(a.discharge) if a.died else None, admission_type=a.admission_type.upper(),
                admit_provider_id=None, admission_location=a.admit_source.upper(),
                discharge_location=(a.discharge_destination or "").upper() or None,
                insurance=spelling()["insurance"][a.insurance], language=a.language.upper(),
                marital_status=a.marital.upper() if a.marital else None, race=spelling()["race"][p.ethnicity],
                edregtime=t(ed[1]) if ed else None, edouttime=t(ed[2]) if ed else None,
                hospital_expire_flag=int(a.died))
            base = {"subject_id": subject, "hadm_id": hadm}
            diagnoses = principal_first(a)
            codes = dict.fromkeys((v.all_conditions[d.key].icd9 if a.icd_version == 9
                                   else v.all_conditions[d.key].icd10) for d in diagnoses)
            _drg(add, base, a, diagnoses)
            for seq, code in enumerate(codes, start=1):
                used.add((code, a.icd_version))
                add("diagnoses_icd", **base, seq_num=seq, icd_code=code, icd_version=a.icd_version)
            admit_age = age + (a.admit + shift).year - year        # mimic-code's age: anchor_age + years since
            add("age", **base, admittime=t(a.admit), anchor_age=age, anchor_year=year, age=admit_age)
            add("charlson", **base, **charlson(list(codes), a.icd_version, admit_age))
            for seq, e in enumerate(a.procedures, start=1):
                proc = v.all_procedures[e.key]
                add("procedures_icd", **base, seq_num=seq, chartdate=day(e.time),
                    icd_code=(proc.icd9 if a.icd_version == 9 else proc.icd10)[0], icd_version=a.icd_version)
            panel = morning_panels(a.labs, v.routine_labs)
            for e in a.labs:
                spec = v.all_labs[e.lab]
                lo, hi = spec["mean"] - 2 * spec["sd"], spec["mean"] + 2 * spec["sd"]
                decimals = spec["decimals"]
                drawn = panel.get((e.lab, e.time), e.time)
                add("labevents", **base, specimen_id=specimen(hadm, drawn), itemid=spec["mimic_id"],
                    order_provider_id=None,
                             charttime=t(drawn), storetime=t(drawn + timedelta(minutes=45)), value=f"{e.value:g}",
                             valuenum=e.value, valueuom=ehrsql_mimic_iii.lab_unit(spec),
                             ref_range_lower=round(max(lo, 0.0), decimals), ref_range_upper=round(hi, decimals),
                             flag="abnormal" if not lo <= e.value <= hi else None, priority="ROUTINE", comments=None)
            _orders(add, base, a, counters, t)
            for mi in a.micro:
                spec = v.micro[mi.kind]
                add("microbiologyevents", **base, micro_specimen_id=specimen(hadm, mi.time), chartdate=day(mi.time),
                               charttime=t(mi.time), spec_itemid=None, spec_type_desc=spec["mimic_specimen"].upper(),
                               test_name=spec["mimic_test"].upper(),
                               org_name=mi.organism.upper() if mi.organism else None, interpretation=None)
            moves: list[tuple[str, str | None, datetime, datetime | None]] = []     # world units, lowercase
            if a.wards and a.wards[0][0] == "emergency department":
                moves.append(("ED", "emergency department", a.wards[0][1], a.wards[0][2]))
            for stay in a.icu_stays:
                sid = ids.next("mimic/icustays")
                los = ((stay.outtime - stay.intime).total_seconds() / 86400) if stay.outtime else None
                add("icustays", **base, stay_id=sid, first_careunit=title(stay.first_unit),
                    last_careunit=title(stay.last_unit), intime=t(stay.intime), outtime=t(stay.outtime),
                    los=round(los, 4) if los is not None else None)
                icu = {**base, "stay_id": sid}
                for e in stay.vitals:
                    spec = v.vitals[e.vital]
                    add("chartevents", **icu, caregiver_id=None, charttime=t(e.time),
                        storetime=t(e.time + timedelta(minutes=5)), itemid=spec["mimic_id"], value=f"{e.value:g}",
                        valuenum=e.value, valueuom=spec["unit"], warning=0)
                for f in stay.fluids:
                    if f.direction == "intake":
                        spec = v.inputs[f.item]
                        add("inputevents", **icu, starttime=t(f.time), endtime=t(f.time + timedelta(minutes=1)),
                            storetime=t(f.time + timedelta(minutes=5)), itemid=spec["mimic_id"], amount=f.amount,
                            amountuom=spec["unit"], ordercategoryname=None, patientweight=stay.weight_kg,
                            totalamount=f.amount, totalamountuom=spec["unit"], isopenbag=0, continueinnextdept=0,
                            statusdescription="FinishedRunning", originalamount=f.amount)
                    else:
                        spec = v.outputs[f.item]
                        add("outputevents", **icu, charttime=t(f.time), storetime=t(f.time + timedelta(minutes=5)),
                            itemid=spec["mimic_id"], value=f.amount, valueuom=spec["unit"])
                _procedure_events(add, icu, a, stay, t)
                _datetime_events(add, icu, p, a, stay, t)
                moves.append((_admit_or_transfer(moves), stay.first_unit, stay.intime, stay.outtime))
            for unit, tin, tout in a.wards:
                if unit != "emergency department":
                    moves.append((_admit_or_transfer(moves), unit, tin, tout))
            if a.discharge is not None:
                moves.append(("discharge", None, a.discharge, None))
            service, first_service = None, None
            for kind, unit, tin, tout in moves:
                add("transfers", **base, transfer_id=ids.next("mimic/transfers"), eventtype=kind,
                    careunit=title(unit) if unit else None, intime=t(tin), outtime=t(tout))
                if unit and spelling()["services"][unit] != service:       # a row each time the service changes
                    add("services", **base, transfertime=t(tin), prev_service=service,
                        curr_service=spelling()["services"][unit])
                    service = spelling()["services"][unit]
                    first_service = first_service or service
            _notes(add, base, p, a, admit_age, first_service or "MED", note_seq, t)
    return used
