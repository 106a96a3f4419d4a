"""The leaderboard and the paired comparison: every benchmark's task scores average to the headline metric its
report logs, and `ehrbench-report leaderboard` / `compare` read finished MLflow runs into intervals and differences
that equal the ones computed directly from the runs' task scores."""
from __future__ import annotations

import csv
import json
import random

import mlflow
import numpy as np
import pytest
import yaml

from ehrbench.benchmarks import load
from ehrbench.stats import point_estimate, bootstrap_interval, paired_comparison
from ehrbench.trial import TrialRecord

from .conftest import ROOT


def _records(name: str, tasks: list, k: int, rng: random.Random) -> list[TrialRecord]:
    """Scored trials in the shape each benchmark's scorer leaves them (reward and score parts)."""
    out = []
    for t in tasks:
        for i in range(k):
            x = rng.choice([0.0, 1 / 3, 0.5, 1.0])
            parts, reward = {}, x
            if name == "ehrchatqa" or name == "ehragent":
                reward = float(x >= 0.5)
                parts = {"compatible": reward, "strict": reward} if name == "ehragent" else {}
            elif name == "clinsql":
                parts = {"sql_score": rng.choice([0.0, 1.0]), "exec_score": x}
            elif name == "physassist":
                parts = {f"T{j}/r": rng.choice([0.0, 0.5, 1.0]) for j in range(4)} | {"judged": 1.0}
            out.append(TrialRecord(t.key, i, "user_stop", reward, score_parts=parts))
    return out


@pytest.mark.parametrize("name, metric, scale", [("ehrchatqa", "all_flows/SR-3", 1),
                                                 ("ehragent", "all_databases/SR", 1),
                                                 ("agentehr", "F1", 100), ("clinsql", "exec_score", 1),
                                                 ("physassist", "mRS", 1)])
def test_each_benchmark_s_task_scores_average_to_the_headline_its_report_logs(name, metric, scale, tmp_path):
    options = yaml.safe_load((ROOT / "conf" / "benchmark" / f"{name}.yaml").read_text())
    options["task_dir"] = str(ROOT / options["task_dir"])
    bench = load(name, options)
    tasks = bench.tasks()
    rng = random.Random(name)
    tasks = rng.sample(tasks, 40) if name != "agentehr" else [t for t in tasks if t.subset != "mimic_iii"][::6]
    records = _records(name, tasks, 3, rng)
    report = bench.report(records, tasks, 3, tmp_path)
    scores = bench.task_scores(records, tasks, 3)
    keys = sorted(scores.scores)
    groups = [scores.groups[key] for key in keys] if scores.groups else None
    assert scores.metric == metric and len(keys) == len(tasks)
    values = np.asarray([scores.scores[key] for key in keys])
    assert point_estimate(values, groups) == pytest.approx(report.metrics[metric] * scale)


def _log_run(experiment: str, model: str, scores: dict, metric: str, cost: float, groups=None) -> str:
    mlflow.set_experiment(experiment)
    with mlflow.start_run() as run:
        mlflow.log_params({"benchmark.name": experiment, "model.name": model})
        mlflow.log_metrics({"cost_usd/all": cost, "input_tokens/all": 1000, "output_tokens/all": 200})
        mlflow.log_text(json.dumps({"metric": metric, "scores": scores, "groups": groups}), "task_scores.json")
        return run.info.run_id


def test_the_leaderboard_and_the_paired_comparison_read_finished_runs(tmp_path, capsys):
    from ehrbench.report import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    rng = random.Random(0)
    tasks = [f"t{i}" for i in range(30)]
    strong = {t: float(rng.random() < 0.8) * 100 for t in tasks}
    weak = {t: float(rng.random() < 0.4) * 100 for t in tasks}
    _log_run("ehrchatqa", "gpt-4o", {t: 0.0 for t in tasks}, "SR-5", 9.0)         # an older run: superseded
    a = _log_run("ehrchatqa", "gpt-4o", strong, "SR-5", 1.5)
    b = _log_run("ehrchatqa", "o4-mini", weak, "SR-5", 0.5)
    f1 = {f"s{i}": rng.random() * 100 for i in range(12)}
    _log_run("agentehr", "gpt-4o", f1, "F1", 2.0, groups={s: f"task{int(s[1:]) % 3}" for s in f1})
    out = tmp_path / "board"
    assert main(["leaderboard", "--tracking-uri", uri, "--out", str(out), "--resamples", "2000"]) == 0
    printed = capsys.readouterr().out
    assert "ehrbench leaderboard: 2 models x 2 benchmarks" in printed
    with (out / "leaderboard.csv").open() as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    assert rows["gpt-4o"]["ehrchatqa SR-5"] == str(bootstrap_interval(list(strong.values()), resamples=2000))
    assert rows["o4-mini"]["ehrchatqa SR-5"] == str(bootstrap_interval(list(weak.values()), resamples=2000))
    keys = sorted(f1)
    assert rows["gpt-4o"]["agentehr F1"] == str(bootstrap_interval(
        [f1[k] for k in keys], resamples=2000, groups=[f"task{int(k[1:]) % 3}" for k in keys]))
    assert rows["o4-mini"]["agentehr F1"] == "" and float(rows["gpt-4o"]["cost $"]) == 3.5
    assert (out / "leaderboard.md").read_text().startswith("| model | agentehr F1 | ehrchatqa SR-5 |")
    assert (out / "leaderboard.png").stat().st_size > 10_000
    assert main(["compare", a[:8], b[:8], "--tracking-uri", uri, "--resamples", "2000"]) == 0
    expected = paired_comparison(strong, weak, resamples=2000)
    assert f"difference {expected} over 30 shared tasks" in capsys.readouterr().out
    assert main(["compare", a[:8], _log_run("agentehr", "x", f1, "F1", 0.0), "--tracking-uri", uri]) == 2
