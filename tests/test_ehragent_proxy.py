"""EHRAgent's chat against the original's own: scripted chatbot replies were run through the authors' MedAgent on
pyautogen 0.2.0 (its proxy, run_code and tools on the toy MIMIC-III; knowledge note and debugger stubbed), and the
log main.py wrote, evaluate.py's verdict and main.py's judge were recorded (tests/fixtures/ehragent_proxy_cases.json,
EhrAgent commit 7dfcaf36). The same replies through ehrbench's agent, proxy and scorer under `contract=original`
give the same log, the same completion and success, and the same memory verdict."""
import asyncio
import json
from pathlib import Path

import pytest

from ehrbench.agents.code_sandbox import CellLimits
from ehrbench.benchmarks.ehragent.agent import EhrAgent, Memory
from ehrbench.benchmarks.ehragent.benchmark import score
from ehrbench.benchmarks.ehragent.scoring import original_log
from ehrbench.benchmarks.ehragent.prompts import initial_memory
from ehrbench.benchmarks.ehragent.tasks import Task
from ehrbench.benchmarks.ehragent.tools import CodeInterface
from ehrbench.llm.base import ChatResponse
from ehrbench.llm.openai_compatible import parse_arguments
from ehrbench.trial import Limits, ToolCall, run_trial

from .test_ehragent_tools import toy_database

FIXTURES = Path(__file__).parent / "fixtures"
CASES = json.loads((FIXTURES / "ehragent_proxy_cases.json").read_text())["cases"]
QUESTION = json.loads((FIXTURES / "ehragent_proxy_cases.json").read_text())["question"]


class Scripted:
    """The chatbot's replies, in order, as the OpenAI-compatible client would hand them over; then silence."""

    def __init__(self, replies: list[dict]):
        self.replies = list(replies)

    async def complete(self, request):
        if not self.replies:
            return ChatResponse(text=None)
        reply = self.replies.pop(0)
        response = ChatResponse(text=reply.get("content"))
        if call := reply.get("function_call"):
            args, problem = parse_arguments(call["arguments"])
            response.tool_calls = [ToolCall(call["name"], args, "", raw=call["arguments"])]
            response.malformed = problem
        return response


class Fixed:
    def __init__(self, text: str):
        self.text = text

    async def complete(self, request):
        return ChatResponse(text=self.text)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    db = toy_database(tmp_path_factory.mktemp("toy"))
    tables = {t.lower(): t for t in ("ADMISSIONS", "COST", "D_ICD_DIAGNOSES", "ICUSTAYS")}

    async def one(case):
        task = Task(case["name"], "ehrsql_mimic_iii", QUESTION, "select 1", case["gold"], 1)
        tools = CodeInterface("ehrsql_mimic_iii", db, tables, QUESTION, "2105-12-31 23:59:00", Fixed("REASON"),
                              CellLimits(cpu_s=5, wall_s=20))
        agent = EhrAgent(Scripted(case["replies"]), Fixed("KNOWLEDGE NOTE"), "ehrsql_mimic_iii",
                         Memory(initial_memory("ehrsql_mimic_iii")), proxy=tools)

        async def scored(record):
            return score(task, record, tools, agent, "KNOWLEDGE NOTE", "judged")
        record = await run_trial(task.key, 0, agent, None, tools, scored, Limits(max_steps=11), opening=QUESTION)
        call = agent.unexecuted
        log = original_log(QUESTION, task.answer, agent.opening, record.messages,
                           {"name": call.name, "arguments": call.arguments, "raw": call.raw} if call else None,
                           tools.crash)
        return record, log

    loop = asyncio.new_event_loop()
    try:
        return {c["name"]: loop.run_until_complete(one(c)) for c in CASES}
    finally:
        loop.close()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_chat_is_logged_completed_and_judged_as_the_original(outcomes, case):
    """Every case gives the original's log, word for word, and its verdicts; the deviations (at most two, each
    explained in the fixture) give the verdicts they name."""
    record, log = outcomes[case["name"]]
    want = {**case, **case.get("expected", {})}
    if "deviation" not in case:
        assert log == case["log"]
    assert record.score_parts["completed"] == float(want["evaluate"]["completed"])
    assert record.score_parts["compatible"] == float(want["evaluate"]["correct"])
    assert any(not m["stream"].endswith("/last_cell") for m in record.memory) == want["main_judge"]   # remembered


def test_deviations_are_few_and_explained():
    deviations = [c for c in CASES if "deviation" in c]
    assert len(deviations) <= 2 and all(c["deviation"] for c in deviations)


def test_the_fixture_covers_each_proxy_answer():
    """Function calls, TERMINATE beside a call and mid-text, code blocks, the empty auto-reply, the reply limit,
    malformed and unparsable arguments, an unknown function, a lost question: the cases the contract names."""
    names = {c["name"] for c in CASES}
    assert {"ok", "terminate_dot", "terminate_beside_call", "text_code_block", "text_code_block_tools",
            "empty_auto_reply", "limit", "never_terminates", "none_content", "malformed_args", "raw_newline_args",
            "unknown_function", "no_cell_key", "wrong_answer"} <= names
