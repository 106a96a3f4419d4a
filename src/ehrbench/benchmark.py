"""The benchmark seam: what every benchmark gives the spine, and what the spine gives it.

A benchmark is one package under `benchmarks/<name>/` with a `Benchmark` subclass, one `conf/benchmark/<name>.yaml`
and one line in the registry (`benchmarks/__init__.py`); or any importable class named by `benchmark.entry` in its
conf. The spine (driver, Ray actors, tracker) only ever holds the benchmark's *name and options*: each process
builds its own instance from them (`benchmarks.load`), so nothing but plain data crosses the wire.

What a benchmark says:
- `tasks()`: its tasks (anything with a `key`, report `groups` ordered coarse to fine, and `to_json()`);
- `resources()`: the world's database renderings it queries (SQLite files, or DuckDB ones exported from them), the
  text columns to embed for similarity search, whether its agents share a memory, and services of its own (objects
  it builds with `service(...)`, sharded and routed by patient), which the runtime hosts as Ray actors
  (`DatabaseShard`, `ValueIndexActor`, `MemoryActor`, `ServiceShard`) and hands back as `Hosts`;
- `resolve_tasks(...)`: optional: tasks whose answers come from the run's databases (a question file without
  answers, answered once the databases are ready);
- `index_values(tasks)`: optional: value lists of its own to embed in the value index (a candidate table), searched
  with `await hosts.index.scored(name, table, column, query, k)`;
- `schedule(...)`: optional chains of trials that must run one after another, in order (an agent whose memory of
  earlier questions shapes the next); by default every trial is independent;
- `episode(...)`: one attempt at one task, built on the trial worker: tools, agent, how to score, optional opening
  question (single-turn) or greeting, optional simulation validator;
- `user(...)`: the simulated user of a multi-turn benchmark (None: single-turn), built wherever users live; one the
  agent also reaches by tool (an interviewed patient) has `answer_tool(name, arguments)`, and the episode's tools
  get the trial's user through `attach_user(user)`;
- `report(...)`: its own metrics, tables and plots from the finished records;
- `prompts()`: the prompt templates a run uses (registered in MLflow's prompt registry).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol

from .llm.base import Sampling
from .llm.usage import MeteredModel, UsageMeter
from .reports import Report, TaskScores  # noqa: F401 - part of the seam: benchmarks import them from here
from .trial import Agent, Limits, Scorer, Tools, TrialRecord, User


class TaskFileError(ValueError):
    """A task file that cannot be used; the message names the file, the task and the field, and how to fix it."""


def read_json_records(path: Path, missing: str) -> list:
    """The records of a task file: a JSON array (or one object), or one JSON object per line; `missing` says where
    the task files are when the file is not there."""
    import json

    path = Path(path)
    if not path.exists():
        raise TaskFileError(f"{path}: file not found ({missing})")
    text = path.read_text()
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except json.JSONDecodeError as whole:
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise TaskFileError(f"{path}: line {lineno}: not valid JSON ({e.msg}); the file must be a JSON "
                                        f"array or one JSON object per line (as a whole: {whole.msg})") from None
        return records


def read_memory_lines(path: str | Path, fields: dict[str, type | tuple], made_by: str) -> list[dict]:
    """The entries of a memory file (`benchmark.memory_file`: one JSON object per line, as a run that learned it
    wrote it); a line that is not JSON or lacks a field (of its type) stops the run, naming the line."""
    import json

    from .llm.base import ConfigurationError

    out = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigurationError(f"benchmark.memory_file: {path}: line {lineno}: not JSON ({e.msg})") from None
        missing = [f for f, kind in fields.items() if not isinstance(entry.get(f), kind)]
        if missing:
            raise ConfigurationError(f"benchmark.memory_file: {path}: line {lineno}: field {missing[0]!r} missing "
                                     f"(a memory.jsonl written by a {made_by} run has every field)")
        out.append(entry)
    return out


def check_world(task_dir: Path, world: dict, authoring: str) -> None:
    """Task files written from the world (a `manifest.json` naming its seed and scale) must meet the run's world
    (`benchmark.world`: data.seed and data.scale); otherwise stop at start, saying how to write tasks for it."""
    import json

    from .llm.base import ConfigurationError

    manifest = Path(task_dir) / "manifest.json"
    if not manifest.is_file():                  # tasks of your own (the originals' files): nothing to check
        return
    made_for = json.loads(manifest.read_text())["world"]
    seed, scale = world.get("seed"), world.get("scale")
    if (made_for["seed"], float(made_for["scale"])) != (seed, float(scale or 0)):
        raise ConfigurationError(
            f"{manifest}: these tasks come from the world seed {made_for['seed']} scale {made_for['scale']}, but this "
            f"run's is seed {seed} scale {scale}; run with data.seed={made_for['seed']} data.scale={made_for['scale']}"
            f", or write tasks for this world: python -m {authoring} --seed {seed} --scale {scale} --out DIR, then "
            "benchmark.task_dir=DIR")


class Task(Protocol):
    @property
    def key(self) -> str: ...              # unique within the benchmark
    @property
    def groups(self) -> tuple[str, ...]: ...   # report axes, coarse to fine ("mimic_iv_star", "incre", ...)
    def to_json(self) -> dict: ...


@dataclass(frozen=True)
class Resources:
    """What the runtime hosts for a benchmark: database renderings of the world, the columns to embed, and a
    run-wide memory (one `MemoryActor`: items its scorers return in `Score.memory`, read back by later trials)."""
    databases: tuple[str, ...] = ()                              # db ids (`schemas.SCHEMAS`)
    duckdb: tuple[str, ...] = ()                                 # of those, the ones hosted as DuckDB files
    indexed_columns: dict[str, dict[str, list[str]]] = field(default_factory=dict)   # db -> table -> columns
    memory: bool = False
    services: dict[str, int] = field(default_factory=dict)      # name -> shards (`Benchmark.service`)


@dataclass
class Hosts:
    """Where a trial reaches the hosted resources (async hosts: actors on a cluster, objects in tests)."""
    databases: dict[str, Any]
    index: Any = None
    memory: Any = None               # the run's MemoryActor: `await memory.items(stream)`
    services: dict[str, Any] = field(default_factory=dict)   # name -> router: `.for_patient(id)` is its shard's host


@dataclass
class Episode:
    """One attempt at one task, built on the worker that runs it."""
    tools: Tools
    agent: Agent
    score: Scorer
    opening: str | None = None       # single-turn: the question; the agent's first message is its answer
    greeting: str | None = None      # multi-turn: what the user sees before its opening turn
    validate: Callable[[TrialRecord], Awaitable[dict]] | None = None   # the simulation validator's verdict


# The model roles a trial may call (`TrialSettings.model_for`) and the field whose model plays each: the agent's
# helper calls (EHRAgent's knowledge note and debugger, AgentEHR's summarizer and memory extractor) use its model; the
# LLM user's verifier and reflection use the user's unless `verifier_model` is set. "embedder" is no model role: it is
# the value index's embedding model (`data.embedder`), named among a benchmark's `model_roles` when it hosts one.
ROLE_MODELS = {"agent": "agent_model", "knowledge": "agent_model", "debugger": "agent_model",
               "summarizer": "agent_model", "extractor": "agent_model", "user": "user_model",
               "verifier": "verifier_model", "reflection": "verifier_model", "validator": "validator_model",
               "grader": "grader_model"}


@dataclass(frozen=True)
class TrialSettings:
    """Everything a trial needs besides the task, as plain data so it travels to Ray workers."""
    benchmark: str = "ehrchatqa"              # registry name
    benchmark_options: dict = field(default_factory=dict)   # conf/benchmark as plain data
    agent: str = "reference"                  # one of the benchmark's `agents`
    user: str = "scripted"                    # one of the benchmark's `users`; "none" for single-turn
    agent_latency_s: float = 0.0              # the scripted model's latency per agent step (the throughput bench)
    user_latency_s: float = 0.0               # the scripted user's latency per turn
    agent_model: dict | None = None           # a conf/model mapping (model-backed agents)
    user_model: dict | None = None            # a conf/model mapping (LLM users)
    user_strategy: str = "reflection"         # plain | verify | reflection
    user_temperature: float = 1.0
    user_on_filter_failure: str = "end"       # end (the original: ###END###, scored) | rerun (infrastructure error)
    verifier_model: dict | None = None        # the LLM user's verifier and reflection (default: the user's model)
    validator_model: dict | None = None       # None: no simulation validator
    validator_samples: int = 1
    max_attempts: int = 10                    # simulation attempts per trial while the validator rejects (original: 10)
    grader_model: dict | None = None          # model-backed graders (rubrics), for benchmarks that have them
    limits: Limits = Limits()
    budget: dict | None = None                # `budget_usd`: {"run": ledger's run, "guesses": role -> $ a call}
    replay: Any = None                        # a rescore: the trial's recorded calls (`llm.replay.Cassette`)

    def models(self) -> dict[str, dict]:
        """The model configs in use, by field (`agent_model`, ...): the start-up key check, the rate limiters."""
        return {name: cfg for name in ("agent_model", "user_model", "verifier_model", "validator_model",
                                       "grader_model") if (cfg := getattr(self, name))}

    def role_field(self, role: str) -> str:
        """The field whose model plays `role` (`ROLE_MODELS`; the verifier's falls back to the user's)."""
        name = ROLE_MODELS[role]
        return "user_model" if name == "verifier_model" and self.verifier_model is None else name

    def model_for(self, role: str, meter: UsageMeter) -> MeteredModel:
        """A metered client for `role` (`ROLE_MODELS`): each role is metered apart."""
        from .llm.registry import build_model, price_of

        cfg = getattr(self, self.role_field(role))
        if cfg is None:
            raise ValueError(f"no model configured for the {role} role")
        if self.replay is not None and role not in self.replay.ask:   # a rescore: answered from the record
            from .llm.replay import ReplayModel
            from .llm.usage import Price

            return MeteredModel(ReplayModel(self.replay, role, cfg.get("provider", ""), cfg.get("model", "")),
                                role, meter, Price())
        budget = None
        if self.budget:                      # `budget_usd`: every call asks the run's ledger first
            from .llm.usage import spending_cap

            budget = spending_cap(self.budget["run"], self.budget["guesses"])
        return MeteredModel(build_model(cfg), role, meter, price_of(cfg), budget)

    def with_options(self, **options) -> "TrialSettings":
        return replace(self, benchmark_options={**self.benchmark_options, **options})


class Benchmark:
    """Base class of every benchmark; see the module docstring for what each method is for."""
    name: str = ""
    agents: tuple[str, ...] = ("reference",)   # `agent=` choices; "reference" is the oracle that must score 100
    users: tuple[str, ...] = ("none",)         # `user=` choices ("none": single-turn)
    headline_metric: str = ""                  # the metric named in the run's description
    default_grader: str | None = None          # `grader=auto` for a model-backed agent: a conf/grader name
    default_user: str | None = None            # `user=auto` for a model-backed agent: a conf/user name (else scripted)
    # the roles whose models its trials may call (`ROLE_MODELS`, and "embedder" when it hosts a value index): the
    # credentialed-data check (`data_use.py`) names them; one left out is still checked, under its settings field
    model_roles: tuple[str, ...] = (*ROLE_MODELS, "embedder")
    # what each role's requests send, per model family, as the original's code sets them (`sampling.py`); a
    # benchmark without a table sends only what its code passes
    sampling_table: "SamplingTable | None" = None
    # how a failed model turn ends, per role and failure kind, as the original ends it (`failures.py`), for its docs
    failure_table: "FailureTable | None" = None

    def __init__(self, options: dict):
        self.options = dict(options)

    def check(self) -> None:
        """Validate the options at start; raise `ConfigurationError` naming field and fix."""

    def check_agent(self, agent: str) -> None:
        """Validate the options against the chosen agent (`agent=auto` resolved); `ConfigurationError` if they clash."""

    def check_grading(self, agent: str, graded: bool) -> None:
        """Validate the grading against the agent (`grader=auto` resolved); `ConfigurationError` if a model's
        answers would be scored in a way the benchmark's contract does not allow."""

    def tasks(self) -> list[Task]:
        raise NotImplementedError

    def index_values(self, tasks: list) -> dict[tuple[str, str, str], list[str]]:
        """(name, table, column) -> values to embed in the run's value index besides database columns (resolved
        tasks given); none by default."""
        return {}

    def service(self, name: str, shard: int, shards: int, paths: dict[str, str]) -> Any:
        """The object behind one shard of a service named in `resources().services`, built inside its actor (the
        patients with `db.sharding.shard_of(id, shards) == shard` are routed to it); its methods are called
        remotely, `await host.method(...)`."""
        raise NotImplementedError(f"{self.name} names no service {name!r}")

    def resources(self) -> Resources:
        return Resources()

    def resolve_tasks(self, tasks: list, paths: dict[str, str]) -> list:
        """The tasks once the databases (db id -> file) are ready; by default the same."""
        return tasks

    def schedule(self, tasks: list, trials: int) -> list[list[tuple[Any, int]]] | None:
        """Chains of (task, trial): each chain runs one trial at a time, in its order (chains run side by side).
        None: every trial is independent."""
        return None

    def episode(self, task, trial: int, hosts: Hosts, settings: TrialSettings, meter: UsageMeter,
                seed: int) -> Episode:
        raise NotImplementedError

    def user(self, task, settings: TrialSettings, meter: UsageMeter, seed: int, mistakes: list[str]) -> User | None:
        return None

    def report(self, records: list[TrialRecord], tasks: list, k: int, out_dir: Path) -> Report:
        from .scoreboard import pass_k_report

        return pass_k_report(records, tasks, k, f"{self.name} results over {k} trials per task (percent)")

    def prompts(self) -> dict[str, str]:
        return {}

    def trial_score(self, record: TrialRecord) -> float:
        """One scored trial's value on the headline metric (0-1); by default its reward."""
        return float(record.reward or 0.0)

    def task_scores(self, records: list[TrialRecord], tasks: list, k: int) -> TaskScores:
        """Each task's mean `trial_score` over its scored trials, x100: by default the headline metric is their
        mean (a success rate)."""
        keys = {t.key for t in tasks}
        per: dict[str, list[float]] = {}
        for r in records:
            if r.valid and r.task_key in keys:
                per.setdefault(r.task_key, []).append(self.trial_score(r))
        return TaskScores(self.headline_metric or "SR", {key: 100 * sum(v) / len(v) for key, v in per.items()})

    def contract(self) -> tuple[str, list[str]] | None:
        """The fidelity contract the run keeps (`benchmark.contract`, recorded as the tag `ehrbench.contract` and in
        the run's description) and each setting that departs from it; None for a benchmark without one yet."""
        return None

    def sampling(self, role: str, model: dict | None) -> Sampling:
        """What `role`'s requests send `model` (a model conf): the benchmark's table, then the run's own
        `benchmark.sampling.<role>` (a departure, `recorded_contract`)."""
        from .sampling import SamplingTable

        return (self.sampling_table or SamplingTable(())).params(role, model, self.options.get("sampling"))

    def run_departures(self, settings: TrialSettings, embedder: dict | None = None) -> list[str]:
        """What the run's choices outside `benchmark.*` change from the contract: its user, validator or embedder
        (`data.embedder`); none by default."""
        return []

    def figures_prefix(self, settings: TrialSettings) -> str:
        """What the run's figures are prefixed with when its setting is not the paper's (e.g. a scripted user for a
        model), so they never pass under the paper's names; "" for the paper's setting."""
        return ""

    def recorded_contract(self, settings: TrialSettings | None = None,
                          embedder: dict | None = None) -> tuple[str, list[str]] | None:
        """`contract()` with the run's request-parameter overrides and, given its settings, its other choices
        (`run_departures`) among its departures."""
        from .sampling import departures

        contract, extra = self.contract(), departures(self.options.get("sampling") or {})
        if settings is not None:
            extra = [*extra, *self.run_departures(settings, embedder)]
        if contract is None:
            return ("original", extra) if extra else None
        return contract[0], [*contract[1], *extra]
