"""MLflow for one evaluation run: params (secrets removed), one trace per trial, metrics, artifacts, and the run's
inputs: the task set as a dataset (name, digest, source), the benchmark's prompts in the prompt registry (a new
version only when a template changed, every version linked to the run) and a description with the headline scores.

Default store: `sqlite:///mlruns/mlflow.db` with artifacts under `mlruns/artifacts`, so `mlflow ui` pointed at
that URI shows every run. Each trial attempt is a trace whose spans carry their real start and end times: user
turns and agent steps, the model calls inside them (role, model, tokens), and tool calls. The rule reward and the
simulation validator's verdict are attached to the trace as assessments (feedback), and also as tags for filtering;
so is every grader's decision a benchmark records (`TrialRecord.assessments`).
"""
from __future__ import annotations

import queue
import re
import threading
from pathlib import Path

import mlflow
from mlflow.entities import AssessmentSource, SpanType

from ..trial import TrialRecord

TRACE_BACKLOG = 512    # traces waiting for the writer thread before `log_trial` blocks (backpressure, never loss)
FLUSH_EVERY = 32       # traces between drains of MLflow's export queue (its queues drop what overflows them)
IDLE = object()
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


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def trial_trace(record: TrialRecord, run_id: str | None = None) -> str:
    """Build the trial's trace from its timed messages and model calls; returns the trace id.

    Messages are timed on the trial's monotonic clock, model calls on the wall clock; the two agree to well under a
    millisecond, and each parent span is widened to cover its children so the tree stays well-formed.
    """
    t0 = record.started_at
    calls = sorted(record.model_calls, key=lambda c: c["t"])
    steps = []   # (message index, start, end, the model calls inside)
    for j, m in enumerate(record.messages):
        start = t0 + m.get("t", 0.0)
        end = start + m.get("dt", 0.0)
        inside = []
        if m["role"] != "tool":
            agent = m["role"] == "assistant"
            inside = [c for c in calls if start - 1e-3 <= t0 + c["t"] <= end + 1e-3 and (c["role"] == "agent") == agent]
            for c in inside:
                calls.remove(c)
            start = min([start] + [t0 + c["t"] for c in inside])
            end = max([end] + [t0 + c["t"] + c["dt"] for c in inside])
        steps.append((j, start, end, inside))
    first = min([t0] + [s for _, s, _, _ in steps] + [t0 + c["t"] for c in calls])
    last = max([t0 + record.duration_s] + [e for _, _, e, _ in steps] + [t0 + c["t"] + c["dt"] for c in calls])
    root = mlflow.start_span_no_context(f"{record.task_key}#{record.trial}", span_type=SpanType.AGENT,
                                        inputs={"task": record.task_key, "trial": record.trial,
                                                "attempt": record.attempt, "rerun": record.rerun},
                                        tags={"task": record.task_key, "trial": str(record.trial),
                                              "termination": record.termination, "reward": str(record.reward)},
                                        metadata={"mlflow.sourceRun": run_id} if run_id else None,
                                        start_time_ns=_ns(first))
    msgs = record.messages
    for j, start, end, inside in steps:
        m = msgs[j]
        if m["role"] == "tool":
            call = (msgs[j - 1].get("tool_call") or {}) if j else {}
            span = mlflow.start_span_no_context(call.get("name", "tool"), span_type=SpanType.TOOL, parent_span=root,
                                                inputs=call.get("arguments"), start_time_ns=_ns(start))
            span.end(outputs=m["content"], end_time_ns=_ns(end))
            continue
        name = "agent step" if m["role"] == "assistant" else "user turn"
        step = mlflow.start_span_no_context(name, span_type=SpanType.CHAIN, parent_span=root, start_time_ns=_ns(start))
        if m.get("finish_reason"):          # the model's turn did not end normally (cut off at its token limit)
            step.set_attributes({"finish_reason": m["finish_reason"]})
        for c in inside:
            _model_span(c, step, t0)
        step.end(outputs=m.get("tool_call") or m["content"], end_time_ns=_ns(end))
    for c in calls:   # after the conversation: the simulation validator
        _model_span(c, root, t0)
    root.set_attributes({"termination": record.termination, "reward": str(record.reward)})
    root.end(outputs={"termination": record.termination, "reward": record.reward, "error": record.error},
             end_time_ns=_ns(last))
    return root.trace_id


def _model_span(call: dict, parent, t0: float) -> None:
    span = mlflow.start_span_no_context(f"{call['role']}: {call['model']}", span_type=SpanType.CHAT_MODEL,
                                        parent_span=parent, start_time_ns=_ns(t0 + call["t"]),
                                        attributes={k: call[k] for k in ("role", "model", "input_tokens",
                                                                         "output_tokens", "cached_tokens")})
    span.end(end_time_ns=_ns(t0 + call["t"] + call["dt"]))


def log_assessments(trace_id: str, record: TrialRecord) -> None:
    """The rule reward (code) and the validator's verdict (LLM judge) as feedback on the trial's trace."""
    if record.reward is not None:
        mlflow.log_feedback(trace_id=trace_id, name="reward", value=float(record.reward),
                            source=AssessmentSource("CODE", "ehrbench.rule_reward"),
                            rationale=f"termination: {record.termination}")
    if record.validation:
        v = record.validation
        mlflow.log_feedback(trace_id=trace_id, name="simulation_validity", value=str(v.get("result")),
                            source=AssessmentSource("LLM_JUDGE", "ehrbench.simulation_validator"),
                            rationale=str(v.get("explanation") or v.get("skipped") or v.get("unparsed") or "")[:4000],
                            metadata={k: str(v[k])[:500] for k in ("broken_rule", "evidence") if k in v})
    for a in record.assessments:
        mlflow.log_feedback(trace_id=trace_id, name=a["name"], value=a["value"],
                            source=AssessmentSource(a.get("source_type", "LLM_JUDGE"), a.get("source_id", "ehrbench")),
                            rationale=str(a.get("rationale", ""))[:4000] or None,
                            metadata={k: str(v)[:500] for k, v in (a.get("metadata") or {}).items()} or None)


class TraceWriter(threading.Thread):
    """Writes each trial's trace and then its assessments, off the scheduling loop, losing none.

    MLflow exports traces asynchronously in batches, and discards them (with a warning) when its queues are full,
    which happens as soon as trials finish faster than the store writes them; an assessment can only attach to a
    trace already stored. So this thread builds traces, lets MLflow's exporter write them, and every
    `FLUSH_EVERY` traces (or when idle) waits for the exporter to drain before logging those traces' assessments.
    The queue in front of it is bounded: a slow store slows the run down instead of losing traces.
    """

    def __init__(self, run_id: str):
        super().__init__(name="ehrbench-trace-writer", daemon=True)
        self.run_id = run_id
        self.backlog: queue.Queue = queue.Queue(maxsize=TRACE_BACKLOG)
        self.error: Exception | None = None
        self.written = 0
        self.start()

    def put(self, record: TrialRecord) -> None:
        self.backlog.put(record)

    def run(self) -> None:
        pending: list[tuple[str, TrialRecord]] = []
        while True:
            try:
                record = self.backlog.get(timeout=1.0) if pending else self.backlog.get()
            except queue.Empty:
                record = IDLE
            if record is not None and record is not IDLE and self.error is None:
                try:
                    pending.append((trial_trace(record, self.run_id), record))
                except Exception as e:  # noqa: BLE001 - surfaced by the tracker in the main thread
                    self.error = e
            if pending and (record is None or record is IDLE or len(pending) >= FLUSH_EVERY):
                try:
                    mlflow.flush_trace_async_logging()
                    for trace_id, done in pending:
                        log_assessments(trace_id, done)
                    self.written += len(pending)
                except Exception as e:  # noqa: BLE001
                    self.error = self.error or e
                pending.clear()
            if record is None:
                return

    def close(self) -> None:
        self.backlog.put(None)
        self.join()


class MlflowTracker:
    def __init__(self, tracking_uri: str, experiment: str, run_name: str, params: dict,
                 artifact_location: str | None = None, log_traces: bool = True, resume_run_id: str | None = None):
        mlflow.set_tracking_uri(tracking_uri)
        if mlflow.get_experiment_by_name(experiment) is None:
            mlflow.create_experiment(experiment, artifact_location=artifact_location)
        mlflow.set_experiment(experiment)
        self.log_traces = log_traces
        self.resumed = False
        if resume_run_id and _run_exists(resume_run_id):
            self.run = mlflow.start_run(run_id=resume_run_id)
            self.resumed = True
            mlflow.set_tag("ehrbench.resumed", "true")  # params stay those of the first start (they cannot change)
        else:
            self.run = mlflow.start_run(run_name=run_name)
            mlflow.log_params(flatten(params))
        if log_traces:
            self._writer = TraceWriter(self.run.info.run_id)

    def log_trial(self, record: TrialRecord) -> None:
        """Queue the trial's trace (written with its assessments by the writer thread); blocks while the backlog
        is full, and raises here if the writer has failed (the tracking store is gone)."""
        if not self.log_traces:
            return
        if self._writer.error:
            raise self._writer.error
        self._writer.put(record)

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
            if self.log_traces:
                self._writer.close()
                if self._writer.error and status == "FINISHED":
                    raise self._writer.error
        finally:
            mlflow.end_run(status=status)
