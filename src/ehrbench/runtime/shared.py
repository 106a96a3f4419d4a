"""Hosted data shared by the runs of one driver: a suite's children use one set of database and index actors.

A suite runs its children (benchmark x model) in threads of one driver. Children over the same database file need
the same read-only `DatabaseShard`s, and children over the same databases the same `ValueIndexActor` (one embedding
model, one copy of every FAISS index: on a GPU, one GPU's memory). So the driver keeps each hosted set under a key
made of what decides its content (the Ray job, the file, the replicas, the placement; for the index, the cache,
the embedder and every database file), starts it for the first run that asks, and lets it go, by dropping its
handles (Ray then ends the actors), when the last run holding it releases it. A suite keeps every set up until it
ends (`kept`), so children that run one after the other use the same actors too: one set per world (an idle index
goes when another index is needed, and a kept set whose actors died for good is started afresh).

Each set gets a fresh name prefix when it starts, so a set released and started again never meets the old one's
names while Ray is still ending it. Runs of *other* drivers (two `python -m ehrbench` on one cluster) are other Ray
jobs, whose named actors live in their own namespaces: they share nothing, as before.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import ray

log = logging.getLogger(__name__)


@dataclass
class Hosted:
    """One hosted set: its name prefix, its handles (held here while a run uses them) and how many runs do."""
    prefix: str
    handles: object
    kind: str = ""
    users: int = 1
    on_last: Callable[[object], None] | None = None      # what the last run out asked for, done when it goes


_LOCK = threading.Lock()
_HOSTED: dict[str, Hosted] = {}
_KEEPERS = [0]          # how many `kept()` blocks are open: while any is, a set no run uses stays up


def hosted_key(*parts) -> str:
    """A set's key: what decides its content, within this driver's Ray job."""
    text = json.dumps([ray.get_runtime_context().get_job_id(), *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def acquire(key: str, start: Callable[[str], object], kind: str = "", alive: Callable[[object], bool] | None = None,
            alone: bool = False) -> Hosted:
    """The set under `key`, started (`start(prefix)` returns its handles) by the first run that asks for it.

    A set a suite kept up with no run using it is first checked (`alive(handles)`): one whose actors are gone for
    good (their restarts spent) is replaced, not handed to the next run. `alone`: before a new set of this `kind`
    starts, the kept sets of the same kind that no run uses go (a value index asks for the cluster's GPU: an idle one
    must not hold it from the next)."""
    with _LOCK:
        hosted = _HOSTED.get(key)
        if hosted is not None and hosted.users > 0:
            hosted.users += 1
            return hosted
    if hosted is not None:                       # kept up by a suite, used by no run
        if alive is None or alive(hosted.handles):
            with _LOCK:
                hosted.users += 1
            return hosted
        with _LOCK:
            _HOSTED.pop(key, None)
        hosted.on_last = None                    # its actors are gone: nothing to ask of them
        _let_go(hosted)
    if alone:
        with _LOCK:
            idle = [_HOSTED.pop(k) for k, h in list(_HOSTED.items()) if h.kind == kind and h.users <= 0]
        _let_go_all(idle)
    hosted = Hosted(f"ehrbench-{key[:10]}-{uuid.uuid4().hex[:6]}", None, kind)
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


def _let_go_all(sets: list[Hosted]) -> None:
    """Each set goes, whatever the one before it raised (logged): one failing clean-up keeps no other set up."""
    for hosted in sets:
        try:
            _let_go(hosted)
        except Exception as e:  # noqa: BLE001 - a clean-up that failed is reported, never a reason to keep others
            log.warning("could not let hosted set %s go cleanly: %s", hosted.prefix, e)


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
        _let_go_all(idle)


def hosted_now() -> dict[str, int]:
    """Each set this driver hosts now and how many runs use it (what the tests read)."""
    with _LOCK:
        return {key: h.users for key, h in _HOSTED.items()}
