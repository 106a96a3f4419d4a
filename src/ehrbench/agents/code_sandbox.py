"""Model-written Python, run apart from the worker, within time, memory, file and output limits.

    sandbox = CodeSandbox(preload=("pandas",))
    result = await sandbox.run(code, tools="ehrbench.benchmarks.ehragent.toolset", context={...},
                               on_tool=serve, limits=CellLimits(cpu_s=10, wall_s=30))

One host process per worker process (`sandbox_host.py`: empty environment, no network where the kernel allows a
namespace, heavy imports done once)
forks a child per cell, so a cell starts in milliseconds and cells of many trials run at once. What a cell does
comes back as a `CellResult`: its `answer`, what it printed (bounded), or the error it raised; and how it ended:
`ok`, `error`, `cpu_limit` (the kernel stopped it), `memory` (an allocation past its cap raised MemoryError),
`wall_limit` (the worker killed it) or `crashed`. None of these touches the worker: each becomes the agent's
observation. Tools that need the harness (SQL on the hosted database) are served by `on_tool`, awaited here.
A host that died is started again on the next cell; a cell it took with it raises `InfrastructureError`, so the
trial is re-run, not scored.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..trial import InfrastructureError
from .sandbox_host import HEADER, MAX_MESSAGE, encode, receive, send

_START_S = 60.0


@dataclass(frozen=True)
class CellLimits:
    cpu_s: float = 10.0            # CPU seconds (the kernel ends the cell past them)
    wall_s: float = 30.0           # wall seconds of the cell's own (the worker kills the cell); the time the harness
                                   # spends serving its tool calls (a database queue) is not counted, up to
    tool_wall_factor: float = 10.0  # this many wall_s of it: a cell looping on slow queries still ends
    memory_mb: int = 1024          # address space beyond what the host already maps
    file_mb: int = 16              # largest file the cell may write (in its own folder only)
    output_chars: int = 20_000     # print() output kept


@dataclass
class CellResult:
    ended: str                     # ok | error | cpu_limit | memory | wall_limit | crashed
    result: str | None = None      # str() of the cell's `answer`
    stdout: str = ""
    stdout_dropped: int = 0        # characters printed past the limit
    error: dict | None = None      # {"type", "message", "line"} of what the cell raised
    seconds: float = 0.0
    tool_calls: list[dict] = field(default_factory=list)


class CodeSandbox:
    def __init__(self, preload: tuple[str, ...] = ("pandas",), scratch_root: str | Path | None = None):
        self.preload = preload
        self.scratch_root = Path(scratch_root or tempfile.mkdtemp(prefix="ehrbench-cells-"))
        self._host: Any = None
        self._control: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._pending: dict[str, dict] = {}        # cell -> {"started": Future, "ended": Future}
        self._ids = itertools.count()
        self._starting: asyncio.Lock | None = None
        self.network = ""                           # how the host is kept off the network

    # --- the host ---------------------------------------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        """Nothing of the worker's environment (API keys live there): a path to import ehrbench and pandas from,
        single-threaded numeric libraries, Arrow on the system allocator, a home in the scratch folder."""
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        return {"PATH": os.defpath, "HOME": str(self.scratch_root), "LANG": "C.UTF-8", "PYTHONPATH": os.pathsep.join(paths),
                "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}   # Arrow's own pools reserve
        # address space up front, which a cell's address-space limit refuses (pandas' strings are Arrow's)

    async def _ensure_host(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._host is not None and self._host.returncode is None:
                return
            if self._control is not None:      # a host that died: its socket goes with it (its reader has ended)
                self._control.close()
                self._control = None
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.scratch_root.mkdir(parents=True, exist_ok=True)
            self._host = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ehrbench.agents.sandbox_host", str(theirs.fileno()), ",".join(self.preload),
                pass_fds=(theirs.fileno(),), env=self._environment(), cwd=str(self.scratch_root),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
            theirs.close()
            self._control = ours
            loop = asyncio.get_running_loop()
            ready: asyncio.Future = loop.create_future()
            threading.Thread(target=self._read_control, args=(ours, loop, ready), daemon=True).start()
            try:
                hello = await asyncio.wait_for(ready, _START_S)
            except (asyncio.TimeoutError, EOFError) as e:
                raise InfrastructureError(f"the code sandbox did not start ({e!r})", source="tool") from None
            self.network = hello.get("network", "")

    def _read_control(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, ready: asyncio.Future) -> None:
        """The host's reports (ready, cell started, cell ended), handed to the event loop (while it runs)."""
        def post(fn, *args) -> None:
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:            # the loop is closed: nobody waits any more
                pass

        def settle(cell: str, key: str, value) -> None:
            waiter = self._pending.get(cell, {}).get(key)
            if waiter is not None and not waiter.done():
                waiter.set_result(value)

        while True:
            try:
                message, _ = receive(sock)
            except OSError:
                message = None
            if message is None:
                def host_gone() -> None:
                    if not ready.done():
                        ready.set_exception(EOFError("the sandbox host exited"))
                    for cell in list(self._pending):
                        settle(cell, "started", None)
                        settle(cell, "ended", {"gone": True})
                post(host_gone)
                return
            op = message.get("op")
            if op == "ready":
                post(lambda m=message: ready.done() or ready.set_result(m))
            elif op in ("started", "ended"):
                post(settle, message["cell"], op, message)

    # --- one cell -----------------------------------------------------------------------------------------------
    async def run(self, code: str, tools: str | None = None, context: dict | None = None,
                  on_tool: Callable[[str, list], Awaitable[Any]] | None = None, limits: CellLimits = CellLimits(),
                  result_name: str = "answer") -> CellResult:
        await self._ensure_host()
        loop = asyncio.get_running_loop()
        cell = f"c{os.getpid()}-{next(self._ids)}"
        waiters = {"started": loop.create_future(), "ended": loop.create_future()}
        self._pending[cell] = waiters
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        scratch = self.scratch_root / cell
        request = {"op": "run", "cell": cell, "code": code, "tools": tools, "context": context or {},
                   "limits": asdict(limits), "scratch": str(scratch), "result_name": result_name}
        started = time.monotonic()
        try:
            with self._send_lock:
                send(self._control, request, [theirs.fileno()])
            theirs.close()
            reader, writer = await asyncio.open_unix_connection(sock=ours)
            serving = {"done": 0.0, "since": None}      # the harness's time on the cell's tool calls
            talk = asyncio.ensure_future(self._converse(reader, writer, on_tool, serving))
            try:
                outcome = await self._within_wall(talk, started, limits, serving)
            except asyncio.TimeoutError:
                await self._kill(cell)
                return CellResult("wall_limit", seconds=time.monotonic() - started)
            except BaseException:                # cancelled, or the harness failed: the cell must not live on
                await asyncio.shield(self._kill(cell))
                raise
            finally:
                writer.close()
            calls = outcome.pop("tool_calls")
            if outcome.get("op") == "done":
                error = outcome.get("error")
                ended = "ok" if not error else "memory" if error["type"] == "MemoryError" else "error"
                return CellResult(ended, outcome.get("result"), outcome.get("stdout", ""),
                                  outcome.get("stdout_dropped", 0), error, time.monotonic() - started, calls)
            await self._kill(cell)            # its socket closed without a result: make sure it is gone
            try:
                end = await asyncio.wait_for(waiters["ended"], 10.0)
            except asyncio.TimeoutError:
                raise InfrastructureError("the code sandbox did not report how a cell ended", source="tool") from None
            if end.get("gone"):
                raise InfrastructureError("the code sandbox host died while running a cell", source="tool")
            number = end.get("signal")
            ended = "cpu_limit" if number == signal.SIGXCPU or (number == signal.SIGKILL and
                                                                 time.monotonic() - started >= limits.cpu_s) else "crashed"
            how = signal.Signals(number).name if number else f"exit status {end.get('exit')}"
            return CellResult(ended, error={"type": "signal" if number else "exit", "message": how, "line": None},
                              seconds=time.monotonic() - started, tool_calls=calls)
        except OSError as e:
            raise InfrastructureError(f"the code sandbox is unreachable ({e})", source="tool") from None
        finally:
            self._pending.pop(cell, None)
            shutil.rmtree(scratch, ignore_errors=True)

    @staticmethod
    async def _within_wall(talk: asyncio.Future, started: float, limits: CellLimits, serving: dict) -> dict:
        """The cell's outcome, or TimeoutError once its own wall time (the time the harness spent serving its tool
        calls left out, up to `tool_wall_factor` x wall_s of it) passes `wall_s`. Many cells reading one database
        queue there; that queue is the harness's, not the cell's."""
        cap = limits.tool_wall_factor * limits.wall_s
        try:
            while True:
                now = time.monotonic()
                served = serving["done"] + (now - serving["since"] if serving["since"] is not None else 0.0)
                left = started + limits.wall_s + min(served, cap) - now
                if left <= 0:
                    raise asyncio.TimeoutError
                # while a call is served the deadline moves with the clock: wait until the cap could be reached
                wait = left + max(0.0, cap - served) if serving["since"] is not None else left
                done, _ = await asyncio.wait({talk}, timeout=wait)
                if done:
                    return talk.result()
        finally:
            if not talk.done():
                talk.cancel()
                await asyncio.wait({talk}, timeout=5.0)     # its tool call unwound before the cell is reported

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        on_tool: Callable[[str, list], Awaitable[Any]] | None, serving: dict | None = None) -> dict:
        """Serve the cell's tool calls until it reports its end (or its socket closes); `serving` accumulates the
        time spent on them (`done`, and `since` while one is in flight)."""
        serving = serving if serving is not None else {"done": 0.0, "since": None}
        calls: list[dict] = []
        while True:
            try:
                (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
                if size > MAX_MESSAGE:
                    return {"op": "oversized", "tool_calls": calls}
                message = json.loads(await reader.readexactly(size))
            except (asyncio.IncompleteReadError, OSError, ValueError):    # gone, or a message we cannot read
                return {"op": "closed", "tool_calls": calls}
            if message.get("op") == "done":
                return {**message, "tool_calls": calls}
            if message.get("op") != "tool" or "tool" not in message or not isinstance(message.get("args"), list):
                return {"op": "closed", "tool_calls": calls}
            t0 = serving["since"] = time.monotonic()
            try:
                if on_tool is None:
                    raise ValueError(f"no tool named {message['tool']!r} here")
                reply = {"result": await on_tool(message["tool"], message["args"])}
            except InfrastructureError:
                raise
            except Exception as e:  # noqa: BLE001 - the tool's error is the cell's exception
                reply = {"error": str(e)}
            finally:
                serving["done"], serving["since"] = serving["done"] + time.monotonic() - t0, None
            calls.append({"tool": message["tool"], "args": message["args"], "t": t0, "dt": time.monotonic() - t0,
                          "error": reply.get("error")})
            try:
                writer.write(encode(reply))
                await writer.drain()
            except OSError:                      # the cell died while its reply was on the way
                return {"op": "closed", "tool_calls": calls}

    async def _kill(self, cell: str) -> None:
        """End the cell's whole session (it and anything it started). The host does it: it is the cell's parent and
        kills only a cell it has not reaped, so a pid the system has given to another process is never signalled."""
        try:
            with self._send_lock:
                send(self._control, {"op": "kill", "cell": cell})
        except (OSError, AttributeError):      # the host is gone (its cells with it)
            pass

    def _hang_up(self) -> None:
        """Closing the control socket tells the host to exit and wakes the reader thread (which kept it open)."""
        if self._control is not None:
            try:
                self._control.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._control.close()
            self._control = None

    def shutdown(self) -> None:
        """Tell the host to exit without waiting for it (usable once the sandbox's event loop is closed)."""
        self._hang_up()
        shutil.rmtree(self.scratch_root, ignore_errors=True)

    async def close(self) -> None:
        self._hang_up()
        if self._host is not None and self._host.returncode is None:
            try:
                await asyncio.wait_for(self._host.wait(), 5.0)
            except asyncio.TimeoutError:
                self._host.kill()
        shutil.rmtree(self.scratch_root, ignore_errors=True)
