"""A trial's trace as MLflow entities, written many at a time through the tracking store's own API.

MLflow's live tracing (spans started and ended one by one, OpenTelemetry processors, an exporter that logs spans
five at a time, then one request per assessment) costs about 280 ms per 40-span trial here, a tenth of what the
runtime finishes. A trial is over before its trace is written, so nothing needs to be live: `build_trace` makes
the finished trace directly (the same span tree, names, types, inputs, outputs, attributes and times; the same
trace tags, metadata and assessments as `mlflow.start_span_no_context` + `mlflow.log_feedback` give, which
tests/test_traces.py checks against MLflow's own path) and `write_traces` stores a batch with two calls the
exporter itself uses: `start_trace` per trace (its assessments inside) and one `log_spans` for every span of the
batch (one transaction on a SQL store, one OTLP request to a server).

Trace ids are derived from (run, task, trial, attempt, rerun), so a trace is written once: a resumed run asks the
store which of its checkpointed trials have no trace yet and writes only those (a crash loses no trace of a
trial reported finished).
"""
from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from mlflow.entities import (Assessment, AssessmentSource, Feedback, Span, SpanType, Trace, TraceData, TraceInfo,
                             TraceLocation, TraceState)
from mlflow.tracing.constant import (MAX_CHARS_IN_TRACE_INFO_METADATA, TRACE_SCHEMA_VERSION,
                                     TRACE_SCHEMA_VERSION_KEY, TRUNCATION_SUFFIX, SpanAttributeKey, TraceMetadataKey,
                                     TraceTagKey)
from mlflow.tracing.utils import TraceJSONEncoder, build_otel_context
from mlflow.tracing.utils.default_log_level import default_log_level_for_span_type
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from ..trial import TrialRecord

EMPTY_RESOURCE = Resource.get_empty()


def trace_ids(run_id: str, record: TrialRecord) -> tuple[int, str]:
    """The trial attempt's OpenTelemetry trace id and MLflow trace id ("tr-" + 32 hex), the same on every write."""
    key = f"{run_id}|{record.task_key}|{record.trial}|{record.attempt}|{record.rerun}"
    otel = int.from_bytes(hashlib.sha256(key.encode()).digest()[:16], "big")
    return otel, f"tr-{otel:032x}"


def _dump(value: Any) -> str:
    """A span attribute as MLflow stores it (JSON; `mlflow.tracing.utils.dump_span_attribute_value`)."""
    return json.dumps(value, cls=TraceJSONEncoder, ensure_ascii=False)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class _SpanMaker:
    """Makes finished spans of one trace, numbered in order (span ids are unique within the trace)."""

    def __init__(self, otel_trace_id: int, trace_id: str):
        self.otel_trace_id, self.trace_id = otel_trace_id, _dump(trace_id)
        self.spans: list[Span] = []

    def __call__(self, name: str, span_type: str, start_ns: int, end_ns: int, parent: int | None = None,
                 inputs: Any = None, outputs: Any = None, attributes: dict | None = None) -> int:
        span_id = len(self.spans) + 1 + (self.otel_trace_id & 0xFFFF_FFFF_0000_0000)
        attrs = {SpanAttributeKey.START_TIME_NS: _dump(start_ns), SpanAttributeKey.REQUEST_ID: self.trace_id,
                 SpanAttributeKey.SPAN_TYPE: _dump(span_type)}
        if inputs is not None:
            attrs[SpanAttributeKey.INPUTS] = _dump(inputs)
        for key, value in (attributes or {}).items():
            attrs[key] = _dump(value)
        if outputs is not None:
            attrs[SpanAttributeKey.OUTPUTS] = _dump(outputs)
        attrs[SpanAttributeKey.LOG_LEVEL] = _dump(int(default_log_level_for_span_type(span_type)))
        self.spans.append(Span(ReadableSpan(
            name=name, context=build_otel_context(self.otel_trace_id, span_id),
            parent=build_otel_context(self.otel_trace_id, parent) if parent else None,
            start_time=start_ns, end_time=end_ns, attributes=attrs, status=Status(StatusCode.OK),
            resource=EMPTY_RESOURCE)))
        return span_id


def _preview(dumped: str) -> str:
    if len(dumped) > MAX_CHARS_IN_TRACE_INFO_METADATA:
        return dumped[:MAX_CHARS_IN_TRACE_INFO_METADATA - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX
    return dumped


def build_trace(record: TrialRecord, experiment_id: str, run_id: str, metadata: dict[str, str]) -> Trace:
    """The trial attempt's trace: spans from its timed messages and model calls, assessments from its scores.

    Messages are timed on the trial's monotonic clock, model calls on the wall clock; the two agree to well under a
    millisecond, and each parent span is widened to cover its children so the tree stays well-formed.
    `metadata` is what every trace of the process carries (MLflow's environment metadata: source, git, user).
    """
    otel_id, trace_id = trace_ids(run_id, record)
    t0 = record.started_at
    calls = sorted(record.model_calls, key=lambda c: c["t"])
    windows = [(t0 + m.get("t", 0.0), t0 + m.get("t", 0.0) + m.get("dt", 0.0)) for m in record.messages]
    talk_end = max([e for _, e in windows] + [t0])
    owner: dict[int, list] = {j: [] for j in range(len(windows))}
    left = []    # after the conversation (the simulation validator): children of the root
    for c in calls:
        at = t0 + c["t"]
        agent = c["role"] == "agent"
        mine = [j for j, m in enumerate(record.messages)
                if m["role"] != "tool" and (m["role"] == "assistant") == agent]
        if not mine or at > talk_end + 1e-3:
            left.append(c)
            continue
        # the turn whose window holds the call; under load the two clocks may disagree by more than a millisecond,
        # so a call just outside every window goes to the nearest turn of its role, never to the root
        owner[min(mine, key=lambda j: max(windows[j][0] - at, at - windows[j][1], 0.0))].append(c)
    calls = left
    steps = []   # (message index, start, end, the model calls inside)
    for j, (start, end) in enumerate(windows):
        inside = owner[j]
        start = min([start] + [t0 + c["t"] for c in inside])
        end = max([end] + [t0 + c["t"] + c["dt"] for c in inside])
        steps.append((j, start, end, inside))
    first = _ns(min([t0] + [s for _, s, _, _ in steps] + [t0 + c["t"] for c in calls]))
    last = _ns(max([t0 + record.duration_s] + [e for _, _, e, _ in steps] + [t0 + c["t"] + c["dt"] for c in calls]))

    span = _SpanMaker(otel_id, trace_id)
    name = f"{record.task_key}#{record.trial}"
    inputs = {"task": record.task_key, "trial": record.trial, "attempt": record.attempt, "rerun": record.rerun}
    outputs = {"termination": record.termination, "reward": record.reward, "error": record.error}
    root = span(name, SpanType.AGENT, first, last, inputs=inputs, outputs=outputs,
                attributes={"termination": record.termination, "reward": str(record.reward)})
    msgs = record.messages
    for j, start, end, inside in steps:
        m = msgs[j]
        if m["role"] == "tool":
            call = (msgs[j - 1].get("tool_call") or {}) if j else {}
            span(call.get("name", "tool"), SpanType.TOOL, _ns(start), _ns(end), root, inputs=call.get("arguments"),
                 outputs=m["content"])
            continue
        extra = {"finish_reason": m["finish_reason"]} if m.get("finish_reason") else None   # cut off, blocked
        step = span("agent step" if m["role"] == "assistant" else "user turn", SpanType.CHAIN, _ns(start), _ns(end),
                    root, outputs=m.get("tool_call") or m["content"], attributes=extra)
        for c in inside:
            _model_span(span, c, step, t0)
    for c in calls:   # after the conversation: the simulation validator
        _model_span(span, c, root, t0)
    span.spans.sort(key=lambda s: s.start_time_ns)

    info = TraceInfo(
        trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(experiment_id),
        request_time=first // 1_000_000, execution_duration=last // 1_000_000 - first // 1_000_000, state=TraceState.OK,
        request_preview=_preview(_dump(inputs)), response_preview=_preview(_dump(outputs)),
        trace_metadata={**metadata, TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
                        TraceMetadataKey.SOURCE_RUN: run_id, TraceMetadataKey.INPUTS: _preview(_dump(inputs)),
                        TraceMetadataKey.OUTPUTS: _preview(_dump(outputs))},
        tags={"task": record.task_key, "trial": str(record.trial), "termination": record.termination,
              "reward": str(record.reward), TraceTagKey.TRACE_NAME: name},
        assessments=assessments(trace_id, record))
    return Trace(info=info, data=TraceData(spans=span.spans))


def _model_span(span: _SpanMaker, call: dict, parent: int, t0: float) -> None:
    span(f"{call['role']}: {call['model']}", SpanType.CHAT_MODEL, _ns(t0 + call["t"]), _ns(t0 + call["t"] + call["dt"]),
         parent, attributes={k: call[k] for k in ("role", "model", "input_tokens", "output_tokens", "cached_tokens")})


def assessments(trace_id: str, record: TrialRecord) -> list[Assessment]:
    """The rule reward (code), the validator's verdict (LLM judge) and every grader's decision, as feedback."""
    now = int(time.time() * 1000)

    def feedback(name, value, source, rationale=None, metadata=None):
        return Feedback(name=name, value=value, source=source, trace_id=trace_id, rationale=rationale or None,
                        metadata=metadata or None, create_time_ms=now, last_update_time_ms=now)
    out = []
    if record.reward is not None:
        out.append(feedback("reward", float(record.reward), AssessmentSource("CODE", "ehrbench.rule_reward"),
                            f"termination: {record.termination}"))
    if record.validation:
        v = record.validation
        out.append(feedback("simulation_validity", str(v.get("result")),
                            AssessmentSource("LLM_JUDGE", "ehrbench.simulation_validator"),
                            str(v.get("explanation") or v.get("skipped") or v.get("unparsed") or "")[:4000],
                            {k: str(v[k])[:500] for k in ("broken_rule", "evidence") if k in v}))
    for a in record.assessments:
        out.append(feedback(a["name"], a["value"],
                            AssessmentSource(a.get("source_type", "LLM_JUDGE"), a.get("source_id", "ehrbench")),
                            str(a.get("rationale", ""))[:4000],
                            {k: str(v)[:500] for k, v in (a.get("metadata") or {}).items()}))
    return out


def write_traces(client, experiment_id: str, traces: list[Trace]) -> None:
    """Store finished traces: each trace's info (tags, metadata, assessments), then all their spans at once.

    `client` is a `mlflow.tracing.client.TracingClient`. A store that cannot hold spans (a plain file store) gets
    them as each trace's data artifact instead, as MLflow's exporter does.
    """
    if not traces:
        return
    stored = [client.start_trace(t.info) for t in traces]
    try:
        client.log_spans(experiment_id, [s for t in traces for s in t.data.spans])
    except NotImplementedError:
        for info, t in zip(stored, traces):
            client._upload_trace_data(info, t.data)

