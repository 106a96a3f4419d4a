"""What ClinSQL's original sends each model (Barryshen1/ClinSQL 337f783f: the inference scripts' `ModelConfig` per
model family, and the rubric scorer's judge call), per role and model family."""
from __future__ import annotations

from ...sampling import Rule, SamplingTable

TABLE = SamplingTable((
    Rule(("agent",), "any", {"temperature": 0.1}, "the inference `ModelConfig` default (`temperature=0.1`; Grok)"),
    Rule(("agent",), "gpt-5", {"temperature": 1.0},
         "GPT-5 family (`gpt-5-mini`, `gpt-5-nano`): `temperature=1.0`, no reasoning effort (the API's medium)"),
    Rule(("agent",), "gpt-5-chat", {"temperature": 1.0}, "the paper's GPT-5: the Azure `gpt-5-chat` deployment"),
    Rule(("agent",), "gpt-4.1-or-o", {"temperature": None, "max_tokens": 2048},
         "GPT-4.1 and o4-mini: the Responses API, `max_output_tokens=2048`, no temperature"),
    Rule(("agent",), "gemini-2.5", {"temperature": 1.0, "top_p": 1.0, "seed": 0, "max_tokens": 65_535,
                                    "thinking_budget": -1},
         "Gemini 2.5: `temperature=1`, `top_p=1`, `seed=0`, 65,535 tokens, `thinking_budget=-1`"),
    Rule(("agent",), "gemini-2.5-pro", {"top_p": 0.95}, "Gemini 2.5 Pro: `top_p=0.95`"),
    Rule(("agent",), "mistral", {"temperature": 0.1, "max_tokens": 2048}, "Mistral: 0.1, 2,048 tokens"),
    Rule(("agent",), "vllm", {"temperature": 0.2, "top_p": 0.9, "max_tokens": 32_768},
         "open models through vLLM (`run_vllm`): 0.2, `top_p=0.9`, 32,768 tokens"),
    Rule(("grader",), "any", {"temperature": 0.2, "max_tokens": 1024},
         "the rubric scorer's judge (gpt-5-chat on Azure): `temperature=0.2`, `max_completion_tokens=1024`"),
), note="The refinement calls send what the first call sent. No call sends a system prompt, a penalty or a reasoning "
        "effort, and none but Gemini's a seed. `contract=ehrbench` seeds the agent's and the judge's calls with the "
        "trial's seed and judges at temperature 0.")
