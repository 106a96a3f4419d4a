"""EHRAgent's databases: EHRSQL MIMIC-III, EHRSQL eICU and TREQS, rendered from the same world as MIMIC-IV* and
eICU*: their schemas as EHRSQL's DDL and TREQS's code make them, EHRSQL's conventions, and one world behind all."""
from __future__ import annotations

import sqlite3
from collections import Counter
from datetime import datetime, timedelta

import pytest

from ehrbench.schemas import WorldSpec
from ehrbench.schemas.build import build_in_process
from ehrbench.world.generator import WorldSize, generate_world

SPEC = WorldSpec(seed=7, size=WorldSize(mimic_patients=60, eicu_patients=40, eicu_hospitals=3), dictionary="used")

# Table -> columns in order, as glee4810/EHRSQL's dataset/ehrsql/<db>/<db>.sql and TREQS's process_tables.py write them.
EXPECTED = {
    "ehrsql_mimic_iii": {
        "PATIENTS": "ROW_ID SUBJECT_ID GENDER DOB DOD",
        "ADMISSIONS": "ROW_ID SUBJECT_ID HADM_ID ADMITTIME DISCHTIME ADMISSION_TYPE ADMISSION_LOCATION "
                      "DISCHARGE_LOCATION INSURANCE LANGUAGE MARITAL_STATUS ETHNICITY AGE",
        "D_ICD_DIAGNOSES": "ROW_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
        "D_ICD_PROCEDURES": "ROW_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
        "D_LABITEMS": "ROW_ID ITEMID LABEL",
        "D_ITEMS": "ROW_ID ITEMID LABEL LINKSTO",
        "DIAGNOSES_ICD": "ROW_ID SUBJECT_ID HADM_ID ICD9_CODE CHARTTIME",
        "PROCEDURES_ICD": "ROW_ID SUBJECT_ID HADM_ID ICD9_CODE CHARTTIME",
        "LABEVENTS": "ROW_ID SUBJECT_ID HADM_ID ITEMID CHARTTIME VALUENUM VALUEUOM",
        "PRESCRIPTIONS": "ROW_ID SUBJECT_ID HADM_ID STARTDATE ENDDATE DRUG DOSE_VAL_RX DOSE_UNIT_RX ROUTE",
        "COST": "ROW_ID SUBJECT_ID HADM_ID EVENT_TYPE EVENT_ID CHARGETIME COST",
        "CHARTEVENTS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID ITEMID CHARTTIME VALUENUM VALUEUOM",
        "INPUTEVENTS_CV": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID CHARTTIME ITEMID AMOUNT",
        "OUTPUTEVENTS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID CHARTTIME ITEMID VALUE",
        "MICROBIOLOGYEVENTS": "ROW_ID SUBJECT_ID HADM_ID CHARTTIME SPEC_TYPE_DESC ORG_NAME",
        "ICUSTAYS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID FIRST_CAREUNIT LAST_CAREUNIT FIRST_WARDID LAST_WARDID "
                    "INTIME OUTTIME",
        "TRANSFERS": "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID EVENTTYPE CAREUNIT WARDID INTIME OUTTIME",
    },
    "ehrsql_eicu": {
        "patient": "uniquepid patienthealthsystemstayid patientunitstayid gender age ethnicity hospitalid wardid "
                   "admissionheight admissionweight dischargeweight hospitaladmittime hospitaladmitsource "
                   "unitadmittime unitdischargetime hospitaldischargetime hospitaldischargestatus",
        "diagnosis": "diagnosisid patientunitstayid diagnosisname diagnosistime icd9code",
        "treatment": "treatmentid patientunitstayid treatmentname treatmenttime",
        "lab": "labid patientunitstayid labname labresult labresulttime",
        "medication": "medicationid patientunitstayid drugname dosage routeadmin drugstarttime drugstoptime",
        "cost": "costid uniquepid patienthealthsystemstayid eventtype eventid chargetime cost",
        "allergy": "allergyid patientunitstayid drugname allergyname allergytime",
        "intakeoutput": "intakeoutputid patientunitstayid cellpath celllabel cellvaluenumeric intakeoutputtime",
        "microlab": "microlabid patientunitstayid culturesite organism culturetakentime",
        "vitalperiodic": "vitalperiodicid patientunitstayid temperature sao2 heartrate respiration systemicsystolic "
                         "systemicdiastolic systemicmean observationtime",
    },
    "treqs": {
        "DEMOGRAPHIC": "SUBJECT_ID HADM_ID NAME MARITAL_STATUS AGE DOB GENDER LANGUAGE RELIGION ADMISSION_TYPE DAYS_STAY "
                       "INSURANCE ETHNICITY EXPIRE_FLAG ADMISSION_LOCATION DISCHARGE_LOCATION DIAGNOSIS DOD DOB_YEAR "
                       "DOD_YEAR ADMITTIME DISCHTIME ADMITYEAR",
        "DIAGNOSES": "SUBJECT_ID HADM_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
        "PROCEDURES": "SUBJECT_ID HADM_ID ICD9_CODE SHORT_TITLE LONG_TITLE",
        "PRESCRIPTIONS": "SUBJECT_ID HADM_ID ICUSTAY_ID DRUG_TYPE DRUG FORMULARY_DRUG_CD ROUTE DRUG_DOSE",
        "LAB": "SUBJECT_ID HADM_ID ITEMID CHARTTIME FLAG VALUE_UNIT LABEL FLUID CATEGORY",
    },
}
NOW = "2105-12-31 23:59:00"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("ehrsql")
    return {db: sqlite3.connect(build_in_process(db, SPEC, root / f"{db}.sqlite", chunk_patients=9))
            for db in ("mimic_iv_star", "eicu_star", *EXPECTED)}


@pytest.mark.parametrize("db", list(EXPECTED))
def test_tables_and_columns_are_ehrsql_s_and_treqs_s(built, db):
    con = built[db]
    tables = {name: " ".join(r[1] for r in con.execute(f'PRAGMA table_info("{name}")'))
              for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == EXPECTED[db]


def test_ehrsql_mimic_iii_follows_ehrsql_s_conventions(built):
    con = built["ehrsql_mimic_iii"]
    times = [t for (t,) in con.execute("SELECT ADMITTIME FROM ADMISSIONS UNION ALL SELECT CHARTTIME FROM LABEVENTS "
                                       "UNION ALL SELECT INTIME FROM ICUSTAYS UNION ALL SELECT STARTDATE FROM PRESCRIPTIONS")]
    assert min(times) >= "2100-01-01" and max(times) <= NOW
    first_years = Counter(y for (y,) in con.execute(
        "SELECT substr(MIN(ADMITTIME), 1, 4) FROM ADMISSIONS GROUP BY SUBJECT_ID"))
    assert len(first_years) >= 4 and max(first_years, key=first_years.get) >= "2104"      # later years likelier
    open_admissions = con.execute("SELECT HADM_ID, DISCHARGE_LOCATION, ADMITTIME FROM ADMISSIONS "
                                  "WHERE DISCHTIME IS NULL").fetchall()
    assert open_admissions and all(loc is None and t.startswith("2105") for _, loc, t in open_admissions)
    opened = tuple(h for h, *_ in open_admissions)
    assert con.execute(f"SELECT COUNT(*) FROM PROCEDURES_ICD WHERE HADM_ID IN {opened + (0,)}").fetchone() == (0,)
    # EHRSQL's added columns: diagnoses charted at admission, procedures at discharge; AGE on ADMISSIONS
    assert con.execute("SELECT COUNT(*) FROM DIAGNOSES_ICD d JOIN ADMISSIONS a USING (HADM_ID) "
                       "WHERE d.CHARTTIME != a.ADMITTIME").fetchone() == (0,)
    assert con.execute("SELECT COUNT(*) FROM PROCEDURES_ICD p JOIN ADMISSIONS a USING (HADM_ID) "
                       "WHERE p.CHARTTIME != a.DISCHTIME").fetchone() == (0,)
    ages = con.execute("SELECT MIN(AGE), MAX(AGE) FROM ADMISSIONS").fetchone()
    assert 10 < ages[0] <= ages[1] < 100
    # values lowercase everywhere
    for table, column in (("ADMISSIONS", "ADMISSION_TYPE"), ("PRESCRIPTIONS", "DRUG"), ("D_ITEMS", "LABEL"),
                          ("D_ICD_DIAGNOSES", "SHORT_TITLE"), ("ICUSTAYS", "FIRST_CAREUNIT")):
        assert con.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} != lower({column})").fetchone() == (0,)
    # CareVue chart items, including the nine EHRSQL keeps
    assert {211, 834, 618, 677, 51, 8368, 52, 762, 920} <= {i for (i,) in con.execute("SELECT ITEMID FROM D_ITEMS")}


@pytest.mark.parametrize("db, event_tables", [
    ("ehrsql_mimic_iii", {"diagnoses_icd": ("DIAGNOSES_ICD", "ROW_ID", "ICD9_CODE"),
                          "procedures_icd": ("PROCEDURES_ICD", "ROW_ID", "ICD9_CODE"),
                          "labevents": ("LABEVENTS", "ROW_ID", "ITEMID"),
                          "prescriptions": ("PRESCRIPTIONS", "ROW_ID", "DRUG")}),
    ("ehrsql_eicu", {"diagnosis": ("diagnosis", "diagnosisid", "diagnosisname"),
                     "lab": ("lab", "labid", "labname"), "treatment": ("treatment", "treatmentid", "treatmentname"),
                     "medication": ("medication", "medicationid", "drugname")}),
])
def test_cost_charges_every_event_at_one_price_per_concept(built, db, event_tables):
    con = built[db]
    cost_cols = ("EVENT_TYPE", "EVENT_ID", "COST") if db == "ehrsql_mimic_iii" else ("eventtype", "eventid", "cost")
    kinds = {k for (k,) in con.execute(f"SELECT DISTINCT {cost_cols[0]} FROM cost")}
    assert kinds == set(event_tables)
    for kind, (table, key, concept) in event_tables.items():
        events = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        joined = con.execute(f"SELECT COUNT(*), COUNT(DISTINCT t.{concept}) FROM cost c JOIN {table} t "
                             f"ON c.{cost_cols[1]} = t.{key} WHERE c.{cost_cols[0]} = '{kind}'").fetchone()
        assert joined[0] == events > 0, kind                 # every event charged once, every charge an event
        prices = con.execute(f"SELECT COUNT(DISTINCT c.{cost_cols[2]}) FROM cost c JOIN {table} t ON "
                             f"c.{cost_cols[1]} = t.{key} WHERE c.{cost_cols[0]} = '{kind}' "
                             f"GROUP BY t.{concept}").fetchall()
        assert {n for (n,) in prices} == {1}, kind           # one price per code, item or drug
        assert len(prices) == joined[1]


def test_one_world_behind_every_rendering(built):
    """A patient's diabetes, HbA1c values and metformin orders agree between MIMIC-IV*, EHRSQL MIMIC-III and TREQS;
    EHRSQL eICU is eICU* renamed, each patient's times moved by one whole number of days."""
    iv, iii, treqs = built["mimic_iv_star"], built["ehrsql_mimic_iii"], built["treqs"]
    world = generate_world(SPEC.seed, SPEC.size)
    iv_ids = [i for (i,) in iv.execute("SELECT patientid FROM demographics ORDER BY recordid")]
    iii_ids = [i for (i,) in iii.execute("SELECT SUBJECT_ID FROM PATIENTS ORDER BY ROW_ID")]
    assert len(iv_ids) == len(iii_ids) == SPEC.size.n_mimic
    diabetic = 0
    for patient, a, b in zip(world.mimic_patients(), iv_ids, iii_ids):
        hba1c_iv = sorted(v for (v,) in iv.execute(
            "SELECT resultvalue FROM labresults WHERE patientid = ? AND itemcode = 50852", (a,)))
        hba1c_iii = sorted(v for (v,) in iii.execute(
            "SELECT VALUENUM FROM LABEVENTS WHERE SUBJECT_ID = ? AND ITEMID = 50852", (b,)))
        assert hba1c_iv == hba1c_iii
        metformin = [iv.execute("SELECT COUNT(*) FROM medicationorders WHERE patientid = ? AND medicationname = "
                                "'metformin'", (a,)).fetchone()[0],
                     iii.execute("SELECT COUNT(*) FROM PRESCRIPTIONS WHERE SUBJECT_ID = ? AND DRUG = 'metformin'",
                                 (b,)).fetchone()[0]]
        assert metformin[0] == metformin[1]
        has_diabetes = iii.execute("SELECT COUNT(*) FROM DIAGNOSES_ICD WHERE SUBJECT_ID = ? AND ICD9_CODE = '25000'",
                                   (b,)).fetchone()[0] > 0
        assert not has_diabetes or "diabetes" in patient.conditions
        assert has_diabetes == (iv.execute("SELECT COUNT(*) FROM admissiondiagnoses WHERE patientid = ? AND icdcode "
                                           "IN ('25000', 'e119')", (a,)).fetchone()[0] > 0)
        diabetic += has_diabetes
        # TREQS: the same admissions, less the one still open, with the same ids
        finished = {h for (h,) in iii.execute("SELECT HADM_ID FROM ADMISSIONS WHERE SUBJECT_ID = ? "
                                              "AND DISCHTIME IS NOT NULL", (b,))}
        assert {h for (h,) in treqs.execute("SELECT HADM_ID FROM DEMOGRAPHIC WHERE SUBJECT_ID = ?", (b,))} == finished
    assert diabetic > 0
    # eICU: eICU* renamed, row for row
    star, ehrsql = built["eicu_star"], built["ehrsql_eicu"]
    for a, b in (("condition", "diagnosis"), ("lab", "lab"), ("prescription", "medication"),
                 ("vital_signs", "vitalperiodic"), ("icupatient", "patient"), ("cost", "cost")):
        assert star.execute(f"SELECT COUNT(*) FROM {a}").fetchone() == ehrsql.execute(f"SELECT COUNT(*) FROM {b}").fetchone()
    pairs = star.execute("SELECT unit_id, patient_id, unit_admit_time FROM icupatient ORDER BY unit_id").fetchall()
    moved = {r[0]: r[1:] for r in ehrsql.execute("SELECT patientunitstayid, uniquepid, unitadmittime FROM patient")}
    shifts = {}
    for unit, pid, t in pairs:
        assert moved[unit][0] == pid
        delta = datetime.fromisoformat(moved[unit][1]) - datetime.fromisoformat(t)
        assert delta.seconds == 0                              # whole days
        assert shifts.setdefault(pid, delta) == delta          # one shift per patient
    assert star.execute("SELECT lab_name, lab_result FROM lab ORDER BY lab_id").fetchall() == \
        ehrsql.execute("SELECT labname, labresult FROM lab ORDER BY labid").fetchall()


def test_treqs_types_make_mimicsql_s_quoted_comparisons_numeric(built):
    con = built["treqs"]
    # MIMICSQL writes every value double-quoted: on INTEGER columns the comparison must still be numeric
    assert con.execute('SELECT COUNT(*) FROM DEMOGRAPHIC WHERE DEMOGRAPHIC."AGE" < "71"').fetchone() == \
        con.execute("SELECT COUNT(*) FROM DEMOGRAPHIC WHERE AGE < 71").fetchone()
    assert con.execute("SELECT COUNT(*) FROM DEMOGRAPHIC WHERE DAYS_STAY IS NULL OR DISCHTIME IS NULL").fetchone() == (0,)
    assert {t for (t,) in con.execute("SELECT DISTINCT typeof(ICD9_CODE) FROM DIAGNOSES")} == {"text"}
    assert {t for (t,) in con.execute("SELECT DISTINCT typeof(ICD9_CODE) FROM PROCEDURES")} == {"integer"}
    assert {g for (g,) in con.execute("SELECT DISTINCT GENDER FROM DEMOGRAPHIC")} <= {"F", "M"}
    names = con.execute("SELECT SUBJECT_ID, COUNT(DISTINCT NAME) FROM DEMOGRAPHIC GROUP BY SUBJECT_ID").fetchall()
    assert all(n == 1 for _, n in names)                       # one synthetic name per patient
    assert con.execute("SELECT COUNT(*) FROM LAB WHERE VALUE_UNIT IS NULL OR LABEL IS NULL").fetchone() == (0,)


def test_treqs_keeps_mimic_iii_s_own_clock(built):
    """Each patient moved by whole 52-week blocks of their own (weekday, season and intervals kept), first admissions
    spread over 2100-2200, where EHRSQL MIMIC-III puts everybody in 2100-2105; over 89, born 300 years before."""
    treqs, iii = built["treqs"], built["ehrsql_mimic_iii"]
    world = generate_world(SPEC.seed, SPEC.size)
    subjects = [i for (i,) in iii.execute("SELECT SUBJECT_ID FROM PATIENTS ORDER BY ROW_ID")]
    shifts, checked = set(), 0
    for patient, subject in zip(world.mimic_patients(), subjects):
        stays = [a for a in patient.admissions if not a.current]
        rendered = treqs.execute("SELECT ADMITTIME, DISCHTIME FROM DEMOGRAPHIC WHERE SUBJECT_ID = ? ORDER BY ADMITTIME",
                                 (subject,)).fetchall()
        assert len(rendered) == len(stays)
        deltas = set()
        for a, (admit, disch) in zip(stays, rendered):
            deltas.add(datetime.fromisoformat(admit) - a.admit)
            assert datetime.fromisoformat(disch) - datetime.fromisoformat(admit) == a.discharge - a.admit
            checked += 1
        assert len(deltas) <= 1                                  # one shift per patient
        for delta in deltas:
            assert delta % timedelta(weeks=52) == timedelta(0)   # whole 52-week blocks: the weekday is the world's
            shifts.add(delta)
    assert checked > 0 and len(shifts) > 5
    years = [int(t[:4]) for (t,) in treqs.execute("SELECT MIN(ADMITTIME) FROM DEMOGRAPHIC GROUP BY SUBJECT_ID")]
    assert min(years) >= 2100 and max(years) <= 2202 and max(years) - min(years) > 30
    first_ages = [age for (age,) in treqs.execute("SELECT MIN(AGE) FROM DEMOGRAPHIC GROUP BY SUBJECT_ID")]
    assert all(age <= 89 or age >= 300 for age in first_ages)   # over 89 at the first admission: 300 and more


@pytest.mark.parametrize("db", list(EXPECTED))
def test_chunking_does_not_change_the_file(tmp_path, db):
    one = build_in_process(db, SPEC, tmp_path / "one.sqlite", chunk_patients=10_000).read_bytes()
    assert build_in_process(db, SPEC, tmp_path / "four.sqlite", chunk_patients=4).read_bytes() == one
