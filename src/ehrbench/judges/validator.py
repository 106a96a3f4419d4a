"""The simulation validator (EHR-ChatQA paper A.4): did the simulated user follow its rules?

A model-backed judge of the *simulation*, not of the agent: it reads the finished conversation (with whatever the
benchmark's prompt adds, such as the gold SQL) and answers in JSON {explanation, evidence, broken_rule, result}.
With n samples any `user_error` wins. It is skipped (counts as no_error) when the agent hit the step limit or sent
an empty message, as the original does. An unparsable verdict is treated as `no_error` with the raw text kept, so a
validator glitch cannot discard an agent's trial. The benchmark supplies the prompts; the verdict becomes an MLflow
assessment (`simulation_validity`) and a rejected attempt is re-run (`episode.run_task_trial`).
"""
from __future__ import annotations

from ..episode import USER_ERROR
from ..llm.base import ChatRequest, OutputSchema
from ..llm.usage import MeteredModel
from ..trial import Message, Termination, TrialRecord
from .parsing import parse_json_object

NO_ERROR = "no_error"
VALIDATION_OUTPUT = OutputSchema("ValidationOutputFormat", ("explanation", "evidence", "broken_rule", "result"))


class SimulationValidator:
    def __init__(self, model: MeteredModel, system_prompt: str, samples: int = 1, schema: OutputSchema | None = None):
        self.model, self.system, self.samples, self.schema = model, system_prompt, samples, schema

    async def judge(self, prompt: str, record: TrialRecord) -> dict:
        """`prompt`: the benchmark's validator input, already filled with the conversation and the task."""
        if record.termination == Termination.MAX_STEPS.value:
            return {"result": NO_ERROR, "skipped": "agent reached the step limit"}
        if record.termination == Termination.TIME_LIMIT.value:       # the original scores a timeout unvalidated
            return {"result": NO_ERROR, "skipped": "agent reached the time limit"}
        if any(m["role"] == "assistant" and not m.get("tool_call") and not (m.get("content") or "").strip()
               for m in record.messages):
            return {"result": NO_ERROR, "skipped": "agent sent an empty message"}
        verdicts = []
        for _ in range(self.samples):
            text = (await self.model.complete(ChatRequest([Message("user", prompt)], system=self.system,
                                                          temperature=0.0, response_schema=self.schema))).text
            verdict = parse_json_object(text) or {"result": NO_ERROR, "unparsed": (text or "")[:2000]}
            verdicts.append(verdict)
            if verdict.get("result") == USER_ERROR:
                return verdict
        return verdicts[0]
