"""EHRAgent's judges: the original's lenient one reproduces wshi83/EhrAgent's `judge` on the cases its code was run
on (tests/fixtures/ehragent_judge_cases.json: prediction window, ground truth, the original's verdict), and the
strict one does not share its blind spots."""
import json
from pathlib import Path

import pytest

from ehrbench.benchmarks.ehragent.scoring import compatibility, gold_text, strict

CASES = json.loads((Path(__file__).parent / "fixtures" / "ehragent_judge_cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[f"{c['ans']!r} in {c['pred'].strip()!r}" for c in CASES])
def test_compatibility_judges_as_the_original_did(case):
    assert compatibility(case["pred"], case["ans"]) is case["judge_main"]


@pytest.mark.parametrize("answer, gold, expected", [
    ("10", ["0"], False),                      # the lenient judge passes this: "0" is in "10"
    ("12.5", ["12.0"], False),                 # and this: "12.0" becomes "12"
    ("12", ["12.0"], True),
    (1.7500000001, ["1.75"], True),
    ("True", ["1"], True), ("yes", ["1"], True), (False, ["0"], True), (None, ["0"], True),
    ("['b', 'a']", ["a", "b"], True), ("[('a',), ('b',)]", ["a", "b"], True), ("b, a", ["a", "b"], True),
    (["a"], ["a", "b"], False), (["a", "a", "b"], ["a", "b"], False),
    ("2105-12-31 23:59:00", ["2105-12-31 23:59:00"], True), ("Metformin ", ["metformin"], True),
])
def test_strict_compares_normalised_values_as_multisets(answer, gold, expected):
    assert strict(answer, gold) is expected


def test_a_list_ground_truth_is_joined_as_the_original_joins_it():
    assert gold_text(["a", "b"]) == "a, b"
    assert compatibility("b and a", gold_text(["a", "b"]))


def test_strict_keeps_a_listed_value_with_commas_whole():
    assert strict("['cholesterol, ldl, calculated', 'glucose']", ["cholesterol, ldl, calculated", "glucose"])
    assert not strict("['cholesterol', 'ldl', 'calculated']", ["cholesterol, ldl, calculated"])
