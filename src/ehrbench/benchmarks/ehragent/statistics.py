"""What a question set is made of, beside what the paper fixes: questions per complexity level (the paper's Table 2
counts for MIMIC-III and eICU), mean tables per question (Table 1), how often each table is read at each level, the
answers' types, and the size of count answers (small counts are easy to hit by chance under the original's
substring judge: gold `1` passes an answer of `12`). `bench/bench_ehragent_tasks.py` prints it; a test holds the
shipped files to the paper's counts."""
from __future__ import annotations

import re
import statistics
from collections import Counter

from .tasks import Task, complexity_level, tables_read

# the paper's Table 2 level sizes (the one integer split that gives its per-level SRs and "All"; TREQS's fit none)
PAPER_LEVELS = {"ehrsql_mimic_iii": {1: 95, 2: 202, 3: 167, 4: 116}, "ehrsql_eicu": {1: 166, 2: 398, 3: 16},
                "treqs": None}
PAPER_MEAN_TABLES = {"ehrsql_mimic_iii": 2.52, "ehrsql_eicu": 1.74, "treqs": 1.48}     # Table 1
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def answer_type(values: list[str]) -> str:
    """list (several values), date-time, integer, decimal or text."""
    if len(values) > 1:
        return "list"
    value = values[0]
    if DATE.match(value):
        return "date-time"
    if re.fullmatch(r"-?\d+", value):
        return "integer"
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", value):
        return "decimal"
    return "text"


def is_count(task: Task) -> bool:
    return re.match(r"\s*select\s+count\s*\(", task.gold_sql, re.IGNORECASE) is not None and len(task.answer) == 1


def summary(tasks: list[Task]) -> dict:
    """The statistics of one database's question set."""
    levels = Counter(t.level for t in tasks)
    tables = {level: Counter() for level in sorted(levels)}
    for t in tasks:
        tables[t.level].update({name.upper() for name in tables_read(t.gold_sql)})
    counts = [int(t.answer[0]) for t in tasks if is_count(t) and re.fullmatch(r"\d+", t.answer[0])]
    return {"questions": len(tasks), "levels": dict(sorted(levels.items())),
            "mean_tables": sum(complexity_level(t.gold_sql) for t in tasks) / len(tasks) if tasks else 0.0,
            "tables_by_level": {lv: dict(c.most_common()) for lv, c in tables.items()},
            "answer_types": dict(Counter(answer_type(t.answer) for t in tasks).most_common()),
            "count_golds": {"questions": len(counts), "single_digit": sum(c < 10 for c in counts),
                            "median": statistics.median(counts) if counts else None,
                            "at_least_100": sum(c >= 100 for c in counts)}}
