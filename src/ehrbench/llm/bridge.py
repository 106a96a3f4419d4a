"""Run async model calls from synchronous trial code on one background event loop per process.

Trials are plain functions; model clients are async. Every call goes through the same long-lived loop, so the
clients' connection pools and rate limiters are shared by all the trials a process runs concurrently.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, TypeVar

T = TypeVar("T")
_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="ehrbench-llm-loop", daemon=True).start()
        return _loop


def run_sync(coro: Awaitable[T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()
