"""PhysAssistBench's FHIR read layer over the per-patient files: the original adapter's shapes, filters and orders,
its quirks included (a lab code that matches no label filters nothing; string-compared dates; omr as the vitals
fallback)."""
import sqlite3

import pytest

from ehrbench.benchmarks.agentehr.patient_db import split_patients
from ehrbench.benchmarks.physassist.adapter import (PatientRecord, bundle, conditions, encounters, lab_observations,
                                                    patient, vital_observations)
from ehrbench.schemas import WorldSpec, build_database
from ehrbench.world.generator import WorldSize

SPEC = WorldSpec(seed=4, size=WorldSize(mimic_patients=30, eicu_patients=0, eicu_hospitals=1), dictionary="used")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("physassist")
    return split_patients(build_database("mimic_iv", SPEC, root), root)


def _record(folder, sql):
    """The first patient whose file answers `sql` with a row."""
    for path in sorted(folder.glob("patient_*.db")):
        if sqlite3.connect(path).execute(sql).fetchone():
            return PatientRecord(path, folder / "reference.db")
    raise AssertionError(f"no patient has {sql}")


def test_patient_encounters_and_conditions_have_the_original_s_shape(folder):
    record = _record(folder, "SELECT 1 FROM diagnoses_icd")
    p = patient(record)
    assert p["resourceType"] == "Patient" and p["id"] == str(record.subject_id) and p["gender"] in ("male", "female")
    assert p["identifier"] == [{"system": "mimic-iv", "value": str(record.subject_id)}] and "_anchor_age" in p
    admissions = record.rows("SELECT hadm_id FROM admissions")
    found = encounters(record)
    assert len(found) == len(admissions) and found[0]["id"] == f"encounter-{found[0]['identifier'][0]['value']}"
    assert encounters(record, admissions[0]["hadm_id"])[0]["period"]["start"] < "9999"
    every = conditions(record)
    order = [(c["encounter"]["reference"], c["_seq_num"]) for c in every]
    assert order == sorted(order, key=lambda x: (int(x[0].split("-")[-1]), x[1]))      # by admission, principal first
    first = every[0]["code"]["coding"][0]
    assert first["system"].startswith("http://hl7.org/fhir/sid/icd-") and every[0]["code"]["text"] == first["display"]
    prefix = first["code"][:3]
    assert conditions(record, code=prefix.lower()) and all(c["code"]["coding"][0]["code"].startswith(prefix)
                                                           for c in conditions(record, code=prefix))
    out = bundle(every, "Condition")
    assert out["type"] == "searchset" and out["total"] == len(every) == len(out["entry"])


def test_labs_filter_sort_and_cut_as_the_original(folder):
    record = _record(folder, "SELECT 1 FROM labevents WHERE flag = 'abnormal' GROUP BY subject_id "
                             "HAVING COUNT(*) > 30")
    newest = lab_observations(record)
    times = [o["effectiveDateTime"] for o in newest]
    assert len(newest) == 20 and times == sorted(times, reverse=True)       # _count 20, newest first
    label = newest[0]["code"]["text"]
    same = lab_observations(record, item_name=label.lower()[:5], _count=1000)
    assert same and all(label.lower()[:5] in o["code"]["text"].lower() for o in same)
    assert len(lab_observations(record, item_name="no such lab", _count=1000)) == \
        len(record.rows("SELECT 1 FROM labevents"))                        # no label matched: nothing filtered
    day = times[0][:10]
    assert all(o["effectiveDateTime"] < day for o in lab_observations(record, date_to=day, _count=1000))  # strings
    assert all(o["effectiveDateTime"] >= day for o in lab_observations(record, date_from=day, _count=1000))
    abnormal = [o for o in lab_observations(record, _count=1000) if "interpretation" in o]
    assert abnormal and abnormal[0]["interpretation"][0]["coding"][0]["code"] == "A"
    ranged = [o for o in lab_observations(record, _count=1000) if "referenceRange" in o]
    assert ranged and set(ranged[0]["referenceRange"][0]) <= {"low", "high"}
    for o in ranged:                                                        # bounds in the value's unit
        assert all(bound["unit"] == o["valueQuantity"]["unit"] for bound in o["referenceRange"][0].values())


def test_vitals_come_from_the_icu_or_else_from_the_clinic(folder):
    icu = _record(folder, "SELECT 1 FROM chartevents")
    vitals = vital_observations(icu, _count=5)
    assert len(vitals) == 5 and all(v["code"]["coding"][0]["system"] == "mimic-iv/icu-itemid" for v in vitals)
    assert [v["effectiveDateTime"] for v in vitals] == sorted((v["effectiveDateTime"] for v in vitals), reverse=True)
    clinic = _record(folder, "SELECT 1 FROM omr WHERE NOT EXISTS (SELECT 1 FROM chartevents)")
    fallback = vital_observations(clinic)
    assert fallback and all(v["id"].startswith(f"omr-{clinic.subject_id}-") and "valueString" in v for v in fallback)
    assert all(v["category"][0]["coding"][0]["code"] == "vital-signs" for v in vitals + fallback)
