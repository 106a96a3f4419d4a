import asyncio

from ehrbench.benchmarks.ehrchatqa.prompts import END_TOKEN
from ehrbench.benchmarks.ehrchatqa.scripted_user import ScriptedUser
from ehrbench.benchmarks.ehrchatqa.tasks import load_task_dir
from ehrbench.episode import run_task_trial
from ehrbench.trial import InfrastructureError, Limits, Message, ToolCall, Turn, run_trial

from .conftest import TASK_DIR, ehrchatqa_settings, local_hosts


def test_reference_agent_scores_every_task(dbs):
    tasks = load_task_dir(TASK_DIR, ["mimic_iv_star", "eicu_star"], ["incre", "adapt"])
    hosts, settings = local_hosts(dbs), ehrchatqa_settings()

    async def all_trials():  # concurrently, on one event loop, as a trial worker runs them
        return await asyncio.gather(*(run_task_trial(t, 0, hosts, settings) for t in tasks))
    failed = [t.key for t, records in zip(tasks, asyncio.run(all_trials())) if records[-1].reward != 1.0]
    assert failed == []


def test_scripted_user_reveals_gradually_then_checks_then_ends():
    user = ScriptedUser("Your goal is to count patients. Specifically, you want diabetics. You only want women.", 1)
    turns = [asyncio.run(user.reply([])) for _ in range(5)]
    assert turns[0] == Turn("I need to count patients.")
    assert not any(t.done for t in turns[:-1]) and turns[-1] == Turn(END_TOKEN, done=True)
    assert "###END###" not in " ".join(t.text for t in turns[:-1])
    assert any("double check" in t.text for t in turns)


class LoopingAgent:
    async def act(self, history):
        return Message("assistant", tool_call=ToolCall("table_search", {}))


class EchoTools:
    async def call(self, name, arguments):
        return "t1, t2"


async def full_marks(record):
    return 1.0


def test_step_limit_ends_with_reward_zero():
    r = asyncio.run(run_trial("k", 0, LoopingAgent(), ScriptedUser("Your goal is x."), EchoTools(), full_marks,
                              Limits(max_steps=30)))
    assert (r.termination, r.reward, r.steps) == ("max_steps", 0.0, 30)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_limit_counts_the_agents_model_time_not_the_users_or_the_tools():
    """As the original: 600 s of the agent's own calls; a slow user or tool uses none of it."""
    clock = FakeClock()

    class Agent:                                   # each call: 100 s of the agent's own time
        async def act(self, history):
            clock.now += 100
            return Message("assistant", tool_call=ToolCall("table_search", {}))

    class SlowTools:                               # each tool: 1000 s of wall time
        async def call(self, name, arguments):
            clock.now += 1000
            return "t1"

    r = asyncio.run(run_trial("k", 0, Agent(), ScriptedUser("Your goal is x."), SlowTools(), full_marks,
                              Limits(max_steps=30, time_limit_s=250), clock=clock))
    assert (r.termination, r.reward, r.steps) == ("time_limit", 0.0, 2)    # ended after the third call, unused
    assert r.agent_time_s == 300 and r.duration_s == 2300


def test_time_waiting_for_a_rate_limiter_slot_is_not_the_agents_time():
    from ehrbench.llm.base import ChatModel, ChatResponse, ChatRequest, RateLimiter

    class Quick(ChatModel):
        async def _send(self, request):
            await asyncio.sleep(0.01)
            return ChatResponse(text="done")

    limiter = RateLimiter(concurrency=1)
    model = Quick("m", limiter=limiter)

    class Agent:
        async def act(self, history):
            return Message("assistant", (await model.complete(ChatRequest(history))).text)

    async def main():
        async def hog():
            async with limiter.slot():
                await asyncio.sleep(0.5)           # another trial holds the only slot
        blocker = asyncio.create_task(hog())
        await asyncio.sleep(0)
        record = await run_trial("k", 0, Agent(), ScriptedUser("Your goal is x."), EchoTools(), full_marks,
                                 Limits(max_steps=3, time_limit_s=0.3))
        await blocker
        return record

    r = asyncio.run(main())
    assert r.termination != "time_limit" and r.steps >= 1
    assert r.agent_time_s < 0.3 <= r.duration_s


def test_user_failure_is_an_infrastructure_error_never_a_graded_end():
    class BrokenUser:
        async def reply(self, history):
            if len(history) > 1:
                raise InfrastructureError("user API down", source="user")
            return Turn("hello")

    class Talker:
        async def act(self, history):
            return Message("assistant", "hi")

    r = asyncio.run(run_trial("k", 0, Talker(), BrokenUser(), EchoTools(), full_marks))
    assert (r.termination, r.reward, r.valid) == ("infra_error_user", None, False)


def test_a_refused_agent_request_is_scored_a_refused_user_request_is_re_run():
    """A context overflow in the agent's own turn is the agent's doing: agent_error, reward 0, in the denominator."""
    class Overflowing:
        async def act(self, history):
            raise InfrastructureError("HTTP 400: context length exceeded", agent_caused=True)

    r = asyncio.run(run_trial("k", 0, Overflowing(), ScriptedUser("Your goal is x."), EchoTools(), full_marks))
    assert (r.termination, r.reward, r.valid) == ("agent_error", 0.0, True)

    class RefusedUser:
        async def reply(self, history):
            if len(history) > 1:
                raise InfrastructureError("HTTP 400", source="user", agent_caused=True)
            return Turn("hello")

    class Talker:
        async def act(self, history):
            return Message("assistant", "hi")
    r = asyncio.run(run_trial("k", 0, Talker(), RefusedUser(), EchoTools(), full_marks))
    assert (r.termination, r.valid) == ("infra_error_user", False)


def test_agent_bug_costs_the_trial_not_the_run():
    class Crashy:
        async def act(self, history):
            raise KeyError("boom")

    r = asyncio.run(run_trial("k", 0, Crashy(), ScriptedUser("Your goal is x."), EchoTools(), full_marks))
    assert (r.termination, r.reward) == ("agent_error", 0.0)


def test_trials_await_their_model_calls_concurrently_and_meter_each(dbs):
    """20 trials whose scripted model waits 50 ms a call share one event loop: they overlap, each call is metered."""
    import time

    tasks = load_task_dir(TASK_DIR, ["mimic_iv_star"], ["incre", "adapt"])[:20]
    settings = ehrchatqa_settings(agent_latency_s=0.05, user_latency_s=0.05)
    hosts = local_hosts(dbs)

    async def all_trials():
        start = time.monotonic()
        done = await asyncio.gather(*(run_task_trial(t, 0, hosts, settings) for t in tasks))
        return [records[-1] for records in done], time.monotonic() - start
    records, wall = asyncio.run(all_trials())
    assert all(r.reward == 1.0 for r in records)
    assert all(r.usage["agent"]["calls"] == r.steps and r.usage["user"]["calls"] == r.user_turns for r in records)
    assert all(-0.001 <= c["t"] and c["t"] + c["dt"] <= r.duration_s + 0.01 and c["dt"] >= 0.049
               for r in records for c in r.model_calls)
    serial = 0.05 * sum(len(r.model_calls) for r in records)
    assert wall < serial / 4          # one after another would take `serial` seconds
