"""MLflow for one evaluation run: params (secrets removed), one trace per trial, metrics, artifacts, and the run's
inputs: the task set as a dataset (name, digest, source), the benchmark's prompts in the prompt registry (a new
version only when a template changed, every version linked to the run) and a description with the headline scores.

Default store: `sqlite:///mlruns/mlflow.db` with artifacts under `mlruns/artifacts`, so `mlflow ui` pointed at
that URI shows every run. Each trial attempt is a trace whose spans carry their real start and end times: user
turns and agent steps, the model calls inside them (role, model, tokens), and tool calls. The rule reward and the
simulation validator's verdict are attached to the trace as assessments (feedback), and also as tags for filtering;
so is every grader's decision a benchmark records (`TrialRecord.assessments`). Traces are built and stored by
`traces.py` from a low-priority writer process (`TraceWriter`), so that tracing costs the trials no CPU.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import re
import threading
from pathlib import Path

import mlflow
from mlflow.tracing.client import TracingClient
from mlflow.tracing.utils.environment import resolve_env_metadata

from ..trial import TrialRecord
from .traces import build_trace, trace_ids, write_traces

TRACE_BACKLOG = 4096   # traces waiting for the writer process before `log_trial` blocks (backpressure, never loss)
BATCH = 256            # traces stored per write (one `log_spans` call)
SECRET_KEY = re.compile(r"(api_?key|token|secret|password|authorization)", re.I)


def flatten(cfg: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif SECRET_KEY.search(str(k)):
            out[key] = "***"
        else:
            out[key] = str(v)[:500]
    return out


def metric_name(name: str) -> str:
    """MLflow accepts letters, digits and `_ - . /` and space in metric names; anything else becomes `_`."""
    return re.sub(r"[^0-9A-Za-z_\-. /]", "_", name)


def _run_exists(run_id: str) -> bool:
    try:
        mlflow.get_run(run_id)
        return True
    except mlflow.exceptions.MlflowException:
        return False


def local_store(root: str | Path) -> tuple[str, str]:
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}", (root / "artifacts").as_uri()


class TraceWriter:
    """Writes trial traces from a process of its own, at the lowest CPU priority, losing none.

    Storing a trace costs the store tens of milliseconds of CPU (MLflow's SQL store builds one row per span); on
    a small machine that work would take cores from the trials. So it runs in a separate process under `nice 19`,
    on whatever CPU the trials leave idle, and catches up when they finish (`close` waits for the last trace).
    Records wait in a bounded queue that a feeder thread sends down a pipe: a store slower than the trials slows
    the run down instead of losing traces. The process holds only the pipe's read end, so when the driver dies
    (even mid-record) it reads end-of-file and exits; the records are on disk and a rerun writes their traces.
    """

    def __init__(self, run_id: str, experiment_id: str, tracking_uri: str):
        ctx = multiprocessing.get_context("spawn")          # never fork a process that holds Ray's threads
        records_in, self._records_out = ctx.Pipe(duplex=False)
        self._reports_in, reports_out = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_write_traces_forever, name="ehrbench-trace-writer", daemon=True,
                                   args=(records_in, reports_out, run_id, experiment_id, tracking_uri))
        self.process.start()
        records_in.close()
        reports_out.close()
        self.backlog: queue.Queue = queue.Queue(maxsize=TRACE_BACKLOG)
        self.error: Exception | None = None
        self.written = 0
        self._feeder = threading.Thread(target=self._feed, name="ehrbench-trace-feeder", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        while True:
            record = self.backlog.get()
            try:
                self._records_out.send(record)
            except OSError:              # the writer process is gone; `close` reports it
                return
            if record is None:
                return

    def put(self, record: TrialRecord) -> None:
        self._read_reports()
        if self.error is None:
            self.backlog.put(record)

    def _read_reports(self, until_closed: bool = False) -> None:
        while until_closed or self._reports_in.poll():
            try:
                kind, value = self._reports_in.recv()
            except EOFError:
                self.error = self.error or RuntimeError("the trace writer process died")
                return
            if kind == "written":
                self.written += value
            elif kind == "error":
                self.error = self.error or RuntimeError(f"writing traces failed: {value}")
            elif kind == "closed":
                return

    def close(self) -> None:
        """Wait until every queued trace is stored (or the writer has failed)."""
        self.backlog.put(None)
        self._read_reports(until_closed=True)
        self.process.join()
        self._records_out.close()


def _write_traces_forever(records_in, reports_out, run_id: str, experiment_id: str, tracking_uri: str) -> None:
    """The writer process: batches of records to the store until None (or the driver is gone)."""
    try:                                           # run only on CPU nothing else wants (Linux), else nice 19
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)
    client = TracingClient(tracking_uri)
    metadata = resolve_env_metadata()              # source, git commit, user: the same for every trace
    failed = False
    closing = False
    while not closing:
        try:
            batch = [records_in.recv()]
            while len(batch) < BATCH and batch[-1] is not None and records_in.poll():
                batch.append(records_in.recv())
        except EOFError:                           # the driver died: its records are on disk
            return
        closing = batch[-1] is None
        records = [r for r in batch if r is not None]
        if records and not failed:
            try:
                write_traces(client, experiment_id, [build_trace(r, experiment_id, run_id, metadata) for r in records])
                reports_out.send(("written", len(records)))
            except Exception as e:  # noqa: BLE001 - raised in the driver by the tracker
                failed = True
                reports_out.send(("error", f"{type(e).__name__}: {e}"))
    reports_out.send(("closed", 0))


class MlflowTracker:
    def __init__(self, tracking_uri: str, experiment: str, run_name: str, params: dict,
                 artifact_location: str | None = None, log_traces: bool = True, resume_run_id: str | None = None,
                 traces_during_trials: bool = True):
        mlflow.set_tracking_uri(tracking_uri)
        if mlflow.get_experiment_by_name(experiment) is None:
            mlflow.create_experiment(experiment, artifact_location=artifact_location)
        mlflow.set_experiment(experiment)
        self.log_traces = log_traces
        self.traces_during_trials = traces_during_trials
        self.resumed = False
        if resume_run_id and _run_exists(resume_run_id):
            self.run = mlflow.start_run(run_id=resume_run_id)
            self.resumed = True
            mlflow.set_tag("ehrbench.resumed", "true")  # params stay those of the first start (they cannot change)
        else:
            self.run = mlflow.start_run(run_name=run_name)
            mlflow.log_params(flatten(params))
        self._tracking_uri = tracking_uri
        self._writer: TraceWriter | None = None
        if log_traces and traces_during_trials:     # else started when the trials are done: its start-up (MLflow's
            self._start_writer()                    # import) would take CPU from the first trials

    def log_trial(self, record: TrialRecord) -> None:
        """Queue the trial's trace (written with its assessments by the writer process); blocks while the backlog
        is full, and raises here if the writer has failed (the tracking store is gone). When traces are written
        after the trials, nothing happens here: the record is on disk, and `log_deferred_traces` queues it."""
        if self.log_traces and self.traces_during_trials:
            self._queue(record)

    def _start_writer(self) -> TraceWriter:
        if self._writer is None:
            self._writer = TraceWriter(self.run.info.run_id, self.run.info.experiment_id, self._tracking_uri)
        return self._writer

    def _queue(self, record: TrialRecord) -> None:
        self._start_writer().put(record)
        if self._writer.error:
            raise self._writer.error

    def log_missing_traces(self, records: list[TrialRecord]) -> int:
        """Queue the traces of checkpointed trials that the store lacks (the last run stopped before writing them);
        returns how many. Trace ids are derived from the trial, so the store's answer is exact."""
        if not self.log_traces or not records:
            return 0
        stored, token = set(), None
        while True:
            page = TracingClient().search_traces(locations=[self.run.info.experiment_id], run_id=self.run.info.run_id,
                                                 include_spans=False, max_results=500, page_token=token)
            stored.update(t.info.trace_id for t in page)
            token = page.token
            if not token:
                break
        missing = [r for r in records if trace_ids(self.run.info.run_id, r)[1] not in stored]
        for r in missing:
            self._queue(r)
        return len(missing)

    def log_deferred_traces(self, records: list[TrialRecord]) -> int:
        """With traces written after the trials: queue every trace the store lacks, once the trials are done."""
        return 0 if self.traces_during_trials else self.log_missing_traces(records)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        mlflow.log_metrics({metric_name(k): float(v) for k, v in metrics.items()})

    def log_curve(self, name: str, values: list[float]) -> None:
        """A metric over k = 1..len(values), logged as steps (MLflow draws it as a line)."""
        for k, v in enumerate(values, start=1):
            mlflow.log_metric(metric_name(name), float(v), step=k)

    def log_artifact(self, path: str | Path) -> None:
        mlflow.log_artifact(str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        mlflow.set_tags(tags)

    def log_text(self, text: str, name: str) -> None:
        mlflow.log_text(text, name)

    def set_description(self, text: str) -> None:
        """The run overview's Description (MLflow's `mlflow.note.content` tag)."""
        mlflow.set_tag("mlflow.note.content", text)

    def log_dataset(self, name: str, digest: str, source: str, n_tasks: int) -> None:
        """The task set in the run's Datasets: its name, content digest and where it was read from."""
        import warnings

        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        with warnings.catch_warnings():      # "can be interpreted in multiple ways": a local path is local
            warnings.simplefilter("ignore")
            dataset = MetaDataset(source=resolve_dataset_source(str(source)), name=name, digest=digest[:36])
        mlflow.log_input(dataset, context="evaluation", tags={"tasks": str(n_tasks)})

    def register_prompts(self, prompts: dict[str, str]) -> dict[str, int]:
        """Register each template (a new version only when it changed) and link that version to this run."""
        client = mlflow.MlflowClient()
        versions = {}
        for name, template in sorted(prompts.items()):
            latest = client.load_prompt(f"prompts:/{name}@latest", allow_missing=True, cache_ttl_seconds=0)
            if latest is None or latest.template != template:
                latest = mlflow.genai.register_prompt(name=name, template=template,
                                                      commit_message="registered by ehrbench", tags={"ehrbench": "1"})
            client.link_prompt_version_to_run(self.run.info.run_id, latest)
            versions[name] = latest.version
        return versions

    def finish(self, status: str = "FINISHED") -> None:
        try:
            if self._writer is not None:
                self._writer.close()
                if self._writer.error and status == "FINISHED":
                    raise self._writer.error
        finally:
            mlflow.end_run(status=status)
