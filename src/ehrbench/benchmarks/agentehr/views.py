"""Where AgentEHR's episodes hold their censored patients: `PatientViews`, one shard of the `patients` service.

A run hosts the per-patient files in `benchmark.patient_shards` ServiceShard actors; a trial reaches the shard
that holds its patient (`db.sharding.shard_of`), which opens the episode's own `CensoredPatient` at load_ehr and
answers its queries until the trial ends (`close`, however it ended). Answers are plain data: ("ok", columns,
rows), ("error", the message for the model) or ("lost",) (the episode's view is gone: the trial is re-run), so
nothing but values crosses the wire. A shard keeps at most
`MAX_OPEN` episodes; the least recently used beyond that (a trial that never closed) is closed.
"""
from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

from ...db.limits import QueryError
from ...runtime.hosts import InProcess  # noqa: F401 - the in-process host of a shard, re-exported
from .censoring import RULES, CensoredPatient

MAX_OPEN = 4096


class PatientViews:
    def __init__(self, folders: dict[str, str | Path]):
        self.folders = {db: Path(f) for db, f in folders.items()}      # rendering -> its per-patient folder
        self.views: OrderedDict[str, CensoredPatient] = OrderedDict()
        self.lock = threading.Lock()

    def open(self, episode: str, source: str, subject_id: int, cutoff: str, censoring: str = "original",
             candidates: str | None = None) -> dict[str, tuple[list[str], int]]:
        """The episode's censored copies of its patient in rendering `source` at `cutoff` (by the `censoring` rule,
        with the task's candidate tables beside them for SQL); returns table -> (columns, rows as logged)."""
        folder = self.folders[source]
        path = folder / f"patient_{int(subject_id)}.db"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such patient file (the run's per-patient split lacks {subject_id})")
        view = CensoredPatient(path, cutoff, folder / "reference.db", RULES[source], censoring, candidates)
        with self.lock:
            old = self.views.pop(episode, None)
            self.views[episode] = view
            evicted = [self.views.popitem(last=False)[1] for _ in range(max(0, len(self.views) - MAX_OPEN))]
        for v in [old, *evicted]:
            if v is not None:
                v.close()
        return {t: (columns, view.counts[t]) for t, columns in view.tables.items()}

    def query(self, episode: str, sql: str, params: tuple = (), timeout_s: float = 10.0,
              max_rows: int | None = None) -> tuple:
        with self.lock:
            view = self.views.get(episode)
            if view is not None:
                self.views.move_to_end(episode)
        if view is None:                     # opened, then lost (a restart, an eviction): not the model's doing
            return ("lost",)
        try:
            columns, rows = view.query(sql, tuple(params), timeout_s, max_rows)
        except (sqlite3.Error, sqlite3.Warning, ValueError, QueryError) as e:
            return ("error", str(e))
        return ("ok", columns, rows)

    def close(self, episode: str) -> None:
        with self.lock:
            view = self.views.pop(episode, None)
        if view is not None:
            view.close()

    def open_episodes(self) -> int:
        return len(self.views)
