"""EHR-ChatQA prompts (data/prompts.yaml: the paper's Tables 5-9 and 14-17, plus ehrbench's verifier/reflection)."""
from __future__ import annotations

import functools
from importlib import resources

import yaml

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


def mistakes_block(mistakes: list[str]) -> str:
    if not mistakes:
        return ""
    return prompts()["previous_mistakes"].format(mistakes="\n".join(f"- {m}" for m in mistakes))
