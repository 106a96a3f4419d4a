"""One command, several benchmarks, many models: `python -m ehrbench suite=all 'models=[gpt-4o,o4-mini]'`.

A suite is a config group (`conf/suite/`): benchmark entries, each a `conf/benchmark` choice with the overrides
its runs take (`all`: the five benchmarks at their papers' headline settings; `quick`: a stratified slice of each,
the first task of every finest report group, 2 trials). For every (entry, model) the suite composes the child's
config exactly as `python -m ehrbench benchmark=<b> model=<m> <entry overrides> <the command's other overrides>`
would, and runs it with `evaluate` in this process, on this Ray cluster: the child run is the very run that command
logs (same identity), so a suite killed mid-way continues child by child and trial by trial, and reuses a run that
finished alone. `suite.concurrent_runs` children run side by side, in threads of this one driver: their trials
share its Ray cluster and its rate limiter actors, one per model, so two benchmarks on one model never pass its
limit together (their set-up steps take turns, `__main__.SETUP_LOCK`). Every child over the same database file
uses the same hosted database actors, and every child over the same databases the same value index, kept up for
the whole suite (`runtime/shared.py`).

The parent run (experiment `suite`, found again by the suite's identity: its entries, models and overrides) is
tagged on each child (`mlflow.parentRunId`) and holds the leaderboard over them (`leaderboard.py`): the table
printed, `leaderboard.csv` / `.md` / `.png`, and each cell's estimate and interval as metrics
(`<benchmark>/<model>/<metric>`, `.../low`, `.../high`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import signal
import threading
from pathlib import Path

import mlflow
from omegaconf import DictConfig, OmegaConf

from .config import validate
from .llm.base import ConfigurationError
from .tracking.mlflow_tracker import local_store

log = logging.getLogger("ehrbench.suite")
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENT = "suite"


def plan(cfg: DictConfig, overrides: list[str]) -> list[tuple[str, str, list[str]]]:
    """(benchmark, model, the child's overrides) for every entry and model, checked against the conf folders."""
    suite = OmegaConf.to_container(cfg.suite, resolve=True)
    entries = suite.get("benchmarks") or {}
    if not isinstance(entries, dict) or not entries:
        raise ConfigurationError(f"suite={suite.get('name')!r} names no benchmarks: give `benchmarks: {{<benchmark>: "
                                 "[overrides]}}` in conf/suite/<name>.yaml")
    models = list(cfg.get("models") or []) or [cfg.model.name]
    only = suite.get("only")
    if only:
        unknown = [b for b in only if b not in entries]
        if unknown:
            raise ConfigurationError(f"suite.only={only}: {unknown[0]!r} is not an entry of suite "
                                     f"{suite.get('name')!r} (its entries: {list(entries)})")
        entries = {b: v for b, v in entries.items() if b in only}
    for b in entries:
        if not (CONF_DIR / "benchmark" / f"{b}.yaml").exists():
            raise ConfigurationError(f"suite.benchmarks: {b!r} is not a conf/benchmark choice")
    for m in models:
        if not (CONF_DIR / "model" / f"{m}.yaml").exists():
            raise ConfigurationError(f"models: {m!r} is not a conf/model choice (one of "
                                     f"{sorted(p.stem for p in (CONF_DIR / 'model').glob('*.yaml'))})")
    per_benchmark = [o for o in overrides if o.lstrip("+~").startswith("benchmark")]
    if per_benchmark:
        raise ConfigurationError(f"{per_benchmark[0]}: a suite runs several benchmarks; give a benchmark's own "
                                 "options in its entry, e.g. \"suite.benchmarks.ehrchatqa=[benchmark.flows=[incre]]\"")
    shared = [o for o in overrides if not o.lstrip("+~").startswith(("suite", "models", "model="))]
    for key in ("trials", "limit_tasks"):
        if suite.get(key) is not None and not any(o.startswith(f"{key}=") for o in shared):
            shared.append(f"{key}={suite[key]}")
    return [(b, m, [f"benchmark={b}", f"model={m}", *(entries[b] or []), *shared]) for b in entries for m in models]


def identity(cfg: DictConfig, children: list) -> str:
    """The suite's entries, models and overrides (not how many of its runs go at once)."""
    suite = {k: v for k, v in OmegaConf.to_container(cfg.suite, resolve=True).items() if k != "concurrent_runs"}
    payload = json.dumps({"suite": suite, "children": children}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _parent_run(client, suite_id: str, name: str) -> str:
    """The suite's parent run: the one this suite started before (resumed), or a new one."""
    experiment = client.get_experiment_by_name(EXPERIMENT)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(EXPERIMENT)
    earlier = client.search_runs([experiment_id], f"tags.`ehrbench.suite_identity` = '{suite_id}'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if earlier:
        client.update_run(earlier[0].info.run_id, status="RUNNING")
        return earlier[0].info.run_id
    run = client.create_run(experiment_id, run_name=f"suite-{name}",
                            tags={"ehrbench.suite_identity": suite_id, "ehrbench.suite": name})
    return run.info.run_id


def run_suite(cfg: DictConfig, overrides: list[str], evaluate, compose, stop: threading.Event | None = None) -> list:
    """Every child under one parent run, `suite.concurrent_runs` at a time, then the leaderboard on the parent.
    `evaluate(child_cfg, parent_run_id, overrides)` runs one child (the main job's); `compose(overrides)` builds its
    config as the command would; `stop`, once set, stops every child running (their runs KILLED, resumable)."""
    from . import leaderboard
    from .runtime.shared import kept

    children = plan(cfg, overrides)
    suite_id = identity(cfg, children)
    name = cfg.suite.name
    print(f"suite {name}: {len(children)} runs ({', '.join(sorted({b for b, _, _ in children}))} x "
          f"{', '.join(sorted({m for _, m, _ in children}))})")
    from .estimate import merged, table

    if cfg.get("dry_run"):               # each child's estimate, then the suite's total; nothing runs or is logged
        lines = [line for _, _, o in children for line in evaluate(compose(o), parent_run_id=None).estimate]
        print(table(merged(lines), f"suite {name}: estimate over {len(children)} runs, by model and role (dry run: "
                                   "nothing runs)"))
        return []
    # every child's config checked and its cost estimated before the first model call of the first child
    configs = [compose(o) for _, _, o in children]
    lines = [line for c in configs for line in evaluate(c, estimate_only=True).estimate]
    if lines:
        print(table(merged(lines), f"suite {name}: estimate over {len(children)} runs, by model and role, before "
                                   "any model call"))
    conf = validate(OmegaConf.to_container(configs[0], resolve=True))    # the children's store, as they name it
    uri = conf.tracking.uri or local_store(conf.tracking.root)[0]
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    parent = _parent_run(client, suite_id, name)
    client.log_text(parent, json.dumps(children, indent=1), "suite_plan.json")
    stop = stop or threading.Event()
    at_once = max(1, int(cfg.suite.get("concurrent_runs") or 1))

    def child(i: int):
        bench, model, child_overrides = children[i]
        print(f"suite {name}: [{i + 1}/{len(children)}] {bench} with {model}")
        return evaluate(configs[i], parent_run_id=parent, overrides=child_overrides)

    try:
        with kept():                 # one set of hosted databases and indexes per world, for every child
            if at_once == 1:
                results = [child(i) for i in range(len(children))]
            else:
                results = _side_by_side(child, len(children), at_once, stop)
        runs = [client.get_run(r.run_id) for r in results]
        cells = leaderboard.collect(client, runs)
        reports = Path(results[0].reports_root) / f"suite-{parent}"
        leaderboard.print_table(cells, f"suite {name}: leaderboard (95% bootstrap intervals over tasks)")
        for path in leaderboard.write(cells, reports):
            client.log_artifact(parent, str(path))
        for c in cells:
            key = f"{c.benchmark}/{c.model}/{c.scores.metric}"
            for suffix, value in (("", c.interval.estimate), ("/low", c.interval.low), ("/high", c.interval.high)):
                client.log_metric(parent, key + suffix, value)
        client.set_terminated(parent, "FINISHED")
        print(f"suite {name}: parent run {parent} ({len(cells)} leaderboard cells)")
        return results
    except BaseException as e:       # a child stopped by a signal exits 130: the suite was killed, not failed
        killed = isinstance(e, KeyboardInterrupt) or (isinstance(e, SystemExit) and e.code == 130)
        client.set_terminated(parent, "KILLED" if killed else "FAILED")
        raise


def _side_by_side(child, n: int, at_once: int, stop: threading.Event) -> list:
    """Children 0..n-1, `at_once` at a time in threads of this driver (their trials share its Ray cluster and its
    rate limiters). A SIGTERM or Ctrl-C reaches this thread only: it sets `stop`, which every running child reads
    between its trials (each ends KILLED, resumable); a child that fails stops the others the same way. Results in
    plan order."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)
    pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="ehrbench-suite")
    futures = {pool.submit(child, i): i for i in range(n)}
    failure: BaseException | None = None
    try:
        pending = set(futures)
        while pending:
            # Ray's own handler takes SIGTERM when a child connects (it then aborts the process): ours again
            signal.signal(signal.SIGTERM, interrupted)
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for f in done:
                if f.exception() is not None and failure is None:
                    failure = f.exception()
                    stop.set()
                    for g in pending:
                        g.cancel()           # children not started yet never start
    except KeyboardInterrupt as e:
        failure = failure or e
        stop.set()
        for g in futures:
            g.cancel()
    finally:
        pool.shutdown(wait=True)            # the running children stop at their next trial boundary
        signal.signal(signal.SIGTERM, previous)
    if failure is not None:
        if isinstance(failure, KeyboardInterrupt) or (isinstance(failure, SystemExit) and failure.code == 130):
            raise SystemExit(130)
        raise failure
    return [f.result() for f in sorted(futures, key=futures.get)]
