"""MLflow for one evaluation run: params (secrets removed), one trace per trial, metrics, artifacts.

Default store: `sqlite:///mlruns/mlflow.db` with artifacts under `mlruns/artifacts`, so `mlflow ui` pointed at
that URI shows every run. Traces carry the conversation as spans (user turns, agent messages, tool calls) and the
reward as trace tags, so the UI's trace view can filter on them.
"""
from __future__ import annotations

import re
from pathlib import Path

import mlflow
from mlflow.entities import SpanType

from ..trial import TrialRecord

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

    def log_trial(self, record: TrialRecord) -> None:
        if not self.log_traces:
            return
        with mlflow.start_span(name=f"{record.task_key}#{record.trial}", span_type=SpanType.AGENT) as root:
            root.set_inputs({"task": record.task_key, "trial": record.trial, "attempt": record.attempt})
            msgs = record.messages
            for j, m in enumerate(msgs):
                if m["role"] == "tool":
                    continue
                if m.get("tool_call"):
                    follows = msgs[j + 1] if j + 1 < len(msgs) and msgs[j + 1]["role"] == "tool" else None
                    with mlflow.start_span(name=m["tool_call"]["name"], span_type=SpanType.TOOL) as span:
                        span.set_inputs(m["tool_call"]["arguments"])
                        span.set_outputs(follows["content"] if follows else None)
                else:
                    with mlflow.start_span(name=m["role"], span_type=SpanType.CHAT_MODEL) as span:
                        span.set_outputs(m["content"])
            root.set_outputs({"termination": record.termination, "reward": record.reward})
            mlflow.update_current_trace(tags={"task": record.task_key, "trial": str(record.trial),
                                              "termination": record.termination, "reward": str(record.reward)})

    def log_metrics(self, metrics: dict[str, float]) -> None:
        mlflow.log_metrics({re.sub(r"[^0-9A-Za-z_\-. /]", "_", k): float(v) for k, v in metrics.items()})

    def log_curve(self, name: str, values: list[float]) -> None:
        """A metric over k = 1..len(values), logged as steps (MLflow draws it as a line)."""
        for k, v in enumerate(values, start=1):
            mlflow.log_metric(re.sub(r"[^0-9A-Za-z_\-. /]", "_", name), float(v), step=k)

    def log_artifact(self, path: str | Path) -> None:
        mlflow.log_artifact(str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        mlflow.set_tags(tags)

    def log_text(self, text: str, name: str) -> None:
        mlflow.log_text(text, name)

    def finish(self, status: str = "FINISHED") -> None:
        mlflow.flush_trace_async_logging() if hasattr(mlflow, "flush_trace_async_logging") else None
        mlflow.end_run(status=status)
