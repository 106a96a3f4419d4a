"""Pass/fail results by report group, for any benchmark whose tasks carry `groups`: the table, metrics and curves.

A task counts in "all" and in each of its groups. Per group: SR-k, Pass@k, Pass^k, Gap-k, the number of scored
tasks and of incomplete ones (fewer than k valid trials). Metric names are MLflow's (`SR-5`, `Pass_at_5`,
`Pass_hat_5`, `Gap-5`), prefixed by the group (`mimic_iv_star/incre/SR-5`); "all" has no prefix.
"""
from __future__ import annotations

import sys
from collections import defaultdict

from .reports import Report
from .metrics import curve, summarize
from .trial import TrialRecord


def group_rewards(records: list[TrialRecord], tasks: list) -> dict[str, dict[str, list[float]]]:
    """group -> task key -> rewards of its valid trials; every task appears in its groups, with or without trials."""
    groups_of = {t.key: ("all", *t.groups) for t in tasks}
    groups: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for key, names in groups_of.items():
        for g in names:
            groups[g][key] = []
    scored = {(r.task_key, r.trial): r for r in records if r.valid and r.task_key in groups_of}  # one per trial
    for (key, _), r in scored.items():
        for g in groups_of[key]:
            groups[g][key].append(r.reward)
    return groups


def pass_k_table(groups: dict[str, dict[str, list[float]]], k: int, title: str,
                 pooled: str = "") -> tuple[str, dict[str, float]]:
    """The table and metrics of every group; `pooled`, a prefix for the "all" group's figures where pooling every
    group is not a figure of the paper (their counts, `tasks` and `incomplete`, keep their names)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("group", "tasks", f"SR-{k}", f"Pass@{k}", f"Pass^{k}", f"Gap-{k}", "incomplete"):
        table.add_column(col, justify="right" if col != "group" else "left")
    metrics: dict[str, float] = {}
    for g in sorted(groups, key=lambda g: (g != "all", g.count("/"), g)):
        s = summarize(groups[g], k)
        figures = s.as_dict(prefix=f"{g}/" if g != "all" else "")
        if g == "all" and pooled:
            figures = {(name if name in ("tasks", "incomplete") else pooled + name): v for name, v in figures.items()}
        metrics.update(figures)
        label = pooled.rstrip("/") if g == "all" and pooled else g
        table.add_row(label, str(s.tasks), f"{s.sr:.1f}", f"{s.pass_at:.1f}", f"{s.pass_hat:.1f}", f"{s.gap:.1f}",
                      str(s.incomplete))
    console = Console(file=sys.stdout, width=110)
    with console.capture() as cap:
        console.print(table)
    return cap.get(), metrics


def pass_k_curves(groups: dict[str, dict[str, list[float]]], k: int, names: list[str]) -> dict[str, dict]:
    """Pass@k and Pass^k for k = 1..k, for each named group present (paper Figure 3a)."""
    out = {}
    for g in names:
        if g in groups:
            summaries = curve(groups[g], range(1, k + 1))
            out[g] = {"Pass_at_k": [s.pass_at for s in summaries], "Pass_hat_k": [s.pass_hat for s in summaries]}
    return out


def pass_k_report(records: list[TrialRecord], tasks: list, k: int, title: str) -> Report:
    groups = group_rewards(records, tasks)
    text, metrics = pass_k_table(groups, k, title)
    curves = {f"{g}/curve/{name}": values for g, series in pass_k_curves(groups, k, ["all"]).items()
              for name, values in series.items()}
    return Report(text, metrics, headline={f"SR-{k}": metrics[f"SR-{k}"], f"Pass^{k}": metrics[f"Pass_hat_{k}"]},
                  curves=curves)
