"""EHR-ChatQA against the authors' code (glee4810/EHR-ChatQA 5696da8): the fixture holds what its functions returned
when run outside the project on small inputs (`get_action` with a scripted completion, `qwen_parse_tool_calls`,
`metric.py` and `run.py`'s resume arithmetic, `sql_execute` through `Env.step`, the validator's shortcut); ehrbench
must do the same under `benchmark.contract=original`, through the real openai client and the loopback fake server
where a model is involved. Where it deliberately differs, the test says so and docs/benchmarks/ehrchatqa.md lists it."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from ehrbench.agents.tool_calling import EHRBENCH, ORIGINAL, ToolCallingAgent
from ehrbench.benchmarks.ehrchatqa.benchmark import EhrChatQA
from ehrbench.benchmarks.ehrchatqa.tasks import Task
from ehrbench.benchmarks.ehrchatqa.tools import ToolSuite
from ehrbench.judges.validator import SimulationValidator
from ehrbench.llm.base import ChatResponse, split_reasoning
from ehrbench.llm.openai_compatible import OpenAICompatibleModel
from ehrbench.llm.usage import MeteredModel, UsageMeter
from ehrbench.runtime.checkpoint import TrialStore
from ehrbench.trial import Limits, Message, TrialRecord, Turn, run_trial

from .conftest import EHRCHATQA_OPTIONS, FAST
from .fake_llm_server import Reply

CASES = json.loads((Path(__file__).parent / "fixtures" / "ehrchatqa_original_cases.json").read_text())
OVERFLOW = "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens."
BAD = '{"query": "SELECT 1"'


def run(coro):
    return asyncio.run(coro)


# --- reasoning text (item 4) ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES["think"], ids=lambda c: c["name"])
def test_a_reply_keeps_what_follows_the_last_think_as_the_original_keeps_it(case):
    assert (split_reasoning(case["text"])[0] or "") == case["kept"]


def test_a_qwen_agents_thinking_is_cut_as_the_original_cuts_it_and_no_one_elses(server, monkeypatch):
    """The client passes the reply whole; the agent cuts `<think>...</think>` where its benchmark's original does:
    EHR-ChatQA's for a Qwen model (`'qwen' in model`), every model under contract=ehrbench."""
    from ehrbench.agents.tool_calling import ToolCallingAgent
    from ehrbench.benchmarks.ehrchatqa.benchmark import EhrChatQA
    from ehrbench.llm.base import ChatRequest
    from ehrbench.llm.usage import MeteredModel, UsageMeter
    from ehrbench.trial import Message

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    reply = "<think>maybe <answer>5</answer>?</think>There are <answer>6</answer> patients."
    model = OpenAICompatibleModel("qwen3-32b", base_url=server.url + "/v1", retry=FAST)
    server.push(Reply(text=reply))
    assert run(model.complete(ChatRequest([Message("user", "How many?")]))).text == reply      # whole, from the client
    original, ehrbench = EhrChatQA({}), EhrChatQA({"contract": "ehrbench"})
    assert original.cuts_reasoning({"model": "Qwen/Qwen3-32B"}) and not original.cuts_reasoning({"model": "gpt-4o"})
    assert ehrbench.cuts_reasoning({"model": "gpt-4o"})
    for cut, said in ((True, "There are <answer>6</answer> patients."), (False, reply)):
        server.push(Reply(text=reply))
        agent = ToolCallingAgent(MeteredModel(model, "agent", UsageMeter()), "sys", [], cut_reasoning=cut)
        assert run(agent.act([Message("user", "How many?")])).content == said


# --- the agent's failed turns (items 1, 2, 5) -------------------------------------------------------------------------
SCENARIOS = {   # the fixture's scenario -> what the fake server answers (the same model behaviour, over HTTP)
    "context_window_exceeded_first_call": [Reply(status=400, message=OVERFLOW)],
    "invalid_json_args_always (1000 attempts)": [Reply(tool="sql_execute", raw_args=BAD)] * 400,
    "invalid_json_once_then_valid": [Reply(tool="sql_execute", raw_args=BAD),
                                     Reply(tool="sql_execute", args={"query": "SELECT 1"})],
    "args_valid_json_but_not_object ('[]') always": [Reply(tool="sql_execute", raw_args="[]")] * 400,
    "invalid_json_then_context_overflow (stale message returned)": [
        Reply(text="partial", tool="sql_execute", raw_args='{"query": '), Reply(status=400, message=OVERFLOW)],
    "finish_reason_length_truncated_text": [Reply(text="The number of patients is", finish="length")],
    "finish_reason_length_truncated_tool_args (then same again, 1000x)": [
        Reply(tool="sql_execute", raw_args='{"query": "SELECT coun', finish="length")] * 400,
    "content_filter_content_None_no_tools": [Reply(text=None, finish="content_filter")],
    "empty_string_content_no_tools": [Reply(text="")],
    "rate_limit_twice_then_ok": [Reply(status=429), Reply(status=429), Reply(text="hi")],
    "generic_api_error_then_ok": [Reply(status=500), Reply(text="hi")],
    "content_plus_tool_call": [Reply(text="Let me look that up.", tool="table_search", args={})],
}
ELSEWHERE = {   # scenarios this test cannot replay, and where they are covered
    "empty_choices": "ehrbench retries an HTTP 200 without choices as a provider glitch (the original passes an empty "
                     "reply on): a deliberate difference in docs/benchmarks/ehrchatqa.md; test_llm_clients covers the "
                     "retry",
    "two_parallel_tool_calls": "the fake server sends one call a reply; ehrbench asks for parallel_tool_calls=false "
                               "and keeps the first call, as the original (test_llm_clients)",
}


def test_every_scenario_of_the_fixture_is_replayed_or_accounted_for():
    assert {c["scenario"] for c in CASES["get_action"]} == set(SCENARIOS) | set(ELSEWHERE)


class Asker:
    """Asks once, then keeps the conversation going (never ends it)."""

    async def reply(self, history):
        return Turn("How many patients?" if not history else "Anything else?")


class OneTable:
    async def call(self, name, arguments):
        return "[(1,)]"


class Counting:
    calls = 0

    async def complete(self, request):
        Counting.calls += 1
        return ChatResponse('{"explanation": "fine", "evidence": "", "broken_rule": "", "result": "no_error"}')


@pytest.mark.parametrize("case", [c for c in CASES["get_action"] if c["scenario"] in SCENARIOS],
                         ids=lambda c: c["scenario"][:40])
def test_a_failed_agent_turn_goes_on_as_the_original_s_get_action(case, server, monkeypatch):
    """One agent step, through the real openai client, under the original contract's policy (3 s waits shortened,
    the trial's time limit 1.5 s): what the agent does with the answer (respond or a tool call, and with what), whether
    the conversation ends after the user's next reply (an overflow), whether the time limit fires (a call the model
    never forms), whether the model was asked again with the very same conversation, and whether the validator is
    asked or skipped (only a turn with no text at all, the original's `content is None`, skips it)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    server.push(*SCENARIOS[case["scenario"]])
    limits = Limits(max_steps=1, time_limit_s=1.5)
    policy = dataclasses.replace(ORIGINAL, reask_wait_s=0.02, reask_budget_s=limits.time_limit_s)
    agent = ToolCallingAgent(MeteredModel(OpenAICompatibleModel("gpt-4o", base_url=server.url + "/v1", retry=FAST),
                                          "agent", UsageMeter()), "sys", [], policy=policy)

    async def score(record):
        return 1.0
    record = run(run_trial("k", 0, agent, Asker(), OneTable(), score, limits))
    if case["timeout_fires"]:
        assert record.termination == "time_limit" and record.reward == 0.0
        assert len(server.requests) > 2           # asked again and again, never told why
    else:
        first = next(m for m in record.messages if m["role"] == "assistant")
        action = case["action"]
        if action["name"] == "respond":
            assert first["tool_call"] is None and (first["content"] or "") == action["kwargs"]["content"]
        else:
            assert (first["tool_call"]["name"], first["tool_call"]["arguments"]) == (action["name"], action["kwargs"])
        assert (record.termination == "context_overflow") == case["done"]
        if case["done"]:
            assert record.reward == 0.0 and record.messages[-1]["content"] == "Anything else?"
    bodies = [r.body["messages"] for r in server.requests]
    assert all(b == bodies[0] for b in bodies)        # a re-ask sends the same conversation: the model is not told
    if case["sleep_s"] and not case["timeout_fires"] and "rate_limit" not in case["scenario"] and \
            "api_error" not in case["scenario"]:
        assert len(server.requests) == 1 + case["sleep_s"] // 3      # one re-ask per 3 s wait of the original
    Counting.calls = 0
    validator = SimulationValidator(Counting(), "sys", max_steps=30)
    verdict = run(validator.judge("p", dataclasses.replace(record, termination="user_stop")))
    if not case["timeout_fires"]:                # the original validates no timed-out trial at all
        assert ("skipped" in verdict) == (case["validator"] == "skipped") and Counting.calls == (
            case["validator"] == "llm")


def test_a_finished_reply_with_neither_text_nor_a_call_is_validated_only_where_the_original_validates(server,
                                                                                                   monkeypatch):
    """finish "stop", content null, no call: the original keeps `content: None`, which its validator skips; under
    `contract=ehrbench` it is an empty reply, judged."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    for policy, content, judged in ((ORIGINAL, None, False), (EHRBENCH, "", True)):
        server.push(Reply(text=None))
        agent = ToolCallingAgent(MeteredModel(OpenAICompatibleModel("gpt-4o", base_url=server.url + "/v1",
                                                                    retry=FAST), "agent", UsageMeter()),
                                 "sys", [], policy=policy)

        async def score(record):
            return 1.0
        record = run(run_trial("k", 0, agent, Asker(), OneTable(), score, Limits(max_steps=1, time_limit_s=5)))
        assert next(m for m in record.messages if m["role"] == "assistant")["content"] == content
        Counting.calls = 0
        verdict = run(SimulationValidator(Counting(), "sys", max_steps=30).judge(
            "p", dataclasses.replace(record, termination="user_stop")))
        assert ("skipped" in verdict) != judged and Counting.calls == int(judged)


# --- metrics and resume (item 3) -----------------------------------------------------------------------------------
def _task(key: str) -> Task:
    return Task(key, "incre", "mimic_iv_star", "q", "SELECT 1", [[1]])


@pytest.mark.parametrize("case", [c for c in CASES["metrics"] if not c["name"].startswith("E_")],
                         ids=lambda c: c["name"][:30])
def test_metrics_are_metric_py_s_or_withheld_where_it_refuses_and_a_resume_reruns_what_run_py_reruns(case, tmp_path):
    """(Case E, six scored trials of a task for k=5, cannot arise here: a run of k trials reports trials 0..k-1.)
    A trial with reward None is one the validator rejected to the end. Where metric.py computes, the report's
    figures are its figures; where it raises, the report withholds them (`partial/` metrics, no headline); a task
    whose every trial is None, which metric.py silently leaves out, is withheld too (a difference
    docs/benchmarks/ehrchatqa.md lists).
    A resume runs again exactly the trials run.py's resume runs again."""
    k = case["k"]
    tasks = [_task(key) for key in case["rewards_by_task"]]
    records = [TrialRecord(t.key, i, "user_stop" if r is not None else "rejected_by_validator", r)
               for t in tasks for i, r in enumerate(case["rewards_by_task"][t.task_id])]
    report = EhrChatQA(dict(EHRCHATQA_OPTIONS)).report(records, tasks, k, tmp_path)
    short = any(sum(r is not None for r in rs) < k for rs in case["rewards_by_task"].values())
    assert bool(report.withheld) == short
    if "original_raises" in case:
        assert report.withheld and f"incre/SR-{k}" not in report.metrics and f"partial/incre/SR-{k}" in report.metrics
        assert report.text.startswith("PARTIAL RESULTS") and not report.headline
    elif not short:
        got = report.metrics
        got = {name: got[f"incre/{name}"] for name in (f"SR-{k}", f"Pass_at_{k}", f"Pass_hat_{k}")}  # the paper's
        assert (round(got[f"SR-{k}"], 1), round(got[f"Pass_at_{k}"], 1), round(got[f"Pass_hat_{k}"], 1)) == \
            (case["original"]["SR"], case["original"]["Pass@k"], case["original"]["Pass^k"])
    wanted = {(t.key, i) for t in tasks for i in range(k)}
    again = Counter(key.rsplit("/", 1)[1] for key, _ in wanted - TrialStore.finished(records))
    assert again == Counter(str(t) for t in case["resume_reruns"])


def test_under_the_ehrbench_contract_partial_results_are_reported_over_complete_tasks(tmp_path):
    tasks = [_task("0"), _task("1")]
    records = [TrialRecord(tasks[0].key, i, "user_stop", 1.0) for i in range(3)] + \
        [TrialRecord(tasks[1].key, 0, "rejected_by_validator", None)]
    report = EhrChatQA({**EHRCHATQA_OPTIONS, "contract": "ehrbench"}).report(records, tasks, 3, tmp_path)
    assert not report.withheld and report.metrics["all_flows/SR-3"] == 100.0 and report.metrics["incomplete"] == 1


# --- sql_execute (items 7, 8) --------------------------------------------------------------------------------------
def test_sql_execute_answers_as_the_original_s_text_based_sql_execute(tmp_path):
    """The fixture's 24 calls on the same small table: rows, the Note, k as given, SQLite's errors worded as
    SQLAlchemy words them, `:name` read as a bind parameter (inside a literal too), `\\:` unescaped, Python's own
    errors for bad arguments. One deliberate difference: a statement that writes (here CREATE TEMP TABLE, which the
    original's immutable file allows) is refused, as every write is."""
    from ehrbench.db.database import Database

    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE patients (id INTEGER, name TEXT, admittime TEXT, val REAL)")
        c.executemany("INSERT INTO patients VALUES (?,?,?,?)",
                      [(i, f"p{i}", f"2100-01-{(i % 28) + 1:02d} 12:30:00", i / 3 if i % 5 else None)
                       for i in range(1, 106)])
        c.execute("INSERT INTO patients VALUES (999, 'note :abc here', '2100-12-31 23:59:00', 1.5)")

    from ehrbench.runtime.hosts import LocalHost as Host

    suite = ToolSuite("mimic_iv_star", Host(Database(path, "mimic_iv_star")), None, None, {}, bind_parameters=True)
    link = re.compile(r"sqlalche\.me/e/\d+/")       # SQLAlchemy's major version in its error links
    differ = []
    for case in CASES["sql_execute"]:
        got = run(suite.call("sql_execute", dict(case["arguments"])))
        if link.sub("", got) != link.sub("", case["observation"]):
            differ.append(case["case"])
    assert differ == ["ddl_no_rows"]
    plain = ToolSuite("mimic_iv_star", Host(Database(path, "mimic_iv_star")), None, None, {})
    assert run(plain.call("sql_execute", {"query": "SELECT id FROM patients WHERE name = 'note :abc here'"})) == \
        "[(999,)]"                                   # the ehrbench contract reads the SQL as written


def test_tool_results_carry_the_tool_s_name_as_the_original_sends_them():
    from ehrbench.llm.openai_compatible import to_openai_messages
    from ehrbench.trial import Message, ToolCall

    sent = to_openai_messages("sys", [Message("user", "q"),
                                      Message("assistant", None, tool_call=ToolCall("sql_execute", {"query": "x"},
                                                                                    "call_7")),
                                      Message("tool", "[(1,)]", tool_call_id="call_7")])
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_7", "name": "sql_execute", "content": "[(1,)]"}


# --- the self-check: mutants scored independently, a reference that reads the database -----------------------------
def _pick_tasks():
    from ehrbench.benchmarks.ehrchatqa.tasks import load_tasks

    from .conftest import TASK_DIR

    def single(t):
        return len(t.gold_answer) == 1 and len(t.gold_answer[0]) == 1 and str(t.gold_answer[0][0]) not in ("0", "0.0")
    picked = []
    for flow in ("incre", "adapt"):
        picked += [t for t in load_tasks(TASK_DIR / "mimic_iv_star" / f"eval_{flow}.jsonl") if single(t)][:2]
    return picked


class Mutant:
    """Runs one query, then gives the same answer to every user turn."""

    def __init__(self, query: str, answer: str):
        self.query, self.answer = query, answer

    async def act(self, history):
        from ehrbench.trial import Message, ToolCall

        if not any(m.tool_call for m in history):
            return Message("assistant", tool_call=ToolCall("sql_execute", {"query": self.query}, id="q1"))
        return Message("assistant", self.answer)


class ScriptedModel:
    """A model whose replies (or failures) are given in order; the last repeats."""

    def __init__(self, *steps):
        self.steps = list(steps)

    async def complete(self, request):
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        return step


def _failing(task, error):
    from ehrbench.trial import ToolCall

    model = ScriptedModel(ChatResponse(tool_calls=[ToolCall("sql_execute", {"query": task.gold_sql}, "q1")]), error)
    return ToolCallingAgent(model, "sys", [], policy=ORIGINAL)


def _gold(task) -> str:
    return str(task.gold_answer[0][0])


def _digits(task) -> str:
    """The gold value as the rule compares it (number words as digits, as the original's table maps them: an answer
    "one days" does not hold the gold "1"; "1 days" does)."""
    from ehrbench.benchmarks.ehrchatqa.scoring import gold_answers

    return gold_answers(task.gold_answer)[0]


MUTANTS = {   # name: (agent for (task, trial), expected reward for (task, trial), worked out from the rules)
    "wrong answer": (lambda t, i: Mutant("SELECT 'nothing like it'", "<answer>unknown</answer>"),
                     lambda t, i: 0.0),
    "lenient match accepts (extra column; a unit the rule drops)": (
        lambda t, i: Mutant(f"SELECT *, 'extra' FROM ({t.gold_sql})", f"<answer>{_digits(t)} days</answer>"),
        lambda t, i: 1.0),
    "lenient match rejects (no rows; a word left over)": (
        lambda t, i: Mutant(f"SELECT * FROM ({t.gold_sql}) LIMIT 0", f"<answer>{_digits(t)} patients</answer>"),
        lambda t, i: 0.0),
    "AdaptQA answer with leftovers (IncreQA scores the query, not the text)": (
        lambda t, i: Mutant(t.gold_sql, f"<answer>{_digits(t)}, 7</answer>"),
        lambda t, i: 1.0 if t.task_type == "incre" else 0.0),
    "right on trials 0 and 1 only": (
        lambda t, i: Mutant(t.gold_sql if i < 2 else "SELECT 'nothing like it'",
                            f"<answer>{_gold(t) if i < 2 else 'unknown'}</answer>"),
        lambda t, i: 1.0 if i < 2 else 0.0),
    "context overflow after the right query": (
        lambda t, i: _failing(t, __import__("ehrbench.trial").trial.InfrastructureError(
            "HTTP 400: maximum context length", agent_caused=True)),
        lambda t, i: 0.0),
    "crash mid-conversation (the model's API down for good)": (
        lambda t, i: _failing(t, __import__("ehrbench.trial").trial.InfrastructureError("HTTP 500 x8")),
        lambda t, i: None),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutants_score_what_the_rules_give_on_paper(name, dbs, tmp_path):
    """Each mutant through the benchmark's own episode (its tools on the trial's database, its scorer), the scripted
    user and the original contract, 3 trials on 2 IncreQA and 2 AdaptQA tasks. SR-3, Pass@3 and Pass^3 are
    computed here from the expected rewards by the formulas (math.comb), not by the harness; a crash leaves every
    trial unscored, so the figures are withheld."""
    from math import comb

    from ehrbench.benchmark import TrialSettings
    from ehrbench.benchmarks.ehrchatqa.scripted_user import ScriptedUser

    from .conftest import local_hosts

    make, expected = MUTANTS[name]
    bench = EhrChatQA(dict(EHRCHATQA_OPTIONS))
    settings = TrialSettings(benchmark="ehrchatqa", benchmark_options=EHRCHATQA_OPTIONS)
    tasks, records, k = _pick_tasks(), [], 3
    for t in tasks:
        for i in range(k):
            episode = bench.episode(t, i, local_hosts(dbs), settings, UsageMeter(), i)
            record = run(run_trial(t.key, i, make(t, i), ScriptedUser(t.instruction, i), episode.tools,
                                   episode.score, settings.limits, greeting=episode.greeting))
            assert record.reward == expected(t, i), (t.key, i, record.termination, record.error)
            records.append(record)
    report = bench.report(records, tasks, k, tmp_path)
    rewards = {t.key: [expected(t, i) for i in range(k)] for t in tasks}
    if any(r is None for rs in rewards.values() for r in rs):
        assert report.withheld and not report.headline and f"all_flows/SR-{k}" not in report.metrics
        return
    c = {key: sum(rs) for key, rs in rewards.items()}
    sr = 100 * sum(c[key] / k for key in c) / len(c)
    hat = 100 * sum(comb(int(c[key]), k) / comb(k, k) for key in c) / len(c)
    at = 100 * sum(1 - comb(k - int(c[key]), k) / comb(k, k) for key in c) / len(c)
    got = report.metrics
    assert (got[f"all_flows/SR-{k}"], got[f"all_flows/Pass_hat_{k}"], got[f"all_flows/Pass_at_{k}"]) == \
        pytest.approx((sr, hat, at))


def test_the_reference_answers_from_what_sql_execute_returned_not_from_the_gold(dbs):
    """The reference runs the task's query through the tool and answers with the rows it got back: with the task's
    gold answer replaced by another value (the database unchanged), it scores 0 on both flows, so its 100 on the
    shipped tasks says the database gives back what the task files say."""
    from .conftest import ehrchatqa_settings, run_local_trial

    for t in _pick_tasks():
        [right] = run_local_trial(t, dbs, ehrchatqa_settings())
        moved = dataclasses.replace(t, gold_answer=[["a value the database does not hold"]])
        [wrong] = run_local_trial(moved, dbs, ehrchatqa_settings())
        assert (right.reward, wrong.reward) == (1.0, 0.0), t.key
        answers = [m["content"] for m in wrong.messages if m["role"] == "assistant" and m["content"]]
        assert not any("a value the database does not hold" in a for a in answers)


def test_the_contract_is_checked_at_start_and_recorded_with_its_departures():
    from ehrbench.llm.base import ConfigurationError

    for bad, says in (({"contract": "both"}, "benchmark.contract='both': choose one of ['original', 'ehrbench']"),
                      ({"reask_wait_s": -1}, "benchmark.reask_wait_s=-1: must be a number of seconds, 0 or more")):
        with pytest.raises(ConfigurationError) as e:
            EhrChatQA({**EHRCHATQA_OPTIONS, **bad}).check()
        assert str(e.value).startswith(says)
    assert EhrChatQA(dict(EHRCHATQA_OPTIONS)).contract() == ("original", [])
    name, departures = EhrChatQA({**EHRCHATQA_OPTIONS, "contract": "ehrbench", "max_observation_chars": 50000}).contract()
    assert name == "ehrbench" and len(departures) == 2 and "max_observation_chars=50000" in departures[1]


def test_the_originals_cost_figure_leaves_out_the_attempts_it_does_not_score():
    """metric.py sums the cost of the attempts with a reward only: a simulation the validator rejected is not in
    its figure, while ehrbench's cost_usd/<role> counts it (it was paid for). Both are logged, under their names."""
    from ehrbench.__main__ import usage_metrics
    from ehrbench.benchmarks.ehrchatqa.benchmark import original_costs
    from ehrbench.trial import TrialRecord

    rejected = TrialRecord("t", 0, "rejected_by_validator", None, final=False,
                           usage={"agent": {"cost_usd": 1.0}, "user": {"cost_usd": 0.1}, "validator": {"cost_usd": 0.5}})
    scored = TrialRecord("t", 0, "user_stop", 1.0, usage={"agent": {"cost_usd": 2.0}, "user": {"cost_usd": 0.25},
                                                         "verifier": {"cost_usd": 0.125}, "reflection": {"cost_usd": 0.125},
                                                         "validator": {"cost_usd": 0.5}})
    assert original_costs([rejected, scored]) == {"cost_usd_original/agent": 2.0, "cost_usd_original/user": 0.5,
                                                  "cost_usd_original/eval": 0.5, "cost_usd_original/all": 3.0}
    assert usage_metrics([rejected, scored])["cost_usd/all"] == 4.6


# --- calls written as text (N2): the original's Gemini and Llama parsers -------------------------------------------
WRITTEN = [   # (the agent's model, what it wrote, the call read (name, arguments) or None, the reply's text)
    ("gemini-2.5-flash", 'Let me look.\n```tool_call\nprint(default_api.column_search(table_names="demographics, '
     'hospitaladmissions"))\n```', ("column_search", {"table_names": "demographics, hospitaladmissions"}),
     "Let me look."),
    ("gemini-2.0-flash", '```tool_call\nsql_execute(query="SELECT name FROM t WHERE x = 1")\n```',
     ("sql_execute", {"query": "SELECT name FROM t WHERE x = 1"}), None),          # paren-free SQL: whole
    ("gemini-2.0-flash", '```tool_call\nsql_execute(query="SELECT COUNT(*) FROM t")\n```',
     ("sql_execute", {}), None),                         # the arguments end at the first ")": none read
    ("gemini-2.5-flash", '```tool_code\nvalue_similarity_search(table="lab", column="lab_name", value="gluc", k=3)'
     '\n```', None, '```tool_code\nvalue_similarity_search(table="lab", column="lab_name", value="gluc", k=3)\n```'),
    ("gemini-2.5-flash", 'Sure.\n```tool_call\nvalue_substring_search(table="lab", column="lab_name", value="gl", '
     'k="5")\n```', ("value_substring_search", {"table": "lab", "column": "lab_name", "value": "gl", "k": "5"}),
     "Sure."),                                            # every value a string
    ("llama-3.3-70b-instruct", 'I will query.\n```json\n{"name": "sql_execute", "parameters": {"query": '
     '"SELECT 1"}}\n```', ("sql_execute", {"query": "SELECT 1"}), "I will query."),
    ("llama-3.3-70b-instruct", '```json\n{"name": "table_search", "parameters": "{\\"tool_input\\": \\"\\"}"}\n```',
     ("table_search", {"tool_input": ""}), ""),           # parameters as a JSON string
    ("llama-3.3-70b-instruct", 'Here:\n```json\n{"answer": oops}\n```', None,
     'Here:\n```json\n{"answer": oops}\n```'),            # not JSON: the reply is text
    ("gpt-4o", '```tool_call\nsql_execute(query="SELECT 1")\n```', None,
     '```tool_call\nsql_execute(query="SELECT 1")\n```'),  # only Gemini's and Llama's are read
]


@pytest.mark.parametrize("model, written, call, text", WRITTEN, ids=lambda v: str(v)[:30])
def test_calls_written_as_text_are_read_as_the_original_reads_them(model, written, call, text):
    from ehrbench.benchmarks.ehrchatqa.text_calls import text_call_reader

    read = text_call_reader(model)
    parsed = read(written) if read else None
    if parsed is None:
        assert call is None and text == written
        return
    got_text, calls = parsed
    assert got_text == text and [(c.name, c.arguments) for c in calls[:1]] == ([call] if call else [])


@pytest.mark.parametrize("written", ['```tool_call\n"no call here"\n```',
                                     '```json\n{"name": "sql_execute"}\n```', '```json\n{"parameters": {}}\n```',
                                     '```json\n{"name": "x", "parameters": [1]}\n```'])
def test_a_written_call_the_original_cannot_read_raises_and_is_asked_again(written):
    from ehrbench.benchmarks.ehrchatqa.text_calls import text_call_reader

    with pytest.raises(ValueError):
        text_call_reader("gemini-2.5-flash" if "tool_call" in written else "llama-3.3-70b")(written)


def test_a_gemini_agents_written_call_runs_and_goes_back_as_a_call(server, monkeypatch):
    """Through the real google-genai client: the written call runs as the agent's call (the user never sees it),
    the text before it is kept beside the call, and the next request carries a functionCall part, not the text;
    under `contract=ehrbench` the same reply is a message to the user."""
    from ehrbench.llm.gemini import GeminiModel

    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    written = WRITTEN[0][1]
    for contract, runs in (("original", True), ("ehrbench", False)):
        bench = EhrChatQA({**EHRCHATQA_OPTIONS, "contract": contract})
        server.push(Reply(text=written), Reply(text="Done."))
        agent = ToolCallingAgent(MeteredModel(GeminiModel("gemini-2.5-flash", base_url=server.url, retry=FAST),
                                              "agent", UsageMeter()), "sys", [],
                                 read_text_calls=bench.text_calls({"model": "gemini-2.5-flash"}))
        first = run(agent.act([Message("user", "Which tables hold admissions?")]))
        if runs:
            assert (first.content, first.tool_call.name, first.tool_call.arguments) == \
                ("Let me look.", "column_search", {"table_names": "demographics, hospitaladmissions"})
            run(agent.act([Message("user", "Which tables?"), first,
                           Message("tool", "[...]", tool_call_id=first.tool_call.id)]))
            parts = server.requests[-1].body["contents"][1]["parts"]
            assert parts == [{"text": "Let me look."}, {"functionCall": {
                "name": "column_search", "args": {"table_names": "demographics, hospitaladmissions"}}}]
        else:
            assert first.tool_call is None and first.content == written
            server.requests.clear()
            server.script.clear()


LITELLM_GEMINI_USER = json.loads((Path(__file__).parent / "fixtures" /
                                  "ehrchatqa_litellm_gemini_user.json").read_text())


@pytest.mark.parametrize("case", sorted(LITELLM_GEMINI_USER["cases"]))
def test_a_gemini_user_is_sent_the_agents_empty_reply_as_the_originals_litellm_sends_it(case, server, monkeypatch):
    """An agent reply with no text (an overflow, a cut-off, a blocked or an empty turn) reaches a Gemini user as
    litellm sends it for the original (recorded: the empty message dropped, the request ending on the user's own
    turn); a reply with text as a user turn."""
    from ehrbench.llm.base import ChatRequest
    from ehrbench.llm.gemini import GeminiModel

    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    recorded = LITELLM_GEMINI_USER["cases"][case]
    system, *conversation = recorded["messages"]
    server.push(Reply(text="ok"))
    run(GeminiModel("gemini-2.0-flash", base_url=server.url, retry=FAST).complete(ChatRequest(
        [Message(m["role"], m["content"]) for m in conversation], system=system["content"], temperature=1.0)))
    body = server.requests[-1].body
    assert body["contents"] == recorded["sent_contents"]
    assert body["systemInstruction"]["parts"] == recorded["sent_system"]["parts"]


def test_a_model_run_departs_where_its_user_validator_embedder_or_web_search_is_not_the_papers():
    """user=auto's choice for a model (the paper's user and validator) departs in nothing but the web search and
    the offline embedder; the scripted user with a model departs and names its figures apart; the reference
    agent's scripted user is the self-check, not a departure."""
    from ehrbench.benchmark import TrialSettings
    from ehrbench.reports import Report

    bench = EhrChatQA(dict(EHRCHATQA_OPTIONS))
    papers = TrialSettings(agent="tool_calling", user="llm", user_model={"model": "gemini-2.0-flash"},
                           validator_model={"model": "gemini-2.5-flash"})
    openai = {"provider": "openai", "model": None}
    assert [d.split(" ")[0] for d in bench.run_departures(papers, openai)] == ["web_search=vocabulary"]
    assert [d.split(" ")[0] for d in bench.run_departures(papers, {"provider": "local"})] == \
        ["data.embedder.provider=local", "web_search=vocabulary"]
    assert bench.figures_prefix(papers) == ""
    departs = dataclasses.replace(papers, user_model={"model": "gpt-4o"}, user_strategy="plain", user_temperature=0.7,
                                  validator_model=None)
    assert [d.split(" ")[0] for d in bench.run_departures(departs, openai)] == \
        ["user", "user.strategy=plain", "user.temperature=0.7", "validator=none", "web_search=vocabulary"]
    scripted = TrialSettings(agent="tool_calling", user="scripted")
    assert bench.run_departures(scripted, openai)[0].startswith("user=scripted with a model-backed agent")
    assert bench.figures_prefix(scripted) == "scripted_user/"
    assert bench.figures_prefix(TrialSettings(agent="reference", user="scripted")) == ""
    assert bench.recorded_contract(scripted, openai)[1][0].startswith("user=scripted")
    renamed = Report("t", {"incre/SR-5": 50.0}, {"incre SR-5": 50.0}, {"all/curve/Pass_hat_k": [1.0]}).renamed(
        "scripted_user/")
    assert (renamed.metrics, renamed.headline, list(renamed.curves)) == (
        {"scripted_user/incre/SR-5": 50.0}, {"scripted_user/incre SR-5": 50.0}, ["scripted_user/all/curve/Pass_hat_k"])
