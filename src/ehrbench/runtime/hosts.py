"""Async hosts: how a trial reaches a database or an index, wherever it lives.

`LocalHost` wraps an in-process object (tests, in-process runs); `ActorHost` wraps Ray actor handles (one or more
replicas of the same thing, used in turn). Both turn `host.method(*args)` into an awaitable, so `ToolSuite` and the
scorer await the same calls in both. Schema lookups of an immutable database are memoized on the caller's side:
every trial asks for the table list, and the answer never changes. A call lost with its actor (the actor or its
node died) is sent again while the actor restarts, then raises `InfrastructureError`, so the trial's attempt is
re-run; an error the method itself raised (a refused query) reaches the caller as it is, never resent.
"""
from __future__ import annotations

import asyncio
import itertools
import time

import ray

from ..db.limits import QueryError
from ..trial import InfrastructureError

STATIC_METHODS = frozenset({"table_names", "column_names", "table_info"})
# A call lost with its actor (killed mid-call) is sent again after these waits, then fails the attempt. Hosted
# methods are reads, so sending one again is safe; a call that failed on its merits (a refused query) is never resent.
LOST_CALL_WAITS_S = (0.5, 2.0, 5.0, None)
# An actor Ray reports as restarting (its node lost, it is being re-created, perhaps on a node yet to join) is waited
# for this long before the call fails: a restart costs the trial time, not one attempt after another.
RESTART_PATIENCE_S = 180.0


async def through_restarts(call, patience_s: float | None = None):
    """`await call()`, sent again while its actor is restarting (`ActorUnavailableError`), for up to `patience_s`;
    any other error, and an actor gone for good (`ActorDiedError`), is the caller's at once."""
    deadline = time.monotonic() + (RESTART_PATIENCE_S if patience_s is None else patience_s)
    wait_s = 0.5
    while True:
        try:
            return await call()
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() + wait_s > deadline:
                raise
            await asyncio.sleep(wait_s)
            wait_s = min(2 * wait_s, 5.0)


class LocalHost:
    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        method = getattr(self._obj, name)

        async def call(*args, **kwargs):
            return method(*args, **kwargs)
        return call


def _why(error: Exception, keep: int = 400) -> str:
    """The end of a lost actor's story, where Ray puts the error its constructor raised (a file not on its node)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return (lines[-1] if lines else "")[-keep:]


class ActorHost:
    def __init__(self, handles):
        self._handles = list(handles) if isinstance(handles, (list, tuple)) else [handles]
        self._turn = itertools.cycle(range(len(self._handles)))
        self._memo: dict = {}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        async def call(*args, **kwargs):
            key = (name, args, tuple(sorted(kwargs.items())))
            if name in STATIC_METHODS and key in self._memo:
                return self._memo[key]

            def send():              # each send goes to the next replica: a restarting one is passed over
                return getattr(self._handles[next(self._turn)], name).remote(*args, **kwargs)

            for wait_s in LOST_CALL_WAITS_S:
                try:
                    result = await through_restarts(send)
                    break
                except ray.exceptions.RayTaskError as e:
                    if isinstance(e.cause, QueryError):   # the database's own words, not Ray's traceback around them
                        raise e.cause from None
                    raise
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.ObjectLostError) as e:
                    if wait_s is None or isinstance(e, ray.exceptions.ActorUnavailableError):   # patience spent
                        raise InfrastructureError(f"{name}() on a hosted actor failed: {type(e).__name__}: "
                                                  f"{_why(e)}", source="tool") from None
                    await asyncio.sleep(wait_s)      # lost mid-call: the same read, once the actor is back
            if name in STATIC_METHODS:
                self._memo[key] = result
            return result
        return call


class ServiceHost:
    """A `ServiceShard`'s object as if it were here: `await host.method(*args)` is its remote `call`. A method that
    raised is an infrastructure error (the trial is re-run, its traceback never reaches the model): services answer
    the model's mistakes as values."""

    def __init__(self, handle):
        self._host = ActorHost(handle)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        async def call(*args):
            try:
                return await self._host.call(name, *args)
            except (ray.exceptions.RayTaskError, QueryError) as e:   # a harness fault, never the model's
                cause = getattr(e, "cause", e)
                raise InfrastructureError(f"service {name}() failed: {type(cause).__name__}: {cause}"[:500],
                                          source="tool") from None
        return call


class PatientRouter:
    """A patient-partitioned database (`db/sharding.py`): each patient's questions go to the shard holding them."""

    def __init__(self, shards: list):
        from ..db.sharding import shard_of

        self.shards, self._shard_of = shards, shard_of

    def for_patient(self, patient_id):
        return self.shards[self._shard_of(patient_id, len(self.shards))]


class InProcess:
    """A service object used in this process as a hosted shard is (`await obj.method(...)`, each call on a thread; a
    method that raised is an infrastructure error, as `ServiceHost` makes it): tests and runs without Ray actors."""

    def __init__(self, service):
        self._service = service

    def __getattr__(self, name):
        method = getattr(self._service, name)

        async def call(*args):
            try:
                return await asyncio.to_thread(method, *args)
            except Exception as e:  # noqa: BLE001 - a fault of the harness's, never the model's
                raise InfrastructureError(f"service {name}() failed: {type(e).__name__}: {e}"[:500],
                                          source="tool") from None
        return call
