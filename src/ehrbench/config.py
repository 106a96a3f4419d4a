"""The typed schema of a run's config: every option's type and range, checked once, at start, before any work.

Hydra composes the config; `validate(cfg)` turns it into typed, checked options or stops with one line naming the
field, the value and the fix (`ehrbench: trials=0: must be an integer of at least 1 (conf/config.yaml or the
override)`), so a mistyped override can never start a build or touch a finished run. Each section is a frozen
dataclass whose fields carry their rule (`rule(int, low=1)`); `__post_init__` applies them. A benchmark's own
options (databases, flows, ...) are checked by the benchmark (`Benchmark.check`); model configs by the model
registry.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .llm.base import ConfigurationError
from .trial import Limits

# `data.<db>.data_use`: auto (credentialed for a file of the user's own, synthetic for the rendered world) or a
# class declared (`data_use.py`)
DATA_USE_DECLARATIONS = ("auto", "synthetic", "open", "credentialed")
# the keys of conf/data that are not data sources
DATA_SETTINGS = ("seed", "scale", "dictionary", "root", "index_cache", "embedder")

_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def rule(kind: type, low: float | None = None, above: float | None = None, choices: tuple | None = None,
         nullable: bool = False) -> dict:
    return {"kind": kind, "low": low, "above": above, "choices": choices, "nullable": nullable}


def _fits(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _check(obj, section: str, where: str) -> None:
    for f in fields(obj):
        r = f.metadata
        if not r:
            continue
        value = getattr(obj, f.name)
        name = f"{section}.{f.name}" if section else f.name
        if value is None and r["nullable"]:
            continue
        need = _KINDS[r["kind"]]
        if r["low"] is not None:
            need += f" of at least {r['low']:g}"
        if r["above"] is not None:
            need += f" above {r['above']:g}"
        if r["choices"]:
            need = f"one of {list(r['choices'])}"
        if r["nullable"]:
            need += " (or null)"
        ok = _fits(value, r["kind"]) and (r["low"] is None or value >= r["low"]) and \
            (r["above"] is None or value > r["above"]) and (not r["choices"] or value in r["choices"])
        if not ok:
            raise ConfigurationError(f"{name}={value!r}: must be {need} ({where} or the override)")


@dataclass(frozen=True)
class RuntimeOptions:
    """`conf/runtime/*.yaml`: the actors of a run and how many trials are in flight."""
    max_in_flight: int = field(default=256, metadata=rule(int, low=1))     # trials submitted at once
    max_attempts: int = field(default=3, metadata=rule(int, low=1))        # attempts per trial on infrastructure errors
    db_replicas: int = field(default=1, metadata=rule(int, low=1))         # whole-database shards per database
    trial_workers: int = field(default=0, metadata=rule(int, low=0))       # 0: one per CPU of the cluster
    user_simulators: int = field(default=0, metadata=rule(int, low=0))     # 0: users live inside the trial workers
    placement: str = field(default="spread", metadata=rule(str, choices=("spread", "roles")))  # where actors go

    def __post_init__(self):
        _check(self, "runtime", "conf/runtime/*.yaml")


@dataclass(frozen=True)
class DataOptions:
    """`conf/data/*.yaml`: the synthetic world, where built files go, and user-supplied database files."""
    seed: int = field(default=0, metadata=rule(int, low=0))             # the world's seed: another world, same shape
    scale: float = field(default=1.0, metadata=rule(float, above=0))    # patients x scale (1: 100 MIMIC-IV* patients)
    dictionary: str = field(default="full", metadata=rule(str, choices=("full", "used")))
    root: str = "data/generated"                      # where built database files go (cached by content)
    index_cache: str = "data/generated/value_index"   # where the value indexes go (cached by content)
    files: dict = field(default_factory=dict)      # db id -> a user's own database file (`data.<db>.path`)
    data_use: dict = field(default_factory=dict)   # db id -> its declared data-use class (`data.<db>.data_use`)
    embedder: dict = field(default_factory=dict)   # value_similarity_search's embeddings: provider, model, base_url

    @property
    def embedder_spec(self) -> dict:
        """How to embed (provider, model, base_url, ...): `data.embedder` without its data-handling declaration,
        which says where data may go (`data_use.py`), not how to embed it."""
        return {k: v for k, v in (self.embedder or {}).items() if k != "data_handling"}

    def __post_init__(self):
        _check(self, "data", "conf/data/*.yaml")
        from .retrieval.embedder import EMBEDDERS

        provider = (self.embedder or {}).get("provider", "local")
        if provider not in EMBEDDERS:
            raise ConfigurationError(f"data.embedder.provider={provider!r}: choose one of {sorted(EMBEDDERS)} "
                                     "(conf/data/*.yaml or the override)")
        key_env = (self.embedder or {}).get("api_key_env") or {"openai": "OPENAI_API_KEY",
                                                                "gemini": "GEMINI_API_KEY"}.get(provider)
        if key_env and not os.environ.get(key_env):
            raise ConfigurationError(f"data.embedder.provider={provider}: needs an API key in ${key_env} (export it, "
                                     "or use data.embedder.provider=local, the offline default)")
        unknown = set(self.embedder or {}) - {"provider", "model", "base_url", "api_key_env", "batch_size",
                                              "data_handling"}
        if unknown:
            raise ConfigurationError(f"data.embedder.{sorted(unknown)[0]}: unknown field; data.embedder takes "
                                     "provider, model, base_url, api_key_env, batch_size, data_handling")
        for db_id, declared in self.data_use.items():
            if declared not in DATA_USE_DECLARATIONS:
                raise ConfigurationError(f"data.{db_id}.data_use={declared!r}: must be one of "
                                         f"{list(DATA_USE_DECLARATIONS)} (auto: credentialed for a file of your own, "
                                         "synthetic for the world ehrbench renders; conf/data/*.yaml or the override)")
            if declared not in ("auto", "synthetic") and db_id not in self.files:
                raise ConfigurationError(f"data.{db_id}.data_use={declared}: data.{db_id}.path is null, so {db_id} is "
                                         f"the synthetic world; declare a data-use class only for a file you point "
                                         f"data.{db_id}.path at")
        for db_id, path in self.files.items():
            if not Path(path).is_file():
                raise ConfigurationError(f"data.{db_id}.path={path!r}: no such file; point it at an SQLite file with "
                                         f"the {db_id} schema, or set it to null to use the synthetic world")


@dataclass(frozen=True)
class TrackingOptions:
    """`conf/tracking/*.yaml`: where runs, traces and checkpoints go."""
    root: str = "mlruns"
    uri: str | None = field(default=None, metadata=rule(str, nullable=True))
    experiment: str | None = field(default=None, metadata=rule(str, nullable=True))
    log_traces: bool = field(default=True, metadata=rule(bool))
    write_traces: str = field(default="auto", metadata=rule(str, choices=("auto", "during", "after")))
    credentialed_ok: bool = field(default=False, metadata=rule(bool))   # a server you control may keep such rows

    def __post_init__(self):
        _check(self, "tracking", "conf/tracking/*.yaml")

    @property
    def traces_during_trials(self) -> bool:
        """Whether the trace writer works while the trials run. On a machine with fewer than 4 CPUs it shares a
        core with them and slowed the main job's trial phase by ~24% (measured), so `auto` writes after them."""
        if self.write_traces == "auto":
            return usable_cpus() >= 4
        return self.write_traces == "during"


def usable_cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> float:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a container's `--cpus`)."""
    cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    try:
        quota, period = Path(cpu_max).read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, int(quota) / int(period))
    except (OSError, ValueError):
        pass
    return cpus


@dataclass(frozen=True)
class RunOptions:
    """`conf/config.yaml`: how many trials, which tasks, resume."""
    trials: int = field(default=5, metadata=rule(int, low=1))
    limit_tasks: int | None = field(default=None, metadata=rule(int, low=1, nullable=True))
    resume: bool = field(default=True, metadata=rule(bool))
    run_name: str | None = field(default=None, metadata=rule(str, nullable=True))
    dry_run: bool = field(default=False, metadata=rule(bool))
    budget_usd: float | None = field(default=None, metadata=rule(float, above=0, nullable=True))

    def __post_init__(self):
        _check(self, "", "conf/config.yaml")


@dataclass(frozen=True)
class TrialLimits:
    """The generic limits every benchmark conf carries."""
    max_steps: int = field(default=30, metadata=rule(int, low=1))
    time_limit_s: float | None = field(default=600.0, metadata=rule(float, above=0, nullable=True))   # null: none
    max_observation_chars: int | None = field(default=50_000, metadata=rule(int, low=100, nullable=True))  # null: none

    def __post_init__(self):
        _check(self, "benchmark", "conf/benchmark/*.yaml")

    def limits(self) -> Limits:
        unlimited = self.time_limit_s is None          # the original had none: steps alone bound the trial
        return Limits(self.max_steps, float("inf") if unlimited else float(self.time_limit_s),
                      self.max_observation_chars)


@dataclass(frozen=True)
class ValidatorOptions:
    """`conf/validator/*.yaml`: the simulation validator's sampling and re-runs."""
    samples: int = field(default=1, metadata=rule(int, low=1))           # verdicts per attempt; any user_error rejects
    max_attempts: int = field(default=10, metadata=rule(int, low=1))     # simulations run while it rejects them

    def __post_init__(self):
        _check(self, "validator", "conf/validator/*.yaml")


@dataclass(frozen=True)
class UserOptions:
    """`conf/user/*.yaml`: which kind of simulated user, and the scripted one's pacing."""
    # auto: resolved before the run (`__main__.resolve_user`); none: single-turn
    kind: str = field(default="scripted", metadata=rule(str, choices=("auto", "scripted", "llm", "none")))
    latency_s: float = field(default=0.0, metadata=rule(float, low=0))     # the scripted user waits so long per reply
    temperature: float = field(default=1.0, metadata=rule(float, low=0))   # the LLM user's sampling
    strategy: str = field(default="reflection", metadata=rule(str, choices=("plain", "verify", "reflection")))
    on_filter_failure: str = field(default="end", metadata=rule(str, choices=("end", "rerun")))

    def __post_init__(self):
        _check(self, "user", "conf/user/*.yaml")


@dataclass(frozen=True)
class RunConfig:
    run: RunOptions
    benchmark: dict            # conf/benchmark as plain data, paths made absolute
    limits: Limits
    data: DataOptions
    runtime: RuntimeOptions
    address: str | None        # the Ray cluster to join (None: start one)
    tracking: TrackingOptions


def _section(cls, node: dict, section: str):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in node.items() if k in names})


def _writable_dir(name: str, path: str) -> None:
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        probe = Path(path) / f".ehrbench-write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigurationError(f"{name}={path!r}: cannot create or write this folder ({e.strerror or e}); "
                                 "choose a folder you can write") from None


def data_sources(data_node: dict) -> dict[str, dict]:
    """`data.<db>` for every database source named (`path`, `data_use`); an unknown source or field stops the run."""
    from .schemas import SCHEMAS

    sources = {}
    for db_id, node in data_node.items():
        if db_id in DATA_SETTINGS:
            continue
        if db_id not in SCHEMAS:
            raise ConfigurationError(f"data.{db_id}: unknown data source; the sources are {sorted(SCHEMAS)}, each "
                                     "with path and data_use (conf/data/default.yaml or the override)")
        if not isinstance(node, dict):
            raise ConfigurationError(f"data.{db_id}={node!r}: a data source is a mapping: data.{db_id}.path (a file "
                                     f"of your own, or null) and data.{db_id}.data_use")
        if extra := sorted(set(node) - {"path", "data_use"}):
            raise ConfigurationError(f"data.{db_id}.{extra[0]}: unknown field; a data source takes path (a file of "
                                     "your own, or null) and data_use")
        if node.get("path") is not None and not isinstance(node["path"], str):
            raise ConfigurationError(f"data.{db_id}.path={node['path']!r}: must be a file path (or null)")
        sources[db_id] = node
    return sources


def check_data_overrides(args: list[str]) -> None:
    """A command-line override of a data source or field conf/data lacks (`data.mimic_v.path=...`) stopped before
    Hydra, whose own refusal names no choices; `+data.<x>...` reaches `data_sources` instead."""
    import re

    from .schemas import SCHEMAS

    for arg in args:
        found = re.match(r"^[~]?data\.([^.=]+)(?:\.([^.=]+))?=", arg)
        if not found or found.group(1) in DATA_SETTINGS:
            continue
        db_id, key = found.groups()
        if db_id not in SCHEMAS:
            raise ConfigurationError(f"data.{db_id}: unknown data source; the sources are {sorted(SCHEMAS)}, each "
                                     "with path and data_use (conf/data/default.yaml or the override)")
        if key not in (None, "path", "data_use"):
            raise ConfigurationError(f"data.{db_id}.{key}: unknown field; a data source takes path (a file of your "
                                     f"own, or null) and data_use (one of {list(DATA_USE_DECLARATIONS)})")


def validate(cfg: dict, absolute=lambda p: str(Path(p).resolve())) -> RunConfig:
    """Check every option of the resolved config (a plain dict); `absolute` resolves paths (Hydra's original cwd)."""
    run = _section(RunOptions, cfg, "")
    bench = dict(cfg.get("benchmark") or {})
    if not isinstance(bench.get("name"), str) or not bench["name"]:
        raise ConfigurationError("benchmark.name is missing: choose a benchmark, e.g. benchmark=ehrchatqa")
    limits = _section(TrialLimits, bench, "benchmark").limits()
    for key in ("task_dir",):
        if isinstance(bench.get(key), str):
            bench[key] = absolute(bench[key])
    if isinstance(bench.get("memory_file"), str):               # EHRAgent: a memory learned by an earlier run
        bench["memory_file"] = absolute(bench["memory_file"])
    if isinstance(bench.get("question_files"), dict):          # EHRAgent: db -> a question file of your own
        bench["question_files"] = {db: absolute(p) if isinstance(p, str) else p
                                   for db, p in bench["question_files"].items()}
    data_node = dict(cfg.get("data") or {})
    sources = data_sources(data_node)
    files = {k: absolute(v["path"]) for k, v in sources.items() if v.get("path") is not None}
    data_use = {k: v["data_use"] for k, v in sources.items() if "data_use" in v}
    data = _section(DataOptions, {**data_node, "files": files, "data_use": data_use}, "data")
    runtime_node = dict(cfg.get("runtime") or {})
    runtime = _section(RuntimeOptions, runtime_node, "runtime")
    tracking = _section(TrackingOptions, dict(cfg.get("tracking") or {}), "tracking")
    _section(ValidatorOptions, dict(cfg.get("validator") or {}), "validator")
    _section(UserOptions, dict(cfg.get("user") or {}), "user")
    latency = (cfg.get("model") or {}).get("latency_s", 0.0)
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or latency < 0:
        raise ConfigurationError(f"model.latency_s={latency!r}: must be a number of at least 0 (conf/model/*.yaml or "
                                 "the override)")
    data = DataOptions(data.seed, data.scale, data.dictionary, absolute(data.root), absolute(data.index_cache),
                       data.files, data.data_use, data.embedder)
    tracking = TrackingOptions(absolute(tracking.root), tracking.uri, tracking.experiment, tracking.log_traces,
                               tracking.write_traces, tracking.credentialed_ok)
    for name, path in (("tracking.root", tracking.root), ("data.root", data.root),
                       ("data.index_cache", data.index_cache)):
        _writable_dir(name, path)
    return RunConfig(run, bench, limits, data, runtime, runtime_node.get("address"), tracking)
