"""`ehrbench-report rescore RUN [overrides ...]`: a finished run scored again under changed scorer options, with no
model call.

A scorer change should never cost a user the agent's calls again. Every trial's record keeps its model calls
(`TrialRecord.exchanges`, `llm/replay.py`), and every run keeps the command that made it (`command.json`: its
overrides and working folder). A rescore composes the run's config again with the new overrides, starts the same
hosted databases and indexes, and re-runs each scored trial's final attempt with every model call answered from its
record: the tools, the scripted users and the agent's own code run again as they ran, so a scorer that reads what the
tools left behind (ClinSQL's last query, EHRAgent's executions) sees the same state. Graders are replayed from
their recorded replies, matched by the request, or asked again with `--graders ask`. A re-run that leaves the recorded
transcript (an override that changes what the agent sees, not how it is scored) stops the rescore, naming the trial
and the message where the two part, since a score of another conversation would be a wrong score.

The result is a new MLflow run in the run's experiment, tagged `ehrbench.rescored_from` with the old run's id and
`ehrbench.rescore_overrides`, with the same report, task scores and records as a run would log; the usage is the
original run's (what the trials cost), and `rescore/model_calls` counts the calls the rescore itself made.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow

from .llm.base import ConfigurationError
from .trial import Termination, TrialRecord

log = logging.getLogger("ehrbench.rescore")
COMMAND_ARTIFACT = "command.json"
SCORED = (Termination.USER_STOP.value, Termination.ANSWERED.value)
# what decides the trajectory or the task set, not the score: a rescore of them would be a new run
NOT_SCORER = ("model", "agent", "user", "validator", "trials", "limit_tasks", "data", "runtime", "tracking", "suite",
              "models", "resume", "run_name", "budget_usd", "dry_run", "hydra")


class RescoreError(Exception):
    """The run cannot be scored again as asked (said with the fix)."""


@dataclass
class Rescored:
    run_id: str
    metrics: dict[str, float]
    replayed: int                  # trials re-run from their records
    model_calls: int               # calls the rescore made to a model (graders asked again)


def find_run(client, ref: str):
    found = [r for r in mlflow.search_runs(search_all_experiments=True, output_format="list")
             if r.info.run_id.startswith(ref)]
    if len(found) != 1:
        raise RescoreError(f"run {ref!r}: " + ("not found in this store (give --tracking-uri)" if not found else
                                               f"{len(found)} runs start with it; give more of its id"))
    return found[0]


def check_overrides(overrides: list[str]) -> None:
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if "=" not in o or key.split(".", 1)[0] in NOT_SCORER or key in ("benchmark", "benchmark.name"):
            raise RescoreError(f"{o}: a rescore changes how trials are scored (benchmark.<option>=..., grader=...); "
                               f"{key!r} changes the trials themselves: run them with the new setting instead")


def read_artifact(client, run_id: str, name: str, folder: Path) -> Path | None:
    try:
        return Path(client.download_artifacts(run_id, name, str(folder)))
    except Exception:  # noqa: BLE001 - an artifact the run does not have
        return None


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from .__main__ import CONF_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return hydra_compose(config_name="config", overrides=[o for o in overrides if not o.startswith("hydra.")])


def rescore(ref: str, overrides: list[str], tracking_uri: str, ask_graders: bool = False) -> Rescored:
    """Score run `ref` again with `overrides` into a new run; raises RescoreError (or ConfigurationError)."""
    from omegaconf import OmegaConf

    from . import __main__ as main
    from .runtime.checkpoint import TrialStore, run_identity, task_digest
    from .runtime.runner import release
    from .tracking.mlflow_tracker import MlflowTracker

    check_overrides(overrides)
    mlflow.set_tracking_uri(tracking_uri)
    client = mlflow.MlflowClient(tracking_uri)
    run = find_run(client, ref)
    if run.info.status != "FINISHED":
        raise RescoreError(f"run {run.info.run_id} is {run.info.status}: finish it first (run its command again)")
    scratch = Path(tempfile.mkdtemp(prefix="ehrbench-rescore-"))
    command_file = read_artifact(client, run.info.run_id, COMMAND_ARTIFACT, scratch)
    records_file = read_artifact(client, run.info.run_id, "records.jsonl", scratch)
    if command_file is None or records_file is None:
        raise RescoreError(f"run {run.info.run_id} has no {COMMAND_ARTIFACT if command_file is None else 'records.jsonl'}"
                           ": it was made before ehrbench kept what a rescore needs; run it again to rescore it")
    command = json.loads(command_file.read_text())
    if command.get("cwd") and Path(command["cwd"]).is_dir():
        os.chdir(command["cwd"])            # the run's relative paths (data.root, task_dir) mean what they meant
    records = TrialStore(records_file.parent).load()
    ask = frozenset({"grader"} if ask_graders else ())

    base_cfg, cfg = (main.resolve_user(compose(command["overrides"])),
                     main.resolve_user(compose(command["overrides"] + overrides)))
    base_params = OmegaConf.to_container(base_cfg, resolve=True)
    params = OmegaConf.to_container(cfg, resolve=True)
    conf = main.validate(params)
    bench = main.load_benchmark(conf)
    settings = main.trial_settings(cfg, conf, bench)
    # the replayed roles call no one; graders asked again, and the value index's embedder, do
    verdict = main.check_data_use(cfg, conf, bench, settings, calling={"embedder", *ask})
    if verdict.refusals:
        raise ConfigurationError(verdict.refusal())
    to_replay = [r for r in records if r.final and r.termination in SCORED]
    if settings.agent_model and any(not r.exchanges for r in to_replay):
        raise RescoreError(f"run {run.info.run_id}: its records hold no model calls (made before ehrbench kept "
                           "them); run it again to rescore it")
    resources = bench.resources()
    main.connect_ray(conf, bench)
    paths = main.prepare_databases(resources, conf)
    all_tasks = bench.resolve_tasks(bench.tasks(), paths)
    digest = task_digest(all_tasks)
    if run_identity(base_params, digest) != run.data.tags.get("ehrbench.run_identity"):
        raise RescoreError(f"run {run.info.run_id}: its command no longer composes to the run it made (conf/ or the "
                           "task files changed since); rescore it from the checkout that made it")
    by_key = {t.key: t for t in all_tasks}
    identity = run_identity(params, digest)
    runtime, _, settings = main.start_runtime_on_ray(conf, paths, resources, settings, bench.index_values(all_tasks),
                                                     len({r.task_key for r in records}))
    try:
        rescored, problems, calls = replay_all(runtime.workers, by_key, records, to_replay, ask)
    finally:
        release(runtime)
    if problems:
        shown = "\n".join(f"  {key}#{trial}: {why}" for (key, trial), why in problems[:5])
        raise RescoreError(f"{len(problems)} of {len(to_replay)} trials did not retrace their recorded transcript "
                           f"under {' '.join(overrides) or 'no overrides'}, so they cannot be scored again from it:\n"
                           f"{shown}\nA setting that changes what the agent or user sees needs a new run.")

    tracker = MlflowTracker(tracking_uri, client.get_experiment(run.info.experiment_id).name,
                            f"{run.info.run_name}-rescored", {**params, **verdict.params()},
                            log_traces=conf.tracking.log_traces,
                            traces_during_trials=False)
    try:
        tracker.set_tags({"ehrbench.rescored_from": run.info.run_id, "ehrbench.rescore_overrides": " ".join(overrides),
                          "ehrbench.rescore_graders": "ask" if ask_graders else "replay",
                          "ehrbench.run_identity": f"rescore-{identity}", **verdict.tags()})
        store = TrialStore(scratch / "rescored")
        for r in rescored:
            store.append(r)
        tracker.log_deferred_traces(rescored)
        k = max(int(run.data.params.get("trials", 1)), 1 + max((r.trial for r in records), default=0))
        keys = {r.task_key for r in records}
        report_tasks = [t for t in all_tasks if t.key in keys]
        reports = Path(conf.tracking.root) / "reports" / tracker.run.info.run_id
        tracker.log_text(json.dumps({**command, "rescore": overrides}, indent=1), COMMAND_ARTIFACT)
        report, metrics = main.log_results(tracker, bench, settings, cfg, rescored, report_tasks, k, reports, {
            **main.usage_metrics(rescored), "rescore/trials_replayed": len(to_replay), "rescore/model_calls": calls},
            verdict.sentence())
        tracker.log_artifact(store.path)
        tracker.finish()
    except BaseException:
        tracker.finish(status="FAILED")
        raise
    print(report.text)
    before = {k: v for k, v in run.data.metrics.items() if k in report.headline}
    print("headline, recorded -> rescored: " + ", ".join(
        f"{name} {before.get(name, float('nan')):.1f} -> {value:.1f}" for name, value in report.headline.items()))
    print(f"MLflow run {tracker.run.info.run_id} (rescored from {run.info.run_id}; {len(to_replay)} trials replayed, "
          f"{calls} model calls made)")
    return Rescored(tracker.run.info.run_id, metrics, len(to_replay), calls)


def replay_all(workers: list, tasks: dict, records: list[TrialRecord], to_replay: list[TrialRecord],
               ask: frozenset) -> tuple[list[TrialRecord], list, int]:
    """Every record, the scored finals re-run on the trial workers (the rest as they were); the trials that left
    their transcript; and the model calls the re-runs made."""
    import ray
    from tqdm import tqdm

    mistakes: dict[tuple[str, int], list[str]] = {}     # what each final attempt's user was told it got wrong
    for r in records:
        if not r.final and r.validation and r.validation.get("explanation"):
            mistakes.setdefault((r.task_key, r.trial), []).append(str(r.validation["explanation"]))
    refs = {workers[i % len(workers)].replay.remote(tasks[r.task_key], r, ask,
                                                    tuple(mistakes.get((r.task_key, r.trial), ()))): id(r)
            for i, r in enumerate(to_replay)}
    done: dict[int, TrialRecord] = {}
    problems, calls = [], 0
    with tqdm(total=len(refs), desc="rescoring", unit="trial") as bar:
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            for ref in ready:
                record, problem, made = ray.get(ref)
                calls += made
                if problem:
                    problems.append(((record.task_key, record.trial), problem))
                done[refs[ref]] = record
                bar.update(1)
    return [done.get(id(r), r) for r in records], problems, calls


def main(argv: list[str]) -> int:
    from .report import DEFAULT_URI

    ap = argparse.ArgumentParser(prog="ehrbench-report rescore", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="the run's id (or its first characters)")
    ap.add_argument("overrides", nargs="*", help="scorer options, e.g. benchmark.leaf_checker=true grader=gpt-4o")
    ap.add_argument("--tracking-uri", default=DEFAULT_URI)
    ap.add_argument("--graders", choices=("replay", "ask"), default="replay",
                    help="replay: each grader's recorded reply (no call); ask: ask the grader model again")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        rescore(args.run, args.overrides, args.tracking_uri, args.graders == "ask")
    except (RescoreError, ConfigurationError) as e:
        print(f"ehrbench-report rescore: {e}", file=sys.stderr)
        return 2
    return 0
