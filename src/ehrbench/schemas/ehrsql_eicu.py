"""EHRSQL eICU (glee4810/EHRSQL, dataset/ehrsql/eicu/eicu.sql): every ICU stay of the world as EHRSQL's 10-table eICU.

EHR-ChatQA's eICU* is EHRSQL's eICU with its tables and columns renamed (the paper's Table 13), so this rendering is
eICU*'s rows under EHRSQL's names, with the same ids (uniquepid like '035-22051', patienthealthsystemstayid,
patientunitstayid) and what EHRSQL's preprocessing does on top: every patient on EHRSQL's clock (`ehrsql_clock`),
ages above 89 written as 90, the discharge weight NULL while the patient is in the hospital, and a COST table
priced as EHRSQL prices it: one fixed price per diagnosis, lab, treatment and drug name around a per-type mean (lab
charges use the diagnosis mean, as EHRSQL's code does), charged to the patient and hospital stay. No hospital table.
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import BIGINT, INT, NUMERIC, TIMESTAMP, VARCHAR, Column, Double, ForeignKey, MetaData, Table

from ..world.generator import WorldSize
from ..world.model import Patient
from . import eicu_star
from .ehrsql_clock import shift_of
from .ehrsql_mimic_iii import concept_price, cost_means
from .writer import Ids, Rows

DB_ID = "ehrsql_eicu"
ID_POOLS = eicu_star.ID_POOLS           # the same ids as eICU*: the same patients, stays and units


def patient_range(size: WorldSize) -> tuple[int, int]:
    """eICU*'s patients, or where EHRSQL's sample size is set the first `size.ehrsql_patients` of the eICU sites'."""
    if size.ehrsql_patients is None:
        return eicu_star.patient_range(size)
    return size.n_mimic, size.n_mimic + min(size.n_eicu, size.ehrsql_patients)

# eICU* table -> (EHRSQL table, eICU* column -> EHRSQL column): Table 13 of the EHR-ChatQA paper, read backwards.
RENAMES = {
    "icupatient": ("patient", {
        "patient_id": "uniquepid", "hosp_id": "patienthealthsystemstayid", "unit_id": "patientunitstayid",
        "gender": "gender", "age": "age", "ethnicity": "ethnicity", "hospital_id": "hospitalid", "ward_id": "wardid",
        "height_admission": "admissionheight", "weight_admission": "admissionweight",
        "weight_discharge": "dischargeweight", "hospital_admit_time": "hospitaladmittime",
        "hospital_admission_source": "hospitaladmitsource", "unit_admit_time": "unitadmittime",
        "unit_discharge_time": "unitdischargetime", "hospital_discharge_time": "hospitaldischargetime",
        "hospital_discharge_status": "hospitaldischargestatus"}),
    "condition": ("diagnosis", {"condition_id": "diagnosisid", "unit_id": "patientunitstayid",
                                "condition_name": "diagnosisname", "condition_time": "diagnosistime",
                                "icd9_code": "icd9code"}),
    "treatment": ("treatment", {"treatment_id": "treatmentid", "unit_id": "patientunitstayid",
                                "treatment_name": "treatmentname", "treatment_time": "treatmenttime"}),
    "lab": ("lab", {"lab_id": "labid", "unit_id": "patientunitstayid", "lab_name": "labname",
                    "lab_result": "labresult", "lab_result_time": "labresulttime"}),
    "prescription": ("medication", {"prescription_id": "medicationid", "unit_id": "patientunitstayid",
                                    "drug_name": "drugname", "dosage": "dosage", "administration_route": "routeadmin",
                                    "medication_start_time": "drugstarttime", "medication_stop_time": "drugstoptime"}),
    "allergy_reaction": ("allergy", {"allergy_id": "allergyid", "unit_id": "patientunitstayid",
                                     "drug_name": "drugname", "allergy_name": "allergyname",
                                     "allergy_time": "allergytime"}),
    "fluid_balance": ("intakeoutput", {"fluid_balance_id": "intakeoutputid", "unit_id": "patientunitstayid",
                                       "fluid_path": "cellpath", "fluid_label": "celllabel",
                                       "fluid_value_numeric": "cellvaluenumeric",
                                       "fluid_balance_time": "intakeoutputtime"}),
    "microbiology": ("microlab", {"microbiology_id": "microlabid", "unit_id": "patientunitstayid",
                                  "culture_site": "culturesite", "organism": "organism",
                                  "culture_taken_time": "culturetakentime"}),
    "vital_signs": ("vitalperiodic", {"vital_sign_id": "vitalperiodicid", "unit_id": "patientunitstayid",
                                      "temperature": "temperature", "sao2": "sao2", "heart_rate": "heartrate",
                                      "respiration_rate": "respiration", "systolic_bp": "systemicsystolic",
                                      "diastolic_bp": "systemicdiastolic", "mean_bp": "systemicmean",
                                      "vital_time": "observationtime"}),
    "cost": ("cost", {"cost_id": "costid", "event_type": "eventtype", "event_id": "eventid",
                      "cost_time": "chargetime"}),
}
# eICU* event types -> EHRSQL's, the table naming each event, and the mean (index into `cost_means`) of its price
EVENTS = {"condition": ("diagnosis", "condition_name", "diagnoses_icd"), "lab": ("lab", "lab_name", "diagnoses_icd"),
          "treatment": ("treatment", "treatment_name", "procedures_icd"),
          "prescription": ("medication", "drug_name", "prescriptions")}


def metadata() -> MetaData:
    md = MetaData()
    I, V, TS = INT, VARCHAR, TIMESTAMP
    stay = lambda: Column("patientunitstayid", I, ForeignKey("patient.patientunitstayid"), nullable=False)  # noqa: E731
    Table("patient", md, Column("uniquepid", V(10), nullable=False), Column("patienthealthsystemstayid", I, nullable=False),
          Column("patientunitstayid", I, primary_key=True, autoincrement=False), Column("gender", V(25), nullable=False),
          Column("age", V(10), nullable=False), Column("ethnicity", V(50)), Column("hospitalid", I, nullable=False),
          Column("wardid", I, nullable=False), Column("admissionheight", NUMERIC(10, 2)),
          Column("admissionweight", NUMERIC(10, 2)), Column("dischargeweight", NUMERIC(10, 2)),
          Column("hospitaladmittime", TS, nullable=False), Column("hospitaladmitsource", V(30), nullable=False),
          Column("unitadmittime", TS, nullable=False), Column("unitdischargetime", TS),
          Column("hospitaldischargetime", TS), Column("hospitaldischargestatus", V(10)))
    Table("diagnosis", md, Column("diagnosisid", I, primary_key=True, autoincrement=False), stay(),
          Column("diagnosisname", V(200), nullable=False), Column("diagnosistime", TS, nullable=False),
          Column("icd9code", V(100)))
    Table("treatment", md, Column("treatmentid", I, primary_key=True, autoincrement=False), stay(),
          Column("treatmentname", V(200), nullable=False), Column("treatmenttime", TS, nullable=False))
    Table("lab", md, Column("labid", I, primary_key=True, autoincrement=False), stay(),
          Column("labname", V(256), nullable=False), Column("labresult", NUMERIC(11, 4), nullable=False),
          Column("labresulttime", TS, nullable=False))
    Table("medication", md, Column("medicationid", I, primary_key=True, autoincrement=False), stay(),
          Column("drugname", V(220), nullable=False), Column("dosage", V(60), nullable=False),
          Column("routeadmin", V(120), nullable=False), Column("drugstarttime", TS), Column("drugstoptime", TS))
    Table("cost", md, Column("costid", I, primary_key=True, autoincrement=False), Column("uniquepid", V(10), nullable=False),
          Column("patienthealthsystemstayid", I, nullable=False), Column("eventtype", V(20), nullable=False),
          Column("eventid", I, nullable=False), Column("chargetime", TS, nullable=False),
          Column("cost", Double, nullable=False))
    Table("allergy", md, Column("allergyid", I, primary_key=True, autoincrement=False), stay(),
          Column("drugname", V(255)), Column("allergyname", V(255), nullable=False),
          Column("allergytime", TS, nullable=False))
    Table("intakeoutput", md, Column("intakeoutputid", I, primary_key=True, autoincrement=False), stay(),
          Column("cellpath", V(500), nullable=False), Column("celllabel", V(255), nullable=False),
          Column("cellvaluenumeric", NUMERIC(12, 4), nullable=False), Column("intakeoutputtime", TS, nullable=False))
    Table("microlab", md, Column("microlabid", I, primary_key=True, autoincrement=False), stay(),
          Column("culturesite", V(255), nullable=False), Column("organism", V(255), nullable=False),
          Column("culturetakentime", TS, nullable=False))
    Table("vitalperiodic", md, Column("vitalperiodicid", BIGINT, primary_key=True, autoincrement=False), stay(),
          Column("temperature", NUMERIC(11, 4)), Column("sao2", I), Column("heartrate", I), Column("respiration", I),
          Column("systemicsystolic", I), Column("systemicdiastolic", I), Column("systemicmean", I),
          Column("observationtime", TS, nullable=False))
    return md


def render_shared(seed: int, size: WorldSize, dictionary: str, used: set, rows: Rows) -> None:
    """Nothing: EHRSQL's eICU has no dictionary or hospital table."""


def render_patients(patients: list[Patient], seed: int, rows: Rows, ids: Ids) -> set:
    """The chunk rendered as eICU*, then renamed, moved onto EHRSQL's clock and priced as EHRSQL prices."""
    star = Rows(eicu_star.metadata(), {table: rows.start.get(RENAMES[table][0], 0) for table in RENAMES})
    eicu_star.render_patients(patients, seed, star, ids)
    # eICU* hands patients their uniquepid in chunk order, so the n-th new uniquepid is the n-th ICU patient
    icu_patients = [p for p in patients if any(a.icu_stays for a in p.admissions)]
    uniquepids = list(dict.fromkeys(r["patient_id"] for r in star.tables["icupatient"]))
    assert len(uniquepids) == len(icu_patients), "eICU* rendered a patient without an ICU stay"
    shift = {pid: shift_of(seed, p) for pid, p in zip(uniquepids, icu_patients)}
    stay_patient = {r["unit_id"]: r["patient_id"] for r in star.tables["icupatient"]}
    hosp_patient = {r["hosp_id"]: r["patient_id"] for r in star.tables["icupatient"]}
    names = {kind: {r[f"{kind}_id"]: r[column] for r in star.tables[kind]}
             for kind, (_, column, _) in EVENTS.items()}
    means = cost_means(seed)

    def moved(value: str | None, pid: str) -> str | None:
        return None if value is None else (datetime.fromisoformat(value) + shift[pid]).isoformat(" ", "seconds")

    for table, (target, columns) in RENAMES.items():
        for r in star.tables[table]:
            pid = hosp_patient[r["hosp_id"]] if table == "cost" else stay_patient[r["unit_id"]]
            out = {new: moved(r[old], pid) if new.endswith("time") else r[old] for old, new in columns.items()}
            if table == "icupatient":
                out["age"] = "90" if out["age"] == "> 89" else out["age"]
                if out["hospitaldischargetime"] is None:
                    out["dischargeweight"] = None
            elif table == "cost":
                eventtype, _, mean = EVENTS[r["event_type"]]
                out.update(uniquepid=pid, patienthealthsystemstayid=r["hosp_id"], eventtype=eventtype,
                           cost=concept_price(seed, eventtype, names[r["event_type"]][r["event_id"]], means[mean]))
            rows.add(target, **out)
    return set()
