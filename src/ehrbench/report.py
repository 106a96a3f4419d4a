"""Compare MLflow runs.

    ehrbench-report [--experiment ehrchatqa] [--sweep DIR] [--runs ID ...]    # EHR-ChatQA runs by flow
    ehrbench-report leaderboard [--experiments ...] [--runs ID ...] [--parent RUN]
    ehrbench-report compare RUN_A RUN_B
    ehrbench-report rescore RUN [benchmark.<option>=... grader=...] [--graders replay|ask]

The first prints a table (model, user, trials; SR-k, Pass@k, Pass^k, Gap-k per flow; cost; valid, rejected and
broken trials) and writes `comparison.csv` and `pass_hat_k.png` (Pass^k against k, one line per run) to `--out`.
`leaderboard` prints one row per model and one column per benchmark (the headline metric with its 95% bootstrap
interval over tasks; cost, tokens, wall time) from the latest finished run of each (benchmark, model), and writes
`leaderboard.csv`, `leaderboard.md` and `leaderboard.png`. `compare` gives the difference of two runs of one
benchmark on its headline metric, with a paired bootstrap interval and p-value over the tasks both scored.
`rescore` scores a finished run again under changed scorer options from its recorded model calls, making none
(`rescore.py`), into a new run linked to the old one.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import mlflow

from .tracking.plots import pass_k_curves


def _row(run, flows: list[str]) -> dict:
    p, m = run.data.params, run.data.metrics
    k = int(p.get("trials", 5))
    row = {"run": run.info.run_name, "run_id": run.info.run_id[:8], "model": p.get("model.name", ""),
           "user": p.get("user.name", ""), "k": k}
    for flow in flows:
        for label, key in (("SR", f"SR-{k}"), ("Pass@k", f"Pass_at_{k}"), ("Pass^k", f"Pass_hat_{k}"),
                           ("Gap", f"Gap-{k}")):
            value = m.get(f"{flow}/{key}")
            row[f"{flow} {label}"] = "" if value is None else round(value, 1)
    row["cost $"] = round(m.get("cost_usd/all", 0.0), 4)
    row["valid"] = int(m.get("trials_valid", 0))
    row["rejected"] = int(m.get("trials_rejected_by_validator", 0))
    row["broken"] = int(m.get("trials_infra_errors", 0))
    return row


BENCHMARKS = ("ehrchatqa", "ehragent", "agentehr", "clinsql", "physassist")
DEFAULT_URI = f"sqlite:///{Path('mlruns').resolve() / 'mlflow.db'}"


def leaderboard_main(argv: list[str]) -> int:
    from . import leaderboard

    ap = argparse.ArgumentParser(prog="ehrbench-report leaderboard", description=leaderboard.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tracking-uri", default=DEFAULT_URI)
    ap.add_argument("--experiments", nargs="*", default=list(BENCHMARKS), help="benchmark experiments to read")
    ap.add_argument("--runs", nargs="*", help="only these run ids (or their first 8 characters)")
    ap.add_argument("--parent", help="only the child runs of this (suite) run")
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--out", default=None, help="folder for leaderboard.csv, .md and .png")
    args = ap.parse_args(argv)
    mlflow.set_tracking_uri(args.tracking_uri)
    names = [e for e in args.experiments if mlflow.get_experiment_by_name(e) is not None]
    runs = mlflow.search_runs(experiment_names=names, output_format="list") if names else []
    if args.parent:
        runs = [r for r in runs if r.data.tags.get("mlflow.parentRunId", "").startswith(args.parent)]
    if args.runs:
        runs = [r for r in runs if r.info.run_id in args.runs or r.info.run_id[:8] in args.runs]
    cells = leaderboard.collect(mlflow.MlflowClient(), runs, resamples=args.resamples)
    if not cells:
        print(f"ehrbench-report: no finished run with task scores in {names or args.experiments} at "
              f"{args.tracking_uri}", file=sys.stderr)
        return 2
    out = Path(args.out or f"reports/leaderboard-{time.strftime('%Y%m%d-%H%M%S')}")
    leaderboard.print_table(cells, f"ehrbench leaderboard: {len({c.model for c in cells})} models x "
                                   f"{len({c.benchmark for c in cells})} benchmarks (95% bootstrap intervals)")
    written = leaderboard.write(cells, out)
    print("written: " + ", ".join(str(p) for p in written))
    return 0


def compare_main(argv: list[str]) -> int:
    from . import leaderboard

    ap = argparse.ArgumentParser(prog="ehrbench-report compare", description="The paired comparison of two runs "
                                 "of one benchmark on its headline metric.")
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--tracking-uri", default=DEFAULT_URI)
    ap.add_argument("--resamples", type=int, default=10_000)
    args = ap.parse_args(argv)
    mlflow.set_tracking_uri(args.tracking_uri)
    client = mlflow.MlflowClient()
    cells = []
    for wanted in (args.run_a, args.run_b):
        found = [r for r in mlflow.search_runs(search_all_experiments=True, output_format="list")
                 if r.info.run_id.startswith(wanted)]
        cell = leaderboard.cell_of(client, found[0], args.resamples) if len(found) == 1 else None
        if cell is None:
            print(f"ehrbench-report: run {wanted!r}: " + ("not found" if not found else "ambiguous" if len(found) > 1
                                                         else "logged no task scores"), file=sys.stderr)
            return 2
        cells.append(cell)
    a, b = cells
    try:
        result = leaderboard.compare(a, b, resamples=args.resamples)
    except ValueError as e:
        print(f"ehrbench-report: {e}", file=sys.stderr)
        return 2
    print(f"{a.benchmark} {a.scores.metric}: {a.model} ({a.run_id[:8]}) {a.interval} vs {b.model} "
          f"({b.run_id[:8]}) {b.interval}")
    print(f"difference {result} over {result.tasks} shared tasks (paired bootstrap, 95%)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["leaderboard"]:
        return leaderboard_main(argv[1:])
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:])
    if argv[:1] == ["rescore"]:
        from .rescore import main as rescore_main

        return rescore_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tracking-uri", default=DEFAULT_URI)
    ap.add_argument("--experiment", default="ehrchatqa")
    ap.add_argument("--runs", nargs="*", help="run ids (default: every run of the experiment)")
    ap.add_argument("--sweep", help="only the runs of this Hydra sweep (its folder, as tagged)")
    ap.add_argument("--flows", nargs="*", default=["incre", "adapt"])
    ap.add_argument("--out", default=None, help="folder for comparison.csv and pass_hat_k.png")
    args = ap.parse_args(argv)

    mlflow.set_tracking_uri(args.tracking_uri)
    if mlflow.get_experiment_by_name(args.experiment) is None:
        print(f"ehrbench-report: no experiment {args.experiment!r} at {args.tracking_uri}", file=sys.stderr)
        return 2
    filters = [f"tags.`ehrbench.sweep` = '{args.sweep}'"] if args.sweep else []
    runs = mlflow.search_runs(experiment_names=[args.experiment], filter_string=" and ".join(filters),
                              output_format="list", order_by=["attributes.start_time ASC"])
    if args.runs:
        runs = [r for r in runs if r.info.run_id in args.runs or r.info.run_id[:8] in args.runs]
    if not runs:
        print("ehrbench-report: no runs match", file=sys.stderr)
        return 2
    rows = [_row(r, args.flows) for r in runs]
    out = Path(args.out or f"reports/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    with (out / "comparison.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    client = mlflow.MlflowClient()
    curves, ks = {}, []
    for r in runs:
        history = sorted(client.get_metric_history(r.info.run_id, "all/curve/Pass_hat_k"), key=lambda h: h.step)
        if history:
            curves[f"{r.info.run_name} ({r.info.run_id[:8]})"] = {"Pass_hat_k": [h.value for h in history]}
            ks = ks if len(ks) >= len(history) else [h.step for h in history]
    if curves:
        series = {label: {"Pass_hat_k": v["Pass_hat_k"] + [float("nan")] * (len(ks) - len(v["Pass_hat_k"]))}
                  for label, v in curves.items()}
        pass_k_curves(series, ks, out / "pass_hat_k.png", "Pass^k against k, by run")

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.experiment}: {len(rows)} runs")
    for col in rows[0]:
        table.add_column(col, justify="left" if col in ("run", "run_id", "model", "user") else "right",
                         no_wrap=col == "run")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    Console(width=200).print(table)
    print(f"written: {out / 'comparison.csv'}" + (f", {out / 'pass_hat_k.png'}" if curves else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
