"""ClinSQL task sets side by side: the shape statistics that decide how hard a task set is and how its scores read.

    make bench-clinsql-tasks                                          # the project's tasks
    make bench-clinsql-tasks ARGS="data/tasks/clinsql /path/ClinSQL/data/splits/validation"

For each folder of tasks in ClinSQL's layout: tasks per scenario and difficulty; distinct SQL shapes per cell (the
gold query's sqlglot tree with every literal and identifier alias blanked: how many templates a cell really has);
the share of critical SQL leaves; column-exists leaves; "acceptable" leaves with a range, and the range's width
relative to the largest gold value of the column the leaf names (how much room an answer has; leaves naming no
gold column are left out); the gold result's row count; the largest value of a count column in the gold
(`num_*`, `n_*`, `*_count`, ...: how big the cohorts are). Nothing here is timed; it reads files only.
"""
from __future__ import annotations

import argparse
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

import sqlglot
from sqlglot import exp


def shape(sql: str) -> str:
    """The query with literals blanked: two tasks of one template share a shape."""
    try:
        tree = sqlglot.parse_one(sql.strip().rstrip(";"), read="bigquery")
    except sqlglot.errors.SqlglotError:
        return "unreadable"
    for node in tree.find_all(exp.Literal):
        node.replace(exp.Literal.string("?"))
    return tree.sql(dialect="bigquery", normalize=True)


COUNT = re.compile(r"^(num|n|count|cohort_size|total|number)(_|$)|_count$|^n_", re.I)   # a count column


def number(text: str) -> float | None:
    try:
        x = float(str(text).replace(",", ""))
    except ValueError:
        return None
    return None if math.isnan(x) else x


def describe(folder: Path) -> dict:
    from ehrbench.benchmarks.clinsql.scoring import RANGE, Candidate, ResultsChecker
    from ehrbench.benchmarks.clinsql.tasks import load_tasks

    tasks = load_tasks(folder)
    shapes: dict[tuple, set] = defaultdict(set)
    critical = sql_leaves = exists = 0
    widths, rows, counts = [], [], []
    for t in tasks:
        counted = [x for i, c in enumerate(t.gold_columns) if COUNT.search(c)
                   for r in t.gold_rows if (x := number(r[i])) is not None]
        if counted:
            counts.append(max(counted))
        shapes[(t.scenario, t.difficulty)].add(shape(t.gold_sql))
        for leaf in t.sql_tree.leaves():
            sql_leaves += 1
            critical += bool(leaf.critical)
        rows.append(len(t.gold_rows))
        for leaf in t.results_tree.leaves():
            exists += "exist" in leaf.id and "csv" not in leaf.id
            found = RANGE.search(leaf.requirements)
            if found is None or not leaf.id.endswith("-acceptable"):
                continue
            lo, hi = sorted(float(g.replace(",", "")) for g in found.groups())
            column = ResultsChecker(t.gold_columns, t.gold_rows, Candidate()).gold_column(leaf.id)
            if column is None:                   # a leaf naming no gold column: its width has no scale
                continue
            at = t.gold_columns.index(column)
            values = [abs(x) for r in t.gold_rows if (x := number(r[at])) is not None]
            if values and max(values) > 0:
                widths.append((hi - lo) / max(values))
    per_cell = [len(v) for v in shapes.values()]
    cells = defaultdict(int)
    for t in tasks:
        cells[(t.scenario, t.difficulty)] += 1
    return {"tasks": len(tasks), "cells": len(cells), "tasks per cell (median)": statistics.median(cells.values()),
            "SQL shapes per cell (min / median / max)": f"{min(per_cell)} / {statistics.median(per_cell):g} / "
                                                         f"{max(per_cell)}",
            "critical SQL leaves": f"{100 * critical / max(sql_leaves, 1):.0f}%",
            "SQL leaves per task": f"{sql_leaves / max(len(tasks), 1):.1f}",
            "column-exists leaves per task": f"{exists / max(len(tasks), 1):.1f}",
            "acceptable ranges": len(widths),
            "range width / largest gold value (median)": f"{statistics.median(widths):.2f}x" if widths else "-",
            "gold rows (median)": statistics.median(rows) if rows else 0,
            "largest count in the gold (median)": f"{statistics.median(counts):g} ({len(counts)} tasks)"
                                                  if counts else "-"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", default=["data/tasks/clinsql"])
    args = parser.parse_args()
    described = {f: describe(Path(f)) for f in args.folders}
    keys = list(next(iter(described.values())))
    width = max(map(len, keys)) + 2
    print("".ljust(width) + "".join(Path(f).name[-28:].rjust(30) for f in described))
    for k in keys:
        print(k.ljust(width) + "".join(str(d[k]).rjust(30) for d in described.values()))


if __name__ == "__main__":
    main()
