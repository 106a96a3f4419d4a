"""AgentEHR behind the benchmark seam: per-patient, time-censored prediction of the next clinical events.

A trial is one sample: the agent loads the patient's EHR at the prediction time (the censored view), explores it and
the candidate tables with the tools, and finishes with a list of names; the reward is set F1 against the labels.
The samples (`data/tasks/agentehr/<task>.json`, the original's item format) are written from the world by
`python -m ehrbench.benchmarks.agentehr.authoring`; at start the run's MIMIC-IV rendering is split into per-patient
files with the candidate database beside them (built once, cached by the source's content key).
"""
from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ...benchmark import Benchmark, Episode, Hosts, Report, Resources, TaskFileError, TrialSettings, \
    check_world, read_json_records
from ...llm.base import ConfigurationError
from ...llm.scripted import ScriptedCall
from ...llm.usage import UsageMeter
from ...trial import Score, TrialRecord
from .agent import ReActAgent, ReferenceAgent, SummarizingAgent, first_message, prompts
from .scoring import ERRORS, best_at_k, f1, interaction_errors, parse_prediction
from .tasks import TASKS

DB = "mimic_iv"


@dataclass(frozen=True)
class Sample:
    task: str
    subject_id: int
    hadm_id: int | None
    prediction_time: str
    labels: tuple[str, ...]
    subset: str                       # common | rare (inverse label frequency, the original's rule)
    folder: str = ""                  # per-patient files and candidates (set once the database is ready)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.subject_id}/{self.prediction_time}"

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.task, f"{self.task}/{self.subset}")

    def to_json(self) -> dict:
        return {**asdict(self), "labels": list(self.labels)}

    def item(self) -> dict:
        return {"subject_id": self.subject_id, "hadm_id": self.hadm_id, "prediction_time": self.prediction_time,
                "task": self.task, "label": [{"name": n} for n in self.labels]}


def subsets(items: list[dict]) -> list[str]:
    """common / rare per sample: the mean over its labels of 1 / (the label's frequency in the task), against the
    mean of that over the task's samples (the original's label_wise_sample.py)."""
    counts: dict[str, int] = defaultdict(int)
    for it in items:
        for name in {x["name"] for x in it["label"]}:
            counts[name] += 1
    weights = [float(np.mean([1 / counts[x["name"]] for x in it["label"]])) if it["label"] else 0.0 for it in items]
    mean = float(np.mean(weights)) if weights else 0.0
    return ["common" if w <= mean else "rare" for w in weights]


def load_samples(task_dir: Path, tasks: list[str]) -> list[Sample]:
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
        for it, subset in zip(items, subsets(items)):
            out.append(Sample(task, int(it["subject_id"]), it.get("hadm_id"), str(it["prediction_time"]),
                              tuple(dict.fromkeys(str(x["name"]) for x in it["label"] if x.get("name"))), subset))
    return out


@functools.lru_cache(maxsize=1)
def _embedder():
    from ...retrieval.embedder import Embedder

    return Embedder()


@functools.lru_cache(maxsize=32)
def _candidate_vectors(table: str, names: tuple[str, ...]):
    return _embedder().encode(list(names))


async def embed_scores(table: str, names: list[str], query: str) -> list[float]:
    """Cosine similarity of the query to each candidate (the local model, in this process; vectors cached)."""
    def work():
        vectors = _candidate_vectors(table, tuple(names))
        return (vectors @ _embedder().encode([query])[0]).tolist()
    return await asyncio.to_thread(work)


class AgentEhrBenchmark(Benchmark):
    name = "agentehr"
    agents = ("reference", "react", "resum", "retrosum")
    users = ("none",)
    headline_metric = "F1"

    def check(self) -> None:
        o = self.options
        chosen = list(o.get("tasks") or [])
        if not chosen or not set(chosen) <= set(TASKS):
            raise ConfigurationError(f"benchmark.tasks={chosen}: choose among {list(TASKS)}")
        if not Path(str(o.get("task_dir") or "")).is_dir():
            raise ConfigurationError(f"benchmark.task_dir={o.get('task_dir')!r}: no such folder (the project's samples "
                                     "are in data/tasks/agentehr)")
        check_world(Path(o["task_dir"]), o.get("world") or {}, "ehrbench.benchmarks.agentehr.authoring")

    def tasks(self) -> list[Sample]:
        return load_samples(Path(self.options["task_dir"]), list(self.options["tasks"]))

    def resources(self) -> Resources:
        return Resources(databases=(DB,))

    def resolve_tasks(self, tasks: list[Sample], paths: dict[str, str]) -> list[Sample]:
        """The per-patient files and the candidate database, next to the run's MIMIC-IV file (built once)."""
        from dataclasses import replace

        from .patient_db import split_patients
        from .tasks import write_candidates

        source = Path(paths[DB])
        folder = split_patients(source, source.parent)
        if not (folder / "candidates.db").exists():
            write_candidates(source, folder / "candidates.db")
        missing = [t.key for t in tasks if not (folder / f"patient_{t.subject_id}.db").exists()]
        if missing:
            raise TaskFileError(f"{self.options['task_dir']}: {len(missing)} samples name patients this database does "
                                f"not have (e.g. {missing[0]}); write samples for this world (authoring)")
        return [replace(t, folder=str(folder)) for t in tasks]

    def episode(self, task: Sample, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        from .knowledge import Knowledge
        from .tools import AgentEhrTools

        folder = Path(task.folder)
        tools = AgentEhrTools(folder / f"patient_{task.subject_id}.db", folder / "reference.db",
                              folder / "candidates.db", task.subject_id, task.prediction_time, embed_scores,
                              Knowledge())
        if settings.agent == "reference":
            agent = ReferenceAgent({**task.item(), "label": [{"name": n} for n in task.labels]},
                                   ScriptedCall("agent", meter, settings.agent_latency_s))
        elif settings.agent == "react":
            agent = ReActAgent(settings.model_for("agent", meter), task.subject_id, task.prediction_time,
                               float(self.options.get("temperature", 0.0)), seed,
                               int(self.options.get("max_turns", 100)))
        else:
            agent = SummarizingAgent(settings.model_for("agent", meter), settings.model_for("summarizer", meter),
                                     settings.agent, task.task, task.subject_id, task.prediction_time,
                                     float(self.options.get("temperature", 0.0)), seed,
                                     int(self.options.get("max_turns", 100)),
                                     int(self.options.get("summary_every", 10)))

        async def scored(record: TrialRecord) -> Score:
            tools.close()
            predicted = parse_prediction(record.messages[-1]["content"] if record.messages else "")
            result = f1(predicted, list(task.labels))
            calls = [(m["tool_call"]["name"], m["tool_call"]["arguments"] or {}, "") for m in record.messages
                     if m.get("tool_call")]
            observations = [m["content"] or "" for m in record.messages if m["role"] == "tool"]
            calls = [(n, a, o) for (n, a, _), o in zip(calls, observations + [""] * len(calls))]
            errors = interaction_errors(calls, predicted)
            return Score(result["f1"], {**result, **{f"error/{k}": float(v) for k, v in errors.items()},
                                        "predicted": float(len(predicted))})
        return Episode(tools, agent, scored, opening=first_message(task.task, task.subject_id, task.prediction_time))

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
                tokens[by_key[r.task_key].task].append(sum(u.get("input_tokens", 0) for u in r.usage.values()))
        groups: dict[str, list[float]] = defaultdict(list)
        for key, scores in per_sample.items():
            t = by_key[key]
            mean = float(np.mean(scores))
            for g in (t.task, f"{t.task}/{t.subset}", t.subset):
                groups[g].append(mean)
        metrics: dict[str, float] = {}
        table = Table(title=f"AgentEHR set F1 over {k} trials per sample")
        for col in ("group", "samples", "F1", f"Best@{k}"):
            table.add_column(col, justify="left" if col == "group" else "right")
        task_means = []
        for g in sorted(groups, key=lambda g: (g.count("/"), g)):
            values = groups[g]
            metrics[f"{g}/F1"] = float(np.mean(values))
            keys = [key for key in per_sample if g in by_key[key].groups or by_key[key].subset == g]
            best = float(np.mean([best_at_k(per_sample[key], k) for key in keys]))
            metrics[f"{g}/Best_at_{k}"] = best
            if g in TASKS:
                task_means.append(metrics[f"{g}/F1"])
            table.add_row(g, str(len(values)), f"{metrics[f'{g}/F1']:.4f}", f"{best:.4f}")
        if task_means:
            metrics["F1"] = float(np.mean(task_means))            # the paper's Avg: mean over the tasks
        curve = [float(np.mean([best_at_k(s, i) for s in per_sample.values()])) for i in range(1, k + 1)] \
            if per_sample else []
        n = max(1, sum(len(s) for s in per_sample.values()))
        metrics.update({f"errors/{e}": 100 * errors[e] / n for e in ERRORS})
        metrics.update({f"{t}/input_tokens_per_trial": float(np.mean(v)) for t, v in tokens.items()})
        console = Console(file=sys.stdout, width=100)
        with console.capture() as cap:
            console.print(table)
            console.print("interaction errors (% of trials): " + ", ".join(
                f"{e} {metrics[f'errors/{e}']:.1f}" for e in ERRORS))
        out_dir.mkdir(parents=True, exist_ok=True)
        by_task = {t: {s: 100 * metrics.get(f"{t}/{s}/F1", 0.0) for s in ("common", "rare")}
                   for t in TASKS if f"{t}/F1" in metrics}
        files = [grouped_bars(by_task, out_dir / "f1_by_task.png", "AgentEHR F1 by task and subset", "F1 x 100")]
        if curve:
            files.append(pass_k_curves({"all": {"Pass_at_k": [100 * c for c in curve]}}, list(range(1, k + 1)),
                                       out_dir / "best_at_k.png", "Best@K (x100) against K"))
        headline = {"F1": metrics.get("F1", 0.0)}
        return Report(cap.get(), metrics, headline=headline, curves={"Best_at_K": curve}, files=files)

    def prompts(self) -> dict[str, str]:
        p = prompts()
        return {"agentehr.base_instruction": p["base_instruction"],
                "agentehr.termination": p["termination_instruction"],
                "agentehr.summary_first": p["summary_first"], "agentehr.summary_next": p["summary_next"],
                **{f"agentehr.{t}": p["tasks"][t] for t in self.options.get("tasks", TASKS)}}
