"""Compare MLflow runs side by side: `ehrbench-report [--experiment ehrchatqa] [--sweep DIR] [--runs ID ...]`.

Prints a table (model, user, trials; SR-k, Pass@k, Pass^k, Gap-k per flow; cost; valid, rejected and broken trials)
and writes `comparison.csv` and `pass_hat_k.png` (Pass^k against k, one line per run) to `--out`.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tracking-uri", default=f"sqlite:///{Path('mlruns').resolve() / 'mlflow.db'}")
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
