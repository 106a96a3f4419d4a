"""The main job: `python -m ehrbench [overrides]` runs a benchmark for k trials per task on Ray and logs to MLflow.

`evaluate` is a few named steps: check the config (typed schema, `config.py`) and build the benchmark from the
registry; prepare its databases (built from the synthetic world, or the user's own files checked against the
schema); start Ray with the hosted resources and the trial workers; open (or resume) the run's checkpoint and MLflow
run; run every trial not finished yet, streaming each to disk and to MLflow; report. A SIGTERM or Ctrl-C marks the
MLflow run KILLED (a re-run resumes it); any other failure marks it FAILED.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf, open_dict

from . import benchmarks
from .benchmark import Benchmark, Resources, TaskFileError, TrialSettings
from .config import RunConfig, validate
from .llm.base import ConfigurationError
from .trial import Termination, TrialRecord

log = logging.getLogger("ehrbench")
# conf/ sits at the repository root (product layout). An absolute path makes Hydra read it as a folder from any entry
# point (`python -m ehrbench`, `jobs/evaluate.py`, a Ray job's working dir); EHRBENCH_CONF_DIR points elsewhere.
CONF_DIR = os.environ.get("EHRBENCH_CONF_DIR") or str(Path(__file__).resolve().parents[2] / "conf")


# A suite runs its children side by side in threads of one driver (`suite.concurrent_runs`): the steps that start
# things (Ray, databases built once per file, value indexes, the MLflow run's experiment) take turns under this lock;
# only the trials run together. `STOP` stops every child, since a signal reaches only the main thread.
SETUP_LOCK = threading.RLock()
STOP = threading.Event()


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM reached the driver: stop, keep what finished, mark the MLflow run KILLED.

    A KeyboardInterrupt on purpose: a signal often lands while the driver waits inside Ray's C++ code, which turns
    a KeyboardInterrupt raised by a signal handler into its own interrupt (and anything else into an error)."""


# --- step 1: config and benchmark ---------------------------------------------------------------------------------
def load_benchmark(conf: RunConfig) -> Benchmark:
    from .sampling import check_overrides

    bench = benchmarks.load(conf.benchmark["name"], conf.benchmark)
    bench.check()
    check_overrides(conf.benchmark.get("sampling"), tuple(r for r in bench.model_roles if r != "embedder"))
    return bench


def resolve_user(cfg: DictConfig) -> DictConfig:
    """`user=auto` (the default): for a model-backed agent the benchmark's own simulated user
    (`Benchmark.default_user`: EHR-ChatQA's is the paper's, gemini-2.0-flash with reflection, checked by the
    validator), else the scripted user. Keys given beside it (`+user.model.base_url=...`) are kept. Resolved before
    anything is logged, so the run's params name the user it ran with."""
    if cfg.user.get("name") != "auto":
        return cfg
    bench = benchmarks.benchmark_class(cfg.benchmark.name, cfg.benchmark.get("entry"))
    model_backed = cfg.model.provider != "scripted" and cfg.agent.name != "reference"
    chosen = compose_choice("user", bench.default_user if model_backed and bench.default_user else "scripted")
    given = {k: v for k, v in OmegaConf.to_container(cfg.user).items() if k not in ("name", "kind")}
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.user = OmegaConf.merge(OmegaConf.create(OmegaConf.to_container(chosen)), given)
    return cfg


def user_choices() -> list[str]:
    return sorted(p.stem for p in Path(CONF_DIR, "user").glob("*.yaml") if p.stem != "auto")


def trial_settings(cfg: DictConfig, conf: RunConfig, bench: Benchmark) -> TrialSettings:
    """Resolve `agent=auto` and `validator=auto`: a real model gets the model-backed agent, an LLM user the validator."""
    plain = lambda node: OmegaConf.to_container(node, resolve=True)  # noqa: E731
    scripted = cfg.model.provider == "scripted"
    model_agents = [a for a in bench.agents if a != "reference"]
    agent = cfg.agent.name if cfg.agent.name != "auto" else ("reference" if scripted or not model_agents
                                                             else model_agents[0])
    if agent not in bench.agents:
        raise ConfigurationError(f"agent={agent}: {bench.name} has the agents {list(bench.agents)}")
    if agent != "reference" and scripted:
        raise ConfigurationError(f"agent={agent} needs a real model, e.g. model=gemini-2.5-flash")
    bench.check_agent(agent)
    user = cfg.user.kind if cfg.user.kind in bench.users or "none" not in bench.users else "none"
    if user not in bench.users:
        raise ConfigurationError(f"user={cfg.user.name}: {bench.name} has the users {list(bench.users)}")
    llm_user = user == "llm"
    validated = llm_user and cfg.validator.name != "none"
    grader = cfg.grader
    if cfg.grader.name == "auto":            # the benchmark's own judge for a model's answers, else none
        grader = compose_choice("grader", bench.default_grader) if agent != "reference" and bench.default_grader \
            else None
    graded = grader is not None and grader.name not in ("none", "auto")
    bench.check_grading(agent, graded)
    return TrialSettings(
        benchmark=bench.name, benchmark_options=conf.benchmark, agent=agent, user=user,
        agent_latency_s=cfg.model.get("latency_s", 0.0) if scripted else 0.0,
        user_latency_s=cfg.user.get("latency_s", 0.0) if not llm_user else 0.0,
        agent_model=None if agent == "reference" else plain(cfg.model),
        user_model=plain(cfg.user.model) if llm_user else None,
        user_strategy=cfg.user.get("strategy", "reflection"), user_temperature=cfg.user.get("temperature", 1.0),
        user_on_filter_failure=cfg.user.get("on_filter_failure", "end"),
        validator_model=plain(cfg.validator.model) if validated else None,
        validator_samples=cfg.validator.get("samples", 1),
        max_attempts=cfg.validator.get("max_attempts", 10) if validated else 1,
        grader_model=plain(grader.model) if graded else None, limits=conf.limits)


def compose_choice(group: str, name: str) -> DictConfig:
    """One config group's choice, composed from the project's conf (`grader=auto` resolving to a named grader)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name="config", overrides=[f"{group}={name}"])[group]
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose(config_name="config", overrides=[f"{group}={name}"])[group]


def check_data_use(cfg: DictConfig, conf: RunConfig, bench: Benchmark, settings: TrialSettings,
                   calling: set[str] | None = None, show=log.info):
    """Credentialed data never reaches a model that may keep it (`data_use.py`): the verdict, shown with `show`;
    the caller stops on its refusals, before any model call, Ray start or data copy."""
    from .data_use import check

    keys = {"grader_model": f"grader={bench.default_grader} grader.model"} if cfg.grader.name == "auto" else {}
    verdict = check(bench, settings, conf.data, conf.tracking, keys, calling)
    for line in verdict.lines():
        show(line)
    return verdict


def check_models(settings: TrialSettings) -> None:
    """Build every client once in the driver so a missing key stops the run before any work."""
    from .llm.registry import build_model

    for field, cfg in settings.models().items():
        try:
            build_model(cfg)
        except ConfigurationError as e:
            if field not in ("user_model", "verifier_model", "validator_model"):
                raise
            role = field.removesuffix("_model")
            raise ConfigurationError(
                f"{e} (the simulated {role}'s model; the paper's setting runs it with a model-backed agent, "
                f"user=auto). Set the variable, or choose user=<{'|'.join(user_choices())}> (user=scripted is a "
                "departure: its figures carry the prefix scripted_user/)"
                + (" or validator=none (a departure)" if role == "validator" else "")) from None


def select_tasks(tasks: list, limit: int | None) -> list:
    """`limit_tasks=N`: the first N tasks of each finest report group (EHR-ChatQA: each database and flow)."""
    if not limit:
        return tasks
    kept, per = [], defaultdict(int)
    for t in tasks:
        finest = t.groups[-1] if t.groups else "all"
        if per[finest] < limit:
            per[finest] += 1
            kept.append(t)
    return kept


# --- step 2: databases --------------------------------------------------------------------------------------------
def prepare_databases(resources: Resources, conf: RunConfig) -> dict[str, str]:
    """db id -> file: the user's own (`data.<db>.path`, schema checked) or built from the synthetic world (cached;
    a new one is built in patient chunks as Ray tasks across the cluster); written again as DuckDB for the
    renderings a benchmark hosts in DuckDB (`Resources.duckdb`)."""
    from .schemas import WorldSpec, build_database, check_database_file
    from .schemas.duckdb_export import check_duckdb_file, export_duckdb
    from .world.generator import WorldSize

    paths = {}
    spec = WorldSpec(seed=conf.data.seed, size=WorldSize(scale=conf.data.scale), dictionary=conf.data.dictionary)
    for db_id in resources.databases:
        duck = db_id in resources.duckdb
        if db_id in conf.data.files:
            own = conf.data.files[db_id]
            if duck and not own.endswith((".duckdb", ".ddb")):
                raise ConfigurationError(f"data.{db_id}.path={own!r}: {db_id} is queried in DuckDB; point it at a "
                                         "DuckDB file (.duckdb) with the mimiciv_* schemas "
                                         "(docs/benchmarks/clinsql.md)")
            check_duckdb_file(db_id, own) if duck else check_database_file(db_id, own)
            paths[db_id] = own
            log.info("database %s: your file %s", db_id, own)
        else:
            log.info("database %s: building or reusing", db_id)
            built = build_database(db_id, spec, Path(conf.data.root), on_ray=True)
            paths[db_id] = str(export_duckdb(db_id, built) if duck else built)
    return paths


# --- step 3: the runtime ------------------------------------------------------------------------------------------
def connect_ray(conf: RunConfig, bench) -> None:
    """Join the cluster at `address` (or start a local one); the databases are built on it, then the runtime."""
    import ray

    # No runtime_env unless it is needed: a job with one cannot use the workers Ray prestarts, and each actor then
    # waits for a fresh Python process (the embedder sets its own offline variables where the model loads).
    runtime_env = None
    outside = _outside_package(bench)
    if outside:          # a benchmark that is not part of ehrbench travels to every node with the job
        runtime_env = {"py_modules": [outside]}
    ray.init(address=conf.address, ignore_reinit_error=True, log_to_driver=False, runtime_env=runtime_env)


def start_runtime_on_ray(conf: RunConfig, paths: dict[str, str], resources: Resources, settings: TrialSettings,
                         index_values: dict | None = None, n_tasks: int | None = None):
    from .runtime.runner import build_indexes, release, start_runtime, start_workers

    with_index = bool(resources.indexed_columns or index_values)
    runtime = start_runtime(paths, conf.data.index_cache, conf.runtime, with_index=with_index,
                            embedder=conf.data.embedder_spec, with_memory=resources.memory,
                            services=service_shards(resources, n_tasks), settings=settings)
    try:
        embedded = build_indexes(runtime.databases, runtime.index, resources.indexed_columns, index_values)
        settings = start_workers(runtime, settings, conf.runtime)
    except BaseException:
        release(runtime)                  # the hosted sets it took go back, so a suite's next child is not held
        raise
    return runtime, embedded, settings


def service_shards(resources: Resources, n_tasks: int | None) -> dict[str, int]:
    """Each service's shards, never more than the run has tasks: a trial reaches one shard (routed by its patient),
    so a shard beyond the tasks' count would be a process that starts, holds nothing and serves nobody."""
    return {name: min(n, max(1, n_tasks)) if n_tasks is not None else n for name, n in resources.services.items()}


def _outside_package(bench: Benchmark) -> str | None:
    """The folder of a benchmark's top-level package when it is not part of ehrbench (for Ray's py_modules)."""
    top = type(bench).__module__.split(".")[0]
    if top == "ehrbench":
        return None
    module = sys.modules[top]
    if not (module.__file__ or "").endswith("__init__.py"):
        raise ConfigurationError(f"benchmark.entry={bench.options.get('entry')!r}: {top} is a single module; put it in "
                                 "a package folder (<folder>/__init__.py) so Ray can ship it to every node")
    return str(Path(module.__file__).parent)


# --- step 4: the run's checkpoint and MLflow run ------------------------------------------------------------------
def sweep_tags() -> dict[str, str]:
    """Under `-m` (Hydra multirun) every job's run carries the sweep's id, its job number and its overrides."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return {}
    return {"ehrbench.sweep": str(hc.sweep.dir), "ehrbench.sweep_job": str(hc.job.num),
            "ehrbench.overrides": " ".join(hc.overrides.task)}


def open_checkpoint(folder: Path, resume: bool):
    """The run's checkpoint folder; `resume=false` moves an earlier one aside (never deletes it)."""
    import time

    from .runtime.checkpoint import TrialStore

    if not resume and folder.exists():
        aside = folder.with_name(f"{folder.name}.replaced-{int(time.time())}")
        folder.rename(aside)
        log.info("resume=false: earlier records moved to %s", aside)
    return TrialStore(folder)


def open_tracker(conf: RunConfig, params: dict, run_name: str, checkpoint, identity: str):
    from .tracking.mlflow_tracker import MlflowTracker, local_store

    if conf.tracking.uri:   # a tracking server keeps its own artifact store
        store_uri, artifacts = conf.tracking.uri, None
    else:
        store_uri, artifacts = local_store(conf.tracking.root)
    tracker = MlflowTracker(store_uri, conf.tracking.experiment or conf.benchmark["name"], run_name, params,
                            artifact_location=artifacts, log_traces=conf.tracking.log_traces,
                            resume_run_id=checkpoint.run_id, traces_during_trials=conf.tracking.traces_during_trials)
    checkpoint.run_id = tracker.run.info.run_id
    tracker.set_tags({"ehrbench.run_identity": identity, **sweep_tags()})
    return tracker, store_uri


def describe_inputs(tracker, bench: Benchmark, tasks: list, digest: str, out_dir: Path) -> None:
    """The task set as an MLflow dataset (name, digest, source) and the benchmark's prompts in the prompt registry."""
    out_dir.mkdir(parents=True, exist_ok=True)
    task_file = out_dir / "tasks.jsonl"
    task_file.write_text("".join(json.dumps(t.to_json(), ensure_ascii=False) + "\n" for t in tasks))
    source = bench.options.get("task_dir") or str(task_file)
    tracker.log_dataset(f"{bench.name}-tasks", digest, source, len(tasks))
    tracker.log_artifact(task_file)
    tracker.register_prompts(bench.prompts())


def memory_items(records: list[TrialRecord]) -> list[dict]:
    """What scored trials add to the run's shared memory (validator-rejected and broken attempts add nothing)."""
    return [item for r in records if r.valid and r.final for item in r.memory]


def fill_memory(memory, records: list[TrialRecord]) -> None:
    """The run's shared memory as `records` (all on disk) left it: at start (a resumed run), after a restart."""
    import ray

    if memory is not None:
        ray.get(memory.fill.remote(memory_items(records)))


def remember(memory, new: list[TrialRecord], everything: list[TrialRecord]) -> None:
    """Store what `new` records add to the run's shared memory, waiting, so the next trial of a chain sees it; an
    actor that restarted since (it says so) is filled again with what `everything` on disk has taught."""
    import ray

    if memory is not None and (items := memory_items(new)) and not ray.get(memory.put.remote(items)):
        fill_memory(memory, everything)


# --- step 5: run and report ---------------------------------------------------------------------------------------
def usage_metrics(records: list[TrialRecord]) -> dict[str, float]:
    """Tokens and dollars per role over every attempt (rejected ones too: they were paid for)."""
    totals: dict[str, float] = defaultdict(float)
    for r in records:
        for role, row in r.usage.items():
            for key in ("calls", "input_tokens", "output_tokens", "cached_tokens", "cost_usd", "calls_without_usage",
                        "failed_calls"):
                totals[f"{key}/{role}"] += row.get(key, 0)
                totals[f"{key}/all"] += row.get(key, 0)
    return dict(totals)


def run_metrics(records: list[TrialRecord], stats, embedded: int) -> dict[str, float]:
    valid = [r for r in records if r.valid]
    rejected = sum(1 for r in records if r.termination == Termination.REJECTED.value)
    return {**usage_metrics(records), "trials_valid": len(valid), "trials_rejected_by_validator": rejected,
            "trials_infra_errors": len(records) - len(valid) - rejected,
            "worker_failures": stats.worker_failures, "trial_resubmissions": stats.infra_retries,
            "value_index_embedded_strings": embedded,
            "mean_user_turns": sum(r.user_turns for r in valid) / max(1, len(valid)),
            "mean_tool_calls": sum(r.tool_calls for r in valid) / max(1, len(valid))}


def description(bench: Benchmark, settings: TrialSettings, cfg: DictConfig, k: int, n_tasks: int,
                headline: dict[str, float], withheld: str | None = None, data: str = "") -> str:
    scores = f"withheld: {withheld}" if withheld else ", ".join(f"{name} {value:.1f}" for name, value in headline.items())
    user = settings.user if settings.user != "llm" else f"LLM user ({cfg.user.name})"
    contract = bench.recorded_contract(settings, cfg.data.get("embedder"))
    kept = "" if contract is None else f" Contract: {contract[0]}" + (
        f", departing in {', '.join(contract[1])}." if contract[1] else ", the paper's headline setting.")
    return (f"{bench.name}: agent {settings.agent} with model {cfg.model.name}, user {user}; "
            f"{n_tasks} tasks x {k} trials. Results: {scores or 'none yet'}.{kept}" + (f" {data}" if data else ""))


def log_results(tracker, bench: Benchmark, settings: TrialSettings, cfg: DictConfig, records: list[TrialRecord],
                tasks: list, k: int, reports: Path, extra: dict[str, float], data: str = ""):
    """The benchmark's report on `records` logged to the run: metrics (with `extra`), curves, files, the table,
    each task's score (what a leaderboard resamples), whether results are complete, and the description (ending
    with `data`: where the run's data may go)."""
    from .leaderboard import SCORES_ARTIFACT

    report = bench.report(records, tasks, k, reports)
    if prefix := bench.figures_prefix(settings):        # not the paper's setting: never under the paper's names
        report = report.renamed(prefix)
    metrics = {**report.metrics, **extra}
    tracker.log_metrics(metrics)
    for name, values in report.curves.items():
        tracker.log_curve(name, values)
    for f in report.files:
        tracker.log_artifact(f)
    tracker.log_text(report.text, "results_table.txt")
    scores = bench.task_scores(records, tasks, k)
    if prefix:
        scores = replace(scores, metric=prefix + scores.metric)
    tracker.log_text(json.dumps(scores.to_json(), indent=1), SCORES_ARTIFACT)
    tracker.set_tags({"ehrbench.results": "partial" if report.withheld else "complete"})
    if report.withheld:
        log.warning("results withheld: %s", report.withheld)
    tracker.set_description(description(bench, settings, cfg, k, len(tasks), report.headline, report.withheld, data))
    return report, metrics


def print_estimate(bench: Benchmark, settings: TrialSettings, cfg: DictConfig, conf: RunConfig, n_tasks: int,
                   quiet: bool = False) -> list:
    """The run's calls, tokens and dollars per model and role, printed before any model call (`estimate.py`);
    `quiet`: returned only (a suite prints its children's together, first)."""
    import mlflow

    from .estimate import estimate, table
    from .tracking.mlflow_tracker import local_store

    uri = conf.tracking.uri or local_store(conf.tracking.root)[0]
    try:
        client = mlflow.MlflowClient(uri)
        client.search_experiments(max_results=1)
    except Exception as e:  # noqa: BLE001 - no store yet, or a server that is down: the profile alone
        log.info("estimate from the profile alone (the store at %s cannot be read: %s)", uri, e)
        client = None
    lines = estimate(bench.name, settings, n_tasks * conf.run.trials, client)
    if quiet:
        return lines
    if lines:
        print(table(lines, f"{bench.name}: estimate for {n_tasks} tasks x {conf.run.trials} trials, before any "
                           f"model call" + (" (dry run: nothing runs)" if conf.run.dry_run else "")))
    elif conf.run.dry_run:
        print(f"{bench.name}: no model calls (agent {settings.agent}, model {cfg.model.name}): $0")
    return lines


@dataclass(frozen=True)
class Evaluated:
    """What a finished run left: its MLflow run, where its reports are, its metrics."""
    run_id: str | None                  # None: a dry run (nothing run, nothing logged)
    reports_root: str
    metrics: dict[str, float]
    estimate: list = ()                 # the cost estimate printed before any model call (estimate.Line)


def evaluate(cfg: DictConfig, parent_run_id: str | None = None, overrides: list[str] | None = None,
             estimate_only: bool = False) -> Evaluated:
    """The main job: one benchmark, one agent and model, every trial on Ray, into one MLflow run (a suite's child
    when `parent_run_id` is given). `overrides`, the command line that composed `cfg`, is kept with the run
    (`command.json`) so `ehrbench-report rescore` can compose it again. `estimate_only`: the config checked and
    the cost estimated, nothing printed or run (a suite's estimate before its first child)."""
    from .runtime.checkpoint import run_identity, task_digest
    from .runtime.rate_limits import limiter_metrics
    from .runtime.runner import node_count, placement, release, run_trials

    with SETUP_LOCK:           # a suite's children start one at a time (see SETUP_LOCK); their trials run together
        cfg = resolve_user(cfg)
        params = OmegaConf.to_container(cfg, resolve=True)
        conf = validate(params, absolute=to_absolute_path)                               # 1. config, benchmark
        bench = load_benchmark(conf)
        settings = trial_settings(cfg, conf, bench)
        verdict = check_data_use(cfg, conf, bench, settings,     # a suite's estimate pass checks every child here
                                 show=print if conf.run.dry_run and not estimate_only else log.info)
        if verdict.refusals:
            raise ConfigurationError(f"{bench.name} with {cfg.model.name}: {verdict.refusal()}")
        all_tasks = bench.tasks()                        # read now: a bad task file stops the run before any work
        lines = print_estimate(bench, settings, cfg, conf, len(select_tasks(all_tasks, conf.run.limit_tasks)),
                               quiet=estimate_only)
        if conf.run.dry_run or estimate_only:            # no key needed to know what a run would cost
            return Evaluated(None, str(Path(conf.tracking.root) / "reports"), {}, lines)
        check_models(settings)
        resources = bench.resources()
        connect_ray(conf, bench)
        paths = prepare_databases(resources, conf)                                       # 2. databases
        all_tasks = bench.resolve_tasks(all_tasks, paths)
        digest = task_digest(all_tasks)
        identity = run_identity(params, digest)
        tasks = select_tasks(all_tasks, conf.run.limit_tasks)
        ledger = None
        if conf.run.budget_usd:                     # every model call asks this ledger first, across the cluster
            from dataclasses import replace as with_fields

            from .runtime.budget import start_ledger

            ledger = start_ledger(identity, conf.run.budget_usd)
            settings = with_fields(settings, budget={"run": identity, "guesses": {
                line.role: line.cost_usd / line.calls for line in lines if line.calls}})
        runtime, embedded, settings = start_runtime_on_ray(conf, paths, resources, settings,  # 3. runtime
                                                           bench.index_values(all_tasks), len(tasks))

        try:                                  # the runtime's hosted sets are let go if the run cannot start
            run_name = conf.run.run_name or f"{bench.name}-{settings.agent}-{cfg.model.name}-{cfg.user.name}"
            checkpoint = open_checkpoint(Path(conf.tracking.root) / "runs" / identity, conf.run.resume)  # 4. run
            records: list[TrialRecord] = checkpoint.load()
            done = checkpoint.finished(records)
            if done:
                log.info("resuming run %s: %d trials already finished", identity, len(done))
            tracker, store_uri = open_tracker(conf, {**params, **verdict.params()}, run_name, checkpoint, identity)
            tracker.set_tags(verdict.tags())
            if parent_run_id:
                tracker.set_tags({"mlflow.parentRunId": parent_run_id})
            if tracker.resumed and tracker.traces_during_trials and \
                    (missing := tracker.log_missing_traces(records)):
                log.info("resuming: %d checkpointed trials had no trace yet; writing them", missing)
            reports = Path(conf.tracking.root) / "reports" / tracker.run.info.run_id
            fill_memory(runtime.memory, records)      # a resumed run's shared memory, as its finished trials left it
        except BaseException:
            release(runtime)
            raise

    def on_record(record: TrialRecord) -> None:
        checkpoint.append(record)  # on disk first: a crash after this line loses nothing
        records.append(record)
        remember(runtime.memory, [record], records)    # before the next trial of its chain is submitted
        tracker.log_trial(record)

    def interrupted(signum, frame):
        raise RunInterrupted(f"signal {signum}")

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, interrupted) if main_thread else None
    try:
        describe_inputs(tracker, bench, tasks, digest, reports)
        if overrides is not None:
            from .rescore import COMMAND_ARTIFACT

            tracker.log_text(json.dumps({"overrides": list(overrides), "cwd": os.getcwd()}, indent=1),
                             COMMAND_ARTIFACT)
        where = placement(runtime)                # which node each actor landed on, by role
        tracker.log_text(json.dumps(where, indent=2), "placement.json")
        tracker.set_tags({"ehrbench.nodes": str(node_count(where))})
        if (contract := bench.recorded_contract(settings, conf.data.embedder)) is not None:
            tracker.set_tags({"ehrbench.contract": contract[0], "ehrbench.departures": "; ".join(contract[1])})
        stats = run_trials(tasks, conf.run.trials, runtime.workers, on_record,                   # 5. run, report
                           max_in_flight=conf.runtime.max_in_flight, max_attempts=conf.runtime.max_attempts,
                           skip=done, chains=bench.schedule(tasks, conf.run.trials), stopped=STOP.is_set)
        tracker.log_text(json.dumps(placement(runtime), indent=2), "placement_end.json")   # after any node loss
        if deferred := tracker.log_deferred_traces(records):
            log.info("trials done; writing their %d traces", deferred)
        k, keys = checkpoint.widen_scope([t.key for t in tasks], conf.run.trials)   # never report less than before
        report_tasks = [t for t in all_tasks if t.key in set(keys)]
        wanted = {(t.key, i) for t in report_tasks for i in range(k)}
        reported = [r for r in records if (r.task_key, r.trial) in wanted]
        with SETUP_LOCK:              # plots are drawn with pyplot, which one thread at a time may use
            report, metrics = log_results(tracker, bench, settings, cfg, reported, report_tasks, k, reports, {
                **run_metrics(reported, stats, embedded), **limiter_metrics(runtime.limiters)}, verdict.sentence())
        tracker.log_artifact(checkpoint.path)
        if stats.budget_stopped:
            import ray

            spent = ray.get(ledger.state.remote())
            reason = (f"budget_usd={conf.run.budget_usd:g} reached: ${spent['spent_usd']:.4f} spent; the trials it "
                      "stopped are run by the same command with a larger budget")
            tracker.set_tags({"ehrbench.stopped": reason})
            tracker.log_metrics({"budget/spent_usd": spent["spent_usd"], "budget/cap_usd": spent["cap_usd"]})
            log.warning("%s", reason)
            tracker.finish(status="KILLED")
        else:
            tracker.finish()
    except KeyboardInterrupt:                  # Ctrl-C, or SIGTERM (RunInterrupted)
        tracker.finish(status="KILLED")
        log.error("stopped by a signal: %d trials are on disk; run the same command to resume", len(records))
        raise SystemExit(130) from None
    except BaseException:
        tracker.finish(status="FAILED")
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        release(runtime)
        if ledger is not None:
            import ray

            ray.kill(ledger)
    print(report.text)
    browse = store_uri if store_uri.startswith("http") else f"mlflow ui --backend-store-uri {store_uri}"
    print(f"MLflow run {tracker.run.info.run_id} in {store_uri} (browse: {browse})")
    return Evaluated(tracker.run.info.run_id, str(Path(conf.tracking.root) / "reports"), metrics, lines)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        if cfg.suite.name != "none":
            from hydra import compose
            from hydra.core.hydra_config import HydraConfig

            from .suite import run_suite

            run_suite(cfg, list(HydraConfig.get().overrides.task), evaluate,
                      lambda overrides: compose(config_name="config", overrides=overrides), STOP)
        else:
            from hydra.core.hydra_config import HydraConfig

            evaluate(cfg, overrides=list(HydraConfig.get().overrides.task))
    except TaskFileError as e:
        log.error("bad task file: %s", e)
        raise SystemExit(2) from None
    except ConfigurationError as e:
        print(f"ehrbench: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def main() -> None:
    from .config import check_data_overrides

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        check_data_overrides(sys.argv[1:])
    except ConfigurationError as e:
        print(f"ehrbench: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    _hydra_main()


if __name__ == "__main__":
    main()
