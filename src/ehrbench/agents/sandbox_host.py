"""The process that runs model-written Python, apart from the worker: started by `code_sandbox.CodeSandbox`.

It starts with an empty environment (no API keys of its own) in a scratch folder, leaves the network (its own empty
network namespace where the kernel allows it, in a user namespace when unprivileged), imports the heavy modules
once (pandas), then waits on its control socket.
Each cell arrives with a socket of its own; the host forks a child for it, so cells run concurrently and nothing
one cell does (globals, imports, a crash) reaches the next. The child:

- sets hard limits before running anything: CPU seconds (RLIMIT_CPU; past it the kernel ends the child), address
  space (RLIMIT_AS: an allocation past it raises MemoryError), file size (RLIMIT_FSIZE), and a new session so the
  worker can kill the cell and anything it started;
- installs an audit hook (sys.addaudithook, which nothing can remove) that refuses writing files outside the cell's
  scratch folder, reading files outside Python's, the installed packages' and ehrbench's code (so neither the
  question sets with their answers nor another process's /proc entry, where the worker's API keys are), sockets,
  subprocesses, fork/exec, ctypes and cffi, sqlite3 on files, mmap and changing limits. An audit hook is a guard
  against model-written code, not a boundary against an attacker in the process; the process limits, the empty
  environment and the network namespace do not depend on it;
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
import signal
import socket
import struct
import sys
import threading

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 * 1024 * 1024


def encode(message: dict) -> bytes:
    """A message as it travels: its JSON's length, then the JSON."""
    data = json.dumps(message, default=str).encode()
    return HEADER.pack(len(data)) + data


def send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    payload = encode(message)
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
        # CLONE_NEWNET needs CAP_SYS_ADMIN; an unprivileged user gets it inside a user namespace of its own
        return libc.unshare(0x40000000) == 0 or libc.unshare(0x10000000 | 0x40000000) == 0
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
                   "os.spawn", "os.kill", "os.killpg", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle",
                   "ctypes.cdata", "ctypes.call_function", "ctypes.addressof", "ctypes.string_at",
                   "ctypes.wstring_at", "ctypes.get_errno", "resource.setrlimit", "resource.prlimit",
                   "sys.addaudithook", "os.chdir", "os.fchdir", "os.putenv", "os.unsetenv", "pty.spawn", "mmap.__new__",
                   "sqlite3.enable_load_extension", "sqlite3.load_extension", "os.fchmod", "os.fchown",
                   "os.lchown", "os.lchmod"}
_REFUSED_MODULES = ("ctypes", "_ctypes", "cffi", "_cffi_backend", "duckdb", "pyarrow.fs", "_posixsubprocess",
                    "multiprocessing", "_multiprocessing", "socket", "_socket", "ssl", "urllib.request", "http.client")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.truncate", "os.symlink",
                "os.link", "os.chmod", "os.chown", "os.utime", "os.chflags", "os.mkfifo", "os.mknod", "shutil.move",
                "shutil.copyfile", "shutil.copytree")


def _readable_roots(scratch: str) -> tuple[str, ...]:
    """Where a cell may read: Python's own files and installed packages (imports), ehrbench's code (not its data,
    whose question sets store the answers), its folder, time zones, and its own /proc entry (never another
    process's, whose environment holds the worker's API keys)."""
    import site
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages(),
             *sysconfig.get_paths().values(), os.path.dirname(os.path.dirname(os.path.abspath(__file__))), scratch,
             "/dev/null", "/dev/urandom", "/usr/share/zoneinfo", "/etc/localtime", f"/proc/{os.getpid()}/",
             "/proc/self/"}
    return tuple(os.path.realpath(r) + (os.sep if os.path.isdir(r) else "") for r in roots if r)


def _inside(path: str, roots) -> bool:
    full = os.path.realpath(path)
    return any((full + os.sep).startswith(r) or full == r.rstrip(os.sep) for r in roots)


def _audit_hook(scratch: str):
    """Refuse what a cell must not do; file writes only in `scratch`, file reads only under `_readable_roots`."""
    scratch = os.path.realpath(scratch) + os.sep
    readable = _readable_roots(scratch)

    def path_of(value) -> str | None:
        if isinstance(value, int):        # a descriptor: opened earlier under these same rules
            return None
        try:
            return os.fsdecode(os.fspath(value))
        except TypeError:
            raise PermissionError(f"not a path: {value!r}") from None

    def hook(event: str, args: tuple) -> None:
        if event in _REFUSED_EVENTS:
            raise PermissionError(f"not allowed in the sandbox: {event}")
        if event == "import" and (args[0] in _REFUSED_MODULES or args[0].split(".")[0] in ("ctypes", "cffi")):
            raise PermissionError(f"not allowed in the sandbox: import {args[0]}")
        if event == "open":
            path, mode, flags = path_of(args[0]), args[1], args[2] or 0
            if path is None:
                return
            writing = bool(mode and any(c in str(mode) for c in "wax+")) or bool(flags & _WRITE_FLAGS)
            if mode is None and writing and not os.path.isabs(path):   # os.open: relative to an unknown dir_fd
                raise PermissionError(f"os.open for writing needs an absolute path in the cell's folder: {path}")
            if writing and not _inside(path, (scratch,)):
                raise PermissionError(f"files can be written only in the cell's folder ({scratch}), not "
                                      f"{os.path.realpath(path)}")
            if not writing and not _inside(path, readable):
                raise PermissionError(f"reading {os.path.realpath(path)} is not allowed in the sandbox")
        elif event in _PATH_EVENTS:
            for value in args[:2]:
                if isinstance(value, int) and value != -1:       # a dir_fd: relative to a folder we cannot see
                    raise PermissionError(f"{event} with a directory descriptor is not allowed in the sandbox")
                if isinstance(value, (str, bytes, os.PathLike)) and not _inside(path_of(value), (scratch,)):
                    raise PermissionError(f"{event} outside the cell's folder is not allowed: {path_of(value)}")
        elif event == "sqlite3.connect":
            database = path_of(args[0]) if args else None
            if database not in (None, ":memory:", "") and not _inside(database, (scratch,)):
                raise PermissionError("sqlite3 may open only in-memory databases in the sandbox")
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
    sys.addaudithook(_audit_hook(scratch))
    result: dict = {"op": "done"}
    try:
        exec(compile(request["code"], "<cell>", "exec"), namespace)
        value = namespace.get(request.get("result_name") or "answer")
        result["result"] = None if value is None else str(value)
    except BaseException as e:   # noqa: BLE001 - everything the code raised is the agent's observation
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == "<cell>"]
        if isinstance(e, SyntaxError):           # raised by compile(): no frame of the cell, the line is on e
            result["error"] = {"type": type(e).__name__, "message": e.msg, "line": e.lineno,
                               "detail": [e.offset, e.text, e.end_lineno, e.end_offset]}
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
            # Look first (WNOWAIT), then reap while holding the lock: a pid in `cells` is never reused, since an
            # unreaped child keeps its pid, so a kill request (below) can only reach the cell it names.
            pid = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT).si_pid
            with cells_lock:
                cell = cells.pop(pid, None)
                _, status = os.waitpid(pid, 0)
            if cell is not None:
                number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
                with send_lock:
                    try:
                        send(control, {"op": "ended", "cell": cell, "signal": number, "exit": code})
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
        if request.get("op") == "kill":           # the worker gave up on a cell: end its session if it still runs
            with cells_lock:
                pid = next((p for p, c in cells.items() if c == request["cell"]), None)
                for kill in (os.killpg, os.kill) if pid else ():   # its session, or the child before it has one
                    try:
                        kill(pid, signal.SIGKILL)
                        break
                    except (ProcessLookupError, PermissionError):
                        continue
            continue
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
