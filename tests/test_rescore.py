"""The replay behind `ehrbench-report rescore`: a metered call leaves its exchange on the record, and a cassette of
those exchanges answers a re-run exactly, refusing what the recorded run never asked (the ClinSQL tests run a whole
rescore through Ray and MLflow against the fake server)."""
from __future__ import annotations

import asyncio

import pytest

from ehrbench.llm.base import ChatModel, ChatRequest, ChatResponse, ModelTurnError, Usage
from ehrbench.llm.replay import Cassette, ReplayMiss, ReplayModel
from ehrbench.llm.usage import MeteredModel, UsageMeter
from ehrbench.episode import first_difference
from ehrbench.trial import Message, ToolCall

from .conftest import ROOT


class Scripted(ChatModel):
    provider = "openai-compatible"

    def __init__(self, replies):
        super().__init__("m")
        self.replies = list(replies)

    async def _send(self, request):
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def _ask(text: str, system: str = "s") -> ChatRequest:
    return ChatRequest(messages=[Message("user", text, t=1.0, dt=2.0)], system=system)


def test_recorded_calls_replay_exactly_and_a_question_never_asked_is_refused():
    meter = UsageMeter()
    call = ToolCall("sql_execute", {"query": "SELECT 1"}, id="c1")
    live = Scripted([ChatResponse(text=None, tool_calls=[call], usage=Usage(7, 3), finish_reason="length"),
                     ModelTurnError("blocked by a filter", blocked=True),
                     ChatResponse(text="Score: 1")])
    agent, grader = MeteredModel(live, "agent", meter), MeteredModel(live, "grader", meter)

    async def record():
        first = await agent.complete(_ask("q"))
        with pytest.raises(ModelTurnError):
            await agent.complete(_ask("q2"))
        return first, await grader.complete(_ask("judge this", system="judge"))

    first, judged = asyncio.run(record())
    assert [e["role"] for e in meter.exchanges] == ["agent", "agent", "grader"]

    cassette = Cassette(meter.exchanges)
    agent_r, grader_r = ReplayModel(cassette, "agent", "", ""), ReplayModel(cassette, "grader", "", "")

    async def replay():
        again = await agent_r.complete(ChatRequest(messages=[Message("user", "q", t=9.0)], system="s"))  # timings
        with pytest.raises(ModelTurnError) as turn:                                                     # differ
            await agent_r.complete(_ask("q2"))
        return again, turn.value, await grader_r.complete(_ask("judge this", system="judge"))

    again, turn, judged_again = asyncio.run(replay())
    assert again.tool_calls == [call] and again.usage == Usage(7, 3) and again.finish_reason == "length"
    assert turn.blocked and judged_again.text == "Score: 1" and not cassette.misses
    assert cassette.unused() == 0

    other = Cassette(meter.exchanges)               # a judge asked another question has no recorded answer
    with pytest.raises(ReplayMiss, match="--graders ask"):
        asyncio.run(ReplayModel(other, "grader", "", "").complete(_ask("judge this, without the gold", "judge")))
    changed = Cassette(meter.exchanges)             # an agent shown another prompt is a new run, not a rescore
    with pytest.raises(ReplayMiss, match="differs from the recorded one"):
        asyncio.run(ReplayModel(changed, "agent", "", "").complete(_ask("q", system="another system prompt")))
    unchecked = Cassette(meter.exchanges, check_prompts=False)   # a run whose prompts read a shared memory
    assert asyncio.run(ReplayModel(unchecked, "agent", "", "").complete(_ask("q", "other"))).tool_calls == [call]
    assert unchecked.unused() == 1                  # the agent's second recorded call was never made


def test_transcripts_are_compared_without_their_timings():
    a = [{"role": "user", "content": "q", "t": 0.0, "dt": 1.0}, {"role": "assistant", "content": "x", "t": 1.0}]
    assert first_difference(a, [{**m, "t": 5.0, "dt": 0.0} for m in a]) is None
    b = [a[0], {**a[1], "content": "y"}]
    assert "message 1 (assistant) differs in content" in first_difference(a, b)
    assert "2 messages, the re-run 1" in first_difference(a, a[:1])


def test_a_rescore_refuses_at_once_what_it_cannot_score_again(tmp_path, monkeypatch):
    """Before any Ray or model work, each with its fix: a run that has not finished, a run made before ehrbench kept
    its command, a run whose records hold no model calls, and an option that changes the trials themselves."""
    import json
    from dataclasses import asdict

    import mlflow

    from ehrbench.rescore import COMMAND_ARTIFACT, RescoreError, rescore
    from ehrbench.trial import TrialRecord

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)                       # the rescore goes to the run's working folder (restored after)
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("ehrchatqa", artifact_location=str(tmp_path / "artifacts"))
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(asdict(TrialRecord("mimic_iv_star/incre/1", 0, "user_stop", 1.0))) + "\n")
    command = tmp_path / COMMAND_ARTIFACT
    command.write_text(json.dumps({"overrides": ["benchmark=ehrchatqa_mimic", "model=gpt-4o",
                                                 f"tracking.root={tmp_path / 'mlruns'}"], "cwd": str(ROOT)}))

    def run(status: str, *artifacts) -> str:
        run_id = client.create_run(experiment).info.run_id
        for path in artifacts:
            client.log_artifact(run_id, str(path))
        if status != "RUNNING":
            client.set_terminated(run_id, status)
        return run_id

    running, old = run("RUNNING", command, records), run("FINISHED", records)
    no_calls = run("FINISHED", command, records)
    with pytest.raises(RescoreError, match="is RUNNING: finish it first"):
        rescore(running, ["benchmark.contract=ehrbench"], uri)
    with pytest.raises(RescoreError, match="has no command.json: it was made before ehrbench kept what a rescore"):
        rescore(old, ["benchmark.contract=ehrbench"], uri)
    with pytest.raises(RescoreError, match="its records hold no model calls"):
        rescore(no_calls, ["benchmark.contract=ehrbench"], uri)
    with pytest.raises(RescoreError, match="'trials' changes the trials themselves"):
        rescore(no_calls, ["trials=3"], uri)
    with pytest.raises(RescoreError, match="not found in this store"):
        rescore("ffffffff", ["benchmark.contract=ehrbench"], uri)
