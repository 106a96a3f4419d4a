"""Write ehrbench's AgentEHR samples from the world, in the original's task-file format.

    python -m ehrbench.benchmarks.agentehr.authoring --out data/tasks/agentehr [--seed 0 --scale 2]

The world's patients are split in two seeded halves (`tasks.split_patients_for_memory`): the test half gives
the pool of one sample per patient and task (`tasks.make_samples`), from which <task>.json draws `--subset-size`
Common and as many Rare samples as the original's label_wise_sample.py does (`tasks.draw_subsets`, weighted by
the labels' counts over the whole rendering); the train half gives train/<task>.json (at most `--train` Common
samples per task, drawn the same way: the evolving memory's build split, in the order it is built). mimic_iii/<task>.json is the
schema-shift subset: the same test half of the world's patients (both renderings number them in the world's order)
in the EHRSQL MIMIC-III rendering. manifest.json names the world they come from (a run on another world stops at
start and says how to write samples for it).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .tasks import draw_subsets, label_counts, make_samples, split_patients_for_memory


def main(argv: list[str] | None = None) -> None:
    from ...schemas import WorldSpec, build_database
    from ...world.generator import WorldSize

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/tasks/agentehr")
    parser.add_argument("--seed", type=int, default=0, help="the world's seed (data.seed)")
    parser.add_argument("--scale", type=float, default=2.0, help="the world's scale (benchmark.world_scale)")
    parser.add_argument("--root", default="data/generated", help="where built databases are cached (data.root)")
    parser.add_argument("--sample-seed", type=int, default=42, help="which event of each patient is asked about")
    parser.add_argument("--train", type=int, default=100, help="train samples per task (the paper's 100)")
    parser.add_argument("--subset-size", type=int, default=50,
                        help="Common and Rare samples drawn per task (the paper's 100, from a larger pool)")
    args = parser.parse_args(argv)
    source = build_database("mimic_iv", WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale)), Path(args.root))
    test_patients, train_patients = split_patients_for_memory(source, args.sample_seed)
    counts = label_counts(source)
    samples = {task: draw_subsets(items, counts[task], args.subset_size, args.sample_seed)
               for task, items in make_samples(source, args.sample_seed, test_patients).items()}
    train = {task: [it for it in draw_subsets(items, counts[task], args.train, args.sample_seed)
                    if it["subset"] == "common"]
             for task, items in make_samples(source, args.sample_seed, train_patients).items()}
    iii_source = build_database("ehrsql_mimic_iii", WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale)),
                                Path(args.root))
    iii = make_samples(iii_source, args.sample_seed, split_patients_for_memory(iii_source, args.sample_seed)[0],
                       "ehrsql_mimic_iii")
    out = Path(args.out)
    for folder, split in ((out, samples), (out / "train", train), (out / "mimic_iii", iii)):
        folder.mkdir(parents=True, exist_ok=True)
        for task, items in split.items():
            (folder / f"{task}.json").write_text("[\n" + ",\n".join(json.dumps(i, ensure_ascii=False) for i in items)
                                                 + "\n]\n")
    (out / "manifest.json").write_text(json.dumps({
        "generator": "ehrbench.benchmarks.agentehr.authoring", "world": {"seed": args.seed, "scale": args.scale},
        "sample_seed": args.sample_seed, "subset_size": args.subset_size,
        "samples": {t: {s: sum(1 for i in v if i["subset"] == s) for s in ("common", "rare")}
                    for t, v in samples.items()},
        "train_samples": {t: len(v) for t, v in train.items()},
        "mimic_iii_samples": {t: len(v) for t, v in iii.items()}}, indent=2) + "\n")
    print(f"{sum(map(len, samples.values()))} samples written to {out}: "
          + ", ".join(f"{t} {len(v)} (common and rare)" for t, v in samples.items())
          + f"; train split ({out / 'train'}): " + ", ".join(f"{t} {len(v)}" for t, v in train.items())
          + f"; MIMIC-III ({out / 'mimic_iii'}): " + ", ".join(f"{t} {len(v)}" for t, v in iii.items()))


if __name__ == "__main__":
    main()
