"""What EHR-ChatQA's original sends each model (glee4810/EHR-ChatQA `src/utils.py` `get_completion`, through litellm
with `drop_params=True`), as its twin runs saw it on the wire."""
from __future__ import annotations

from ...sampling import Rule, SamplingTable

TABLE = SamplingTable((
    Rule(("agent",), "any", {"temperature": 0.0}, "`run.py --temperature` (default 0.0), `get_completion`"),
    Rule(("user",), "any", {"temperature": 1.0}, "`run.py --user_temperature` (default 1.0); `user.temperature`"),
    Rule(("verifier", "reflection"), "any", {"temperature": 0.0},
         "`user.py`: `VerifierUser.verifier`, `ReflectionUser.reflection` (`temperature=0.0`)"),
    Rule(("validator",), "any", {"temperature": 0.0}, "`validator.py` `user_validator(temperature=0.0)`"),
    Rule(("*",), "no-sampling", {"temperature": None},
         "`utils.is_supported_reasoning_llm` (gpt-5, gpt-5-mini, gpt-5-nano, o3-mini, o4-mini): no temperature"),
), note="No role sends `max_tokens`, `top_p`, a `seed`, a reasoning effort or a thinking budget (litellm passes none "
        "on; `n=1` and `parallel_tool_calls=false` with tools, as ehrbench's clients send them). "
        "`contract=ehrbench` seeds the agent's calls with the trial's seed and the user's with the trial's seed "
        "plus its call number.")
