"""PhysAssistBench behind the benchmark seam: four-turn physician sessions over FHIR-shaped tools on the world's
MIMIC-IV rendering, with a simulated patient, graded per turn by rubric.

A trial is one session. The physician (the run's user) asks the four questions; the agent answers each with the
18 tools; the patient it interviews is replayed from stored answers (`user=scripted`) or an LLM (`user=` a model:
the live patient, in the UserSimulator actors with the physician). The patients' records live in
`benchmark.record_shards` ServiceShard actors (`records`), routed by patient. Scoring grades each turn (`grading`):
the original's LLM judge (`grader=auto`: gpt-5-mini, as its code runs it) decides the reward whenever a model is
evaluated; the rule grader always runs beside it, and alone (the reference, or `benchmark.grading=rules`) its
figures carry `rule_` names, never the paper's. A turn the judge cannot decide leaves the aggregates, as the
original drops a turn whose judgement failed.

Contract (`benchmark.contract`, docs/benchmarks/physassist.md): original, the authors' code: every write created as
asked, 8 rounds of any number of parallel calls, an EHR search without `subject_id` refused as their signature check
refuses it; ehrbench's opt-ins: `write_validation` (FHIR R4B, a refused write shows the model what to fix and is
hidden from the graders) and `call_cap` (16 calls a turn, the paper's text).

Metrics (`report`): per-turn rubric score r_t, session score (the mean of its turns), mRS (the mean session score x
100) overall, by tier, scenario, turn type, implicitness subtype and tool source; Pass@Turn and Pass@Session at 0.60
and 0.75; rule-judge agreement when both ran.
"""
from __future__ import annotations

import functools
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import yaml

from ...benchmark import (Benchmark, Episode, Hosts, Report, Resources, TaskFileError, TaskScores, TrialSettings,
                         check_world)
from ...llm.base import ConfigurationError, Sampling
from ...llm.scripted import ScriptedCall
from ...llm.usage import UsageMeter
from ...trial import Score, TrialRecord
from .agent import PhysAssistAgent, ReferenceAgent
from .scoring import Judge, rule_grade, turn_score, turn_work
from .iirs import IirsJudge, turn_metrics
from .patient import (LlmPatient, OriginalReplay, PatientFacts, ReplayedPatient, SessionPeople, literacy_for,
                      stored_replies)
from .failures import TABLE as FAILURES
from .sampling import TABLE as SAMPLING
from .tasks import SCENARIOS, Session, load_sessions

DB = "mimic_iv"
THRESHOLDS = (0.60, 0.75)
LITERACY_OPTIONS = ("high", "medium", "low", "persona")


@functools.lru_cache(maxsize=1)
def prompts() -> dict[str, str]:
    return yaml.safe_load((Path(__file__).parent / "data" / "prompts.yaml").read_text())


@functools.lru_cache(maxsize=4)
def local_records(folder: str):
    """The records of a run without Ray actors (tests, in-process runs): one host per folder and process."""
    from ...runtime.hosts import InProcess
    from .tools import FhirRecords

    return InProcess(FhirRecords(folder))


class PhysAssistBenchmark(Benchmark):
    name = "physassist"
    agents = ("reference", "physassist")
    users = ("scripted", "llm")
    model_roles = ("agent", "user", "grader")
    sampling_table = SAMPLING
    failure_table = FAILURES
    headline_metric = "mRS"

    @property
    def default_grader(self) -> str | None:
        """The code's judge for the sessions (run_eval.py; the paper names GPT-5.4-mini); the MedAgentBench set is
        graded by its refsol rules, as in the original."""
        return None if self.medagent else "gpt-5-mini"

    def check(self) -> None:
        o = self.options
        if not Path(str(o.get("task_dir") or "")).is_dir():
            raise ConfigurationError(f"benchmark.task_dir={o.get('task_dir')!r}: no such folder (the project's sessions "
                                     "are in data/tasks/physassist; the original's data folder holds the same files)")
        chosen = list(o.get("scenarios") or [])
        if not chosen or not set(chosen) <= set(SCENARIOS):
            raise ConfigurationError(f"benchmark.scenarios={chosen}: choose among {list(SCENARIOS)}")
        if o.get("task_set", "sessions") not in ("sessions", "medagent"):
            raise ConfigurationError(f"benchmark.task_set={o.get('task_set')!r}: sessions (the four-turn sessions) or "
                                     "medagent (the MedAgentBench-style tasks: benchmark=physassist_medagent)")
        if o.get("patient_literacy", "high") not in LITERACY_OPTIONS:
            raise ConfigurationError(f"benchmark.patient_literacy={o.get('patient_literacy')!r}: one of "
                                     f"{list(LITERACY_OPTIONS)} (the original replays high)")
        if not isinstance(o.get("explicit", False), bool):
            raise ConfigurationError(f"benchmark.explicit={o.get('explicit')!r}: true (ask the explicit paraphrases: "
                                     "the ablation) or false")
        shards = o.get("record_shards", 4)
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ConfigurationError(f"benchmark.record_shards={shards!r}: an integer >= 1 (ServiceShard actors "
                                     "holding the patients' records)")
        if o.get("contract", "original") not in ("original", "ehrbench"):
            raise ConfigurationError(f"benchmark.contract={o.get('contract')!r}: original (the authors' code, the "
                                     "default) or ehrbench (validated writes, the 16-call cap)")
        if o.get("grading", "judge") not in ("judge", "rules"):
            raise ConfigurationError(f"benchmark.grading={o.get('grading')!r}: judge (the paper's, grader=auto) or "
                                     "rules (ehrbench's rule grader alone, logged as rule_mRS ...)")
        if o.get("patient_replay") not in (None, "original", "topic"):
            raise ConfigurationError(f"benchmark.patient_replay={o.get('patient_replay')!r}: null (the contract's), "
                                     "original (stored replies per tool, in order) or topic (ehrbench's)")
        for name in ("write_validation",):
            if o.get(name) is not None and not isinstance(o.get(name), bool):
                raise ConfigurationError(f"benchmark.{name}={o.get(name)!r}: true, false or null (the contract's)")
        cap = o.get("call_cap")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigurationError(f"benchmark.call_cap={cap!r}: null (the original: 8 rounds of any number of "
                                     "calls) or an integer >= 1 (ehrbench's contract: 16)")
        check_world(Path(o["task_dir"]), o.get("world") or {}, "ehrbench.benchmarks.physassist.authoring")

    def _opt(self, name: str, ehrbench_value, original_value=None):
        """An opt-in's value: as set, else the contract's (ehrbench's improvements on under contract=ehrbench)."""
        chosen = self.options.get(name)
        if chosen is not None:
            return chosen
        return ehrbench_value if self.options.get("contract", "original") == "ehrbench" else original_value

    def write_validation(self) -> bool:
        return bool(self._opt("write_validation", True, False))

    def call_cap(self) -> int | None:
        return self._opt("call_cap", 16, None)

    def patient_replay(self) -> str:
        return str(self._opt("patient_replay", "topic", "original"))

    def contract(self) -> tuple[str, list[str]]:
        """The contract and what departs from the authors' code in this run."""
        departures = []
        if self.write_validation():
            departures.append("write_validation=true (writes validated as FHIR R4B; a refused write is hidden from "
                              "the graders)")
        if self.call_cap() is not None:
            departures.append(f"call_cap={self.call_cap()} (tool calls per turn capped; the code allows 8 rounds of "
                              "any number)")
        if self.patient_replay() != "original":
            departures.append("patient_replay=topic (the patient answers what is asked, by topic; the original "
                              "replays stored replies per tool in order)")
        if self.options.get("grading", "judge") == "rules":
            departures.append("grading=rules (no LLM judge: rule_mRS, rule_pass_*)")
        return self.options.get("contract", "original"), departures

    def check_grading(self, agent: str, graded: bool) -> None:
        """A model is scored by the original's judge: a run without one must say `benchmark.grading=rules`."""
        if agent != "reference" and not graded and not self.medagent and \
                self.options.get("grading", "judge") != "rules":
            raise ConfigurationError(
                "PhysAssistBench scores every turn with an LLM judge (the code's: gpt-5-mini, grader=gpt-5-mini, the "
                "default with grader=auto; it needs OPENAI_API_KEY); grader=none would score a model by rules alone. "
                "Name a grader (grader=gpt-5-mini, grader=gemini-2.5-flash ...), or add benchmark.grading=rules for "
                "the rule grader's figures, logged as rule_mRS / rule_pass_*")

    @property
    def medagent(self) -> bool:
        return self.options.get("task_set", "sessions") == "medagent"

    def tasks(self) -> list:
        if self.medagent:
            from .medagent import load_medagent

            return load_medagent(Path(self.options["task_dir"]) / "medagent.json")
        return load_sessions(Path(self.options["task_dir"]), list(self.options["scenarios"]))

    def resources(self) -> Resources:
        return Resources(databases=(DB,), services={"records": int(self.options.get("record_shards", 4))})

    def service(self, name: str, shard: int, shards: int, paths: dict[str, str]):
        from ..agentehr.benchmark import patient_folders
        from .tools import FhirRecords

        if name != "records":
            return super().service(name, shard, shards, paths)
        return FhirRecords(patient_folders(paths)[DB])

    def resolve_tasks(self, tasks: list[Session], paths: dict[str, str]) -> list[Session]:
        """The per-patient files next to the run's MIMIC-IV file (built once); every session's patient must be there."""
        from dataclasses import replace

        from ..agentehr.benchmark import patient_folders

        folder = patient_folders(paths)[DB]
        missing = [s.key for s in tasks if s.subject_id and not (folder / f"patient_{s.subject_id}.db").exists()]
        if missing:
            raise TaskFileError(f"{self.options['task_dir']}: {len(missing)} sessions name patients this database does "
                                f"not have (e.g. {missing[0]}); write sessions for this world (authoring), or give "
                                "your own MIMIC-IV with data.mimic_iv.path")
        return [replace(s, folder=str(folder)) for s in tasks]

    def _sampling(self, role: str, model: dict | None) -> Sampling:
        """The table's parameters; `contract=ehrbench` seeds the agent's and the patient's calls."""
        params = self.sampling(role, model)
        return replace(params, seed="trial") if self.options.get("contract", "original") == "ehrbench" else params

    def episode(self, task: Session, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        from .tools import SessionTools

        o = self.options
        records = hosts.services["records"].for_patient(task.subject_id) if "records" in hosts.services \
            else local_records(task.folder)
        if self.medagent:
            return medagent_episode(task, records, settings, meter, seed)
        tools = SessionTools(records, task.subject_id, task.current_date, task.session_id, self.write_validation(),
                             self.contract()[0] == "original")
        if settings.agent == "reference":
            agent = ReferenceAgent(task, ScriptedCall("agent", meter, settings.agent_latency_s))
        else:
            agent = PhysAssistAgent(settings.model_for("agent", meter), task, prompts(),
                                    self._sampling("agent", settings.agent_model), seed, self.call_cap())
        grading = self.sampling("grader", settings.grader_model)
        judge = Judge(settings.model_for("grader", meter), prompts(), grading) if settings.grader_model else None
        judge_name = f"physassist.judge:{settings.grader_model['name']}" if judge else ""
        iirs = IirsJudge(settings.model_for("grader", meter), prompts(), at_zero(grading)) if judge else None

        async def scored(record: TrialRecord) -> Score:
            return await grade_session(task, record, judge, judge_name, iirs)
        return Episode(tools, agent, scored)

    def user(self, task: Session, settings: TrialSettings, meter: UsageMeter, seed: int, mistakes: list[str]):
        if self.medagent:
            return None                          # one question; the FHIR server answers by tool
        facts = PatientFacts(task.patient_answers)
        live = LlmPatient(settings.model_for("user", meter), facts, task.persona, prompts(), seed,
                          self._sampling("user", settings.user_model)) if settings.user == "llm" else None
        literacy = literacy_for(task, self.options.get("patient_literacy", "high"))
        if self.patient_replay() == "original":
            patient = OriginalReplay(stored_replies(task, literacy), str(task.persona.get("health_literacy", "high")),
                                     live)
        else:
            patient = live or ReplayedPatient(facts, literacy)
        return SessionPeople(task, bool(self.options.get("explicit", False)), patient,
                             ScriptedCall("user", meter, settings.user_latency_s) if settings.user != "llm" else None)

    def trial_score(self, record: TrialRecord) -> float:
        """A session's score: the mean of its turns' rubric scores (0 on every turn of a session that ended early;
        a turn whose judgement failed left out), as the report's mRS counts it."""
        if self.medagent:
            return super().trial_score(record)
        turns = [v for key, v in record.score_parts.items() if key.startswith("T") and key.endswith("/r")]
        if record.termination != "user_stop":
            return 0.0
        scored = [v for v in turns if v is not None]
        return sum(scored) / len(scored) if scored else 0.0

    def task_scores(self, records: list[TrialRecord], tasks: list, k: int) -> TaskScores:
        scores = super().task_scores(records, tasks, k)
        if self.medagent:
            return scores
        judged = [r.score_parts["judged"] == 1.0 for r in records if r.valid and "judged" in r.score_parts]
        return TaskScores("mRS" if judged and all(judged) else "rule_mRS", scores.scores)

    def report(self, records: list[TrialRecord], tasks: list, k: int, out_dir: Path) -> Report:
        if self.medagent:
            return medagent_report(records, tasks, k, out_dir)
        return session_report(records, tasks, k, out_dir, bool(self.options.get("explicit", False)))

    def prompts(self) -> dict[str, str]:
        if self.medagent:
            from .medagent import PROMPT

            return {"physassist.medagent_prompt": PROMPT}
        return {f"physassist.{name}": text for name, text in prompts().items()}


def at_zero(grading: Sampling) -> Sampling:
    """The IIRS judge's parameters: the rubric judge's at temperature 0 (`iirs.py`), where it takes one."""
    return grading if grading.temperature is None else replace(grading, temperature=0.0)


def medagent_episode(task, records, settings: TrialSettings, meter: UsageMeter, seed: int) -> Episode:
    """A MedAgentBench-style task: its prompt opens, GET/POST by tool, FINISH ends; graded by `refsol`."""
    from .medagent import MedAgentAgent, MedAgentReference, MedAgentTools, prompt
    from .refsol import grade

    tools = MedAgentTools(records, task)
    agent = MedAgentReference(task, ScriptedCall("agent", meter, settings.agent_latency_s)) \
        if settings.agent == "reference" else MedAgentAgent(settings.model_for("agent", meter), seed)

    async def scored(record: TrialRecord) -> Score:
        passed, why = grade(task, record)
        record.assessments.append({"name": "refsol", "value": int(passed), "rationale": why, "source_type": "CODE",
                                   "source_id": f"ehrbench.physassist.refsol.{task.category}"})
        return Score(float(passed), {"passed": float(passed), "posts": float(len(tools.posts))})
    return Episode(tools, agent, scored, opening=prompt(task))


def medagent_report(records: list[TrialRecord], tasks: list, k: int, out_dir: Path) -> Report:
    """Success rate overall, on query and action tasks, and by category (MedAgentBench's table)."""
    from rich.console import Console
    from rich.table import Table

    from ...tracking.plots import category_bars

    by_key = {t.key: t for t in tasks}
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.valid and r.task_key in by_key:
            t = by_key[r.task_key]
            for g in ("all", *t.groups):
                groups[g].append(r.reward or 0.0)
    order = ["all", "query", "action"] + sorted((g for g in groups if g.startswith("task")),
                                                key=lambda g: int(g[4:]))
    metrics = {("SR" if g == "all" else f"{g}/SR"): 100 * sum(groups[g]) / len(groups[g]) for g in order if g in groups}
    table = Table(title=f"MedAgentBench-style tasks over {k} trials per task (success rate, percent)")
    for col in ("group", "trials", "SR"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for g in order:
        if g in groups:
            table.add_row(g, str(len(groups[g])), f"{metrics['SR' if g == 'all' else f'{g}/SR']:.1f}")
    console = Console(file=sys.stdout, width=100)
    with console.capture() as cap:
        console.print(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    bars = {g: metrics[f"{g}/SR"] for g in order if g.startswith("task") and f"{g}/SR" in metrics}
    files = [category_bars(bars, out_dir / "sr_by_category.png", "Success rate by task category")] if bars else []
    headline = {m: metrics[m] for m in ("SR", "query/SR", "action/SR") if m in metrics}
    return Report(cap.get(), metrics, headline=headline, files=files)


async def grade_session(session: Session, record: TrialRecord, judge: Judge | None, judge_name: str,
                        iirs: IirsJudge | None = None) -> Score:
    """Every turn by the rule grader, and by the judge when there is one (which then decides r_t); each item an
    assessment with its rationale; the turn's IIRS components and tool-use rates (`iirs.py`)."""
    parts: dict = {}
    decided: list[float] = []
    same = both = 0
    for turn, work in zip(session.turns, turn_work(record.messages, len(session.turns))):
        rules = rule_grade(turn, work)
        rule_r = turn_score([d for d, _ in rules])
        judged, reasons = (await judge.grade(turn, work, session.transcript)) if judge else (None, [])
        judge_r = sum(judged) / len(judged) if judged else None
        r = judge_r if judge else rule_r
        tag = f"T{turn.index}"
        for name, value in (await turn_metrics(turn, work.question, work.answer, work.calls, session.transcript,
                                               session.raw, iirs)).items():
            parts[f"{tag}/iirs/{name}"] = value
        parts[f"{tag}/type"], parts[f"{tag}/subtype"], parts[f"{tag}/source"] = turn.kind, turn.subtype or "", \
            turn.tool_source
        for name, value in (("rule", rule_r), ("judge", judge_r), ("r", r)):
            if value is not None:
                parts[f"{tag}/{name}"] = value
        if judge and judged is None:
            parts[f"{tag}/judge_error"] = reasons[0][:500]
        if r is not None:
            decided.append(r)
        for j, (item, (ok, why)) in enumerate(zip(turn.items, rules)):
            meta = {"turn": turn.index, "type": turn.kind, "item": item}
            if ok is not None:
                record.assessments.append({"name": f"{tag}/item{j + 1}/rule", "value": int(ok), "rationale": why,
                                           "source_type": "CODE", "source_id": "ehrbench.physassist.rule_grader",
                                           "metadata": meta})
            if judged is not None:
                record.assessments.append({"name": f"{tag}/item{j + 1}/judge", "value": judged[j],
                                           "rationale": reasons[j], "source_type": "LLM_JUDGE",
                                           "source_id": judge_name, "metadata": meta})
                if ok is not None:
                    both += 1
                    same += int(ok) == judged[j]
    parts["turns_decided"] = float(len(decided))
    parts["judged"] = float(judge is not None)
    if both:
        parts["agreement/items"], parts["agreement/same"] = float(both), float(same)
    return Score(sum(decided) / len(decided) if decided else 0.0, parts)


def iirs_summary(records: list[TrialRecord], by_key: dict) -> dict[str, float]:
    """The original's entry-level means (compute_iirs_entry), then their mean over sessions: IIRS (with a judge),
    AA, FPTR, MTR, ER, AC, PAQ (over the sessions with an interview turn) (x100); turn accuracy (AA >= 0.5) and
    session accuracy (every turn correct)."""
    per_session: dict[str, list[float]] = defaultdict(list)
    correct_turns, correct_sessions, checked_turns, checked_sessions = [], [], [], []
    for r in records:
        if not r.valid or r.task_key not in by_key or "T0/iirs/ER" not in r.score_parts:
            continue
        turns = [t.index for t in by_key[r.task_key].turns]
        for name in ("IIRS", "AA", "FPTR", "MTR", "ER", "AC", "PAQ", "rule_IIRS"):
            values = [r.score_parts[f"T{i}/iirs/{name}"] for i in turns if f"T{i}/iirs/{name}" in r.score_parts]
            if values:
                per_session[name].append(sum(values) / len(values))
        correct = [r.score_parts[f"T{i}/iirs/correct"] for i in turns if f"T{i}/iirs/correct" in r.score_parts]
        if correct:
            correct_turns += correct
            correct_sessions.append(float(all(correct)))
        checked = [r.score_parts[f"T{i}/iirs/rule_correct"] for i in turns
                   if f"T{i}/iirs/rule_correct" in r.score_parts]
        if checked:
            checked_turns += checked
            checked_sessions.append(float(all(checked)))
    out = {f"{name}_mean": 100 * sum(v) / len(v) for name, v in per_session.items()}
    if correct_turns:
        out["turn_accuracy"] = 100 * sum(correct_turns) / len(correct_turns)
        out["session_accuracy"] = 100 * sum(correct_sessions) / len(correct_sessions)
    if checked_turns:                                   # the authors' rule checker (their --rule_based mode)
        out["rule_checker_turn_accuracy"] = 100 * sum(checked_turns) / len(checked_turns)
        out["rule_checker_session_accuracy"] = 100 * sum(checked_sessions) / len(checked_sessions)
    return out


def session_report(records: list[TrialRecord], tasks: list[Session], k: int, out_dir: Path,
                   explicit: bool) -> Report:
    """mRS, by tier, scenario, turn type, subtype and source; Pass@Turn and Pass@Session; judge agreement; plots."""
    from rich.console import Console
    from rich.table import Table

    from ...tracking.plots import category_bars, threshold_curve

    by_key = {s.key: s for s in tasks}
    sessions: list[tuple[Session, list[float]]] = []
    turns: dict[str, list[float]] = defaultdict(list)
    same = items = 0.0
    flags = []                        # figures no LLM judge decided are not the paper's: named rule_*
    for r in records:
        if not r.valid or r.task_key not in by_key:
            continue
        if "judged" in r.score_parts:
            flags.append(r.score_parts["judged"] == 1.0)
        s = by_key[r.task_key]
        scores = []
        ended_early = r.termination != "user_stop"          # a step or time limit, an agent error: 0 on every turn
        for t in s.turns:
            value = 0.0 if ended_early else r.score_parts.get(f"T{t.index}/r")
            if value is None:                                 # its judgement failed: left out, as the original
                continue
            scores.append(value)
            for g in (t.kind, f"subtype/{t.subtype or 'Explicit'}", f"source/{t.tool_source}"):
                turns[g].append(value)
        same, items = same + r.score_parts.get("agreement/same", 0.0), items + r.score_parts.get("agreement/items", 0.0)
        if scores:
            sessions.append((s, scores))
    metrics: dict[str, float] = {}
    groups: dict[str, list[list[float]]] = defaultdict(list)
    for s, scores in sessions:
        for g in ("all", f"L{s.tier}", s.scenario):
            groups[g].append(scores)
    judged = bool(flags) and all(flags)
    name = "" if judged else "rule_"
    table = Table(title=f"PhysAssistBench over {k} trials per session ({'explicit' if explicit else 'implicit'} "
                        "questions)" + ("" if judged else "; no LLM judge: the rule grader's figures, not the paper's"))
    for col in ("group", "sessions", "mRS", "@T.60", "@S.60", "@T.75", "@S.75"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for g in sorted(groups, key=lambda g: (g != "all", not g.startswith("L"), g)):
        values = groups[g]
        prefix = ("" if g == "all" else f"{g}/") + name
        metrics[f"{prefix}mRS"] = 100 * sum(sum(v) / len(v) for v in values) / len(values)
        flat = [x for v in values for x in v]
        for tau in THRESHOLDS:
            metrics[f"{prefix}pass_turn_{int(tau * 100)}"] = 100 * sum(x >= tau for x in flat) / len(flat)
            metrics[f"{prefix}pass_session_{int(tau * 100)}"] = 100 * sum(all(x >= tau for x in v)
                                                                         for v in values) / len(values)
        table.add_row(g, str(len(values)), *(f"{metrics[f'{prefix}{m}']:.1f}" for m in (
            "mRS", "pass_turn_60", "pass_session_60", "pass_turn_75", "pass_session_75")))
    for g, values in turns.items():
        metrics[f"turn_score/{g}"] = 100 * sum(values) / len(values)
    metrics["sessions_scored"] = float(len(sessions))
    metrics.update(iirs_summary(records, by_key))
    if items:
        metrics["judge_rule_agreement"] = 100 * same / items
    console = Console(file=sys.stdout, width=110)
    with console.capture() as cap:
        console.print(table)
        console.print("mean rubric score by turn type, subtype and source: " + ", ".join(
            f"{g} {metrics[f'turn_score/{g}']:.1f}" for g in sorted(turns)))
        if items:
            console.print(f"rule grader and LLM judge agree on {metrics['judge_rule_agreement']:.1f}% of "
                          f"{int(items)} items")
        shown = [f"{m} {metrics[m]:.1f}" for m in ("IIRS_mean", "AA_mean", "turn_accuracy", "session_accuracy",
                                                   "FPTR_mean", "MTR_mean", "ER_mean", "AC_mean", "PAQ_mean",
                                                   "rule_checker_turn_accuracy", "rule_IIRS_mean")
                 if m in metrics]
        if shown:
            console.print("implicit-information and tool-use metrics (x100): " + ", ".join(shown))
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    by_type = {t: metrics[f"turn_score/{t}"] for t in ("IL", "DG", "CR", "WU") if f"turn_score/{t}" in metrics}
    if by_type:
        files.append(category_bars(by_type, out_dir / "score_by_turn_type.png", "Rubric score by turn type",
                                   "mean r_t x 100"))
    if sessions:
        taus = [i / 20 for i in range(21)]
        curve = [100 * sum(all(x >= tau for x in v) for _, v in sessions) / len(sessions) for tau in taus]
        files.append(threshold_curve(taus, curve, out_dir / "pass_session_by_threshold.png",
                                     "Pass@Session against the threshold", "tau", "sessions passing (percent)"))
    headline = {m: metrics[m] for m in (f"{name}mRS", f"{name}pass_session_60", f"{name}pass_session_75")
                if m in metrics}
    return Report(cap.get(), metrics, headline=headline, files=files)
