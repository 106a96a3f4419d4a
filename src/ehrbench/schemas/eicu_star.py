"""eICU* (EHR-ChatQA paper Table 13): every ICU stay of the world as the renamed eICU demo.

eICU is multi-centre and ICU-only: each hospital stay with an ICU stay appears, its events attached to the unit
stay (as eICU records pre-ICU events against the unit stay). Medications are stored as the pharmacy writes them,
one string with strength and form ("metoprolol tartrate 25 mg po tabs"); a fixed share of drugs also carry the
brand in parentheses, as some eICU sites store them.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict

from sqlalchemy import BIGINT, REAL, Column, ForeignKey, MetaData, Table, Text

from ..world.generator import WorldSize, hospitals
from ..world.model import Patient
from ..world.vocab import Drug, vocabulary
from .ids import seeded_amount
from .writer import INT, Ids, Rows, fmt_time

DB_ID = "eicu_star"

FORM_TEXT = {"tab": "po tabs", "cap": "po caps", "vial": "inj", "soln": "inj soln", "syringe": "inj syringe",
             "neb": "neb soln", "syr": "inj syringe", "bag": "ivpb", "ml": "inj soln", "amp": "inj", "udcup": "po soln",
             "btl": "po soln", "dbtl": "ophth soln", "pkt": "po pwd", "ptch": "td patch", "inh": "inhl", "tube": "top",
             "supp": "pr supp", "loz": "po loz"}
ROUTE_TEXT = {"po": "po", "iv": "iv push", "sc": "subcutaneous", "ih": "inhalation"}
FLUID_PATH = {"intake": "flowsheet|flowsheet cell labels|i&o|intake (ml)|{}",
              "output": "flowsheet|flowsheet cell labels|i&o|output (ml)|{}"}


def metadata() -> MetaData:
    """Every table and column as the authors' `eicu_star.sql` declares it (types, NOT NULL, keys, in its order):
    `column_search` prints these declarations to the agent, and SQLite reads its affinities from them (an `INT`
    age or heart rate holds integers, a `TEXT` teaching status text)."""
    md = MetaData()
    I, T, R = INT, Text, REAL
    unit = lambda: Column("unit_id", I, ForeignKey("icupatient.unit_id"), nullable=False)  # noqa: E731
    Table("icupatient", md, Column("patient_id", T, nullable=False), Column("hosp_id", I, nullable=False),
          Column("unit_id", I, primary_key=True, autoincrement=False), Column("gender", T, nullable=False),
          Column("age", I, nullable=False), Column("ethnicity", T), Column("hospital_id", I, nullable=False),
          Column("ward_id", I, nullable=False), Column("height_admission", R), Column("weight_admission", R),
          Column("weight_discharge", R), Column("hospital_admit_time", T, nullable=False),
          Column("hospital_admission_source", T, nullable=False), Column("unit_admit_time", T, nullable=False),
          Column("unit_discharge_time", T), Column("hospital_discharge_time", T),
          Column("hospital_discharge_status", T))
    Table("condition", md, Column("condition_id", I, primary_key=True, autoincrement=False), unit(),
          Column("condition_name", T, nullable=False), Column("condition_time", T, nullable=False),
          Column("icd9_code", T))
    Table("treatment", md, Column("treatment_id", I, primary_key=True, autoincrement=False), unit(),
          Column("treatment_name", T, nullable=False), Column("treatment_time", T, nullable=False))
    Table("lab", md, Column("lab_id", I, primary_key=True, autoincrement=False), unit(),
          Column("lab_name", T, nullable=False), Column("lab_result", R, nullable=False),
          Column("lab_result_time", T, nullable=False))
    Table("prescription", md, Column("prescription_id", I, primary_key=True, autoincrement=False), unit(),
          Column("drug_name", T, nullable=False), Column("dosage", T, nullable=False),
          Column("administration_route", T, nullable=False), Column("medication_start_time", T),
          Column("medication_stop_time", T))
    Table("cost", md, Column("cost_id", I, primary_key=True, autoincrement=False),
          Column("hosp_id", I, ForeignKey("icupatient.hosp_id"), nullable=False), Column("unit_id", I, nullable=False),
          Column("event_type", T, nullable=False), Column("event_id", I, nullable=False),
          Column("cost_time", T, nullable=False), Column("cost_amount", R, nullable=False))
    Table("allergy_reaction", md, Column("allergy_id", I, primary_key=True, autoincrement=False), unit(),
          Column("drug_name", T), Column("allergy_name", T, nullable=False), Column("allergy_time", T, nullable=False))
    Table("fluid_balance", md, Column("fluid_balance_id", I, primary_key=True, autoincrement=False), unit(),
          Column("fluid_path", T, nullable=False), Column("fluid_label", T, nullable=False),
          Column("fluid_value_numeric", R, nullable=False), Column("fluid_balance_time", T, nullable=False))
    Table("microbiology", md, Column("microbiology_id", I, primary_key=True, autoincrement=False), unit(),
          Column("culture_site", T, nullable=False), Column("organism", T, nullable=False),
          Column("culture_taken_time", T, nullable=False))
    Table("vital_signs", md, Column("vital_sign_id", BIGINT, primary_key=True, autoincrement=False), unit(),
          Column("temperature", R), Column("sao2", I), Column("heart_rate", I), Column("respiration_rate", I),
          Column("systolic_bp", I), Column("diastolic_bp", I), Column("mean_bp", I),
          Column("vital_time", T, nullable=False))
    Table("hospital", md, Column("hospital_id", I, primary_key=True, autoincrement=False),
          Column("bed_capacity_category", T), Column("teaching_status", T), Column("region", T))
    return md


def shows_brand(drug: Drug) -> bool:
    """Whether this site's pharmacy writes the drug's brand beside it (a fixed, content-derived third of them)."""
    return bool(drug.brands) and hashlib.sha256(drug.name.encode()).digest()[0] % 3 == 0


def drug_string(drug: Drug, dose: float) -> str:
    strength = f"{dose:g} {drug.unit}"
    brand = f" ({drug.brands[0]})" if shows_brand(drug) else ""
    return f"{drug.name}{brand} {strength} {FORM_TEXT.get(drug.form, drug.form)}"


def condition_string(condition, seed: int, hosp_id: int) -> str:
    """The diagnosis string a site writes: the plain name or one of its qualified forms (eICU's "<condition> -
    <qualifier>"), fixed per hospital stay and condition, so one stay never lists a condition twice."""
    names = condition.eicu_names
    pick = hashlib.sha256(f"{seed}/{hosp_id}/{condition.key}".encode()).digest()[0]
    return names[0] if pick < 102 or len(names) == 1 else names[1 + pick % (len(names) - 1)]


def drug_treatments(orders) -> list[tuple]:
    """The treatment rows eICU charts for drugs given (antibacterials, sedation, vasopressors, prophylaxis, ...):
    one per treatment string per stay, at the first order that earns it."""
    v, seen = vocabulary(), {}
    for m in sorted(orders, key=lambda m: (m.start, m.drug)):
        name = v.eicu_treatment(m.drug)
        if name and name not in seen:
            seen[name] = m.start
    return sorted((t, name) for name, t in seen.items())


def _dotted(code: str, version: int) -> str:
    """ICD codes as eICU writes them: a dot after the category ("401.9", "e888.9", "i50.9", "e11.40")."""
    head = 4 if version == 9 and code.startswith("e") else 3
    return code[:head] + ("." + code[head:] if len(code) > head else "")


def _age_text(age: int) -> str:
    return "> 89" if age > 89 else str(age)


# Demo-like id pools: label -> (low, high, how many the world draws given what all its patients took).
ID_POOLS = {
    "eicu/patients": (0, 3_000_000, lambda taken: taken["eicu/patients"]),
    "eicu/hosp": (100_000, 1_000_000, lambda taken: taken["eicu/hosp"]),
    "eicu/unit": (140_000, 3_400_000, lambda taken: taken["eicu/unit"]),
}


def patient_range(size: WorldSize) -> tuple[int, int]:
    """The world's patient indices this database renders: all of them (those with an ICU stay appear)."""
    return 0, size.n_mimic + size.n_eicu


def render_shared(seed: int, size: WorldSize, dictionary: str, used: set, rows: Rows) -> None:
    """The hospitals. `dictionary` is accepted for a uniform interface: eICU has no code tables."""
    for h in hospitals(seed, size):
        rows.add("hospital", hospital_id=h.index, bed_capacity_category=h.bed_category, teaching_status=h.teaching,
                 region=h.region)


def render_patients(patients: list[Patient], seed: int, rows: Rows, ids: Ids) -> set:
    """A chunk of patients' rows: every hospital stay with an ICU stay, events attached to the first unit stay."""
    v = vocabulary()
    add = rows.add
    icu_patients = [p for p in patients if any(a.icu_stays for a in p.admissions)]
    for p in icu_patients:
        raw = ids.next("eicu/patients")
        uniquepid = f"{raw // 100_000:03d}-{raw % 100_000:05d}"
        for a in p.admissions:
            if not a.icu_stays:
                continue
            hosp = ids.next("eicu/hosp")
            stays = [(ids.next("eicu/unit"), s) for s in a.icu_stays]
            for uid, s in stays:
                add("icupatient", patient_id=uniquepid, hosp_id=hosp, unit_id=uid,
                    gender="female" if p.gender == "f" else "male", age=_age_text(a.age), ethnicity=p.ethnicity,
                    hospital_id=p.hospital, ward_id=p.hospital * 10 + (uid % 3),
                    height_admission=s.height_cm, weight_admission=s.weight_kg,
                    weight_discharge=round(s.weight_kg - 0.8, 1), hospital_admit_time=fmt_time(a.admit),
                    hospital_admission_source=_hospital_source(a.admit_source), unit_admit_time=fmt_time(s.intime),
                    unit_discharge_time=fmt_time(s.outtime), hospital_discharge_time=fmt_time(a.discharge),
                    hospital_discharge_status=None if a.current else "expired" if a.died else "alive")
                charted_at: dict = defaultdict(dict)       # one row per charting time, its vitals side by side
                for e in s.vitals:
                    if v.vitals[e.vital]["eicu"]:
                        charted_at[e.time][v.vitals[e.vital]["eicu"]] = e.value
                for vt in sorted({e.time for e in s.vitals if e.vital != "weight"}):
                    add("vital_signs", unit_id=uid, **charted_at.get(vt, {}), vital_time=fmt_time(vt))
                for f in s.fluids:
                    spec = (v.inputs if f.direction == "intake" else v.outputs)[f.item]
                    add("fluid_balance", unit_id=uid, fluid_path=FLUID_PATH[f.direction].format(spec["eicu"]),
                        fluid_label=spec["eicu"], fluid_value_numeric=f.amount, fluid_balance_time=fmt_time(f.time))
            first_uid = stays[0][0]
            cost = lambda kind, eid, t, mean: add(  # noqa: E731
                "cost", hosp_id=hosp, unit_id=first_uid, event_type=kind, event_id=eid, cost_time=fmt_time(t),
                cost_amount=seeded_amount(seed, "eicu/" + kind, eid, mean))
            for d in a.diagnoses:
                c = v.all_conditions[d.key]
                cid = add("condition", unit_id=first_uid, condition_name=condition_string(c, seed, hosp),
                          condition_time=fmt_time(d.time),
                          icd9_code=f"{_dotted(c.icd9.lower(), 9)}, {_dotted(c.icd10.lower(), 10)}")
                cost("condition", cid, d.time, 25.0)
            for e in a.procedures:
                proc = v.all_procedures[e.key]
                tid = add("treatment", unit_id=first_uid, treatment_name=proc.eicu, treatment_time=fmt_time(e.time))
                cost("treatment", tid, e.time, proc.cost)
            for when, name in drug_treatments(a.medications):
                tid = add("treatment", unit_id=first_uid, treatment_name=name, treatment_time=fmt_time(when))
                cost("treatment", tid, when, 60.0)
            for e in a.labs:
                lid = add("lab", unit_id=first_uid, lab_name=v.all_labs[e.lab]["eicu"], lab_result=e.value,
                          lab_result_time=fmt_time(e.time))
                cost("lab", lid, e.time, 12.0)
            for m in a.medications:
                drug = v.all_drugs[m.drug]
                mid = add("prescription", unit_id=first_uid, drug_name=drug_string(drug, m.dose),
                          dosage=f"{m.dose:g} {drug.unit}", administration_route=ROUTE_TEXT.get(drug.route, drug.route),
                          medication_start_time=fmt_time(m.start), medication_stop_time=fmt_time(m.end))
                cost("prescription", mid, m.start, 8.0)
            for mi in a.micro:
                add("microbiology", unit_id=first_uid, culture_site=v.micro[mi.kind]["eicu_site"],
                    organism=mi.organism or "no growth", culture_taken_time=fmt_time(mi.time))
            for drug_name, reaction in a.allergies:
                add("allergy_reaction", unit_id=first_uid, drug_name=drug_name, allergy_name=reaction,
                    allergy_time=fmt_time(a.admit))
    return set()


def _hospital_source(mimic_source: str) -> str:
    return {"emergency room": "emergency department", "transfer from hospital": "other hospital",
            "procedure site": "operating room", "pacu": "recovery room"}.get(mimic_source, "direct admit")
