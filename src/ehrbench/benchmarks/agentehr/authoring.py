"""Write ehrbench's AgentEHR samples from the world, in the original's task-file format.

    python -m ehrbench.benchmarks.agentehr.authoring --out data/tasks/agentehr [--seed 0 --scale 1]

writes <task>.json per task (one sample per patient and task, `tasks.make_samples`) and manifest.json naming the
world they come from (a run on another world stops at start and says how to write samples for it).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .tasks import make_samples


def main(argv: list[str] | None = None) -> None:
    from ...schemas import WorldSpec, build_database
    from ...world.generator import WorldSize

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/tasks/agentehr")
    parser.add_argument("--seed", type=int, default=0, help="the world's seed (data.seed)")
    parser.add_argument("--scale", type=float, default=1.0, help="the world's scale (benchmark.world_scale)")
    parser.add_argument("--root", default="data/generated", help="where built databases are cached (data.root)")
    parser.add_argument("--sample-seed", type=int, default=42, help="which event of each patient is asked about")
    args = parser.parse_args(argv)
    source = build_database("mimic_iv", WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale)), Path(args.root))
    samples = make_samples(source, args.sample_seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for task, items in samples.items():
        (out / f"{task}.json").write_text("[\n" + ",\n".join(json.dumps(i, ensure_ascii=False) for i in items) +
                                          "\n]\n")
    (out / "manifest.json").write_text(json.dumps({
        "generator": "ehrbench.benchmarks.agentehr.authoring", "world": {"seed": args.seed, "scale": args.scale},
        "sample_seed": args.sample_seed, "samples": {t: len(v) for t, v in samples.items()}}, indent=2) + "\n")
    print(f"{sum(map(len, samples.values()))} samples written to {out}: "
          + ", ".join(f"{t} {len(v)}" for t, v in samples.items()))


if __name__ == "__main__":
    main()
