"""ClinSQL behind the benchmark seam: cohort questions answered with BigQuery SQL, run on the world's MIMIC-IV DuckDB,
graded by the task's two rubric trees.

A trial is one question: the agent (`agent.py`: chain of thought, refinement only on an execution error) or the
reference (SQL written from the question alone, `reference.py`) executes its SQL through the one tool (`tools.py`:
sqlglot BigQuery -> DuckDB, guarded); the last executed query and its result are the candidate. Grading
(`scoring.py`): under `contract=original` the LLM judge decides every leaf of both trees as the authors' scorer asks
it; the rule checker on results leaves is an opt-in (`leaf_checker`); with no judge (`grading=offline`, or the
reference) the checker and syntax-tree equality with the gold decide, and the scores carry `offline_` names. Each
leaf decision is an assessment on the trial's trace; the trees are aggregated by ClinSQL's rule (`rubric.py`) into
the SQL score and the Execution score (x100 in reports). The reward is the Execution score.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from ...benchmark import (Benchmark, Episode, Hosts, Report, Resources, TaskFileError, TaskScores, TrialSettings,
                         check_world)
from ...llm.base import ConfigurationError, Sampling
from ...llm.scripted import ScriptedCall
from ...llm.usage import UsageMeter
from ...trial import Score, TrialRecord
from . import rubric
from .agent import ClinSqlAgent, ReferenceAgent
from .scoring import (Candidate, Decision, LlmGrader, ResultsChecker, grader_prompt, offline_sql_decisions,
                      original_prompt, parents)
from .prompts import generation_prompt, refinement_prompt, schema_text
from .failures import TABLE as FAILURES
from .sampling import TABLE as SAMPLING
from .tasks import DIFFICULTIES, Task, csv_text, load_tasks
from .tools import BigQueryTools

DB = "mimic_iv"
log = logging.getLogger(__name__)


LEAF_TYPES = ("csv-file-exists", "no-null-empty-values", "exists", "plausible", "acceptable")


def leaf_type(leaf_id: str) -> str:
    return next((t for t in LEAF_TYPES if leaf_id == t or leaf_id.endswith(f"-{t}")), "other")


@dataclass(frozen=True)
class Grading:
    """How a run decides leaves (docs/benchmarks/clinsql.md): the judge or none (offline), the original's prompt and
    reading or ehrbench's, the checker on results leaves or not, the gold shown to the judge or not."""
    grader: LlmGrader | None = None
    original: bool = True
    leaf_checker: bool = False
    judge_gold: bool = True


async def grade(task: Task, candidate: Candidate, how: Grading) -> tuple[list[Decision], list[Decision], dict]:
    """(SQL leaf decisions, results leaf decisions, checker-vs-judge agreement per leaf type) for one candidate.
    Offline (no judge): the checker and the syntax-tree grader, a leaf the checker cannot read scoring 0."""
    checker = ResultsChecker(task.gold_columns, task.gold_rows, candidate)
    up = parents(task.results_tree)
    results_leaves, sql_leaves = list(task.results_tree.leaves()), list(task.sql_tree.leaves())
    checked = [checker.decide(leaf, up.get(leaf.id)) for leaf in results_leaves]
    if how.grader is None:
        sql = ([Decision(leaf.id, 0.0, "no SQL was produced", "checker") for leaf in sql_leaves]
               if not candidate.sql.strip() else offline_sql_decisions(task.sql_tree, candidate.sql, task.gold_sql))
        return sql, checked, {}
    gold_csv = csv_text(task.gold_columns, task.gold_rows)

    def prompt(leaf, kind: str) -> str:
        if how.original:
            return original_prompt(leaf, kind, task.question, candidate, task.gold_sql if how.judge_gold else None,
                                   gold_csv if how.judge_gold else None)
        return grader_prompt(leaf, kind, task.question, candidate, task.gold_sql, task.gold_columns, task.gold_rows)
    asked = [(leaf, prompt(leaf, "sql")) for leaf in sql_leaves] + \
        [(leaf, prompt(leaf, "results")) for leaf in results_leaves]
    judged = await how.grader.decide_all(asked)
    sql, results = judged[:len(sql_leaves)], judged[len(sql_leaves):]
    agreement: dict[str, list[float]] = defaultdict(list)
    if how.leaf_checker:          # the checker's decision stands where it could read the leaf
        for c, j in zip(checked, results):
            if c.score is not None:
                agreement[leaf_type(c.leaf)].append(float(c.score == j.score))
        results = [c if c.score is not None else j for c, j in zip(checked, results)]
    return sql, results, {t: sum(v) / len(v) for t, v in agreement.items()}


def score_candidate(task: Task, sql: list[Decision], results: list[Decision], candidate: Candidate,
                    attempts: int, judged: bool = True) -> Score:
    """The two scores, named `sql_score` / `exec_score` when the judge decided the leaves and `offline_sql_score` /
    `offline_exec_score` when it did not (they are not the paper's)."""
    sql_score = rubric.score(task.sql_tree, {d.leaf: d.score or 0.0 for d in sql})
    exec_score = rubric.score(task.results_tree, {d.leaf: d.score or 0.0 for d in results})
    undecided = sum(d.score is None for d in results)
    prefix = "" if judged else "offline_"
    return Score(exec_score, {f"{prefix}sql_score": sql_score, f"{prefix}exec_score": exec_score,
                              "executed": float(candidate.executed), "attempts": float(attempts),
                              "undecided_leaves": float(undecided),
                              "llm_leaves": float(sum(d.source == "llm" for d in sql + results))})


def assessments(task: Task, sql: list[Decision], results: list[Decision], grader_name: str) -> list[dict]:
    categories = {"sql": rubric.category_of(task.sql_tree), "results": rubric.category_of(task.results_tree)}
    out = []
    for kind, decisions in (("sql", sql), ("results", results)):
        for d in decisions:
            out.append({"name": f"{kind}/{d.leaf}", "value": d.score, "rationale": d.rationale,
                        "source_type": "LLM_JUDGE" if d.source == "llm" else "CODE",
                        "source_id": grader_name if d.source == "llm" else f"ehrbench.clinsql.{d.source}",
                        "metadata": {"category": categories[kind].get(d.leaf, ""), "kind": kind}})
    return out


class ClinSqlBenchmark(Benchmark):
    name = "clinsql"
    agents = ("reference", "clinsql")
    users = ("none",)
    model_roles = ("agent", "grader")
    sampling_table = SAMPLING
    failure_table = FAILURES
    headline_metric = "exec_score"
    default_grader = "gpt-5-chat"            # the paper's judge (its scorer's only model)

    def check(self) -> None:
        o = self.options
        task_dir = Path(str(o.get("task_dir") or ""))
        if not task_dir.is_dir():
            raise ConfigurationError(f"benchmark.task_dir={o.get('task_dir')!r}: no such folder; the project's tasks "
                                     "are in data/tasks/clinsql, ClinSQL's own in its data/splits/validation")
        for field in ("sql_timeout_s",):
            value = o.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(f"benchmark.{field}={value!r}: must be a number above 0")
        for field, low in (("max_rows", 1), ("max_refinements", 0)):
            value = o.get(field)
            if field == "max_rows" and value is None:          # no row limit, as the original
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(f"benchmark.{field}={value!r}: must be an integer >= {low}")
        if o.get("contract", "original") not in ("original", "ehrbench"):
            raise ConfigurationError(f"benchmark.contract={o.get('contract')!r}: choose original (the authors' judge "
                                     "on every leaf, the default) or ehrbench (its checker and strict reading on)")
        for field in ("leaf_checker", "judge_gold"):
            if o.get(field) is not None and not isinstance(o.get(field), bool):
                raise ConfigurationError(f"benchmark.{field}={o.get(field)!r}: true or false")
        if o.get("grading", "judge") not in ("judge", "offline"):
            raise ConfigurationError(f"benchmark.grading={o.get('grading')!r}: judge (an LLM grader decides the "
                                     "leaves, the paper's way) or offline (the rule checker and the syntax-tree "
                                     "grader, logged as offline_sql_score / offline_exec_score)")
        check_world(task_dir, o.get("world") or {}, "ehrbench.benchmarks.clinsql.authoring")

    def tasks(self) -> list[Task]:
        return load_tasks(Path(self.options["task_dir"]))

    def leaf_checker(self) -> bool:
        """The deterministic checker on results leaves: opt-in under the original contract, on under ehrbench's."""
        chosen = self.options.get("leaf_checker")
        return self.options.get("contract", "original") == "ehrbench" if chosen is None else bool(chosen)

    def contract(self) -> tuple[str, list[str]]:
        """The contract and what departs from the authors' scorer in this run."""
        o = self.options
        departures = []
        if self.leaf_checker():
            departures.append("leaf_checker=true (results leaves the rule checker can read are decided by it)")
        if not o.get("judge_gold", True):
            departures.append("judge_gold=false (the released code's judge: no gold SQL or rows in its prompt)")
        if o.get("grading", "judge") == "offline":
            departures.append("grading=offline (no LLM judge: offline_sql_score / offline_exec_score)")
        if o.get("max_rows") is not None:
            departures.append(f"max_rows={o['max_rows']} (the original fetched every row)")
        return o.get("contract", "original"), departures

    def check_grading(self, agent: str, graded: bool) -> None:
        """A model's answers are scored by the paper's judge: with none named and no key, the run stops here; a run
        without a judge must say `benchmark.grading=offline`, and its scores are logged under other names."""
        if agent != "reference" and not graded and self.options.get("grading", "judge") != "offline":
            raise ConfigurationError(
                "ClinSQL is scored by an LLM judge on every rubric leaf (the paper's: gpt-5-chat, grader=gpt-5-chat, "
                "the default with grader=auto); grader=none would score a model by rules alone. Name a grader "
                "(grader=gpt-5-chat needs OPENAI_API_KEY; grader=gemini-2.5-flash GEMINI_API_KEY), or add "
                "benchmark.grading=offline for rule-only scores logged as offline_sql_score / offline_exec_score")

    def resources(self) -> Resources:
        return Resources(databases=(DB,), duckdb=(DB,))

    def resolve_tasks(self, tasks: list[Task], paths: dict[str, str]) -> list[Task]:
        """Every gold query must run on this database: one that fails stops the run at start, naming the task (the
        original scores every task; dropping one would change what the means are over). How many reproduce their
        gold CSV is logged (all of the project's on their world; ClinSQL's own on your MIMIC-IV copy will differ
        where the versions do)."""
        from ...db import open_database
        from ...db.limits import QueryError
        from .dialect import TranspileError, bigquery_to_duckdb
        from .tasks import csv_text

        db = open_database(paths[DB], DB)
        same = 0
        try:
            for task in tasks:
                try:
                    result = db.execute(bigquery_to_duckdb(task.gold_sql).sql, float(self.options["sql_timeout_s"]),
                                        100_000, 100_000)
                except (TranspileError, QueryError) as e:
                    raise TaskFileError(f"{self.options['task_dir']}/{task.key}: its gold SQL does not run on "
                                        f"{paths[DB]}: {str(e)[:300]}; fix the gold query, or leave the task out of "
                                        "benchmark.task_dir (the original scores every task)") from None
                same += csv_text(result.columns, result.rows) == csv_text(task.gold_columns, task.gold_rows)
        finally:
            db.close()
        log.warning("clinsql: all %d gold queries ran on %s, %d reproduce their gold CSV exactly", len(tasks),
                    paths[DB], same)
        return tasks

    def _sampling(self, role: str, model: dict | None) -> Sampling:
        """The table's parameters; `contract=ehrbench` seeds every call with the trial's seed and judges at 0."""
        params = self.sampling(role, model)
        if self.contract()[0] == "original":
            return params
        return replace(params, seed="trial", **({"temperature": 0.0} if role == "grader" else {}))

    def episode(self, task: Task, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        o = self.options
        tools = BigQueryTools(hosts.databases[DB], float(o["sql_timeout_s"]),
                              None if o.get("max_rows") is None else int(o["max_rows"]))
        if settings.agent == "reference":
            agent = ReferenceAgent(task.scenario, task.difficulty,
                                   ScriptedCall("agent", meter, settings.agent_latency_s))
        else:
            agent = ClinSqlAgent(settings.model_for("agent", meter),
                                 schema_text(self.contract()[0]) if o.get("schema_in_prompt", True) else None,
                                 int(o["max_refinements"]), seed, self._sampling("agent", settings.agent_model))
        original = self.contract()[0] == "original"
        grader = LlmGrader(settings.model_for("grader", meter), seed, original,
                           self._sampling("grader", settings.grader_model)) if settings.grader_model else None
        grader_name = f"clinsql.grader:{settings.grader_model['name']}" if settings.grader_model else ""
        how = Grading(grader, original, self.leaf_checker(), bool(o.get("judge_gold", True)))

        async def scored(record: TrialRecord) -> Score:
            candidate = tools.last
            sql, results, agreement = await grade(task, candidate, how)
            record.assessments.extend(assessments(task, sql, results, grader_name))
            score = score_candidate(task, sql, results, candidate, len(tools.dialect_paths), grader is not None)
            score.parts.update({f"checker_agreement/{t}": v for t, v in agreement.items()})
            score.parts["dialect_path"] = " | ".join(" ; ".join(p) for p in tools.dialect_paths)[:2000]
            return score
        return Episode(tools, agent, scored, opening=task.question)

    def trial_score(self, record: TrialRecord) -> float:
        """The Exec score of a trial, as the report counts it (the offline one where no judge decided)."""
        parts = record.score_parts
        return float(parts.get("exec_score", parts.get("offline_exec_score", record.reward or 0.0)))

    def task_scores(self, records: list[TrialRecord], tasks: list, k: int) -> TaskScores:
        scores = super().task_scores(records, tasks, k)
        offline = any(r.valid and "sql_score" not in r.score_parts for r in records)
        return TaskScores("offline_exec_score" if offline else "exec_score", scores.scores)

    def report(self, records: list[TrialRecord], tasks: list[Task], k: int, out_dir: Path) -> Report:
        """SQL and Execution scores (x100) overall, by difficulty and by scenario; leaf pass rates by rubric
        category; a plot of both scores by difficulty."""
        import sys

        from rich.console import Console
        from rich.table import Table

        from ...tracking.plots import grouped_bars

        by_key = {t.key: t for t in tasks}
        sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        leaves: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        agree: dict[str, list[float]] = defaultdict(list)
        offline = False               # scores no LLM judge decided are not the paper's: named offline_*
        for r in records:
            if not r.valid or r.task_key not in by_key:
                continue
            t = by_key[r.task_key]
            judged = "sql_score" in r.score_parts
            offline = offline or not judged
            for g in ("all", t.difficulty, t.scenario):
                s = sums[g]
                s["trials"] += 1
                s["sql"] += r.score_parts.get("sql_score", r.score_parts.get("offline_sql_score", 0.0))
                s["exec"] += r.score_parts.get("exec_score", r.score_parts.get("offline_exec_score",
                                                                                 r.reward or 0.0))
                s["executed"] += r.score_parts.get("executed", 0.0)
            for name, value in r.score_parts.items():
                if name.startswith("checker_agreement/"):
                    agree[name].append(float(value))
            for a in r.assessments:
                category = (a.get("metadata") or {}).get("category")
                if category:
                    cell = leaves[f"{a['name'].split('/')[0]}: {category}"]
                    cell[0] += float(a["value"] or 0.0)
                    cell[1] += 1
        order = ["all", *[d for d in DIFFICULTIES if d in sums], *sorted(g for g in sums if "_" in g)]
        table = Table(title=f"ClinSQL results over {k} trials per task (x100)" + (
            "; no LLM judge: offline scores, not the paper's" if offline else ""))
        for col in ("group", "trials", "SQL score", "Exec score", "executed %"):
            table.add_column(col, justify="left" if col == "group" else "right")
        metrics: dict[str, float] = {}
        for g in order:
            s = sums[g]
            if not s["trials"]:                 # no valid trial at all (every one an infrastructure failure)
                continue
            score = "offline_" if offline else ""
            values = {f"{score}sql_score": 100 * s["sql"] / s["trials"],
                      f"{score}exec_score": 100 * s["exec"] / s["trials"],
                      "executed_pct": 100 * s["executed"] / s["trials"]}
            prefix = "" if g == "all" else f"{g}/"
            metrics.update({f"{prefix}{m}": v for m, v in values.items()})
            table.add_row(g, str(int(s["trials"])), *(f"{values[m]:.2f}" for m in values))
        rates = Table(title="Leaf pass rate by rubric category (percent)")
        for col in ("rubric: category", "leaves", "pass %"):
            rates.add_column(col, justify="left" if col.startswith("rubric") else "right")
        for name in sorted(leaves):
            passed, total = leaves[name]
            metrics[f"leaf_pass/{name.replace(': ', '/').replace(' ', '_')}"] = 100 * passed / total
            rates.add_row(name, str(int(total)), f"{100 * passed / total:.1f}")
        console = Console(file=sys.stdout, width=110)
        with console.capture() as cap:
            console.print(table)
            console.print(rates)
        out_dir.mkdir(parents=True, exist_ok=True)
        score = "offline_" if offline else ""
        metrics.update({f"{name}_pct": 100 * sum(v) / len(v) for name, v in agree.items()})
        by_level = {d: {"SQL score": metrics[f"{d}/{score}sql_score"], "Exec score": metrics[f"{d}/{score}exec_score"]}
                    for d in DIFFICULTIES if f"{d}/{score}sql_score" in metrics}
        files = [grouped_bars(by_level, out_dir / "scores_by_difficulty.png", "ClinSQL scores by difficulty")] \
            if by_level else []
        headline = {m: metrics[m] for m in (f"{score}sql_score", f"{score}exec_score") if m in metrics}
        return Report(cap.get(), metrics, headline=headline, files=files)

    def prompts(self) -> dict[str, str]:
        return {"clinsql.generation": generation_prompt("{question}", "{schema}"),
                "clinsql.refinement": refinement_prompt("{question}", "{previous_sql}", "{error}", "{schema}")}
