"""Deciding ClinSQL's rubric leaves.

Under `benchmark.contract=original` (the default) the LLM judge decides every leaf as the authors' scorer
(evaluation/clinical_rubric_scorer.py) asks it: `original_prompt` (the requirement, the question, the candidate SQL,
every row of the candidate's saved CSV read back by pandas as JSON records, NaN for an empty cell, a failed or empty
query as the one-column null CSV the original saved; with `benchmark.judge_gold=true`, the default, the gold SQL and
gold rows too, as the published runs had them), at temperature 0.2 and 1,024 tokens, one call per leaf, the reply
read by `parse_original` (the float after the first line's colon, else 1 if the reply holds a "1" anywhere): an
unparsable verdict is scored, never dropped.

Opt-ins (`contract=ehrbench` switches them on): the deterministic checker below decides the results leaves it can
read (`benchmark.leaf_checker=true`; the judge is still asked, and their agreement is reported per leaf type), and
the judge's reply is read strictly (asked once more, then the grading fails).

Results leaves the checker decides (ClinSQL's results trees are made of these):
- `csv-file-exists`: the candidate query ran and returned at least one row (the original saved a failed or empty
  query as a one-column null CSV and sometimes credited it; here it scores 0);
- `<column>-exists`: the gold column the leaf names has a candidate column: the same name (case and punctuation
  aside), else the one in the same position when both results have as many columns;
- `no-null-empty-values`: no candidate column holds more NULL or empty cells than its gold column does;
- `<column>-plausible` / `<column>-acceptable` with "(lo to hi)" or "(lo–hi)" in the requirement: every value of
  the candidate's column is a number within the range (none, or a non-number: 0).
A leaf the checker cannot read (no gold column matches its id, no range in its text) is left to the LLM grader, or,
offline, scores 0 and is counted as undecided.

SQL leaves: the offline grader passes every SQL leaf when the candidate is the gold query up to formatting (the
same sqlglot syntax tree, identifiers and keywords normalised) and fails them otherwise; the LLM grader asks one
question per leaf with the requirement, the question, the candidate SQL and result and the gold SQL and result
(the original omitted the gold reference unless extra files existed), and reads "Score: 0|1" and an explanation;
a reply without a readable score is asked again once, then fails the grading (never a pass).
"""
from __future__ import annotations

import asyncio
import io
import json
import math
import re
from dataclasses import dataclass, field

import pandas

import sqlglot
from sqlglot import exp

from ...failures import kind_of
from ...llm.base import ChatRequest, ModelTurnError, Sampling
from ...llm.usage import MeteredModel
from ...trial import InfrastructureError, Message
from .rubric import Node

NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?"       # 12, 1,000, 0.5, 1e+06
RANGE = re.compile(rf"\(\s*(?:e\.g\.,?\s*)?({NUMBER})\s*(?:to|–|—|-)\s*({NUMBER})\b[^()]*\)")
SCORE = re.compile(r"Score\s*[:=]\s*\**\s*([01])(?:\.0+)?(?![.\d])", re.I)   # "Score: 0.5" is unreadable
PROMPT_ROWS = 50             # candidate and gold rows shown to the LLM grader


@dataclass
class Candidate:
    """What the agent produced: its last SQL and, when it ran, the result table."""
    sql: str = ""
    executed: bool = False
    columns: tuple[str, ...] = ()
    rows: list[tuple] = field(default_factory=list)
    error: str | None = None


@dataclass
class Decision:
    leaf: str
    score: float | None          # None: undecided
    rationale: str
    source: str                  # checker | sql_equivalence | llm


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _is_null(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (
        isinstance(value, float) and math.isnan(value))


def _number(value) -> float | None:
    if isinstance(value, bool) or _is_null(value):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


class ResultsChecker:
    """Decides results leaves from the candidate and gold tables."""

    def __init__(self, gold_columns, gold_rows, candidate: Candidate):
        self.gold_columns, self.gold_rows, self.c = tuple(gold_columns), list(gold_rows), candidate

    def gold_column(self, leaf_id: str, context: str = "") -> str | None:
        """The gold column a leaf id (`los_p75-exists`, `avg-score-validation`) names."""
        for text in (leaf_id, context):
            stem = _norm(re.sub(r"-(exists|plausible|acceptable|validation)$", "", text))
            for col in self.gold_columns:
                if _norm(col) == stem:
                    return col
        return None          # a leaf naming no gold column ("secondary-column-exists") is left to the judge

    def candidate_index(self, gold_col: str) -> int | None:
        """The candidate's column for a gold one: the same name, else the same position when both results have as
        many columns and that column's name answers no other gold column."""
        names = [_norm(c) for c in self.c.columns]
        if _norm(gold_col) in names:
            return names.index(_norm(gold_col))
        i = self.gold_columns.index(gold_col)
        if len(names) == len(self.gold_columns) and names[i] not in {_norm(g) for g in self.gold_columns}:
            return i
        return None

    def decide(self, leaf: Node, parent: Node | None) -> Decision:
        c, lid = self.c, leaf.id
        if lid == "csv-file-exists" or leaf.requirements.strip().lower() == "csv file exists":
            ok = c.executed and bool(c.rows)
            return Decision(lid, float(ok), "the query ran and returned rows" if ok else
                            ("the query returned no rows" if c.executed else "the query did not run"), "checker")
        if not c.executed:
            return Decision(lid, 0.0, "the query did not run: no result to check", "checker")
        if lid == "no-null-empty-values":
            for col in self.gold_columns:
                i = self.candidate_index(col)
                if i is None:
                    continue
                gold_nulls = sum(_is_null(r[self.gold_columns.index(col)]) for r in self.gold_rows)
                nulls = sum(_is_null(r[i]) for r in c.rows)
                if nulls > gold_nulls:
                    return Decision(lid, 0.0, f"column {c.columns[i]!r} has {nulls} NULL/empty values "
                                    f"(the gold result has {gold_nulls})", "checker")
            return Decision(lid, 1.0, "no NULL/empty values beyond the gold result's", "checker")
        kind = next((k for k in ("exists", "plausible", "acceptable") if lid.endswith(f"-{k}")), None)
        col = self.gold_column(lid, parent.id if parent else "") if kind else None
        if col is None:
            return Decision(lid, None, "no gold column matches this leaf", "checker")
        i = self.candidate_index(col)
        if kind == "exists":
            return (Decision(lid, 1.0, f"column {c.columns[i]!r} answers gold column {col!r}", "checker")
                    if i is not None else
                    Decision(lid, 0.0, f"no column answers gold column {col!r} (got {list(c.columns)})", "checker"))
        found = RANGE.search(leaf.requirements)
        if found is None:
            return Decision(lid, None, "no numeric range in the requirement", "checker")
        lo, hi = sorted(float(g.replace(",", "")) for g in found.groups())
        if i is None:
            return Decision(lid, 0.0, f"no column answers gold column {col!r}", "checker")
        values = [r[i] for r in c.rows if not _is_null(r[i])]
        numbers = [_number(v) for v in values]
        if not values or any(x is None for x in numbers):
            return Decision(lid, 0.0, f"column {c.columns[i]!r} holds no numbers" if not values else
                            f"column {c.columns[i]!r} holds a non-number", "checker")
        outside = [x for x in numbers if not lo - 1e-9 <= x <= hi + 1e-9]
        return Decision(lid, float(not outside), f"all {len(numbers)} values of {c.columns[i]!r} within "
                        f"{lo:g}–{hi:g}" if not outside else f"{len(outside)} of {len(numbers)} values of "
                        f"{c.columns[i]!r} outside {lo:g}–{hi:g} (e.g. {outside[0]:g})", "checker")


def parents(root: Node) -> dict[str, Node]:
    out = {}
    for _, node in root.walk():
        for child in node.sub_tasks:
            out.setdefault(child.id, node)
    return out


def canonical_sql(sql: str) -> str | None:
    """The query's sqlglot syntax tree, written back normalised (None when it cannot be read)."""
    try:
        trees = [t for t in sqlglot.parse(sql.strip().rstrip(";"), read="bigquery") if t is not None]
    except sqlglot.errors.SqlglotError:
        return None
    if len(trees) != 1:
        return None
    tree = trees[0]
    for comment_holder in tree.walk():
        if isinstance(comment_holder, exp.Expression):
            comment_holder.comments = None
    return tree.sql(dialect="bigquery", normalize=True, pretty=False)


def sql_equivalent(candidate: str, gold: str) -> bool:
    a, b = canonical_sql(candidate or ""), canonical_sql(gold)
    return a is not None and a == b


def offline_sql_decisions(tree: Node, candidate: str, gold: str) -> list[Decision]:
    same = sql_equivalent(candidate, gold)
    why = ("the query is the gold query up to formatting (same syntax tree)" if same else
           "the query is not the gold query's syntax tree (the offline grader decides only that; use an LLM grader "
           "for partial credit)")
    return [Decision(leaf.id, float(same), why, "sql_equivalence") for leaf in tree.leaves()]


def _table_json(columns, rows) -> str:
    records = [dict(zip(columns, ["" if v is None else v for v in row])) for row in list(rows)[:PROMPT_ROWS]]
    more = f"\n... and {len(rows) - PROMPT_ROWS} more rows" if len(rows) > PROMPT_ROWS else ""
    return json.dumps(records, indent=2, default=str) + more


def grader_prompt(leaf: Node, kind: str, question: str, candidate: Candidate, gold_sql: str, gold_columns,
                  gold_rows) -> str:
    """ClinSQL's judge prompt (evaluation/clinical_rubric_scorer.py), always with the gold SQL and result."""
    parts = ["You are an expert clinical data QA judge assessing SQL-based answers.",
             "Follow the rubric requirements precisely. Respond with JSON on two lines:",
             "Score: <0 or 1>", "Explanation: <brief reason>", "---",
             f"Rubric node requirements:\n{leaf.requirements}",
             f"Evaluation target: {kind}",
             f"Clinical question: {question}",
             f"Model SQL:\n```sql\n{candidate.sql}\n```",
             f"Reference SQL:\n```sql\n{gold_sql}\n```"]
    if candidate.executed:
        parts.append(f"Model results rows (JSON):\n{_table_json(candidate.columns, candidate.rows)}")
    else:
        parts.append(f"Model results: none (the query failed: {candidate.error or 'no SQL'})")
    parts.append(f"Reference results rows (JSON):\n{_table_json(gold_columns, gold_rows)}")
    parts.append("Output strictly as: Score: <0 or 1>\nExplanation: <text>")
    return "\n\n".join(parts)


NULL_CSV = 'result\n""\n'        # what the original saved for a failed or empty query


def judge_rows(csv: str) -> str:
    """A result CSV as the original's judge saw it: read back by pandas, as JSON records (NaN for an empty cell,
    numbers typed as pandas reads them), `json.dumps(..., indent=2)`."""
    return json.dumps(pandas.read_csv(io.StringIO(csv)).to_dict(orient="records"), indent=2)


def candidate_csv(candidate: Candidate) -> str:
    """The CSV the original saved for a candidate: its rows, or the one-column null CSV when it failed or was
    empty."""
    from .tasks import csv_text

    return csv_text(candidate.columns, candidate.rows) if candidate.executed and candidate.rows else NULL_CSV


def original_prompt(leaf: Node, kind: str, question: str, candidate: Candidate, gold_sql: str | None,
                    gold_csv: str | None) -> str:
    """The authors' _build_prompt: parts joined by blank lines; the gold parts only when given."""
    parts = ["You are an expert clinical data QA judge assessing SQL-based answers.",
             "Follow the rubric requirements precisely. Respond with JSON on two lines:",
             "Score: <0 or 1>", "Explanation: <brief reason>", "---",
             f"Rubric node requirements:\n{leaf.requirements}", f"Evaluation target: {kind}"]
    if question:
        parts.append(f"Clinical question: {question}")
    if candidate.sql:
        parts.append(f"Model SQL:\n```sql\n{candidate.sql}\n```")
    if gold_sql:
        parts.append(f"Reference SQL:\n```sql\n{gold_sql}\n```")
    parts.append(f"Model results rows (JSON):\n{judge_rows(candidate_csv(candidate))}")
    if gold_csv is not None:
        parts.append(f"Reference results rows (JSON):\n{judge_rows(gold_csv)}")
    parts.append("Output strictly as: Score: <0 or 1>\nExplanation: <text>")
    return "\n\n".join(parts)


def parse_original(reply: str) -> tuple[float, str]:
    """The authors' _call_judge: the float after the colon of the first line and the text after the second line's
    colon; if that fails, 1 when a "1" appears anywhere in the reply, else 0 (a "Score: 0.5" stays 0.5)."""
    try:
        score_line, explanation_line = reply.strip().split("\n", 1)
        score = float(score_line.split(":", 1)[1].strip().split()[0])
        explanation = explanation_line.split(":", 1)[1].strip()
    except Exception:  # noqa: BLE001 - the original's catch-all
        score, explanation = (1.0 if "1" in reply else 0.0), reply.strip()
    return score, explanation[:4000]


def read_verdict(text: str) -> tuple[float, str] | None:
    """(score, explanation) from "Score: 0|1\\nExplanation: ..."; None when no score can be read."""
    found = SCORE.search(text or "")
    if not found:
        return None
    explanation = re.search(r"Explanation\s*[:=]\s*(.*)", text, re.S | re.I)
    return float(found.group(1)), (explanation.group(1).strip() if explanation else text.strip())[:4000]


JUDGE_TEMPERATURE, JUDGE_MAX_TOKENS = 0.2, 1024          # the authors' scorer's settings


class LlmGrader:
    """One model call per leaf. `original`: the authors' settings and reading (every reply scored; a prompt the
    provider refuses for its size scores 0, as the published runs' "Evaluation failed" leaves did); otherwise an
    unreadable reply is asked once more, then fails the grading."""

    def __init__(self, model: MeteredModel, seed: int | None = None, original: bool = True,
                 sampling: Sampling = Sampling(temperature=JUDGE_TEMPERATURE, max_tokens=JUDGE_MAX_TOKENS)):
        """`sampling`: the benchmark's table's for the judge (the original: 0.2, 1,024 tokens, no seed); otherwise
        temperature 0 and the trial's `seed`."""
        self.model, self.seed, self.original = model, seed, original
        self.params = sampling.request(seed)

    async def decide(self, leaf: Node, prompt: str) -> Decision:
        if self.original:
            try:
                text = (await self.model.complete(ChatRequest([Message("user", prompt)], **self.params))).text or ""
            except ModelTurnError:             # cut off or blocked before any text: read as the empty reply it is
                text = ""
            except InfrastructureError as e:
                if kind_of(e) is None:         # an outage: the trial is re-run
                    raise
                return Decision(leaf.id, 0.0, f"Evaluation failed: the judge refused the prompt ({e})", "llm")
            score, explanation = parse_original(text)
            return Decision(leaf.id, score, explanation, "llm")
        text = ""
        for _ in range(2):
            text = (await self.model.complete(ChatRequest([Message("user", prompt)], temperature=0.0,
                                                          max_tokens=1024, seed=self.seed))).text or ""
            verdict = read_verdict(text)
            if verdict is not None:
                return Decision(leaf.id, verdict[0], verdict[1], "llm")
        raise InfrastructureError(f"the grader's reply to rubric leaf {leaf.id!r} has no readable "
                                  f"'Score: 0|1' after 2 tries: {text[:300]!r}", source="grader")

    async def decide_all(self, leaves: list[tuple[Node, str]]) -> list[Decision]:
        return list(await asyncio.gather(*(self.decide(leaf, prompt) for leaf, prompt in leaves)))
