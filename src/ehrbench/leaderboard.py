"""The leaderboard: one row per model, one column per benchmark, each cell the benchmark's headline metric under the
paper's name with its 95% bootstrap interval over tasks, beside what the run cost (dollars, tokens, wall time).

A cell is read from a finished MLflow run: its `model.name` and `benchmark.name` params, its usage metrics, and the
`task_scores.json` artifact every run logs (`Benchmark.task_scores`: each task's score, whose mean is the metric).
Where a (benchmark, model) pair has several finished runs, the latest counts. Two cells of one benchmark compare
as a paired bootstrap over the tasks both scored (`stats.paired_comparison`).
"""
from __future__ import annotations

import csv
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .reports import TaskScores
from .stats import Comparison, Interval, bootstrap_interval, paired_comparison

SCORES_ARTIFACT = "task_scores.json"


@dataclass(frozen=True)
class Cell:
    benchmark: str
    model: str
    run_id: str
    scores: TaskScores
    interval: Interval
    cost_usd: float
    tokens: int
    wall_s: float
    partial: bool            # the run's figures are withheld (a task lacks scored trials)


def _scores_of(client, run_id: str) -> TaskScores | None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, SCORES_ARTIFACT, tmp)
        except Exception:  # noqa: BLE001 - a run from before task scores were logged, or a failed one
            return None
        return TaskScores.from_json(json.loads(Path(path).read_text()))


def cell_of(client, run, resamples: int = 10_000, seed: int = 0) -> Cell | None:
    """The leaderboard cell of one finished run, or None when it logged no task scores."""
    scores = _scores_of(client, run.info.run_id)
    if scores is None or not scores.scores:
        return None
    keys = sorted(scores.scores)
    groups = [scores.groups[k] for k in keys] if scores.groups else None
    interval = bootstrap_interval([scores.scores[k] for k in keys], resamples=resamples, seed=seed, groups=groups)
    m, p = run.data.metrics, run.data.params
    wall = ((run.info.end_time or run.info.start_time) - run.info.start_time) / 1000
    return Cell(p.get("benchmark.name", "?"), p.get("model.name", "?"), run.info.run_id, scores, interval,
                float(m.get("cost_usd/all", 0.0)),
                int(m.get("input_tokens/all", 0) + m.get("output_tokens/all", 0)), wall,
                run.data.tags.get("ehrbench.results") == "partial")


def collect(client, runs, resamples: int = 10_000, seed: int = 0) -> list[Cell]:
    """One cell per (benchmark, model): its latest finished run that logged task scores."""
    latest: dict[tuple[str, str], Cell] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time):
        if run.info.status != "FINISHED":
            continue
        cell = cell_of(client, run, resamples, seed)
        if cell is not None:
            latest[(cell.benchmark, cell.model)] = cell
    return list(latest.values())


def compare(a: Cell, b: Cell, resamples: int = 10_000, seed: int = 0) -> Comparison:
    """`a` minus `b` on their benchmark's headline metric, paired over the tasks both scored."""
    if a.benchmark != b.benchmark or a.scores.metric != b.scores.metric:
        raise ValueError(f"{a.benchmark} {a.scores.metric} and {b.benchmark} {b.scores.metric} are different "
                         "metrics: compare runs of one benchmark")
    return paired_comparison(a.scores.scores, b.scores.scores, resamples=resamples, seed=seed,
                             groups=a.scores.groups)


def rows(cells: list[Cell]) -> tuple[list[str], list[dict]]:
    """The table: benchmarks (columns, with the metric's name) and one row per model."""
    benchmarks = sorted({c.benchmark for c in cells})
    metric = {c.benchmark: c.scores.metric for c in cells}
    columns = [f"{b} {metric[b]}" for b in benchmarks]
    out = []
    for model in sorted({c.model for c in cells}):
        row: dict = {"model": model}
        mine = {c.benchmark: c for c in cells if c.model == model}
        for b, col in zip(benchmarks, columns):
            c = mine.get(b)
            row[col] = "" if c is None else str(c.interval) + (" (partial)" if c.partial else "")
        row["cost $"] = round(sum(c.cost_usd for c in mine.values()), 4)
        row["tokens"] = sum(c.tokens for c in mine.values())
        row["wall s"] = round(sum(c.wall_s for c in mine.values()), 1)
        out.append(row)
    return columns, out


def write(cells: list[Cell], out: Path) -> list[Path]:
    """leaderboard.csv, leaderboard.md and leaderboard.png (models x benchmarks with intervals) under `out`."""
    from .tracking.plots import interval_points

    out.mkdir(parents=True, exist_ok=True)
    columns, table = rows(cells)
    fields = ["model", *columns, "cost $", "tokens", "wall s"]
    with (out / "leaderboard.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(table)
    lines = ["| " + " | ".join(fields) + " |", "|" + " --- |" * len(fields)]
    lines += ["| " + " | ".join(str(r[f]) for f in fields) + " |" for r in table]
    lines.append("")
    lines.append("Each cell: the headline metric (x100) and its 95% bootstrap interval over tasks (trials kept "
                 "together); cost, tokens and wall time summed over the model's runs.")
    (out / "leaderboard.md").write_text("\n".join(lines) + "\n")
    points = {f"{c.benchmark}\n{c.scores.metric}": {} for c in sorted(cells, key=lambda c: c.benchmark)}
    for c in cells:
        points[f"{c.benchmark}\n{c.scores.metric}"][c.model] = (c.interval.estimate, c.interval.low, c.interval.high)
    interval_points(points, out / "leaderboard.png", "Leaderboard: headline metric with 95% intervals")
    return [out / "leaderboard.csv", out / "leaderboard.md", out / "leaderboard.png"]


def print_table(cells: list[Cell], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    columns, table = rows(cells)
    shown = Table(title=title)
    for col in ["model", *columns, "cost $", "tokens", "wall s"]:
        shown.add_column(col, justify="left" if col == "model" else "right")
    for r in table:
        shown.add_row(*(str(v) for v in r.values()))
    Console(width=200).print(shown)
