"""How a failed model turn ends in EHR-ChatQA, as its original ends it (glee4810/EHR-ChatQA 5696da8, `get_action`,
`src/envs/user.py`, `validator.py`), each row seen in its failures twin run."""
from __future__ import annotations

from ...failures import FailureTable, Row

TABLE = FailureTable((
    Row(("agent",), ("cut_with_text",), "the text, passed to the user as it came"),
    Row(("agent",), ("cut_off", "blocked"),
        "a reply with no text at all (`content: null`): the user reads \"\", the conversation goes on, and the "
        "validator leaves the trial unjudged (\"the agent generated an empty response\")"),
    Row(("agent",), ("empty",), "an empty reply (\"\"), which the user answers"),
    Row(("agent",), ("refused_for_size",), "an empty reply, which the user answers; the conversation ends there, "
                                           "scored as it stands and validated"),
    Row(("agent",), ("malformed", "bad_request"),
        "asked again with the same conversation after 3 s, until the agent's 600 s are spent (reward 0)",
        "the re-asks stop at the time limit, not after 1,000"),
    Row(("agent",), ("parallel",), "the first call run and kept; the others dropped"),
    Row(("agent",), ("text_calls",), "Gemini's ```tool_call``` and Llama's ```json``` text parsed as calls",
        "shown to the user as text (EHR-ChatQA's own issue)"),
    Row(("user", "verifier", "reflection"), ("cut_off", "blocked", "empty", "refused_for_size", "bad_request"),
        "one of the reply's 3 attempts spent; after 3, the user sends ###END### and the trial is scored"),
    Row(("validator",), ("cut_off", "blocked", "empty", "refused_for_size", "bad_request"),
        "tried again every 3 s, 10 times, then `no_error`", "an infrastructure error: the trial is re-run"),
), note="Rate limits and server errors: the agent's call waits 10 s (a 429) or 3 s and is asked again, up to 1,000 "
        "times; ehrbench retries with backoff, then re-runs the trial as infrastructure.")
