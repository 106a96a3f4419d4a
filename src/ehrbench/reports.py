"""What a benchmark's scoring gives back, in one home: the run's report (`Report`) and each task's score on the
headline metric (`TaskScores`). The spine (`__main__`, `scoreboard.py`, `leaderboard.py`) and every benchmark read
these types; none of them needs the benchmark seam itself to do so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Report:
    """A benchmark's results: the table printed and logged, metrics, curves (metric over k) and files."""
    text: str
    metrics: dict[str, float]
    headline: dict[str, float] = field(default_factory=dict)     # a few numbers for the run's description
    curves: dict[str, list[float]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    withheld: str | None = None          # why the headline figures are withheld (the run is not complete yet)

    def renamed(self, prefix: str) -> "Report":
        """Every figure under `prefix` (a run whose setting is not the paper's: its figures keep names of their
        own), the table's title saying so."""
        return Report(f"{prefix} (not the paper's setting)\n{self.text}",
                      {prefix + k: v for k, v in self.metrics.items()},
                      {prefix + k: v for k, v in self.headline.items()},
                      {prefix + k: v for k, v in self.curves.items()}, self.files, self.withheld)


@dataclass(frozen=True)
class TaskScores:
    """Each task's score (x100) on the run's headline metric, the mean of which over tasks (over groups of tasks,
    where `groups` names them) is that metric: what a leaderboard's interval and a paired comparison resample."""
    metric: str                                # the paper's name (`SR-5`, `mRS`, `F1`, ...)
    scores: dict[str, float]                   # task key -> score
    groups: dict[str, str] | None = None       # task key -> group, where the metric is a mean of group means

    def to_json(self) -> dict:
        return {"metric": self.metric, "scores": self.scores, "groups": self.groups}

    @classmethod
    def from_json(cls, data: dict) -> "TaskScores":
        return cls(data["metric"], {k: float(v) for k, v in data["scores"].items()}, data.get("groups"))
