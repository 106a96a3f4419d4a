"""The DuckDB engine gets the same guards as SQLite: read-only, one SELECT, time, value, result and memory limits."""
import resource
import time

import duckdb
import pytest

from ehrbench.db.duckdb_database import DuckDatabase
from ehrbench.db.limits import QueryError, QueryLimits


@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    path = tmp_path_factory.mktemp("duck") / "world.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE demographics AS SELECT range AS patientid, CASE WHEN range % 2 = 0 THEN 'f' ELSE 'm' "
                 "END AS gender FROM range(100)")
    conn.execute("CREATE TABLE labresults AS SELECT range AS rowid, range % 100 AS patientid, 'glucose' AS itemname, "
                 "(range % 37) * 1.5 AS resultvalue FROM range(15000)")
    conn.close()
    db = DuckDatabase(path, "world", limits=QueryLimits(max_heap_bytes=512 * 2**20))
    yield db
    db.close()


HOSTILE = ["INSERT INTO demographics VALUES (1, 'x')", "UPDATE demographics SET gender = 'x'",
           "DELETE FROM demographics", "DROP TABLE demographics", "CREATE TABLE x (a INT)",
           "ATTACH '/tmp/evil.duckdb' AS evil", "PRAGMA database_list", "SET memory_limit = '100GB'",
           "COPY demographics TO '/tmp/out.csv'", "INSTALL httpfs", "LOAD httpfs"]


@pytest.mark.parametrize("sql", HOSTILE)
def test_writes_settings_and_escapes_are_refused_by_kind(duck, sql):
    with pytest.raises(QueryError, match=r"query refused: the database is read-only and \w+ is not allowed"):
        duck.execute(sql)
    assert duck.execute("SELECT COUNT(*) FROM demographics").rows == [(100,)]


def test_reading_files_from_a_select_is_refused(duck):
    with pytest.raises(QueryError, match="(?i)permission|disabled|external"):
        duck.execute("SELECT * FROM read_csv('/etc/passwd')")


def test_one_statement_only(duck):
    with pytest.raises(QueryError, match="one statement"):
        duck.execute("SELECT 1; SELECT 2")


def test_runaway_join_is_stopped_at_its_time_limit_and_the_connection_survives(duck):
    start = time.monotonic()
    with pytest.raises(QueryError, match="1 s time limit"):
        duck.execute("SELECT COUNT(*) FROM labresults a, labresults b, labresults c WHERE a.resultvalue + "
                     "b.resultvalue > c.resultvalue", timeout_s=1.0)
    assert time.monotonic() - start < 5.0
    assert duck.execute("SELECT 1").rows == [(1,)]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("sql, message", [
    ("SELECT repeat('x', 400000000) FROM demographics LIMIT 10", "memory limit"),
    ("WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r WHERE length(s) < 2000000000) "
     "SELECT max(length(s)) FROM r", "memory limit"),
    ("SELECT repeat('x', 1200000) AS v", "1,000,000-byte limit on one value"),
    ("SELECT repeat('x', 900000), repeat('y', 900000) FROM demographics LIMIT 10",
     "first 3 rows of the result are larger than the 4,000,000-byte limit"),
])
def test_giant_values_and_results_are_stopped_naming_the_limit(duck, sql, message):
    before = _peak_mb()
    with pytest.raises(QueryError, match=message):
        duck.execute(sql, timeout_s=20.0)
    assert _peak_mb() - before < 100                # this process held none of it: the engine's child did
    assert duck.execute("SELECT COUNT(*) FROM demographics").rows == [(100,)]


def test_long_results_stream_and_a_sort_past_the_engine_memory_is_stopped(duck):
    fresh = DuckDatabase(duck.path, "world", limits=duck.limits, workers=1)     # engine processes of its own
    try:
        result = fresh.execute("SELECT labresults.*, repeat('x', 200) FROM labresults", keep=2)
        assert len(result.rows) == 2 and result.total == 15_000
        # sorting 15,000 values of 90 kB (1.35 GB) must hold them all: more than 512 MB of memory + 512 MB of spill
        before = _peak_mb()
        with pytest.raises(QueryError, match="536,870,912-byte memory limit"):
            fresh.execute("SELECT repeat('x', 90000) || rowid AS v FROM labresults ORDER BY v", keep=2,
                          timeout_s=60.0)
        assert _peak_mb() - before < 100                # the engine's child held it, never this process
        assert fresh.execute("SELECT COUNT(*) FROM labresults").rows == [(15_000,)]
    finally:
        fresh.close()


def test_schema_lookups_check_identifiers(duck):
    from ehrbench.db.database import UnknownIdentifier

    assert duck.table_names() == ["demographics", "labresults"]
    assert duck.substring_values("labresults", "itemname", "GLUC") == ["glucose"]
    assert "CREATE TABLE demographics" in duck.table_info("demographics")
    with pytest.raises(UnknownIdentifier, match="column 'nope' not found in table 'demographics'"):
        duck.substring_values("demographics", "nope", "x")
