"""Resume: finished trials are appended to disk as they arrive; the same command run again skips them.

A run's identity is a hash of the resolved config itself (every value, untruncated) without what cannot change a
trial's outcome (tracking, runtime, trial count, task subset, run name, where data may go) and without secrets. Its
folder holds `records.jsonl` (one TrialRecord per line, flushed and fsynced before the next is accepted),
`mlflow_run_id`, so a resumed run logs into the same MLflow run, and `scope.json`: the most trials per task and every
task the run has been asked for, so a re-run with fewer (`trials=1`, `limit_tasks=1`) still reports everything it
established.
A trial is done when its last attempt is scored or rejected by the validator; infrastructure failures run again.
A torn last line (the process died mid-write) is ignored; nothing before it is lost.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, fields
from pathlib import Path

from ..trial import TrialRecord

NOT_IDENTITY = ("tracking", "runtime", "trials", "limit_tasks", "run_name", "resume", "hydra", "suite", "models", "dry_run", "budget_usd")
_RECORD_FIELDS = {f.name for f in fields(TrialRecord)}


# declarations about where data may go (`data_use.py`), at any depth: they decide whether a run may start, never
# what a trial does, so declaring them never makes a finished run another one
NOT_IDENTITY_ANYWHERE = ("data_use", "data_handling", "credentialed_ok")


def _without_secrets(node):
    from ..tracking.mlflow_tracker import SECRET_KEY

    if isinstance(node, dict):
        return {k: _without_secrets(v) for k, v in node.items()
                if not SECRET_KEY.search(str(k)) and k not in NOT_IDENTITY_ANYWHERE}
    if isinstance(node, list):
        return [_without_secrets(v) for v in node]
    return node


def run_identity(cfg: dict, task_digest: str) -> str:
    """Hash of what decides trial outcomes: the config (minus NOT_IDENTITY and secrets) and the task set's content."""
    kept = {k: v for k, v in cfg.items() if k not in NOT_IDENTITY}
    payload = json.dumps({"config": _without_secrets(kept), "tasks": task_digest}, sort_keys=True, default=str)
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
        """Trials a resume skips: those whose last record is scored. A trial every attempt of which the validator
        rejected has no score, so a resume runs it again from the start (as EHR-ChatQA's `run.py` re-runs a
        trial whose reward is None), as it does a trial that failed on infrastructure."""
        last: dict[tuple[str, int], TrialRecord] = {}
        for r in records:
            last[(r.task_key, r.trial)] = r
        return {k for k, r in last.items() if r.final and r.valid}

    def widen_scope(self, task_keys: list[str], trials: int) -> tuple[int, list[str]]:
        """Add this invocation's tasks and trial count to what the run has covered; returns the widened scope."""
        path = self.folder / "scope.json"
        scope = json.loads(path.read_text()) if path.exists() else {"trials": 0, "tasks": []}
        keys = list(dict.fromkeys(scope["tasks"] + list(task_keys)))
        k = max(int(scope["trials"]), trials)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"trials": k, "tasks": keys}))
        os.replace(tmp, path)          # atomic: a crash leaves the old scope or the new one
        return k, keys

    def append(self, record: TrialRecord) -> None:
        """One line, in one write (a buffered writer may split a long record, and a driver killed between the parts
        leaves half a line); a line a killed process did leave half-written is ended first, so this record is whole."""
        line = (json.dumps(asdict(record), default=str) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and self._last_byte() != b"\n":
                line = b"\n" + line
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _last_byte(self) -> bytes:
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1)

    @property
    def run_id(self) -> str | None:
        p = self.folder / "mlflow_run_id"
        return p.read_text().strip() if p.exists() else None

    @run_id.setter
    def run_id(self, value: str) -> None:
        (self.folder / "mlflow_run_id").write_text(value)
