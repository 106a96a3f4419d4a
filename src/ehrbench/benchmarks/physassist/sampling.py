"""What PhysAssistBench's original sends each model (qgpmztmf/PhysAssistBench 73b441d: `eval_runner.py` with its
per-model `model_configs.yaml` for the agent; `run_eval.py` and `pipeline/agents/llm_client.py` for the judges and
the patient)."""
from __future__ import annotations

from ...sampling import Rule, SamplingTable

TABLE = SamplingTable((
    Rule(("agent",), "any", {"temperature": 0.2, "max_tokens": 1024, "max_tokens_name": "max_tokens"},
         "`eval_runner.py`: `temperature=0.2` on every call; `max_tokens` = the entry's, else 1,024 (10,240 for "
         "an entry with `thinking: true`); gpt-4o, gpt-4.1 and models not in `model_configs.yaml` (which the "
         "original refuses)"),
    Rule(("agent",), "gemini", {"max_tokens": 10_240}, "the Gemini entries (`thinking: true`): 10,240 tokens"),
    Rule(("agent",), "deepseek", {"extra_body": {"thinking": {"type": "disabled"}}},
         "deepseek-v3 / v4 (`_thinking_extra_body`): `{\"thinking\": {\"type\": \"disabled\"}}`"),
    Rule(("agent",), "deepseek-reasoner", {"max_tokens": 10_240, "extra_body": {"thinking": {"type": "enabled"}}},
         "deepseek-r1 (`thinking: true`): 10,240 tokens, `{\"thinking\": {\"type\": \"enabled\"}}`"),
    Rule(("agent",), "qwen3", {"extra_body": {"enable_thinking": False}},
         "the Qwen entries: `{\"enable_thinking\": false}`"),
    Rule(("agent",), "no-sampling", {"temperature": None, "max_tokens_name": "max_completion_tokens"},
         "a model that takes no temperature (o4-mini is not in `model_configs.yaml`): none sent"),
    Rule(("agent",), "gpt-5", {"reasoning_effort": "minimal"},
         "gpt-5, gpt-5-mini, gpt-5.1: the Responses API, `reasoning.effort=minimal`, 1,024 `max_output_tokens`"),
    Rule(("grader",), "any", {"temperature": 0.1, "max_tokens": 4000, "max_tokens_name": "max_tokens"},
         "the judges (`judge_llm_call`): the rubric judge at 0.1 (the IIRS judge at 0), 4,000 tokens (the "
         "write-turn judge, `eval_discharge_planning.py`: 2,000)"),
    Rule(("grader",), "deepseek", {"extra_body": {"thinking": {"type": "disabled"}}},
         "the DeepSeek fallback judge: `{\"thinking\": {\"type\": \"disabled\"}}`"),
    Rule(("grader",), "no-sampling", {"temperature": None, "max_tokens_name": "max_completion_tokens"},
         "gpt-5-mini through the Responses adapter, which drops the temperature"),
    Rule(("grader",), "gpt-5", {"reasoning_effort": "minimal"}, "gpt-5-mini: `reasoning.effort=minimal`"),
    Rule(("user",), "any", {"temperature": 0.7, "max_tokens": 300, "max_tokens_name": "max_tokens"},
         "the patient when a tool has no stored reply (`patient_agent_runtime.py`, DeepSeek): 0.7, 300 tokens"),
    Rule(("user",), "deepseek", {"extra_body": {"thinking": {"type": "disabled"}}},
         "its DeepSeek client: `{\"thinking\": {\"type\": \"disabled\"}}`"),
    Rule(("user",), "no-sampling", {"temperature": None, "max_tokens_name": "max_completion_tokens"},
         "a model that takes no temperature: none sent"),
), note="No call sends `top_p`, a `seed` or `n`. Tool rounds send `tool_choice=auto`, the final-answer nudge "
        "`tool_choice=none` with the tools. `contract=ehrbench` seeds the agent's and the patient's calls with the "
        "trial's seed. The MedAgentBench-style set (`benchmark=physassist_medagent`) has no original here: its agent "
        "sends temperature 0 and the trial's seed.")
