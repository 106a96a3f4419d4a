import time

import pytest

from ehrbench.db.database import QueryError

HOSTILE = ["INSERT INTO demographics VALUES (1, 1, 'm', 'x', NULL)", "UPDATE demographics SET gender = 'x'",
           "DELETE FROM demographics", "DROP TABLE demographics", "ALTER TABLE demographics ADD COLUMN x",
           "CREATE TABLE x (a)", "ATTACH DATABASE '/tmp/evil.db' AS evil", "PRAGMA writable_schema = 1",
           "SELECT load_extension('/tmp/evil')"]


@pytest.mark.parametrize("sql", HOSTILE)
def test_writes_and_escapes_are_refused(dbs, sql):
    """Writes read as the original's immutable file answers them; the other escapes name what was refused."""
    db = dbs["mimic_iv_star"]
    writes = sql.split()[0] in ("INSERT", "UPDATE", "DELETE", "DROP", "ALTER", "CREATE")
    with pytest.raises(QueryError, match="attempt to write a readonly database" if writes else "refused"):
        db.execute(sql)
    assert db.execute("SELECT COUNT(*) FROM demographics").rows == [(100,)]


def test_runaway_join_is_stopped_at_its_time_limit_and_the_connection_survives(dbs):
    db = dbs["mimic_iv_star"]
    start = time.monotonic()
    with pytest.raises(QueryError, match="time limit"):
        db.execute("SELECT COUNT(*) FROM labresults a, labresults b, labresults c", timeout_s=1.0)
    assert time.monotonic() - start < 3.0
    assert db.execute("SELECT 1").rows == [(1,)]


def test_one_statement_only(dbs):
    with pytest.raises(QueryError, match="one statement"):
        dbs["mimic_iv_star"].execute("SELECT 1; SELECT 2")


def test_results_are_cached_but_failures_and_timeouts_never_are(db_paths):
    from ehrbench.db.database import Database

    db = Database(db_paths["mimic_iv_star"])   # a fresh instance: an empty cache
    sql = "SELECT gender, COUNT(*) FROM demographics GROUP BY gender ORDER BY gender"
    first = db.execute(sql)
    assert db.execute(sql) == first and db.execute.cache_info().hits == 1
    runaway = "SELECT COUNT(*) FROM labresults a, labresults b, labresults c"
    for _ in range(2):   # timed out twice: ran twice, the second time not answered from a cache
        with pytest.raises(QueryError, match="time limit"):
            db.execute(runaway, timeout_s=0.3)
    with pytest.raises(QueryError, match="attempt to write a readonly database"):
        db.execute("DELETE FROM demographics")
    assert db.execute.cache_info().currsize == 1


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("sql, message", [
    ("SELECT printf('%.*c', 400000000, 'x') FROM demographics LIMIT 10", "1,000,000-byte limit on one value"),
    ("SELECT zeroblob(300000000) FROM demographics LIMIT 20", "1,000,000-byte limit on one value"),
    ("SELECT group_concat(printf('%.*c', 900000, 'x')) FROM labresults", "1,000,000-byte limit on one value"),
    ("SELECT printf('%.*c', 900000, 'x'), printf('%.*c', 900000, 'y') FROM labresults LIMIT 10",
     "first 3 rows of the result are larger than the 4,000,000-byte limit on a result"),
])
def test_giant_values_and_results_are_stopped_with_the_limit_named_and_memory_bounded(dbs, sql, message):
    db = dbs["mimic_iv_star"]
    before = _peak_rss_mb()
    with pytest.raises(QueryError, match=message):
        db.execute(sql, timeout_s=5.0)
    assert _peak_rss_mb() - before < 300            # unguarded, the first query held 5.7 GB
    assert db.execute("SELECT COUNT(*) FROM demographics").rows == [(100,)]


def test_counting_a_long_result_of_wide_values_holds_one_row_at_a_time(dbs):
    """Some 14,000 rows of 0.9 MB each are 13 GB: counted, not held."""
    db = dbs["mimic_iv_star"]
    [(n_rows,)] = db.execute("SELECT COUNT(*) FROM labresults").rows
    before = _peak_rss_mb()
    result = db.execute("SELECT printf('%.*c', 900000, 'x') FROM labresults", timeout_s=30.0, keep=2)
    assert n_rows > 10_000 and len(result.rows) == 2 and result.total == n_rows and _peak_rss_mb() - before < 300


def test_read_only_introspection_is_allowed_and_setting_pragmas_is_refused_by_name(dbs):
    db = dbs["mimic_iv_star"]
    columns = db.execute("SELECT name FROM pragma_table_info('demographics')").rows
    assert ("patientid",) in columns
    with pytest.raises(QueryError, match="PRAGMA writable_schema is not allowed"):
        db.execute("PRAGMA writable_schema = 1")
    for schema_change in ("CREATE TABLE x (a)", "DROP TABLE demographics"):   # worded as the original's file says
        with pytest.raises(QueryError, match="attempt to write a readonly database"):
            db.execute(schema_change)
    with pytest.raises(QueryError, match="is not allowed|may not be modified"):
        db.execute("UPDATE sqlite_master SET sql = ''")
    with pytest.raises(QueryError, match="more than 200 columns"):
        db.execute("SELECT " + ", ".join(f"{i} AS c{i}" for i in range(250)))


def test_the_observation_an_agent_sees_is_capped_and_says_so():
    from ehrbench.db.limits import cap_observation

    text = cap_observation("x" * 70_000, 50_000)
    assert text.startswith("x" * 50_000) and "cut at the 50,000-character limit; 20,000 characters not shown" in text
    assert cap_observation("short", 50_000) == "short"


def test_query_errors_are_never_worth_retrying(dbs):
    db = dbs["mimic_iv_star"]
    for sql in ("DELETE FROM demographics", "SELEC 1", "SELECT zeroblob(300000000)"):
        with pytest.raises(QueryError) as e:
            db.execute(sql)
        assert e.value.retryable is False
