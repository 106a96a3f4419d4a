import time

import pytest

from ehrbench.db.database import QueryError

HOSTILE = ["INSERT INTO demographics VALUES (1, 1, 'm', 'x', NULL)", "UPDATE demographics SET gender = 'x'",
           "DELETE FROM demographics", "DROP TABLE demographics", "ALTER TABLE demographics ADD COLUMN x",
           "CREATE TABLE x (a)", "ATTACH DATABASE '/tmp/evil.db' AS evil", "PRAGMA writable_schema = 1",
           "SELECT load_extension('/tmp/evil')"]


@pytest.mark.parametrize("sql", HOSTILE)
def test_writes_and_escapes_are_refused(dbs, sql):
    db = dbs["mimic_iv_star"]
    with pytest.raises(QueryError, match="refused"):
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
    with pytest.raises(QueryError, match="refused"):
        db.execute("DELETE FROM demographics")
    assert db.execute.cache_info().currsize == 1
