"""PhysAssistBench session sets side by side: the structure that decides what a session asks of an agent.

    make bench-physassist-sessions                                  # the project's sessions
    make bench-physassist-sessions ARGS="data/tasks/physassist /path/PhysAssistBench/physassistbench/examples"

For each folder (or .jsonl file) of sessions in the original's format: sessions and turns; turn types and
implicitness subtypes; tiers; per Data Gathering turn, the tool calls of its gold and the sources they reach (the
record, the patient, both); how many later turns are asked explicitly (the question is its own explicit
paraphrase); distinct Clinical Reasoning questions once their numbers are blanked (how many templates); rubric items
per turn; Clinical Reasoning turns by formula; and how varied the patient's replies are (distinct over all, in the
gold turns and in ehrbench's `patient_answers`). It reads files only.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter
from pathlib import Path

from ehrbench.benchmarks.physassist.fhir import WRITES
from ehrbench.benchmarks.physassist.rule_checker import CONTROL
from ehrbench.benchmarks.physassist.tasks import SHORT


def sessions_in(where: Path) -> list[dict]:
    files = sorted(where.glob("*.jsonl")) if where.is_dir() else [where]
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def describe(sessions: list[dict]) -> dict[str, str]:
    types, subtypes, tiers, dg_calls, dg_sources = Counter(), Counter(), Counter(), [], Counter()
    later = explicit = items = turns = 0
    cr_shapes, replies, formulas, later_subtypes = set(), [], Counter(), Counter()
    stored = []
    for e in sessions:
        tiers[e.get("difficulty_level")] += 1
        stored += [a["responses"].get("high", "") for a in e.get("patient_answers") or [] if not a.get("topic")]
        asked = e.get("tasks_en") or e.get("tasks") or []
        paraphrased = e.get("tasks_en_explicit") or e.get("tasks_explicit") or asked
        for i, kind in enumerate(e.get("task_types") or []):
            turns += 1
            types[SHORT.get(kind, kind)] += 1
            subtypes[(e.get("turn_subtypes") or [None] * 4)[i] or "none"] += 1
            items += len((e.get("rubrics") or [[]] * 4)[i] or [])
            if i:
                later += 1
                later_subtypes[(e.get("turn_subtypes") or [None] * 4)[i] or "none"] += 1
                explicit += i < len(paraphrased) and asked[i] == paraphrased[i]
            steps = (e.get("answer_list") or [[]] * 4)[i] or []
            names = [s["action"]["name"] for s in steps if s["action"]["name"] not in CONTROL]
            replies += [s["observation"]["patient_response"] for s in steps
                        if isinstance(s.get("observation"), dict) and "patient_response" in s["observation"]]
            if SHORT.get(kind) == "DG":
                dg_calls.append(len(names))
                record = any(not n.startswith("patient.") and n not in WRITES for n in names)
                patient = any(n.startswith("patient.") for n in names)
                dg_sources["record + patient" if record and patient else "patient" if patient else
                           "record" if record else "none"] += 1
            if SHORT.get(kind) == "CR" and i < len(asked):
                cr_shapes.add(re.sub(r"\d+(\.\d+)?", "#", asked[i]))
                said = f"{asked[i]} {paraphrased[i] if i < len(paraphrased) else ''}".lower()
                formulas["CHA2DS2-VASc" if "cha2ds2" in said else "creatinine clearance" if "clearance" in said
                         else "none"] += 1

    def share(counter: Counter) -> str:
        total = sum(counter.values()) or 1
        return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(counter.items(), key=lambda kv: str(kv[0])))
    dg = len(dg_calls) or 1
    return {"sessions": str(len(sessions)), "turns": str(turns), "turn types": share(types),
            "subtypes": share(subtypes), "subtypes of later turns": share(later_subtypes), "tiers": share(tiers),
            "DG turns: gold calls (mean / min / max)": (f"{statistics.mean(dg_calls):.2f} / {min(dg_calls)} / "
                                                         f"{max(dg_calls)}") if dg_calls else "-",
            "DG turns with 2+ calls": f"{100 * sum(c >= 2 for c in dg_calls) / dg:.0f}%",
            "DG turns by source": share(dg_sources),
            "later turns asked explicitly": f"{explicit} of {later}",
            "CR questions, distinct shapes": str(len(cr_shapes)),
            "CR turns by formula": share(formulas),
            "rubric items per turn": f"{items / (turns or 1):.2f}",
            "patient replies in gold turns: distinct / all": f"{len(set(replies))} / {len(replies)}",
            "patient's stored answers (symptoms, habits, function, pain): distinct / all":
                f"{len(set(stored))} / {len(stored)}" if stored else "none stored"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="*", default=["data/tasks/physassist"])
    args = parser.parse_args()
    described = {s: describe(sessions_in(Path(s))) for s in args.sets}
    keys = list(next(iter(described.values())))
    width = max(map(len, keys)) + 2
    print("".ljust(width) + "".join(Path(s).name[-50:].rjust(56) for s in described))
    for k in keys:
        print(k.ljust(width) + "".join(d[k][-54:].rjust(56) for d in described.values()))


if __name__ == "__main__":
    main()
