"""How a failed model turn ends in PhysAssistBench, as its original ends it (qgpmztmf/PhysAssistBench 73b441d,
`eval_runner.py`, `run_eval.py`, `eval/rubric_eval.py`, `eval/iirs.py`, `phm/patient_agent_runtime.py`)."""
from __future__ import annotations

from ...failures import FailureTable, Row

TABLE = FailureTable((
    Row(("agent",), ("cut_with_text",), "the text as the turn's answer"),
    Row(("agent",), ("cut_off", "blocked", "refused_for_size", "bad_request"),
        "in a tool round: the round breaks to the final-answer nudge; in the nudge: cut off or blocked is an empty "
        "answer, asked again (3 nudges in all, then the answer is empty), refused is \"[Error generating final "
        "answer]\"; the session goes on"),
    Row(("agent",), ("empty",), "the turn's answer is \"[Error: ...]\"",
        "an HTTP 200 without choices is retried, then the trial re-run"),
    Row(("agent",), ("malformed",), "run with empty arguments, the raw string echoed back",
        "the error is shown on the round's first call, later calls run with empty arguments"),
    Row(("agent",), ("parallel",), "every call run, in order, in one assistant message",
        "one message per call, results interleaved (the Gemini client keeps the first call only)"),
    Row(("grader",), ("cut_off", "blocked", "refused_for_size", "bad_request"),
        "the rubric judge drops the turn (no readable verdict); the IIRS judge scores 0"),
    Row(("user",), ("cut_off", "blocked", "refused_for_size", "bad_request"),
        "the patient's fixed fallback reply", "\"I'm not sure, doctor. ...\""),
), note="A patient's empty reply passes as it came. Rate limits, server errors and timeouts: the original's clients "
        "retry (the SDK twice, the judges three times in all), then the agent's turn answers \"[Error generating "
        "final answer]\" and a judge drops the turn; ehrbench retries with backoff, then re-runs the trial as "
        "infrastructure.")
