"""Whole EHR-ChatQA trials with the real openai and google-genai clients against the loopback fake server.

Four models take part, each with its own script: the agent (OpenAI protocol), the user, its checker (verifier and
reflection) and the validator (Gemini protocol).
"""
import asyncio
import dataclasses
import json

import pytest

from ehrbench.benchmarks.ehrchatqa.prompts import END_TOKEN
from ehrbench.benchmarks.ehrchatqa.tasks import load_tasks
from ehrbench.llm.registry import build_model
from ehrbench.llm.usage import MeteredModel, Price, UsageMeter
from ehrbench.trial import Message, Turn
from ehrbench.users.llm_user import LLMUser, UserPrompts

from .conftest import EHRCHATQA_OPTIONS, TASK_DIR, ehrchatqa_settings, run_local_trial
from .fake_llm_server import FakeLLMServer, Reply

FAST = {"max_attempts": 3, "initial_backoff_s": 0.01, "max_backoff_s": 0.05}


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    s = FakeLLMServer().start()
    yield s
    s.stop()


def settings_for(server, **overrides):
    gemini = lambda name: {"name": name, "provider": "gemini", "model": name, "base_url": server.url,  # noqa: E731
                           "retry": FAST, "price": {"input": 0.1, "output": 0.4}}
    base = dict(agent="tool_calling", user="llm", user_strategy="reflection",
                agent_model={"name": "agent-llm", "provider": "openai-compatible", "model": "agent-llm",
                             "base_url": server.url + "/v1", "retry": FAST, "price": {"input": 2.5, "output": 10.0}},
                user_model=gemini("user-llm"), verifier_model=gemini("checker-llm"),
                validator_model=gemini("validator-llm"), max_attempts=4)
    base.update(overrides)
    return ehrchatqa_settings(**base)


@pytest.fixture(scope="module")
def task():
    [t] = [t for t in load_tasks(TASK_DIR / "mimic_iv_star" / "eval_incre.jsonl") if t.category == "diagnosis cohort"][:1]
    return t


def script_happy_conversation(server, task, validator_verdicts):
    for verdict in validator_verdicts:
        server.push(Reply(text="I need the number of patients with some diagnosis."), model="user-llm")
        server.push(Reply(tool="table_search", args={"tool_input": ""}), model="agent-llm")
        server.push(Reply(tool="value_substring_search", args={"table": "diagnosiscodes", "column": "description",
                                                               "value": "hyperlipidemia"}), model="agent-llm")
        server.push(Reply(text="Which time window and which coding versions?"), model="agent-llm")
        server.push(Reply(text="Give me everything, both codes."), model="user-llm")       # verifier says no
        server.push(Reply(tool="sql_execute", args={"query": task.gold_sql}), model="agent-llm")
        server.push(Reply(text=f"There are {task.gold_answer[0][0]} patients."), model="agent-llm")
        server.push(Reply(text="Can you double check that covers all I asked?"), model="user-llm")
        server.push(Reply(text="Yes, it covers every condition you gave."), model="agent-llm")
        server.push(Reply(text=END_TOKEN), model="user-llm")
        # the first turn is never verified: the checker sees turn 2 (no, reflected, yes), turn 3 and the end
        server.push(Reply(text="no"),
                    Reply(text=json.dumps({"reflection": "missing the time window",
                                           "new_response": "Only those admitted recently, per my instruction, both codes."})),
                    Reply(text="yes"), Reply(text="yes"), Reply(text="yes"), model="checker-llm")
        server.push(Reply(text=json.dumps(verdict)), model="validator-llm")


def test_full_trial_agent_explores_user_refines_validator_passes_reward_computed(server, task, dbs):
    script_happy_conversation(server, task, [{"explanation": "fine", "result": "no_error"}])
    [record] = run_local_trial(task, dbs, settings_for(server))
    assert (record.termination, record.reward, record.validation["result"]) == ("user_stop", 1.0, "no_error")
    assert record.tool_calls == 3 and record.user_turns == 4
    user_texts = [m["content"] for m in record.messages if m["role"] == "user"]
    assert user_texts[1] == "Only those admitted recently, per my instruction, both codes."  # the reflected reply
    usage = record.usage
    assert {r: usage[r]["calls"] for r in usage} == {"user": 4, "agent": 6, "verifier": 4, "reflection": 1,
                                                      "validator": 1}
    assert usage["agent"]["input_tokens"] == 60 and usage["agent"]["cost_usd"] == pytest.approx((60 * 2.5 + 30 * 10) / 1e6)
    agent_request = server.requests_for("agent-llm")[-1].body
    assert agent_request["parallel_tool_calls"] is False and agent_request["temperature"] == 0.0
    assert "Below are the SQL generation rules" in agent_request["messages"][0]["content"]


def test_validator_rejection_reruns_with_the_explanation_carried_over(server, task, dbs):
    script_happy_conversation(server, task, [{"explanation": "user revealed all goals at once", "result": "user_error",
                                              "broken_rule": "gradual", "evidence": "x"},
                                             {"explanation": "fine", "result": "no_error"}])
    records = run_local_trial(task, dbs, settings_for(server))
    assert [(r.rerun, r.termination, r.reward) for r in records] == [(0, "rejected_by_validator", None),
                                                                    (1, "user_stop", 1.0)]
    assert not records[0].valid and records[1].valid
    checker_prompts = [r.body["contents"][0]["parts"][0]["text"] for r in server.requests_for("checker-llm")]
    assert not any("user revealed all goals at once" in p for p in checker_prompts[:5])
    assert all("\n\nPrevious user mistakes:\n1. user revealed all goals at once\n\n\nConversation:\n" in p
               for p in checker_prompts[5:])


def test_under_the_ehrbench_contract_a_malformed_call_gets_an_error_observation_and_the_agent_goes_on(server, task,
                                                                                                      dbs):
    server.push(Reply(text="how many patients?"), Reply(text=END_TOKEN), model="user-llm")
    server.push(Reply(tool="sql_execute", raw_args='{"query": "SELECT'),
                Reply(tool="sql_execute", args={"query": task.gold_sql}), Reply(text="done"), model="agent-llm")
    settings = settings_for(server, user_strategy="plain", validator_model=None,
                            benchmark_options={**EHRCHATQA_OPTIONS, "contract": "ehrbench"})
    [record] = run_local_trial(task, dbs, settings)
    tools = [m["content"] for m in record.messages if m["role"] == "tool"]
    assert tools[0].startswith("Error: malformed tool call: tool call arguments are not valid JSON")
    assert (record.termination, record.reward) == ("user_stop", 1.0)


# --- the original contract, whole trials: what a real model does wrong is scored as the original scores it ---------
def test_broken_json_is_asked_again_unseen_thinking_is_cut_and_a_cut_off_reply_goes_on(server, task, dbs):
    """One conversation through the benchmark's own episode (contract original): the agent's first call has
    arguments that are not JSON (the model is asked again with the same conversation, and nothing about it enters
    the record), the agent, a Qwen model, thinks aloud before its answer (the user sees only what follows
    `</think>`, as the original cuts a Qwen agent's), and its first answer is cut off at the token limit (passed to
    the user as it is; the conversation goes on)."""
    server.push(Reply(text="how many patients?"), Reply(text="Please finish your sentence."), Reply(text=END_TOKEN),
                model="user-llm")
    server.push(Reply(tool="sql_execute", raw_args='{"query": "SELECT'),
                Reply(tool="sql_execute", args={"query": task.gold_sql}),
                Reply(text="<think>the user wants a count; maybe 0</think>There are", finish="length"),
                Reply(text=f"<think>finish it</think>There are {task.gold_answer[0][0]} patients."),
                model="agent-llm-qwen3")
    qwen = {**settings_for(server).agent_model, "model": "agent-llm-qwen3"}
    [record] = run_local_trial(task, dbs, settings_for(server, user_strategy="plain", validator_model=None,
                                                       agent_model=qwen))
    assert (record.termination, record.reward) == ("user_stop", 1.0)
    assert record.tool_calls == 1 and not any("malformed" in (m["content"] or "") for m in record.messages)
    said = [m for m in record.messages if m["role"] == "assistant" and not m["tool_call"]]
    assert [(m["content"], m["finish_reason"]) for m in said] == [
        ("There are", "length"), (f"There are {task.gold_answer[0][0]} patients.", None)]
    agent_requests = server.requests_for("agent-llm-qwen3")
    assert agent_requests[0].body["messages"] == agent_requests[1].body["messages"]     # asked again, unchanged
    user_prompts = json.dumps([r.body for r in server.requests_for("user-llm")])
    assert "<think>" not in user_prompts and "maybe 0" not in user_prompts


@pytest.mark.parametrize("last_word", ["Anything else?", END_TOKEN])
def test_an_overflow_ends_the_conversation_after_the_user_s_reply_scored_as_it_leaves_it(server, task, dbs,
                                                                                         last_word):
    """The gold query has run when the agent's conversation no longer fits its model (HTTP 400, context length):
    the agent's reply is empty, the user answers it, and the conversation ends there. A user who ends it scores the
    trajectory as the original does (the query that ran matches the gold: 1); anything else scores 0. The validator
    is asked in both cases (an empty string is not the original's `None`)."""
    server.push(Reply(text="how many patients?"), Reply(text=last_word), model="user-llm")
    server.push(Reply(tool="sql_execute", args={"query": task.gold_sql}),
                Reply(status=400, message="This model's maximum context length is 8192 tokens."), model="agent-llm")
    server.push(Reply(text=json.dumps({"explanation": "fine", "result": "no_error"})), model="validator-llm")
    [record] = run_local_trial(task, dbs, settings_for(server, user_strategy="plain"))
    ended = last_word == END_TOKEN
    assert (record.termination, record.reward) == (("user_stop", 1.0) if ended else ("context_overflow", 0.0))
    assert record.messages[-2]["content"] == "" and record.messages[-1]["content"] == last_word
    assert record.validation["result"] == "no_error" and "skipped" not in record.validation
    assert len(server.requests_for("agent-llm")) == 2                 # an overflow is not retried


def test_user_api_down_is_an_infrastructure_error_not_a_graded_end(server, task, dbs):
    server.push(*[Reply(status=500)] * 3, model="user-llm")
    [record] = run_local_trial(task, dbs, settings_for(server, user_strategy="plain"))
    assert (record.termination, record.reward, record.valid) == ("infra_error_user", None, False)
    assert record.validation is None  # never graded, never validated


def test_user_reply_with_sql_or_glued_end_is_filtered_and_regenerated(server):
    server.push(Reply(text="SELECT COUNT(*) FROM patients"), Reply(text="Perfect, thanks! ###END###"),
                Reply(text=END_TOKEN), model="user-llm")
    meter = UsageMeter()
    cfg = {"provider": "gemini", "model": "user-llm", "base_url": server.url, "retry": FAST}
    user = LLMUser(MeteredModel(build_model(cfg), "user", meter, Price()), UserPrompts("Your goal is x.", stop_token_feedback="the stop token alone, please"),
                   strategy="plain")
    assert asyncio.run(user.reply([Message("assistant", "Hi! How can I help you today?")])) == Turn(END_TOKEN, True)
    feedback = server.requests_for("user-llm")[-1].body["contents"][-1]["parts"][0]["text"]
    assert feedback == "the stop token alone, please"
    assert meter.by_role["user"]["calls"] == 3


def test_validator_down_ends_the_trial_as_an_infrastructure_error_keeping_its_attempts(server, task, dbs):
    server.push(*[Reply(status=500)] * 3, model="validator-llm")      # the validator's model is down
    script_happy_conversation(server, task, [{"explanation": "fine", "result": "no_error"}])
    records = run_local_trial(task, dbs, settings_for(server))
    assert [(r.termination, r.reward, r.final) for r in records] == [("user_stop", 1.0, False),
                                                                    ("infra_error_model", None, True)]
    assert records[0].validation is None                               # no verdict ever came back
    assert "500" in records[1].error or "server" in records[1].error.lower()


def test_code_that_raises_is_a_harness_error_never_a_score(dbs, monkeypatch):
    from ehrbench.benchmarks.ehrchatqa.tools import ToolSuite

    async def broken(self, **args):
        raise KeyError("a bug in a tool")
    monkeypatch.setattr(ToolSuite, "table_search", broken)
    [t] = [t for t in load_tasks(TASK_DIR / "mimic_iv_star" / "eval_incre.jsonl")][:1]
    [record] = run_local_trial(t, dbs)
    assert (record.termination, record.reward, record.valid) == ("infra_error_harness", None, False)
    assert record.error.startswith("KeyError: 'a bug in a tool'") and "in broken" in record.error


def test_validator_allows_ten_attempts_in_all_as_the_original(server, task, dbs):
    rejected = {"explanation": "user revealed all goals at once", "result": "user_error", "broken_rule": "r",
                "evidence": "e"}
    script_happy_conversation(server, task, [rejected] * 10)
    settings = dataclasses.replace(settings_for(server), max_attempts=ehrchatqa_settings().max_attempts)
    records = run_local_trial(task, dbs, settings)
    assert len(records) == 10 and settings.max_attempts == 10
    assert all(r.termination == "rejected_by_validator" and r.reward is None for r in records)
    validator_request = server.requests_for("validator-llm")[0].body
    schema = validator_request["generationConfig"]["responseSchema"]     # either spelling: the API reads both
    assert schema.get("propertyOrdering", schema.get("property_ordering")) == \
        ["explanation", "evidence", "broken_rule", "result"]


def test_a_rejection_without_an_explanation_adds_no_previous_mistake(server, task, dbs):
    script_happy_conversation(server, task, [{"explanation": "", "result": "user_error", "broken_rule": "",
                                              "evidence": ""}, {"explanation": "fine", "result": "no_error"}])
    records = run_local_trial(task, dbs, settings_for(server))
    assert [r.termination for r in records] == ["rejected_by_validator", "user_stop"]
    prompts = [r.body["contents"][0]["parts"][0]["text"] for r in server.requests_for("checker-llm")]
    assert not any("Previous user mistakes" in p for p in prompts)
