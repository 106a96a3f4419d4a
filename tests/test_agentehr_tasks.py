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
    """Every label is a candidate but UNKNOWN_TITLE (a diagnosis code without a CCS category: the original's label
    for it, which no candidate table lists); the candidate tables are the original's: a CCS row per ICD code, care
    units moved to by a transfer only."""
    samples, conn = world["samples"], sqlite3.connect(world["candidates"])
    assert set(samples) == set(TASKS) and all(len(samples[t]) >= 10 for t in TASKS)
    for task in TASKS:
        candidates = {c for (c,) in conn.execute(f"SELECT candidate FROM {CANDIDATE_TABLES[task]}")}
        for s in samples[task]:
            assert s["task"] == task and s["label"]
            assert {x["name"] for x in s["label"]} - {"UNKNOWN_TITLE"} <= candidates
    rows = conn.execute("SELECT icd_code, icd_version, ccs_code, candidate FROM diagnoses_ccs_candidates").fetchall()
    assert len(rows) == sum(len(v) for v in ccs()["diagnoses"].values())        # one row per code, as text
    assert ("4280", "9", rows[0][2].__class__("108"), "Congestive heart failure; nonhypertensive") in rows
    src = sqlite3.connect(world["source"])
    units = {u for (u,) in src.execute("SELECT careunit FROM transfers WHERE eventtype = 'transfer'")}
    assert {c for (c,) in conn.execute("SELECT candidate FROM transfers_candidates")} == units - {None}
    for s in samples["diagnoses_ccs"]:
        disch = src.execute("SELECT dischtime FROM admissions WHERE hadm_id = ?", (s["hadm_id"],)).fetchone()[0]
        assert s["prediction_time"] == str(datetime.fromisoformat(disch) - timedelta(minutes=2))
    assert all(s["prediction_time"].endswith("23:58:00") for s in samples["procedures_ccs"])
    panels = [len(s["label"]) for s in samples["labevents"]]
    assert max(panels) >= 8                                       # a morning panel is labelled as one draw
    assert make_samples(world["source"]) == samples                # seeded


@pytest.mark.parametrize("censoring", ["original", "ehrbench"])
def test_what_is_to_be_predicted_is_hidden_at_t_and_visible_once_known(world, censoring):
    queries = {"diagnoses_ccs": "SELECT COUNT(*) FROM diagnoses_icd WHERE hadm_id = ?",
               "labevents": "SELECT COUNT(*) FROM labevents WHERE charttime = ?",
               "transfers": "SELECT COUNT(*) FROM transfers WHERE eventtype = 'transfer' AND intime = ?",
               "prescriptions": "SELECT (SELECT COUNT(*) FROM prescriptions WHERE starttime = ?1) + "
                                "(SELECT COUNT(*) FROM pharmacy WHERE starttime = ?1 OR medication IN "
                                "(SELECT drug FROM prescriptions WHERE starttime = ?1))",
               "microbiologyevents": "SELECT COUNT(*) FROM microbiologyevents WHERE date(chartdate) = ?"}
    for task, sql in queries.items():
        for s in world["samples"][task][:10]:
            path = patient_file(world["folder"], s["subject_id"])
            t = datetime.fromisoformat(s["prediction_time"])
            key = s["hadm_id"] if task == "diagnoses_ccs" else str(t + timedelta(minutes=1))
            later = t + timedelta(days=1, minutes=5)               # after discharge, results, arrival
            if task == "microbiologyevents":                       # the day's draws, their results a day later
                assert s["prediction_time"].endswith("23:59:00")
                key, later = str((t + timedelta(minutes=1)).date()), t + timedelta(days=3)
            assert CensoredPatient(path, str(t), censoring=censoring).query(sql, (key,))[1] == [(0,)], (task, s)
            assert CensoredPatient(path, str(later), censoring=censoring).query(sql, (key,))[1][0][0] >= 1, (task, s)


@pytest.fixture(scope="module")
def world_iii(tmp_path_factory, world):
    root = tmp_path_factory.mktemp("agentehr_tasks_iii")
    source = build_database("ehrsql_mimic_iii", SPEC, root)
    return {"source": source, "folder": split_patients(source, root),
            "samples": make_samples(source, rendering="ehrsql_mimic_iii"),
            "candidates": write_candidates(source, root / "candidates.db", "ehrsql_mimic_iii")}


def test_the_mimic_iii_subset_follows_the_same_rules_over_its_schema(world_iii):
    from ehrbench.benchmarks.agentehr.censoring import EHRSQL_MIMIC_III

    samples, conn = world_iii["samples"], sqlite3.connect(world_iii["candidates"])
    assert set(samples) == set(TASKS) and all(len(samples[t]) >= 5 for t in TASKS)
    for task in TASKS:                                     # its own database's names are its candidates
        candidates = {c.lower() for (c,) in conn.execute(f"SELECT candidate FROM {CANDIDATE_TABLES[task]}")}
        for s in samples[task]:
            assert s["label"] and {x["name"].lower() for x in s["label"]} - {"unknown_title"} <= candidates, (task, s)
    assert "blood culture" in {c.lower() for (c,) in conn.execute("SELECT candidate FROM microbiologyevents_candidates")}
    src = sqlite3.connect(world_iii["source"])
    assert {c for (c,) in conn.execute("SELECT candidate FROM transfers_candidates")} == {u for (u,) in src.execute(
        "SELECT CAREUNIT FROM TRANSFERS WHERE EVENTTYPE = 'transfer' AND CAREUNIT IS NOT NULL")}
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


def test_common_and_rare_are_two_weighted_draws_as_the_original_s_label_wise_sample():
    """A sample weighs the mean of 1 / its labels' corpus counts; Common draws from those at most the mean weight,
    Rare from those at least it, each in proportion to the weight, without replacement."""
    from collections import Counter

    from ehrbench.benchmarks.agentehr.tasks import draw_subsets

    counts = {"A": 1, "B": 2, "C": 4, "D": 100, "E": 50}
    items = [{"subject_id": i, "label": [{"name": n}]} for i, n in enumerate("ABCDE")]
    weights = {"A": 1, "B": 0.5, "C": 0.25, "D": 0.01, "E": 0.02}           # mean 0.356
    drawn = draw_subsets(items, counts, 10, seed=1)
    common = [x["label"][0]["name"] for x in drawn if x["subset"] == "common"]
    rare = [x["label"][0]["name"] for x in drawn if x["subset"] == "rare"]
    assert sorted(common) == ["C", "D", "E"] and sorted(rare) == ["A", "B"]     # size past the pool: all of it
    assert draw_subsets(items, counts, 10, seed=1) == drawn                      # seeded
    first = Counter(next(x["label"][0]["name"] for x in draw_subsets(items, counts, 1, seed=s)
                         if x["subset"] == "common") for s in range(600))
    share = {n: first[n] / 600 for n in "CDE"}                                   # proportional to the weight
    total = sum(weights[n] for n in "CDE")
    assert all(abs(share[n] - weights[n] / total) < 0.06 for n in "CDE"), share
    tied = draw_subsets([{"label": [{"name": "A"}]}, {"label": [{"name": "A"}]}], {"A": 3}, 5)
    assert sorted(x["subset"] for x in tied) == ["common", "common", "rare", "rare"]   # at the mean: both
    assert draw_subsets([{"label": [{"name": "Z"}]}], counts, 5) == []          # no counted label: no weight


def test_under_the_original_rule_the_mimic_iii_labels_are_hidden_at_t_too(world_iii):
    """The first-time-column rule on EHRSQL's MIMIC-III: DIAGNOSES_ICD's own CHARTTIME (the admission's) is replaced
    by the discharge's less a minute, as the original's preprocessing dates MIMIC-IV's codes, and a procedure is
    asked for a minute before its time; so what is to be predicted is not on view at t."""
    from ehrbench.benchmarks.agentehr.censoring import EHRSQL_MIMIC_III

    queries = {"diagnoses_ccs": "SELECT COUNT(*) FROM DIAGNOSES_ICD WHERE HADM_ID = ?",
               "procedures_ccs": "SELECT COUNT(*) FROM PROCEDURES_ICD WHERE CHARTTIME = ?",
               "labevents": "SELECT COUNT(*) FROM LABEVENTS WHERE CHARTTIME = ?",
               "transfers": "SELECT COUNT(*) FROM TRANSFERS WHERE INTIME = ?"}
    for task, sql in queries.items():
        for s in world_iii["samples"][task][:8]:
            t = datetime.fromisoformat(s["prediction_time"])
            key = s["hadm_id"] if task == "diagnoses_ccs" else str(t + timedelta(minutes=1))
            path = patient_file(world_iii["folder"], s["subject_id"])
            shown = CensoredPatient(path, str(t), rules=EHRSQL_MIMIC_III, censoring="original")
            assert shown.query(sql, (key,))[1] == [(0,)], (task, s)
            later = CensoredPatient(path, str(t + timedelta(days=2)), rules=EHRSQL_MIMIC_III, censoring="original")
            assert later.query(sql, (key,))[1][0][0] >= 1, (task, s)
