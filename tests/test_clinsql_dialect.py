"""ClinSQL's BigQuery SQL on the local DuckDB copy of MIMIC-IV: sqlglot's transpiling plus the known gaps (tables,
SAFE., printf FORMAT, APPROX_QUANTILES, a column named map, QUALIFY, struct UNNEST), each run on a real file.
The queries are written here in ClinSQL's style (an anchor patient's sex and age ±5 years)."""
import sqlite3
import statistics

import duckdb
import pytest

from ehrbench.benchmarks.clinsql.dialect import TranspileError, bigquery_to_duckdb
from ehrbench.schemas import WorldSpec, build_database
from ehrbench.schemas.duckdb_export import export_duckdb
from ehrbench.world.generator import WorldSize

SPEC = WorldSpec(seed=4, size=WorldSize(mimic_patients=60, eicu_patients=0, eicu_hospitals=1), dictionary="used")
HOSP, ICU = "`physionet-data.mimiciv_3_1_hosp", "`physionet-data.mimiciv_3_1_icu"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    path = build_database("mimic_iv", SPEC, tmp_path_factory.mktemp("clinsql"))
    duck = duckdb.connect(str(export_duckdb("mimic_iv", path)), read_only=True)
    yield duck, sqlite3.connect(path)
    duck.close()


def run(duck, bigquery: str):
    return duck.execute(bigquery_to_duckdb(bigquery).sql).fetchall()


def test_cohort_by_age_at_admission_with_datetime_diff_safe_divide_and_countif(world):
    duck, lite = world
    sql = f"""
    WITH cohort AS (
      SELECT a.hadm_id, a.hospital_expire_flag AS died,
             DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0 AS los_days
      FROM {HOSP}.patients` AS p JOIN {HOSP}.admissions` AS a ON p.subject_id = a.subject_id
      WHERE p.gender = 'F' AND p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year BETWEEN 55 AND 85
        AND a.dischtime IS NOT NULL)
    SELECT COUNT(*) AS n, ROUND(AVG(los_days), 2) AS avg_los_days,
           ROUND(100 * SAFE_DIVIDE(COUNTIF(died = 1), COUNT(*)), 2) AS mortality_rate_pct
    FROM cohort"""
    [(n, los, mortality)] = run(duck, sql)
    rows = lite.execute("""SELECT (julianday(a.dischtime) - julianday(a.admittime)) * 24, a.hospital_expire_flag
        FROM patients p JOIN admissions a USING (subject_id) WHERE p.gender = 'F' AND a.dischtime IS NOT NULL
        AND p.anchor_age + CAST(substr(a.admittime, 1, 4) AS INTEGER) - p.anchor_year BETWEEN 55 AND 85""").fetchall()
    assert n == len(rows) > 0
    # BigQuery's DATETIME_DIFF counts hour boundaries crossed, which the transpiled DATE_DIFF('HOUR') does too
    assert los == pytest.approx(statistics.mean(int(h // 1) for h, _ in rows) / 24, abs=0.05)
    assert mortality == round(100 * sum(d for _, d in rows) / len(rows), 2)


def test_approx_quantiles_offset_is_the_quantile_within_a_tolerance(world):
    duck, lite = world
    sql = f"""SELECT APPROX_QUANTILES(n_dx, 100)[OFFSET(50)] AS p50_dx, APPROX_QUANTILES(n_dx, 4)[OFFSET(3)] AS p75_dx
              FROM (SELECT hadm_id, COUNT(DISTINCT icd_code) AS n_dx FROM {HOSP}.diagnoses_icd` GROUP BY hadm_id)"""
    [(p50, p75)] = run(duck, sql)
    counts = sorted(n for (n,) in lite.execute("SELECT COUNT(DISTINCT icd_code) FROM diagnoses_icd GROUP BY hadm_id"))
    exact = statistics.quantiles(counts, n=4, method="inclusive")
    assert abs(p50 - exact[1]) <= 1 and abs(p75 - exact[2]) <= 1 and p50 <= p75


def test_safe_functions_printf_format_a_column_named_map_and_qualify(world):
    duck, _ = world
    sql = f"""SELECT stay_id, SAFE.PARSE_DATE('%Y-%m-%d', value) AS broken, FORMAT('%.1f', valuenum) AS map
              FROM {ICU}.chartevents` WHERE itemid = 220052
              QUALIFY ROW_NUMBER() OVER (PARTITION BY stay_id ORDER BY charttime) = 1"""
    rows = run(duck, sql)
    assert rows and all(broken is None for _, broken, _ in rows)            # SAFE.: NULL, not an error
    assert all(len(m.split(".")[1]) == 1 for *_, m in rows)                   # printf's %.1f, not format's {}
    assert len({s for s, *_ in rows}) == len(rows)                            # QUALIFY kept one row per stay
    steps = bigquery_to_duckdb(sql).steps
    assert "SAFE.STR_TO_DATE -> TRY" in steps and "FORMAT('%...') -> printf" in steps
    assert "table physionet-data.mimiciv_3_1_icu.chartevents -> mimiciv_icu.chartevents" in steps


def test_struct_unnest_for_age_strata(world):
    duck, _ = world
    sql = f"""SELECT s.label, COUNT(p.subject_id) AS n
              FROM UNNEST([STRUCT('18-49' AS label, 18 AS lo, 49 AS hi), STRUCT('50-120', 50, 120)]) AS s
              LEFT JOIN {HOSP}.patients` AS p ON p.anchor_age BETWEEN s.lo AND s.hi
              GROUP BY s.label ORDER BY s.label"""
    rows = run(duck, sql)
    assert [label for label, _ in rows] == ["18-49", "50-120"] and sum(n for _, n in rows) == 60



def test_unaliased_struct_unnest_exposes_fields_and_safe_over_an_aggregate_runs(world):
    """BigQuery's `FROM counts, UNNEST([STRUCT(...)])` names the struct fields as columns (a common way to pivot
    counts into rows), and SAFE.SQRT over an aggregate (a confidence interval) is legal there, not in DuckDB's TRY."""
    duck, lite = world
    sql = f"""WITH counts AS (
                SELECT COUNTIF(gender = 'M') AS men, COUNTIF(gender = 'F') AS women
                FROM {HOSP}.patients`)
              SELECT sex, n FROM counts, UNNEST([STRUCT('M' AS sex, men AS n), STRUCT('F' AS sex, women AS n)])
              ORDER BY sex"""
    expected = lite.execute("SELECT gender, COUNT(*) FROM patients GROUP BY gender ORDER BY gender").fetchall()
    assert run(duck, sql) == expected
    assert "UNNEST of STRUCTs without an alias -> (SELECT UNNEST(..., recursive := true))" in \
        bigquery_to_duckdb(sql).steps
    ci = f"""SELECT AVG(anchor_age) - 1.96 * SAFE.SQRT(VAR_SAMP(anchor_age) / COUNT(*)) AS lo
             FROM {HOSP}.patients`"""
    ages = [a for (a,) in lite.execute("SELECT anchor_age FROM patients")]
    [(lo,)] = run(duck, ci)
    assert lo == pytest.approx(statistics.mean(ages) - 1.96 * (statistics.variance(ages) / len(ages)) ** 0.5)
    assert "SAFE.SQRT over an aggregate -> SQRT" in bigquery_to_duckdb(ci).steps

@pytest.mark.parametrize("sql", ["SELEC COUNT(*) FROM t", "SELECT 1; SELECT 2", "SELECT (1",
                                 "SELECT * FROM d WHERE long_title LIKE '%Parkinson's disease%'"])   # a TokenError
def test_what_cannot_be_read_is_the_model_s_error(sql):
    with pytest.raises(TranspileError):
        bigquery_to_duckdb(sql)


def test_a_map_column_compared_and_a_comment_after_the_last_semicolon_are_read_as_bigquery_reads_them():
    """`map < 65` is a column compared (BigQuery has no MAP type), and `...; -- done;` (the original's extractor
    appends `;` after a trailing comment) is one statement; neither is the model's error. sqlglot's error text
    reaches the model without its terminal colour codes."""
    from ehrbench.benchmarks.clinsql.dialect import TranspileError, bigquery_to_duckdb

    assert bigquery_to_duckdb("SELECT a FROM t WHERE map < 65 AND map>60;").sql == \
        'SELECT a FROM t WHERE "map" < 65 AND "map" > 60'
    assert bigquery_to_duckdb("SELECT 1 AS x; -- done;").sql == "SELECT 1 AS x"
    with pytest.raises(TranspileError, match="one statement at a time"):
        bigquery_to_duckdb("SELECT 1; SELECT 2")
    with pytest.raises(TranspileError) as e:
        bigquery_to_duckdb("SELEC 1 FROM")
    assert "\x1b[" not in str(e.value) and "could not be read as BigQuery SQL" in str(e.value)
