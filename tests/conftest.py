"""Session fixtures: the default-seed databases (built once), and one local Ray cluster for the whole session."""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .multinode import free_ports

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Test-only keys, set before the session's Ray cluster starts so its workers inherit them; the fake LLM server on
# loopback accepts anything. Tests about missing keys remove them for their own process.
TEST_KEYS = {"GEMINI_API_KEY": "test-gemini-key-never-logged", "OPENAI_API_KEY": "test-openai-key-never-logged"}
os.environ.update(TEST_KEYS)
# The session's Ray cluster uses token authentication with a token of its own in a temporary folder (never
# ~/.ray): clients (this process, the main-job subprocesses, the job CLI) present it through these two variables,
# which Ray reads when it is imported, hence here.
RAY_SCRATCH = Path(tempfile.mkdtemp(prefix="ehrb-ray-"))   # short: Ray's socket paths must stay under 107 bytes
atexit.register(shutil.rmtree, RAY_SCRATCH, True)
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN_PATH"] = str(RAY_SCRATCH / "auth_token")
os.environ.pop("RAY_AUTH_TOKEN", None)
os.environ.pop("RAY_ADDRESS", None)
ROOT = Path(__file__).resolve().parents[1]
TASK_DIR = ROOT / "data" / "tasks" / "ehrchatqa"


@pytest.fixture(scope="session")
def db_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("generated")


@pytest.fixture(scope="session")
def db_paths(db_root, ray_cluster) -> dict[str, Path]:
    """Built as the main job builds them, in patient chunks on the session's Ray cluster (both cores at work)."""
    from ehrbench.schemas import WorldSpec, build_database

    return {db: build_database(db, WorldSpec(seed=0), db_root, on_ray=True) for db in ("mimic_iv_star", "eicu_star")}


@pytest.fixture(scope="session")
def dbs(db_paths):
    from ehrbench.db.database import Database

    return {db: Database(p, db) for db, p in db_paths.items()}


@pytest.fixture(scope="session")
def shared_world(tmp_path_factory) -> Path:
    """One data root for the session's main-job runs, every benchmark's: `gen/` for the databases (and per-patient
    files), `vi/` for the value indexes. Both are cached by content (a file's name is the hash of what it holds), so
    the first run builds what it needs and later runs reuse the same files, as a user's second run does, instead of
    every test building them again (about 50 s a run here). A test about building from nothing uses its own folder."""
    return tmp_path_factory.mktemp("shared_world")


_MLFLOW_TEMPLATE: list[Path] = []


def mlflow_store(root: Path, name: str = "mlflow.db") -> Path:
    """`root` (for `tracking.root`) holding an empty MLflow sqlite store already at MLflow's schema, unless it has one.
    A new store costs MLflow's migrations (2.5 to 5 s here): made once a session and copied, not in every main-job
    run. `test_main_job_reaches_100_and_lands_in_mlflow` keeps a store made from nothing."""
    if not _MLFLOW_TEMPLATE:
        import mlflow

        path = RAY_SCRATCH / "mlflow-template.db"
        uri = f"sqlite:///{path}"
        client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
        client.search_experiments(max_results=1)
        client.search_registered_models(max_results=1)
        _MLFLOW_TEMPLATE.append(path)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / name).exists():            # a rerun's store is the run's: never replaced
        shutil.copyfile(_MLFLOW_TEMPLATE[0], root / name)
    return root


@dataclass
class RayCluster:
    address: str        # GCS address, for ray.init / runtime.address
    dashboard: str      # HTTP address, for `ray job submit --address`
    pid: int            # the `ray start --head --block` process; its process group is the cluster


@pytest.fixture(scope="session")
def ray_cluster():
    """One real cluster for the whole session, started with the README's recipe (`jobs/start-ray-head.sh`).

    It runs with `--block` in a session of its own, so teardown stops exactly the processes it started (its process
    group: GCS, raylet, dashboard, workers), never another Ray cluster on the machine.
    """
    import ray

    # every port its own: Ray's dashboard agent listens on 52365 by default, so another Ray cluster on the machine
    # (a user's, a bench's) would leave this one without the agent `ray job submit` needs
    port, dash, agent = free_ports(3)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    log = (RAY_SCRATCH / "head.log").open("w")
    head = subprocess.Popen(["bash", str(ROOT / "jobs" / "start-ray-head.sh"), f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
                             f"--dashboard-agent-listen-port={agent}", f"--temp-dir={RAY_SCRATCH / 'r'}", "--block"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    cluster = RayCluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}", head.pid)
    try:
        _wait_for_head(head, port)
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        _stop_process_group(head)
        log.close()


def _wait_for_head(head: subprocess.Popen, port: int, timeout_s: float = 180) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise RuntimeError(f"ray head exited ({head.returncode}): {(RAY_SCRATCH / 'head.log').read_text()[-3000:]}")
        if "Ray runtime started" in (RAY_SCRATCH / "head.log").read_text():
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
        time.sleep(0.5)
    raise RuntimeError(f"ray head did not start in {timeout_s} s: {(RAY_SCRATCH / 'head.log').read_text()[-3000:]}")


def _stop_process_group(head: subprocess.Popen) -> None:
    """SIGTERM to the head's own process group (it shuts its cluster down), then SIGKILL to whatever is left."""
    for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            return
        try:
            head.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


EHRCHATQA_OPTIONS = {"name": "ehrchatqa", "databases": ["mimic_iv_star", "eicu_star"], "flows": ["incre", "adapt"],
                     "task_dir": str(TASK_DIR), "sql_timeout_s": 60, "web_search": "vocabulary",
                     "reask_wait_s": 0.01}      # the original waits 3 s before asking again after a malformed call


def ehrchatqa_settings(**fields):
    """TrialSettings for EHR-ChatQA as the driver would make them (reference agent, scripted user by default)."""
    from ehrbench.benchmark import TrialSettings

    fields.setdefault("benchmark_options", EHRCHATQA_OPTIONS)
    return TrialSettings(benchmark="ehrchatqa", **fields)


def local_hosts(dbs, index=None):
    from ehrbench.benchmark import Hosts
    from ehrbench.runtime.hosts import LocalHost

    return Hosts({db: LocalHost(d) for db, d in dbs.items()}, LocalHost(index or EchoIndex()))


def run_local_trial(task, dbs, settings=None, index=None):
    """Every attempt of one trial, in this process: the database and index behind `LocalHost`s."""
    import asyncio

    from ehrbench.episode import run_task_trial

    return asyncio.run(run_task_trial(task, 0, local_hosts(dbs, index), settings or ehrchatqa_settings()))


class EchoIndex:
    """Stands in for the value index where a test is about tool strings, not embeddings."""

    def __init__(self, answers=None):
        self.answers = answers

    def search(self, db_id, table, column, query, k=100):
        return list(self.answers if self.answers is not None else [query])[:k]


# --- the real model clients against the loopback fake server (tests/fake_llm_server.py) ----------------------------
def _fast_retries():
    from ehrbench.llm.base import RetryPolicy

    return RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)


FAST = _fast_retries()


@pytest.fixture
def server():
    from .fake_llm_server import FakeLLMServer

    s = FakeLLMServer().start()
    yield s
    s.stop()


@pytest.fixture(params=["openai", "gemini"])
def model_factory(request, server, monkeypatch):
    """Builds the OpenAI-compatible or the Gemini client (both, by parameter) pointed at the fake server."""
    from ehrbench.llm.gemini import GeminiModel
    from ehrbench.llm.openai_compatible import OpenAICompatibleModel

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")

    def make(**kwargs):
        kwargs.setdefault("retry", FAST)
        if request.param == "openai":
            return OpenAICompatibleModel("gpt-4o", base_url=server.url + "/v1", **kwargs)
        return GeminiModel("gemini-2.5-flash", base_url=server.url, **kwargs)
    make.provider = request.param
    return make
