"""PhysAssistBench's FHIR read layer over the per-patient files: the original adapter's shapes, filters and orders,
its quirks included (a lab code that matches no label filters nothing; string-compared dates; omr as the vitals
fallback)."""
import json
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


def test_medication_orders_and_administrations_as_the_original_reads_them(folder):
    from ehrbench.benchmarks.physassist.adapter import medication_administrations, medication_requests

    record = _record(folder, "SELECT 1 FROM emar GROUP BY subject_id HAVING COUNT(*) > 120")
    orders = medication_requests(record)
    starts = [o["dosageInstruction"][0]["timing"]["repeat"]["boundsPeriod"]["start"] for o in orders]
    assert orders and starts == sorted(starts, reverse=True)
    done = [o for o in orders if o["status"] == "completed"]
    assert done and all("end" in o["dosageInstruction"][0]["timing"]["repeat"]["boundsPeriod"] for o in done)
    assert medication_requests(record, status="completed") == done
    first = orders[0]
    raw = record.rows("SELECT dose_val_rx, dose_unit_rx, route FROM prescriptions WHERE rowid - 1 = ?",
                      (int(first["id"].rsplit("-", 1)[1]),))[0]
    assert first["dosageInstruction"][0]["text"] == f"{raw['dose_val_rx']}{raw['dose_unit_rx']} {raw['route']}"
    drug = first["medicationCodeableConcept"]["text"]
    assert all(drug.lower()[:4] in o["medicationCodeableConcept"]["text"].lower()
               for o in medication_requests(record, medication=drug[:4].upper()))       # case-insensitive
    assert all("(" in o["medicationCodeableConcept"]["text"]                              # not a regex: a substring
               for o in medication_requests(record, medication="("))
    given = medication_administrations(record)
    assert len(given) == 100 and given[0]["status"] == "completed"                       # cut only when unnarrowed
    assert len(medication_administrations(record, hadm_id=int(given[0]["context"]["reference"].split("-")[-1]))) \
        == len(record.rows("SELECT 1 FROM emar WHERE hadm_id = ?",
                           (int(given[0]["context"]["reference"].split("-")[-1]),)))


def test_reports_documents_care_plans_and_allergies_from_the_notes(folder):
    from ehrbench.benchmarks.physassist.adapter import (allergies, care_plans, diagnostic_reports, document_references,
                                                        procedures)

    record = _record(folder, "SELECT 1 FROM radiology WHERE EXISTS (SELECT 1 FROM microbiologyevents) "
                             "AND EXISTS (SELECT 1 FROM procedures_icd)")
    reports = diagnostic_reports(record)
    radiology = [r for r in reports if r["category"][0]["coding"][0]["display"] == "Radiology"]
    micro = [r for r in reports if r["category"][0]["coding"][0]["display"] == "Microbiology"]
    assert 1 <= len(radiology) <= 5 and micro and len(reports) <= 10
    assert radiology[0]["code"]["text"].startswith("EXAMINATION:")       # the first line that is not INDICATION
    assert all(len(r["presentedForm"][0]["data"]) <= 3000 for r in radiology)
    assert micro[0]["presentedForm"][0]["data"].startswith("Specimen: ")
    chest = diagnostic_reports(record, report_type="CXR")                      # an alias: CHEST, PORTABLE, ...
    assert chest and all(r["category"][0]["coding"][0]["display"] == "Radiology" for r in chest)
    assert all(r["category"][0]["coding"][0]["display"] == "Microbiology"
               for r in diagnostic_reports(record, report_type="blood"))      # a specimen word: microbiology too
    docs = document_references(record, type_code="radiology")
    assert docs and all(d["type"]["coding"][0]["code"] == "radiology" and len(d["content"][0]["attachment"]["data"])
                        <= 4000 for d in docs)
    assert [d["date"] for d in docs] == sorted((d["date"] for d in docs), reverse=True)
    found = document_references(record, keyword="CHEST")
    assert found and all("chest" in d["content"][0]["attachment"]["data"].lower() for d in found)
    done = procedures(record)
    assert done and done[0]["code"]["text"] == done[0]["code"]["coding"][0]["code"]
    plans = care_plans(record)
    assert all(p["category"][0]["coding"][0]["code"] in ("discharge-planning", "followup", "treatment") for p in plans)
    assert all(len(p["note"][0]["text"]) <= 1000 for p in plans)
    note = record.rows("SELECT text FROM discharge")[0]["text"]
    listed = note.split("Allergies:")[1].strip().split("\n")[0].strip()       # the section's first line
    [allergy] = allergies(record)
    if listed.lower() in ("nka", "nkda", "none", "no known allergies"):
        assert allergy["code"]["coding"][0]["code"] == "716186003"
    else:                                                                   # free text, as the note has it
        assert allergy["code"]["text"] == allergy["note"][0]["text"] == listed


def test_results_are_compacted_for_the_model_as_the_original_does(folder):
    from ehrbench.benchmarks.physassist.compact import compact

    record = _record(folder, "SELECT 1 FROM labevents WHERE flag = 'abnormal' GROUP BY subject_id "
                             "HAVING COUNT(*) > 30")
    labs = lab_observations(record, _count=40)
    text = compact(bundle(labs, "Observation"))
    lines = text.splitlines()
    assert lines[0] == "(40 results)" and len(lines) == 1 + 15 + 1 and lines[-1] == "  ... (25 more)"
    first = labs[0]
    interp = " (Abnormal)" if "interpretation" in first else ""
    assert lines[1] == (f"  - {first['code']['text']}: {first['valueQuantity']['value']} "
                        f"{first['valueQuantity']['unit']}{interp} @ {first['effectiveDateTime'][:10]}")
    assert compact(bundle([], "Observation")) == "(0 results)"
    assert compact({"patient_response": "x" * 2000, "patient_responses_all_literacy": {}}) == "x" * 1500
    assert compact({"resourceType": "Flag", "id": "FL-sim-1", "status": "active", "code": {}}) == \
        "Flag created: id=FL-sim-1 status=active"
    outcome = {"resourceType": "OperationOutcome", "issue": [{"severity": "error", "diagnostics": "none"}]}
    assert compact(outcome) == json.dumps(outcome)
    huge = compact({"resourceType": "Patient", "text": "é" * 5000})
    assert len(huge.splitlines()[0]) == 4000 and huge.endswith(f"[truncated: {5000 + 39} chars total]")
    [encounter] = encounters(record)[:1]
    assert compact(bundle([encounter], "Encounter")).splitlines()[1] == \
        f"  - IMP  {encounter['period']['start'][:10]}\u2013{encounter['period'].get('end', '')[:10]} "
