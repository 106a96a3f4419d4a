"""How a failed model turn ends in EHRAgent, as its original ends it (wshi83/EhrAgent 7dfcaf3 on pyautogen 0.2.0)."""
from __future__ import annotations

from ...failures import FailureTable, Row

TABLE = FailureTable((
    Row(("agent",), ("cut_with_text",), "the text, as any reply"),
    Row(("agent",), ("cut_off", "blocked"), "no reply: AutoGen's chat ends, the question unanswered (scored 0; the "
                                            "memory's judge still reads the log)"),
    Row(("agent",), ("refused_for_size", "bad_request"),
        "the chat raises and `main.py` loses the question, counted unanswered: the agent's failure, scored 0"),
    Row(("agent",), ("malformed",), "AutoGen's newline repair, then the cell cut out of the raw arguments, then run"),
    Row(("agent",), ("text_calls",), "fenced code in the text runs as a script without the toolset; other text gets "
                                     "the empty auto-reply"),
    Row(("agent",), ("parallel",), "one call (the `functions` API allows no other)", "only the first call is kept"),
    Row(("agent",), ("empty",), "openai 1.7.2 fails on the missing choice, and the question is lost",
        "an HTTP 200 without choices is retried, then the trial re-run"),
    Row(("knowledge", "debugger"), ("empty", "cut_off", "blocked", "refused_for_size", "bad_request"),
        "tried again (2 tries, `max_attempts = 2`), then the fallback text (\"Fail to retrieve related knowledge, "
        "please try again later.\", \"Fail to diagnose the reasons to the errors.\") and the question goes on"),
    Row(("knowledge", "debugger"), ("cut_with_text",), "the cut text, as any reply"),
), note="Rate limits, server errors and timeouts: the original's client retries twice, then the question is lost "
        "(the chatbot) or the fallback text stands in (the helpers); ehrbench retries with backoff, then re-runs the "
        "trial as infrastructure.")
