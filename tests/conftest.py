"""Session fixtures: the default-seed databases (built once), and one local Ray cluster for the whole session."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Test-only keys, set before the session's Ray cluster starts so its workers inherit them; the fake LLM server on
# loopback accepts anything. Tests about missing keys remove them for their own process.
TEST_KEYS = {"GEMINI_API_KEY": "test-gemini-key-never-logged", "OPENAI_API_KEY": "test-openai-key-never-logged"}
os.environ.update(TEST_KEYS)
# `ray start` turns on token authentication; clients (this process, the main-job subprocesses, the job CLI) present
# the token it wrote to ~/.ray/auth_token once told so. Ray reads this when it is imported, hence here.
os.environ["RAY_AUTH_MODE"] = "token"
ROOT = Path(__file__).resolve().parents[1]
TASK_DIR = ROOT / "data" / "tasks" / "ehrchatqa"


@pytest.fixture(scope="session")
def db_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("generated")


@pytest.fixture(scope="session")
def db_paths(db_root) -> dict[str, Path]:
    from ehrbench.schemas import WorldSpec, build_database

    return {db: build_database(db, WorldSpec(seed=0), db_root) for db in ("mimic_iv_star", "eicu_star")}


@pytest.fixture(scope="session")
def dbs(db_paths):
    from ehrbench.db.database import Database

    return {db: Database(p, db) for db, p in db_paths.items()}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RayCluster:
    address: str        # GCS address, for ray.init / runtime.address
    dashboard: str      # HTTP address, for `ray job submit --address`


@pytest.fixture(scope="session")
def ray_cluster():
    """One real cluster for the whole session, started as an operator would: `ray start --head`."""
    import ray

    ray_bin = str(Path(sys.executable).with_name("ray"))
    port, dash = _free_port(), _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([ray_bin, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=true",
                    "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--disable-usage-stats"],
                   check=True, capture_output=True, env=env, timeout=180)
    cluster = RayCluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}")
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    subprocess.run([ray_bin, "stop", "--force"], capture_output=True, timeout=120)


def run_local_trial(task, dbs, web, settings=None, index=None):
    """Every attempt of one trial, in this process: the database and index behind `LocalHost`s."""
    import asyncio

    from ehrbench.benchmarks.ehrchatqa.benchmark import TrialSettings, run_task_trial
    from ehrbench.runtime.hosts import LocalHost

    return asyncio.run(run_task_trial(task, 0, LocalHost(dbs[task.db_id]), LocalHost(index or EchoIndex()), web,
                                      settings or TrialSettings()))


class EchoIndex:
    """Stands in for the value index where a test is about tool strings, not embeddings."""

    def __init__(self, answers=None):
        self.answers = answers

    def search(self, db_id, table, column, query, k=100):
        return list(self.answers if self.answers is not None else [query])[:k]
