"""AgentEHR behind the benchmark seam: per-patient, time-censored prediction of the next clinical events.

A trial is one sample: the agent loads the patient's EHR at the prediction time (the censored view), explores it and
the candidate tables with the tools, and finishes with a list of names; the reward is set F1 against the labels.
The samples (`data/tasks/agentehr/<task>.json`, the original's item format; `train/<task>.json`, the evolving
memory's build split, from the other half of the world's patients) are written from the world by
`python -m ehrbench.benchmarks.agentehr.authoring`; at start the run's MIMIC-IV rendering is split into per-patient
files with the candidate database beside them (built once, cached by the source's content key).

Memory (`memory.py`): `none`; `build` runs the train split, each task's samples one after another in file order,
learning from each (the run's MemoryActor; `memory.jsonl` among its artifacts); `use` recalls from a build run's
`memory.jsonl` (`benchmark.memory_file`), every trial independent.
"""
from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ...benchmark import Benchmark, Episode, Hosts, Report, Resources, TaskFileError, TaskScores, \
    TrialSettings, check_world, read_json_records
from ...llm.base import ConfigurationError, Sampling
from ...llm.scripted import ScriptedCall
from ...llm.tokens import token_counter
from ...llm.usage import UsageMeter
from ...trial import Score, TrialRecord
from . import memory as evolving
from .agent import ReActAgent, ReferenceAgent, SummarizingAgent, first_message, instruction, prompts
from .censoring import CENSORING
from .failures import TABLE as FAILURES
from .sampling import TABLE as SAMPLING
from .scoring import ERRORS, best_at_k, f1, interaction_errors, parse_ehrbench, parse_original
from .tasks import TASKS

DB = "mimic_iv"
MIMIC_III = "ehrsql_mimic_iii"            # the schema-shift subset's rendering
INDEX_NAME = "agentehr"                   # the candidate tables' lists in the value index
MEMORY_MODES = ("none", "build", "use")


@dataclass(frozen=True)
class Sample:
    task: str
    subject_id: int
    hadm_id: int | None
    prediction_time: str
    labels: tuple[str, ...]
    subset: str                       # common | rare (inverse label frequency, the original's rule) | mimic_iii
    folder: str = ""                  # its rendering's per-patient files (set once the databases are ready)
    candidates: str = ""              # the candidate database

    @property
    def source(self) -> str:
        return MIMIC_III if self.subset == "mimic_iii" else DB

    @property
    def key(self) -> str:            # a sample drawn into both Common and Rare is two tasks
        prefix = {"mimic_iii": "mimic_iii/", "rare": "rare/"}.get(self.subset, "")
        return f"{prefix}{self.task}/{self.subject_id}/{self.prediction_time}"

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.task, f"{self.task}/{self.subset}")

    def to_json(self) -> dict:
        return {**asdict(self), "labels": list(self.labels)}

    def item(self) -> dict:
        return {"subject_id": self.subject_id, "hadm_id": self.hadm_id, "prediction_time": self.prediction_time,
                "task": self.task, "label": [{"name": n} for n in self.labels]}


def subsets(items: list[dict]) -> list[str]:
    """Each item's `subset` as its file says (the authoring draws Common and Rare as the original's
    label_wise_sample.py: `tasks.draw_subsets`); for a file without it, a split by the same weights counted within
    the file: common / rare per sample, the mean over its labels of 1 / (the label's frequency in the task), against
    the mean of that over the task's samples."""
    if items and all(it.get("subset") in ("common", "rare") for it in items):
        return [it["subset"] for it in items]
    counts: dict[str, int] = defaultdict(int)
    for it in items:
        for name in {x["name"] for x in it["label"]}:
            counts[name] += 1
    weights = [float(np.mean([1 / counts[x["name"]] for x in it["label"]])) if it["label"] else 0.0 for it in items]
    mean = float(np.mean(weights)) if weights else 0.0
    return ["common" if w <= mean else "rare" for w in weights]


def patient_folders(paths: dict[str, str]) -> dict[str, Path]:
    """Each rendering's per-patient folder, next to its database file (split once, then reused)."""
    from .patient_db import split_patients

    return {db: split_patients(Path(path), Path(path).parent) for db, path in paths.items() if db in (DB, MIMIC_III)}


def load_samples(task_dir: Path, tasks: list[str], subset: str | None = None) -> list[Sample]:
    """The samples of `tasks` in `task_dir`, each common or rare (or all `subset`: mimic_iii)."""
    out = []
    for task in tasks:
        path = task_dir / f"{task}.json"
        items = read_json_records(path, "the project's are in data/tasks/agentehr; write them with python -m "
                                        "ehrbench.benchmarks.agentehr.authoring")
        for i, it in enumerate(items):
            for field in ("subject_id", "prediction_time", "label"):
                if field not in it:
                    raise TaskFileError(f"{path}: item {i}: field `{field}` is missing; an item is {{subject_id, "
                                        "hadm_id, prediction_time, task, label: [{name, ...}]}")
            if it.get("task", task) != task:
                raise TaskFileError(f"{path}: item {i}: task {it['task']!r} in the {task} file")
            if it.get("subset", "common") not in ("common", "rare"):
                raise TaskFileError(f"{path}: item {i}: subset {it['subset']!r}: common or rare (or leave it out: "
                                    "the file is then split by label frequency)")
        for it, kind in zip(items, [subset] * len(items) if subset else subsets(items)):
            out.append(Sample(task, int(it["subject_id"]), it.get("hadm_id"), str(it["prediction_time"]),
                              tuple(dict.fromkeys(str(x["name"]) for x in it["label"] if x.get("name"))), kind))
    return out


_LOCAL_MODEL = threading.Lock()         # one load of the local model, one encoding at a time


@functools.lru_cache(maxsize=1)
def _embedder():
    from ...retrieval.embedder import Embedder

    return Embedder()


@functools.lru_cache(maxsize=32)
def _candidate_vectors(table: str, names: tuple[str, ...]):
    return _embedder().encode(list(names))


def _encode_here(texts: list[str]) -> np.ndarray:
    with _LOCAL_MODEL:
        return _embedder().encode(list(texts))


async def encode(texts: list[str]) -> np.ndarray:
    """Normalized embeddings of texts (the local model, in this process: where no value index is hosted)."""
    return await asyncio.to_thread(_encode_here, texts)


async def nearest_here(table: str, names: list[str], query: str, k: int) -> list[tuple[str, float]]:
    """The k candidates nearest the query with their cosine, best first (the local model, in this process; used
    where no value index is hosted)."""
    def work():
        with _LOCAL_MODEL:
            scores = _candidate_vectors(table, tuple(names)) @ _embedder().encode([query])[0]
        return sorted(zip(names, map(float, scores)), key=lambda x: -x[1])[:k]
    return await asyncio.to_thread(work)


def nearest_in(index, source: str):
    """The same on the run's value index (the ValueIndexActor: on a GPU where the cluster has one), over the
    candidate tables of the sample's rendering."""
    async def nearest(table: str, names: list[str], query: str, k: int) -> list[tuple[str, float]]:
        return await index.scored(f"{INDEX_NAME}/{source}", table, "candidate", query, k)
    return nearest


# The fidelity contract (../FIDELITY.md): `original` reads finish's answer and scores F1 as the authors' test.py;
# `ehrbench` reads an answer that starts with a list as that list (whole), any other as one name, and strips names.
CONTRACTS = ("original", "ehrbench")


class AgentEhrBenchmark(Benchmark):
    name = "agentehr"
    agents = ("reference", "react", "resum", "retrosum")
    users = ("none",)
    model_roles = ("agent", "summarizer", "extractor", "embedder")
    sampling_table = SAMPLING
    failure_table = FAILURES
    headline_metric = "common/F1"            # the paper's Avg: MIMIC-IV-Common, the mean over the tasks

    def check(self) -> None:
        o = self.options
        if o.get("contract", "original") not in CONTRACTS:
            raise ConfigurationError(f"benchmark.contract={o.get('contract')!r}: choose original (the authors' code, "
                                     "the default) or ehrbench (its improvements on)")
        if self.censoring() not in CENSORING:
            raise ConfigurationError(f"benchmark.censoring={o.get('censoring')!r}: choose original (the authors' "
                                     "EHRManager: each table cut by its first time column) or ehrbench (each row "
                                     "by when it became known)")
        chosen = list(o.get("tasks") or [])
        if not chosen or not set(chosen) <= set(TASKS):
            raise ConfigurationError(f"benchmark.tasks={chosen}: choose among {list(TASKS)}")
        if not Path(str(o.get("task_dir") or "")).is_dir():
            raise ConfigurationError(f"benchmark.task_dir={o.get('task_dir')!r}: no such folder (the project's samples "
                                     "are in data/tasks/agentehr)")
        check_world(Path(o["task_dir"]), o.get("world") or {}, "ehrbench.benchmarks.agentehr.authoring")
        if not isinstance(o.get("mimic_iii", True), bool):
            raise ConfigurationError(f"benchmark.mimic_iii={o['mimic_iii']!r}: true or false (also run the MIMIC-III "
                                     "schema-shift subset)")
        shards = o.get("patient_shards", 4)
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ConfigurationError(f"benchmark.patient_shards={shards!r}: a whole number >= 1 (the actors holding "
                                     "the per-patient views)")
        mode = o.get("memory", "none")
        if mode not in MEMORY_MODES:
            raise ConfigurationError(f"benchmark.memory={mode!r}: choose none, build (learn from the train split) or "
                                     "use (recall from benchmark.memory_file)")
        if mode == "build" and not (Path(o["task_dir"]) / "train").is_dir():
            raise ConfigurationError(f"benchmark.memory=build: {o['task_dir']}/train is missing (the train split; "
                                     "python -m ehrbench.benchmarks.agentehr.authoring writes it)")
        if mode == "use":
            file = o.get("memory_file")
            if not file or not Path(str(file)).is_file():
                raise ConfigurationError(f"benchmark.memory_file={file!r}: benchmark.memory=use needs a memory.jsonl "
                                         "from a benchmark.memory=build run's MLflow artifacts")
            evolving.read_memory_file(str(file))
        elif o.get("memory_file"):
            raise ConfigurationError(f"benchmark.memory_file={o['memory_file']!r} needs benchmark.memory=use")

    def parse(self, text: str | None) -> list[str]:
        """The names in a finish answer, read as the contract says (`scoring.parse_original` / `parse_ehrbench`)."""
        return parse_ehrbench(text) if self.options.get("contract", "original") == "ehrbench" else parse_original(text)

    def censoring(self) -> str:
        """What the views hide at t (`censoring.py`): the original's rule unless asked, or under contract=ehrbench."""
        o = self.options
        return o.get("censoring") or ("ehrbench" if o.get("contract", "original") == "ehrbench" else "original")

    def contract(self) -> tuple[str, list[str]]:
        """The contract, and the settings that depart from the original: its knowledge tools searched MedRAG's
        corpora, which cannot ship; with `knowledge=true` they search a substitute made from the world's vocabulary;
        `censoring=ehrbench` hides each row until it was known (stricter than the original)."""
        o = self.options
        departures = ["knowledge=true (substitute corpus)" if o.get("knowledge") else
                      "knowledge=false (no retrieve_* tools: MedRAG's corpora cannot ship)"]
        if self.censoring() == "ehrbench":
            departures.append("censoring=ehrbench (rows hidden until known, not by their first time column)")
        return o.get("contract", "original"), departures

    def _sampling(self, role: str, model: dict | None) -> Sampling:
        """The table's parameters; `contract=ehrbench` seeds every call with the trial's seed."""
        params = self.sampling(role, model)
        return replace(params, seed="trial") if self.options.get("contract", "original") == "ehrbench" else params

    def check_agent(self, agent: str) -> None:
        if self.options.get("memory", "none") != "none" and agent == "reference":
            raise ConfigurationError(f"benchmark.memory={self.options['memory']}: the evolving memory needs a model "
                                     "(its experience is written by one): agent=retrosum model=...")

    def tasks(self) -> list[Sample]:
        """The test samples (and the MIMIC-III subset's, with `benchmark.mimic_iii`); building the memory, the train
        split's Common samples (the paper's memory learns from MIMIC-IV-Common cases)."""
        folder, tasks = Path(self.options["task_dir"]), list(self.options["tasks"])
        if self.options.get("memory") == "build":
            return [s for s in load_samples(folder / "train", tasks) if s.subset == "common"]
        iii = load_samples(folder / "mimic_iii", tasks, "mimic_iii") if self.options.get("mimic_iii", True) else []
        return load_samples(folder, tasks) + iii

    def resources(self) -> Resources:
        """The MIMIC-IV rendering and EHRSQL's MIMIC-III (the schema-shift subset; its names join the candidate
        lists); the per-patient files hosted by `patient_shards` shards routed by patient."""
        return Resources(databases=(DB, MIMIC_III), memory=self.options.get("memory") == "build",
                         services={"patients": int(self.options.get("patient_shards", 4))})

    def index_values(self, tasks: list[Sample]) -> dict[tuple[str, str, str], list[str]]:
        """Every candidate table's names, for semantic candidate search on the value index."""
        from .tools import candidate_tables

        from .tools import candidate_names

        files = {(t.source, t.candidates) for t in tasks if t.candidates}
        return {(f"{INDEX_NAME}/{source}", table, "candidate"): sorted(set(candidate_names(columns, rows)))
                for source, file in sorted(files) for table, (columns, rows) in candidate_tables(file).items()}

    def service(self, name: str, shard: int, shards: int, paths: dict[str, str]):
        from .views import PatientViews

        if name != "patients":
            return super().service(name, shard, shards, paths)
        return PatientViews(patient_folders(paths))

    def schedule(self, tasks: list[Sample], trials: int) -> list[list[tuple[Sample, int]]] | None:
        """Building the memory: per task and trial index, one chain of the task's train samples in file order."""
        if self.options.get("memory") != "build":
            return None
        return [[(t, i) for t in tasks if t.task == task] for task in self.options["tasks"] for i in range(trials)]

    def resolve_tasks(self, tasks: list[Sample], paths: dict[str, str]) -> list[Sample]:
        """The per-patient files of both renderings and the candidate database, next to the run's database files
        (built once)."""
        from dataclasses import replace

        from .tasks import write_candidates

        folders = patient_folders(paths)
        candidates = {}
        for source in sorted({t.source for t in tasks}):         # each rendering's own, as the original built
            candidates[source] = folders[source] / "candidates.db"   # one from each database
            if not candidates[source].exists():
                write_candidates(paths[source], candidates[source], source)
        return [replace(t, folder=str(folders[t.source]), candidates=str(candidates[t.source])) for t in tasks]

    def episode(self, task: Sample, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        from .knowledge import Knowledge
        from .tools import AgentEhrTools
        from .views import InProcess, PatientViews

        o = self.options
        folder = Path(task.folder)
        views = hosts.services["patients"].for_patient(task.subject_id) if "patients" in hosts.services \
            else InProcess(PatientViews({task.source: folder}))
        nearest = nearest_in(hosts.index, task.source) if hosts.index is not None else nearest_here
        knowledge = bool(o.get("knowledge", False))       # the substitute corpus: off unless asked for
        tools = AgentEhrTools(views, task.candidates, task.subject_id, task.prediction_time, nearest,
                              Knowledge() if knowledge else None, task.source, self.censoring())
        mode = o.get("memory", "none")
        turns = int(o.get("max_turns", 100))
        recall = None
        if mode != "none":
            async def entries() -> list[dict]:
                if mode == "build":
                    return await hosts.memory.items(evolving.stream(task.task, trial))
                return evolving.read_memory_file(str(o["memory_file"])).get(task.task, [])
            embed = hosts.index.encode if hosts.index is not None else encode     # the index actor's model
            recall = evolving.Recall(tools, entries, embed, int(o.get("memory_top_k", 1)),
                                     float(o.get("memory_threshold", 0.5)))
        if settings.agent == "reference":
            agent = ReferenceAgent(task.task, task.subject_id, task.prediction_time,
                                   ScriptedCall("agent", meter, settings.agent_latency_s), task.source)
        elif settings.agent == "react":
            agent = ReActAgent(settings.model_for("agent", meter), task.subject_id, task.prediction_time,
                               self._sampling("agent", settings.agent_model), seed, turns, recall, knowledge,
                               token_counter(settings.agent_model))
        else:
            agent = SummarizingAgent(settings.model_for("agent", meter), settings.model_for("summarizer", meter),
                                     settings.agent, task.task, task.subject_id, task.prediction_time,
                                     self._sampling("agent", settings.agent_model), seed, turns,
                                     int(o.get("summary_every", 10)), recall, knowledge,
                                     token_counter(settings.agent_model),
                                     self._sampling("summarizer", settings.agent_model))

        async def scored(record: TrialRecord) -> Score:
            answer = record.messages[-1]["content"] if record.messages else ""
            predicted = self.parse(answer)
            result = f1(predicted, list(task.labels), strip=o.get("contract", "original") == "ehrbench")
            calls = [(m["tool_call"]["name"], m["tool_call"]["arguments"] or {}, "") for m in record.messages
                     if m.get("tool_call")]
            observations = [m["content"] or "" for m in record.messages if m["role"] == "tool"]
            calls = [(n, a, o) for (n, a, _), o in zip(calls, observations + [""] * len(calls))]
            errors = interaction_errors(calls, predicted)
            parts = {**result, **{f"error/{k}": float(v) for k, v in errors.items()},
                     "predicted": float(len(predicted))}
            learned: list[dict] = []
            if recall is not None:
                parts.update(await self._remember(task, trial, record, recall, result["f1"], answer, learned, meter,
                                                  settings, seed))
            return Score(result["f1"], parts, learned)
        return Episode(tools, agent, scored, opening=first_message(task.task, task.subject_id, task.prediction_time))

    async def _remember(self, task: Sample, trial: int, record: TrialRecord, recall, score: float, answer: str,
                        learned: list[dict], meter: UsageMeter, settings: TrialSettings, seed: int) -> dict:
        """What the trial recalled (a score part, and an assessment on its trace); building, what it teaches:
        judged against the stream's earlier F1s, its experience extracted by the model."""
        best = recall.retrieved[0] if recall.retrieved else None
        if best is not None:
            record.assessments.append({"name": "memory_recall", "value": round(best[0], 4), "source_type": "CODE",
                                       "source_id": "ehrbench.agentehr.memory", "rationale": evolving.section([best]),
                                       "metadata": {"entry": best[1]["key"]}})
        parts = {"memory/recalled": float(best is not None), "memory/similarity": best[0] if best else 0.0}
        if self.options.get("memory") != "build" or recall.key is None:
            return parts
        previous = [e["f1"] for e in await recall.entries()]
        success = evolving.judge(score, previous)
        query = instruction(task.task, task.subject_id, task.prediction_time)
        items = await evolving.extract(settings.model_for("extractor", meter), query, record, list(task.labels),
                                       self.parse(answer), int(self.options.get("memory_max_items", 10)),
                                       self._sampling("extractor", settings.agent_model), seed)
        learned.append({"stream": evolving.stream(task.task, trial), "key": task.key, "item": {
            "task": task.task, "key": task.key, "subject_id": task.subject_id, "prediction_time": task.prediction_time,
            "f1": score, "success": success, "items": items, "vector": recall.key}})
        return {**parts, "memory/success": float(success), "memory/items": float(len(items))}

    def task_scores(self, records: list[TrialRecord], tasks: list[Sample], k: int) -> TaskScores:
        """Each MIMIC-IV sample's mean F1 (x100), grouped by its task: the paper's F1 is the mean over tasks of
        the mean over each task's samples (common and rare; the MIMIC-III subset is reported apart)."""
        scores = super().task_scores(records, tasks, k)
        by_key = {t.key: t for t in tasks}
        kept = {key: v for key, v in scores.scores.items() if by_key[key].subset != "mimic_iii"}
        return TaskScores("F1", kept, {key: by_key[key].task for key in kept})

    def report(self, records: list[TrialRecord], tasks: list[Sample], k: int, out_dir: Path) -> Report:
        """F1 by task and subset and averaged over tasks; Best@K over the trials; interaction errors; tokens per
        sample; plots of F1 by task and subset and of Best@K against K."""
        import sys

        from rich.console import Console
        from rich.table import Table

        from ...tracking.plots import grouped_bars, pass_k_curves

        by_key = {t.key: t for t in tasks}
        per_sample: dict[str, list[float]] = defaultdict(list)
        errors: dict[str, float] = defaultdict(float)
        tokens: dict[str, list[float]] = defaultdict(list)
        for r in records:
            if r.valid and r.task_key in by_key:
                per_sample[r.task_key].append(r.reward or 0.0)
                for e in ERRORS:
                    errors[e] += r.score_parts.get(f"error/{e}", 0.0)
                for kind in ("input", "output"):
                    tokens[f"{by_key[r.task_key].task}/{kind}"].append(
                        sum(u.get(f"{kind}_tokens", 0) for u in r.usage.values()))
        # Sample groups: <task>/<subset> (common, rare, mimic_iii), <task> (MIMIC-IV: common and rare). Averages
        # over the tasks, the paper's Avg: F1 (MIMIC-IV) and <subset>/F1.
        members: dict[str, list[str]] = defaultdict(list)
        for key in per_sample:
            t = by_key[key]
            members[f"{t.task}/{t.subset}"].append(key)
            if t.subset != "mimic_iii":
                members[t.task].append(key)
        metrics: dict[str, float] = {}
        table = Table(title=f"AgentEHR set F1 over {k} trials per sample")
        for col in ("group", "samples", "F1", f"Best@{k}"):
            table.add_column(col, justify="left" if col == "group" else "right")
        for g in sorted(members, key=lambda g: (g.count("/"), g)):
            keys = members[g]
            metrics[f"{g}/F1"] = float(np.mean([np.mean(per_sample[key]) for key in keys]))
            metrics[f"{g}/Best_at_{k}"] = float(np.mean([best_at_k(per_sample[key], k) for key in keys]))
            table.add_row(g, str(len(keys)), f"{metrics[f'{g}/F1']:.4f}", f"{metrics[f'{g}/Best_at_{k}']:.4f}")
        for name, suffix in (("", ""), *((f"{s}/", f"/{s}") for s in ("common", "rare", "mimic_iii"))):
            means = [metrics[f"{t}{suffix}/F1"] for t in TASKS if f"{t}{suffix}/F1" in metrics]
            if means:
                metrics[f"{name}F1"] = float(np.mean(means))
                bests = [metrics[f"{t}{suffix}/Best_at_{k}"] for t in TASKS if f"{t}{suffix}/F1" in metrics]
                metrics[f"{name}Best_at_{k}"] = float(np.mean(bests))
                table.add_row(f"average {name.rstrip('/') or 'MIMIC-IV'}", str(len(means)) + " tasks",
                              f"{metrics[f'{name}F1']:.4f}", f"{metrics[f'{name}Best_at_{k}']:.4f}")
        curve = [float(np.mean([best_at_k(s, i) for s in per_sample.values()])) for i in range(1, k + 1)] \
            if per_sample else []
        n = max(1, sum(len(s) for s in per_sample.values()))
        metrics.update({f"errors/{e}": 100 * errors[e] / n for e in ERRORS})
        metrics.update({f"{t}_tokens_per_trial": float(np.mean(v)) for t, v in tokens.items()})  # every role's
        console = Console(file=sys.stdout, width=100)
        with console.capture() as cap:
            console.print(table)
            console.print("interaction errors (% of trials): " + ", ".join(
                f"{e} {metrics[f'errors/{e}']:.1f}" for e in ERRORS))
            if tokens:
                console.print("tokens per trial, input / output (the agent's and its helpers'): " + ", ".join(
                    f"{t} {np.mean(tokens[f'{t}/input']):,.0f} / {np.mean(tokens[f'{t}/output']):,.0f}"
                    for t in TASKS if f"{t}/input" in tokens))
        out_dir.mkdir(parents=True, exist_ok=True)
        by_task = {t: {s: 100 * metrics.get(f"{t}/{s}/F1", 0.0) for s in ("common", "rare", "mimic_iii")}
                   for t in TASKS if any(f"{t}/{s}/F1" in metrics for s in ("common", "rare", "mimic_iii"))}
        files = [grouped_bars(by_task, out_dir / "f1_by_task.png", "AgentEHR F1 by task and subset", "F1 x 100")]
        if curve:
            files.append(pass_k_curves({"all": {"Pass_at_k": [100 * c for c in curve]}}, list(range(1, k + 1)),
                                       out_dir / "best_at_k.png", "Best@K (x100) against K"))
        valid = [r for r in records if r.valid and r.task_key in by_key]
        if self.options.get("memory", "none") != "none" and valid:
            metrics["memory/recalled"] = float(np.mean([r.score_parts.get("memory/recalled", 0.0) for r in valid]))
        if learned := [m["item"] | {"trial": r.trial} for r in valid if r.final for m in r.memory]:
            metrics["memory/entries"] = float(len(learned))
            metrics["memory/success"] = float(np.mean([e["success"] for e in learned]))
            metrics["memory/items_per_entry"] = float(np.mean([len(e["items"]) for e in learned]))
            order = {(t.task, t.key): i for i, t in enumerate(tasks)}       # the order they were learned in
            learned.sort(key=lambda e: (e["trial"], order.get((e["task"], e["key"]), 0)))
            (out_dir / "memory.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in learned))
            files.append(out_dir / "memory.jsonl")
        headline = {"common/F1": metrics.get("common/F1", 0.0), "F1": metrics.get("F1", 0.0)}
        return Report(cap.get(), metrics, headline=headline, curves={"Best_at_K": curve}, files=files)

    def prompts(self) -> dict[str, str]:
        p = prompts()
        return {"agentehr.base_instruction": p["base_instruction"],
                "agentehr.termination": p["termination_instruction"],
                "agentehr.summary_first": p["summary_first"], "agentehr.summary_next": p["summary_next"],
                **{f"agentehr.{t}": p["tasks"][t] for t in self.options.get("tasks", TASKS)}}
