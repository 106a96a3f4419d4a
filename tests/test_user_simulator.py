"""The simulated user as the original's ReflectionUser / VerifierUser behave (glee4810/EHR-ChatQA src/envs/user.py).

Scripted in-process models stand in for the user, verifier and reflection models, so each test reads as the
original's control flow: which calls happen, with which prompts, and what the agent receives.
"""
import asyncio
import json

import pytest

from ehrbench.benchmarks.ehrchatqa.prompts import AGENT_GREETING, END_TOKEN, prompts, user_prompts
from ehrbench.llm.base import ChatResponse
from ehrbench.trial import InfrastructureError, Message
from ehrbench.users.llm_user import LLMUser


class Scripted:
    """A model that answers from a list and keeps every request it was sent."""

    def __init__(self, *texts):
        self.texts, self.requests = list(texts), []

    async def complete(self, request):
        self.requests.append(request)
        return ChatResponse(text=self.texts.pop(0))


def make_user(user, checker, strategy="reflection", mistakes=(), **kw):
    return LLMUser(user, user_prompts("Count patients with sepsis."), strategy=strategy, verifier=checker,
                   reflection=checker, mistakes=list(mistakes), **kw)


def say(sim, *agent_messages):
    """The user's replies to the greeting and then to each agent message."""
    history, replies = [Message("assistant", AGENT_GREETING)], []
    for text in (None,) + agent_messages:
        if text is not None:
            history.append(Message("assistant", text))
        turn = asyncio.run(sim.reply(history))
        history.append(Message("user", turn.text))
        replies.append(turn)
    return replies


def test_first_turn_is_not_verified_and_later_turns_need_exactly_yes():
    user, checker = Scripted("How many sepsis patients?", "All of them."), Scripted("Yes.", json.dumps(
        {"reflection": "vague", "new_response": "Only adults."}), "yes")
    first, second = say(make_user(user, checker), "Which patients?")
    assert first.text == "How many sepsis patients?"                  # no checker call for the first turn
    assert second.text == "Only adults."                              # "Yes." is not "yes": reflected
    assert len(checker.requests) == 3
    reflection = checker.requests[1]
    assert reflection.system == prompts()["reflection_system"]
    assert reflection.response_schema.fields == ("reflection", "new_response")
    assert checker.requests[0].system == prompts()["verifier_system"] and checker.requests[0].temperature == 0.0


def test_supervisor_input_layout_with_numbered_previous_mistakes():
    user, checker = Scripted("Sepsis count?", "Adults only."), Scripted("yes")
    say(make_user(user, checker, mistakes=["gave all goals at once", "asked for SQL"]), "Which patients?")
    text = checker.requests[0].messages[0].content
    system = user_prompts("Count patients with sepsis.").system
    assert text == (system + "\n\nPrevious user mistakes:\n1. gave all goals at once\n2. asked for SQL\n"
                    "\n\nConversation:\n[User]: Sepsis count?\n[DB Agent]: Which patients?\n\nUser Response:\n"
                    "Adults only.")


def test_a_filtered_reply_and_the_filters_words_stay_in_the_users_conversation():
    user = Scripted("Hi", "Run SELECT * FROM sepsis", "Just the count.")
    checker = Scripted("yes")
    _, second = say(make_user(user, checker), "What do you need?")
    assert second.text == "Just the count."
    retry = user.requests[2].messages
    assert [m.role for m in retry[-3:]] == ["user", "assistant", "user"]
    assert retry[-2].content == "Run SELECT * FROM sepsis"
    assert retry[-1].content == prompts()["filter_assistant_like"]
    assert "[User]: Run SELECT * FROM sepsis\n[DB Agent]: " + prompts()["filter_assistant_like"] in \
        checker.requests[0].messages[0].content       # the supervisors see it too, as the original's do


def test_three_filtered_attempts_end_the_conversation_and_the_trial_is_scored():
    user = Scripted("Hi", "SELECT 1", "ok ###END###", "print(1)")
    _, second = say(make_user(user, Scripted()), "Anything else?")
    assert (second.text, second.done) == (END_TOKEN, True)
    rerun = make_user(Scripted("Hi", "SELECT 1", "SELECT 2", "SELECT 3"), Scripted(), on_filter_failure="rerun")
    with pytest.raises(InfrastructureError, match="no acceptable reply in 3 attempts"):
        say(rerun, "Anything else?")


def test_verify_strategy_regenerates_then_sends_the_last_reply_unverified():
    user, checker = Scripted("Hi", "a", "b", "c"), Scripted("no", "no", "no")
    _, second = say(make_user(user, checker, strategy="verify"), "Which?")
    assert second.text == "c" and len(user.requests) == 4


def test_reflection_that_never_passes_sends_its_last_revision():
    revisions = [json.dumps({"reflection": "r", "new_response": f"rev{i}"}) for i in range(3)]
    checker = Scripted("no", revisions[0], "no", revisions[1], "no", revisions[2], "no")
    _, second = say(make_user(Scripted("Hi", "first"), checker), "Which?")
    assert second.text == "rev2"


def test_each_user_call_gets_its_own_seed_so_a_regenerated_reply_can_differ():
    user = Scripted("Hi", "SELECT 1", "fine")
    sim = make_user(user, Scripted("yes"), seed=7)
    say(sim, "Which?")
    assert [r.seed for r in user.requests] == [8, 9, 10]


def test_validator_rules_as_the_originals(monkeypatch):
    from ehrbench.judges.validator import SimulationValidator
    from ehrbench.trial import TrialRecord

    talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\n", "tool_call": None}]
    record = TrialRecord("t", 0, "user_stop", 1.0, messages=talk, steps=5)
    judge = lambda *texts, **kw: asyncio.run(SimulationValidator(Scripted(*texts), "sys", **kw).judge("p", record))  # noqa: E731
    # a whitespace-only message is still a message: validated (the original skips only a missing one)
    assert judge('{"result": "no_error", "explanation": "ok"}')["explanation"] == "ok"
    with pytest.raises(InfrastructureError, match="no usable verdict"):
        judge("not json")                                   # the original cannot read it either: never scored
    with pytest.raises(InfrastructureError):
        judge('{"result": "User_Error"}')
    record.steps = 30                                       # all 30 steps used, even if the user then ended it
    assert judge(max_steps=30)["skipped"] == "agent reached the step limit"


def test_a_user_call_the_provider_refuses_costs_an_attempt_and_an_outage_re_runs():
    """The original's user catches any exception of its call as one of the reply's 3 attempts, then sends
    ###END###: a request refused (its size, any 400) is such a failure; an outage is re-run, never a score."""
    class Failing:
        def __init__(self, *errors):
            self.errors, self.calls = list(errors), 0

        async def complete(self, request):
            self.calls += 1
            raise self.errors.pop(0)

    refused = Failing(InfrastructureError("HTTP 400", status=400), InfrastructureError("too long", agent_caused=True),
                      InfrastructureError("HTTP 400", status=400))
    [turn] = say(make_user(refused, Scripted()))
    assert (turn.text, turn.done, refused.calls) == (END_TOKEN, True, 3)
    with pytest.raises(InfrastructureError):
        say(make_user(Failing(InfrastructureError("HTTP 503 x8")), Scripted()))
