"""ClinSQL behind the benchmark seam: cohort questions answered with BigQuery SQL, run on the world's MIMIC-IV DuckDB,
graded by the task's two rubric trees.

A trial is one question: the agent (`agent.py`: chain of thought, refinement only on an execution error) or the
reference (the gold SQL) executes its SQL through the one tool (`tools.py`: sqlglot BigQuery -> DuckDB, guarded);
the last executed query and its result are the candidate. Grading (`grading.py`): results leaves by the
deterministic checker, leaves it cannot read by the LLM grader; SQL leaves by the LLM grader (`grader=...`) or, with
none, by syntax-tree equivalence with the gold query. Each leaf decision is an assessment on the trial's trace; the
trees are aggregated by ClinSQL's rule (`rubric.py`) into the SQL score and the Execution score (x100 in reports).
The reward is the Execution score.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

from ...benchmark import Benchmark, Episode, Hosts, Report, Resources, TaskFileError, TrialSettings, check_world
from ...llm.base import ConfigurationError
from ...llm.scripted import ScriptedCall
from ...llm.usage import UsageMeter
from ...trial import Score, TrialRecord
from . import rubric
from .agent import ClinSqlAgent, ReferenceAgent
from .grading import Candidate, Decision, LlmGrader, ResultsChecker, grader_prompt, offline_sql_decisions, parents
from .prompts import generation_prompt, refinement_prompt, schema_text
from .tasks import DIFFICULTIES, Task, load_tasks
from .tools import BigQueryTools

DB = "mimic_iv"
log = logging.getLogger(__name__)


async def grade(task: Task, candidate: Candidate, grader: LlmGrader | None) -> tuple[list[Decision], list[Decision]]:
    """(SQL leaf decisions, results leaf decisions) for one candidate."""
    checker = ResultsChecker(task.gold_columns, task.gold_rows, candidate)
    up = parents(task.results_tree)
    results = [checker.decide(leaf, up.get(leaf.id)) for leaf in task.results_tree.leaves()]
    ask: list[tuple] = []
    if grader is not None:
        ask += [(leaf, grader_prompt(leaf, "results", task.question, candidate, task.gold_sql, task.gold_columns,
                                     task.gold_rows))
                for leaf, d in zip(task.results_tree.leaves(), results) if d.score is None]
    if not candidate.sql.strip():
        sql = [Decision(leaf.id, 0.0, "no SQL was produced", "checker") for leaf in task.sql_tree.leaves()]
    elif grader is None:
        sql = offline_sql_decisions(task.sql_tree, candidate.sql, task.gold_sql)
    else:
        sql = []
        ask += [(leaf, grader_prompt(leaf, "sql", task.question, candidate, task.gold_sql, task.gold_columns,
                                     task.gold_rows)) for leaf in task.sql_tree.leaves()]
    if ask:
        decided = {id(leaf): d for (leaf, _), d in zip(ask, await grader.decide_all(ask))}
        results = [decided.get(id(leaf), d) for leaf, d in zip(task.results_tree.leaves(), results)]
        sql = sql or [decided[id(leaf)] for leaf in task.sql_tree.leaves()]
    return sql, results


def score_candidate(task: Task, sql: list[Decision], results: list[Decision], candidate: Candidate,
                    attempts: int) -> Score:
    sql_score = rubric.score(task.sql_tree, {d.leaf: d.score or 0.0 for d in sql})
    exec_score = rubric.score(task.results_tree, {d.leaf: d.score or 0.0 for d in results})
    undecided = sum(d.score is None for d in results)
    return Score(exec_score, {"sql_score": sql_score, "exec_score": exec_score, "executed": float(candidate.executed),
                              "attempts": float(attempts), "undecided_leaves": float(undecided),
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
    headline_metric = "exec_score"

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
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(f"benchmark.{field}={value!r}: must be an integer >= {low}")
        check_world(task_dir, o.get("world") or {}, "ehrbench.benchmarks.clinsql.authoring")

    def tasks(self) -> list[Task]:
        return load_tasks(Path(self.options["task_dir"]))

    def resources(self) -> Resources:
        return Resources(databases=(DB,), duckdb=(DB,))

    def resolve_tasks(self, tasks: list[Task], paths: dict[str, str]) -> list[Task]:
        """Every gold query must run on this database (a task whose gold SQL fails is dropped, with a warning);
        how many reproduce their gold CSV is logged (all of the project's on their world; ClinSQL's own on your
        MIMIC-IV copy will differ where the versions do)."""
        from ...db import open_database
        from .dialect import TranspileError, bigquery_to_duckdb
        from .tasks import csv_text
        from ...db.limits import QueryError

        db = open_database(paths[DB], DB)
        kept, failed, same = [], [], 0
        try:
            for task in tasks:
                try:
                    result = db.execute(bigquery_to_duckdb(task.gold_sql).sql, float(self.options["sql_timeout_s"]),
                                        100_000, 100_000)
                except (TranspileError, QueryError) as e:
                    failed.append(f"{task.key}: {str(e)[:160]}")
                    continue
                kept.append(task)
                same += csv_text(result.columns, result.rows) == csv_text(task.gold_columns, task.gold_rows)
        finally:
            db.close()
        log.warning("clinsql: %d of %d gold queries ran on %s, %d reproduce their gold CSV exactly%s", len(kept),
                    len(tasks), paths[DB], same, "; dropped: " + "; ".join(failed[:3]) if failed else "")
        if not kept:
            raise TaskFileError(f"{self.options['task_dir']}: no gold query runs on {paths[DB]} (e.g. {failed[0]})")
        return kept

    def episode(self, task: Task, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        o = self.options
        tools = BigQueryTools(hosts.databases[DB], float(o["sql_timeout_s"]), int(o["max_rows"]))
        if settings.agent == "reference":
            agent = ReferenceAgent(task.gold_sql, ScriptedCall("agent", meter, settings.agent_latency_s))
        else:
            agent = ClinSqlAgent(settings.model_for("agent", meter), schema_text() if o.get("schema_in_prompt", True)
                                 else None, int(o["max_refinements"]), seed)
        grader = LlmGrader(settings.model_for("grader", meter), seed) if settings.grader_model else None
        grader_name = f"clinsql.grader:{settings.grader_model['name']}" if settings.grader_model else ""

        async def scored(record: TrialRecord) -> Score:
            candidate = tools.last
            sql, results = await grade(task, candidate, grader)
            record.assessments.extend(assessments(task, sql, results, grader_name))
            score = score_candidate(task, sql, results, candidate, len(tools.dialect_paths))
            score.parts["dialect_path"] = " | ".join(" ; ".join(p) for p in tools.dialect_paths)[:2000]
            return score
        return Episode(tools, agent, scored, opening=task.question)

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
        for r in records:
            if not r.valid or r.task_key not in by_key:
                continue
            t = by_key[r.task_key]
            for g in ("all", t.difficulty, t.scenario):
                s = sums[g]
                s["trials"] += 1
                s["sql"] += r.score_parts.get("sql_score", 0.0)
                s["exec"] += r.score_parts.get("exec_score", r.reward or 0.0)
                s["executed"] += r.score_parts.get("executed", 0.0)
            for a in r.assessments:
                category = (a.get("metadata") or {}).get("category")
                if category:
                    cell = leaves[f"{a['name'].split('/')[0]}: {category}"]
                    cell[0] += float(a["value"] or 0.0)
                    cell[1] += 1
        order = ["all", *[d for d in DIFFICULTIES if d in sums], *sorted(g for g in sums if "_" in g)]
        table = Table(title=f"ClinSQL results over {k} trials per task (x100)")
        for col in ("group", "trials", "SQL score", "Exec score", "executed %"):
            table.add_column(col, justify="left" if col == "group" else "right")
        metrics: dict[str, float] = {}
        for g in order:
            s = sums[g]
            values = {"sql_score": 100 * s["sql"] / s["trials"], "exec_score": 100 * s["exec"] / s["trials"],
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
        by_level = {d: {"SQL score": metrics[f"{d}/sql_score"], "Exec score": metrics[f"{d}/exec_score"]}
                    for d in DIFFICULTIES if f"{d}/sql_score" in metrics}
        files = [grouped_bars(by_level, out_dir / "scores_by_difficulty.png", "ClinSQL scores by difficulty")] \
            if by_level else []
        headline = {m: metrics[m] for m in ("sql_score", "exec_score") if m in metrics}
        return Report(cap.get(), metrics, headline=headline, files=files)

    def prompts(self) -> dict[str, str]:
        return {"clinsql.generation": generation_prompt("{question}", "{schema}"),
                "clinsql.refinement": refinement_prompt("{question}", "{previous_sql}", "{error}", "{schema}")}
