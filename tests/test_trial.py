from ehrbench.benchmarks.ehrchatqa.benchmark import run_task_trial
from ehrbench.benchmarks.ehrchatqa.tasks import load_task_dir
from ehrbench.benchmarks.ehrchatqa.web_search import VocabularyWebSearch
from ehrbench.trial import END_TOKEN, InfrastructureError, Limits, Message, ToolCall, run_trial
from ehrbench.users.scripted import ScriptedUser

from .conftest import TASK_DIR, EchoIndex


def test_reference_agent_scores_every_task(dbs):
    tasks = load_task_dir(TASK_DIR, ["mimic_iv_star", "eicu_star"], ["incre", "adapt"])
    web = VocabularyWebSearch()
    failed = [t.key for t in tasks if run_task_trial(t, 0, dbs[t.db_id], EchoIndex(), web)[-1].reward != 1.0]
    assert failed == []


def test_scripted_user_reveals_gradually_then_checks_then_ends():
    user = ScriptedUser("Your goal is to count patients. Specifically, you want diabetics. You only want women.", 1)
    turns = [user.reply([]) for _ in range(5)]
    assert turns[0] == "I need to count patients."
    assert "###END###" not in " ".join(turns[:-1]) and turns[-1] == END_TOKEN
    assert any("double check" in t for t in turns)


class LoopingAgent:
    def act(self, history):
        return Message("assistant", tool_call=ToolCall("table_search", {}))


class EchoTools:
    def call(self, name, arguments):
        return "t1, t2"


def test_step_limit_ends_with_reward_zero():
    r = run_trial("k", 0, LoopingAgent(), ScriptedUser("Your goal is x."), EchoTools(), lambda rec: 1.0,
                  Limits(max_steps=30))
    assert (r.termination, r.reward, r.steps) == ("max_steps", 0.0, 30)


def test_user_failure_is_an_infrastructure_error_never_a_graded_end():
    class BrokenUser:
        def reply(self, history):
            if len(history) > 1:
                raise InfrastructureError("user API down", source="user")
            return "hello"

    class Talker:
        def act(self, history):
            return Message("assistant", "hi")

    r = run_trial("k", 0, Talker(), BrokenUser(), EchoTools(), lambda rec: 1.0)
    assert (r.termination, r.reward, r.valid) == ("infra_error_user", None, False)


def test_agent_bug_costs_the_trial_not_the_run():
    class Crashy:
        def act(self, history):
            raise KeyError("boom")

    r = run_trial("k", 0, Crashy(), ScriptedUser("Your goal is x."), EchoTools(), lambda rec: 1.0)
    assert (r.termination, r.reward) == ("agent_error", 0.0)
