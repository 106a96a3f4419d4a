"""ehrbench's own ClinSQL tasks, written from the world: six scenarios x three difficulties of patient-similarity
cohort questions, each with gold BigQuery SQL, the gold result it gives on the world's MIMIC-IV DuckDB, and the
two rubric trees in ClinSQL's JSON shape.

Style learnt from ClinSQL's validation split only: an anchor patient ("For my 68-year-old male patient ...") and a
cohort of the same sex within ±5 years, anchor_age or age at admission (anchor_age + admission year - anchor_year),
in three of four tasks with a third criterion (`Anchor.restriction`); ICD-9 and ICD-10 prefixes side by side; real
item ids; easy = one statistic, medium = a stratified distribution, hard = a derived score or strata with outcomes.
SQL trees have ClinSQL's four categories (Patient Cohort Construction 3, Medical Concept Implementation 2, Database
Integration 3, Clinical Analytics 2) at ClinSQL's grain (`leaves_of`) with critical leaves where ClinSQL's
validation trees have them (`critical`); results trees check format (sequential: CSV, each column, no NULLs) then,
per numeric column, clinical plausibility (a fixed clinical range) and the acceptable range (the gold values
widened on each side by WIDEN of their largest magnitude, inside the plausible range: as wide, relative to the
gold, as ClinSQL's validation split's ranges; `make bench-clinsql-tasks` prints both).

    python -m ehrbench.benchmarks.clinsql.authoring --out data/tasks/clinsql [--seed 0 --scale 100 --per-cell 17]

writes the folders and a manifest.json naming the world (seed, scale) the gold results come from. Instances whose
gold result is empty, all NULL or outside the clinical range are skipped (counted in the manifest).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from .rubric import Node
from .templates import TEMPLATES, Anchor, Draft
from .tasks import DIFFICULTIES, SCENARIOS, Task, write_task

SQL_CATEGORIES = (("patient-cohort-construction", "Patient Cohort Construction", 3),
                  ("medical-concept-implementation", "Medical Concept Implementation", 2),
                  ("database-integration", "Database Integration", 3),
                  ("clinical-analytics", "Clinical Analytics", 2))


def critical(category: str, position: int, flagged: bool) -> bool:
    """Which SQL leaves gate their category, as ClinSQL's validation trees flag them (90% of cohort leaves, 56% of
    database-integration leaves, 6-7% of concept and analytics leaves): the cohort's leaves as the template flags
    them, the first flagged leaf of the database integration (the join that makes the cohort), nothing else."""
    if category == "patient-cohort-construction":
        return flagged
    return category == "database-integration" and position == 0 and flagged


JOIN = re.compile(r"^Joins (?P<tables>.+?) (?:on|by) (?P<keys>.+?)\.?$")


def leaves_of(draft: Draft, columns: tuple[str, ...]) -> dict[str, list[tuple[str, str, bool]]]:
    """The template's leaves at ClinSQL's grain (its validation trees average 12.3 SQL leaves): a join leaf
    ("Joins A and B on k") becomes its pair, table-join logic and key matching; a query that drops NULL values or
    checks `icd_version` gets the leaf for it; one that ends grouping by its first column gets grouping logic; the
    analytics end with output formatting (the columns asked)."""
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for category, leaves in draft.leaves.items():
        out[category] = []
        for leaf_id, requirement, flagged in leaves:
            joined = JOIN.match(requirement) if category == "database-integration" else None
            if joined is None:
                out[category].append((leaf_id, requirement, flagged))
                continue
            out[category] += [(leaf_id, f"Table Join Logic: joins {joined['tables']}.", flagged),
                              (f"{leaf_id}-key-matching", f"Key Matching: the join matches rows on "
                               f"{joined['keys']}.", False)]
    concept = out.setdefault("medical-concept-implementation", [])
    said = " ".join(f"{i} {r}" for leaves in out.values() for i, r, _ in leaves).lower()
    if "valuenum IS NOT NULL" in draft.sql and "null" not in said:
        concept.append(("null-value-handling", "Null Value Handling: excludes measurements without a numeric value "
                        "(`valuenum IS NOT NULL`).", False))
    if "icd_version" in draft.sql and "icd-version" not in said:
        concept.append(("icd-version-handling", "ICD Version Handling: matches ICD-9 and ICD-10 codes each within its "
                        "own `icd_version`.", False))
    asked = ", ".join(f"`{c}`" for c in columns)
    analytics = out.setdefault("clinical-analytics", [])
    if re.search(r"\bGROUP BY\s+(\w+)\s+ORDER BY\s+\1;?\s*$", draft.sql) and "group" not in said:
        analytics.append(("grouping-logic", f"Grouping Logic: one row per `{columns[0]}` group, in a stable order.",
                          False))
    analytics.append((
        "output-formatting", f"Output Formatting: returns {'one row per group with ' if len(columns) > 1 else ''}"
        f"a column for each measure asked ({asked}, or equivalent names), numbers rounded sensibly.", False))
    return out


def sql_tree(draft: Draft, columns: tuple[str, ...]) -> Node:
    children = []
    leaves_by_category = leaves_of(draft, columns)
    for cid, title, weight in SQL_CATEGORIES:
        leaves = tuple(Node(i, req, False, critical(cid, n, crit))
                       for n, (i, req, crit) in enumerate(leaves_by_category.get(cid, [])))
        if leaves:
            children.append(Node(cid, title, cid == "clinical-analytics" and draft.sequential_analytics, False,
                                 weight, "1/0", leaves))
    return Node("sql-query-evaluation-root", "SQL Query Evaluation", False, False, 1, "1/0", tuple(children))


def _round_out(x: float, up: bool) -> float:
    if x == 0:
        return 0.0
    digits = 3 - int(math.floor(math.log10(abs(x))))
    factor = 10 ** digits
    return (math.ceil if up else math.floor)(x * factor) / factor


def fixed(x: float) -> str:
    """A number as a range in a requirement writes it: fixed notation, no trailing zeros (never 1e+06)."""
    return format(x, "f").rstrip("0").rstrip(".") if x != int(x) else str(int(x))


WIDEN = 0.8      # ClinSQL's validation split: acceptable ranges span a median 1.68x their column's largest gold value


def acceptable_range(values: list[float], plausible: tuple[float, float] | None = None) -> tuple[float, float]:
    """The gold values widened on each side by WIDEN of their largest magnitude (at least 0.01), rounded outward,
    and kept inside the clinically plausible range."""
    lo, hi = min(values), max(values)
    pad = max(WIDEN * max(abs(lo), abs(hi)), 0.01)
    a, b = _round_out(lo - pad, False), _round_out(hi + pad, True)
    if plausible is not None:
        a, b = max(a, plausible[0]), min(b, plausible[1])
    return a, b


def results_tree(draft: Draft, columns: tuple[str, ...], rows: list[tuple]) -> Node:
    leaf = lambda i, req: Node(i, req, False, False, 1, "1/0")            # noqa: E731
    exists = tuple(leaf(f"{c}-exists", f"A column for {draft.outputs[c][0] if c in draft.outputs else c} exists "
                                       f"(e.g., '{c}').") for c in columns)
    fmt = Node("output-format-validation", "Output Format Validation", True, False, 1, "1/0", (
        leaf("csv-file-exists", "CSV File Exists"),
        Node("column-name-exists", "Column Name Exists", True, False, 1, "1/0", exists),
        leaf("no-null-empty-values", "No unexpected NULL/Empty values in result columns for the rows they apply to.")))
    features = []
    for i, c in enumerate(columns):
        if c not in draft.outputs:
            continue
        values = [float(r[i]) for r in rows if isinstance(r[i], (int, float)) and not isinstance(r[i], bool)]
        if not values:
            continue
        what, lo, hi = draft.outputs[c]
        a, b = acceptable_range(values, (lo, hi))
        features.append(Node(f"{c}-validation", f"Validation for {what} column (e.g., '{c}').", True, False, 1,
                             "1/0", (leaf(f"{c}-plausible", f"Values are clinically plausible ({fixed(lo)} to "
                                                              f"{fixed(hi)})."),
                                     leaf(f"{c}-acceptable", f"Values are in the acceptable range ({fixed(a)} to "
                                                             f"{fixed(b)})."))))
    return Node("results-validation-root", "Results Validation", False, False, 1, "1/0",
                (fmt, Node("output-feature-validation", "Output Feature Validation", False, False, 2, "1/0",
                           tuple(features))))


def plausible(draft: Draft, columns, rows) -> bool:
    """Every gold value of a ranged column is a number inside its clinical range (else the task is dropped)."""
    for i, c in enumerate(columns):
        if c in draft.outputs:
            _, lo, hi = draft.outputs[c]
            values = [r[i] for r in rows if r[i] is not None]
            if not values or any(not isinstance(v, (int, float)) or not lo <= v <= hi for v in values):
                return False
    return True


# --- writing the task set ---------------------------------------------------------------------------------------
@dataclass
class Authored:
    tasks: list[Task] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)     # why -> count


def _plain(value):
    """A DuckDB value as a result CSV holds it: numbers as numbers, everything else as text."""
    if value is None or isinstance(value, (bool, int, float)):
        return int(value) if isinstance(value, bool) else value
    if hasattr(value, "__float__") and not isinstance(value, str):
        return float(value)
    return str(value)


def author(duckdb_path: str | Path, seed: int = 0, per_cell: int = 17, max_tries: int = 60) -> Authored:
    """`per_cell` tasks for each scenario and difficulty, their gold results from the DuckDB file."""
    import duckdb

    from .dialect import bigquery_to_duckdb

    out = Authored()
    con = duckdb.connect(str(duckdb_path), read_only=True)
    con.execute("SET threads TO 1")     # one thread: APPROX_QUANTILES' t-digest then gives the same gold every time
    try:
        for scenario in SCENARIOS:
            for difficulty in DIFFICULTIES:
                rng = random.Random(f"{seed}/{scenario}/{difficulty}")
                seen: set[str] = set()
                made = 0
                for _ in range(max_tries):
                    if made == per_cell:
                        break
                    anchor = Anchor(rng.randint(45, 85), rng.random() < 0.5, rng.randrange(4), rng.randrange(4))
                    draft = TEMPLATES[scenario, difficulty](anchor, rng)
                    draft.question += anchor.sentence()
                    if draft.sql in seen:
                        continue
                    seen.add(draft.sql)
                    cursor = con.execute(bigquery_to_duckdb(draft.sql).sql)
                    columns = tuple(d[0] for d in cursor.description)
                    rows = [tuple(_plain(v) for v in row) for row in cursor.fetchall()]
                    why = ("empty result" if not rows else "a cohort group with too few rows"
                           if any(isinstance(r[1], int) and r[1] < 3 for r in rows if len(r) > 1 and
                                  columns[1].startswith("num_")) else
                           "values outside the clinical range or NULL" if not plausible(draft, columns, rows) else None)
                    if why:
                        out.skipped[why] = out.skipped.get(why, 0) + 1
                        continue
                    made += 1
                    out.tasks.append(Task(scenario, difficulty, f"{made:03d}", draft.question, draft.sql, columns,
                                          tuple(tuple("" if v is None else str(v) for v in r) for r in rows),
                                          sql_tree(draft, columns), results_tree(draft, columns, rows)))
                if made < per_cell:
                    out.skipped[f"{scenario}/{difficulty}: only {made} of {per_cell}"] = per_cell - made
    finally:
        con.close()
    return out


def write(authored: Authored, root: Path, world: dict) -> None:
    import shutil

    root = Path(root)
    if root.exists():
        shutil.rmtree(root)
    for task in authored.tasks:
        write_task(task, root)
    (root / "manifest.json").write_text(json.dumps({
        "generator": "ehrbench.benchmarks.clinsql.authoring", "world": world, "tasks": len(authored.tasks),
        "skipped": authored.skipped}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    from ...schemas import WorldSpec, build_database
    from ...schemas.duckdb_export import export_duckdb
    from ...world.generator import WorldSize

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/tasks/clinsql")
    parser.add_argument("--seed", type=int, default=0, help="the world's seed (data.seed)")
    parser.add_argument("--scale", type=float, default=100.0, help="the world's scale (benchmark.world_scale)")
    parser.add_argument("--root", default="data/generated", help="where built databases are cached (data.root)")
    parser.add_argument("--per-cell", type=int, default=17, help="tasks per scenario and difficulty")
    args = parser.parse_args(argv)
    spec = WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale))
    duck = export_duckdb("mimic_iv", build_database("mimic_iv", spec, Path(args.root)))
    authored = author(duck, args.seed, args.per_cell)
    write(authored, Path(args.out), {"seed": args.seed, "scale": args.scale})
    print(f"{len(authored.tasks)} tasks written to {args.out}; skipped: {authored.skipped}")


if __name__ == "__main__":
    main()
