"""EHRAgent behind the benchmark seam: single questions over EHRSQL MIMIC-III, EHRSQL eICU and TREQS, answered by
code run in the sandbox, scored by the original's judge (the reward, SR) beside a strict one, with completion (CR).

The contract (`benchmark.contract`, ../FIDELITY.md): `original` (the default) scores as the authors' code did: the
log main.py wrote for the question, completed when "TERMINATE" appears anywhere in it, successful when evaluate.py's
judge passes on its prediction window (`scoring.py`); a sequential memory admits what main.py's own judge passes,
TERMINATE or not. `ehrbench` turns on its improvements: `memory_from=successful` (only completed, passed
questions enter the memory) and `error_text=informative` (a syntax error worded as type, message and line, where the
original's parser garbled it). The baselines, which the public code does not have, are scored on the last
observation and the final reply. The strict judge compares the last successful cell's `answer` with the gold values.

Memory modes: `sequential` (the paper's headline EHRAgent) is the original's main.py: each database's questions in one seeded order (`random.Random(seed)`'s
shuffle, the same permutation as the original's `random.seed(0); random.shuffle(contents)` under the README's
`--seed 0`), one at a time, each
solved question ({question, knowledge note, last code cell}) added to the memory the next questions draw their
examples from; one memory per database and trial index, hosted by the run's MemoryActor; `frozen` (the paper's
"w/o long-term memory"): the four initial examples for every question, trials independent and parallel; `none`: no
examples. `num_shots` is the paper's K (Figure 4); `interactive=false` its "w/o interactive coding" (one execution,
no feedback turn: the next reply is the last).
"""
from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from ...agents.code_sandbox import CellLimits
from ...benchmark import Benchmark, Episode, Hosts, Report, Resources, TrialSettings, read_memory_lines
from ...llm.base import ConfigurationError, Sampling
from ...llm.scripted import ScriptedCall
from ...llm.usage import UsageMeter
from ...trial import Score, TrialRecord
from .agent import EhrAgent, Memory, ReferenceAgent, SharedMemory, last_cell_stream
from .baselines import BaselineAgent, BaselineTools
from .scoring import compatibility, evaluate_judge, evaluate_log, gold_text, original_log, prediction, strict
from .prompts import CHATBOT_SYSTEM, DEBUGGER_SYSTEM, KNOWLEDGE_SYSTEM, initial_memory, prompts
from .tasks import DB_IDS, EHRSQL_NOW, Task, load_tasks, resolve_on
from .failures import TABLE as FAILURES
from .sampling import TABLE as SAMPLING
from .tools import CodeInterface

FILES = {"ehrsql_mimic_iii": "mimic_iii.json", "ehrsql_eicu": "eicu.json", "treqs": "treqs.jsonl"}
NAMES = {"ehrsql_mimic_iii": "MIMIC-III", "ehrsql_eicu": "eICU", "treqs": "TREQS"}
# the paper reports SR and CR per database (Table 2); the figure pooled over the databases is ehrbench's, weighted by
# their question counts, and carries this prefix, never the paper's bare names
POOLED = "all_databases/"
MEMORY_MODES = ("sequential", "frozen", "none")
CONTRACTS = {"original": {"memory_from": "judged", "error_text": "original"},
             "ehrbench": {"memory_from": "successful", "error_text": "informative"}}
HEADLINE = {"memory": "sequential", "num_shots": 4, "knowledge": True, "debugging": True, "interactive": True}
ABLATIONS = {("memory", "frozen"): "w/o long-term memory", ("memory", "none"): "no examples",
             ("knowledge", False): "w/o medical knowledge", ("debugging", False): "w/o debugging",
             ("interactive", False): "w/o interactive coding"}


@functools.lru_cache(maxsize=None)
def table_names(db_id: str) -> dict[str, str]:
    """The names LoadDB accepts (as the original's prompts write them: lowercase for EHRSQL, upper for TREQS) ->
    the table's name in the database."""
    from ...schemas import SCHEMAS

    names = [t.name for t in SCHEMAS[db_id].metadata().sorted_tables]     # once per process, not per trial
    return {(n if db_id == "treqs" else n.lower()): n for n in names}


def baseline_window(record: TrialRecord) -> tuple[bool, str]:
    """(completed, window) for the baselines, which the public code does not have: completed when the final reply
    says TERMINATE; judged on the last execution's output and the final reply, up to TERMINATE."""
    replies = [m.get("content") or "" for m in record.messages if m["role"] == "assistant" and not m.get("tool_call")]
    outputs = [m.get("content") or "" for m in record.messages if m["role"] == "tool"]
    final = replies[-1] if replies else ""
    completed = "TERMINATE" in final
    window = (outputs[-1] if outputs else "") + "\n" + final
    return completed, window[:window.rfind("TERMINATE")] if completed else window


def memory_stream(db_id: str, trial: int) -> str:
    return f"{db_id}#{trial}"


@functools.lru_cache(maxsize=8)
def memory_file_items(path: str) -> dict[str, list[dict]]:
    """A memory a sequential run wrote (`memory.jsonl`: db_id, trial, question, knowledge, code per line), by
    database: the items of its trial 0, in the order they were learned."""
    out: dict[str, list[dict]] = defaultdict(list)
    for item in read_memory_lines(path, dict.fromkeys(("db_id", "question", "knowledge", "code"), str),
                                  "memory=sequential"):
        if item.get("trial", 0) == 0:
            out[item["db_id"]].append({k: item[k] for k in ("question", "knowledge", "code")})
    return dict(out)


def memory_lines(records: list[TrialRecord], db_of: dict[str, str]) -> list[dict]:
    """What a sequential run learned, in the order it learned it: one line per remembered question."""
    return [{"db_id": db_of[r.task_key], "trial": r.trial, "key": r.task_key, **m["item"]}
            for r in records if r.valid and r.final and r.task_key in db_of for m in r.memory
            if not m["stream"].endswith(last_cell_stream(""))]


def last_cell(record: TrialRecord) -> str:
    """The last code cell the proxy executed (the original's `user_proxy.code`)."""
    cells = [args.get("cell", "") for args in record.tool_arguments("python")]
    return cells[-1] if cells else ""


def score(task: Task, record: TrialRecord, tools: CodeInterface, agent=None, knowledge: str | None = None,
          memory_from: str = "judged") -> Score:
    """SR (evaluate.py's verdict on the original's log), strict SR, CR; with `knowledge` (sequential memory), the
    question becomes a memory item when `memory_from` admits it: `judged` (the original: main.py's judge passes on
    the log's window, TERMINATE or not), `successful` (completed and passed) or `completed` (said TERMINATE)."""
    gold = gold_text(task.answer)
    if agent is None:                                   # a baseline: no original log to reproduce
        completed, window = baseline_window(record)
        compatible, judged = completed and evaluate_judge(window, gold), completed and compatibility(window, gold)
    else:
        log = original_log(task.question, task.answer, getattr(agent, "opening", None) or task.question,
                           record.messages, _call(getattr(agent, "unexecuted", None)), getattr(tools, "crash", None))
        (completed, compatible), judged = evaluate_log(log, task.answer), compatibility(prediction(log), gold)
    exact = completed and tools.last_answer is not None and strict(tools.last_answer, task.answer)
    kept = {"judged": judged, "successful": compatible, "completed": completed}[memory_from]
    stream, ran = memory_stream(task.db_id, record.trial), last_cell(record)
    # the original stores its proxy's `code`: this question's last cell, or, where it ran none, the chain's last
    code = ran or getattr(getattr(agent, "memory", None), "previous_cell", "")
    memory = [{"stream": stream, "key": task.key, "item": {"question": task.question, "knowledge": knowledge,
                                                          "code": code}}] if kept and knowledge is not None else []
    if ran and knowledge is not None:
        memory.append({"stream": last_cell_stream(stream), "key": "last", "item": {"code": ran}})
    return Score(float(compatible), {"completed": float(completed), "compatible": float(compatible),
                                     "strict": float(exact)}, memory)


def _call(call) -> dict | None:
    return {"name": call.name, "arguments": call.arguments, "raw": call.raw} if call is not None else None


class EhrAgentBenchmark(Benchmark):
    name = "ehragent"
    agents = ("reference", "ehragent", "autogen", "react", "llm2sql", "self_debugging")   # the last three: baselines.py
    users = ("none",)
    model_roles = ("agent", "knowledge", "debugger")
    sampling_table = SAMPLING
    failure_table = FAILURES
    headline_metric = f"{POOLED}SR"

    def check(self) -> None:
        o = self.options
        chosen = list(o.get("databases") or [])
        if not chosen or not set(chosen) <= set(DB_IDS):
            raise ConfigurationError(f"benchmark.databases={chosen}: choose one or more of {list(DB_IDS)}")
        if o.get("memory") not in MEMORY_MODES:
            raise ConfigurationError(f"benchmark.memory={o.get('memory')!r}: choose one of {list(MEMORY_MODES)} "
                                     "(frozen: the four initial examples; sequential: the original's growing "
                                     "memory, questions one at a time in seeded order; none: no examples)")
        if o.get("contract", "original") not in CONTRACTS:
            raise ConfigurationError(f"benchmark.contract={o.get('contract')!r}: choose original (the authors' code, "
                                     "the default) or ehrbench (its improvements on)")
        if o.get("treqs_prompts", "ehrbench") not in ("ehrbench", "eicu"):
            raise ConfigurationError(f"benchmark.treqs_prompts={o.get('treqs_prompts')!r}: choose ehrbench (TREQS "
                                     "prompts written in the MIMIC-III file's structure) or eicu (what the released "
                                     "main.py loads for --dataset treqs)")
        if self.choice("error_text") not in ("original", "informative"):
            raise ConfigurationError(f"benchmark.error_text={o.get('error_text')!r}: choose original (run_code's "
                                     "parser, garbled syntax errors and all) or informative (type, message and line); "
                                     "null: as the contract says")
        if self.memory_from() not in ("judged", "successful", "completed"):
            raise ConfigurationError(f"benchmark.memory_from={o.get('memory_from')!r}: choose judged (the original: "
                                     "main.py's judge passed, TERMINATE or not), successful (completed and passed) or "
                                     "completed (said TERMINATE; needs no labels); null: as the contract says")
        for field in ("num_shots",):
            if isinstance(o.get(field, 4), bool) or not isinstance(o.get(field, 4), int) or o.get(field, 4) < 0:
                raise ConfigurationError(f"benchmark.{field}={o.get(field)!r}: must be a whole number, 0 or more "
                                         "(the paper's K, 4 by default)")
        if o.get("memory_file"):
            if o["memory"] != "frozen":
                raise ConfigurationError(f"benchmark.memory_file={o['memory_file']!r} needs benchmark.memory=frozen "
                                         "(a sequential run builds its own memory)")
            if not Path(o["memory_file"]).is_file():
                raise ConfigurationError(f"benchmark.memory_file={o['memory_file']!r}: no such file (a memory.jsonl "
                                         "from a memory=sequential run's MLflow artifacts)")
            memory_file_items(str(o["memory_file"]))
        if isinstance(o.get("memory_seed"), bool) or not isinstance(o.get("memory_seed"), int):
            raise ConfigurationError(f"benchmark.memory_seed={o.get('memory_seed')!r}: must be an integer (the "
                                     "original's documented run shuffles with --seed 0)")
        for flag in ("knowledge", "debugging", "interactive"):
            if not isinstance(o.get(flag, True), bool):
                raise ConfigurationError(f"benchmark.{flag}={o.get(flag)!r}: must be true or false")
        for field in ("cell_cpu_s", "cell_wall_s", "cell_memory_mb", "sql_timeout_s"):
            value = o.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(f"benchmark.{field}={value!r}: must be a number above 0")
        files = o.get("question_files") or {}
        for db, path in files.items():
            if db not in DB_IDS or not Path(str(path)).is_file():
                raise ConfigurationError(f"benchmark.question_files.{db}={path!r}: " + (
                    f"not a database; use one of {list(DB_IDS)}" if db not in DB_IDS else
                    "no such file (an EHRSQL file such as dataset/ehrsql/mimic_iii/valid.json, or MIMICSQL's "
                    "test.json for treqs)"))
        if not all(db in files for db in chosen) and not Path(o.get("task_dir") or "").is_dir():
            raise ConfigurationError(f"benchmark.task_dir={o.get('task_dir')!r}: no such folder; it must hold "
                                     f"{', '.join(FILES.values())} (the project's are in data/tasks/ehragent)")

    def choice(self, option: str) -> str:
        """An option the contract decides (memory_from, error_text): the run's, else the contract's."""
        return self.options.get(option) or CONTRACTS.get(self.options.get("contract", "original"),
                                                          CONTRACTS["original"])[option]

    def prompt_set(self, db: str) -> str:
        """Whose prompt file a database's questions get: its own, or for TREQS with `treqs_prompts=eicu` eICU's, the
        file the released main.py loads for any `--dataset` but mimic_iii (it has no TREQS prompts)."""
        return "ehrsql_eicu" if db == "treqs" and self.options.get("treqs_prompts", "ehrbench") == "eicu" else db

    def memory_from(self) -> str:
        """Which questions a sequential memory admits."""
        return self.choice("memory_from")

    def contract(self) -> tuple[str, list[str]]:
        """The contract, and every setting that departs from it or from the paper's headline EHRAgent."""
        o = self.options
        name = o.get("contract", "original")
        departures = [f"{option}={self.choice(option)}" for option in CONTRACTS[name]
                      if self.choice(option) != CONTRACTS[name][option]]
        for option, headline in HEADLINE.items():
            value = o.get(option, headline)
            if value != headline:
                why = ABLATIONS.get((option, value))
                departures.append(f"{option}={value}" + (f" ({why})" if why else ""))
        return name, departures

    def question_file(self, db: str) -> Path:
        """`question_files.<db>` (e.g. EHRSQL's own valid.json), else the task folder's file for the database."""
        own = (self.options.get("question_files") or {}).get(db)
        return Path(own) if own else Path(self.options["task_dir"]) / FILES[db]

    def tasks(self) -> list[Task]:
        return [t for db in self.options["databases"] for t in load_tasks(self.question_file(db), db)]

    def resolve_tasks(self, tasks: list[Task], paths: dict[str, str]) -> list[Task]:
        """Questions from a file without answers (EHRSQL's, MIMICSQL's) get them from the run's database: the
        synthetic rendering, or your own with `data.<db>.path`; those whose gold SQL fails or returns nothing are
        dropped, as EHRAgent's authors dropped them."""
        import logging

        from ...db import open_database

        out = []
        for db in self.options["databases"]:
            mine = [t for t in tasks if t.db_id == db]
            if all(t.answer is not None for t in mine):
                out += mine
                continue
            kept, dropped = resolve_on(mine, open_database(paths[db], db), float(self.options["sql_timeout_s"]))
            out += kept
            logging.getLogger(__name__).warning(
                "%s: %d of %d questions answered on %s; %d dropped (gold SQL failed or returned nothing)%s", db,
                len(kept), len(mine), paths[db], len(dropped),
                "; e.g. " + "; ".join(f"{q}: {why[:120]}" for q, why in dropped[:3]) if dropped else "")
        return out

    def resources(self) -> Resources:
        return Resources(databases=tuple(self.options["databases"]), memory=self.options["memory"] == "sequential")

    def check_agent(self, agent: str) -> None:
        self.agent = agent

    def schedule(self, tasks: list[Task], trials: int) -> list[list[tuple[Task, int]]] | None:
        """Sequential memory: per database and trial index, one chain of the database's questions in seeded order.
        The memory is EHRAgent's: the reference and the baselines read none, so their trials run in parallel."""
        import random

        if self.options["memory"] != "sequential" or getattr(self, "agent", "ehragent") != "ehragent":
            return None
        chains = []
        for db in self.options["databases"]:
            order = [t for t in tasks if t.db_id == db]
            random.Random(self.options["memory_seed"]).shuffle(order)
            chains += [[(t, i) for t in order] for i in range(trials)]
        return chains

    def _sampling(self, role: str, model: dict | None) -> Sampling:
        """The table's parameters; `contract=ehrbench` seeds the chatbot's and the knowledge call's requests."""
        params = self.sampling(role, model)
        return replace(params, seed="trial") if self.options.get("contract", "original") == "ehrbench" else params

    def episode(self, task: Task, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        o = self.options
        limits = CellLimits(cpu_s=float(o["cell_cpu_s"]), wall_s=float(o["cell_wall_s"]),
                            memory_mb=int(o["cell_memory_mb"]))
        ehragent = settings.agent == "ehragent"
        autogen = settings.agent == "autogen"        # EHRAgent's chat without knowledge, debugging or memory
        db, tables = hosts.databases[task.db_id], table_names(task.db_id)
        prompt_set = self.prompt_set(task.db_id)
        tools = CodeInterface(task.db_id, db, tables, task.question, EHRSQL_NOW,
                              settings.model_for("debugger", meter) if ehragent and o["debugging"] else None,
                              limits, float(o["sql_timeout_s"]), self.sampling("debugger", settings.agent_model),
                              self.choice("error_text"), prompt_set)
        sampling = {role: self._sampling(role, settings.agent_model) for role in ("agent", "knowledge")}
        sequential = o["memory"] == "sequential"
        baseline = settings.agent in ("react", "llm2sql", "self_debugging")
        if baseline:
            tools = BaselineTools(tools, settings.agent)
            agent = BaselineAgent(settings.agent, settings.model_for("agent", meter), task.db_id, db, tables, seed,
                                  sampling["agent"])
        elif autogen:
            agent = EhrAgent(settings.model_for("agent", meter), None, prompt_set, Memory(initial_memory(prompt_set)),
                             seed, proxy=tools, sampling=sampling)
        elif ehragent:
            learned = memory_file_items(str(o["memory_file"])).get(task.db_id, []) if o.get("memory_file") else []
            shots = initial_memory(prompt_set)
            memory = (SharedMemory(shots, hosts.memory, memory_stream(task.db_id, trial))
                      if sequential else Memory(shots + learned if o["memory"] == "frozen" else []))
            agent = EhrAgent(settings.model_for("agent", meter),
                             settings.model_for("knowledge", meter) if o["knowledge"] else None, prompt_set, memory,
                             seed, num_shots=int(o.get("num_shots", 4)),
                             max_executions=10 if o.get("interactive", True) else 1, proxy=tools, sampling=sampling)
        else:
            agent = ReferenceAgent(task.db_id, task.question, task.gold_sql,
                                   ScriptedCall("agent", meter, settings.agent_latency_s))

        async def scored(record: TrialRecord) -> Score:
            return score(task, record, tools, None if baseline else agent,
                         agent.knowledge if sequential and ehragent else None, self.memory_from())
        return Episode(tools, agent, scored, opening=task.question)

    def trial_score(self, record: TrialRecord) -> float:
        """SR's value of a trial: the original's judge ("compatible"), as the report counts it."""
        return float(record.score_parts.get("compatible", record.reward or 0.0))

    def report(self, records: list[TrialRecord], tasks: list[Task], k: int, out_dir: Path) -> Report:
        """SR (the original's judge), strict SR and CR, overall and by database and complexity level; SR by level."""
        import sys

        from rich.console import Console
        from rich.table import Table

        from ...tracking.plots import category_bars

        by_key = {t.key: t for t in tasks}
        sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for r in records:
            if not r.valid or r.task_key not in by_key:
                continue
            t = by_key[r.task_key]
            for g in ("all", NAMES[t.db_id], f"level {t.level}", f"{NAMES[t.db_id]}/level {t.level}"):
                s = sums[g]
                s["trials"] += 1
                s["SR"] += r.score_parts.get("compatible", r.reward or 0.0)
                s["SR_strict"] += r.score_parts.get("strict", 0.0)
                s["CR"] += r.score_parts.get("completed", 0.0)
        table = Table(title=f"EHRAgent results over {k} trials per question (percent)")
        for col in ("group", "trials", "SR", "SR strict", "CR"):
            table.add_column(col, justify="left" if col == "group" else "right")
        metrics: dict[str, float] = {}
        for g in sorted(sums, key=lambda g: (g != "all", g.count("/"), g)):
            s = sums[g]
            values = {m: 100 * s[m] / s["trials"] for m in ("SR", "SR_strict", "CR")}
            prefix = POOLED if g == "all" else f"{g.replace(' ', '_')}/"
            metrics.update({f"{prefix}{m}": v for m, v in values.items()})
            table.add_row(POOLED.rstrip("/") if g == "all" else g, str(int(s["trials"])),
                          *(f"{values[m]:.1f}" for m in ("SR", "SR_strict", "CR")))
        console = Console(file=sys.stdout, width=100)
        with console.capture() as cap:
            console.print(table)
        out_dir.mkdir(parents=True, exist_ok=True)
        levels = {g: 100 * s["SR"] / s["trials"] for g, s in sums.items() if g.startswith("level")}
        files = [category_bars(levels, out_dir / "sr_by_level.png", "SR by complexity level")] if levels else []
        if learned := memory_lines(records, {t.key: t.db_id for t in tasks}):  # a sequential run's memory, to
            (out_dir / "memory.jsonl").write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in learned))
            files.append(out_dir / "memory.jsonl")                             # freeze for parallel runs
        headline = {f"{name} {m}": metrics[f"{name}/{m}"] for name in NAMES.values() for m in ("SR", "CR")
                    if f"{name}/{m}" in metrics}
        headline.update({POOLED + m: metrics[POOLED + m] for m in ("SR", "CR") if POOLED + m in metrics})
        return Report(cap.get(), metrics, headline=headline, files=files)

    def prompts(self) -> dict[str, str]:
        out = {"ehragent.chatbot_system": CHATBOT_SYSTEM, "ehragent.knowledge_system": KNOWLEDGE_SYSTEM,
               "ehragent.debugger_system": DEBUGGER_SYSTEM}
        for db in self.options["databases"]:
            p = prompts(self.prompt_set(db))
            out.update({f"ehragent.{db}.knowledge": p["RetrKnowledge"], f"ehragent.{db}.message": p["EHRAgent_Message_Prompt"],
                        f"ehragent.{db}.debugger": p["CodeDebugger"]})
        return out
