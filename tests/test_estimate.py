"""The cost estimate printed before any model call: the profile's figures times the tasks, trials and prices, worked
out here by hand; a finished run of yours replaces the profile with what it measured; `dry_run=true` prints it and
stops without a key, a Ray cluster or an MLflow run."""
from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import pytest

from ehrbench.benchmark import TrialSettings
from ehrbench.estimate import estimate, merged, profile

from .conftest import ROOT

GPT4O = {"name": "gpt-4o", "price": {"input": 2.5, "output": 10.0}}
JUDGE = {"name": "gemini-2.5-flash", "price": {"input": 0.3, "output": 2.5}}


def test_each_role_costs_its_calls_times_its_tokens_times_its_model_s_price():
    settings = TrialSettings(benchmark="ehrchatqa", agent="tool_calling", user="llm", agent_model=GPT4O,
                             user_model={"name": "gemini-2.0-flash", "price": {"input": 0.1, "output": 0.4}},
                             validator_model=JUDGE)
    lines = {x.role: x for x in estimate("ehrchatqa", settings, trials=100)}
    assert set(lines) == {"agent", "user", "verifier", "reflection", "validator"}
    agent = profile()["ehrchatqa"]["agent"]
    calls = 100 * agent["calls"]
    assert lines["agent"].calls == calls and lines["agent"].source == "profile"
    assert lines["agent"].cost_usd == pytest.approx((calls * agent["input"] * 2.5 + calls * agent["output"] * 10) / 1e6)
    v = profile()["ehrchatqa"]["validator"]
    assert lines["validator"].model == "gemini-2.5-flash" and lines["validator"].cost_usd == pytest.approx(
        100 * v["calls"] * (v["input"] * 0.3 + v["output"] * 2.5) / 1e6)
    reference = TrialSettings(benchmark="ehrchatqa", agent="reference")      # no model: nothing to pay
    assert estimate("ehrchatqa", reference, trials=100) == []
    both = merged(estimate("ehrchatqa", settings, 10) + estimate("ehrchatqa", settings, 30))
    assert {x.role: x.calls for x in both}["agent"] == 40 * agent["calls"]


def test_a_finished_run_of_yours_replaces_the_profile_with_what_it_measured(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("clinsql")
    with mlflow.start_run() as run:
        mlflow.log_params({"model.name": "gpt-4o", "agent.name": "auto"})
        mlflow.log_metrics({"trials_valid": 10, "calls/agent": 40, "input_tokens/agent": 80_000,
                            "output_tokens/agent": 4_000})
    settings = TrialSettings(benchmark="clinsql", agent="clinsql", agent_model=GPT4O, grader_model=JUDGE)
    lines = {x.role: x for x in estimate("clinsql", settings, trials=50, client=mlflow.MlflowClient(uri))}
    assert lines["agent"].source == f"run {run.info.run_id[:8]}"
    assert (lines["agent"].calls, lines["agent"].input_tokens, lines["agent"].output_tokens) == (200, 400_000, 20_000)
    assert lines["grader"].source == "profile"          # that run measured no grader: the profile stands


def test_a_dry_run_prints_the_estimate_and_stops_without_a_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "ehrbench", "benchmark=clinsql", "model=gpt-4o", "dry_run=true",
                          "limit_tasks=2", "trials=3",             # 2 of each of the 6 scenarios f"tracking.root={tmp_path / 'm'}",
                          f"hydra.run.dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    said = " ".join(out.stdout.split())
    assert "clinsql: estimate for 12 tasks x 3 trials, before any model call (dry run: nothing runs)" in said
    assert "gpt-4o" in said and "gpt-5-chat" in said                       # the agent and the paper's judge
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'm' / 'mlflow.db'}")
    assert mlflow.get_experiment_by_name("clinsql") is None                # no run was started
