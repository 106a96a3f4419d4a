"""Run a database engine in child processes with a hard memory limit, for engines that cannot bound themselves.

SQLite bounds every value inside the engine (its length limit) and its heap (`hard_heap_limit`); DuckDB does not:
`SELECT repeat('x', 400000000) FROM t LIMIT 10` builds gigabytes of strings outside its `memory_limit`. So a
`Sandbox` keeps the engine in `workers` child processes whose address space is capped (RLIMIT_AS), sends each call
to an idle child and waits at most the call's deadline. A child that dies mid-call (the query outgrew the cap) or
overruns its deadline is replaced and the call fails with a `QueryError` naming the limit; the host process, and
every other query, is untouched. Errors the engine raised on purpose (`QueryError` and subclasses) come back as
they were; a child that crashed any other way (a segfault, an engine error that is not the query's fault) is
replaced too and the call raises `RuntimeError`, which the trial reports as an infrastructure failure and re-runs.
The pool keeps its size: a child that cannot be started is tried again on the next call.
"""
from __future__ import annotations

import importlib
import os
import queue
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import traceback
from multiprocessing.connection import Client, Listener
from pathlib import Path

from .limits import MemoryLimitError, QueryError, QueryTimeout

_GRACE_S = 10.0    # beyond a query's own deadline, for the engine to stop it itself
_START_S = 120.0   # for a child to start and connect


def _child(conn) -> None:
    """The child's loop: build the engine from the spec it is sent, then answer calls until the pipe closes."""
    engine, args, kwargs, address_space_bytes = conn.recv()
    resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    module, _, name = engine.partition(":")
    try:
        obj = getattr(importlib.import_module(module), name)(*args, **kwargs)
        conn.send(("ready", None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    while True:
        try:
            method, call_args, call_kwargs = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", getattr(obj, method)(*call_args, **call_kwargs)))
        except QueryError as e:
            conn.send(("error", e))
        except MemoryError:
            conn.send(("error", MemoryLimitError(f"query stopped: it needed more than the database's "
                                                 f"{address_space_bytes:,}-byte memory limit")))
        except Exception as e:  # noqa: BLE001
            conn.send(("crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"))


class _Worker:
    """One child: a fresh interpreter (`python -m ehrbench.db.sandbox`), never a fork of the threaded host, talking
    over an authenticated Unix socket."""

    def __init__(self, engine: str, args: tuple, kwargs: dict, address_space_bytes: int):
        folder = tempfile.mkdtemp(prefix="ehrb-sbx-")
        address, key = str(Path(folder) / "s"), secrets.token_bytes(32)
        listener = Listener(address, family="AF_UNIX", authkey=key)
        listener._listener._socket.settimeout(_START_S)    # a child that dies before connecting must not hang us
        env = {**os.environ, "EHRBENCH_SANDBOX_ADDRESS": address, "EHRBENCH_SANDBOX_KEY": key.hex()}
        self.process = subprocess.Popen([sys.executable, "-m", "ehrbench.db.sandbox"], env=env,
                                        stdin=subprocess.DEVNULL)
        try:
            self.conn = listener.accept()
        except OSError as e:
            self.process.kill()
            raise RuntimeError(f"database engine {engine} did not connect in {_START_S:g} s: {e}") from None
        finally:
            listener.close()
            shutil.rmtree(folder, ignore_errors=True)
        self.conn.send((engine, args, kwargs, address_space_bytes))
        status, detail = self.conn.recv()
        if status != "ready":
            self.stop()
            raise RuntimeError(f"database engine {engine} did not start: {detail}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self.conn.close()


class Sandbox:
    def __init__(self, engine: str, args: tuple = (), kwargs: dict | None = None, workers: int = 2,
                 address_space_bytes: int = 3 * 2**30):
        self.spec = (engine, tuple(args), dict(kwargs or {}), address_space_bytes)
        self.address_space_bytes = address_space_bytes
        self.idle: queue.Queue[_Worker | None] = queue.Queue()   # None: a slot whose child is yet to start
        for _ in range(workers):
            self.idle.put(_Worker(*self.spec))
        self.replaced = 0

    def call(self, method: str, *args, deadline_s: float = 60.0, **kwargs):
        try:
            worker = self.idle.get(timeout=deadline_s + _GRACE_S + _START_S)
        except queue.Empty:
            raise RuntimeError("no database engine process became free in time") from None
        if worker is None:
            try:
                worker = _Worker(*self.spec)
            except BaseException:
                self.idle.put(None)
                raise
        try:
            worker.conn.send((method, args, kwargs))
            if not worker.conn.poll(deadline_s + _GRACE_S):
                raise self._retire(worker, QueryTimeout(f"query exceeded the {deadline_s:g} s time limit and was "
                                                      "stopped"))
            status, payload = worker.conn.recv()
        except (EOFError, OSError):
            crashed = worker.process.poll() in (-11, -7, -4)         # SIGSEGV, SIGBUS, SIGILL: not the query's size
            raise self._retire(worker, RuntimeError(f"database engine process crashed ({worker.process.poll()})")
                               if crashed else MemoryLimitError(
                                   f"query stopped: it needed more than the database's {self.address_space_bytes:,}"
                                   "-byte memory limit")) from None
        except QueryError:
            raise
        except BaseException:
            self._retire(worker, None)
            raise
        if status == "error" and isinstance(payload, MemoryLimitError):
            raise self._retire(worker, payload)          # out of memory once: start the next query afresh
        if status == "crash":
            raise self._retire(worker, RuntimeError(f"database engine failed: {payload}"))
        self.idle.put(worker)
        if status == "ok":
            return payload
        raise payload

    def _retire(self, worker: _Worker, error):
        """Stop a child and free its slot (a fresh child starts on the slot's next use); returns `error`."""
        worker.stop()
        self.replaced += 1
        self.idle.put(None)
        return error

    def close(self) -> None:
        while not self.idle.empty():
            worker = self.idle.get()
            if worker is not None:
                worker.stop()


if __name__ == "__main__":
    _child(Client(os.environ["EHRBENCH_SANDBOX_ADDRESS"], family="AF_UNIX",
                  authkey=bytes.fromhex(os.environ["EHRBENCH_SANDBOX_KEY"])))
