"""What AgentEHR's original sends each model (BlueZeros/AgentEHR c03bd0cd, `src/agentlite/llm/agent_llms.py`: one
client for the agent, its summarizer and its memory extractor, with the run scripts' settings)."""
from __future__ import annotations

from ...sampling import Rule, SamplingTable

TABLE = SamplingTable((
    Rule(("*",), "any", {"temperature": 0.7, "max_tokens": 4096, "max_tokens_name": "max_tokens"},
         "the scripts' `--temperature 0.7`; `max_new_tokens=4096` sent as `max_tokens` on every path "
         "(`agent_llms.py`)"),
    Rule(("*",), "vllm", {"top_p": 0.8, "presence_penalty": 1.0},
         "`VLLMServer`: the scripts' `--top_p 0.8 --presence_penalty 1.0`"),
    Rule(("*",), "qwen3", {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
         "a `qwen3` model: `extra_body={\"chat_template_kwargs\": {\"enable_thinking\": False}}` (`:260-267`)"),
    Rule(("*",), "no-sampling", {"temperature": None, "top_p": None, "presence_penalty": None,
                                 "max_tokens_name": "max_completion_tokens"},
         "not run by the authors: their temperature and `max_tokens` would be refused"),
), note="No call sends a `seed` or a system prompt. `contract=ehrbench` seeds every call with the trial's seed.")
