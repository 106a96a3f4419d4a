"""EHR-ChatQA as a benchmark: its pre-indexed columns, how a trial is assembled, and how it is scored."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ...agents.reference import ReferenceAgent
from ...trial import Limits, TrialRecord, run_trial
from ...users.scripted import ScriptedUser
from .scorer import adapt_reward, incre_reward
from .tasks import Task
from .tools import DatabaseLike, IndexLike, ToolSuite
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

AGENTS = {"reference": lambda task, indexed, seed: ReferenceAgent(task, indexed)}
USERS = {"scripted": lambda task, seed: ScriptedUser(task.instruction, seed)}


@dataclass(frozen=True)
class TrialSettings:
    agent: str = "reference"
    user: str = "scripted"
    limits: Limits = Limits()
    sql_timeout_s: float = 60.0
    web_search: str = "vocabulary"

    def __post_init__(self):
        from .web_search import BACKENDS

        if self.web_search not in BACKENDS:
            raise ValueError(f"benchmark.web_search={self.web_search!r} is unknown; choose one of {sorted(BACKENDS)}")
        if self.agent not in AGENTS:
            raise ValueError(f"agent={self.agent!r} is not available for ehrchatqa; choose one of {sorted(AGENTS)}")
        if self.user not in USERS:
            raise ValueError(f"user={self.user!r} is not available for ehrchatqa; choose one of {sorted(USERS)}")


def trial_seed(task: Task, trial: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{task.key}#{trial}".encode()).digest()[:4], "big")


def score(task: Task, record: TrialRecord, db: DatabaseLike, sql_timeout_s: float = 60.0) -> float:
    if task.task_type == "incre":
        return incre_reward(record.sql_queries(), task.gold_answer,
                            lambda sql: db.execute(sql, timeout_s=sql_timeout_s, keep=100).rows)
    return adapt_reward(record.agent_texts(), task.gold_answer)


def run_task_trial(task: Task, trial: int, db: DatabaseLike, index: IndexLike, web: WebSearch,
                   settings: TrialSettings = TrialSettings()) -> TrialRecord:
    indexed = INDEXED_COLUMNS[task.db_id]
    tools = ToolSuite(task.db_id, db, index, web, indexed, sql_timeout_s=settings.sql_timeout_s)
    seed = trial_seed(task, trial)
    agent = AGENTS[settings.agent](task, indexed, seed)
    user = USERS[settings.user](task, seed)
    return run_trial(task.key, trial, agent, user, tools,
                     lambda record: score(task, record, db, settings.sql_timeout_s), settings.limits)
