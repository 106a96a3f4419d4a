"""Resume: finished trials are appended to disk as they arrive; the same command run again skips them.

A run's identity is a hash of the resolved config without what cannot change a trial's outcome (tracking, runtime,
trial count, task subset, run name) and without secrets. Its folder holds `records.jsonl` (one TrialRecord per line,
flushed and fsynced before the next is accepted) and `mlflow_run_id`, so a resumed run logs into the same MLflow run.
A trial is done when its last attempt is scored or rejected by the validator; infrastructure failures run again.
A torn last line (the process died mid-write) is ignored; nothing before it is lost.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, fields
from pathlib import Path

from ..trial import Termination, TrialRecord

NOT_IDENTITY = ("tracking", "runtime", "trials", "limit_tasks", "run_name", "resume", "hydra")
_RECORD_FIELDS = {f.name for f in fields(TrialRecord)}


def run_identity(cfg: dict, task_digest: str) -> str:
    """Hash of what decides trial outcomes: the config (minus NOT_IDENTITY) and the task set's content."""
    from ..tracking.mlflow_tracker import flatten

    kept = {k: v for k, v in cfg.items() if k not in NOT_IDENTITY}
    payload = json.dumps({"config": flatten(kept), "tasks": task_digest}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def task_digest(tasks) -> str:
    h = hashlib.sha256()
    for t in sorted(tasks, key=lambda t: t.key):
        h.update(json.dumps(t.to_json(), sort_keys=True).encode())
    return h.hexdigest()[:16]


class TrialStore:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "records.jsonl"

    def load(self) -> list[TrialRecord]:
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_text().splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn write from a killed process
            records.append(TrialRecord(**{k: v for k, v in data.items() if k in _RECORD_FIELDS}))
        return records

    @staticmethod
    def finished(records: list[TrialRecord]) -> set[tuple[str, int]]:
        last: dict[tuple[str, int], TrialRecord] = {}
        for r in records:
            last[(r.task_key, r.trial)] = r
        return {k for k, r in last.items() if r.valid or r.termination == Termination.REJECTED.value}

    def append(self, record: TrialRecord) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(asdict(record), default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @property
    def run_id(self) -> str | None:
        p = self.folder / "mlflow_run_id"
        return p.read_text().strip() if p.exists() else None

    @run_id.setter
    def run_id(self, value: str) -> None:
        (self.folder / "mlflow_run_id").write_text(value)
