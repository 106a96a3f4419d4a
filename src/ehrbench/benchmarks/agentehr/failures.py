"""How a failed model turn ends in AgentEHR, as its original ends it (BlueZeros/AgentEHR c03bd0cd,
`src/agentlite/llm/agent_llms.py` and the agents' loops)."""
from __future__ import annotations

from ...failures import FailureTable, Row

TABLE = FailureTable((
    Row(("agent",), ("cut_with_text", "cut_off", "blocked"),
        "a reply without a call: asked again with the same request (5 tries in all), then a think step with its "
        "text, the trial going on"),
    Row(("agent",), ("malformed",), "the exception's text as the observation", "`Error: malformed tool call: ...`"),
    Row(("agent",), ("parallel",), "every call kept in the history, the first one run", "only the first kept and run"),
    Row(("agent",), ("refused_for_size", "bad_request", "empty"), "the run crashes",
        "refused for its size: the agent's failure, F1 0; any other 400, or an HTTP 200 without choices after "
        "its retries: the trial is re-run"),
    Row(("summarizer",), ("cut_off", "blocked", "refused_for_size", "bad_request", "empty"),
        "`summarize_conversation` returns None on any error: no new summary, the loop goes on"),
    Row(("extractor",), ("empty", "cut_off", "blocked"), "no items parsed: the run crashes (`extractor.py`)",
        "asked twice, then the trajectory teaches no items"),
), note="Rate limits, server errors and timeouts: the original's OpenAI client retries twice, then the agent's call "
        "crashes the run and the summarizer's gives no summary; ehrbench retries with backoff, then re-runs the trial "
        "as infrastructure.")
