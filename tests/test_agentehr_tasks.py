"""AgentEHR's samples by the original's label rules: CCS from HCUP's grouper, every label a candidate, and the
labelled events hidden at the prediction time yet visible once known."""
import sqlite3
from datetime import datetime, timedelta

import pytest

from ehrbench.benchmarks.agentehr.censoring import CensoredPatient
from ehrbench.benchmarks.agentehr.patient_db import patient_file, split_patients
from ehrbench.benchmarks.agentehr.tasks import CANDIDATE_TABLES, TASKS, ccs, ccs_name, make_samples, write_candidates
from ehrbench.schemas import WorldSpec, build_database
from ehrbench.world.generator import WorldSize

SPEC = WorldSpec(seed=4, size=WorldSize(mimic_patients=30, eicu_patients=0, eicu_hospitals=1), dictionary="used")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("agentehr_tasks")
    source = build_database("mimic_iv", SPEC, root)
    return {"source": source, "folder": split_patients(source, root), "samples": make_samples(source),
            "candidates": write_candidates(source, root / "candidates.db")}


def test_ccs_categories_are_hcup_s():
    table = ccs()
    assert len(table["diagnosis_categories"]) == 283            # the paper's 283 diagnosis candidates
    assert ccs_name("diagnoses", 9, "4280") == ccs_name("diagnoses", 10, "I509") == \
        "Congestive heart failure; nonhypertensive"
    assert ccs_name("diagnoses", 9, "0389") == "Septicemia (except in labor)"
    assert ccs_name("procedures", 10, "5A1D70Z") == ccs_name("procedures", 9, "3995") == "Hemodialysis"
    assert ccs_name("diagnoses", 9, "not-a-code") is None


def test_every_curated_drug_has_an_atc_group_and_spellings_resolve_to_their_own():
    from ehrbench.benchmarks.agentehr.tasks import atc, atc_by_drug_name
    from ehrbench.world.vocab import vocabulary

    table = atc()
    assert set(vocabulary().drugs) == set(table["drugs"]) and set(table["drugs"].values()) <= set(table["groups"])
    by_name = atc_by_drug_name()
    assert by_name["Insulin"] == "Insulins and analogues for injection, fast-acting"     # not glargine's group
    assert by_name["Heparin"] == "Heparin group" and by_name["Vancomycin"] == "Glycopeptide antibacterials"


def test_samples_follow_the_label_rules_and_every_label_is_a_candidate(world):
    samples, conn = world["samples"], sqlite3.connect(world["candidates"])
    assert set(samples) == set(TASKS) and all(len(samples[t]) >= 10 for t in TASKS)
    for task in TASKS:
        candidates = {c for (c,) in conn.execute(f"SELECT candidate FROM {CANDIDATE_TABLES[task]}")}
        for s in samples[task]:
            assert s["task"] == task and s["label"] and {x["name"] for x in s["label"]} <= candidates
    src = sqlite3.connect(world["source"])
    for s in samples["diagnoses_ccs"]:
        disch = src.execute("SELECT dischtime FROM admissions WHERE hadm_id = ?", (s["hadm_id"],)).fetchone()[0]
        assert s["prediction_time"] == str(datetime.fromisoformat(disch) - timedelta(minutes=2))
    assert all(s["prediction_time"].endswith("23:58:00") for s in samples["procedures_ccs"])
    panels = [len(s["label"]) for s in samples["labevents"]]
    assert max(panels) >= 8                                       # a morning panel is labelled as one draw
    assert make_samples(world["source"]) == samples                # seeded


def test_what_is_to_be_predicted_is_hidden_at_t_and_visible_once_known(world):
    queries = {"diagnoses_ccs": "SELECT COUNT(*) FROM diagnoses_icd WHERE hadm_id = ?",
               "labevents": "SELECT COUNT(*) FROM labevents WHERE charttime = ?",
               "transfers": "SELECT COUNT(*) FROM transfers WHERE eventtype = 'transfer' AND intime = ?",
               "prescriptions": "SELECT (SELECT COUNT(*) FROM prescriptions WHERE starttime = ?1) + "
                                "(SELECT COUNT(*) FROM pharmacy WHERE starttime = ?1 OR medication IN "
                                "(SELECT drug FROM prescriptions WHERE starttime = ?1))",
               "microbiologyevents": "SELECT COUNT(*) FROM microbiologyevents WHERE chartdate = ?"}
    for task, sql in queries.items():
        for s in world["samples"][task][:10]:
            path = patient_file(world["folder"], s["subject_id"])
            t = datetime.fromisoformat(s["prediction_time"])
            key = s["hadm_id"] if task == "diagnoses_ccs" else str(t + timedelta(minutes=1))
            later = t + timedelta(days=1, minutes=5)               # after discharge, results, arrival
            if task == "microbiologyevents":                       # the day's draws, their results a day later
                assert s["prediction_time"].endswith("23:59:00")
                key, later = str((t + timedelta(minutes=1)).date()), t + timedelta(days=3)
            assert CensoredPatient(path, str(t)).query(sql, (key,))[1] == [(0,)], (task, s)
            assert CensoredPatient(path, str(later)).query(sql, (key,))[1][0][0] >= 1, (task, s)


@pytest.fixture(scope="module")
def world_iii(tmp_path_factory, world):
    root = tmp_path_factory.mktemp("agentehr_tasks_iii")
    source = build_database("ehrsql_mimic_iii", SPEC, root)
    return {"source": source, "folder": split_patients(source, root),
            "samples": make_samples(source, rendering="ehrsql_mimic_iii"),
            "candidates": write_candidates(world["source"], root / "candidates.db", source)}


def test_the_mimic_iii_subset_follows_the_same_rules_over_its_schema(world_iii):
    from ehrbench.benchmarks.agentehr.censoring import EHRSQL_MIMIC_III

    samples, conn = world_iii["samples"], sqlite3.connect(world_iii["candidates"])
    assert set(samples) == set(TASKS) and all(len(samples[t]) >= 5 for t in TASKS)
    for task in TASKS:                                     # both renderings' names are candidates
        candidates = {c.lower() for (c,) in conn.execute(f"SELECT candidate FROM {CANDIDATE_TABLES[task]}")}
        for s in samples[task]:
            assert s["label"] and {x["name"].lower() for x in s["label"]} <= candidates, (task, s)
    assert {"micu", "blood culture"} <= {c for (c,) in conn.execute(
        "SELECT candidate FROM transfers_candidates UNION SELECT candidate FROM microbiologyevents_candidates")}
    queries = {"diagnoses_ccs": "SELECT COUNT(*) FROM DIAGNOSES_ICD WHERE HADM_ID = ?",
               "labevents": "SELECT COUNT(*) FROM LABEVENTS WHERE CHARTTIME = ?",
               "transfers": "SELECT COUNT(*) FROM TRANSFERS WHERE EVENTTYPE = 'transfer' AND INTIME = ?",
               "prescriptions": "SELECT COUNT(*) FROM PRESCRIPTIONS WHERE STARTDATE = ?",
               "microbiologyevents": "SELECT COUNT(*) FROM MICROBIOLOGYEVENTS WHERE CHARTTIME = ?",
               "procedures_ccs": "SELECT COUNT(*) FROM PROCEDURES_ICD WHERE date(CHARTTIME) = ?"}
    for task, sql in queries.items():
        for s in samples[task][:8]:
            path = patient_file(world_iii["folder"], s["subject_id"])
            t = datetime.fromisoformat(s["prediction_time"])
            key = (s["hadm_id"] if task == "diagnoses_ccs" else s["prediction_time"][:10] if task == "procedures_ccs"
                   else str(t + timedelta(minutes=1)))
            later = t + timedelta(days=2, minutes=5)
            assert CensoredPatient(path, str(t), rules=EHRSQL_MIMIC_III).query(sql, (key,))[1] == [(0,)], (task, s)
            assert CensoredPatient(path, str(later), rules=EHRSQL_MIMIC_III).query(sql, (key,))[1][0][0] >= 1, s


def test_the_tools_read_the_mimic_iii_schema_and_a_lost_view_is_the_harness_s(world_iii):
    import asyncio

    from ehrbench.benchmarks.agentehr.tools import AgentEhrTools
    from ehrbench.benchmarks.agentehr.views import InProcess, PatientViews
    from ehrbench.trial import InfrastructureError

    s = world_iii["samples"]["labevents"][0]
    views = PatientViews({"ehrsql_mimic_iii": world_iii["folder"]})
    tools = AgentEhrTools(InProcess(views), world_iii["candidates"], s["subject_id"], s["prediction_time"],
                          source="ehrsql_mimic_iii")
    subject = str(s["subject_id"])

    async def go():
        await tools.call("load_ehr", {"subject_id": subject, "timestamp": s["prediction_time"]})
        latest = await tools.call("get_latest_records", {"subject_id": subject, "table_name": "ADMISSIONS"})
        counts = await tools.call("get_event_counts_by_time", {"subject_id": subject, "start_time": "2000-01-01",
                                                               "end_time": s["prediction_time"]})
        views.close(tools.episode)                        # as a restarted shard would have lost it
        with pytest.raises(InfrastructureError, match="lost by its patient shard"):
            await tools.call("run_sql_query", {"subject_id": subject, "sql_query": "SELECT 1 FROM ADMISSIONS"})
        return latest, counts
    latest, counts = asyncio.run(go())
    assert latest.splitlines()[0].split()[:3] == ["SUBJECT_ID", "HADM_ID", "ADMITTIME"]    # upper-case time columns
    assert "- LABEVENTS: " in counts and "Could not find a timestamp column" not in counts.split("PATIENTS")[0]
