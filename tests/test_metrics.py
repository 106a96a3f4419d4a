import pytest

from ehrbench.metrics import pass_at_k, pass_hat_k, summarize


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
