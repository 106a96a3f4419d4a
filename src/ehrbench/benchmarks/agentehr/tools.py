"""AgentEHR's tools (the public code's MCP server, src/agentlite/mcp_tools/), over one episode's censored patient.

The 19 tools of the paper keep the original's names, arguments and returned strings: inner (think; finish is the
agent's), record (get_records_by_time, get_event_counts_by_time, get_latest_records, get_records_by_keyword,
get_records_by_value, run_sql_query, get_unique_values), candidate (get_candidates_by_keyword,
get_candidates_by_fuzzy_matching, get_candidates_by_semantic_similarity), table (get_column_names, get_table_names,
get_table_description) and knowledge (retrieve_pubmed, retrieve_textbooks, retrieve_statpearls, retrieve_wikipedia),
plus load_ehr, which the agent calls first. Tables print as pandas' `to_string(index=False)`, as the original's do.
Differences, on purpose:
- every record tool and `run_sql_query` reads the censored views (`censoring.py`), so nothing at or after the
  prediction time is reachable; `subject_id` must be the episode's patient;
- the fuzzy ratio is RapidFuzz's (what thefuzz 0.22 calls), the semantic search embeds with the project's offline
  model (all-MiniLM-L6-v2), not BioLORD-2023;
- the knowledge tools search, with BM25, a substitute corpus the project ships (the world's conditions, drugs and
  tests, `knowledge.py`), not MedRAG's PubMed, textbooks, StatPearls and Wikipedia; each result says so.
Observations are cut to their last 8,000 characters by the agent (`agent.py`), as the original's agent does.
"""
from __future__ import annotations

import functools
import re
import sqlite3
import uuid
from pathlib import Path

import pandas

from ...db.limits import QueryError
from ...trial import InfrastructureError
from .censoring import MAX_ROWS, timestamp_column

SQL_TIMEOUT_S = 10.0           # a model-written query's time limit (run_sql_query)

UNIQUE_LIMIT = 50
FUZZY_LIMIT, FUZZY_THRESHOLD = 5, 0
SEMANTIC_LIMIT, SEMANTIC_THRESHOLD = 5, 0.5


def _table(columns, rows) -> str:
    return pandas.DataFrame([["nan" if v is None else v for v in r] for r in rows],
                            columns=columns).to_string(index=False)


def _served(columns, rows) -> "pandas.DataFrame":
    """A table as the original's EHR server hands it to a keyword search: every column as text (`astype(str)`), so
    numbers, dates and ids are searched too, a NULL number reads 'nan' and a NULL text 'None'."""
    typed = pandas.DataFrame([list(r) for r in rows], columns=columns)    # which columns pandas reads as numbers
    text = {}
    for i, c in enumerate(columns):
        kind = typed.iloc[:, i].dtype.kind                      # once per column
        number, floats = kind in "iuf", kind == "f"
        text[c] = [("nan" if number else "None") if r[i] is None else
                   str(float(r[i]) if floats and isinstance(r[i], int) else r[i]) for r in rows]
    return pandas.DataFrame(text, columns=columns, dtype=object)


def _keyword_rows(frame: "pandas.DataFrame", keyword) -> "pandas.DataFrame":
    """The original's match: any cell containing the keyword, case-insensitive, as a regular expression
    (`str.contains`): '509' finds itemid 50912, '.' every row; a pattern Python cannot read raises re.error."""
    needle = str(keyword).lower()
    hit = pandas.Series(False, index=frame.index)
    for column in frame.columns:
        hit |= frame[column].str.lower().str.contains(needle, na=False)
    return frame[hit]


def _time(text: str) -> str:
    """A tool's time argument: 'YYYY-MM-DD HH:MM:SS' or 'YYYY-MM-DD' (midnight), as pandas would read it."""
    return str(pandas.to_datetime(text.strip()).to_pydatetime().replace(microsecond=0))




def candidate_names(columns: list[str], rows: list[tuple]) -> list[str]:
    """A candidate table's names, in its order (its `candidate` column)."""
    at = columns.index("candidate") if "candidate" in columns else 0
    return [str(r[at]) for r in rows]


@functools.lru_cache(maxsize=8)
def candidate_tables(path: str) -> dict[str, tuple[list[str], list[tuple]]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = {}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            cursor = conn.execute(f'SELECT * FROM "{name}"')
            out[name] = ([d[0] for d in cursor.description], cursor.fetchall())
        return out
    finally:
        conn.close()


class AgentEhrTools:
    """One episode's tools: its patient's censored view, the candidate tables, the embedder and the corpus."""

    def __init__(self, views, candidates_file: str | Path, subject_id: int, prediction_time: str, nearest=None,
                 knowledge=None, source: str = "mimic_iv", censoring: str = "original"):
        self.source = source                                  # the rendering: mimic_iv, or ehrsql_mimic_iii
        self.censoring = censoring                            # censoring.py: original (the contract) or ehrbench
        self.candidates_file = str(Path(candidates_file).resolve())
        self.views, self.episode = views, uuid.uuid4().hex     # the patient's shard (views.py), this episode there
        self.subject_id, self.prediction_time = int(subject_id), prediction_time
        self.candidates = candidate_tables(self.candidates_file)
        self.nearest, self.knowledge = nearest, knowledge     # nearest(table, names, query, k): [(name, cosine)]
        self.tables: dict[str, list[str]] | None = None       # once loaded: the censored tables and their columns
        self.counts: dict[str, int] = {}

    # --- plumbing ---------------------------------------------------------------------------------------------
    async def call(self, name: str, arguments: dict) -> str:
        method = getattr(self, f"tool_{name}", None)
        if name.startswith("retrieve_") and self.knowledge is None:      # not offered: the corpus is off
            method = None
        if method is None:
            return f"Error: Unknown tool '{name}'."
        try:
            return limit_output(str(await method(**arguments)))
        except (TypeError, AttributeError, ValueError, QueryError) as e:   # bad or missing arguments: the model's
            return f"Error executing tool {name}: {e}"                      # usage error

    def _patient(self, subject_id) -> str | None:
        if str(subject_id).strip() != str(self.subject_id):
            return (f"Error: patient {subject_id} is not this task's patient; the EHR loaded is for subject_id "
                    f"{self.subject_id}.")
        if self.tables is None:
            return "Error: No EHR data loaded. Call load_ehr first."
        return None

    async def _query(self, sql: str, timeout_s: float = SQL_TIMEOUT_S, max_rows: int | None = None):
        """Columns and rows from the episode's censored view; `QueryError` with the view's message."""
        answer = await self.views.query(self.episode, sql, (), timeout_s, max_rows)
        if answer[0] == "lost":              # the shard restarted (or evicted it): the harness's loss, re-run
            raise InfrastructureError("the episode's censored view was lost by its patient shard", source="tool")
        if answer[0] == "error":
            raise QueryError(answer[1])
        return answer[1], answer[2]

    async def _rows(self, table: str) -> tuple[list[str], list[tuple]]:
        return await self._query(f'SELECT * FROM "{table}"')

    def _ehr_table(self, table: str, function: str) -> str | None:
        if table in self.candidates:
            return f"Error: The tool `{function}` cannot be used to search the Candidate Table: `{table}`."
        if table not in self.tables:
            return f"Error: Table '{table}' not found in EHR Table list: {sorted(self.tables)}."
        return None

    # --- load ------------------------------------------------------------------------------------------------
    async def tool_load_ehr(self, subject_id: str, timestamp: str) -> str:
        if str(subject_id).strip() != str(self.subject_id):
            return f"Error: patient {subject_id} is not this task's patient (subject_id {self.subject_id})."
        if timestamp.strip() != self.prediction_time:
            return (f"Error: the current time of this task is {self.prediction_time}; load the EHR at that time "
                    "(records after it do not exist yet).")
        if self.tables is None:
            opened = await self.views.open(self.episode, self.source, self.subject_id, self.prediction_time,
                                           self.censoring, self.candidates_file)
            self.tables = {t: columns for t, (columns, _) in opened.items()}
            self.counts = {t: n for t, (_, n) in opened.items()}
        lines = ["Loading Candidate Tables:"]
        lines += [f" - Loading '{t}' with {len(rows)} rows." for t, (_, rows) in self.candidates.items()]
        lines.append("Loading EHR Tables:")
        lines += [f" - Loading '{t}' with {self.counts[t]} rows." for t in self.tables]
        return "\n".join(lines)

    # --- inner -----------------------------------------------------------------------------------------------
    async def tool_think(self, response: str) -> str:
        return "Thinking Finish"

    # --- table -----------------------------------------------------------------------------------------------
    async def tool_get_table_names(self, subject_id: str) -> str:
        if err := self._patient(subject_id):
            return err
        return ("Available Tables:\n\nEHR Tables:\n" + ", ".join(sorted(self.tables)) +
                "\n\nCandidate Tables:\n" + ", ".join(sorted(self.candidates)))

    async def tool_get_column_names(self, subject_id: str, table_name: str) -> str:
        if err := self._patient(subject_id):
            return err
        columns = self.tables.get(table_name) or (self.candidates.get(table_name) or ([], []))[0]
        if not columns:
            return f"Error: Table '{table_name}' not found in EHR or candidate table lists."
        return f"Columns for table '{table_name}': {', '.join(columns)}"

    async def tool_get_table_description(self, table_name: str) -> str:
        from .knowledge import table_description

        return table_description(table_name)

    async def tool_get_unique_values(self, subject_id: str, table_name: str, column_name: str) -> str:
        if err := self._patient(subject_id):
            return err
        if table_name not in self.tables:
            return f"Error: Table '{table_name}' not found in EHR table list."
        if column_name not in self.tables[table_name]:
            return f"Error: Column '{column_name}' not found in table '{table_name}'."
        values = [v for (v,) in (await self._query(f'SELECT DISTINCT "{column_name}" FROM "{table_name}"'))[1]]
        values = sorted("nan" if v is None else str(v) for v in values)
        if len(values) > UNIQUE_LIMIT:
            return (f"Error: The column '{column_name}' has {len(values)} unique values, which is too many to "
                    f"display. This tool is intended for categorical columns with fewer than {UNIQUE_LIMIT} "
                    f"options. Here are the first 10 examples: {values[:10]}")
        return str(values)

    # --- records ---------------------------------------------------------------------------------------------
    async def tool_get_records_by_time(self, subject_id: str, table_name: str, start_time: str, end_time: str) -> str:
        if err := self._patient(subject_id) or self._ehr_table(table_name, "get_records_by_time"):
            return err
        columns, rows = await self._rows(table_name)
        column = timestamp_column(columns)
        if column is None:
            return f"Error: No timestamp column found in table '{table_name}'. Cannot filter by time."
        try:
            lo, hi = _time(start_time), _time(end_time)
        except (ValueError, TypeError):
            return ("Error: Start time or end time format is invalid. Please use a format like 'YYYY-MM-DD' or "
                    "'YYYY-MM-DD HH:MM:SS'.")
        i = columns.index(column)
        found = [r for r in rows if r[i] is not None and lo <= _time(str(r[i])) <= hi]
        if not found:
            return f"No records found in table '{table_name}' between {start_time} and {end_time}."
        return _table(columns, found)

    async def tool_get_event_counts_by_time(self, subject_id: str, start_time: str, end_time: str) -> str:
        if err := self._patient(subject_id):
            return err
        try:
            lo, hi = _time(start_time), _time(end_time)
        except (ValueError, TypeError):
            return ("Error: Start time or end time format is invalid. Please use a format like 'YYYY-MM-DD' or "
                    "'YYYY-MM-DD HH:MM:SS'.")
        lines = [f"Event counts between {start_time} and {end_time}:"]
        for table in sorted(self.tables):
            columns, rows = await self._rows(table)
            column = timestamp_column(columns)
            if column is None:
                lines.append(f"- {table}: Could not find a timestamp column.")
                continue
            i = columns.index(column)
            lines.append(f"- {table}: {sum(1 for r in rows if r[i] is not None and lo <= _time(str(r[i])) <= hi)} "
                         "events")
        return "\n".join(lines)

    async def tool_get_latest_records(self, subject_id: str, table_name: str) -> str:
        if err := self._patient(subject_id) or self._ehr_table(table_name, "get_latest_records"):
            return err
        columns, rows = await self._rows(table_name)
        column = timestamp_column(columns)
        if column is None:
            return f"Error: No timestamp column found in table '{table_name}'. Cannot find the latest records."
        i = columns.index(column)
        times = [r[i] for r in rows if r[i] is not None]
        if not times:
            return f"No valid timestamps found in table '{table_name}' to determine the latest records."
        latest = max(times, key=lambda x: _time(str(x)))
        return _table(columns, [r for r in rows if r[i] == latest])

    async def tool_get_records_by_keyword(self, subject_id: str, table_name: str, keyword: str) -> str:
        if err := self._patient(subject_id) or self._ehr_table(table_name, "get_records_by_keyword"):
            return err
        columns, rows = await self._rows(table_name)
        try:
            found = _keyword_rows(_served(columns, rows), keyword)
        except re.error as e:
            return f"Error executing tool get_records_by_keyword: {e}"
        if found.empty:
            return f"No records found in table '{table_name}' containing the keyword '{keyword}'."
        return found.to_string(index=False)

    async def tool_get_records_by_value(self, subject_id: str, table_name: str, column_name: str, value: str) -> str:
        if err := self._patient(subject_id) or self._ehr_table(table_name, "get_records_by_value"):
            return err
        columns, rows = await self._rows(table_name)
        if column_name not in columns:
            return f"Error: Column '{column_name}' not found in table '{table_name}'."
        i = columns.index(column_name)
        found = [r for r in rows if str("nan" if r[i] is None else r[i]).strip() == str(value).strip()]
        if not found:
            return f"No records found in table '{table_name}' where '{column_name}' equals '{value}'."
        return _table(columns, found)

    async def tool_run_sql_query(self, subject_id: str, sql_query: str) -> str:
        if err := self._patient(subject_id):
            return err
        listed = list(self.tables) + list(self.candidates)
        if not any(t.lower() in str(sql_query).lower() for t in listed):   # the original loaded only the tables
            return ("Error: The SQL query does not seem to reference any available tables. Available tables: "
                    f"{listed}")                                            # the query names, and none here
        try:
            columns, rows = await self._query(str(sql_query), SQL_TIMEOUT_S, MAX_ROWS)
        except QueryError as e:             # pandas' read_sql_query words it so in the original
            return f"SQL Execution Error: Execution failed on sql '{sql_query}': {e}"
        if not rows:
            return "Query executed successfully but returned no results."
        return _table(columns, rows)

    # --- candidates ------------------------------------------------------------------------------------------
    def _candidate_table(self, table_name: str):
        return self.candidates.get(table_name)

    async def tool_get_candidates_by_keyword(self, table_name: str, keyword: str) -> str:
        found = self._candidate_table(table_name)
        if found is None:
            return f"Error: Table '{table_name}' not found in EHR table list: {sorted(self.candidates)}."
        columns, rows = found
        try:
            key = "candidate" if "candidate" in columns else columns[0]
            hits = _keyword_rows(_served(columns, rows), keyword).drop_duplicates(subset=[key])
        except re.error as e:
            return f"Error executing tool get_candidates_by_keyword: {e}"
        if hits.empty:
            return f"No records found in table '{table_name}' containing the keyword '{keyword}'."
        return hits.to_string(index=False)

    async def tool_get_candidates_by_fuzzy_matching(self, table_name: str, keywords) -> str:
        from rapidfuzz import fuzz

        found = self._candidate_table(table_name)
        if found is None:
            return f"Error: Table '{table_name}' not found in candidate tables."
        columns, rows = found
        names = candidate_names(columns, rows)
        out = []
        for keyword in [keywords] if isinstance(keywords, str) else list(keywords):
            scored = sorted(((round(fuzz.ratio(n.lower(), str(keyword).lower())), n, r) for n, r in zip(names, rows)),
                            key=lambda x: -x[0])
            seen, top = set(), []
            for score, name, r in scored:
                if score >= FUZZY_THRESHOLD and name not in seen:
                    seen.add(name)
                    top.append((*r, score))
                if len(top) == FUZZY_LIMIT:
                    break
            out.append(f"--- Results for keyword '{keyword}' (threshold: {FUZZY_THRESHOLD}, limit: {FUZZY_LIMIT}) "
                       f"---\n{_table([*columns, 'similarity_score'], top)}\n" if top else
                       f"--- No similar candidates found for keyword '{keyword}' (threshold: {FUZZY_THRESHOLD}) ---\n")
        return "\n".join(out)

    async def tool_get_candidates_by_semantic_similarity(self, table_name: str, query) -> str:
        found = self._candidate_table(table_name)
        if found is None:
            return f"Error: Table '{table_name}' not found in candidate tables."
        names = list(dict.fromkeys(candidate_names(*found)))
        out = []
        for q in [query] if isinstance(query, str) else list(query):
            ranked = [(n, round(s, 3)) for n, s in await self.nearest(table_name, names, str(q), SEMANTIC_LIMIT)
                      if s >= SEMANTIC_THRESHOLD]
            out.append(f"--- Semantic search results for '{q}' ---\nFound {len(ranked)} unique candidate names "
                       f"(threshold: {SEMANTIC_THRESHOLD}, limit: {SEMANTIC_LIMIT})\n"
                       f"{_table(['candidate', 'similarity'], ranked)}" if ranked else
                       f"--- No semantically similar candidates found for '{q}' (threshold: {SEMANTIC_THRESHOLD}) "
                       "---\n")
        return "\n".join(out)

    # --- knowledge (a substitute corpus) ---------------------------------------------------------------------
    async def _retrieve(self, query: str, corpus: str) -> str:
        return self.knowledge.search(query, corpus)

    async def tool_retrieve_pubmed(self, query: str) -> str:
        return await self._retrieve(query, "PubMed")

    async def tool_retrieve_textbooks(self, query: str) -> str:
        return await self._retrieve(query, "textbooks")

    async def tool_retrieve_statpearls(self, query: str) -> str:
        return await self._retrieve(query, "StatPearls")

    async def tool_retrieve_wikipedia(self, query: str) -> str:
        return await self._retrieve(query, "Wikipedia")

    async def close(self) -> None:
        if self.tables is not None:
            await self.views.close(self.episode)
            self.tables = None


_TYPES = {"string": {"type": "string"}, "array": {"type": "array", "items": {"type": "string"}},
          "string_or_array": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}
KNOWLEDGE_NOTE = " (ehrbench: a substitute corpus built from the benchmark world's vocabulary.)"


def _specs() -> list[dict]:
    """The tools' schemas for the model, from the public code's own declarations (`data/tools.yaml`: names,
    descriptions, parameter descriptions and types word for word); the knowledge tools say they are a substitute."""
    from importlib import resources

    import yaml

    declared = yaml.safe_load(resources.files("ehrbench.benchmarks.agentehr.data").joinpath("tools.yaml").read_text())
    return [{"name": t["name"],
             "description": t["description"] + (KNOWLEDGE_NOTE if t["name"].startswith("retrieve_") else ""),
             "parameters": {"type": "object",
                            "properties": {p: {**_TYPES[d["type"]], "description": d["description"]}
                                           for p, d in t["parameters"].items()},
                            "required": list(t["parameters"])}} for t in declared]


SPECS = _specs()
PAPER_TOOLS = [s["name"] for s in SPECS if s["name"] != "load_ehr"]     # the paper's 19
MAX_OUTPUT = 8000


def limit_output(text: str, limit: int = MAX_OUTPUT) -> str:
    """The original agent's cut: the last `limit` characters, and how long it was."""
    if len(text) <= limit:
        return text
    return text[-limit:] + f"... (totally {len(text)} str, and has been cut to {limit} str)"
