"""The simulation validator (EHR-ChatQA paper A.4): did the simulated user follow its rules?

A model-backed judge of the *simulation*, not of the agent: it reads the finished conversation (with whatever the
benchmark's prompt adds, such as the gold SQL) and answers in JSON {explanation, evidence, broken_rule, result}.
With n samples any `user_error` wins. It is skipped (counts as no_error) when the agent used all its steps, ran out
of time or sent a message with no text at all (a blocked or cut-off turn: the original's `content is None`; an empty string,
as an overflow leaves, is validated), as the original does. A verdict that is not JSON with result `user_error` or
`no_error` is an infrastructure error: the trial is run again, never scored on it. The benchmark supplies the prompts; the verdict becomes an MLflow
assessment (`simulation_validity`) and a rejected attempt is re-run (`episode.run_task_trial`).
"""
from __future__ import annotations

from ..llm.base import ChatRequest, ModelTurnError, OutputSchema, Sampling
from ..llm.usage import MeteredModel
from ..trial import InfrastructureError, Message, Termination, TrialRecord
from .parsing import parse_json_object

USER_ERROR = "user_error"    # the verdict that the simulated user broke its rules (its attempt is re-run)
NO_ERROR = "no_error"
VALIDATION_OUTPUT = OutputSchema("ValidationOutputFormat", ("explanation", "evidence", "broken_rule", "result"))


class SimulationValidator:
    def __init__(self, model: MeteredModel, system_prompt: str, samples: int = 1, schema: OutputSchema | None = None,
                 max_steps: int | None = None, sampling: Sampling = Sampling(temperature=0.0)):
        self.model, self.system, self.samples, self.schema = model, system_prompt, samples, schema
        self.max_steps, self.params = max_steps, sampling.request()

    async def judge(self, prompt: str, record: TrialRecord) -> dict:
        """`prompt`: the benchmark's validator input, already filled with the conversation and the task."""
        if record.termination == Termination.MAX_STEPS.value or (self.max_steps and record.steps >= self.max_steps):
            return {"result": NO_ERROR, "skipped": "agent reached the step limit"}
        if record.termination == Termination.TIME_LIMIT.value:       # the original scores a timeout unvalidated
            return {"result": NO_ERROR, "skipped": "agent reached the time limit"}
        if any(m["role"] == "assistant" and not m.get("tool_call") and m.get("content") is None for m in record.messages):
            # the original's shortcut reads `content is None` (a blocked turn); an empty string is validated
            return {"result": NO_ERROR, "skipped": "agent sent an empty message"}
        verdicts = []
        for _ in range(self.samples):
            try:
                text = (await self.model.complete(ChatRequest([Message("user", prompt)], system=self.system,
                                                              response_schema=self.schema, **self.params))).text
            except ModelTurnError as e:
                raise InfrastructureError(f"simulation validator gave no verdict: {e}", source="model") from None
            verdict = parse_json_object(text)
            if not verdict or verdict.get("result") not in (USER_ERROR, NO_ERROR):
                # the original cannot read such a verdict either (the trial goes unscored): run the trial again
                raise InfrastructureError(f"simulation validator gave no usable verdict: {(text or '')[:300]!r}",
                                          source="model")
            verdicts.append(verdict)
            if verdict.get("result") == USER_ERROR:
                return verdict
        return verdicts[0]
