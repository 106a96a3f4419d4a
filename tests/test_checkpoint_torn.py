"""The run's checkpoint after a killed driver: a half-written last line is skipped on load, and the next record is
written whole on a line of its own (not glued to the fragment, which would lose it too)."""
from ehrbench.runtime.checkpoint import TrialStore
from ehrbench.trial import TrialRecord


def test_a_torn_last_line_costs_only_itself(tmp_path):
    checkpoint = TrialStore(tmp_path / "run")
    checkpoint.append(TrialRecord("a", 0, "answered", 1.0))
    with checkpoint.path.open("a") as f:
        f.write('{"task_key": "b", "trial": 0, "termin')            # the driver killed mid-write
    checkpoint.append(TrialRecord("c", 0, "answered", 1.0))
    assert [r.task_key for r in checkpoint.load()] == ["a", "c"]
    assert checkpoint.path.read_text().count("\n") == 3
