"""The simulation validator (paper A.4, prompts Tables 6-7): did the simulated user follow its rules?

It reads the finished conversation and the gold SQL and answers in JSON {explanation, evidence, broken_rule,
result}. With n samples any `user_error` wins. It is skipped (counts as no_error) when the agent hit the step limit
or sent an empty message, as the original does. An unparsable verdict is treated as `no_error` with the raw text
kept, so a validator glitch cannot discard an agent's trial.
"""
from __future__ import annotations

from ..benchmarks.ehrchatqa.prompts import prompts, user_system_prompt
from ..llm.base import ChatRequest
from ..llm.usage import MeteredModel
from ..trial import Message, Termination, TrialRecord
from .llm_user import parse_json_object

USER_ERROR, NO_ERROR = "user_error", "no_error"


def conversation_text(record: TrialRecord) -> str:
    lines = []
    for m in record.messages:
        if m["role"] == "user":
            lines.append(f"[USER]: {m['content']}")
        elif m["role"] == "assistant" and not m.get("tool_call"):
            lines.append(f"[DB AGENT]: {m['content']}")
    return "\n".join(lines)


class SimulationValidator:
    def __init__(self, model: MeteredModel, samples: int = 1):
        self.model, self.samples = model, samples

    async def judge(self, instruction: str, gold_sql: str, record: TrialRecord) -> dict:
        if record.termination == Termination.MAX_STEPS.value:
            return {"result": NO_ERROR, "skipped": "agent reached the step limit"}
        if any(m["role"] == "assistant" and not m.get("tool_call") and not (m.get("content") or "").strip()
               for m in record.messages):
            return {"result": NO_ERROR, "skipped": "agent sent an empty message"}
        p = prompts()
        prompt = p["validator_input"].format(user_system_prompt=user_system_prompt(instruction),
                                             conversation=conversation_text(record), gold_sql=gold_sql)
        verdicts = []
        for _ in range(self.samples):
            text = (await self.model.complete(ChatRequest([Message("user", prompt)], system=p["validator_system"],
                                                          temperature=0.0))).text
            verdict = parse_json_object(text) or {"result": NO_ERROR, "unparsed": (text or "")[:2000]}
            verdicts.append(verdict)
            if verdict.get("result") == USER_ERROR:
                return verdict
        return verdicts[0]
