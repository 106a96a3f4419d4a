"""The process that runs model-written Python, apart from the worker: started by `code_sandbox.CodeSandbox`.

It starts with an empty environment (no API keys) in a scratch folder, leaves the network (its own empty network
namespace where the kernel allows it), imports the heavy modules once (pandas), then waits on its control socket.
Each cell arrives with a socket of its own; the host forks a child for it, so cells run concurrently and nothing
one cell does (globals, imports, a crash) reaches the next. The child:

- sets hard limits before running anything: CPU seconds (RLIMIT_CPU; past it the kernel ends the child), address
  space (RLIMIT_AS: an allocation past it raises MemoryError), file size (RLIMIT_FSIZE), and a new session so the
  worker can kill the cell and anything it started;
- installs an audit hook (sys.addaudithook, which nothing can remove) that refuses opening files for writing outside
  the cell's scratch folder, sockets, subprocesses, fork/exec, ctypes and changing limits;
- captures print() into a bounded buffer and points the raw stdout/stderr descriptors at /dev/null;
- runs the cell with the cell's tools bound (a module named in the request, `bind(call, context)`), where tools
  that need the harness (SQL on the hosted database) call back over the cell's socket.

The host reports each child's end (exit status or signal) on the control socket, so the worker can tell "the code
ran past its CPU limit" from a normal end. Wall-clock limits are the worker's: it kills the child's session.
Messages are length-prefixed JSON; file descriptors travel with SCM_RIGHTS.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 * 1024 * 1024


def send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message, default=str).encode()
    payload = HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int, fds: list[int]) -> bytes | None:
    buf = b""
    while len(buf) < n:
        data, got, _, _ = socket.recv_fds(sock, n - len(buf), 4)
        fds.extend(got)
        if not data:
            return None
        buf += data
    return buf


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One message and any descriptors sent with it; (None, []) at end of stream."""
    fds: list[int] = []
    head = _recv_exact(sock, HEADER.size, fds)
    if head is None:
        return None, fds
    (size,) = HEADER.unpack(head)
    if size > MAX_MESSAGE:
        raise ValueError(f"sandbox message of {size} bytes")
    body = _recv_exact(sock, size, fds)
    return (None if body is None else json.loads(body)), fds


def leave_network() -> bool:
    """An empty network namespace of our own (no interfaces, not even loopback traffic out); False where the kernel
    does not allow it (then the audit hook alone refuses sockets)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(0x40000000) == 0          # CLONE_NEWNET
    except (OSError, AttributeError):
        return False


# --- the child: one cell ----------------------------------------------------------------------------------------
class BoundedOutput:
    """What print() writes, up to `limit` characters; the rest is counted, not kept."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0

    def write(self, text: str) -> int:
        room = self.limit - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "".join(self.parts)


_REFUSED_EVENTS = {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
                   "subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn",
                   "os.spawn", "os.kill", "os.killpg", "ctypes.dlopen", "ctypes.cdata", "resource.setrlimit",
                   "resource.prlimit", "sys.addaudithook", "os.chdir", "os.putenv", "os.unsetenv", "pty.spawn"}


def _audit_hook(scratch: str):
    scratch = os.path.realpath(scratch) + os.sep

    def hook(event: str, args: tuple) -> None:
        if event in _REFUSED_EVENTS:
            raise PermissionError(f"not allowed in the sandbox: {event}")
        if event == "open":
            path, mode, flags = args[0], args[1], args[2]
            writing = (mode and any(c in str(mode) for c in "wax+")) or (flags or 0) & (os.O_WRONLY | os.O_RDWR)
            if writing and isinstance(path, (str, bytes)):
                full = os.path.realpath(os.fsdecode(path))
                if not (full + os.sep).startswith(scratch):
                    raise PermissionError(f"files can be written only in the cell's folder ({scratch}), not {full}")
        elif event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.truncate",
                       "os.symlink", "os.link", "os.chmod", "os.chown", "os.utime"):
            for path in args[:2]:
                if isinstance(path, (str, bytes)):
                    full = os.path.realpath(os.fsdecode(path))
                    if not (full + os.sep).startswith(scratch):
                        raise PermissionError(f"{event} outside the cell's folder is not allowed: {full}")
    return hook


def _run_cell(request: dict, conn: socket.socket) -> None:
    import importlib
    import resource
    import traceback

    os.setsid()
    limits = request["limits"]
    scratch = request["scratch"]
    os.makedirs(scratch, exist_ok=True)
    os.chdir(scratch)
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    with open("/proc/self/statm") as f:
        virtual = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    space = virtual + int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (space, space))
    size = int(limits["file_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    out = BoundedOutput(int(limits["output_chars"]))
    sys.stdout = sys.stderr = out
    lock = threading.Lock()

    def call(tool: str, *args):
        """A tool the harness runs (SQL on the hosted database): ask over the cell's socket and wait."""
        with lock:
            send(conn, {"op": "tool", "tool": tool, "args": list(args)})
            reply, _ = receive(conn)
        if reply is None:
            raise RuntimeError("the harness went away")
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

    namespace: dict = {"__name__": "__cell__"}
    if request.get("tools"):
        namespace.update(importlib.import_module(request["tools"]).bind(call, request.get("context") or {}))
    namespace.update(request.get("globals") or {})
    sys.addaudithook(_audit_hook(scratch))
    result: dict = {"op": "done"}
    try:
        exec(compile(request["code"], "<cell>", "exec"), namespace)
        value = namespace.get(request.get("result_name") or "answer")
        result["result"] = None if value is None else str(value)
    except BaseException as e:   # noqa: BLE001 - everything the code raised is the agent's observation
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == "<cell>"]
        if isinstance(e, SyntaxError):           # raised by compile(): no frame of the cell, the line is on e
            result["error"] = {"type": type(e).__name__, "message": e.msg, "line": e.lineno}
        else:
            result["error"] = {"type": type(e).__name__, "message": str(e),
                               "line": frames[-1].lineno if frames else None}
    sys.stdout = sys.__stdout__
    result["stdout"], result["stdout_dropped"] = out.text(), out.dropped
    try:
        send(conn, result)
    except OSError:
        pass


# --- the host ------------------------------------------------------------------------------------------------------
def main() -> None:
    """`python -m ehrbench.agents.sandbox_host CONTROL_FD [module,module,...]`: the control socket's descriptor and
    the modules to import once for every cell."""
    network_left = leave_network()
    sys.dont_write_bytecode = True
    for name in (sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else []):
        __import__(name)
    control = socket.socket(fileno=int(sys.argv[1]))
    send_lock = threading.Lock()
    cells: dict[int, str] = {}
    cells_lock = threading.Lock()
    with send_lock:
        send(control, {"op": "ready", "pid": os.getpid(), "network": "none" if network_left else "audit hook"})

    def reap() -> None:
        while True:
            forked.acquire()                      # one wait per child forked
            if stop.is_set():
                return
            pid, status = os.wait()
            with cells_lock:
                cell = cells.pop(pid, None)
            if cell is not None:
                signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
                with send_lock:
                    try:
                        send(control, {"op": "ended", "cell": cell, "signal": signal, "exit": code})
                    except OSError:
                        return

    stop, forked = threading.Event(), threading.Semaphore(0)
    reaper = threading.Thread(target=reap, daemon=True)
    reaper.start()
    while True:
        request, fds = receive(control)
        if request is None:                       # the worker is gone: so are we (cells end with their sockets)
            stop.set()
            forked.release()
            return
        with cells_lock:
            pid = os.fork()
            if pid == 0:
                control.close()
                conn = socket.socket(fileno=fds[0])
                try:
                    _run_cell(request, conn)
                finally:
                    os._exit(0)
            cells[pid] = request["cell"]
        forked.release()
        for fd in fds:
            os.close(fd)
        with send_lock:
            send(control, {"op": "started", "cell": request["cell"], "pid": pid})


if __name__ == "__main__":
    main()
