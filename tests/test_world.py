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
