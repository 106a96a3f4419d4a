"""The main job: `python -m ehrbench [overrides]` runs a benchmark for k trials per task on Ray and logs to MLflow.

Steps: build (or reuse) the databases, start Ray with database shards and a value-index actor, build (or reuse) the
value indexes, start rate limiters, user simulators and trial workers, run every trial, stream each finished trial to
MLflow as a trace and to a JSONL file, then log metrics and artifacts and print the results table.
"""
from __future__ import annotations

import logging
import os
import sys
from collections import defaultdict
from pathlib import Path

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from .benchmarks.ehrchatqa.benchmark import TrialSettings
from .benchmarks.ehrchatqa.tasks import TaskFileError, load_task_dir
from .llm.base import ConfigurationError
from .metrics import curve, summarize
from .trial import Limits, Termination, TrialRecord

log = logging.getLogger("ehrbench")
# conf/ sits at the repository root (product layout). An absolute path makes Hydra read it as a folder from any entry
# point (`python -m ehrbench`, `jobs/evaluate.py`, a Ray job's working dir); EHRBENCH_CONF_DIR points elsewhere.
CONF_DIR = os.environ.get("EHRBENCH_CONF_DIR") or str(Path(__file__).resolve().parents[2] / "conf")


def group_rewards(records: list[TrialRecord], key=lambda task_key: task_key) -> dict[str, dict[str, list[float]]]:
    """group -> task -> rewards of valid trials; groups: 'all', '<db>', '<flow>', '<db>/<flow>'."""
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if not r.valid:
            continue
        db, flow, _ = r.task_key.split("/", 2)
        for g in ("all", db, flow, f"{db}/{flow}"):
            groups[g][r.task_key].append(r.reward)
    return groups


def results_table(records: list[TrialRecord], tasks_by_group: dict[str, int], k: int) -> tuple[str, dict[str, float]]:
    from rich.console import Console
    from rich.table import Table

    groups = group_rewards(records)
    table = Table(title=f"EHR-ChatQA results over {k} trials per task (percent)")
    for col in ("group", "tasks", f"SR-{k}", f"Pass@{k}", f"Pass^{k}", f"Gap-{k}", "incomplete"):
        table.add_column(col, justify="right" if col != "group" else "left")
    metrics: dict[str, float] = {}
    for g in sorted(groups, key=lambda g: (g != "all", g.count("/"), g)):
        rewards = dict(groups[g])
        for missing in range(tasks_by_group.get(g, 0) - len(rewards)):
            rewards[f"missing{missing}"] = []
        s = summarize(rewards, k)
        metrics.update(s.as_dict(prefix=f"{g}/" if g != "all" else ""))
        table.add_row(g, str(s.tasks), f"{s.sr:.1f}", f"{s.pass_at:.1f}", f"{s.pass_hat:.1f}", f"{s.gap:.1f}",
                      str(s.incomplete))
    console = Console(file=sys.stdout, width=110)
    with console.capture() as cap:
        console.print(table)
    return cap.get(), metrics


def analysis(records: list[TrialRecord], tasks, k: int, out_dir: Path) -> tuple[dict, list[Path], dict]:
    """Pass^k against k, SR per AdaptQA/IncreQA category, and the per-task table, as metrics and artifacts."""
    import csv

    from .tracking.plots import category_bars, pass_k_curves

    out_dir.mkdir(parents=True, exist_ok=True)
    groups = group_rewards(records)
    ks = list(range(1, k + 1))
    metrics: dict[str, float] = {}
    curves = {}
    for g in ("all", "incre", "adapt"):
        if g in groups:
            summaries = curve(dict(groups[g]), range(1, k + 1))
            curves[g] = {"Pass_at_k": [s.pass_at for s in summaries], "Pass_hat_k": [s.pass_hat for s in summaries]}
    category_of = {t.key: f"{t.task_type}: {t.category or 'uncategorized'}" for t in tasks}
    per_category: dict[str, list[float]] = defaultdict(list)
    rows = []
    for t in tasks:
        rewards = groups.get("all", {}).get(t.key, [])
        if rewards:
            per_category[category_of[t.key]].append(sum(rewards) / len(rewards))
        rows.append({"task": t.key, "db": t.db_id, "flow": t.task_type, "category": t.category or "",
                     "trials": len(rewards), "successes": sum(1 for r in rewards if r >= 1.0),
                     "sr": round(100 * sum(rewards) / len(rewards), 2) if rewards else ""})
    categories = {c: 100 * sum(v) / len(v) for c, v in per_category.items()}
    for c, v in categories.items():
        metrics[f"category/{c}/SR"] = v
    table = out_dir / "per_task.csv"
    with table.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["task"])
        writer.writeheader()
        writer.writerows(rows)
    files = [table]
    if curves:
        files.append(pass_k_curves(curves, ks, out_dir / "pass_k_curve.png", "Pass@k and Pass^k against k"))
    if categories:
        files.append(category_bars(categories, out_dir / "categories.png", f"SR-{k} by task category"))
    return metrics, files, curves


def trial_settings(cfg: DictConfig) -> TrialSettings:
    """Resolve `agent=auto` and `judge=auto`: a real model gets the tool-calling agent, an LLM user gets the validator."""
    plain = lambda node: OmegaConf.to_container(node, resolve=True)  # noqa: E731
    scripted = cfg.model.provider == "scripted"
    agent = cfg.agent.name if cfg.agent.name != "auto" else ("reference" if scripted else "tool_calling")
    if agent == "tool_calling" and scripted:
        raise ConfigurationError("agent=tool_calling needs a real model, e.g. model=gemini-2.5-flash")
    llm_user = cfg.user.kind == "llm"
    judged = llm_user and cfg.judge.name != "none"
    bench = cfg.benchmark
    return TrialSettings(
        agent=agent, user="llm" if llm_user else "scripted",
        agent_latency_s=cfg.model.get("latency_s", 0.0) if scripted else 0.0,
        user_latency_s=cfg.user.get("latency_s", 0.0) if not llm_user else 0.0,
        agent_model=None if agent == "reference" else plain(cfg.model),
        user_model=plain(cfg.user.model) if llm_user else None,
        user_strategy=cfg.user.get("strategy", "reflection"), user_temperature=cfg.user.get("temperature", 1.0),
        validator_model=plain(cfg.judge.model) if judged else None,
        validator_samples=cfg.judge.get("samples", 1), max_reruns=cfg.judge.get("max_reruns", 0) if judged else 0,
        limits=Limits(max_steps=bench.max_steps, time_limit_s=bench.time_limit_s),
        sql_timeout_s=bench.sql_timeout_s, web_search=bench.web_search)


def check_models(settings: TrialSettings) -> None:
    """Build every client once in the driver so a missing key stops the run before any work."""
    from .llm.registry import build_model

    for cfg in settings.models().values():
        build_model(cfg)


def usage_metrics(records: list[TrialRecord]) -> dict[str, float]:
    """Tokens and dollars per role over every attempt (rejected ones too: they were paid for)."""
    totals: dict[str, float] = defaultdict(float)
    for r in records:
        for role, row in r.usage.items():
            for key in ("calls", "input_tokens", "output_tokens", "cached_tokens", "cost_usd"):
                totals[f"{key}/{role}"] += row[key]
                totals[f"{key}/all"] += row[key]
    return dict(totals)


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


def evaluate(cfg: DictConfig) -> dict[str, float]:
    import ray

    from .runtime.checkpoint import TrialStore, run_identity, task_digest
    from .runtime.runner import RuntimeOptions, build_indexes, run_trials, start_runtime, start_workers
    from .schemas import WorldSpec, build_database
    from .tracking.mlflow_tracker import MlflowTracker, local_store
    from .world.generator import WorldSize

    bench = cfg.benchmark
    settings = trial_settings(cfg)
    check_models(settings)
    options = RuntimeOptions(**{f: cfg.runtime[f] for f in RuntimeOptions.__dataclass_fields__ if f in cfg.runtime})
    tasks = load_task_dir(to_absolute_path(bench.task_dir), list(bench.databases), list(bench.flows))
    identity = run_identity(OmegaConf.to_container(cfg, resolve=True), task_digest(tasks))
    if cfg.limit_tasks:
        kept, per = [], defaultdict(int)
        for t in tasks:
            if per[(t.db_id, t.task_type)] < cfg.limit_tasks:
                per[(t.db_id, t.task_type)] += 1
                kept.append(t)
        tasks = kept
    k = int(cfg.trials)
    spec = WorldSpec(seed=cfg.data.seed, size=WorldSize(scale=cfg.data.scale), dictionary=cfg.data.dictionary)
    paths = {}
    for db_id in bench.databases:
        log.info("database %s: building or reusing", db_id)
        paths[db_id] = str(build_database(db_id, spec, Path(to_absolute_path(cfg.data.root))))

    ray.init(address=cfg.runtime.address, ignore_reinit_error=True, log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}})
    runtime = start_runtime(paths, to_absolute_path(cfg.data.index_cache), options)
    embedded = build_indexes(runtime.databases, runtime.index)
    settings = start_workers(runtime, settings, options)

    run_name = cfg.run_name or f"{bench.name}-{settings.agent}-{cfg.model.name}-{cfg.user.name}"
    if cfg.tracking.get("uri"):   # a tracking server keeps its own artifact store
        store_uri, artifacts = cfg.tracking.uri, None
    else:
        store_uri, artifacts = local_store(to_absolute_path(cfg.tracking.root))
    checkpoint = open_checkpoint(Path(to_absolute_path(cfg.tracking.root)) / "runs" / identity, cfg.resume)
    records: list[TrialRecord] = checkpoint.load()
    done = TrialStore.finished(records)
    if done:
        log.info("resuming run %s: %d trials already finished", identity, len(done))
    tracker = MlflowTracker(store_uri, cfg.tracking.experiment or bench.name, run_name,
                            OmegaConf.to_container(cfg, resolve=True), artifact_location=artifacts,
                            log_traces=cfg.tracking.log_traces, resume_run_id=checkpoint.run_id)
    checkpoint.run_id = tracker.run.info.run_id
    tracker.set_tags({"ehrbench.run_identity": identity, **sweep_tags()})

    def on_record(record: TrialRecord) -> None:
        checkpoint.append(record)  # on disk first: a crash after this line loses nothing
        records.append(record)
        tracker.log_trial(record)

    try:
        stats = run_trials(tasks, k, runtime.workers, on_record, max_in_flight=options.max_in_flight,
                           max_attempts=options.max_attempts, skip=done)
        wanted = {(t.key, i) for t in tasks for i in range(k)}
        records = [r for r in records if (r.task_key, r.trial) in wanted]
        tasks_by_group: dict[str, int] = defaultdict(int)
        for t in tasks:
            for g in ("all", t.db_id, t.task_type, f"{t.db_id}/{t.task_type}"):
                tasks_by_group[g] += 1
        text, metrics = results_table(records, tasks_by_group, k)
        valid = [r for r in records if r.valid]
        rejected = sum(1 for r in records if r.termination == Termination.REJECTED.value)
        metrics.update(usage_metrics(records))
        metrics.update({"trials_valid": len(valid), "trials_rejected_by_validator": rejected,
                        "trials_infra_errors": len(records) - len(valid) - rejected,
                        "worker_failures": stats.worker_failures, "trial_resubmissions": stats.infra_retries,
                        "value_index_embedded_strings": embedded,
                        "mean_user_turns": sum(r.user_turns for r in valid) / max(1, len(valid)),
                        "mean_tool_calls": sum(r.tool_calls for r in valid) / max(1, len(valid))})
        extra, files, curves = analysis(records, tasks, k, Path(to_absolute_path(cfg.tracking.root)) / "reports" /
                                        tracker.run.info.run_id)
        metrics.update(extra)
        tracker.log_metrics(metrics)
        for group, series in curves.items():
            for name, values in series.items():
                tracker.log_curve(f"{group}/curve/{name}", values)
        for f in files:
            tracker.log_artifact(f)
        tracker.log_artifact(checkpoint.path)
        tracker.log_text(text, "results_table.txt")
        tracker.finish()
    except BaseException:
        tracker.finish(status="FAILED")
        raise
    print(text)
    browse = store_uri if store_uri.startswith("http") else f"mlflow ui --backend-store-uri {store_uri}"
    print(f"MLflow run {tracker.run.info.run_id} in {store_uri} (browse: {browse})")
    return metrics


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        evaluate(cfg)
    except TaskFileError as e:
        log.error("bad task file: %s", e)
        raise SystemExit(2) from None
    except ConfigurationError as e:
        print(f"ehrbench: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _hydra_main()


if __name__ == "__main__":
    main()
