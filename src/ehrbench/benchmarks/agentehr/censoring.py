"""What an AgentEHR episode may see of its patient at the prediction time t: censored copies of the patient's file.

Two rules, chosen by `benchmark.censoring`:
- `original` (the default, the contract): the public code's EHRManager, reproduced from its behaviour
  (tests/fixtures/agentehr_censoring_cases.json): `original_view` below;
- `ehrbench` (opt-in, recorded as a departure): the stricter rule described next.

The `ehrbench` guarantee: no row whose event became known at or after t is visible, and no visible cell holds a time at or
after t, through any tool, `run_sql_query` included. Each table is censored by when its row became known, not by its
first time column as the original does (which showed the current admission's discharge, its DRG codes and notes):
- events by their own time, the later of when it happened and when it was stored (a lab drawn before t but
  resulted after it is not yet known): `KNOWN`;
- rows with no time of their own through their parent event: diagnoses_icd and drgcodes are coded at discharge, so
  they appear once their admission's `dischtime` is before t;
- dated rows (procedures_icd, omr) are known at the end of their day, and so is a death date;
- notes by their store time;
- in a visible row, every time at or after t is NULL, and so is what it implies (a current admission's discharge
  location, death flag and death time; a current ICU stay's length and last unit; a running procedure's duration;
  a dispensing's status): `IMPLIED`.

`CensoredPatient` opens the patient's file read-only in a private in-memory connection of its own, copies each table
censored into a temporary table of the same name (a patient's record is small: milliseconds), then detaches the raw
file and the reference, so nothing uncensored is reachable at all; every episode has its own state (two episodes of
one patient at different times share nothing), and an authorizer refuses writes, ATTACH and PRAGMA. Model-written
SQL (`run_sql_query`) also meets the project's query limits: a deadline stops runaway joins, SQLite's length limit
bounds one value, and at most `MAX_ROWS` rows (and `db/limits.py`'s bytes) are kept.
`tests/test_agentehr_censoring.py` checks the guarantee on every table over many (patient, t) pairs against an
independent statement of the rules.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ...db.limits import QueryError, QueryLimits, QueryTimeout, fetch_bounded

LIMITS = QueryLimits()
MAX_ROWS = 100_000         # rows of one model-written query, within LIMITS' bytes (the agent keeps the last 8,000
                           # characters of what it prints, as the original's, which printed any number)
CENSORING = ("original", "ehrbench")
DISCHARGE_TEXT_END = "Physical Exam"      # admissions.text: the discharge summary up to this heading (appendix B.1)

@dataclass(frozen=True)
class Rules:
    """When each table's rows become known, for one rendering (table and column names matched case-insensitively;
    tables absent from `known`, `at_discharge` and `always` are refused)."""
    known: dict[str, str]                       # table -> SQL over its raw columns: when a row became known
    at_discharge: tuple[str, ...]               # visible once their admission is discharged before t
    always: tuple[str, ...]                     # demographics: visible, with a future death date hidden
    dates: frozenset[str]                       # date-only columns known at the end of their day (a death date)
    implied: dict[str, tuple[str, tuple[str, ...]]]   # table -> (anchor time, columns hidden while it is)
    links: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]   # table -> (dictionary, keys, columns joined)

    def is_time(self, table: str, column: str) -> bool:
        column = column.lower()
        return column.endswith(("time", "date")) or column in self.dates or column in ("dob", "dod") or \
            (table.lower() == "datetimeevents" and column == "value")


MIMIC_IV = Rules(
    known={
        "admissions": "admittime",
        "transfers": "intime",
        "services": "transfertime",
        "labevents": "MAX(charttime, COALESCE(storetime, charttime))",
        "prescriptions": "starttime",
        "pharmacy": "MAX(starttime, COALESCE(verifiedtime, starttime))",   # dispensed once the order starts
        "emar": "MAX(charttime, COALESCE(storetime, charttime))",
        "microbiologyevents": "COALESCE(storetime, datetime(charttime, '+1 day'), datetime(chartdate, '+2 day'))",  # a
        # culture's result is stored after it grows: without a store time, a day after the draw
        "icustays": "intime",
        "chartevents": "MAX(charttime, COALESCE(storetime, charttime))",
        "datetimeevents": "MAX(charttime, COALESCE(storetime, charttime))",
        "inputevents": "MAX(starttime, COALESCE(storetime, starttime))",
        "outputevents": "MAX(charttime, COALESCE(storetime, charttime))",
        "procedureevents": "starttime",
        "procedures_icd": "datetime(chartdate, '+1 day')",
        "omr": "datetime(chartdate, '+1 day')",
        "discharge": "storetime",
        "radiology": "storetime",
    },
    at_discharge=("diagnoses_icd", "drgcodes"),
    always=("patients",),
    dates=frozenset({"dod"}),          # other dates belong to rows known by their own rule (a visible draw's day)
    implied={
        "admissions": ("dischtime", ("discharge_location", "hospital_expire_flag", "deathtime")),
        "icustays": ("outtime", ("los", "last_careunit")),
        "procedureevents": ("endtime", ("value", "statusdescription", "originalamount", "ordercategorydescription")),
        "pharmacy": ("stoptime", ("status", "duration")),
    },
    # dictionary columns joined into a table's view, as the original merges its d_* tables in (link_information)
    links={
        "labevents": ("d_labitems", ("itemid",), ("label", "fluid", "category")),
        "chartevents": ("d_items", ("itemid",), ("label", "category", "unitname")),
        "inputevents": ("d_items", ("itemid",), ("label", "category")),
        "outputevents": ("d_items", ("itemid",), ("label", "category")),
        "procedureevents": ("d_items", ("itemid",), ("label", "category")),
        "datetimeevents": ("d_items", ("itemid",), ("label", "category")),
        "diagnoses_icd": ("d_icd_diagnoses", ("icd_code", "icd_version"), ("long_title",)),
        "procedures_icd": ("d_icd_procedures", ("icd_code", "icd_version"), ("long_title",)),
    })

# The EHRSQL MIMIC-III rendering (the schema-shift subset): upper-case names, no store times, dated prescriptions.
# Its DIAGNOSES_ICD.CHARTTIME is EHRSQL's (the admission time): the codes are still known at discharge. A COST row is
# known when its event is (a diagnosis's at discharge, a procedure's at the end of its day).
EHRSQL_MIMIC_III = Rules(
    known={
        "admissions": "admittime",
        "transfers": "intime",
        "icustays": "intime",
        "labevents": "charttime",
        "chartevents": "charttime",
        "inputevents_cv": "charttime",
        "outputevents": "charttime",
        "prescriptions": "startdate",
        "microbiologyevents": "datetime(charttime, '+1 day')",            # a culture's result, a day after the draw
        "procedures_icd": "datetime(date(charttime), '+1 day')",    # as MIMIC-IV's dated procedures: at the day's end
        "cost": "CASE event_type WHEN 'diagnoses_icd' THEN COALESCE((SELECT a.dischtime FROM raw.admissions a "
                "WHERE a.hadm_id = t.hadm_id), '9999') WHEN 'procedures_icd' THEN datetime(date(chargetime), "
                "'+1 day') ELSE chargetime END",      # a charge is known when its event is
    },
    at_discharge=("diagnoses_icd",),
    always=("patients",),
    dates=frozenset({"dod"}),
    implied={
        "admissions": ("dischtime", ("discharge_location",)),
        "icustays": ("outtime", ("last_careunit", "last_wardid")),
        "transfers": ("outtime", ()),
    },
    links={
        "labevents": ("d_labitems", ("itemid",), ("label",)),
        "chartevents": ("d_items", ("itemid",), ("label",)),
        "inputevents_cv": ("d_items", ("itemid",), ("label",)),
        "outputevents": ("d_items", ("itemid",), ("label",)),
        "diagnoses_icd": ("d_icd_diagnoses", ("icd9_code",), ("short_title", "long_title")),
        "procedures_icd": ("d_icd_procedures", ("icd9_code",), ("short_title", "long_title")),
    })

RULES = {"mimic_iv": MIMIC_IV, "ehrsql_mimic_iii": EHRSQL_MIMIC_III}
_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


class CensoringError(ValueError):
    """A table this module has no rule for: refusing is safer than showing it uncensored."""


def is_time(table: str, column: str, rules: Rules = MIMIC_IV) -> bool:
    return rules.is_time(table, column)


def _cell(table: str, column: str, cutoff: str, rules: Rules) -> str:
    """The column as the view shows it: a time at or after the cutoff is NULL, and so are the columns it implies."""
    q, name = f't."{column}"', f'"{column}"'
    if column.lower() in rules.dates:                # a date is known at the end of its day
        return f"CASE WHEN {q} >= date('{cutoff}') THEN NULL ELSE {q} END AS {name}"
    if rules.is_time(table, column):
        return f"CASE WHEN {q} >= '{cutoff}' THEN NULL ELSE {q} END AS {name}"
    anchor, implied = rules.implied.get(table.lower(), (None, ()))
    if column.lower() in implied:
        return f'CASE WHEN t."{anchor}" IS NULL OR t."{anchor}" >= \'{cutoff}\' THEN NULL ELSE {q} END AS {name}'
    return f"{q} AS {name}"


def view_sql(table: str, columns: list[str], cutoff: str, reference: bool = False, rules: Rules = MIMIC_IV) -> str:
    """The censored copy of one table at `cutoff` ('YYYY-MM-DD HH:MM:SS'), with its dictionary's columns joined
    when the reference database is attached."""
    key = table.lower()
    shown = ", ".join(_cell(table, c, cutoff, rules) for c in columns)
    source = f'raw."{table}" AS t'
    if reference and key in rules.links:
        dictionary, keys, extra = rules.links[key]
        have = {c.lower() for c in columns}
        shown += "".join(f', d."{c}" AS "{c}"' for c in extra if c not in have)
        source += f' LEFT JOIN ref."{dictionary}" AS d ON ' + " AND ".join(f't."{k}" = d."{k}"' for k in keys)
    if key in rules.known:
        where = f"{rules.known[key]} < '{cutoff}'"
    elif key in rules.at_discharge:
        where = f"t.hadm_id IN (SELECT hadm_id FROM raw.admissions WHERE dischtime < '{cutoff}')"
    elif key in rules.always:
        where = "1"
    else:
        raise CensoringError(f"table {table!r} has no censoring rule (censoring.Rules.known); it would be shown "
                             "uncensored")
    return f'CREATE TEMP TABLE "{table}" AS SELECT {shown} FROM {source} WHERE {where}'


def check_cutoff(cutoff: str) -> str:
    """The prediction time as the views compare it; anything else is refused (it is written into SQL)."""
    from datetime import datetime

    try:
        return datetime.strptime(cutoff.strip(), "%Y-%m-%d %H:%M:%S").strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ValueError(f"prediction time {cutoff!r} must be 'YYYY-MM-DD HH:MM:SS'") from None


def timestamp_column(columns: list[str]) -> str | None:
    """The original's rule: the first column whose name contains 'time' or 'date' (in any case)."""
    return next((c for c in columns if "time" in c.lower() or "date" in c.lower()), None)


def _text(sql: str) -> str:
    """A cell as the original served it: every value as text (its patient files are all TEXT, read from CSVs), a
    missing one 'nan' (str of pandas' NaN)."""
    return f"COALESCE(CAST(({sql}) AS TEXT), 'nan')"


def _added_columns(conn: sqlite3.Connection, table: str, columns: list[str],
                   tables: set[str]) -> list[tuple[str, str]]:
    """The columns the original's patient_event2db adds before storing: diagnoses_icd.charttime, the admission's
    discharge time less one minute (else ''); admissions.text, the admission's discharge summary up to "Physical
    Exam", stripped (the last note of the admission). Names are matched case-insensitively: EHRSQL's MIMIC-III
    DIAGNOSES_ICD already has a CHARTTIME (the admission's time, which would show a stay's codes from its first
    minute), and it is given the discharge's, as the original gives MIMIC-IV's codes."""
    out = [(c, f't."{c}"') for c in columns]
    lower = [c.lower() for c in columns]
    if table.lower() == "diagnoses_icd" and "admissions" in tables:
        charttime = ("COALESCE((SELECT strftime('%Y-%m-%d %H:%M:%S', a.dischtime, '-1 minute') FROM raw.admissions a "
                     "WHERE a.hadm_id = t.hadm_id AND a.dischtime IS NOT NULL), '')")
        out = [(c, charttime if c.lower() == "charttime" else e) for c, e in out] + \
            ([] if "charttime" in lower else [("charttime", charttime)])
    if table.lower() == "admissions" and "discharge" in tables and \
            conn.execute('SELECT 1 FROM raw."discharge" LIMIT 1').fetchone() is not None:
        spaces = "char(32, 9, 10, 11, 12, 13)"
        cut = (f"trim(CASE WHEN instr(d.text, '{DISCHARGE_TEXT_END}') > 0 THEN substr(d.text, 1, "
               f"instr(d.text, '{DISCHARGE_TEXT_END}') - 1) ELSE d.text END, {spaces})")
        out.append(("text", f"(SELECT {cut} FROM raw.discharge d WHERE d.hadm_id = t.hadm_id "
                            "ORDER BY d.rowid DESC LIMIT 1)"))
    return out


def original_view(conn: sqlite3.Connection, table: str, columns: list[str], cutoff: str, reference: bool,
                  rules: Rules, tables: set[str]) -> int | None:
    """The public code's censoring of one table (EHRManager.load_ehr_for_sample), as a temporary table of the same
    name; returns the row count its load log reports, or None where the original has no such table (its patient
    files hold only tables with rows).
    - the table is cut by its first column whose name holds "time" or "date" (only rows strictly before t; a row
      whose value is missing or unreadable goes); a table without one is shown whole (patients, drgcodes);
    - that column is date-only when none of its first ten values has a time: then it is read as 23:59 of its day;
      it is shown as it was read (pandas: the date alone when every shown time is midnight);
    - pharmacy is emptied (its row count still logged); prescriptions.ndc is cut at '.' and zero-filled to 11;
    - every cell is text, a missing one 'nan'; the dictionary columns are joined in (`Rules.links`)."""
    if conn.execute(f'SELECT 1 FROM raw."{table}" LIMIT 1').fetchone() is None:
        return None
    cells = _added_columns(conn, table, columns, tables)
    stamp = timestamp_column([c for c, _ in cells])
    source, where = f'raw."{table}" AS t', "1"
    if stamp is not None:
        raw = dict(cells)[stamp]
        sample = [str(v).strip() for (v,) in conn.execute(
            f"SELECT {raw} FROM {source} WHERE ({raw}) IS NOT NULL LIMIT 10")]
        date_only = not any(len(v) > 10 and " " in v for v in sample)
        read = f"datetime(date({raw}), '+23 hours', '+59 minutes')" if date_only else f"datetime({raw})"
        cells = [(c, read if c == stamp else e) for c, e in cells]
        where = f"({read}) IS NOT NULL AND ({read}) < '{cutoff}'"
    if table.lower() == "prescriptions":
        cells = [(c, f"substr('00000000000' || substr({_text(e)}, 1, instr({_text(e)} || '.', '.') - 1), -11)"
                  if c.lower() == "ndc" else e) for c, e in cells]
    shown = [f'{_text(e)} AS "{c}"' for c, e in cells]
    extra: tuple[str, ...] = ()
    if reference and table.lower() in rules.links:
        dictionary, keys, extra = rules.links[table.lower()]
        have = {c.lower() for c, _ in cells}
        shown += [f'{_text(f"d.{chr(34)}{c}{chr(34)}")} AS "{c}"' for c in extra if c not in have]
        source += f' LEFT JOIN ref."{dictionary}" AS d ON ' + " AND ".join(f't."{k}" = d."{k}"' for k in keys)
    names = [c for c, _ in cells] + [c for c in (extra if reference and table.lower() in rules.links else ())
                                     if c not in {n.lower() for n, _ in cells}]
    conn.execute(f'CREATE TEMP TABLE "{table}" ({", ".join(f"{chr(34)}{c}{chr(34)} TEXT" for c in names)})')
    conn.execute(f'INSERT INTO temp."{table}" SELECT {", ".join(shown)} FROM {source} WHERE {where}')   # TEXT
    # columns, as pandas' to_sql made them in the original's run_sql_query: `valuenum > 5` compares text
    if stamp is not None and conn.execute(       # pandas prints a datetime column whose times are all midnight
            f'SELECT COUNT(*) > 0 AND SUM(substr("{stamp}", 12) = \'00:00:00\') = COUNT(*) FROM temp."{table}"'
    ).fetchone()[0]:                             # as dates
        conn.execute(f'UPDATE temp."{table}" SET "{stamp}" = substr("{stamp}", 1, 10)')
    count = conn.execute(f'SELECT COUNT(*) FROM temp."{table}"').fetchone()[0]
    if table.lower() == "pharmacy":
        conn.execute('DELETE FROM temp."pharmacy"')
    return count


class CensoredPatient:
    """One episode's view of one patient at one time: `conn` answers SQL over the censored views only (and, given
    `candidates_file`, over the task's candidate tables too, all text, as the original's run_sql_query)."""

    def __init__(self, patient_file: str | Path, cutoff: str, reference_file: str | Path | None = None,
                 rules: Rules = MIMIC_IV, censoring: str = "ehrbench", candidates_file: str | Path | None = None):
        if censoring not in CENSORING:
            raise ValueError(f"censoring={censoring!r}: one of {', '.join(CENSORING)}")
        self.cutoff = check_cutoff(cutoff)
        self.conn = sqlite3.connect("file::memory:", uri=True, check_same_thread=False)
        self.conn.execute("ATTACH DATABASE ? AS raw", (f"file:{Path(patient_file).resolve()}?mode=ro",))
        if reference_file is not None:
            self.conn.execute("ATTACH DATABASE ? AS ref", (f"file:{Path(reference_file).resolve()}?mode=ro",))
        self.tables: dict[str, list[str]] = {}
        self.counts: dict[str, int] = {}         # rows as the load log reports them
        order = "rowid" if censoring == "original" else "name"        # the original's: as its file lists them
        names = [n for (n,) in self.conn.execute(f"SELECT name FROM raw.sqlite_master WHERE type = 'table' "
                                                 f"ORDER BY {order}")]
        for table in names:
            columns = [r[1] for r in self.conn.execute(f'PRAGMA raw.table_info("{table}")')]
            if censoring == "original":
                count = original_view(self.conn, table, columns, self.cutoff, reference_file is not None, rules,
                                      {n.lower() for n in names})
                if count is None:
                    continue
            else:
                self.conn.execute(view_sql(table, columns, self.cutoff, reference_file is not None, rules))
                count = self.conn.execute(f'SELECT COUNT(*) FROM temp."{table}"').fetchone()[0]
            self.counts[table] = count
            self.tables[table] = [d[0] for d in self.conn.execute(f'SELECT * FROM temp."{table}" LIMIT 0')
                                  .description]
        self.candidates: list[str] = []
        if candidates_file is not None:          # run_sql_query reaches them, every column as text
            self.conn.execute("ATTACH DATABASE ? AS cand", (f"file:{Path(candidates_file).resolve()}?mode=ro",))
            for (table,) in self.conn.execute("SELECT name FROM cand.sqlite_master WHERE type = 'table' ORDER BY "
                                              "rowid").fetchall():
                if table in self.tables:
                    continue
                columns = [r[1] for r in self.conn.execute(f'PRAGMA cand.table_info("{table}")')]
                self.conn.execute(f'CREATE TEMP TABLE "{table}" ({", ".join(f"{chr(34)}{c}{chr(34)} TEXT" for c in columns)})')
                self.conn.execute(f'INSERT INTO temp."{table}" SELECT ' + ", ".join(
                    f'CAST("{c}" AS TEXT)' for c in columns) + f' FROM cand."{table}"')
                self.candidates.append(table)
        self.conn.commit()
        self.conn.execute("DETACH DATABASE raw")
        if reference_file is not None:
            self.conn.execute("DETACH DATABASE ref")
        if candidates_file is not None:
            self.conn.execute("DETACH DATABASE cand")
        self.conn.set_authorizer(self._authorize)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMITS.max_value_bytes)

    @staticmethod
    def _authorize(action, arg1, arg2, dbname, source):
        """Reads only: no writes, no ATTACH (the raw file back), no PRAGMA."""
        return sqlite3.SQLITE_OK if action in _READS else sqlite3.SQLITE_DENY

    def query(self, sql: str, params: tuple = (), timeout_s: float = 10.0,
              max_rows: int | None = None) -> tuple[list[str], list[tuple]]:
        """Columns and rows; `QueryError` (its message for the model) past the deadline, a value's size limit, or
        (model SQL) `max_rows` rows or the result's byte limit."""
        deadline = time.monotonic() + timeout_s
        self.conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
        try:
            cursor = self.conn.execute(sql, params)
            if max_rows is None:
                return [d[0] for d in cursor.description or ()], cursor.fetchall()
            result = fetch_bounded(cursor, max_rows, max_rows + 1, LIMITS)
        except sqlite3.Error as e:
            if "interrupted" in str(e) and time.monotonic() > deadline:
                raise QueryTimeout(f"query exceeded the {timeout_s:g} s time limit and was stopped") from None
            if "too big" in str(e):
                raise QueryError(f"a value would be larger than the {LIMITS.max_value_bytes:,}-byte limit on one "
                                 "value; select a shorter part (substr)") from None
            raise
        finally:
            self.conn.set_progress_handler(None, 0)
        if result.total > max_rows:
            raise QueryError(f"the result has more than {max_rows:,} rows; narrow it (WHERE, LIMIT, GROUP BY)")
        return [d[0] for d in cursor.description or ()], result.rows

    def close(self) -> None:
        self.conn.close()
