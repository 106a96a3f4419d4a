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
