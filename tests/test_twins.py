"""Twin runs (docs/twins.md): each fixture holds what the authors' own harness sent every model role, in order, and
the scores it gave, recorded on ehrbench's world with one script of replies; ehrbench, answered from the same script,
must send the same requests and give the same scores, apart from the rows of the benchmark's Differences table the
fixture names. And the check can fail: a changed word, parameter, tool string or score is seen."""
from __future__ import annotations

import copy
import json

import pytest

from .twins import ehragent, ehrchatqa
from .twins.kit import FIXTURES, Fixture, compare, compare_scores, normalise, replay, summary
from .twins.record import build_databases, database_digest

COMPARED = {"agent", "user", "verifier", "reflection", "validator"}    # the embedder's batches are the index's


def _task_dir(tmp_path, tasks: list[dict]):
    folder = tmp_path / "tasks"
    for t in tasks:
        path = folder / t["db_id"] / f"eval_{t['task_type']}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps(rows + [t]))
    for db in ("mimic_iv_star", "eicu_star"):       # every flow file exists, empty where no task is replayed
        for flow in ("incre", "adapt"):
            path = folder / db / f"eval_{flow}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.write_text("[]")
    return folder


@pytest.fixture(scope="module")
def ehrchatqa_runs(ray_cluster, shared_world, tmp_path_factory):
    """Every EHR-ChatQA scenario replayed once through ehrbench, side by side on the session's cluster (each run
    spends most of its time waiting, as the original does, before asking again)."""
    from concurrent.futures import ThreadPoolExecutor

    fixtures = [Fixture.load(path) for path in sorted(FIXTURES.glob("ehrchatqa_*.json.gz"))]
    databases = build_databases(sorted({t["db_id"] for f in fixtures for t in f.tasks}), shared_world / "gen")
    digests = {db: database_digest(p) for db, p in databases.items()}
    for fixture in fixtures:
        assert {db: digests[db] for db in fixture.provenance["world"]["databases"]} == \
            fixture.provenance["world"]["databases"], \
            f"{fixture.scenario} was recorded on another world: record it again (docs/twins.md)"

    def run(fixture):
        tmp = tmp_path_factory.mktemp(f"twin-{fixture.scenario}")
        overrides = [*fixture.ehrbench["overrides"], f"data.root={shared_world / 'gen'}",
                     f"data.index_cache={tmp / 'vi'}"]
        return fixture, replay(fixture, ehrchatqa.router(fixture.tasks), overrides, {
            "task_dir": str(_task_dir(tmp, fixture.tasks)), "address": ray_cluster.address}, tmp / "mlruns")
    with ThreadPoolExecutor(len(fixtures)) as pool:
        return {f.scenario: out for f, out in zip(fixtures, pool.map(run, fixtures))}


SCENARIOS = sorted(p.name.split("_", 1)[1].split(".")[0] for p in FIXTURES.glob("ehrchatqa_*.json.gz"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ehrchatqa_sends_what_its_authors_harness_sent_and_scores_the_same(ehrchatqa_runs, scenario):
    fixture, got = ehrchatqa_runs[scenario]
    problems = compare(fixture, got.requests, COMPARED)
    assert not problems, summary(problems)
    assert not compare_scores(fixture, got.scores)


def test_the_twin_check_sees_one_changed_word_parameter_tool_string_or_score(ehrchatqa_runs):
    fixture, got = ehrchatqa_runs["clean"]
    task = "mimic_iv_star/incre/0"
    for role, change in (("agent", lambda r: r["messages"][0].__setitem__("content", r["messages"][0]["content"]
                                                                          .replace("DB agent", "database agent", 1))),
                         ("agent", lambda r: r.__setitem__("temperature", 0.2)),
                         ("agent", lambda r: next(m for m in r["messages"] if m["role"] == "tool")
                          .__setitem__("content", "Error: changed")),
                         ("validator", lambda r: r.pop("response_format"))):
        mutated = copy.deepcopy(got.requests)
        change(mutated[task][role][-1]["body"])
        assert compare(fixture, mutated, COMPARED), (role, "a change no comparison saw")
    scores = {**got.scores, task: [0.0]}
    assert compare_scores(fixture, scores)


@pytest.fixture(scope="module")
def ehragent_runs(ray_cluster, shared_world, tmp_path_factory):
    """Every EHRAgent scenario replayed once through ehrbench (its questions one at a time per database, in the
    seeded order, as the original's memory needs), side by side on the session's cluster."""
    from concurrent.futures import ThreadPoolExecutor

    fixtures = [Fixture.load(path) for path in sorted(FIXTURES.glob("ehragent_*.json.gz"))]
    databases = build_databases(sorted({ehragent.db_of(t) for f in fixtures for t in f.tasks}), shared_world / "gen")
    for fixture in fixtures:
        assert {db: database_digest(databases[db]) for db in fixture.provenance["world"]["databases"]} == \
            fixture.provenance["world"]["databases"], f"{fixture.scenario} was recorded on another world"

    def run(fixture):
        tmp = tmp_path_factory.mktemp(f"twin-ehragent-{fixture.scenario}")
        for db, name in ehragent.FILES.items():
            items = [t for t in fixture.tasks if ehragent.db_of(t) == db]
            (tmp / name).write_text("\n".join(json.dumps(t) for t in items) if db == "treqs" else json.dumps(items))
        got = replay(fixture, ehragent.router(fixture.tasks), [*fixture.ehrbench["overrides"],
                                                               f"data.root={shared_world / 'gen'}"],
                     {"task_dir": str(tmp), "address": ray_cluster.address}, tmp / "mlruns")
        got.scores = {r.task_key: [[r.reward, r.score_parts["completed"]]] for r in got.records if r.final and r.valid}
        return fixture, got
    with ThreadPoolExecutor(len(fixtures)) as pool:
        return {f.scenario: out for f, out in zip(fixtures, pool.map(run, fixtures))}


@pytest.mark.parametrize("scenario", sorted(p.name.split("_", 1)[1].split(".")[0]
                                            for p in FIXTURES.glob("ehragent_*.json.gz")))
def test_ehragent_sends_what_its_authors_harness_sent_and_scores_the_same(ehragent_runs, scenario):
    fixture, got = ehragent_runs[scenario]
    problems = compare(fixture, got.requests, {"chatbot", "knowledge", "debugger"})
    assert not problems, summary(problems)
    assert not compare_scores(fixture, got.scores)


def test_the_ehragent_twin_sees_a_changed_fallback_penalty_argument_text_or_score(ehragent_runs):
    fixture, got = ehragent_runs["failures"]
    task = next(iter(fixture.requests))
    for role, change in (("chatbot", lambda r: r["messages"][1].__setitem__("content", r["messages"][1]["content"]
                                                                            .replace("Fail to retrieve", "Failed to retrieve", 1))),
                         ("knowledge", lambda r: r.__setitem__("frequency_penalty", 0.1)),
                         ("chatbot", lambda r: next(m for m in r["messages"] if m.get("function_call"))["function_call"]
                          .__setitem__("arguments", '{"cell": "answer = 1"}'))):
        mutated = copy.deepcopy(got.requests)
        change(mutated[task][role][-1]["body"])
        assert compare(fixture, mutated, {"chatbot", "knowledge", "debugger"}), (role, "a change no comparison saw")
    assert compare_scores(fixture, {**got.scores, task: [[1.0, 1.0]] if got.scores[task] != [[1.0, 1.0]] else
                                    [[0.0, 1.0]]})


def test_normalising_drops_only_the_wire_noise():
    a = {"model": "m", "n": 1, "messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "r"}],
        "response_format": {"json_schema": {"schema": {"title": "Out", "properties": {"a": {"title": "A"}}}}}}
    b = {"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "id": "xyz",
                                                            "function": {"name": "f", "arguments": '{"x":1}'}}]},
                      {"role": "tool", "content": "r", "tool_call_id": "xyz"}], "model": "m",
         "response_format": {"json_schema": {"schema": {"properties": {"a": {}}}}}}
    assert normalise("/v1/chat/completions", a) == normalise("/v1/chat/completions", b)
    assert normalise("/v1/chat/completions", {**b, "seed": 3}) != normalise("/v1/chat/completions", b)
    assert normalise("/v1/chat/completions", {**b, "n": 2}) != normalise("/v1/chat/completions", b)
