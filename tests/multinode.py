"""A multi-node Ray cluster on this one machine, started as an operator would start one: a head (`jobs/start-ray-head.sh`)
that runs no trials, and worker nodes (`jobs/start-ray-worker.sh --address=...`), each its own raylet with its own
CPUs, custom role resources and ports, each in a process group of its own, so a test can take one node away (its
raylet and its workers, by process id) and stop exactly what it started. Used by tests/test_multinode.py and
bench/bench_scaleout.py."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports: each socket is held until all are drawn (one drawn after another is closed may be
    the same port again, and Ray refuses a node whose components share one)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = 60) -> None:
    """`sig` to the process group `proc` leads, then SIGKILL to whatever is left of it."""
    for s, wait in ((sig, wait_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, s)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass
class MultiNodeCluster:
    scratch: Path
    env: dict
    port: int = field(default_factory=free_port)
    head: subprocess.Popen | None = None
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)
    manager_ports: dict[str, int] = field(default_factory=dict)     # node name -> its raylet's port (its identity)
    offers: dict[str, dict] = field(default_factory=dict)           # node name -> the role resources it offers
    _window: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_head(self) -> None:
        self.head = self._start("head", ["jobs/start-ray-head.sh", f"--port={self.port}", "--num-cpus=0",
                                         "--resources=" + json.dumps({"ehrbench_head": 1}),
                                         "--include-dashboard=false", f"--temp-dir={self.scratch / 'r'}",
                                         *self._own_ports("head")])
        self._wait(lambda: "Ray runtime started" in (self.scratch / "head.log").read_text(), "the head")

    def add_node(self, name: str, resources: dict, cpus: int = 1) -> None:
        """A worker node with its own ports (several raylets on one machine must not share any)."""
        self.add_nodes({name: resources}, cpus)

    def add_nodes(self, nodes: dict[str, dict], cpus: int = 1) -> None:
        """Worker nodes (name -> the role resources each offers), each started once the one before has registered
        (`ray start` says so in its log; started all at once on two cores, a raylet misses Ray's 30 s registration
        window), then waited for until the cluster counts every one alive."""
        for name, resources in nodes.items():
            self.offers[name] = resources
            self.nodes[name] = self._start(name, ["jobs/start-ray-worker.sh", f"--address={self.address}",
                                                  f"--num-cpus={cpus}", "--resources=" + json.dumps(resources),
                                                  *self._own_ports(name)])
            self._wait(lambda: "Ray runtime started" in (self.scratch / f"{name}.log").read_text(), f"node {name}",
                       process=self.nodes[name])
        wanted = {self.manager_ports[name] for name in nodes}
        self._wait(lambda: wanted <= {n["port"] for n in self._nodes()}, f"nodes {', '.join(nodes)}")

    def _own_ports(self, name: str) -> list[str]:
        """Ports of a node's own: Ray's defaults (the dashboard agent's 52365, ...) would collide with any other node
        on this machine, another cluster's included."""
        self._window += 1
        low = 20000 + 500 * self._window          # above the default worker ports (10002-19999), below ephemeral ones
        names = ("node-manager-port", "object-manager-port", "metrics-export-port", "dashboard-agent-listen-port",
                 "dashboard-agent-grpc-port", "runtime-env-agent-port")
        ports = dict(zip(names, free_ports(len(names))))
        self.manager_ports[name] = ports["node-manager-port"]
        return [f"--min-worker-port={low}", f"--max-worker-port={low + 499}", *(f"--{k}={v}" for k, v in ports.items())]

    def lose_node(self, name: str) -> None:
        """The node gone at once: its raylet and workers killed (SIGKILL to its process group)."""
        stop_group(self.nodes.pop(name), signal.SIGKILL, 10)

    def replace_node(self, name: str) -> str:
        """`name` lost, and a node offering the same roles joins in its place; returns the new node's name."""
        self.lose_node(name)
        new = f"{name.split('.')[0]}.{self._window}"
        self.add_node(new, self.offers[name])
        return new

    def node_id(self, name: str) -> str:
        """The Ray node id of the node started as `name` (found by its raylet's port)."""
        return next(n["id"] for n in self._nodes() if n["port"] == self.manager_ports[name])

    def node_ids(self) -> dict[str, list[str]]:
        """Node id -> the roles it offers (its ehrbench_* resources), for every live node."""
        return {n["id"]: n["roles"] for n in self._nodes()}

    def _nodes(self) -> list[dict]:
        """Every node the cluster counts alive: its id, its raylet's port, the roles it offers."""
        out = subprocess.run([sys.executable, "-c", "import json, ray; ray.init(address=%r, log_to_driver=False); "
                              "print(json.dumps([{'id': n['NodeID'], 'port': n['NodeManagerPort'], 'roles': sorted("
                              "k for k in n['Resources'] if k.startswith('ehrbench_'))} for n in ray.nodes() "
                              "if n['Alive']]))" % self.address],
                             capture_output=True, text=True, env=self.env, timeout=120)
        # the list is the last line that reads as one: Ray may print its own lines to stdout after it, such as "raylet
        # has lagging heartbeats due to slow network or busy workload" on a loaded machine
        for line in reversed(out.stdout.splitlines() if out.returncode == 0 else []):
            try:
                found = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(found, list):
                return found
        return []

    def stop(self) -> None:
        for name in list(self.nodes):
            stop_group(self.nodes.pop(name))
        if self.head is not None:
            stop_group(self.head)

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = (self.scratch / f"{name}.log").open("w")
        return subprocess.Popen(["bash", *cmd, "--block"], cwd=ROOT, env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def _wait(self, ready, what: str, timeout_s: float = 180, process: subprocess.Popen | None = None) -> None:
        """Until `ready()`; fails at once, with the logs, when `process` (the node's `ray start`) has ended."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            if process is not None and process.poll() is not None:
                break
            time.sleep(0.5)
        logs = {p.name: p.read_text()[-1500:] for p in self.scratch.glob("*.log")}
        why = "its `ray start` ended" if process is not None and process.poll() is not None else f"in {timeout_s} s"
        raise RuntimeError(f"{what} did not start ({why}): {logs}")


def cluster_env(scratch: Path) -> dict:
    """The environment of the cluster's processes and of its clients: a token (the test session's, when it has one),
    the venv's ray on PATH."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": os.environ.get("RAY_AUTH_TOKEN_PATH") or str(scratch / "auth_token"),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
