import pytest

from ehrbench.metrics import best_at_k, pass_at_k, pass_hat_k, set_f1, summarize


def test_pass_formulas_by_hand():
    # n=5, c=2, k=2: Pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; Pass^2 = C(2,2)/C(5,2) = 1/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_at_k(5, 0, 5) == 0.0 and pass_hat_k(5, 5, 5) == 1.0 and pass_hat_k(5, 4, 5) == 0.0


def test_summary_averages_tasks_and_reports_incomplete():
    s = summarize({"a": [1, 1, 1, 1, 1], "b": [1, 0, 0, 0, 0], "c": [1, 1]}, k=5)
    assert (s.tasks, s.incomplete) == (2, 1)
    assert s.sr == pytest.approx(60.0)
    assert s.pass_at == pytest.approx(100.0)
    assert s.pass_hat == pytest.approx(50.0)
    assert s.gap == pytest.approx(50.0)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 2)


def test_set_f1_by_hand():
    # P = 2/3 (a, b of a, b, x), R = 2/4: F1 = 2 * (2/3 * 1/2) / (2/3 + 1/2) = 4/7
    assert set_f1(["A", "b", "x"], ["a", "B", "c", "d"]) == pytest.approx(4 / 7)
    assert set_f1(["a", "a"], ["a"]) == 1.0                     # a set: duplicates count once
    assert set_f1([], ["a"]) == 0.0 and set_f1(["z"], ["a"]) == 0.0 and set_f1(["a"], []) == 0.0


def test_best_at_k_by_hand():
    # scores 0.2, 0.5, 0.9 (N=3): Best@1 = mean = 1.6/3; Best@2 = max over the 3 pairs = (0.5 + 0.9 + 0.9)/3
    s = [0.9, 0.2, 0.5]
    assert best_at_k(s, 1) == pytest.approx(1.6 / 3)
    assert best_at_k(s, 2) == pytest.approx(2.3 / 3)
    assert best_at_k(s, 3) == pytest.approx(0.9)
    with pytest.raises(ValueError):
        best_at_k(s, 4)
