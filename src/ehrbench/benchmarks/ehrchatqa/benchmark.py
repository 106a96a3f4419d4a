"""EHR-ChatQA behind the benchmark seam: its tasks, databases, pre-indexed columns, episodes, users and report."""
from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from ...agents.tool_calling import EHRBENCH, ORIGINAL, ToolCallingAgent
from ...benchmark import Benchmark, Episode, Hosts, Report, Resources, TaskScores, TrialSettings
from ...judges.validator import VALIDATION_OUTPUT, SimulationValidator
from ...llm.base import ConfigurationError, Sampling
from ...llm.scripted import ScriptedCall
from ...llm.usage import UsageMeter
from ...scoreboard import group_rewards, pass_k_curves, pass_k_table
from ...trial import TrialRecord
from ...users.llm_user import LLMUser
from .failures import TABLE as FAILURES
from .sampling import TABLE as SAMPLING
from .prompts import (AGENT_GREETING, agent_system_prompt, prompts, user_prompts, user_system_prompt,
                      validator_conversation)
from .reference_agent import ReferenceAgent
from .scoring import MAX_ROWS, adapt_reward, comparable_row, incre_reward
from .scripted_user import ScriptedUser
from .tasks import DB_IDS, TASK_TYPES, Task, load_task_dir
from .text_calls import text_call_reader
from .tools import DatabaseLike, ToolSuite, tool_schemas
from .web_search import BACKENDS, web_search_backend

# Paper appendix A.2: text columns pre-indexed for value_similarity_search.
INDEXED_COLUMNS: dict[str, dict[str, list[str]]] = {
    "mimic_iv_star": {
        "hospitaladmissions": ["admissiontype", "admitsource", "dischargedestination"],
        "diagnosiscodes": ["description"], "procedurecodes": ["description"],
        "medicationorders": ["medicationname"], "clinicalitemtypes": ["itemname"], "labtesttypes": ["itemname"],
        "microbiologyresults": ["specimentype", "testname", "organismname"],
    },
    "eicu_star": {
        "allergy_reaction": ["drug_name", "allergy_name"], "condition": ["condition_name"],
        "fluid_balance": ["fluid_label"], "lab": ["lab_name"], "prescription": ["drug_name"],
        "icupatient": ["ethnicity", "hospital_admission_source"], "treatment": ["treatment_name"],
    },
}


async def score(task: Task, record: TrialRecord, db: DatabaseLike, sql_timeout_s: float = 60.0,
                any_cardinal: bool = False) -> float:
    """IncreQA re-executes every sql_execute query of the trajectory; AdaptQA reads the agent's <answer>
    (`any_cardinal`: every number word as digits, `contract=ehrbench`; else the original's table)."""
    if task.task_type == "incre":
        async def rows(sql: str) -> list[tuple]:
            return (await db.execute(sql, sql_timeout_s, 1_000_000, MAX_ROWS, comparable_row)).rows
        queries = [args.get("query", "") for args in record.tool_arguments("sql_execute")]
        return await incre_reward(queries, task.gold_answer, rows)
    return adapt_reward(record.agent_texts(), task.gold_answer, any_cardinal)


CONTRACTS = ("original", "ehrbench")
# the paper reports SR-k, Pass@k, Pass^k and Gap-k per flow (IncreQA, AdaptQA) over both databases; the figure
# pooled over the flows is ehrbench's and carries this prefix, never the paper's bare names
POOLED = "all_flows/"
# the roles the original's metric.py sums its costs under: the user's (with its verifier and reflection), the agent's,
# and the validator's ("eval")
ORIGINAL_COST_ROLES = {"agent": ("agent",), "user": ("user", "verifier", "reflection"), "eval": ("validator",)}


def original_costs(records: list[TrialRecord]) -> dict[str, float]:
    """The cost as the original's metric.py reports it, under names of its own (`cost_usd_original/...`): over the
    attempts it scores only (`reward is not None`), so a simulation the validator rejected costs nothing there.
    ehrbench's `cost_usd/<role>` counts every attempt, as every attempt was paid for."""
    scored = [r for r in records if r.valid]
    out = {f"cost_usd_original/{name}": sum(r.usage.get(role, {}).get("cost_usd", 0.0) for r in scored
                                               for role in roles) for name, roles in ORIGINAL_COST_ROLES.items()}
    out["cost_usd_original/all"] = sum(out.values())
    return out


def withhold(text: str, metrics: dict[str, float], curves: dict, files: list, incomplete: int, tasks: int,
             k: int) -> Report:
    """The original computes no metric while a task has fewer than k scored trials (metric.py raises "Not all
    tasks have k successful trials for evaluation"): the figures over the complete tasks alone would drop the
    hardest tasks (those whose simulations the validator kept rejecting). They are kept, loudly, under `partial/`
    and never as the headline; running the same command again re-runs the missing trials."""
    reason = (f"{incomplete} of {tasks} tasks have fewer than {k} scored trials (the validator rejected every "
              "attempt, or the infrastructure failed); run the same command again to fill them")
    counts = ("tasks", "incomplete")
    kept = {(name if name.rsplit("/", 1)[-1] in counts else f"partial/{name}"): v for name, v in metrics.items()}
    banner = f"PARTIAL RESULTS, NOT THE BENCHMARK'S METRICS: {reason}.\n"
    return Report(banner + text.replace("EHR-ChatQA results", "EHR-ChatQA partial results (complete tasks only)"),
                  kept, headline={}, files=files, curves={f"partial/{n}": v for n, v in curves.items()},
                  withheld=reason)


class EhrChatQA(Benchmark):
    name = "ehrchatqa"
    agents = ("reference", "tool_calling")
    users = ("scripted", "llm")
    model_roles = ("agent", "user", "verifier", "reflection", "validator", "embedder")
    sampling_table = SAMPLING
    failure_table = FAILURES
    headline_metric = "SR"
    default_user = "gemini-2.0-flash"          # the paper's user (run.py's defaults), with the validator

    def check(self) -> None:
        o = self.options
        for field, allowed in (("databases", DB_IDS), ("flows", TASK_TYPES)):
            chosen = list(o.get(field) or [])
            if not chosen or not set(chosen) <= set(allowed):
                raise ConfigurationError(f"benchmark.{field}={chosen}: choose one or more of {list(allowed)} "
                                         "(conf/benchmark/ehrchatqa.yaml or the override)")
        if o.get("web_search") not in BACKENDS:
            raise ConfigurationError(f"benchmark.web_search={o.get('web_search')!r}: choose one of {sorted(BACKENDS)}")
        if o.get("contract", "original") not in CONTRACTS:
            raise ConfigurationError(f"benchmark.contract={o.get('contract')!r}: choose one of {list(CONTRACTS)} "
                                     "(original: the authors' code; ehrbench: errors shown to the agent)")
        wait = o.get("reask_wait_s", 3)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
            raise ConfigurationError(f"benchmark.reask_wait_s={wait!r}: must be a number of seconds, 0 or more")
        timeout = o.get("sql_timeout_s")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigurationError(f"benchmark.sql_timeout_s={timeout!r}: must be a number of seconds above 0")
        if not Path(o.get("task_dir") or "").is_dir():
            raise ConfigurationError(f"benchmark.task_dir={o.get('task_dir')!r}: no such folder; it must hold "
                                     "<db_id>/eval_<flow>.jsonl (the project's are in data/tasks/ehrchatqa)")

    @property
    def original(self) -> bool:
        return self.options.get("contract", "original") == "original"

    def contract(self) -> tuple[str, list[str]]:
        """The contract and what departs from the authors' code in this run."""
        departures = []
        if not self.original:
            departures.append("contract=ehrbench (a malformed tool call is answered with an error, an overflow or a "
                              "cut-off turn ends the trial as the agent's error, a `:name` in SQL is a literal, "
                              "partial results are reported)")
        if self.options.get("max_observation_chars") is not None:
            departures.append(f"max_observation_chars={self.options['max_observation_chars']} (the original cuts "
                              "no observation)")
        return self.options.get("contract", "original"), departures

    def run_departures(self, settings: TrialSettings, embedder: dict | None = None) -> list[str]:
        """The run's user, validator, embedder and web search against the paper's (run.py's defaults: the user
        gemini-2.0-flash at 1.0 with nested reflection, the validator gemini-2.5-flash; text-embedding-3-large;
        Tavily)."""
        out = []
        if settings.agent != "reference":
            if settings.user == "scripted":
                out.append("user=scripted with a model-backed agent (the paper's user is gemini-2.0-flash with "
                           "nested reflection, checked by the validator; figures under scripted_user/)")
            else:
                user = (settings.user_model or {}).get("model")
                if user != "gemini-2.0-flash":
                    out.append(f"user model {user} (the paper's: gemini-2.0-flash)")
                if settings.user_strategy != "reflection":
                    out.append(f"user.strategy={settings.user_strategy} (the paper's: reflection)")
                if settings.user_temperature != 1.0:
                    out.append(f"user.temperature={settings.user_temperature:g} (the paper's: 1.0)")
                if settings.validator_model is None:
                    out.append("validator=none (the paper validates every simulation, re-running rejected ones)")
                elif settings.validator_model.get("model") != "gemini-2.5-flash":
                    out.append(f"validator model {settings.validator_model.get('model')} (the paper's: "
                               "gemini-2.5-flash)")
        if embedder is not None and (embedder.get("provider") or "local", embedder.get("model") or
                                     "text-embedding-3-large") != ("openai", "text-embedding-3-large"):
            out.append(f"data.embedder.provider={embedder.get('provider') or 'local'} (value_similarity_search; the "
                       "original embeds with OpenAI's text-embedding-3-large)")
        out.append(f"web_search={self.options.get('web_search')} (BM25 over the world's vocabulary; the original "
                   "asks Tavily)")
        return out

    def figures_prefix(self, settings: TrialSettings) -> str:
        """A model talking to the scripted user is not the paper's benchmark (its first turn is never vague, it
        never rephrases or drifts): its figures are named apart."""
        return "scripted_user/" if settings.agent != "reference" and settings.user == "scripted" else ""

    def tasks(self) -> list[Task]:
        return load_task_dir(self.options["task_dir"], list(self.options["databases"]), list(self.options["flows"]))

    def resources(self) -> Resources:
        dbs = tuple(self.options["databases"])
        return Resources(databases=dbs, indexed_columns={db: INDEXED_COLUMNS[db] for db in dbs})

    # --- one attempt -------------------------------------------------------------------------------------------
    def episode(self, task: Task, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        db = hosts.databases[task.db_id]
        timeout = float(self.options["sql_timeout_s"])
        tools = ToolSuite(task.db_id, db, hosts.index, web_search_backend(self.options["web_search"]),
                          INDEXED_COLUMNS[task.db_id], sql_timeout_s=timeout, bind_parameters=self.original)
        if settings.agent == "reference":
            agent = ReferenceAgent(task, INDEXED_COLUMNS[task.db_id],
                                   ScriptedCall("agent", meter, settings.agent_latency_s))
        else:
            policy = EHRBENCH
            if self.original:
                budget = settings.limits.time_limit_s
                policy = replace(ORIGINAL, reask_budget_s=budget, reask_wait_s=float(self.options.get(
                    "reask_wait_s", ORIGINAL.reask_wait_s)))
            agent = ToolCallingAgent(settings.model_for("agent", meter), agent_system_prompt(task.db_id, task.task_type),
                                     tool_schemas(INDEXED_COLUMNS[task.db_id]), self._sampling("agent", settings),
                                     seed, policy=policy, cut_reasoning=self.cuts_reasoning(settings.agent_model),
                                     read_text_calls=self.text_calls(settings.agent_model))
        validate = None
        if settings.validator_model:
            validator = SimulationValidator(settings.model_for("validator", meter), prompts()["validator_system"],
                                            settings.validator_samples, schema=VALIDATION_OUTPUT,
                                            max_steps=settings.limits.max_steps,
                                            sampling=self.sampling("validator", settings.validator_model))

            async def validate(record: TrialRecord) -> dict:
                prompt = prompts()["validator_input"].format(user_system_prompt=user_system_prompt(task.instruction),
                                                             conversation=validator_conversation(record.messages),
                                                             gold_sql=task.gold_sql)
                return await validator.judge(prompt, record)
        return Episode(tools, agent, score=lambda record: score(task, record, db, timeout, not self.original),
                       greeting=AGENT_GREETING,
                       validate=validate)

    def user(self, task: Task, settings: TrialSettings, meter: UsageMeter, seed: int, mistakes: list[str]):
        if settings.user == "scripted":
            return ScriptedUser(task.instruction, seed, ScriptedCall("user", meter, settings.user_latency_s))
        supervisor = settings.verifier_model or settings.user_model
        return LLMUser(settings.model_for("user", meter), user_prompts(task.instruction),
                       strategy=settings.user_strategy, verifier=settings.model_for("verifier", meter),
                       reflection=settings.model_for("reflection", meter), mistakes=mistakes,
                       seed=None if self.original else seed,
                       sampling={"user": self._user_sampling(settings),
                                 "verifier": self.sampling("verifier", supervisor),
                                 "reflection": self.sampling("reflection", supervisor)},
                       on_filter_failure=settings.user_on_filter_failure)

    def cuts_reasoning(self, model: dict | None) -> bool:
        """Whether the agent's `<think>...</think>` is cut from its replies: a Qwen model's, as the original's
        `get_action` cuts it (`'qwen' in model`, `qwen_parse_tool_calls`); every model's under `contract=ehrbench`."""
        return not self.original or "qwen" in str((model or {}).get("model") or "").lower()

    def text_calls(self, model: dict | None):
        """Under the original contract, a Gemini or Llama agent's calls written as text are read as the original's
        `get_action` reads them (`text_calls.py`); `contract=ehrbench` reads native calls only."""
        return text_call_reader(str((model or {}).get("model") or "")) if self.original else None

    def _sampling(self, role: str, settings: TrialSettings) -> Sampling:
        """The table's parameters; `contract=ehrbench` seeds the agent's calls with the trial's seed."""
        params = self.sampling(role, settings.agent_model)
        return params if self.original else replace(params, seed="trial")

    def _user_sampling(self, settings: TrialSettings) -> Sampling:
        """The user's: the table's, at `user.temperature` (the paper's 1.0) where its model takes a temperature."""
        params = self.sampling("user", settings.user_model)
        return params if params.temperature is None else replace(params, temperature=settings.user_temperature)

    # --- results -----------------------------------------------------------------------------------------------
    def report(self, records: list[TrialRecord], tasks: list[Task], k: int, out_dir: Path) -> Report:
        """SR-k / Pass@k / Pass^k / Gap-k by database and flow; Pass^k curves; SR by category; per-task table."""
        from ...tracking.plots import category_bars, pass_k_curves as plot_curves

        groups = group_rewards(records, tasks)
        text, metrics = pass_k_table(groups, k, f"EHR-ChatQA results over {k} trials per task (percent)",
                                     pooled=POOLED)
        curves = pass_k_curves(groups, k, ["all", "incre", "adapt"])
        per_category: dict[str, list[float]] = defaultdict(list)
        rows = []
        for t in tasks:
            rewards = groups["all"].get(t.key, [])
            if rewards:
                per_category[f"{t.task_type}: {t.category or 'uncategorized'}"].append(sum(rewards) / len(rewards))
            rows.append({"task": t.key, "db": t.db_id, "flow": t.task_type, "category": t.category or "",
                         "trials": len(rewards), "successes": sum(1 for r in rewards if r >= 1.0),
                         "sr": round(100 * sum(rewards) / len(rewards), 2) if rewards else ""})
        categories = {c: 100 * sum(v) / len(v) for c, v in per_category.items()}
        metrics.update({f"category/{c}/SR": v for c, v in categories.items()})
        metrics.update(original_costs(records))
        out_dir.mkdir(parents=True, exist_ok=True)
        table = out_dir / "per_task.csv"
        with table.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["task"])
            writer.writeheader()
            writer.writerows(rows)
        files = [table]
        if curves:
            files.append(plot_curves(curves, list(range(1, k + 1)), out_dir / "pass_k_curve.png",
                                     "Pass@k and Pass^k against k"))
        if categories:
            files.append(category_bars(categories, out_dir / "categories.png", f"SR-{k} by task category"))
        headline = {f"{flow} {name}": metrics[f"{flow}/{key}"] for flow in TASK_TYPES if f"{flow}/SR-{k}" in metrics
                    for name, key in ((f"SR-{k}", f"SR-{k}"), (f"Pass^{k}", f"Pass_hat_{k}"))}
        headline[f"{POOLED}SR-{k}"] = metrics[f"{POOLED}SR-{k}"]
        curve_metrics = {f"{g}/curve/{name}": values for g, series in curves.items() for name, values in series.items()}
        incomplete = int(metrics.get("incomplete", 0))
        if incomplete and self.original:
            return withhold(text, metrics, curve_metrics, files, incomplete, len(tasks), k)
        return Report(text, metrics, headline=headline, files=files, curves=curve_metrics)

    def trial_score(self, record: TrialRecord) -> float:
        return 1.0 if (record.reward or 0.0) >= 1.0 else 0.0

    def task_scores(self, records: list[TrialRecord], tasks: list[Task], k: int) -> TaskScores:
        """Each complete task's success rate (x100): SR-k is their mean (a task with fewer than k scored trials is
        not scored, as `metrics.summarize` leaves it out)."""
        scores = super().task_scores(records, tasks, k)
        counts = group_rewards(records, tasks)["all"]
        return TaskScores(f"{POOLED}SR-{k}", {key: v for key, v in scores.scores.items()
                                              if len(counts.get(key, [])) >= k})

    def prompts(self) -> dict[str, str]:
        """The paper's prompts as this run uses them: agent system prompt per database and flow, user, validator."""
        p = prompts()
        out = {f"ehrchatqa.agent_system.{db}.{flow}": agent_system_prompt(db, flow)
               for db in self.options["databases"] for flow in self.options["flows"]}
        out.update({"ehrchatqa.user_system": p["user_system"], "ehrchatqa.user_verifier": p["verifier_system"],
                    "ehrchatqa.user_reflection": p["reflection_system"],
                    "ehrchatqa.user_supervisor_input": p["supervisor_input"], "ehrchatqa.validator_system": p["validator_system"],
                    "ehrchatqa.validator_input": p["validator_input"]})
        return out
