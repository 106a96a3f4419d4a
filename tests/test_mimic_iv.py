"""MIMIC-IV under its own names (the rendering ClinSQL, AgentEHR and PhysAssistBench share): MIMIC-IV's tables and
columns, its clock and age convention, the same patients as MIMIC-IV*, and the DuckDB copy in MIMIC-IV's schemas."""
import sqlite3
from datetime import datetime

import duckdb
import pytest

from ehrbench.schemas import WorldSpec, build_database
from ehrbench.schemas.duckdb_export import export_duckdb
from ehrbench.world.generator import WorldSize, generate_world

SPEC = WorldSpec(seed=4, size=WorldSize(mimic_patients=30, eicu_patients=0, eicu_hospitals=1), dictionary="used")

# MIMIC-IV v3.1's columns for the tables ClinSQL's gold SQL reads most (patients, admissions, diagnoses_icd,
# icustays, labevents, chartevents, prescriptions, procedures_icd).
MIMIC_IV_COLUMNS = {
    "patients": ["subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"],
    "admissions": ["subject_id", "hadm_id", "admittime", "dischtime", "deathtime", "admission_type",
                   "admit_provider_id", "admission_location", "discharge_location", "insurance", "language",
                   "marital_status", "race", "edregtime", "edouttime", "hospital_expire_flag"],
    "diagnoses_icd": ["subject_id", "hadm_id", "seq_num", "icd_code", "icd_version"],
    "procedures_icd": ["subject_id", "hadm_id", "seq_num", "chartdate", "icd_code", "icd_version"],
    "icustays": ["subject_id", "hadm_id", "stay_id", "first_careunit", "last_careunit", "intime", "outtime", "los"],
    "labevents": ["labevent_id", "subject_id", "hadm_id", "specimen_id", "itemid", "order_provider_id", "charttime",
                  "storetime", "value", "valuenum", "valueuom", "ref_range_lower", "ref_range_upper", "flag",
                  "priority", "comments"],
    "chartevents": ["subject_id", "hadm_id", "stay_id", "caregiver_id", "charttime", "storetime", "itemid", "value",
                    "valuenum", "valueuom", "warning"],
    "inputevents": ["subject_id", "hadm_id", "stay_id", "caregiver_id", "starttime", "endtime", "storetime", "itemid",
                    "amount", "amountuom", "rate", "rateuom", "orderid", "linkorderid", "ordercategoryname",
                    "secondaryordercategoryname", "ordercomponenttypedescription", "ordercategorydescription",
                    "patientweight", "totalamount", "totalamountuom", "isopenbag", "continueinnextdept",
                    "statusdescription", "originalamount", "originalrate"],
    "outputevents": ["subject_id", "hadm_id", "stay_id", "caregiver_id", "charttime", "storetime", "itemid", "value",
                     "valueuom"],
    "microbiologyevents": ["microevent_id", "subject_id", "hadm_id", "micro_specimen_id", "order_provider_id",
                           "chartdate", "charttime", "spec_itemid", "spec_type_desc", "test_seq", "storedate",
                           "storetime", "test_itemid", "test_name", "org_itemid", "org_name", "isolate_num",
                           "quantity", "ab_itemid", "ab_name", "dilution_text", "dilution_comparison",
                           "dilution_value", "interpretation", "comments"],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("mimic_iv")
    paths = {db: build_database(db, SPEC, root) for db in ("mimic_iv", "mimic_iv_star")}
    yield {db: sqlite3.connect(p) for db, p in paths.items()} | {"paths": paths}


def test_tables_and_columns_are_mimic_iv_s(built):
    con = built["mimic_iv"]
    for table, columns in MIMIC_IV_COLUMNS.items():
        have = [r[1] for r in con.execute(f"PRAGMA table_info({table})") if r[1] != "row_id"]
        assert have == columns, table


def test_the_same_patients_admissions_and_stays_as_mimic_iv_star(built):
    iv, star = built["mimic_iv"], built["mimic_iv_star"]
    assert iv.execute("SELECT subject_id FROM patients ORDER BY subject_id").fetchall() == \
        star.execute("SELECT patientid FROM demographics ORDER BY patientid").fetchall()
    assert iv.execute("SELECT subject_id, hadm_id FROM admissions ORDER BY hadm_id").fetchall() == \
        star.execute("SELECT patientid, admissionid FROM hospitaladmissions ORDER BY admissionid").fetchall()
    assert iv.execute("SELECT hadm_id, stay_id FROM icustays ORDER BY stay_id").fetchall() == \
        star.execute("SELECT admissionid, icuadmissionid FROM icuepisodes ORDER BY icuadmissionid").fetchall()
    # the same codes per admission (MIMIC-IV* lowercases them) and the same lab values per item
    assert iv.execute("SELECT hadm_id, LOWER(icd_code), icd_version FROM diagnoses_icd ORDER BY 1, 2").fetchall() == \
        sorted(set(star.execute("SELECT admissionid, icdcode, codeversion FROM admissiondiagnoses").fetchall()))
    assert iv.execute("SELECT hadm_id, itemid, valuenum FROM labevents ORDER BY 1, 2, 3").fetchall() == \
        star.execute("SELECT admissionid, itemcode, resultvalue FROM labresults ORDER BY 1, 2, 3").fetchall()


def test_mimic_iv_s_clock_and_age_convention(built):
    """Each patient is moved by whole 52-week blocks; the age at an admission is anchor_age + its year -
    anchor_year (ClinSQL's gold SQL computes it so), within a year of the world's age (birthdays); over 89 is 91."""
    iv, star = built["mimic_iv"], built["mimic_iv_star"]
    world = generate_world(SPEC.seed, SPEC.size)
    ids = [i for (i,) in star.execute("SELECT patientid FROM demographics ORDER BY recordid")]
    shifts = set()
    for patient, subject in zip(world.mimic_patients(), ids):
        anchor_age, anchor_year = iv.execute("SELECT anchor_age, anchor_year FROM patients WHERE subject_id = ?",
                                             (subject,)).fetchone()
        admits = [datetime.fromisoformat(t) for (t,) in iv.execute(
            "SELECT admittime FROM admissions WHERE subject_id = ? ORDER BY admittime", (subject,))]
        assert len(admits) == len(patient.admissions)
        for a, admit in zip(patient.admissions, admits):
            delta = admit - a.admit
            assert delta.days % 364 == 0 and delta.seconds == 0
            shifts.add(delta)
            age = anchor_age + admit.year - anchor_year
            assert (age == 91 + admit.year - anchor_year) if a.age > 89 else abs(age - a.age) <= 1
        assert 2110 <= anchor_year <= 2215
    assert len(shifts) > 5


def test_items_labs_and_flags(built):
    iv = built["mimic_iv"]
    items = {i for (i,) in iv.execute("SELECT itemid FROM d_items")}
    assert {220045, 220210, 220277, 220052, 223762} <= items
    labs = dict(iv.execute("SELECT itemid, label FROM d_labitems"))
    assert labs[50912] == "Creatinine" and labs[51003] == "Troponin T" and labs[50983] == "Sodium"
    assert iv.execute("SELECT COUNT(*) FROM chartevents WHERE itemid = 220045").fetchone()[0] > 0
    rows = iv.execute("SELECT valuenum, ref_range_lower, ref_range_upper, flag FROM labevents "
                      "WHERE ref_range_lower > 0").fetchall()
    assert rows and any(f == "abnormal" for *_, f in rows)
    for value, lo, hi, flag in rows:                     # abnormal exactly outside the reference range (rounded)
        if not (abs(value - lo) < 0.01 or abs(value - hi) < 0.01):
            assert (flag == "abnormal") == (not lo <= value <= hi), (value, lo, hi, flag)
    assert {u for (u,) in iv.execute("SELECT DISTINCT first_careunit FROM icustays")} <= {
        "Medical Intensive Care Unit (MICU)", "Surgical Intensive Care Unit (SICU)",
        "Cardiac Vascular Intensive Care Unit (CVICU)", "Coronary Care Unit (CCU)",
        "Medical/Surgical Intensive Care Unit (MICU/SICU)", "Trauma SICU (TSICU)",
        "Neuro Surgical Intensive Care Unit (Neuro SICU)"}


def test_the_duckdb_copy_has_mimic_iv_s_schemas_and_types(built):
    path = export_duckdb("mimic_iv", built["paths"]["mimic_iv"])
    assert export_duckdb("mimic_iv", built["paths"]["mimic_iv"]) == path          # written once
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = set(con.execute("SELECT table_schema || '.' || table_name FROM information_schema.tables").fetchall())
        assert {("mimiciv_hosp.patients",), ("mimiciv_icu.chartevents",), ("mimiciv_derived.charlson",)} <= tables
        for table, module in (("admissions", "hosp"), ("labevents", "hosp"), ("icustays", "icu")):
            assert con.execute(f"SELECT COUNT(*) FROM mimiciv_{module}.{table}").fetchone() == \
                built["mimic_iv"].execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        kinds = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = 'admissions'").fetchall())
        assert kinds["admittime"] == "TIMESTAMP" and kinds["hadm_id"] == "BIGINT"
        los = con.execute("SELECT AVG(date_diff('hour', admittime, dischtime)) FROM mimiciv_hosp.admissions "
                          "WHERE dischtime IS NOT NULL").fetchone()[0]
        assert 24 <= los <= 24 * 12
    finally:
        con.close()


def test_chunking_does_not_change_the_file(tmp_path):
    from ehrbench.schemas.build import build_in_process

    one = build_in_process("mimic_iv", SPEC, tmp_path / "one.sqlite", chunk_patients=10_000).read_bytes()
    assert build_in_process("mimic_iv", SPEC, tmp_path / "four.sqlite", chunk_patients=7).read_bytes() == one


def test_the_guarded_duckdb_database_names_mimic_iv_s_schemas(built):
    """The agent-facing DuckDB database (read-only, limited) sees tables in MIMIC-IV's schemas by qualified name."""
    from ehrbench.db.duckdb_database import DuckDatabase
    from ehrbench.db.limits import QueryError

    db = DuckDatabase(export_duckdb("mimic_iv", built["paths"]["mimic_iv"]), "mimic_iv")
    try:
        names = db.table_names()
        assert "mimiciv_hosp.patients" in names and "mimiciv_icu.chartevents" in names
        assert db.column_names("mimiciv_hosp.patients")[:3] == ["subject_id", "gender", "anchor_age"]
        info = db.table_info("mimiciv_icu.icustays")
        assert "CREATE TABLE" in info and "stay_id" in info
        units = db.distinct_values("mimiciv_icu.icustays", "first_careunit")
        assert units and all(u.endswith(")") for u in units)          # MIMIC-IV's "... (MICU)" names
        assert db.execute("SELECT COUNT(*) FROM mimiciv_hosp.patients").rows == [(30,)]
        with pytest.raises(QueryError, match="read-only"):
            db.execute("DROP TABLE mimiciv_hosp.patients")
    finally:
        db.close()


@pytest.mark.parametrize("codes, version, age, expected", [
    # MI + diabetes with complications + metastasis (the severer forms count), 72 years old: 3 + 1 + 2 + 6
    (["I252", "E1122", "C787", "I10"], 10, 72, {"myocardial_infarct": 1, "diabetes_with_cc": 1,
                                              "metastatic_solid_tumor": 1, "charlson_comorbidity_index": 12}),
    # heart failure, liver disease, diabetes without complications, 45 years old: 0 + 1 + 1 + 1
    (["4280", "25000", "5715"], 9, 45, {"congestive_heart_failure": 1, "mild_liver_disease": 1,
                                        "diabetes_without_cc": 1, "charlson_comorbidity_index": 3}),
    # cancer and its metastasis count once, as the metastasis (6); mild and severe liver disease as severe (3)
    (["1539", "1977", "5715", "4560"], 9, 81, {"malignant_cancer": 1, "metastatic_solid_tumor": 1,
                                               "mild_liver_disease": 1, "severe_liver_disease": 1,
                                               "charlson_comorbidity_index": 4 + 6 + 3}),
    (["I10", "J189"], 10, 30, {"charlson_comorbidity_index": 0}),
])
def test_charlson_as_mimic_iv_s_derived_table_scores_it(codes, version, age, expected):
    from ehrbench.schemas.mimic_iv import CHARLSON_CATEGORIES, charlson

    got = charlson(codes, version, age)
    assert {k: got[k] for k in expected} == expected
    assert all(got[c] == 0 for c in CHARLSON_CATEGORIES if c not in expected)


def test_derived_age_and_charlson_rows(built):
    iv = built["mimic_iv"]
    rows = iv.execute("""SELECT g.age, p.anchor_age + CAST(substr(a.admittime, 1, 4) AS INTEGER) - p.anchor_year,
                                c.age_score, c.charlson_comorbidity_index
                         FROM age g JOIN admissions a USING (hadm_id) JOIN patients p ON p.subject_id = a.subject_id
                         JOIN charlson c USING (hadm_id)""").fetchall()
    assert len(rows) == iv.execute("SELECT COUNT(*) FROM admissions").fetchone()[0]
    assert all(age == formula for age, formula, *_ in rows)
    assert all(index >= score for *_, score, index in rows) and any(index > score for *_, score, index in rows)
    # a heart-failure admission (ICD-9 428x or ICD-10 I50x) is flagged
    flagged = iv.execute("""SELECT MIN(c.congestive_heart_failure) FROM charlson c JOIN diagnoses_icd d USING (hadm_id)
                            WHERE d.icd_code LIKE '428%' OR d.icd_code LIKE 'I50%'""").fetchone()[0]
    assert flagged == 1


def test_services_follow_the_units_and_bedside_procedures_are_charted_in_their_stay(built):
    iv = built["mimic_iv"]
    assert iv.execute("SELECT COUNT(DISTINCT hadm_id) FROM services").fetchone() == \
        iv.execute("SELECT COUNT(*) FROM admissions").fetchone()
    firsts = iv.execute("SELECT hadm_id, prev_service FROM services s WHERE transfertime = "
                        "(SELECT MIN(transfertime) FROM services WHERE hadm_id = s.hadm_id)").fetchall()
    assert all(prev is None for _, prev in firsts)
    assert {s for (s,) in iv.execute("SELECT DISTINCT curr_service FROM services")} <= \
        {"MED", "SURG", "CSURG", "CMED", "TSURG", "NSURG", "NMED", "OMED"}
    # a coronary care unit stay is a cardiology (CMED) service at the time the stay begins
    ccu = iv.execute("""SELECT COUNT(*), SUM(EXISTS (SELECT 1 FROM services s WHERE s.hadm_id = i.hadm_id
                                                     AND s.curr_service = 'CMED'))
                        FROM icustays i WHERE first_careunit = 'Coronary Care Unit (CCU)'""").fetchone()
    assert ccu[0] == ccu[1]
    events = iv.execute("""SELECT p.starttime, p.endtime, i.intime, COALESCE(i.outtime, '9999'), p.itemid, p.value
                           FROM procedureevents p JOIN icustays i USING (stay_id)""").fetchall()
    assert events and {225752} & {e[4] for e in events}                  # arterial lines are charted
    for start, end, intime, outtime, itemid, minutes in events:
        assert intime <= start <= end <= outtime
        assert minutes == round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds() / 60)
    # a charted ventilation is a coded ventilation of the same admission
    vent = iv.execute("""SELECT COUNT(*) FROM procedureevents p WHERE itemid = 225792 AND NOT EXISTS (
                           SELECT 1 FROM procedures_icd c WHERE c.hadm_id = p.hadm_id
                           AND c.icd_code IN ('9671', '9672', '5A1935Z', '5A1955Z'))""").fetchone()[0]
    assert vent == 0


def test_notes_say_what_the_tables_hold(built):
    """Discharge summaries: one per admission discharged alive, dated as the admission, the course's numbers the
    admission's own lab peaks, the discharge medications among its prescriptions; radiology reports: one per chest
    radiograph or head CT, a pneumonia's film showing consolidation."""
    import re

    iv = built["mimic_iv"]
    alive = iv.execute("SELECT COUNT(*) FROM admissions WHERE dischtime IS NOT NULL AND hospital_expire_flag = 0")
    assert iv.execute("SELECT COUNT(*) FROM discharge").fetchone() == alive.fetchone()
    peaks = 0
    for hadm, text, charttime in iv.execute("SELECT hadm_id, text, charttime FROM discharge"):
        dischtime = iv.execute("SELECT dischtime FROM admissions WHERE hadm_id = ?", (hadm,)).fetchone()[0]
        assert f"Discharge Date:   {dischtime[:10]}" in text and charttime == dischtime
        for label, itemid in (("troponin T peaked at", 51003), ("creatinine peaked at", 50912)):
            if match := re.search(label + r" ([\d.]+)", text):
                peak = iv.execute("SELECT MAX(valuenum) FROM labevents WHERE hadm_id = ? AND itemid = ?",
                                  (hadm, itemid)).fetchone()[0]
                assert float(match.group(1)) == pytest.approx(peak)
                peaks += 1
        drugs = {d for (d,) in iv.execute("SELECT drug FROM prescriptions WHERE hadm_id = ?", (hadm,))}
        section = text.split("Discharge Medications:\n")[1].split("\n \n")[0]
        for line in section.splitlines():
            if line != "None.":
                name = re.match(r"\d+\. (.+?) [\d.]+ ", line).group(1)
                assert name in drugs, (name, drugs)
    assert peaks > 0
    films = iv.execute("SELECT COUNT(*) FROM radiology").fetchone()[0]
    coded = iv.execute("SELECT COUNT(*) FROM procedures_icd WHERE icd_code IN ('8744', 'BW03ZZZ', '8703', 'B020ZZZ')")
    assert films == coded.fetchone()[0] > 0
    pneumonia = iv.execute("""SELECT r.text FROM radiology r WHERE r.text LIKE '%CHEST%' AND EXISTS (SELECT 1 FROM
                              diagnoses_icd d WHERE d.hadm_id = r.hadm_id AND d.icd_code IN ('486', 'J189'))""")
    texts = [text for (text,) in pneumonia]
    assert texts and all("consolidation" in text for text in texts)


def test_orders_pharmacy_and_emar_are_linked_as_in_mimic_iv(built):
    """Each prescription has its pharmacy row (same pharmacy_id, poe_id, times) and its administrations in emar at
    the frequency's interval, within the order."""
    c = built["mimic_iv"]
    prescriptions = c.execute("SELECT pharmacy_id, poe_id, starttime, stoptime, drug, doses_per_24_hrs "
                              "FROM prescriptions").fetchall()
    pharmacy = {r[0]: r[1:] for r in c.execute("SELECT pharmacy_id, poe_id, starttime, stoptime, medication, "
                                                "doses_per_24_hrs FROM pharmacy")}
    assert prescriptions and len(pharmacy) == len(prescriptions)
    assert all(pharmacy[r[0]] == r[1:] for r in prescriptions)
    rows = c.execute("SELECT e.pharmacy_id, e.scheduletime, e.event_txt, p.starttime, p.stoptime, p.doses_per_24_hrs "
                     "FROM emar e JOIN pharmacy p USING (pharmacy_id) ORDER BY e.pharmacy_id, e.emar_seq").fetchall()
    assert {r[2] for r in rows} == {"Administered", "Not Given"}
    assert all(r[3] <= r[1] <= r[4] for r in rows)
    by_order: dict = {}
    for pid, when, *_, per_day in rows:
        by_order.setdefault((pid, per_day), []).append(datetime.fromisoformat(when))
    gaps = {(b - a).total_seconds() / 3600 * per_day for (pid, per_day), times in by_order.items()
            for a, b in zip(times, times[1:])}
    assert gaps == {24.0}                       # consecutive doses are 24 h / doses-per-day apart


def test_drg_codes_follow_the_principal_diagnosis(built):
    """seq_num 1 is the reason for the admission (an acute condition when there is one), and its DRG is coded."""
    from ehrbench.schemas.mimic_iv import spelling
    from ehrbench.world.vocab import vocabulary

    c, v = built["mimic_iv"], vocabulary()
    acute = {k for k, cond in v.conditions.items() if cond.acute}
    codes = {(cond.icd9 if ver == 9 else cond.icd10): k for k, cond in v.conditions.items() for ver in (9, 10)}
    principal = dict(c.execute("SELECT hadm_id, icd_code FROM diagnoses_icd WHERE seq_num = 1"))
    coded = dict(c.execute("SELECT hadm_id, group_concat(icd_code) FROM diagnoses_icd GROUP BY hadm_id"))
    for hadm, code in principal.items():
        has_acute = any(codes.get(x) in acute for x in coded[hadm].split(","))
        assert (codes.get(code) in acute) == has_acute
    drg = spelling()["drg"]
    rows = c.execute("SELECT d.hadm_id, d.drg_type, d.drg_code, d.drg_severity, x.icd_code FROM drgcodes d "
                     "JOIN diagnoses_icd x ON x.hadm_id = d.hadm_id AND x.seq_num = 1").fetchall()
    assert {r[1] for r in rows} == {"HCFA", "APR"}
    for hadm, kind, code, severity, first in rows:
        if codes.get(first) in drg:             # the principal diagnosis has a DRG: it is the one coded
            assert code == drg[codes[first]]["hcfa" if kind == "HCFA" else "apr"][0]
        assert (severity is None) == (kind == "HCFA") and (severity is None or 1 <= severity <= 4)


def test_outpatient_measurements_and_datetime_items(built):
    c = built["mimic_iv"]
    omr = c.execute("SELECT result_name, result_value FROM omr").fetchall()
    assert {n for n, _ in omr} == {"Blood Pressure", "Weight (Lbs)", "Height (Inches)", "BMI (kg/m2)"}
    bmi = [float(v) for n, v in omr if n == "BMI (kg/m2)"]
    assert bmi and all(12 <= b <= 75 for b in bmi)
    assert all("/" in v and 50 < int(v.split("/")[0]) < 250 for n, v in omr if n == "Blood Pressure")
    # a dialysis catheter is charted as inserted within an hour before dialysis starts in the stay
    inserted = c.execute("""SELECT d.charttime, MIN(p.starttime) FROM datetimeevents d JOIN procedureevents p
                            ON p.stay_id = d.stay_id AND p.itemid IN (225441, 225802, 225805)
                            WHERE d.itemid = 225322 GROUP BY d.stay_id, d.charttime""").fetchall()
    dialysed = c.execute("SELECT COUNT(DISTINCT stay_id) FROM procedureevents "
                         "WHERE itemid IN (225441, 225802, 225805)").fetchone()[0]
    assert dialysed and len(inserted) == dialysed
    assert all((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() == 3600 for a, b in inserted)
    linked = c.execute("SELECT DISTINCT d.itemid, i.linksto FROM datetimeevents d JOIN d_items i USING (itemid)")
    assert all(linksto == "datetimeevents" for _, linksto in linked)


def test_a_stay_through_the_emergency_department_is_admitted_after_it(built):
    """transfers: the ED row, then `admit` for the first unit (what eventtype = 'admit' queries find), then moves."""
    c = built["mimic_iv"]
    rows = c.execute("SELECT hadm_id, eventtype FROM transfers ORDER BY hadm_id, intime, transfer_id").fetchall()
    events: dict = {}
    for hadm, kind in rows:
        events.setdefault(hadm, []).append(kind)
    assert any(k[0] == "ED" for k in events.values())
    for kinds in events.values():
        inside = [k for k in kinds if k not in ("ED", "discharge")]
        assert inside[:1] == ["admit"] and set(inside[1:]) <= {"transfer"}, kinds
