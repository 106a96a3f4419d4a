"""Build a database from the world in chunks of patients, so memory stays flat however large the world grows.

Three steps, each a pure function of (database, world spec, chunk):

1. count: generate a chunk's patients and render them with stand-in ids, to learn how many rows each table gets,
   how many demo-like ids each pool hands out and (for the `used` dictionary) which codes appear;
2. write: with every chunk counted, each chunk's offsets are known (rows and ids before it); the chunk is generated
   again and rendered with its own slice of every primary key and id pool, into a part file;
3. merge: the parts' rows are copied table by table, in chunk order, into the database, in one transaction.

Generating twice costs CPU, not memory: nothing but counts outlives a chunk. Because a chunk's rows depend only on
the spec and its offsets, chunks can be built anywhere, in any order: on a Ray cluster every count and write is a
task, and the merged file is byte-identical however the patients were chunked and wherever the chunks ran.
"""
from __future__ import annotations

import logging
import resource
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..world.generator import generate_patients
from .writer import Ids, Rows, merge_parts, pool_slices, write_part

log = logging.getLogger(__name__)

CHUNK_PATIENTS = 500          # ~150k eICU* rows in memory per chunk at most


@dataclass
class ChunkCount:
    rows: dict[str, int]       # rows each table gets from the chunk
    taken: Counter             # ids each pool hands out to the chunk
    used: set                  # codes the shared tables must list (`used` dictionary)


def _schema(db_id: str):
    from . import SCHEMAS
    return SCHEMAS[db_id]


def count_chunk(db_id: str, spec, start: int, stop: int) -> ChunkCount:
    schema = _schema(db_id)
    rows, ids = Rows(schema.metadata()), Ids()
    used = schema.render_patients(generate_patients(spec.seed, spec.size, start, stop), spec.seed, rows, ids)
    return ChunkCount(rows.counts(), ids.taken, used)


def write_chunk(db_id: str, spec, start: int, stop: int, row_start: dict[str, int], slices: dict[str, list[int]],
                path: Path) -> Path:
    schema = _schema(db_id)
    rows, ids = Rows(schema.metadata(), row_start), Ids(slices)
    schema.render_patients(generate_patients(spec.seed, spec.size, start, stop), spec.seed, rows, ids)
    return write_part(schema.metadata(), rows.tables, path)


def write_shared(db_id: str, spec, used: set, path: Path) -> Path:
    schema = _schema(db_id)
    rows = Rows(schema.metadata())
    schema.render_shared(spec.seed, spec.size, spec.dictionary, used, rows)
    return write_part(schema.metadata(), rows.tables, path)


def chunks(db_id: str, spec, chunk_patients: int = CHUNK_PATIENTS) -> list[tuple[int, int]]:
    first, stop = _schema(db_id).patient_range(spec.size)
    return [(i, min(i + chunk_patients, stop)) for i in range(first, stop, chunk_patients)] or [(first, first)]


def plan_writes(db_id: str, spec, counts: list[ChunkCount]) -> tuple[list[dict[str, int]], list[dict], set]:
    """Each chunk's row offsets and id slices, and every code in use, from all chunks' counts."""
    offsets, total = [], Counter()
    for c in counts:
        offsets.append(dict(total))
        total.update(c.rows)
    slices = pool_slices(spec.seed, _schema(db_id).ID_POOLS, [c.taken for c in counts])
    return offsets, slices, set().union(*(c.used for c in counts))


def build_in_process(db_id: str, spec, path: Path, chunk_patients: int = CHUNK_PATIENTS) -> Path:
    """The database built chunk after chunk in this process."""
    parts = chunks(db_id, spec, chunk_patients)
    counts = [count_chunk(db_id, spec, a, b) for a, b in parts]
    offsets, slices, used = plan_writes(db_id, spec, counts)
    with tempfile.TemporaryDirectory(prefix=f"{db_id}-parts-", dir=Path(path).parent) as tmp:
        files = [write_shared(db_id, spec, used, Path(tmp) / "shared.sqlite")]
        for k, (a, b) in enumerate(parts):
            files.append(write_chunk(db_id, spec, a, b, offsets[k], slices[k], Path(tmp) / f"part-{k:05d}.sqlite"))
        return merge_parts(_schema(db_id).metadata(), files, path)


# --- on a Ray cluster ---------------------------------------------------------------------------------------------
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def _count_task(db_id, spec, start, stop):
    return count_chunk(db_id, spec, start, stop), _peak_rss_mb()


def _write_task(db_id, spec, start, stop, row_start, slices) -> tuple[bytes, float]:
    """A part written on whichever node runs the task, returned as bytes so the driver needs no shared disk."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_chunk(db_id, spec, start, stop, row_start, slices, Path(tmp) / "part.sqlite")
        return path.read_bytes(), _peak_rss_mb()


def build_on_ray(db_id: str, spec, path: Path, chunk_patients: int = CHUNK_PATIENTS,
                 max_in_flight: int | None = None) -> tuple[Path, float]:
    """The database built as Ray tasks, one count and one write per chunk; the driver keeps at most
    `max_in_flight` parts in memory (twice the cluster's CPUs by default) and writes each to disk as it comes.
    Returns the file and the largest peak memory (MB) of any task's worker."""
    import ray

    count_task = ray.remote(num_cpus=1)(_count_task)
    write_task = ray.remote(num_cpus=1)(_write_task)
    parts = chunks(db_id, spec, chunk_patients)
    window = max_in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    spec_ref = ray.put(spec)
    results = ray.get([count_task.remote(db_id, spec_ref, a, b) for a, b in parts])
    counts, worker_peak = [c for c, _ in results], max(m for _, m in results)
    offsets, slices, used = plan_writes(db_id, spec, counts)
    with tempfile.TemporaryDirectory(prefix=f"{db_id}-parts-", dir=Path(path).parent) as tmp:
        files = [write_shared(db_id, spec, used, Path(tmp) / "shared.sqlite")]
        pending: dict = {}
        for k, (a, b) in enumerate(parts):
            pending[write_task.remote(db_id, spec_ref, a, b, offsets[k], slices[k])] = k
            while len(pending) >= window or (k == len(parts) - 1 and pending):
                [ready], _ = ray.wait(list(pending), num_returns=1)
                data, peak = ray.get(ready)
                worker_peak = max(worker_peak, peak)
                part = Path(tmp) / f"part-{pending.pop(ready):05d}.sqlite"
                part.write_bytes(data)
                files.append(part)
        files[1:] = sorted(files[1:])
        return merge_parts(_schema(db_id).metadata(), files, path), worker_peak
