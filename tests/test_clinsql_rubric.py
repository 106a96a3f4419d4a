"""ClinSQL's rubric aggregation: every published validation score recomputed from its leaf decisions, and the
strict reading of tree files."""
import gzip
import json
from pathlib import Path

import pytest

from ehrbench.benchmarks.clinsql.rubric import RubricError, category_of, parse, score

FIXTURE = Path(__file__).parent / "fixtures" / "clinsql_validation_scores.json.gz"


def _with_text(node: dict) -> dict:
    """The fixture keeps structure only; give every node the requirements text a tree file has."""
    return {**node, "requirements": node["id"], "sub_tasks": [_with_text(c) for c in node["sub_tasks"]]}


def test_published_validation_scores_are_reproduced_from_their_leaf_decisions():
    samples = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    assert len(samples) > 500 and {s["model"] for s in samples} >= {"DeepSeek-R1-0528", "gpt-5-mini"}
    partial = 0
    for s in samples:
        for kind in ("sql", "results"):
            got = score(parse(_with_text(s[f"{kind}_tree"]), s["sample"]), s[f"{kind}_leaves"])
            assert got == pytest.approx(s[f"{kind}_score"], abs=1e-12), (s["model"], s["sample"], kind)
            partial += 0 < got < 1
    assert partial > 200          # the rule is exercised on fractional scores, not only 0 and 1


def leaf(id, critical=False, weight=1):
    return {"id": id, "requirements": id, "critical": critical, "weight": weight, "sub_tasks": []}


def test_sequential_nodes_stop_at_the_first_failure_and_ignore_critical_flags():
    tree = parse({"id": "r", "requirements": "r", "sequential": True,
                  "sub_tasks": [leaf("a", weight=1), leaf("b", critical=True, weight=2), leaf("c", weight=3)]})
    assert score(tree, {"a": 1, "b": 0, "c": 1}) == pytest.approx(1 / 3)      # (1*1 + 2*0) / 3; c never counted
    assert score(tree, {"a": 1, "b": 1, "c": 0}) == pytest.approx(3 / 6)
    assert score(tree, {"a": 0, "b": 1, "c": 1}) == 0.0


def test_critical_children_gate_the_weighted_mean_of_the_rest():
    tree = parse({"id": "r", "requirements": "r", "sub_tasks": [
        leaf("crit", critical=True), leaf("x", weight=3),
        {"id": "g", "requirements": "g", "weight": 1, "sub_tasks": [leaf("y"), leaf("z")]}]})
    assert score(tree, {"crit": 0, "x": 1, "y": 1, "z": 1}) == 0.0
    assert score(tree, {"crit": 1, "x": 1, "y": 1, "z": 0}) == pytest.approx((3 + 0.5) / 4)
    assert score(tree, {"crit": 1, "x": 1, "y": 1}) == pytest.approx((3 + 0.5) / 4)   # no decision: 0
    only_critical = parse({"id": "r", "requirements": "r", "sub_tasks": [leaf("c", critical=True)]})
    assert score(only_critical, {"c": 1}) == 1.0
    assert category_of(tree) == {"crit": "crit", "x": "x", "y": "g", "z": "g"}


def test_malformed_trees_name_file_and_node():
    with pytest.raises(RubricError, match=r"t\.json: root/r\[0\]: `requirements` must be"):
        parse({"id": "r", "requirements": "r", "sub_tasks": [{"id": "a", "sub_tasks": []}]}, "t.json")
    with pytest.raises(RubricError, match=r"\(a\): `weight` must be a number"):
        parse({"id": "r", "requirements": "r", "sub_tasks": [{**leaf("a"), "weight": "heavy"}]}, "t.json")
    with pytest.raises(RubricError, match="children go in `sub_tasks`"):
        parse({"id": "r", "requirements": "r", "subtasks": [leaf("a")]}, "t.json")
    kept = parse({**leaf("a"), "sequential_order": [1, 2]})          # extra keys in the validation split: kept
    assert kept.to_json()["sequential_order"] == [1, 2]
    for scoring in ("0/1", "1.0-30.0", 1):                             # `scoring` as the validation split has it
        assert parse({**leaf("a"), "scoring": scoring}).scoring == scoring


def test_the_published_scores_come_back_through_the_grading_with_the_judge_replayed():
    """Every published validation sample of three models through `benchmark.grade` under the original contract, the
    candidate being the model's published SQL and result CSV, the judge replayed from the recorded leaf decisions:
    every leaf of both trees is asked, each prompt carries that SQL and that CSV's rows as the authors' judge read
    them, nothing else decides a leaf, and the two scores are the published ones."""
    import asyncio
    import csv
    import io

    from ehrbench.benchmarks.clinsql.benchmark import Grading, grade, score_candidate
    from ehrbench.benchmarks.clinsql.scoring import NULL_CSV, Candidate, Decision, judge_rows
    from ehrbench.benchmarks.clinsql.tasks import Task

    class Replay:
        def __init__(self, sample, n_sql):
            self.sample, self.n_sql, self.asked = sample, n_sql, []

        async def decide_all(self, asked):
            self.asked = asked
            return [Decision(leaf.id, self.sample["sql_leaves" if i < self.n_sql else "results_leaves"].get(
                leaf.id, 0.0), "replayed", "llm") for i, (leaf, _) in enumerate(asked)]

    def candidate(sample) -> Candidate:
        sql, text = (sample["candidate_sql"] or "").strip(), sample["candidate_csv"].replace("\r\n", "\n")
        if text == NULL_CSV:
            return Candidate(sql, False, error="failed or empty")
        columns, *rows = list(csv.reader(io.StringIO(text)))
        return Candidate(sql, True, tuple(columns), [[None if v == "" else v for v in r] for r in rows])

    samples = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    assert len({s["model"] for s in samples}) >= 3
    with_files = [s for s in samples if s["candidate_csv"] is not None]
    assert len(with_files) >= len(samples) - 10          # a few results over 20 KB are left out of the fixture
    for s in with_files:
        task = Task("S", "easy", "001", "question?", "SELECT 1", ("x",), (("1",),),
                    parse(_with_text(s["sql_tree"]), "sql"), parse(_with_text(s["results_tree"]), "results"))
        n_sql = len(list(task.sql_tree.leaves()))
        judge, given = Replay(s, n_sql), candidate(s)
        sql, results, agreement = asyncio.run(grade(task, given, Grading(judge, original=True, judge_gold=False)))
        leaves = [x.id for x in task.sql_tree.leaves()] + [x.id for x in task.results_tree.leaves()]
        assert [leaf.id for leaf, _ in judge.asked] == leaves and agreement == {}
        rows = judge_rows(s["candidate_csv"].replace("\r\n", "\n"))
        for _, prompt in judge.asked:
            assert f"Model results rows (JSON):\n{rows}\n\n" in prompt, (s["model"], s["sample"])
            assert not given.sql or f"Model SQL:\n```sql\n{given.sql}\n```" in prompt
            assert "Reference SQL" not in prompt
        score = score_candidate(task, sql, results, given, 1)
        assert score.parts["sql_score"] == pytest.approx(s["sql_score"], abs=1e-12), (s["model"], s["sample"])
        assert score.parts["exec_score"] == pytest.approx(s["results_score"], abs=1e-12), (s["model"], s["sample"])
