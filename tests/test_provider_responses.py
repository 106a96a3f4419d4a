"""What providers actually send, through the real openai and google-genai clients and the loopback fake server:
rate limits with Retry-After, Gemini thought signatures, empty / cut-off / blocked answers, missing usage, and the
tokens of calls that failed."""
import asyncio
import time

import pytest

from ehrbench.llm.base import ChatRequest, ModelTurnError, RateLimiter, RetryPolicy
from ehrbench.llm.gemini import GeminiModel
from ehrbench.llm.openai_compatible import OpenAICompatibleModel
from ehrbench.llm.usage import MeteredModel, Price, UsageMeter
from ehrbench.trial import InfrastructureError, Message, ToolCall

from .conftest import FAST
from .fake_llm_server import Reply

ASK = [Message("user", "How many patients?")]
TOOLS = [{"name": "sql_execute", "description": "run SQL",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}]


def run(coro):
    return asyncio.run(coro)


# --- 1. rate limits ------------------------------------------------------------------------------------------------
def test_a_429_waits_as_long_as_the_provider_asks_and_holds_off_every_call_to_the_model(model_factory, server):
    wait = Reply(status=429, headers={"Retry-After": "2"}) if model_factory.provider == "openai" else \
        Reply(status=429, retry_delay="2s")
    server.push(wait, Reply(text="ok"))
    limiter = RateLimiter(concurrency=4)
    model = model_factory(limiter=limiter)
    started = time.monotonic()
    assert run(model.complete(ChatRequest(ASK))).text == "ok"
    assert time.monotonic() - started >= 1.9                       # not the 0.01 s backoff: the provider's 2 s
    assert limiter._paused_until >= started + 1.9                  # every other call to this model waited too
    assert model.attempts == 2


def test_retry_after_ms_and_http_dates_are_read():
    from email.utils import formatdate

    from ehrbench.llm.base import retry_after_from_headers

    assert retry_after_from_headers({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_from_headers({"retry-after": "7"}) == 7.0
    assert 25 < retry_after_from_headers({"retry-after": formatdate(time.time() + 30, usegmt=True)}) <= 30
    assert retry_after_from_headers({"retry-after": "soon"}) is None and retry_after_from_headers({}) is None


def test_the_default_policy_waits_out_a_one_minute_window():
    import random

    policy, rng = RetryPolicy(), random.Random(0)
    least = sum(min(policy.max_backoff_s, policy.initial_backoff_s * 2 ** a) * 0.5
                for a in range(policy.max_attempts - 1))
    assert least >= 60 and sum(policy.backoff(a, rng) for a in range(policy.max_attempts - 1)) >= 60


def test_a_pause_holds_every_worker_of_the_cluster(ray_cluster):
    import ray

    from ehrbench.runtime.rate_limits import RateLimiterActor

    limiter = RateLimiterActor.options(max_concurrency=100).remote(4, None)
    ray.get(limiter.pause.remote(1.0))
    t = time.monotonic()
    ray.get(limiter.acquire.remote(), timeout=10)
    assert time.monotonic() - t >= 0.9 and ray.get(limiter.stats.remote())["pauses"] == 1


# --- 2. Gemini thought signatures ----------------------------------------------------------------------------------
def test_gemini_parallel_calls_with_a_signature_go_back_as_one_call_with_its_one_response(server, monkeypatch):
    """Two calls at once, the first signed: the agent runs the first, so the turn goes back with that call alone
    (its signature kept), as many calls as responses, which Gemini requires (the fake refuses otherwise)."""
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    server.require_signatures = True
    server.push(Reply(text="Two lookups.", calls=[{"tool": "sql_execute", "args": {"query": "SELECT 1"}},
                                                  {"tool": "sql_execute", "args": {"query": "SELECT 2"}}],
                      signature="c2lnbmF0dXJlLTI="), Reply(text="There is one."))
    model = GeminiModel("gemini-2.5-flash", base_url=server.url, retry=FAST)
    first = run(model.complete(ChatRequest(ASK, tools=TOOLS)))
    call = first.tool_calls[0]
    assert len(first.tool_calls) == 1 and call.arguments == {"query": "SELECT 1"}
    history = ASK + [Message("assistant", first.text, tool_call=ToolCall(call.name, call.arguments, "c1"),
                             provider_parts=first.provider_parts),
                     Message("tool", "[(1,)]", tool_call_id="c1")]
    assert run(model.complete(ChatRequest(history, tools=TOOLS))).text == "There is one."
    turn = server.requests[-1].body["contents"][1]["parts"]
    assert [("text" in p, p.get("functionCall", {}).get("args"), p.get("thoughtSignature")) for p in turn] == \
        [(True, None, None), (False, {"query": "SELECT 1"}, "c2lnbmF0dXJlLTI=")]


def test_gemini_thought_signatures_go_back_with_the_call(server, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    server.require_signatures = True
    server.push(Reply(tool="sql_execute", args={"query": "SELECT 1"}, signature="c2lnbmF0dXJlLTE="),
                Reply(text="There is one."))
    model = GeminiModel("gemini-3-pro", base_url=server.url, retry=FAST)
    first = run(model.complete(ChatRequest(ASK, tools=TOOLS)))
    call = first.tool_calls[0]
    history = ASK + [Message("assistant", first.text, tool_call=ToolCall(call.name, call.arguments, "c1"),
                             provider_parts=first.provider_parts),
                     Message("tool", "[(1,)]", tool_call_id="c1")]
    assert run(model.complete(ChatRequest(history, tools=TOOLS))).text == "There is one."
    sent = server.requests[-1].body["contents"][1]["parts"][0]
    assert sent["thoughtSignature"] == "c2lnbmF0dXJlLTE=" and sent["functionCall"]["name"] == "sql_execute"
    history[1].provider_parts = None                         # rebuilt from name and arguments only: refused
    with pytest.raises(InfrastructureError, match="missing a thought_signature"):
        run(model.complete(ChatRequest(history, tools=TOOLS)))


def test_gemini_is_never_sent_an_empty_text_part(server, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    server.push(Reply(text="ok"))
    model = GeminiModel("gemini-2.5-flash", base_url=server.url, retry=FAST)
    run(model.complete(ChatRequest(ASK + [Message("assistant", ""), Message("user", "and?")])))
    parts = [p for c in server.requests[-1].body["contents"] for p in c["parts"]]
    assert {"text": ""} not in parts and len(parts) == 2


# --- 3. empty, cut-off and blocked answers -------------------------------------------------------------------------
def test_an_empty_200_is_retried_and_its_tokens_are_counted(model_factory, server):
    server.push(Reply(empty=True, usage=(7, 0)), Reply(text="ok", usage=(10, 5)))
    response = run(model_factory().complete(ChatRequest(ASK)))
    assert response.text == "ok" and (response.usage.input_tokens, response.usage.output_tokens) == (17, 5)


def test_a_cut_off_answer_is_a_recorded_truncated_turn(model_factory, server):
    finish = "length" if model_factory.provider == "openai" else "MAX_TOKENS"
    server.push(Reply(text="There are thir", finish=finish))
    response = run(model_factory().complete(ChatRequest(ASK)))
    assert (response.text, response.finish_reason) == ("There are thir", finish)


@pytest.mark.parametrize("case", ["cut off before anything", "blocked answer"])
def test_an_answer_that_never_came_is_the_models_failure_with_the_reason(model_factory, server, case):
    openai = model_factory.provider == "openai"
    reply, reason = {
        "cut off before anything": (Reply(finish="length" if openai else "MAX_TOKENS"), "output-token limit"),
        "blocked answer": (Reply(finish="content_filter" if openai else "SAFETY"), "blocked"),
    }[case]
    server.push(reply)
    meter = UsageMeter()
    metered = MeteredModel(model_factory(), "agent", meter, Price(1.0, 1.0))
    with pytest.raises(ModelTurnError, match=reason):
        run(metered.complete(ChatRequest(ASK)))
    assert len(server.requests) == 1                               # the same request would get the same refusal
    assert meter.by_role["agent"]["failed_calls"] == 1 and meter.by_role["agent"]["input_tokens"] == 10


def test_a_prompt_gemini_blocks_is_the_models_failure_too(server, monkeypatch):
    """(OpenAI refuses such a prompt with an HTTP 400: a bad request, an infrastructure error.)"""
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    server.push(Reply(block_reason="PROHIBITED_CONTENT"))
    with pytest.raises(ModelTurnError, match=r"blocked the prompt \(blockReason=PROHIBITED_CONTENT\)"):
        run(GeminiModel("gemini-2.5-flash", base_url=server.url, retry=FAST).complete(ChatRequest(ASK)))
    assert len(server.requests) == 1


def test_an_agent_whose_answer_never_came_ends_its_trial_saying_why(server, monkeypatch):
    from ehrbench.agents.tool_calling import ToolCallingAgent
    from ehrbench.benchmarks.ehrchatqa.scripted_user import ScriptedUser
    from ehrbench.trial import run_trial

    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    server.push(Reply(finish="SAFETY"))
    agent = ToolCallingAgent(MeteredModel(GeminiModel("g", base_url=server.url, retry=FAST), "agent", UsageMeter()),
                             "sys", TOOLS)

    async def score(record):
        return 1.0
    record = run(run_trial("k", 0, agent, ScriptedUser("Your goal is x."), None, score))
    assert record.termination == "agent_error" and record.reward == 0.0
    assert "blocked the answer (finishReason=SAFETY)" in record.error


# --- 4. missing usage ----------------------------------------------------------------------------------------------
def test_a_response_without_usage_is_counted_as_unknown_not_free(model_factory, server, caplog):
    server.push(Reply(text="ok", usage=None), Reply(text="ok", usage=None))
    meter = UsageMeter()
    metered = MeteredModel(model_factory(), "agent", meter, Price(1.0, 1.0))
    with caplog.at_level("WARNING"):
        run(metered.complete(ChatRequest(ASK)))
        run(metered.complete(ChatRequest(ASK)))
    row = meter.by_role["agent"]
    assert (row["calls"], row["calls_without_usage"], row["cost_usd"]) == (2, 2, 0.0)
    assert sum("without token usage" in r.message for r in caplog.records) <= 1     # once per model, not per call


# --- 5. what a failed call spent -----------------------------------------------------------------------------------
def test_a_call_that_fails_for_good_is_metered_for_what_it_spent(model_factory, server):
    server.push(*[Reply(empty=True, usage=(10, 0))] * 3)
    meter = UsageMeter()
    with pytest.raises(InfrastructureError, match="failed 3 times"):
        run(MeteredModel(model_factory(), "agent", meter, Price(1.0, 1.0)).complete(ChatRequest(ASK)))
    row = meter.by_role["agent"]
    assert (row["failed_calls"], row["input_tokens"]) == (1, 30) and row["cost_usd"] == pytest.approx(30 / 1e6)


def test_a_truncated_turn_reaches_the_user_marked_with_its_finish_reason(server, monkeypatch):
    from ehrbench.agents.tool_calling import ToolCallingAgent
    from ehrbench.trial import Turn, run_trial

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    server.push(Reply(text="There are thir", finish="length"))
    agent = ToolCallingAgent(MeteredModel(OpenAICompatibleModel("m", base_url=server.url + "/v1", retry=FAST),
                                          "agent", UsageMeter()), "sys", TOOLS)

    class OneQuestion:
        async def reply(self, history):
            return Turn("###END###", done=True) if len(history) > 1 else Turn("How many?")

    async def score(record):
        return 0.0
    record = run(run_trial("k", 0, agent, OneQuestion(), None, score))
    [said] = [m for m in record.messages if m["role"] == "assistant"]
    assert (said["content"], said["finish_reason"], record.termination) == ("There are thir", "length", "user_stop")
