"""FAISS indexes over the distinct values of database columns, for value_similarity_search.

Each (column values, embedding model) pair is embedded once: the index is saved under a key that hashes the model
name and the sorted distinct values, so any process, any run, any database file with the same content reuses it,
and a changed column gets a new index. On a machine with a CUDA device and faiss-gpu the search index moves to GPU.
Query embeddings are kept in a bounded LRU cache: trials of one task search for the same values.
An index with a `manifest` name also records which cached index serves which column, so a process that replaces it
(a Ray actor restarted on another node after its node was lost) serves the same columns again from the cache alone.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from functools import lru_cache
from pathlib import Path

import faiss
import numpy as np

from .embedder import Embedder

log = logging.getLogger(__name__)


def content_key(model_name: str, values: list[str]) -> str:
    h = hashlib.sha256(model_name.encode())
    for v in values:
        h.update(b"\x00" + v.encode())
    return h.hexdigest()[:24]


def _to_gpu_if_available(index: faiss.Index) -> faiss.Index:
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        return faiss.index_cpu_to_all_gpus(index)
    return index


class ValueIndex:
    """Similarity search over the pre-indexed text columns of one or more databases."""

    def __init__(self, cache_dir: str | Path, embedder: Embedder | None = None, manifest: str | None = None,
                 restarted: bool = False):
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder or Embedder()
        self._columns: dict[tuple[str, str, str], tuple[faiss.Index, list[str]]] = {}
        self.embedded_values = 0  # strings embedded to build indexes (0 when every index came from the cache)
        self._embed_query = lru_cache(maxsize=8192)(lambda text: self.embedder.encode([text]))
        self.manifest = self.cache_dir / "manifests" / f"{manifest}.json" if manifest else None
        self._keys: dict[tuple[str, str, str], str] = {}    # (db, table, column) -> content key: the manifest
        if self.manifest is not None and self.manifest.exists():
            self._restore()
        elif restarted and self.manifest is not None:          # restarted on a machine that does not share the cache
            raise FileNotFoundError(f"the value index's manifest {self.manifest} is not on this node: on a cluster of "
                                    "several machines put data.index_cache on a volume every node mounts "
                                    "(docs/clusters.md, Several nodes)")

    def _restore(self) -> None:
        """Serve every column the manifest names, from the cached files (nothing is embedded)."""
        for db_id, table, column, key in json.loads(self.manifest.read_text()):
            index_file, values_file = self._files(key)
            if not (index_file.exists() and values_file.exists()):
                raise FileNotFoundError(f"{index_file}, named by the run's manifest {self.manifest}, is gone (was the "
                                        "index cache cleared during the run?); run again to rebuild it")
            self._keys[(db_id, table, column)] = key          # already in the manifest
            self._install((db_id, table, column), faiss.read_index(str(index_file)),
                          json.loads(values_file.read_text()), key)
        log.info("value index restored %d columns from %s", len(self._keys), self.manifest)

    def forget(self) -> None:
        """The run is over: drop its manifest (the cached indexes stay for the next run)."""
        if self.manifest is not None:
            self.manifest.unlink(missing_ok=True)

    def add_column(self, db_id: str, table: str, column: str, values: list[str]) -> str:
        """Index `values` (distinct, sorted) for (db_id, table, column); embed only if no cached index matches."""
        build = self.start_column(db_id, table, column, values)
        while build.remaining:
            build.step()
        return build.key

    def start_column(self, db_id: str, table: str, column: str, values: list[str],
                     chunk: int = 2048) -> "ColumnBuild":
        """A resumable build: `step()` embeds one chunk, so a caller (a Ray driver) can show progress between calls.
        A cached index is loaded at once and the build has nothing remaining."""
        return ColumnBuild(self, (db_id, table, column), values, chunk)

    def _files(self, key: str) -> tuple[Path, Path]:
        return self.cache_dir / f"{key}.faiss", self.cache_dir / f"{key}.json"

    def _install(self, where: tuple[str, str, str], index: faiss.Index, values: list[str], key: str) -> None:
        self._columns[where] = (_to_gpu_if_available(index), values)
        changed, self._keys[where] = self._keys.get(where) != key, key
        if self.manifest is not None and changed:
            self.manifest.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.manifest.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps([[*w, k] for w, k in self._keys.items()]))
            os.replace(tmp, self.manifest)

    def indexed(self, db_id: str) -> list[tuple[str, str]]:
        return sorted((t, c) for d, t, c in self._columns if d == db_id)

    def search(self, db_id: str, table: str, column: str, query: str, k: int = 100) -> list[str]:
        """The `k` stored values nearest to the (lowercased) query, best first; no score threshold (as the original)."""
        return [value for value, _ in self.scored(db_id, table, column, query.lower(), k)]

    def encode(self, texts: list[str]) -> np.ndarray:
        """Normalized embeddings of texts with the index's model (a benchmark's own keys: AgentEHR's memory)."""
        return self.embedder.encode(list(texts))

    def scored(self, db_id: str, table: str, column: str, query: str, k: int = 100) -> list[tuple[str, float]]:
        """The `k` stored values nearest to the query as written, best first, with their cosine similarity."""
        try:
            index, values = self._columns[(db_id, table, column)]
        except KeyError:
            raise KeyError(f"{table}.{column} is not indexed for similarity search") from None
        if not values:
            return []
        k = max(1, min(int(k), len(values)))
        scores, ids = index.search(self._embed_query(query), k)
        return [(values[i], float(score)) for score, i in zip(scores[0], ids[0]) if i >= 0]


class ColumnBuild:
    """Embeds one column's values chunk by chunk, then saves the index atomically under its content key."""

    def __init__(self, owner: ValueIndex, where: tuple[str, str, str], values: list[str], chunk: int):
        self.owner, self.where, self.values, self.chunk = owner, where, values, chunk
        self.key = content_key(owner.embedder.name, values)
        self._vectors: list[np.ndarray] = []
        self.done = 0
        index_file, values_file = owner._files(self.key)
        if owner._keys.get(where) == self.key and where in owner._columns:
            self.done = len(values)       # already served (a shared index, another run's build): nothing to load
        elif index_file.exists() and values_file.exists():
            owner._install(where, faiss.read_index(str(index_file)), values, self.key)
            self.done = len(values)
        elif not values:
            self._finish()
        else:
            log.info("embedding %d values of %s", len(values), ".".join(where))

    @property
    def remaining(self) -> int:
        return len(self.values) - self.done

    def step(self) -> int:
        """Embed the next chunk; returns how many values remain."""
        batch = self.values[self.done:self.done + self.chunk]
        self._vectors.append(self.owner.embedder.encode(batch))
        self.owner.embedded_values += len(batch)
        self.done += len(batch)
        if not self.remaining:
            self._finish()
        return self.remaining

    def _finish(self) -> None:
        vectors = np.concatenate(self._vectors) if self._vectors else np.zeros((0, 384), dtype=np.float32)
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        index_file, values_file = self.owner._files(self.key)
        tmp_index, tmp_values = (Path(f"{f}.tmp{os.getpid()}") for f in (index_file, values_file))
        faiss.write_index(index, str(tmp_index))
        tmp_values.write_text(json.dumps(self.values))
        os.replace(tmp_values, values_file)  # values first: an index file present means both are complete
        os.replace(tmp_index, index_file)
        self.owner._install(self.where, index, self.values, self.key)
