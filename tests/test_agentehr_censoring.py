"""AgentEHR's time censoring: over every table of many (patient, t) pairs, nothing known at or after t is visible,
checked against an independent statement of when each table's rows become known; per-episode state; no way around
the views."""
import random
import sqlite3
from datetime import datetime, timedelta

import pytest

from ehrbench.benchmarks.agentehr.censoring import CensoredPatient, CensoringError, is_time
from ehrbench.benchmarks.agentehr.patient_db import patient_file, split_patients
from ehrbench.schemas import WorldSpec, build_database
from ehrbench.world.generator import WorldSize

SPEC = WorldSpec(seed=4, size=WorldSize(mimic_patients=30, eicu_patients=0, eicu_hospitals=1), dictionary="used")

# The oracle, written apart from the implementation: the columns whose times must all be before t for a row to be
# known (dates: the whole day before t), or the parent whose end must be.
KNOWN_BY = {
    "admissions": ["admittime"], "transfers": ["intime"], "services": ["transfertime"],
    "labevents": ["charttime", "storetime"], "prescriptions": ["starttime"],
    "pharmacy": ["starttime", "verifiedtime"], "emar": ["charttime", "storetime"],
    "microbiologyevents": ["charttime+1d"],
    "icustays": ["intime"], "chartevents": ["charttime", "storetime"], "datetimeevents": ["charttime", "storetime"],
    "inputevents": ["starttime", "storetime"], "outputevents": ["charttime", "storetime"],
    "procedureevents": ["starttime"], "procedures_icd": ["chartdate"], "omr": ["chartdate"],
    "discharge": ["storetime"], "radiology": ["storetime"],
}
AT_DISCHARGE = {"diagnoses_icd", "drgcodes"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("agentehr")
    return split_patients(build_database("mimic_iv", SPEC, root), root)


def _known(table: str, row: dict, cutoff: str, discharged: set) -> bool:
    if table == "patients":
        return True
    if table in AT_DISCHARGE:
        return row["hadm_id"] in discharged
    day = cutoff[:10]
    for column in KNOWN_BY[table]:
        if column.endswith("+1d"):                          # a culture's result: a day after the draw
            value = row[column[:-3]]
            if value is not None and not str(datetime.fromisoformat(value) + timedelta(days=1)) < cutoff:
                return False
            continue
        value = row[column]
        if value is None:
            continue
        if len(value) == 10 and not datetime.fromisoformat(value) + timedelta(days=1) < datetime.fromisoformat(cutoff):
            return False                                   # a date: known once its day is over (at midnight: not yet)
        if len(value) > 10 and not value < cutoff:
            return False
    return True


def _cutoffs(raw: sqlite3.Connection, rng: random.Random, n: int = 6) -> list[str]:
    """Times around the patient's own events (exactly at one, a minute before and after), and a few in between."""
    times = sorted({v for (v,) in raw.execute("SELECT admittime FROM admissions UNION SELECT dischtime FROM "
                                              "admissions UNION SELECT charttime FROM labevents UNION SELECT "
                                              "storetime FROM labevents UNION SELECT intime FROM icustays") if v})
    picked = rng.sample(times, min(n, len(times)))
    out = []
    for t in picked:
        when = datetime.fromisoformat(t)
        out += [t, str(when - timedelta(minutes=1)), str(when + timedelta(minutes=1)),
                f"{(when + timedelta(days=1)).date()} 00:00:00"]                  # the midnight a day ends
    return out


def test_nothing_known_at_or_after_t_is_visible_in_any_table(folder):
    rng = random.Random(7)
    checked = hidden = masked = 0
    for path in sorted(folder.glob("patient_*.db")):
        raw = sqlite3.connect(path)
        raw.row_factory = sqlite3.Row
        for cutoff in _cutoffs(raw, rng):
            view = CensoredPatient(path, cutoff)
            discharged = {r["hadm_id"] for r in raw.execute("SELECT hadm_id FROM admissions WHERE dischtime < ?",
                                                            (cutoff,))}
            for table, columns in view.tables.items():
                rows = [dict(r) for r in raw.execute(f'SELECT * FROM "{table}"')]
                expected = [r for r in rows if _known(table, r, cutoff, discharged)]
                names, seen = view.query(f'SELECT * FROM "{table}"')
                assert len(seen) == len(expected), (path.name, cutoff, table)
                hidden += len(rows) - len(seen)
                for row in seen:
                    for name, value in zip(names, row):
                        if is_time(table, name) and value is not None:      # a death date: once its day is over
                            assert str(value) < (cutoff[:10] if name == "dod" else cutoff), (table, name)
                    cells = dict(zip(names, row))
                    if table == "admissions" and (cells["dischtime"] is None):
                        masked += 1
                        assert cells["discharge_location"] is None and cells["hospital_expire_flag"] is None
                    if table == "icustays" and cells["outtime"] is None:
                        assert cells["los"] is None and cells["last_careunit"] is None
                checked += 1
            view.close()
    assert checked > 2000 and hidden > 1000 and masked > 10       # the pairs reach into admissions, not past them


def test_run_sql_over_the_views_cannot_reach_the_raw_file_or_write(folder):
    path = next(folder.glob("patient_*.db"))
    first = sqlite3.connect(path).execute("SELECT MIN(admittime) FROM admissions").fetchone()[0]
    view = CensoredPatient(path, first)
    assert view.query("SELECT COUNT(*) FROM labevents")[1] == [(0,)]
    for sql in ("SELECT COUNT(*) FROM raw.labevents", "SELECT * FROM raw.admissions",
                "ATTACH DATABASE 'x.db' AS y", "PRAGMA raw.table_info(labevents)", "DELETE FROM labevents",
                "CREATE TABLE t (a)", "DROP TABLE labevents", "INSERT INTO labevents (subject_id) VALUES (1)"):
        with pytest.raises(sqlite3.Error):
            view.query(sql)
    assert view.query("SELECT COUNT(*) FROM labevents")[1] == [(0,)]           # still censored afterwards
    assert view.query("SELECT COUNT(*) FROM patients")[1] == [(1,)]
    with pytest.raises(ValueError, match="must be 'YYYY-MM-DD HH:MM:SS'"):
        CensoredPatient(path, "2150-01-01'; DROP TABLE labevents; --")


def test_two_episodes_of_one_patient_at_different_times_share_nothing(folder):
    path = max(folder.glob("patient_*.db"), key=lambda p: sqlite3.connect(p).execute(
        "SELECT COUNT(*) FROM labevents").fetchone()[0])
    times = sorted(t for (t,) in sqlite3.connect(path).execute("SELECT charttime FROM labevents"))
    early, late = times[len(times) // 4], times[-1]
    a = CensoredPatient(path, early)
    before = a.query("SELECT COUNT(*), MAX(charttime) FROM labevents")[1]
    b = CensoredPatient(path, late)
    assert b.query("SELECT COUNT(*) FROM labevents")[1][0][0] > before[0][0]
    assert a.query("SELECT COUNT(*), MAX(charttime) FROM labevents")[1] == before and before[0][1] < early


def test_a_table_without_a_rule_is_refused_not_shown(folder, tmp_path):
    import shutil

    copy = tmp_path / "patient_1.db"
    shutil.copy(next(folder.glob("patient_*.db")), copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("CREATE TABLE triage (subject_id INTEGER, acuity INTEGER)")
    with pytest.raises(CensoringError, match="'triage' has no censoring rule"):
        CensoredPatient(copy, "2150-01-01 00:00:00")


def test_every_patient_has_a_file_with_only_their_rows(folder):
    files = sorted(folder.glob("patient_*.db"))
    assert len(files) == 30 and (folder / "reference.db").exists()
    for path in files[:5]:
        subject = int(path.stem.split("_")[1])
        conn = sqlite3.connect(path)
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert {"patients", "admissions", "labevents", "discharge"} <= set(tables) and "charlson" not in tables
        for table in tables:
            assert {s for (s,) in conn.execute(f'SELECT DISTINCT subject_id FROM "{table}"')} <= {subject}
    reference = sqlite3.connect(folder / "reference.db")
    assert {n for (n,) in reference.execute("SELECT name FROM sqlite_master")} >= {"d_labitems", "d_items"}
    assert patient_file(folder, "10000013").name == "patient_10000013.db"


def test_dictionary_columns_are_joined_in_and_the_reference_is_not_reachable(folder):
    path = max(folder.glob("patient_*.db"), key=lambda p: sqlite3.connect(p).execute(
        "SELECT COUNT(*) FROM labevents").fetchone()[0])
    view = CensoredPatient(path, "2300-01-01 00:00:00", folder / "reference.db")
    names, rows = view.query("SELECT itemid, label, fluid FROM labevents")
    assert rows and all(label for _, label, _ in rows)
    raw = sqlite3.connect(path).execute("SELECT COUNT(*) FROM labevents").fetchone()[0]
    assert len(rows) == raw                                      # the join adds columns, never rows
    assert "long_title" in view.tables["diagnoses_icd"] and "label" in view.tables["chartevents"]
    with pytest.raises(sqlite3.Error):
        view.query("SELECT * FROM ref.d_labitems")


# The schema-shift subset (EHRSQL's MIMIC-III: upper-case names, no store times), its oracle written apart too.
KNOWN_BY_III = {
    "admissions": ["admittime"], "transfers": ["intime"], "icustays": ["intime"], "labevents": ["charttime"],
    "chartevents": ["charttime"], "inputevents_cv": ["charttime"], "outputevents": ["charttime"],
    "prescriptions": ["startdate"], "microbiologyevents": ["charttime+1d"], "procedures_icd": ["charttime@day"],
}


@pytest.fixture(scope="module")
def folder_iii(tmp_path_factory):
    root = tmp_path_factory.mktemp("agentehr_iii")        # seed 5: a world with a death in it
    spec = WorldSpec(seed=5, size=WorldSize(mimic_patients=30, eicu_patients=0, eicu_hospitals=1), dictionary="used")
    return split_patients(build_database("ehrsql_mimic_iii", spec, root), root)


def _known_iii(table: str, row: dict, cutoff: str, discharged: set, events: dict) -> bool:
    if table == "patients":
        return True
    if table == "diagnoses_icd":
        return row["hadm_id"] in discharged
    if table == "cost":                                  # a charge is known when the event it charges is
        return _known_iii(row["event_type"], events[row["event_type"]][row["event_id"]], cutoff, discharged, events)
    for column in KNOWN_BY_III[table]:
        if column.endswith("+1d"):
            return str(datetime.fromisoformat(row[column[:-3]]) + timedelta(days=1)) < cutoff
        if column.endswith("@day"):
            return str(datetime.fromisoformat(row[column[:-4]][:10]) + timedelta(days=1)) < cutoff
        if not row[column] < cutoff:
            return False
    return True


def test_nothing_known_at_or_after_t_is_visible_in_the_mimic_iii_rendering(folder_iii):
    from ehrbench.benchmarks.agentehr.censoring import EHRSQL_MIMIC_III

    rng = random.Random(3)
    checked = hidden = masked = died = 0
    source = sqlite3.connect(folder_iii.parent / (folder_iii.name.removeprefix("agentehr-") + ".sqlite"))
    source.row_factory = sqlite3.Row
    events = {t: {r["ROW_ID"]: {k.lower(): r[k] for k in r.keys()} for r in source.execute(f"SELECT * FROM {t}")}
              for t in ("diagnoses_icd", "procedures_icd", "labevents", "prescriptions")}   # by ROW_ID, which
    for path in sorted(folder_iii.glob("patient_*.db")):                                  # the split drops
        raw = sqlite3.connect(path)
        raw.row_factory = sqlite3.Row
        times = sorted({v for (v,) in raw.execute("SELECT ADMITTIME FROM ADMISSIONS UNION SELECT DISCHTIME FROM "
                                                  "ADMISSIONS UNION SELECT CHARTTIME FROM LABEVENTS") if v})
        deaths = [f"{d[:10]} 12:00:00" for (d,) in raw.execute("SELECT DOD FROM PATIENTS WHERE DOD IS NOT NULL")]
        for t in rng.sample(times, min(5, len(times))) + deaths:           # and the day of a death, at noon
            when = datetime.fromisoformat(t)
            for cutoff in (t, str(when - timedelta(minutes=1)), str(when + timedelta(minutes=1)),
                           f"{when.date()} 23:58:00", f"{(when + timedelta(days=1)).date()} 00:00:00"):
                view = CensoredPatient(path, cutoff, folder_iii / "reference.db", EHRSQL_MIMIC_III)
                discharged = {r[0] for r in raw.execute("SELECT HADM_ID FROM ADMISSIONS WHERE DISCHTIME < ?",
                                                        (cutoff,))}
                for table in view.tables:
                    rows = [{k.lower(): r[k] for k in r.keys()} for r in raw.execute(f'SELECT * FROM "{table}"')]
                    expected = [r for r in rows if _known_iii(table.lower(), r, cutoff, discharged, events)]
                    names, seen = view.query(f'SELECT * FROM "{table}"')
                    assert len(seen) == len(expected), (path.name, cutoff, table)
                    hidden += len(rows) - len(seen)
                    for row in seen:
                        cells = {n.lower(): v for n, v in zip(names, row)}
                        for name, value in cells.items():          # a death date: once its day is over
                            if EHRSQL_MIMIC_III.is_time(table, name) and value is not None:
                                assert str(value) < (cutoff[:10] if name == "dod" else cutoff), (table, name)
                        if table == "ADMISSIONS" and cells["dischtime"] is None:
                            masked += 1
                            assert cells["discharge_location"] is None
                        died += table == "PATIENTS" and cutoff.endswith("12:00:00") and cells["dod"] is None
                        if table == "ICUSTAYS" and cells["outtime"] is None:
                            assert cells["last_careunit"] is None and cells["last_wardid"] is None
                    checked += 1
                view.close()
    assert checked > 1000 and hidden > 1000 and masked > 10 and died > 0
    assert set(view.tables) >= {"ADMISSIONS", "LABEVENTS", "COST", "DIAGNOSES_ICD", "PATIENTS"}
    assert "LABEL" in [c.upper() for c in view.tables["LABEVENTS"]]          # the dictionary joined in
