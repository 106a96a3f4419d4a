"""EHR-ChatQA prompts (data/prompts.yaml: the paper's Tables 5-9 and 14-17 and the authors' code's user supervisors)."""
from __future__ import annotations

import functools
from importlib import resources

import yaml

from ...users.llm_user import UserPrompts

END_TOKEN = "###END###"                          # the user's whole message when the conversation is over
AGENT_GREETING = "Hi! How can I help you today?"  # what the user sees before its opening turn


@functools.lru_cache(maxsize=None)
def prompts() -> dict:
    return yaml.safe_load(resources.files("ehrbench.benchmarks.ehrchatqa").joinpath("data/prompts.yaml").read_text())


def agent_system_prompt(db_id: str, flow: str) -> str:
    """Table 14 with the general rules (15), the flow's grading rules (16/17) and the database rules (8/9)."""
    p = prompts()
    return p["agent_system"].format(agent_rule=p["agent_rules"] + "\n\n" + p["grading_rules"][flow],
                                    database_rule=p["database_rules"][db_id])


def user_system_prompt(instruction: str) -> str:
    return prompts()["user_system"].format(user_instruction=instruction)


def user_prompts(instruction: str) -> UserPrompts:
    """The simulated user's prompts and its supervisors', as the original's ReflectionUser sends them."""
    p = prompts()
    return UserPrompts(system=user_system_prompt(instruction), verifier_system=p["verifier_system"],
                       reflection_system=p["reflection_system"], supervisor_input=p["supervisor_input"],
                       previous_mistakes=p["previous_mistakes"], assistant_like_feedback=p["filter_assistant_like"],
                       stop_token_feedback=p["filter_stop_token"], stop_token=END_TOKEN)


def validator_conversation(messages: list[dict]) -> str:
    """The conversation as the original's validator reads it (validator.py, display_conversation)."""
    lines = []
    for m in messages:
        if m["role"] == "user":
            lines += ["-----", "[USER]:", (m["content"] or "").strip(), "-----"]
        elif m["role"] == "assistant" and m.get("content"):
            lines += ["[DB AGENT]:", m["content"].strip()]
    return "\n".join(lines)
