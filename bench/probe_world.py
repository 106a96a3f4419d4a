"""How much of the probe the world answers: the share of the cohort questions in tests/probe/<db>.yaml that find
rows, per database, and the questions that find nobody.

    make bench-probe                                  # the default world (what the main job and the tests use)
    make bench-probe ARGS="--scale 10 --seed 3"       # a bigger or another world

The probe was written from the schemas alone, before looking at rows (issue 9); a question that finds nobody is
something the world lacks. The world is built in a fresh temporary folder.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
from pathlib import Path

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from ehrbench.schemas import WorldSpec, build_database
    from ehrbench.world.generator import WorldSize

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    spec = WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale))
    with tempfile.TemporaryDirectory() as tmp:
        for db in ("mimic_iv_star", "eicu_star"):
            path = build_database(db, spec, Path(tmp))
            questions = yaml.safe_load((ROOT / "tests" / "probe" / f"{db}.yaml").read_text())
            with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as con:
                found = [(item["q"], len(con.execute(item["sql"]).fetchall())) for item in questions]
            answered = sum(1 for _, n in found if n)
            print(f"{db}: {answered}/{len(found)} cohort questions find rows ({100 * answered / len(found):.0f}%); "
                  f"median cohort {sorted(n for _, n in found)[len(found) // 2]} patients")
            for question, n in found:
                if not n:
                    print(f"    finds nobody: {question}")


if __name__ == "__main__":
    main()
