"""Renderers of the world into database schemas, and the on-disk cache of built databases."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from ..world.generator import WorldSize
from . import eicu_star, ehrsql_eicu, ehrsql_mimic_iii, mimic_iv, mimic_iv_star, treqs

SCHEMAS = {module.DB_ID: module for module in (mimic_iv_star, eicu_star, ehrsql_mimic_iii, ehrsql_eicu, treqs,
                                                mimic_iv)}


@dataclass(frozen=True)
class WorldSpec:
    """What a built database depends on besides the code: the seed, the sizes, the dictionary mode."""
    seed: int = 0
    size: WorldSize = field(default_factory=WorldSize)
    dictionary: str = "full"  # "full": every ICD code as the demo's dictionaries; "used": only codes in use

    def __post_init__(self):
        if self.dictionary not in ("full", "used"):
            raise ValueError(f"data.dictionary must be 'full' or 'used', not {self.dictionary!r}")


def _source_digest() -> str:
    """Hash of the code and data that shape a database, so editing either rebuilds the cached files."""
    h = hashlib.sha256()
    for pkg in ("ehrbench.world", "ehrbench.world.data", "ehrbench.schemas"):
        for f in sorted(resources.files(pkg).iterdir(), key=lambda p: p.name):
            if f.name.endswith((".py", ".yaml")):
                h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def database_path(db_id: str, spec: WorldSpec, root: Path) -> Path:
    key = json.dumps({"db": db_id, "spec": asdict(spec), "src": _source_digest()}, sort_keys=True)
    return Path(root) / f"{db_id}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.sqlite"


def build_database(db_id: str, spec: WorldSpec, root: Path, force: bool = False, on_ray: bool = False) -> Path:
    """The SQLite file of `db_id` for `spec`, built on first use (in patient chunks, as Ray tasks when `on_ray`)
    and reused afterwards."""
    from .build import build_in_process, build_on_ray

    if db_id not in SCHEMAS:
        raise KeyError(f"unknown database {db_id!r}; known: {sorted(SCHEMAS)}")
    path = database_path(db_id, spec, root)
    if path.exists() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    return build_on_ray(db_id, spec, path)[0] if on_ray else build_in_process(db_id, spec, path)


def check_database_file(db_id: str, path: str | Path) -> None:
    """A user's own database file must hold every table and column of `db_id`'s schema (extra ones are fine)."""
    import sqlite3

    from ..errors import ConfigurationError

    if db_id not in SCHEMAS:
        raise ConfigurationError(f"data.{db_id}.path: unknown database {db_id!r}; known: {sorted(SCHEMAS)}")
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        try:
            tables = {name: {row[1] for row in conn.execute(f'PRAGMA table_info("{name}")')}
                      for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise ConfigurationError(f"data.{db_id}.path={str(path)!r}: not a readable SQLite database ({e})") from None
    for table in SCHEMAS[db_id].metadata().sorted_tables:
        if table.name not in tables:
            raise ConfigurationError(f"data.{db_id}.path={str(path)!r}: table {table.name!r} is missing; the file must "
                                     f"have the {db_id} schema (docs/concepts.md, Bring your own database)")
        missing = [c.name for c in table.columns if c.name not in tables[table.name]]
        if missing:
            raise ConfigurationError(f"data.{db_id}.path={str(path)!r}: table {table.name!r} lacks column(s) "
                                     f"{', '.join(missing)}; the file must have the {db_id} schema")
