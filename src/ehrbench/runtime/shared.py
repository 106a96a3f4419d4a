"""Hosted data shared by the runs of one driver: a suite's children use one set of database and index actors.

A suite runs its children (benchmark x model) in threads of one driver. Children over the same database file need
the same read-only `DatabaseShard`s, and children over the same databases the same `ValueIndexActor` (one embedding
model, one copy of every FAISS index: on a GPU, one GPU's memory). So the driver keeps each hosted set under a key
made of what decides its content (the Ray job, the file, the replicas, the placement; for the index, the cache,
the embedder and every database file), starts it for the first run that asks, and lets it go, by dropping its
handles (Ray then ends the actors), when the last run holding it releases it. A suite keeps every set up until it
ends (`kept`), so children that run one after the other use the same actors too: one set per world.

Each set gets a fresh name prefix when it starts, so a set released and started again never meets the old one's
names while Ray is still ending it. Runs of *other* drivers (two `python -m ehrbench` on one cluster) are other Ray
jobs, whose named actors live in their own namespaces: they share nothing, as before.
"""
from __future__ import annotations

import hashlib
import json
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import ray


@dataclass
class Hosted:
    """One hosted set: its name prefix, its handles (held here while a run uses them) and how many runs do."""
    prefix: str
    handles: object
    users: int = 1
    on_last: Callable[[object], None] | None = None      # what the last run out asked for, done when it goes


_LOCK = threading.Lock()
_HOSTED: dict[str, Hosted] = {}
_KEEPERS = [0]          # how many `kept()` blocks are open: while any is, a set no run uses stays up


def hosted_key(*parts) -> str:
    """A set's key: what decides its content, within this driver's Ray job."""
    text = json.dumps([ray.get_runtime_context().get_job_id(), *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def acquire(key: str, start: Callable[[str], object]) -> Hosted:
    """The set under `key`, started (`start(prefix)` returns its handles) by the first run that asks for it."""
    with _LOCK:
        if key in _HOSTED:
            _HOSTED[key].users += 1
            return _HOSTED[key]
    hosted = Hosted(f"ehrbench-{key[:10]}-{uuid.uuid4().hex[:6]}", None)
    hosted.handles = start(hosted.prefix)       # outside the lock: starting actors can take seconds
    with _LOCK:
        if key in _HOSTED:                      # another thread started the same set meanwhile: use the first
            _HOSTED[key].users += 1
            return _HOSTED[key]
        _HOSTED[key] = hosted
    return hosted


def release(key: str, on_last: Callable[[object], None] | None = None) -> None:
    """A run is done with the set under `key`; the last one out lets the actors go, after `on_last(handles)`
    (unless a suite keeps them up: then when it ends)."""
    with _LOCK:
        hosted = _HOSTED.get(key)
        if hosted is None:
            return
        hosted.users -= 1
        hosted.on_last = on_last
        if hosted.users > 0 or _KEEPERS[0]:
            return
        del _HOSTED[key]
    _let_go(hosted)


def _let_go(hosted: Hosted) -> None:
    if hosted.on_last is not None:
        hosted.on_last(hosted.handles)
    hosted.handles = None


@contextmanager
def kept():
    """Every set started inside stays up until the block ends (a suite: the next child over the same files finds
    it), then those no run uses go."""
    with _LOCK:
        _KEEPERS[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _KEEPERS[0] -= 1
            idle = [] if _KEEPERS[0] else [_HOSTED.pop(k) for k, h in list(_HOSTED.items()) if h.users <= 0]
        for hosted in idle:
            _let_go(hosted)


def hosted_now() -> dict[str, int]:
    """Each set this driver hosts now and how many runs use it (tests, and the suite's log)."""
    with _LOCK:
        return {key: h.users for key, h in _HOSTED.items()}
