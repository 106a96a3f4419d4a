"""Traces built directly as MLflow entities look exactly like those MLflow's own live-span API makes, and the
writer process stores every one of them exactly once, a resumed run included."""
import dataclasses

import mlflow
import pytest

from ehrbench.tracking.mlflow_tracker import MlflowTracker, local_store
from ehrbench.tracking.traces import build_trace, trace_ids, write_traces

from .conftest import TASK_DIR, run_local_trial


@pytest.fixture(scope="module")
def record(dbs):
    """A real trial (tools, user turns, model calls) with a validator verdict, a grader and a truncated step."""
    from ehrbench.benchmarks.ehrchatqa.tasks import load_task_dir

    task = load_task_dir(TASK_DIR, ["mimic_iv_star"], ["adapt"])[0]
    r = run_local_trial(task, dbs)[-1]
    r.validation = {"result": "no_error", "explanation": "consistent", "evidence": "turn 2"}
    r.assessments = [{"name": "correctness", "value": 0.5, "source_type": "LLM_JUDGE", "source_id": "grader",
                      "rationale": "half", "metadata": {"model": "m"}}]
    r.messages[1]["finish_reason"] = "length"
    r.model_calls.append({"role": "validator", "model": "judge", "t": r.duration_s + 0.01, "dt": 0.2,
                          "input_tokens": 10, "output_tokens": 3, "cached_tokens": 0})
    return r


def live_api_trace(record, run_id: str) -> str:
    """The same trace through `mlflow.start_span_no_context` and `mlflow.log_feedback` (MLflow's own path)."""
    built = build_trace(record, "0", run_id, {})
    spans = sorted(built.data.spans, key=lambda s: (s.start_time_ns, s.parent_id is not None))
    live = {}
    for s in spans:        # parents start no later than their children, so they exist first
        attrs = {k: v for k, v in s.attributes.items() if not k.startswith("mlflow.")}
        parent = live.get(s.parent_id)
        kwargs = dict(span_type=s.span_type, start_time_ns=s.start_time_ns, parent_span=parent)
        if parent is None:
            kwargs["tags"] = {k: built.info.tags[k] for k in ("task", "trial", "termination", "reward")}
            kwargs["metadata"] = {"mlflow.sourceRun": run_id}
        span = mlflow.start_span_no_context(s.name, inputs=s.inputs, attributes=attrs, **kwargs)
        live[s.span_id] = span
    for s in reversed(spans):
        live[s.span_id].end(outputs=s.outputs, end_time_ns=s.end_time_ns)
    trace_id = live[spans[0].span_id].trace_id
    mlflow.flush_trace_async_logging()
    for a in built.info.assessments:
        mlflow.log_feedback(trace_id=trace_id, name=a.name, value=a.value, source=a.source, rationale=a.rationale,
                            metadata=a.metadata)
    return trace_id


def test_a_built_trace_is_stored_as_mlflows_own_api_stores_it(record, tmp_path):
    uri, art = local_store(tmp_path)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.create_experiment("t", artifact_location=art)
    with mlflow.start_run(experiment_id=exp) as run:
        reference = mlflow.get_trace(live_api_trace(record, run.info.run_id))
    from mlflow.tracing.client import TracingClient
    from mlflow.tracing.utils.environment import resolve_env_metadata

    write_traces(TracingClient(uri), exp, [build_trace(record, exp, run.info.run_id, resolve_env_metadata())])
    ours = mlflow.get_trace(trace_ids(run.info.run_id, record)[1])

    def shape(trace):
        by_id = {s.span_id: s for s in trace.data.spans}
        return sorted((s.name, s.span_type, by_id[s.parent_id].name if s.parent_id else None, s.start_time_ns,
                       s.end_time_ns, {k: v for k, v in s.attributes.items() if k != "mlflow.traceRequestId"},
                       s.status.status_code) for s in trace.data.spans)
    assert len(ours.data.spans) == len(record.messages) + len(record.model_calls) + 1
    assert shape(ours) == shape(reference)
    assert [s for s in ours.data.spans if s.attributes.get("finish_reason") == "length"]

    def info(trace):
        i = trace.info
        feedback = sorted((a.name, a.value, a.source.source_type, a.source.source_id, a.rationale, a.metadata)
                          for a in i.assessments)
        metadata = {k: v for k, v in i.trace_metadata.items() if not k.startswith("mlflow.trace.size")}
        tags = {k: v for k, v in i.tags.items() if k != "mlflow.artifactLocation"}
        return (i.request_time, i.state, i.request_preview, i.response_preview, metadata, tags,
                feedback)
    assert info(ours) == info(reference)
    # MLflow's own path rounds the duration from the root span or from the stored spans' milliseconds: 1 ms apart
    assert abs(ours.info.execution_duration - reference.info.execution_duration) <= 1
    names = {a.name for a in ours.info.assessments}
    assert names == {"reward", "simulation_validity", "correctness"}
    assert ours.info.trace_metadata["mlflow.sourceRun"] == run.info.run_id


def test_the_writer_process_stores_every_trace_once_and_a_resumed_run_only_the_missing(record, tmp_path):
    uri, art = local_store(tmp_path)
    records = [dataclasses.replace(record, trial=i) for i in range(40)]
    tracker = MlflowTracker(uri, "w", "w", {}, artifact_location=art)
    for r in records[:30]:
        tracker.log_trial(r)
    tracker.finish()
    run = tracker.run.info

    def stored():
        return mlflow.search_traces(locations=[run.experiment_id], run_id=run.run_id, return_type="list",
                                    max_results=100)
    first = stored()
    assert len(first) == 30
    assert {len(t.data.spans) for t in first} == {len(record.messages) + len(record.model_calls) + 1}
    assert all({a.name for a in t.info.assessments} == {"reward", "simulation_validity", "correctness"} for t in first)

    again = MlflowTracker(uri, "w", "w", {}, artifact_location=art, resume_run_id=run.run_id)
    assert again.resumed and again.log_missing_traces(records) == 10      # the checkpoint had 40, the store 30
    again.finish()
    names = sorted(t.info.tags["mlflow.traceName"] for t in stored())
    assert names == sorted(f"{record.task_key}#{i}" for i in range(40))   # each once


def test_traces_written_after_the_trials_are_queued_only_once_they_are_done(record, tmp_path):
    uri, art = local_store(tmp_path)
    records = [dataclasses.replace(record, trial=i) for i in range(12)]
    tracker = MlflowTracker(uri, "a", "a", {}, artifact_location=art, traces_during_trials=False)
    for r in records:
        tracker.log_trial(r)
    assert tracker._writer is None                                 # nothing during the trials, not even a process
    assert tracker.log_deferred_traces(records) == 12
    tracker.finish()
    run = tracker.run.info
    stored = mlflow.search_traces(locations=[run.experiment_id], run_id=run.run_id, return_type="list",
                                  max_results=100)
    assert sorted(t.info.tags["mlflow.traceName"] for t in stored) == sorted(f"{record.task_key}#{i}" for i in range(12))


def test_a_failing_store_is_raised_in_the_driver(record, tmp_path):
    import time

    uri, art = local_store(tmp_path)
    tracker = MlflowTracker(uri, "f", "f", {}, artifact_location=art)
    mlflow.delete_experiment(tracker.run.info.experiment_id)   # traces cannot be written to a deleted experiment
    tracker.log_trial(record)
    deadline = time.monotonic() + 60
    while tracker._writer.error is None and time.monotonic() < deadline:
        time.sleep(0.2)
        tracker._writer._read_reports()
    mlflow.restore_experiment(tracker.run.info.experiment_id)  # so that only the writer's failure remains
    with pytest.raises(RuntimeError, match="writing traces failed: .*must be in the 'active' state"):
        tracker.log_trial(record)
    with pytest.raises(RuntimeError, match="writing traces failed"):
        tracker.finish()


DRIVER = """
import sys, time
from ehrbench.tracking.mlflow_tracker import MlflowTracker, local_store
from ehrbench.trial import TrialRecord

if __name__ == "__main__":
    uri, art = local_store(sys.argv[1])
    tracker = MlflowTracker(uri, "k", "k", {}, artifact_location=art)
    print(tracker._writer.process.pid, flush=True)
    big = [{"role": "user", "content": "x" * 200_000, "t": 0.0, "dt": 0.1}]       # records larger than a pipe
    for i in range(100_000):
        tracker.log_trial(TrialRecord("t/0", i, "answered", 1.0, messages=big, started_at=time.time()))
"""


def test_the_writer_process_exits_when_its_driver_is_killed(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path / "store")], stdout=subprocess.PIPE,
                              text=True)
    writer = int(driver.stdout.readline())
    time.sleep(8)                                         # records flowing, some traces written
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(writer, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        os.kill(writer, signal.SIGKILL)
        raise AssertionError("the trace writer outlived its driver by 30 s")


def test_a_model_call_a_few_milliseconds_outside_its_turn_still_nests_in_it(record):
    """Messages and model calls are timed on two clocks; under load they disagree by more than a millisecond
    (seen on CI: an agent call ended up under the root). Every call during the conversation belongs to a turn."""
    calls = [dict(c) for c in record.model_calls]
    agent = next(c for c in calls if c["role"] == "agent")
    agent["t"] -= 0.02            # 20 ms before its step began
    skewed = dataclasses.replace(record, model_calls=calls)
    trace = build_trace(skewed, "0", "run", {})
    steps = {s.span_id for s in trace.data.spans if s.name in ("agent step", "user turn")}
    assert all(s.parent_id in steps for s in trace.data.spans if s.span_type == "CHAT_MODEL" and
               not s.name.startswith("validator"))
