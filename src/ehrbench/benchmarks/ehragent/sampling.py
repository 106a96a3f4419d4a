"""What EHRAgent's original sends each model (wshi83/EhrAgent 7dfcaf3, on pyautogen 0.2.0 and openai 1.7.2): the
chatbot through AutoGen's `llm_config` (`config.py`), the knowledge and debugger calls through their own client
(`medagent.py`). One model plays every role, as there."""
from __future__ import annotations

from ...sampling import Rule, SamplingTable

TABLE = SamplingTable((
    Rule(("agent",), "any", {"temperature": 0.0, "api": "functions"},
         "`config.py` `llm_config`: `temperature=0`, the legacy `functions` (pyautogen 0.2.0: `function_call`, "
         "`function` results); `cache_seed` is a local disk cache's key, never sent"),
    Rule(("knowledge",), "any", {"temperature": 0.0, "top_p": 0.95, "max_tokens": 800, "max_tokens_name": "max_tokens",
                                 "frequency_penalty": 0.0, "presence_penalty": 0.0},
         "`medagent.py` `retrieve_knowledge`: `temperature=0`, `top_p=0.95`, `max_tokens=800`, both penalties 0"),
    Rule(("debugger",), "any", {"temperature": 0.0, "top_p": 0.95, "max_tokens": 800, "max_tokens_name": "max_tokens",
                                "frequency_penalty": 0.0, "presence_penalty": 0.0},
         "`medagent.py` `error_debugger`: `temperature=0`, `top_p=0.95`, `max_tokens=800`, both penalties 0"),
    Rule(("*",), "no-sampling", {"temperature": None, "top_p": None, "frequency_penalty": None,
                                 "presence_penalty": None, "max_tokens_name": "max_completion_tokens"},
         "not run by the authors: their requests would be refused (these models take no temperature, and their "
         "limit only as `max_completion_tokens`)"),
), note="No call sends a `seed` or a reasoning effort; the helpers send `frequency_penalty=0` and `presence_penalty=0` "
        "(the API's defaults, sent as the original sends them). `contract=ehrbench` seeds the chatbot's and the "
        "knowledge call's requests with the trial's seed. The baselines (ReAct, LLM2SQL, self-debugging) are "
        "ehrbench's, at the chatbot's parameters.")
