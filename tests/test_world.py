import hashlib
import sqlite3

from ehrbench.schemas import WorldSpec, build_database
from ehrbench.world.generator import WorldSize


def test_same_seed_gives_byte_identical_databases(tmp_path):
    spec = WorldSpec(seed=3, size=WorldSize(mimic_patients=20, eicu_patients=60, eicu_hospitals=3), dictionary="used")
    for db in ("mimic_iv_star", "eicu_star"):
        a = build_database(db, spec, tmp_path / "a").read_bytes()
        b = build_database(db, spec, tmp_path / "b").read_bytes()
        assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest(), db
    other = WorldSpec(seed=4, size=spec.size, dictionary="used")
    assert build_database("mimic_iv_star", other, tmp_path / "c").read_bytes() != \
        build_database("mimic_iv_star", spec, tmp_path / "a").read_bytes()


def test_labs_follow_conditions(db_paths):
    con = sqlite3.connect(db_paths["mimic_iv_star"])
    q = """WITH dm AS (SELECT DISTINCT ad.admissionid FROM admissiondiagnoses ad JOIN diagnosiscodes dc
             ON ad.icdcode = dc.icdcode AND ad.codeversion = dc.codeversion WHERE dc.description LIKE '%diabetes%')
           SELECT AVG(CASE WHEN lr.admissionid IN (SELECT admissionid FROM dm) THEN resultvalue END),
                  AVG(CASE WHEN lr.admissionid NOT IN (SELECT admissionid FROM dm) THEN resultvalue END)
           FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode WHERE lt.itemname = 'glucose'"""
    diabetic, other = con.execute(q).fetchone()
    assert diabetic > 1.4 * other


def test_demo_like_ids_lowercase_values_and_now(db_paths):
    con = sqlite3.connect(db_paths["mimic_iv_star"])
    ids = [r[0] for r in con.execute("SELECT patientid FROM demographics")]
    assert len(ids) == 100 and all(10_000_000 <= i < 10_100_000 for i in ids)
    assert con.execute("SELECT MAX(dischargedatetime) FROM hospitaladmissions").fetchone()[0] <= "2100-12-31 23:59:00"
    names = [r[0] for r in con.execute("SELECT DISTINCT medicationname FROM medicationorders")]
    assert names and all(n == n.lower() for n in names)
    assert con.execute("SELECT COUNT(*) FROM diagnosiscodes").fetchone()[0] > 80_000  # full ICD-9 + ICD-10
    stays = sqlite3.connect(db_paths["eicu_star"]).execute("SELECT COUNT(*) FROM icupatient").fetchone()[0]
    assert stays > 1500


def test_brands_are_known_to_the_drug_vocabulary():
    from drug_named_entity_recognition import find_drugs

    from ehrbench.world.vocab import vocabulary

    for drug in vocabulary().drugs.values():
        for brand in drug.brands:
            found = find_drugs([brand])
            assert found, f"{brand} unknown to drug-named-entity-recognition"
            synonyms = found[0][0]["synonyms"] + [found[0][0]["name"].lower()]
            assert drug.name.split()[0].split("-")[0] in " ".join(synonyms), (brand, drug.name)


SMALL = WorldSpec(seed=5, size=WorldSize(mimic_patients=23, eicu_patients=41, eicu_hospitals=3), dictionary="used")


def test_a_database_is_the_same_file_however_its_patients_are_chunked(tmp_path):
    from ehrbench.schemas.build import build_in_process

    for db in ("mimic_iv_star", "eicu_star"):
        one = build_in_process(db, SMALL, tmp_path / f"{db}-one.sqlite", chunk_patients=10_000).read_bytes()
        for size in (1, 7):
            chunked = build_in_process(db, SMALL, tmp_path / f"{db}-{size}.sqlite", chunk_patients=size)
            assert chunked.read_bytes() == one, (db, size)


def test_chunks_hand_out_every_id_once_in_order_and_costs_point_at_their_events(tmp_path):
    from ehrbench.schemas.build import build_in_process
    from ehrbench.world.generator import generate_world

    world = generate_world(SMALL.seed, SMALL.size)
    eicu = sqlite3.connect(build_in_process("eicu_star", SMALL, tmp_path / "e.sqlite", chunk_patients=4))
    units = [r[0] for r in eicu.execute("SELECT unit_id FROM icupatient ORDER BY rowid")]
    assert len(units) == sum(len(a.icu_stays) for p in world.patients for a in p.admissions)
    assert units == sorted(set(units))                     # one sorted pool, sliced in patient order
    for kind, table, key in (("condition", "condition", "condition_id"), ("lab", "lab", "lab_id"),
                             ("prescription", "prescription", "prescription_id")):
        orphans = eicu.execute(f"SELECT COUNT(*) FROM cost c LEFT JOIN {table} t ON c.event_id = t.{key} "
                               f"WHERE c.event_type = '{kind}' AND t.{key} IS NULL").fetchone()[0]
        assert orphans == 0, kind
    assert eicu.execute("SELECT COUNT(*), COUNT(DISTINCT lab_id), MAX(lab_id) + 1 FROM lab").fetchone() == \
        (eicu.execute("SELECT COUNT(*) FROM lab").fetchone()[0],) * 3
    mimic = sqlite3.connect(build_in_process("mimic_iv_star", SMALL, tmp_path / "m.sqlite", chunk_patients=4))
    assert mimic.execute("SELECT COUNT(*) FROM demographics").fetchone()[0] == SMALL.size.n_mimic
    # the `used` dictionary gathers the codes of every chunk
    assert mimic.execute("SELECT COUNT(*) FROM diagnosiscodes").fetchone()[0] == \
        mimic.execute("SELECT COUNT(*) FROM (SELECT DISTINCT icdcode, codeversion FROM admissiondiagnoses)").fetchone()[0]


def test_built_as_ray_tasks_the_database_is_byte_identical_to_the_single_process_build(tmp_path, ray_cluster):
    from ehrbench.schemas.build import build_in_process, build_on_ray

    for db in ("mimic_iv_star", "eicu_star"):
        local = build_in_process(db, SMALL, tmp_path / f"{db}-local.sqlite", chunk_patients=10_000)
        on_ray, worker_peak_mb = build_on_ray(db, SMALL, tmp_path / f"{db}-ray.sqlite", chunk_patients=6,
                                              max_in_flight=2)
        assert on_ray.read_bytes() == local.read_bytes(), db
        assert worker_peak_mb > 0
    assert not [p for p in tmp_path.iterdir() if "parts" in p.name or ".tmp" in p.name]   # no leftovers


# --- the long tail (world/data/tail.yaml) ------------------------------------------------------------------------
def test_tail_codes_exist_in_the_vocabularies_and_never_shadow_a_curated_item():
    from ehrbench.world.vocab import icd9_titles, icd_diagnoses, vocabulary

    v = vocabulary()
    t = v.tail
    assert len(t.diagnoses) >= 200 and len(t.procedures) >= 50 and len(t.drugs) >= 200 and len(t.labs) >= 100
    for c in t.diagnoses.values():
        assert c.icd9 in icd9_titles() and c.icd10 in icd_diagnoses(10), c.key
    curated_dx = {c.icd9 for c in v.conditions.values()}
    assert not curated_dx & {c.icd9 for c in t.diagnoses.values()}
    assert not {p.icd9[0] for p in v.procedures.values()} & {p.icd9[0] for p in t.procedures.values()}
    # nor does it code a curated item under another key: a curated ICD-10 code or eICU name, a salt or brand of a
    # curated drug (eICU's drug strings start with the generic), so curated cohorts are the same in every rendering
    assert not {c.icd10 for c in v.conditions.values()} & {c.icd10 for c in t.diagnoses.values()}
    assert not {n for c in v.conditions.values() for n in c.eicu_names} & {c.eicu for c in t.diagnoses.values()}
    assert not {p.icd10[0] for p in v.procedures.values()} & {p.icd10[0] for p in t.procedures.values()}
    assert not {p.eicu for p in v.procedures.values()} & {p.eicu for p in t.procedures.values()}
    brands = {b for d in v.drugs.values() for b in d.brands}
    for name in t.drugs:
        assert not any(name.startswith(g + " ") for g in v.drugs), name
        assert not set(name.replace("(", " ").replace(")", " ").split()) & brands, name
    labels = [spec["mimic"] for spec in t.labs.values()]
    assert len(set(labels)) == len(labels), "two tail lab items share a label"
    assert not set(labels) & {spec[k] for spec in v.labs.values() for k in ("mimic", "eicu")}
    assert not {spec["mimic_id"] for spec in v.labs.values()} & {spec["mimic_id"] for spec in t.labs.values()}


def test_the_tail_script_reads_a_gem_that_drops_leading_zeros(tmp_path):
    """CMS's diagnosis GEM as some copies write it: "0340" (strep sore throat) and "340" (multiple sclerosis) are
    both "340"; the file's order (by the full code) tells them apart."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "derive_world_tail", Path(__file__).resolve().parents[1] / "scripts" / "derive_world_tail.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    gem = tmp_path / "gem.csv"
    gem.write_text("icd9cm,icd10cm,flags,approximate,no_map,combination,scenario,choice_list\n"
                   "339,A3790,10000,1,0,0,0,0\n340,J020,10000,1,0,0,0,0\n340,J0300,10000,1,0,0,0,0\n"
                   "3399,G4489,10000,1,0,0,0,0\n340,G35,0,0,0,0,0,0\n3410,G360,0,0,0,0,0,0\n"
                   "V5861,Z7901,0,0,0,0,0,0\n7994,NoDx,1,1,1,0,0,0\n")
    table = script._gem(gem, zero_stripped=True)
    assert table["0340"] == ["J020", "J0300"] and table["340"] == ["G35"] and table["0339"] == ["A3790"]
    assert table["V5861"] == ["Z7901"] and "7994" not in table


def test_treqs_dob_over_89_is_300_years_before_the_first_admission():
    from datetime import datetime, timedelta

    from ehrbench.schemas.treqs import mimic_iii_dob
    from ehrbench.world.model import Admission, Patient

    def patient(dob, admit, age):
        a = Admission(admit=admit, discharge=admit + timedelta(days=3), admission_type="urgent", admit_source="x",
                      discharge_destination="home", insurance="medicare", language="english", marital=None, age=age,
                      icd_version=9)
        return Patient(index=0, hospital=0, gender="f", dob=dob, dod=None, ethnicity="x", conditions=[],
                       drug_choice={}, admissions=[a])

    shift = timedelta(weeks=52 * 40)
    old = patient(datetime(2005, 2, 28), datetime(2100, 3, 1), 95)
    dob = mimic_iii_dob(old, shift)
    assert (old.admissions[0].admit + shift).year - dob.year == 300
    assert (dob.month, dob.day) == ((old.dob + shift).month, (old.dob + shift).day)
    young = patient(datetime(2040, 6, 15), datetime(2100, 3, 1), 59)
    assert mimic_iii_dob(young, shift) == young.dob + shift


def _without_tail(patients, v):
    """The patients with every tail event taken out: what the curated world alone would hold."""
    import copy

    out = copy.deepcopy(patients)
    for p in out:
        for a in p.admissions:
            a.diagnoses = [d for d in a.diagnoses if d.key in v.conditions]
            a.procedures = [e for e in a.procedures if e.key in v.procedures]
            a.labs = [e for e in a.labs if e.lab in v.labs]
            a.medications = [m for m in a.medications if m.drug in v.drugs]
    return out


def test_the_tail_draws_from_its_own_stream_and_leaves_the_curated_world_as_it_was(monkeypatch):
    import dataclasses

    from ehrbench.world.generator import generate_patients
    from ehrbench.world.vocab import vocabulary

    v = vocabulary()
    size = WorldSize(mimic_patients=30, eicu_patients=30, eicu_hospitals=2)
    with_tail = generate_patients(7, size)
    monkeypatch.setattr(v, "tail", dataclasses.replace(v.tail, per_admission={k: 0.0 for k in v.tail.per_admission}))
    curated_only = generate_patients(7, size)
    assert _without_tail(with_tail, v) == curated_only
    assert with_tail != curated_only


def test_the_tail_has_the_hospital_frequencies_it_was_given():
    from collections import Counter

    from ehrbench.world.generator import generate_patients
    from ehrbench.world.vocab import vocabulary

    t = vocabulary().tail
    patients = generate_patients(11, WorldSize(mimic_patients=400, eicu_patients=0))
    admissions = [a for p in patients for a in p.admissions]
    dx = Counter(d.key for a in admissions for d in a.diagnoses if d.key in t.diagnoses)
    per_admission = sum(dx.values()) / len(admissions)
    assert abs(per_admission - t.per_admission["diagnoses"]) < 0.1 * t.per_admission["diagnoses"]
    commonest = sorted(t.diagnoses, key=lambda k: -t.share[k])[:5]
    rare = sorted(t.diagnoses, key=lambda k: t.share[k])[:50]
    assert sum(dx[k] for k in commonest) > 5 * sum(dx[k] for k in rare) / 10      # 5 common vs 50 rare codes
    labs = {e.lab for a in admissions for e in a.labs if e.lab in t.labs}
    assert len(labs) > 0.8 * len(t.labs)                # breadth: most items appear somewhere in 400 patients


def test_a_tail_event_reads_the_same_in_every_rendering(tmp_path):
    """One patient's tail diagnosis, drug and lab, as MIMIC-IV*, EHRSQL MIMIC-III and TREQS store them for that
    patient."""
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.world.generator import generate_patients
    from ehrbench.world.vocab import vocabulary

    v = vocabulary()
    spec = WorldSpec(seed=5, size=WorldSize(mimic_patients=6, eicu_patients=0, eicu_hospitals=1), dictionary="used")
    patients = generate_patients(5, spec.size)
    n, a = next((n, a) for n, p in enumerate(patients) for a in p.admissions if not a.current and a.icd_version == 9
                and any(d.key in v.tail.diagnoses for d in a.diagnoses))
    code = next(v.tail.diagnoses[d.key].icd9 for d in a.diagnoses if d.key in v.tail.diagnoses)
    drug = next(v.tail.drugs[m.drug] for m in a.medications if m.drug in v.tail.drugs)
    lab = next(v.tail.labs[e.lab] for e in a.labs if e.lab in v.tail.labs)
    star = sqlite3.connect(build_database("mimic_iv_star", spec, tmp_path))
    m3 = sqlite3.connect(build_database("ehrsql_mimic_iii", spec, tmp_path))
    treqs = sqlite3.connect(build_database("treqs", spec, tmp_path))
    pid = star.execute("SELECT patientid FROM demographics ORDER BY recordid").fetchall()[n][0]
    subject = m3.execute("SELECT SUBJECT_ID FROM PATIENTS ORDER BY ROW_ID").fetchall()[n][0]   # TREQS shares it
    one = lambda con, sql, *args: con.execute(sql, args).fetchone()[0]  # noqa: E731
    assert one(star, "SELECT COUNT(*) FROM admissiondiagnoses WHERE patientid = ? AND icdcode = ? AND codeversion = 9",
               pid, code.lower())
    assert one(m3, "SELECT COUNT(*) FROM diagnoses_icd WHERE subject_id = ? AND icd9_code = ?", subject, code.lower())
    assert one(treqs, "SELECT COUNT(*) FROM DIAGNOSES WHERE SUBJECT_ID = ? AND ICD9_CODE = ?", subject, code)
    assert one(star, "SELECT COUNT(*) FROM medicationorders WHERE patientid = ? AND medicationname = ?", pid, drug.name)
    assert one(m3, "SELECT COUNT(*) FROM prescriptions WHERE subject_id = ? AND drug = ?", subject, drug.mimic.lower())
    assert one(treqs, "SELECT COUNT(*) FROM PRESCRIPTIONS WHERE SUBJECT_ID = ? AND DRUG = ? AND DRUG_TYPE = ? "
               "AND DRUG_DOSE LIKE ?", subject, drug.mimic, drug.drug_type, f"%{drug.mimic_unit}")
    assert one(m3, "SELECT COUNT(*) FROM labevents JOIN d_labitems USING (itemid) WHERE subject_id = ? AND label = ?",
               subject, lab["mimic"])
    assert one(treqs, "SELECT COUNT(*) FROM LAB WHERE SUBJECT_ID = ? AND LABEL = ? AND FLUID = ? AND CATEGORY = ?",
               subject, lab["label"], lab["fluid"], lab["category"])


def test_ehrsql_s_sample_size_and_denser_vitals_are_world_size_choices():
    """EHRSQL's 1,000-patient samples come from the world's first patients of each site, TREQS keeps every MIMIC-site
    patient; vitals charted every 60 min (MIMIC site) / 5 min (eICU sites) over the whole stay instead of every 2 h
    over the last 72 h. The defaults leave the world as it was (the twins' database digests hold that)."""
    from datetime import timedelta

    from ehrbench.schemas import ehrsql_eicu, ehrsql_mimic_iii, treqs
    from ehrbench.world.generator import WorldSize, generate_patients

    size = WorldSize(scale=20, ehrsql_patients=1000)
    assert (ehrsql_mimic_iii.patient_range(size), treqs.patient_range(size), ehrsql_eicu.patient_range(size)) == \
        ((0, 1000), (0, 2000), (2000, 3000))
    assert ehrsql_eicu.patient_range(WorldSize()) == (0, 1800) and treqs.patient_range(WorldSize()) == (0, 100)

    def stays(size, start, stop):
        return [s for p in generate_patients(0, size, start, stop) for a in p.admissions for s in a.icu_stays
                if s.outtime is not None]
    dense = WorldSize(vitals_every_min=(60, 5), vitals_window_h=None)
    for start, every in ((0, 60), (100, 5)):                      # MIMIC-site patients, then eICU-site ones
        sparse_stays, dense_stays = stays(WorldSize(), start, start + 30), stays(dense, start, start + 30)
        assert sum(len(s.vitals) for s in dense_stays) > 2 * sum(len(s.vitals) for s in sparse_stays)
        for stay in dense_stays[:5]:
            times = sorted({v.time for v in stay.vitals if v.vital == "hr"})
            assert {b - a for a, b in zip(times, times[1:])} == {timedelta(minutes=every)}
            assert times[0] == stay.intime and stay.outtime - times[-1] <= timedelta(minutes=every)
