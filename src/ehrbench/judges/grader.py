"""A model-backed grader: one decision about an agent's work, with a score, a rationale and its own usage and cost.

Benchmarks graded by rubric (ClinSQL's rubric trees, PhysAssistBench's per-turn items) ask a grader one question
per rubric item. The decision becomes an MLflow assessment on the trial's trace (`TrialRecord.assessments`, source
LLM_JUDGE) and its tokens are metered under the `grader` role. The grader answers JSON {"score": 0..1,
"rationale": "..."}; an answer that cannot be read scores 0 with the raw text kept as rationale.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..llm.base import ChatRequest
from ..llm.usage import MeteredModel
from ..trial import Message
from .parsing import parse_json_object


@dataclass
class Judgement:
    name: str
    score: float
    rationale: str

    def assessment(self, grader: str) -> dict:
        return {"name": self.name, "value": self.score, "source_type": "LLM_JUDGE", "source_id": grader,
                "rationale": self.rationale}


class Grader:
    def __init__(self, model: MeteredModel, system_prompt: str = "You are a strict grader. Answer only with JSON "
                 "{\"score\": a number from 0 to 1, \"rationale\": one sentence}."):
        self.model, self.system = model, system_prompt

    async def grade(self, name: str, prompt: str) -> Judgement:
        text = (await self.model.complete(ChatRequest([Message("user", prompt)], system=self.system,
                                                      temperature=0.0))).text
        verdict = parse_json_object(text) or {}
        try:
            score = min(1.0, max(0.0, float(verdict.get("score"))))
        except (TypeError, ValueError):
            return Judgement(name, 0.0, f"unreadable grader answer: {(text or '')[:1000]}")
        return Judgement(name, score, str(verdict.get("rationale", ""))[:4000])
