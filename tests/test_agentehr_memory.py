"""RetroSum's evolving memory: the original's judge, item parser, retrieval and prompt section; and both phases
through the real OpenAI client against the fake server (build on the train split, then use the memory.jsonl)."""
from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest

from ehrbench.benchmarks.agentehr.memory import judge, parse_items, read_memory_file, retrieve, section
from ehrbench.llm.base import ConfigurationError

from .conftest import mlflow_store
from .test_agentehr import ROOT, _main


def test_the_judge_needs_f1_0_2_and_the_running_mean():
    assert judge(0.2, []) and not judge(0.19, [])
    assert judge(0.5, [0.4, 0.6]) and not judge(0.45, [0.4, 0.6])
    assert not judge(0.3, [1.0]) and judge(1.0, [1.0, 1.0])


def test_items_are_parsed_as_the_original_parses_them():
    reply = ("```\n# Memory Item 1\n## Title Check the latest transfer\n## Description Units follow it.\n"
             "## Content Read the transfers table first.\n\n# Memory Item 2\n## Title\nTitle on the next line\n"
             "## Content\nContent over\ntwo lines\n# Memory Item 3\n## Title No content here\n```")
    assert parse_items(reply) == [
        {"title": "Check the latest transfer", "description": "Units follow it.",
         "content": "Read the transfers table first."},
        {"title": "Title on the next line", "description": "Title on the next line",
         "content": "Content over two lines"}]
    assert parse_items("no items at all") == []


def test_retrieval_takes_the_top_entry_at_cosine_0_5():
    key = np.array([1.0, 0.0], dtype=np.float32)
    entries = [{"key": "a", "items": [{"title": "t", "description": "d", "content": "c"}], "vector": [0.6, 0.8]},
               {"key": "b", "items": [{"title": "t", "description": "d", "content": "c"}], "vector": [0.4, 0.9]}]
    [(similarity, entry)] = retrieve(key, entries)
    assert entry["key"] == "a" and similarity == pytest.approx(0.6)
    assert retrieve(key, entries, threshold=0.7) == []
    empty = {"key": "c", "items": [], "vector": [1.0, 0.0]}       # as the original: an entry without items wins too
    assert [e["key"] for _, e in retrieve(key, entries + [empty], top_k=2)] == ["c", "a"]
    text = section([(similarity, entry)])
    assert text == ("## Relevant Past Experience\n\nHere are relevant strategies from similar tasks:\n\n"
                    "### Memory 1 (Similarity: 0.60)\n- **t**: d\n  *Content*: c\n\n")


def test_a_bad_memory_file_names_line_and_field(tmp_path):
    bad = tmp_path / "memory.jsonl"
    bad.write_text('{"task": "transfers"}\n')
    with pytest.raises(ConfigurationError, match="line 1: field 'key' missing"):
        read_memory_file(bad)
    bad.write_text("not json\n")
    with pytest.raises(ConfigurationError, match="line 1: not JSON"):
        read_memory_file(bad)


def test_the_reference_agent_cannot_build_a_memory(tmp_path):
    out = _main(["benchmark=agentehr", "benchmark.memory=build", f"data.root={tmp_path / 'gen'}",
                 f"tracking.root={tmp_path / 'mlruns'}", f"hydra.run.dir={tmp_path / 'out'}"], timeout=120)
    assert out.returncode != 0 and "the evolving memory needs a model" in out.stderr


ITEM = ("# Memory Item 1\n## Title Check the latest transfer first\n## Description Units follow the last move.\n"
        "## Content Read the transfers table's latest rows before choosing a unit.")
ITEM_2 = "# Memory Item 1\n## Title Weigh the admitting service\n## Content The service predicts the next unit."


def test_build_then_use_the_memory_with_the_real_client(ray_cluster, tmp_path, shared_world):
    from .fake_llm_server import FakeLLMServer, Reply

    source = ROOT / "data/tasks/agentehr"
    train = json.loads((source / "train/transfers.json").read_text())[:2]
    test = json.loads((source / "transfers.json").read_text())[:1]
    tasks = tmp_path / "tasks"
    (tasks / "train").mkdir(parents=True)
    (tasks / "train/transfers.json").write_text(json.dumps(train))
    (tasks / "transfers.json").write_text(json.dumps(test))
    (tasks / "manifest.json").write_text((source / "manifest.json").read_text())
    common = ["benchmark=agentehr", f"benchmark.task_dir={tasks}", "benchmark.tasks=[transfers]", "agent=retrosum",
              "benchmark.mimic_iii=false", "data.dictionary=used",
              "trials=1", "model=gpt-4o", f"data.root={shared_world / 'gen'}", f"runtime.address={ray_cluster.address}"]
    store = mlflow_store(tmp_path / "mlruns")
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    server = FakeLLMServer().start()
    try:
        subject = str(train[0]["subject_id"])
        server.push(Reply(tool="get_latest_records", args={"subject_id": subject, "table_name": "transfers"}),
                    Reply(tool="finish", args={"response": [train[0]["label"][0]["name"]]}),   # train 1: F1 = 1
                    Reply(text="<summary>done</summary>"),                   # RetroSum's summary after finishing
                    Reply(text=ITEM),                                                          # its experience
                    Reply(tool="finish", args={"response": ["Not A Unit"]}),                   # train 2: F1 = 0
                    Reply(text="<summary>done</summary>"),
                    Reply(text="nothing useful"), Reply(text=ITEM_2),            # unparsable, asked once more
                    model="gpt-4o")
        build = _main(common + ["benchmark.memory=build", f"model.base_url={server.url}/v1", f"tracking.root={store}",
                                f"hydra.run.dir={tmp_path / 'build'}"])
        assert build.returncode == 0, build.stderr[-3000:]
        requests = server.requests_for("gpt-4o")
        assert len(requests) == 8
        assert requests[2].body["messages"][0]["content"].startswith("You are an expert at analyzing conversation")
        extraction = requests[3].body["messages"][0]["content"]
        assert extraction.lstrip().startswith("You are an expert in clinical reasoning auditor.")
        assert "Action: {name: get_latest_records, params: {" in extraction
        assert "'table_name': 'transfers'" in extraction
        assert str([{"name": train[0]["label"][0]["name"]}]) in extraction              # the ground truth
        assert "Action: {name: finish, params: {'response': [" in extraction          # the finish step, last
        assert "## Relevant Past Experience" not in requests[0].body["messages"][0]["content"]   # empty memory
        second = requests[4].body["messages"][0]["content"]            # train 2 recalls what train 1 taught
        assert "## Relevant Past Experience" in second and "Check the latest transfer first" in second
        [run_] = mlflow.search_runs(experiment_names=["agentehr"], output_format="list")
        assert run_.data.metrics["memory/entries"] == 2 and run_.data.metrics["memory/success"] == 0.5
        memory_file = Path(mlflow.artifacts.download_artifacts(run_id=run_.info.run_id, artifact_path="memory.jsonl",
                                                               dst_path=str(tmp_path / "artifacts")))
        entries = [json.loads(line) for line in memory_file.read_text().splitlines()]
        assert [e["subject_id"] for e in entries] == [train[0]["subject_id"], train[1]["subject_id"]]
        assert [e["success"] for e in entries] == [True, False]
        assert entries[1]["items"][0]["title"] == "Weigh the admitting service"
        assert entries[0]["items"][0]["title"] == "Check the latest transfer first"
        assert len(entries[0]["vector"]) == 384

        server.push(Reply(tool="finish", args={"response": [test[0]["label"][0]["name"]]}),
                    Reply(text="<summary>done</summary>"), model="gpt-4o")
        use = _main(common + ["benchmark.memory=use", f"benchmark.memory_file={memory_file}",
                              f"model.base_url={server.url}/v1",
                              f"tracking.root={mlflow_store(tmp_path / 'mlruns_use')}",
                              f"hydra.run.dir={tmp_path / 'use'}"])
        assert use.returncode == 0, use.stderr[-3000:]
        first = server.requests_for("gpt-4o")[-2].body["messages"][0]["content"]
        assert first.count("### Memory 1 (Similarity: ") == 1 and "### Memory 2" not in first         # top 1
        assert ("Check the latest transfer first" in first) != ("Weigh the admitting service" in first)
    finally:
        server.stop()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns_use' / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["agentehr"], output_format="list")
    assert run_.data.metrics["memory/recalled"] == 1.0 and "memory/entries" not in run_.data.metrics


def test_each_role_is_sent_its_originals_parameters_by_gpt_5_mini_and_gemini_2_5_flash(ray_cluster, tmp_path,
                                                                                     shared_world):
    """`benchmark=agentehr agent=retrosum benchmark.memory=build model=<m>`: the ReAct agent, RetroSum's summary and
    the experience extractor each send what `agent_llms.py` sends that model (`wire.EXPECTED`)."""
    from .fake_llm_server import Reply
    from .wire import role_by, run_with_every_role_on

    source = ROOT / "data/tasks/agentehr"
    train = json.loads((source / "train/transfers.json").read_text())[:1]
    tasks = tmp_path / "tasks"
    (tasks / "train").mkdir(parents=True)
    (tasks / "train/transfers.json").write_text(json.dumps(train))
    (tasks / "transfers.json").write_text(json.dumps(json.loads((source / "transfers.json").read_text())[:1]))
    (tasks / "manifest.json").write_text((source / "manifest.json").read_text())
    subject = str(train[0]["subject_id"])
    run_with_every_role_on(
        "agentehr", ["benchmark=agentehr", f"benchmark.task_dir={tasks}", "benchmark.tasks=[transfers]",
                     "agent=retrosum", "benchmark.memory=build", "benchmark.mimic_iii=false", "data.dictionary=used",
                     "trials=1", f"data.root={shared_world / 'gen'}", f"tracking.root={mlflow_store(tmp_path / 'm')}",
                     f"runtime.address={ray_cluster.address}"],
        role_by(("summarizer", "You are an expert at analyzing conversation"),
                ("extractor", "You are an expert in clinical reasoning auditor")), tmp_path,
        scripts={"agent": [Reply(tool="get_latest_records", args={"subject_id": subject, "table_name": "transfers"}),
                           Reply(tool="finish", args={"response": [train[0]["label"][0]["name"]]})]},
        defaults={"summarizer": Reply(text="<summary>done</summary>"), "extractor": Reply(text=ITEM)})
