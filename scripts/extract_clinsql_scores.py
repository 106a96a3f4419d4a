"""Write tests/fixtures/clinsql_validation_scores.json.gz from a ClinSQL clone (Barryshen1/ClinSQL, validation only).

For two models' published validation evaluations: each sample's rubric-tree *structure* (ids, weights, sequential
and critical flags; no requirement text) and its leaf decisions, beside the published sql_score and results_score.
tests/test_clinsql_rubric.py recomputes every published score from the leaf decisions with ehrbench's aggregation.

    python scripts/extract_clinsql_scores.py /path/to/ClinSQL [model ...]
"""
import gzip
import json
import sys
from pathlib import Path

STRUCTURE = ("id", "weight", "sequential", "critical")


def structure(node: dict) -> dict:
    out = {k: node[k] for k in STRUCTURE if k in node}
    out["sub_tasks"] = [structure(c) for c in node.get("sub_tasks", [])]
    return out


def leaf_ids(node: dict) -> set[str]:
    children = node.get("sub_tasks", [])
    return set().union(*map(leaf_ids, children)) if children else {node["id"]}


def main(root: Path, models: list[str]) -> None:
    samples = []
    for model in models:
        graded = json.loads((root / "outputs/evaluation" / model / "validation/detailed_grading.json").read_text())
        for e in graded["detailed_evaluations"]:
            rel = e["sample_path"].split("/validation/")[1]
            folder = root / "data/splits/validation" / rel
            sample = {"model": model, "sample": rel}
            for kind in ("sql", "results"):
                tree = json.loads((folder / f"{kind}_rubric_tree.json").read_text())
                leaves = leaf_ids(tree)
                sample[f"{kind}_tree"] = structure(tree)
                sample[f"{kind}_leaves"] = {k: v["score"] for k, v in e[f"{kind}_evaluations"].items() if k in leaves}
                sample[f"{kind}_score"] = e[f"{kind}_score"]
            samples.append(sample)
    out = Path(__file__).resolve().parents[1] / "tests/fixtures/clinsql_validation_scores.json.gz"
    out.write_bytes(gzip.compress(json.dumps(samples, separators=(",", ":")).encode(), mtime=0))
    print(f"{out}: {len(samples)} samples, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or ["DeepSeek-R1-0528", "gpt-5-mini"])
