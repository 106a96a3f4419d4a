"""EHR-ChatQA as a benchmark: its pre-indexed columns, how a trial is assembled, and how it is scored."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ...agents.reference import ReferenceAgent
from ...agents.tool_calling import ToolCallingAgent
from ...llm.registry import build_model, price_of
from ...llm.scripted import ScriptedCall
from ...llm.usage import MeteredModel, UsageMeter
from ...trial import Limits, Termination, TrialRecord, User, run_trial
from ...users.llm_user import LLMUser
from ...users.scripted import ScriptedUser
from ...users.validator import USER_ERROR, SimulationValidator
from .prompts import agent_system_prompt
from .scorer import adapt_reward, incre_reward
from .tasks import Task
from .tools import TOOL_SCHEMAS, DatabaseLike, IndexLike, ToolSuite
from .web_search import WebSearch

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


@dataclass(frozen=True)
class TrialSettings:
    """Everything a trial needs besides the task, as plain data so it travels to Ray workers."""
    agent: str = "reference"                  # reference | tool_calling
    user: str = "scripted"                    # scripted | llm
    agent_latency_s: float = 0.0              # the scripted model's latency per agent step (the throughput bench)
    user_latency_s: float = 0.0               # the scripted user's latency per turn
    agent_model: dict | None = None           # a conf/model mapping (tool_calling)
    user_model: dict | None = None            # a conf/model mapping (llm user)
    user_strategy: str = "reflection"         # plain | verify | reflection
    user_temperature: float = 1.0
    verifier_model: dict | None = None        # verifier and reflection calls (default: the user's model)
    validator_model: dict | None = None       # None: no simulation validator
    validator_samples: int = 1
    max_reruns: int = 10                      # validator re-runs per trial
    limits: Limits = Limits()
    sql_timeout_s: float = 60.0
    web_search: str = "vocabulary"

    def __post_init__(self):
        from .web_search import BACKENDS

        if self.agent not in AGENTS:
            raise ValueError(f"agent={self.agent!r} is not available for ehrchatqa; choose one of {sorted(AGENTS)}")
        if self.user not in USERS:
            raise ValueError(f"user={self.user!r} is not available for ehrchatqa; choose one of {sorted(USERS)}")
        if self.web_search not in BACKENDS:
            raise ValueError(f"benchmark.web_search={self.web_search!r} is unknown; choose one of {sorted(BACKENDS)}")

    def models(self) -> dict[str, dict]:
        """The model configs in use, by field (`agent_model`, ...): the start-up key check, the rate limiters."""
        return {name: cfg for name in ("agent_model", "user_model", "verifier_model", "validator_model")
                if (cfg := getattr(self, name))}


def _metered(cfg: dict, role: str, meter: UsageMeter) -> MeteredModel:
    return MeteredModel(build_model(cfg), role, meter, price_of(cfg))


def _reference_agent(task, s, meter, seed):
    return ReferenceAgent(task, INDEXED_COLUMNS[task.db_id], ScriptedCall("agent", meter, s.agent_latency_s))


def _tool_calling_agent(task, s, meter, seed):
    return ToolCallingAgent(_metered(s.agent_model, "agent", meter), agent_system_prompt(task.db_id, task.task_type),
                            TOOL_SCHEMAS, temperature=0.0, seed=seed)


def _scripted_user(task, s, meter, seed, mistakes):
    return ScriptedUser(task.instruction, seed, ScriptedCall("user", meter, s.user_latency_s))


def _llm_user(task, s, meter, seed, mistakes):
    checker = s.verifier_model or s.user_model
    return LLMUser(_metered(s.user_model, "user", meter), task.instruction, strategy=s.user_strategy,
                   verifier=_metered(checker, "verifier", meter), reflection=_metered(checker, "reflection", meter),
                   mistakes=mistakes, temperature=s.user_temperature, seed=seed)


AGENTS = {"reference": _reference_agent, "tool_calling": _tool_calling_agent}
USERS = {"scripted": _scripted_user, "llm": _llm_user}


class Conversation:
    """One simulated user's side of one trial attempt, with the usage its model calls cost.

    Opened here for in-process users; `runtime.actors.UserSimulatorActor` opens the same thing remotely and hands
    back a proxy with the same two methods, so the trial does not care where its user lives.
    """

    def __init__(self, task: Task, settings: "TrialSettings", seed: int, mistakes: list[str]):
        self.meter = UsageMeter()
        self.user: User = USERS[settings.user](task, settings, self.meter, seed, mistakes)

    async def reply(self, history) -> str:
        return await self.user.reply(history)

    async def close(self) -> UsageMeter:
        return self.meter


class LocalUsers:
    async def open(self, task: Task, settings: "TrialSettings", seed: int, mistakes: list[str]) -> Conversation:
        return Conversation(task, settings, seed, mistakes)


def trial_seed(task: Task, trial: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{task.key}#{trial}".encode()).digest()[:4], "big")


async def score(task: Task, record: TrialRecord, db: DatabaseLike, sql_timeout_s: float = 60.0) -> float:
    if task.task_type == "incre":
        async def rows(sql: str) -> list[tuple]:
            return (await db.execute(sql, timeout_s=sql_timeout_s, keep=100)).rows
        return await incre_reward(record.sql_queries(), task.gold_answer, rows)
    return adapt_reward(record.agent_texts(), task.gold_answer)


async def run_task_trial(task: Task, trial: int, db: DatabaseLike, index: IndexLike, web: WebSearch,
                         settings: TrialSettings = TrialSettings(), users=None) -> list[TrialRecord]:
    """One trial, re-run while the simulation validator finds user errors (up to `max_reruns` times).

    Returns every attempt: rejected ones (reward None, termination `rejected_by_validator`) and the last one.
    Each re-run's user sees the validator's explanations so far as "previous user mistakes". `users` opens the
    simulated user's side (default: in this process; `runtime.actors.RemoteUsers` for UserSimulator actors).
    """
    users = users or LocalUsers()
    indexed = INDEXED_COLUMNS[task.db_id]
    seed = trial_seed(task, trial)
    mistakes: list[str] = []
    records: list[TrialRecord] = []
    for rerun in range(settings.max_reruns + 1):
        meter = UsageMeter()
        tools = ToolSuite(task.db_id, db, index, web, indexed, sql_timeout_s=settings.sql_timeout_s)
        agent = AGENTS[settings.agent](task, settings, meter, seed)
        user = await users.open(task, settings, seed + rerun, mistakes)
        try:
            record = await run_trial(task.key, trial, agent, user, tools,
                                     lambda r: score(task, r, db, settings.sql_timeout_s), settings.limits)
        finally:
            meter.merge(await user.close())
        record.rerun = rerun
        records.append(record)
        if settings.validator_model and record.valid:
            validator = SimulationValidator(_metered(settings.validator_model, "validator", meter),
                                            settings.validator_samples)
            record.validation = await validator.judge(task.instruction, task.gold_sql, record)
        record.usage = meter.by_role
        record.model_calls = [{**c, "t": round(c["t"] - record.started_at, 4)} for c in meter.calls]
        if record.validation and record.validation.get("result") == USER_ERROR:
            record.termination, record.reward = Termination.REJECTED.value, None
            mistakes.append(str(record.validation.get("explanation", "")) or "the user broke a rule")
            continue
        break
    return records
