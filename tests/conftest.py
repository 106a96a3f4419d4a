"""Session fixtures: the default-seed databases (built once), and one local Ray cluster for the whole session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Test-only keys, set before the session's Ray cluster starts so its workers inherit them; the fake LLM server on
# loopback accepts anything. Tests about missing keys remove them for their own process.
TEST_KEYS = {"GEMINI_API_KEY": "test-gemini-key-never-logged", "OPENAI_API_KEY": "test-openai-key-never-logged"}
os.environ.update(TEST_KEYS)
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


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                   runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}})
    yield ctx
    ray.shutdown()


class EchoIndex:
    """Stands in for the value index where a test is about tool strings, not embeddings."""

    def __init__(self, answers=None):
        self.answers = answers

    def search(self, db_id, table, column, query, k=100):
        return list(self.answers if self.answers is not None else [query])[:k]
