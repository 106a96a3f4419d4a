"""Write tests/fixtures/clinsql_validation_scores.json.gz from a ClinSQL clone (Barryshen1/ClinSQL, validation only).

For three models' published validation evaluations: each sample's rubric-tree *structure* (ids, weights, sequential
and critical flags; no requirement text) and its leaf decisions, beside the published sql_score and results_score,
and the candidate the judge saw: the model's final SQL and its saved result CSV (up to 20 KB; a larger one is left
out, with its size). tests/test_clinsql_rubric.py sends every sample through ehrbench's grading with the judge
replayed from the leaf decisions.

    python scripts/extract_clinsql_scores.py /path/to/ClinSQL [model ...]
"""
import gzip
import json
import sys
from pathlib import Path

STRUCTURE = ("id", "weight", "sequential", "critical")
CSV_LIMIT = 20_000


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
            done = root / "outputs/inference" / model / "validation" / rel
            sql = next(done.glob("sql_*.sql"), None)
            csv = next(done.glob("result_*.csv"), None)
            sample["candidate_sql"] = sql.read_text(encoding="utf-8") if sql else None
            text = csv.read_bytes().decode("utf-8") if csv else None
            sample["candidate_csv"] = text if text is not None and len(text) <= CSV_LIMIT else None
            sample["candidate_csv_bytes"] = len(text) if text is not None else None
            samples.append(sample)
    out = Path(__file__).resolve().parents[1] / "tests/fixtures/clinsql_validation_scores.json.gz"
    out.write_bytes(gzip.compress(json.dumps(samples, separators=(",", ":")).encode(), mtime=0))
    print(f"{out}: {len(samples)} samples, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or ["DeepSeek-R1-0528", "gpt-5-mini", "gemini-2.5-flash"])
