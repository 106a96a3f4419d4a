"""PhysAssistBench: the FHIR tools (date bound, argument cleaning, one patient per session, validated writes that stay
with the session), the patient (withheld facts released by name), the rule grader (each check can fail), the judge's
verdicts, the session loader (the original's format, errors naming file, session and field), the agent's turn loop,
and the main job (the reference at mRS 100 through Ray and MLflow; the real clients, the original's judge and the
live patient through the fake server) on sessions written from a small world; the MedAgentBench-style set (its
references recomputed from what the GETs return, refsol failing each kind of mistake, 100 through Ray, the real
client's text protocol through the fake server)."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from ehrbench.benchmark import TaskFileError
from ehrbench.benchmarks.agentehr.patient_db import split_patients
from ehrbench.benchmarks.physassist import authoring
from ehrbench.benchmarks.physassist.agent import NUDGES, PhysAssistAgent
from ehrbench.benchmarks.physassist.benchmark import prompts
from ehrbench.benchmarks.physassist.fhir import run_search
from ehrbench.benchmarks.physassist.scoring import TurnWork, read_verdict, rule_grade, turn_score
from ehrbench.benchmarks.physassist.patient import NOT_SURE, PatientFacts, ReplayedPatient
from ehrbench.benchmarks.physassist.tasks import load_sessions
from ehrbench.benchmarks.physassist.tools import FhirRecords, SessionTools
from ehrbench.llm.base import ChatResponse
from ehrbench.runtime.hosts import InProcess
from ehrbench.schemas import WorldSpec, build_database
from ehrbench.trial import Message, ToolCall
from ehrbench.world.generator import WorldSize

from .conftest import mlflow_store

ROOT = Path(__file__).resolve().parents[1]
SCALE = 0.5
SCENARIOS = ["diagnostic_workup", "med_safety", "treatment_response", "discharge_planning"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Sessions written from a small world (one per scenario and tier), the database under gen/ for the main job."""
    root = tmp_path_factory.mktemp("physassist")
    source = build_database("mimic_iv", WorldSpec(seed=0, size=WorldSize(scale=SCALE), dictionary="used"),
                            root / "gen")
    folder = split_patients(source, source.parent)
    authoring.write(authoring.author(source, folder, 1, 7), root / "tasks", {"seed": 0, "scale": SCALE}, 7)
    authoring.write_medagent(folder, root / "tasks", 7, per_category=3)
    return {"root": root, "folder": folder, "tasks": root / "tasks", "sessions": load_sessions(root / "tasks",
                                                                                               SCENARIOS)}


def run(coro):
    return asyncio.run(coro)


def _tools(small, session, validate_writes=False):
    return SessionTools(InProcess(FhirRecords(small["folder"])), session.subject_id, session.current_date,
                        session.session_id, validate_writes)


def test_searches_stop_at_the_session_date_clean_arguments_and_reach_one_patient(small):
    from ehrbench.benchmarks.physassist.adapter import PatientRecord

    later = None
    for s in small["sessions"]:
        record = PatientRecord(small["folder"] / f"patient_{s.subject_id}.db", small["folder"] / "reference.db")
        if record.rows("SELECT 1 FROM labevents WHERE charttime >= ?", (s.current_date,)):
            later = (s, record)
            break
    assert later is not None, "the fixture needs a session whose patient has results on or after its current date"
    s, record = later
    args = {"subject_id": s.subject_id, "category": "laboratory", "_count": 1000}
    bounded = run_search(record, "Observation.search", args, s.current_date)
    dates = [e["resource"]["effectiveDateTime"] for e in bounded["entry"]]
    assert dates and max(dates) < s.current_date                 # a bare day: that day's timed results are out too
    assert run_search(record, "Observation.search", {**args, "date_to": "9999-12-31"}, s.current_date) == bounded
    earlier = run_search(record, "Observation.search", {**args, "date_to": min(dates)[:10]}, s.current_date)
    assert earlier.get("resourceType") == "OperationOutcome" or all(
        e["resource"]["effectiveDateTime"] <= min(dates)[:10] for e in earlier["entry"])
    label = bounded["entry"][0]["resource"]["code"]["text"]
    by_code = run_search(record, "Observation.search", {**args, "code": label}, s.current_date)
    assert run_search(record, "Observation.search", {**args, "test_name": label, "hadm_id": 0, "date_from": " ",
                                                     "bogus": 1}, s.current_date) == by_code    # alias, placeholders
    other = s.subject_id + 1
    assert run_search(record, "Observation.search", {**args, "subject_id": other}, s.current_date) == {
        "resourceType": "OperationOutcome", "issue": [{"severity": "error", "diagnostics":
                                                       f"No observations found for Patient/{other} category="
                                                       "laboratory"}]}
    assert run_search(record, "Patient.read", {"subject_id": other}, s.current_date)["issue"][0]["diagnostics"] == \
        f"Patient/{other} not found"
    assert run_search(record, "Observation.search", {"subject_id": "abc"}, s.current_date)["error"].startswith(
        "Bad arguments for Observation.search")
    text = run(_tools(small, s).call("Observation__search", {**args, "code": label}))
    assert text.startswith(f"({by_code['total']} results)\n  - {label}: ")           # compacted as the original
    assert run(_tools(small, s).call("Nope__search", {})) == '{"error": "Unknown tool: Nope.search"}'


def test_under_the_original_every_write_is_created_as_asked_and_a_search_needs_its_subject_id(small):
    """`_exec_write_tool`: no validation, a missing field or a value outside its set still created (and shown to
    the graders); an EHR search without subject_id is refused with the original's signature-check text."""
    s = small["sessions"][0]
    tools = _tools(small, s)
    for name, args in (("ServiceRequest__create", {"subject_id": s.subject_id, "service_type": "home-health",
                                                    "priority": "soon"}),
                       ("Flag__create", {"subject_id": s.subject_id, "category": "safety", "code": "FALL"}),
                       ("MedicationRequest__create", {"subject_id": s.subject_id, "medication": "Furosemide",
                                                      "dose": "40 mg", "route": "PO", "frequency": "BID"})):
        kind = name.split("__")[0]
        assert run(tools.call(name, args)).startswith(f"{kind} created: id=") and "status=active" in \
            run(tools.call(name, args))
    assert len(tools.writes) == 6
    assert json.loads(run(tools.call("Observation__search", {"code": "creatinine"}))) == {
        "error": "Bad arguments for Observation.search: missing a required argument: 'subject_id'"}
    assert json.loads(run(tools.call("Patient__read", {}))) == {
        "error": "Bad arguments for Patient.read: fhir_patient_read() missing 1 required positional argument: "
                 "'subject_id'"}


def test_with_write_validation_writes_are_validated_fhir_kept_with_the_session_and_never_touch_the_record(small):
    s = small["sessions"][0]
    path = small["folder"] / f"patient_{s.subject_id}.db"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    tools = _tools(small, s, validate_writes=True)
    ok = run(tools.call("MedicationRequest__create", {"subject_id": s.subject_id, "medication": "Furosemide",
                                                      "dose": "40 mg", "route": "PO", "frequency": "BID"}))
    assert ok == f"MedicationRequest created: id=MR-sim-{s.subject_id}-1 status=active"
    created = tools.writes[0]
    assert created["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"] == {"value": 40, "unit": "mg"}
    assert created["authoredOn"] == s.current_date and created["subject"] == {"reference": f"Patient/{s.subject_id}"}
    refused = {
        "ServiceRequest__create": ({"subject_id": s.subject_id, "service_type": "home-health", "priority": "soon"},
                                   "priority 'soon' is not one of ['routine', 'urgent', 'asap']"),
        "Flag__create": ({"subject_id": s.subject_id, "category": "safety", "code": "FALL"},
                         "missing required argument 'detail'"),
        "MedicationRequest__create": ({"subject_id": s.subject_id + 1, "medication": "x", "dose": "1 mg",
                                       "route": "PO", "frequency": "daily"}, "is not this session's patient"),
    }
    for name, (args, why) in refused.items():
        out = json.loads(run(tools.call(name, args)))
        assert out["resourceType"] == "OperationOutcome" and why in out["issue"][0]["diagnostics"], out
    bad_date = json.loads(run(tools.call("ServiceRequest__create", {
        "subject_id": s.subject_id, "service_type": "home-health", "priority": "routine", "target_date": "next week"})))
    assert "not a valid FHIR R4B ServiceRequest: occurrenceDateTime" in bad_date["issue"][0]["diagnostics"]
    assert len(tools.writes) == 1
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_the_original_replay_hands_out_stored_replies_per_tool_in_order_whatever_is_asked():
    """PatientAgentRuntime._get_preloaded: per tool, in file order, cycling; the arguments play no part; a persona
    whose literacy is not "high" uses up two replies a call (the j-th call shows reply 2j mod n); a tool with no
    stored reply gets the original's rule-based fallback (or the live patient)."""
    from types import SimpleNamespace

    from ehrbench.benchmarks.physassist.patient import FALLBACK, OriginalReplay, stored_replies

    def said(tool, high, low):
        return {"action": {"name": tool, "arguments": {"drug": "x"}},
                "observation": {"patient_response": high, "patient_responses_all_literacy": {"high": high,
                                                                                              "low": low}}}
    adherence, pain = "patient.get_medication_adherence", "patient.get_pain_assessment"
    session = SimpleNamespace(raw={"answer_list": [
        [said(adherence, "A1", "a1"), {"action": {"name": "prepare_to_answer"}, "observation": "gold"}],
        [said(pain, "P1", "p1"), said(adherence, "A2", "a2"), said(adherence, "A3", "a3")]]})
    replies = stored_replies(session, "high")
    assert replies == {adherence: ["A1", "A2", "A3"], pain: ["P1"]}
    assert stored_replies(session, "low")[adherence] == ["a1", "a2", "a3"]
    high = OriginalReplay(replies, "high")
    assert [run(high.answer(adherence, {"drug": d})) for d in ("y", "z", "", "x")] == ["A1", "A2", "A3", "A1"]
    low = OriginalReplay(replies, "low")
    assert [run(low.answer(adherence, {})) for _ in range(3)] == ["A1", "A3", "A2"]
    assert run(low.answer(pain, {})) == "P1" and run(low.answer(pain, {})) == "P1"
    assert run(high.answer("patient.get_social_history", {})) == "I've been managing as best I can. It's been " \
                                                                 "difficult."
    assert run(OriginalReplay({}, "high").answer(adherence, {})) == FALLBACK["get_medication_adherence"]

    class Live:
        async def answer(self, tool, arguments):
            return "live words"
    assert run(OriginalReplay(replies, "high", Live()).answer("patient.get_functional_status", {})) == "live words"


def test_the_patient_admits_a_withheld_fact_only_when_its_drug_is_named():
    def answer(tool, topic, high, withheld=False):
        return {"tool": tool, "topic": topic, "withheld": withheld,
                "responses": {"high": high, "medium": high.upper(), "low": high.lower()}}
    adherence = "patient.get_medication_adherence"
    facts = PatientFacts((answer(adherence, "", "I take everything."),
                          answer(adherence, "lisinopril", "I stopped the Lisinopril.", withheld=True),
                          answer(adherence, "metformin", "I take the Metformin daily.")))
    patient = ReplayedPatient(facts, "high")
    assert run(patient.answer(adherence, {})) == "I take everything."
    assert run(patient.answer(adherence, {"drug": "Metformin 500 mg"})) == "I take the Metformin daily."
    assert run(patient.answer(adherence, {"drug": "aspirin"})) == "I take everything."    # another name: no reveal
    assert run(patient.answer(adherence, {"drug": "LISINOPRIL"})) == "I stopped the Lisinopril."
    assert run(patient.answer("patient.get_pain_assessment", {})) == NOT_SURE
    assert run(ReplayedPatient(facts, "low").answer(adherence, {"drug": "lisinopril"})) == \
        "i stopped the lisinopril."


def test_the_rule_grader_passes_the_gold_and_fails_each_kind_of_mistake(small):
    def work(t, answer, calls):           # as the record gives it: writes the tools accepted
        return TurnWork(t.question, answer, calls, [(n, a) for n, a in calls if n.endswith(".create")])
    for s in small["sessions"]:
        for t in s.turns:
            calls = [(a["name"], a["arguments"]) for a in t.gold_actions]
            assert turn_score([d for d, _ in rule_grade(t, work(t, t.gold_answer, calls))]) == 1.0
    turns = [t for s in small["sessions"] for t in s.turns]
    cited = next(t for t in turns if t.kind != "WU" and any(c and c["kind"] == "cites" for c in t.checks))
    i = next(i for i, c in enumerate(cited.checks) if c and c["kind"] == "cites")
    value = cited.checks[i]["value"]
    wrong = cited.gold_answer.replace(str(value), str(value + 7))
    assert rule_grade(cited, TurnWork("", wrong, []))[i][0] is False
    write = next(t for t in turns if any(c and c["kind"] == "write" and "value" in c for c in t.checks))
    j = next(j for j, c in enumerate(write.checks) if c and c["kind"] == "write" and "value" in c)
    gold = [(a["name"], a["arguments"]) for a in write.gold_actions]
    tool, field = write.checks[j]["tool"], write.checks[j]["field"]
    changed = [(n, {**a, field: "999 mg"}) if n == tool else (n, a) for n, a in gold]
    assert rule_grade(write, work(write, write.gold_answer, changed))[j][0] is False
    assert all(d is False for (d, _), c in zip(rule_grade(write, TurnWork("", write.gold_answer, gold)), write.checks)
               if c["kind"] == "write")                     # written but refused (not accepted): every field fails
    often = next((t for t in turns if any(c and c.get("field") == "frequency" and "bid" in c["any"]
                                          for c in t.checks)), None)
    if often is not None:                                    # "daily" is not "twice daily": a field is matched whole
        f = next(i for i, c in enumerate(often.checks) if c and c.get("field") == "frequency")
        calls = [(n, {**a, "frequency": "once daily"}) if n.endswith(".create") else (n, a)
                 for n, a in ((a["name"], a["arguments"]) for a in often.gold_actions)]
        assert rule_grade(often, work(often, often.gold_answer, calls))[f][0] is False
    safety = next(t for t in turns if any(c and c["kind"] == "absent" for c in t.checks))
    k = next(k for k, c in enumerate(safety.checks) if c and c["kind"] == "absent")
    unsafe = safety.gold_answer + f" Also give {safety.checks[k]['any'][0]}."
    assert rule_grade(safety, TurnWork("", unsafe, []))[k][0] is False
    warned = safety.gold_answer + f" Avoid {safety.checks[k]['any'][0]}."
    assert rule_grade(safety, TurnWork("", warned, []))[k][0] is True            # a warning is no recommendation
    normal = next(t for t in turns if any(c and c["kind"] == "mentions" and c["any"] == ["normal", "within"]
                                          for c in t.checks))
    n = next(i for i, c in enumerate(normal.checks) if c and c.get("any") == ["normal", "within"])
    assert rule_grade(normal, TurnWork("", "It is abnormal.", []))[n][0] is False   # words, not substrings
    assert turn_score([True, None]) is None                  # an item without a check: the rule grader cannot decide


def test_judge_verdicts_are_read_as_the_original_reads_them():
    assert read_verdict('```json\n{"scores": [1, "yes", 0], "reasoning": ["a", "b", "c"]}\n```', 3) == (
        [1, 1, 0], ["a", "b", "c"])
    assert read_verdict('{"scores": [1]}', 3) == ([1, 0, 0], ["", "", ""])          # padded with NO
    assert read_verdict('[{"score": 1, "rationale": "x"}, {"pass": false}]', 2) == ([1, 0], ["x", ""])
    assert read_verdict("All items pass.", 2) is None                              # an error, never a pass
    assert read_verdict('{"verdict": "pass"}', 2) == ([0, 0], ["", ""])          # JSON without scores: all NO
    assert read_verdict('{"scores": ["0", 0.5]}', 2) == ([0, 0], ["", ""])
    assert read_verdict('{"scores": ["0", 0.5]}', 2, lambda s: int(bool(s)))[0] == [1, 1]   # the write judge's
    # the write judge calls .get on the reply: a bare list is its AttributeError, the turn unscored
    assert read_verdict("[1, 0]", 2, lambda s: int(bool(s)), lists=False) is None
    assert read_verdict('[{"score": 1}]', 1, lambda s: int(bool(s)), lists=False) is None


def test_the_code_s_judge_goes_out_as_its_code_sends_it_through_the_openai_client(small):
    """gpt-5-mini (conf/grader/gpt-5-mini.yaml) on the fake server: reasoning effort minimal, no temperature (the
    Responses adapter drops it), 4,000 output tokens, 2,000 on a write turn."""
    import yaml

    from ehrbench.benchmarks.physassist.scoring import Judge
    from ehrbench.llm.registry import build_model
    from ehrbench.llm.usage import MeteredModel, UsageMeter

    from .fake_llm_server import FakeLLMServer, Reply

    cfg = yaml.safe_load((ROOT / "conf" / "model" / "gpt-5-mini.yaml").read_text())
    s = next(x for x in small["sessions"] if x.turns[3].kind == "WU")
    server = FakeLLMServer().start()
    try:
        server.push(*[Reply(text=json.dumps({"scores": [1] * len(t.items)})) for t in s.turns[2:]],
                    model=cfg["model"])
        from ehrbench.benchmarks.physassist.benchmark import PhysAssistBenchmark

        table = PhysAssistBenchmark({}).sampling("grader", cfg)            # the benchmark's for gpt-5-mini
        judge = Judge(MeteredModel(build_model({**cfg, "base_url": f"{server.url}/v1"}), "grader", UsageMeter()),
                      prompts(), table)
        for t in s.turns[2:]:
            scores, _ = run(judge.grade(t, TurnWork(t.question, "An answer.", []), s.transcript))
            assert scores == [1] * len(t.items)
        bodies = [r.body for r in server.requests_for(cfg["model"])]
    finally:
        server.stop()
    assert [b["max_completion_tokens"] for b in bodies] == [4000, 2000]
    assert all(b["reasoning_effort"] == "minimal" and "temperature" not in b for b in bodies)


def test_a_model_is_never_scored_by_rules_alone_unless_asked(small, tmp_path):
    """grader=none with a model stops at start naming both fixes; grader=auto (the default) brings the code's
    judge, gpt-5-mini, whose missing key stops the run at start too; the MedAgentBench set needs no judge."""
    common = ["benchmark=physassist", "model=gemini-2.5-flash", "+model.base_url=http://127.0.0.1:9",
              f"tracking.root={tmp_path / 'mlruns'}", *_world_args(small, tmp_path)]
    env = {**{k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}, "GEMINI_API_KEY": "fake",
           "HF_HUB_OFFLINE": "1"}
    none = subprocess.run([sys.executable, "-m", "ehrbench", *common, "grader=none"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)
    assert none.returncode != 0 and "grader=gpt-5-mini" in none.stderr and "benchmark.grading=rules" in none.stderr
    auto = subprocess.run([sys.executable, "-m", "ehrbench", *common], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert auto.returncode != 0 and "gpt-5-mini" in auto.stderr and "OPENAI_API_KEY" in auto.stderr


def test_the_contract_s_opt_ins_are_recorded_and_bad_values_named():
    import yaml

    from ehrbench.benchmarks.physassist.benchmark import PhysAssistBenchmark
    from ehrbench.llm.base import ConfigurationError

    conf = yaml.safe_load((ROOT / "conf" / "benchmark" / "physassist.yaml").read_text())
    original = PhysAssistBenchmark(conf)
    assert original.contract() == ("original", []) and original.call_cap() is None
    assert not original.write_validation() and original.default_grader == "gpt-5-mini"
    ehrbench = PhysAssistBenchmark({**conf, "contract": "ehrbench"})
    assert ehrbench.call_cap() == 16 and ehrbench.write_validation()
    assert [d.split(" ")[0] for d in ehrbench.contract()[1]] == ["write_validation=true", "call_cap=16",
                                                                 "patient_replay=topic"]
    assert PhysAssistBenchmark({**conf, "task_set": "medagent"}).default_grader is None
    for field, value, says in (("contract", "paper", "original .* or ehrbench"), ("grading", "judge2", "rules"),
                               ("patient_replay", "live", "original .* topic"),
                               ("call_cap", 0, "integer >= 1"), ("write_validation", "yes", "true, false or null")):
        with pytest.raises(ConfigurationError, match=rf"benchmark.{field}="):
            PhysAssistBenchmark({**conf, field: value}).check()
    confs = {m: yaml.safe_load((ROOT / "conf" / "model" / f"{m}.yaml").read_text())
             for m in ("gpt-4o", "gpt-5-mini", "gemini-2.5-flash", "deepseek-chat", "deepseek-reasoner")}
    agent = {m: original.sampling("agent", c) for m, c in confs.items()}    # model_configs.yaml's entries
    assert (agent["gpt-4o"].temperature, agent["gpt-4o"].max_tokens, agent["gpt-4o"].reasoning_effort) == \
        (0.2, 1024, None)
    assert (agent["gpt-5-mini"].temperature, agent["gpt-5-mini"].max_tokens, agent["gpt-5-mini"].reasoning_effort) \
        == (None, 1024, "minimal")                                     # its Responses entry: 1,024, effort minimal
    assert agent["gemini-2.5-flash"].max_tokens == 10_240                # a thinking entry
    assert agent["deepseek-chat"].extra_body == {"thinking": {"type": "disabled"}}
    assert (agent["deepseek-reasoner"].max_tokens, agent["deepseek-reasoner"].extra_body) == \
        (10_240, {"thinking": {"type": "enabled"}})
    assert all(a.seed is None for a in agent.values())                  # the original seeds no call


def test_the_loader_reads_the_original_format_and_names_what_is_wrong(small, tmp_path):
    entry = json.loads((small["tasks"] / "med_safety.jsonl").read_text().splitlines()[0])
    original = {k: v for k, v in entry.items() if k not in ("rubric_checks", "patient_answers")}
    (tmp_path / "med_safety.jsonl").write_text(json.dumps(original) + "\n")
    [s] = load_sessions(tmp_path, ["med_safety"])
    assert all(c is None for t in s.turns for c in t.checks) and s.turns[0].items == tuple(entry["rubrics"][0])
    patient_calls = [a for step in original["answer_list"] for a in step if a["action"]["name"].startswith("patient.")]
    assert len(s.patient_answers) == len(patient_calls)              # the gold interview calls' stored variants
    cases = {
        "rubrics": (lambda e: e.update(rubrics=e["rubrics"][:3]), "field `rubrics` has 3 entries for 4 turns"),
        "gold": (lambda e: e["answer_list"][2].pop(), "answer_list[2]: no prepare_to_answer action"),
        "scenario": (lambda e: e.update(clinical_scenario="icu"), "field `clinical_scenario` is 'icu'"),
        "tier": (lambda e: e.update(difficulty_level=5), "field `difficulty_level` is 5"),
        "subject": (lambda e: e.pop("subject_id"), "field `subject_id` is missing"),
    }
    for name, (spoil, message) in cases.items():
        bad = json.loads(json.dumps(original))
        spoil(bad)
        (tmp_path / "med_safety.jsonl").write_text(json.dumps(bad) + "\n")
        with pytest.raises(TaskFileError) as e:
            load_sessions(tmp_path, ["med_safety"])
        assert f"med_safety.jsonl: session {original['id']!r}" in str(e.value) and message in str(e.value), name
    (tmp_path / "med_safety.jsonl").write_text((json.dumps(original) + "\n") * 2)
    with pytest.raises(TaskFileError, match="appears twice"):
        load_sessions(tmp_path, ["med_safety"])


class _Scripted:
    """A model that answers from a list and keeps what it was asked."""

    def __init__(self, *responses):
        self.responses, self.requests = list(responses), []

    async def complete(self, request):
        self.requests.append(request)
        return self.responses.pop(0)


def test_the_agent_runs_parallel_calls_answers_after_prepare_and_is_nudged_when_rounds_run_out(small):
    s = small["sessions"][0]
    call = lambda name, i: ToolCall(name, {"subject_id": s.subject_id}, f"c{i}")   # noqa: E731
    model = _Scripted(ChatResponse("Potassium is 4.1.", [call("Observation__search", 1), call("prepare_to_answer", 2)]))
    agent = PhysAssistAgent(model, s, prompts())
    history = [Message("user", s.turns[0].question)]
    first = run(agent.act(history))
    assert first.tool_call.name == "Observation__search" and first.content is None
    history += [first, Message("tool", "(1 results)", tool_call_id="c1")]
    second = run(agent.act(history))
    assert second.tool_call.name == "prepare_to_answer" and len(model.requests) == 1     # one round, two calls
    history += [second, Message("tool", "{}", tool_call_id="c2")]
    assert run(agent.act(history)).content == "Potassium is 4.1."
    opening = model.requests[0].messages[:2]
    assert opening[0].content.startswith(f"[Environment Info]\n{s.env_info}\nsubject_id: {s.subject_id}")
    assert len(model.requests[0].tools) == 18 and {"Observation__search", "patient__get_pain_assessment"} <= {
        t["name"] for t in model.requests[0].tools}
    assert model.requests[0].parallel_tool_calls is None and model.requests[0].tool_choice == "auto"   # as sent there
    # a new turn: 8 rounds of calls, then the nudge (the tools sent, none callable), which an empty reply repeats
    # up to 3 times; three empty replies leave the answer empty, as eval_runner does
    model = _Scripted(*[ChatResponse(None, [call("Observation__search", 10 + i)]) for i in range(8)],
                      *[ChatResponse("")] * NUDGES)
    agent = PhysAssistAgent(model, s, prompts())
    history = [Message("user", s.turns[0].question)]
    for i in range(8):
        step = run(agent.act(history))
        history += [step, Message("tool", "(0 results)", tool_call_id=step.tool_call.id)]
    assert run(agent.act(history)).content == ""
    nudges = model.requests[8:]
    assert len(nudges) == NUDGES and all(len(r.tools) == 18 and r.tool_choice == "none" and
                                         r.messages[-1].content == prompts()["nudge"] for r in nudges)


def test_a_refused_round_is_nudged_and_a_refused_nudge_is_the_original_s_error_answer(small):
    """eval_runner: an API error in a round breaks to the nudge; a nudge that raises gives "[Error generating final
    answer]", judged like any answer; an outage (not the agent's request) re-runs the trial instead."""
    from ehrbench.llm.base import ModelTurnError
    from ehrbench.trial import InfrastructureError

    s = small["sessions"][0]

    class Refusing(_Scripted):
        async def complete(self, request):
            self.requests.append(request)
            reply = self.responses.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return reply
    refused = InfrastructureError("HTTP 400: context too long", agent_caused=True)
    model = Refusing(ModelTurnError("cut off"), ChatResponse("It is 4.1."))
    assert run(PhysAssistAgent(model, s, prompts()).act([Message("user", "q")])).content == "It is 4.1."
    assert model.requests[1].tool_choice == "none"
    model = Refusing(refused, refused)
    assert run(PhysAssistAgent(model, s, prompts()).act([Message("user", "q")])).content == \
        "[Error generating final answer]"
    outage = Refusing(InfrastructureError("HTTP 503 after 8 tries"))
    with pytest.raises(InfrastructureError):
        run(PhysAssistAgent(outage, s, prompts()).act([Message("user", "q")]))
    # any 400 is the agent's request refused, as the size is: nudged, then the error answer
    bad = InfrastructureError("HTTP 400: invalid prompt", status=400)
    model = Refusing(bad, bad)
    assert run(PhysAssistAgent(model, s, prompts()).act([Message("user", "q")])).content == \
        "[Error generating final answer]"
    # a nudge cut off or blocked before any text is an empty answer: asked again, 3 times, then the answer is empty
    model = Refusing(ModelTurnError("cut off"), *[ModelTurnError("blocked", kind="blocked")] * 3)
    assert run(PhysAssistAgent(model, s, prompts()).act([Message("user", "q")])).content == ""
    assert len(model.requests) == 1 + 3
    # an empty answer stays out of the conversation the next turn sends, as the original never appends it
    model = Refusing(ChatResponse("Next."))
    run(PhysAssistAgent(model, s, prompts()).act([Message("user", "q1"), Message("assistant", ""),
                                                  Message("user", "q2")]))
    assert [m.content for m in model.requests[0].messages[2:]] == ["q1", "q2"]


def _main(args, timeout=600):
    return subprocess.run([sys.executable, "-m", "ehrbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def _world_args(small, tmp_path):
    return [f"benchmark.task_dir={small['tasks']}", f"data.scale={SCALE}", "data.dictionary=used",
            f"data.root={small['root'] / 'gen'}", f"hydra.run.dir={tmp_path / 'out'}"]


def test_the_reference_scores_mrs_100_with_the_rule_grader_through_ray_and_mlflow(small, ray_cluster, tmp_path):
    store = mlflow_store(tmp_path / "mlruns")
    out = _main(["benchmark=physassist", "trials=2", "benchmark.record_shards=2", f"tracking.root={store}",
                 f"runtime.address={ray_cluster.address}", *_world_args(small, tmp_path)])
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["physassist"], output_format="list")
    m = run_.data.metrics
    n = len(small["sessions"])
    assert m["rule_mRS"] == 100.0 and m["rule_pass_session_75"] == 100.0 and m["rule_pass_turn_60"] == 100.0
    assert "mRS" not in m and "pass_session_75" not in m          # no judge decided: never the paper's names
    # the gold calls made: no tool missed or extra, every argument; the authors' rule checker passes all but the
    # turns whose gold calls two tools (it checks the first call's arguments against each gold tool's schema)
    assert m["FPTR_mean"] == m["MTR_mean"] == 0.0 and m["AC_mean"] == m["ER_mean"] == 100.0
    assert 50.0 <= m["rule_checker_turn_accuracy"] <= 100.0
    assert "IIRS_mean" not in m and "AA_mean" not in m             # those need the judge
    assert m["sessions_scored"] == 2 * n and all(m[f"L{t}/rule_mRS"] == 100.0 for t in (1, 2, 3))
    assert all(m[f"{sc}/rule_mRS"] == 100.0 for sc in SCENARIOS) and m["turn_score/WU"] == 100.0
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_.info.run_id)}
    assert {"score_by_turn_type.png", "pass_session_by_threshold.png"} <= artifacts
    traces = mlflow.search_traces(locations=[run_.info.experiment_id], return_type="list")
    rules = [a for tr in traces for a in tr.info.assessments if a.name.endswith("/rule")]
    assert rules and {a.source.source_type for a in rules} == {"CODE"} and {a.value for a in rules} == {1}


def _task_dir_of(small, session, tmp_path) -> Path:
    """A task folder holding `session` alone (its scenario's file with that one entry, and the manifest)."""
    entry = next(json.loads(line) for line in (small["tasks"] / f"{session.scenario}.jsonl").read_text().splitlines()
                 if json.loads(line)["id"] == session.key)
    one = tmp_path / "tasks"
    one.mkdir()
    (one / f"{session.scenario}.jsonl").write_text(json.dumps(entry) + "\n")
    (one / "manifest.json").write_text((small["tasks"] / "manifest.json").read_text())
    return one


def test_the_real_agent_the_original_s_judge_and_the_live_patient_through_the_fake_server(small, ray_cluster,
                                                                                          tmp_path):
    """`model=gpt-4o` (the OpenAI client) answers each turn after one call; the patient is `gemini-2.0-flash` (in a
    UserSimulator actor, reached by the interview tool through it), the
    judge `gemini-2.5-flash` (the google-genai client); one unreadable verdict drops its turn from the scores."""
    from .fake_llm_server import FakeLLMServer, Reply

    session = next(s for s in small["sessions"] if "patient" in [t.tool_source for t in s.turns])

    def interviews(turn):
        return any(a["name"].startswith("patient.") for a in turn.gold_actions)
    one = _task_dir_of(small, session, tmp_path)
    agent = []
    for t in session.turns:
        first = t.gold_actions[0]
        args = {"subject_id": session.subject_id, "session_id": session.session_id, **first["arguments"]} \
            if first["name"].startswith("patient.") else first["arguments"]
        agent += [Reply(tool=first["name"].replace(".", "__"), args=args), Reply(text=t.gold_answer)]
    verdicts = [Reply(text=json.dumps({"scores": [1] * len(t.items), "reasoning": ["ok"] * len(t.items)}))
                for t in session.turns]
    verdicts[1] = Reply(text="I think it is fine.")                      # unreadable: turn 1 leaves the scores
    verdicts[2] = Reply(text=json.dumps({"scores": [0] + [1] * (len(session.turns[2].items) - 1)}))
    server = FakeLLMServer().start()
    try:
        server.push(*agent, model="gpt-4o")
        server.push(Reply(text="Well, doctor, it has been hard, as I said."), model="gemini-2.0-flash")
        judge_replies = []       # per turn: the rubric verdict, AA, AID on an AE turn, PAQ on an interview turn
        for t, verdict in zip(session.turns, verdicts):
            judge_replies += [verdict, Reply(text=json.dumps({"AA": 0.8}))] + \
                ([Reply(text=json.dumps({"AID": 1.0}))] if t.subtype in ("EA", "AE") else []) + \
                ([Reply(text=json.dumps({"F": 1, "C": 0.5, "R": 1}))] if interviews(t) else [])
        server.push(*judge_replies, model="gemini-2.5-flash")
        store = mlflow_store(tmp_path / "mlruns")
        out = _main(["benchmark=physassist", "benchmark.scenarios=[" + session.scenario + "]", "trials=1",
                     "model=gpt-4o", f"model.base_url={server.url}/v1", "user=gemini-2.0-flash",
                     "benchmark.patient_replay=topic",
                     f"+user.model.base_url={server.url}", "grader=gemini-2.5-flash",
                     f"+grader.model.base_url={server.url}", "validator=none", "runtime.user_simulators=1",
                     f"tracking.root={store}",
                     f"runtime.address={ray_cluster.address}", *_world_args(small, tmp_path)[1:],
                     f"benchmark.task_dir={one}"])
        asked = server.requests_for("gpt-4o")
        patient = server.requests_for("gemini-2.0-flash")
        judged = server.requests_for("gemini-2.5-flash")
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    aid = sum(t.subtype in ("EA", "AE") for t in session.turns) + sum(map(interviews, session.turns))
    assert len(asked) == 8 and len(patient) == 1 and len(judged) == 8 + aid
    first = asked[0].body
    assert first["messages"][0]["content"].startswith("You are a clinical decision support agent")
    assert first["messages"][1]["content"].startswith("[Environment Info]\nsession_id: ")
    assert len(first["tools"]) == 18 and first["temperature"] == 0.2 and first["tool_choice"] == "auto"
    assert "parallel_tool_calls" not in first and "seed" not in first      # never sent there (several calls allowed)
    assert first["max_tokens"] == 1024 and "max_completion_tokens" not in first   # gpt-4o's entry: 1,024
    system = patient[0].body["systemInstruction"]["parts"][0]["text"]
    assert system.startswith("You are simulating a patient in a clinical interview with a doctor.")
    assert f"Health literacy: {session.persona['health_literacy']}" in system
    tool_results = [m["content"] for m in asked[-1].body["messages"] if m["role"] == "tool"]
    assert "Well, doctor, it has been hard, as I said." in tool_results          # the live patient's words
    rubric = [r for r in judged if not r.body["systemInstruction"]["parts"][0]["text"].startswith(
        "You are a clinical NLP evaluator")]                                     # the IIRS judge's calls aside
    texts = [r.body["contents"][-1]["parts"][0]["text"] for r in rubric]
    systems = [r.body["systemInstruction"]["parts"][0]["text"] for r in rubric]
    for t, text, system in zip(session.turns, texts, systems):
        assert text.startswith(f"Clinical question: {t.question}")
        assert system.startswith("You are a parameter-level evaluator" if t.kind == "WU" else
                                 "You are a clinical QA evaluator for an EHR benchmark.")
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["physassist"], output_format="list")
    m = run_.data.metrics
    third = (len(session.turns[2].items) - 1) / len(session.turns[2].items)
    assert m["mRS"] == pytest.approx(100 * (1 + third + 1) / 3)        # turn 1 dropped, turn 2 one item short
    assert m["calls/grader"] == 8 + aid and m["calls/user"] == 1 and m["calls/agent"] == 8
    assert m["AA_mean"] == pytest.approx(80.0) and m["turn_accuracy"] == 100.0 and m["session_accuracy"] == 100.0
    assert 0 < m["IIRS_mean"] <= 80.0 and "FPTR_mean" in m and "MTR_mean" in m
    assert m["PAQ_mean"] == pytest.approx(100 * 2.5 / 3, abs=0.01)
    assert m["cost_usd/grader"] > 0 and m["input_tokens/grader"] == 10 * (8 + aid)   # the judge metered, priced
    assert m["judge_rule_agreement"] < 100.0
    [trace] = mlflow.search_traces(locations=[run_.info.experiment_id], return_type="list")
    judge = [a for a in trace.info.assessments if a.name.endswith("/judge")]
    assert judge and {a.source.source_type for a in judge} == {"LLM_JUDGE"}
    assert not any(a.name.startswith("T1/") and a.name.endswith("/judge") for a in judge)


def test_each_role_is_sent_its_originals_parameters_by_gpt_5_mini_and_gemini_2_5_flash(small, ray_cluster,
                                                                                     tmp_path):
    """`benchmark=physassist model=<m>`, m playing the agent, the live patient and the judges: each sends what the
    original's runner, judges and patient client send that model (`wire.EXPECTED`), the IIRS judge at temperature
    0 and the write-turn judge with 2,000 tokens (`wire.CALLS`)."""
    from .fake_llm_server import Reply
    from .wire import role_by, run_with_every_role_on

    def asks_patient(t):
        return any(a["name"].startswith("patient.") for a in t.gold_actions)

    session = next(s for s in small["sessions"]
                   if any(map(asks_patient, s.turns)) and "WU" in [t.kind for t in s.turns])
    one = _task_dir_of(small, session, tmp_path)
    agent = []                          # each turn: its first gold call (the patient's if it has one), then the answer
    for t in session.turns:
        first = next((a for a in t.gold_actions if a["name"].startswith("patient.")), t.gold_actions[0])
        args = {"subject_id": session.subject_id, "session_id": session.session_id, **first["arguments"]} \
            if first["name"].startswith("patient.") else first["arguments"]
        agent += [Reply(tool=first["name"].replace(".", "__"), args=args), Reply(text=t.gold_answer)]
    run_with_every_role_on(
        "physassist", ["benchmark=physassist", "benchmark.scenarios=[" + session.scenario + "]", "trials=1",
                       "user=gemini-2.0-flash", "benchmark.patient_replay=topic", "grader=gemini-2.5-flash",
                       "validator=none", "runtime.user_simulators=1", f"runtime.address={ray_cluster.address}",
                       f"tracking.root={mlflow_store(tmp_path / 'mlruns')}", *_world_args(small, tmp_path)[1:],
                       f"benchmark.task_dir={one}"],
        role_by(("user", "You are simulating a patient"), ("grader:iirs", "You are a clinical NLP evaluator"),
                ("grader:write", "a parameter-level evaluator for an EHR write action"), otherwise="grader"),
        tmp_path, roles=("user", "grader"), calls=("grader:iirs", "grader:write"),
        scripts={"agent": agent},
        defaults={"user": Reply(text="Well, doctor, it has been hard."),
                  **{judge: Reply(text="{}") for judge in ("grader", "grader:iirs", "grader:write")}})


# ---- the self-check: the reference checks what it reads; mutants with scores computed on paper ------------------

def _session_trial(small, session, agent=None, **options):
    """One session through the benchmark's own tools, people and scorer, in this process (rule grader, the
    original contract unless `options` say otherwise)."""
    import yaml
    from dataclasses import replace

    from ehrbench.benchmark import Hosts, TrialSettings
    from ehrbench.benchmarks.physassist.benchmark import PhysAssistBenchmark
    from ehrbench.llm.usage import UsageMeter
    from ehrbench.trial import Limits, run_trial

    conf = {**yaml.safe_load((ROOT / "conf" / "benchmark" / "physassist.yaml").read_text()), **options}
    bench = PhysAssistBenchmark(conf)
    session = replace(session, folder=str(small["folder"]))
    settings = TrialSettings(benchmark="physassist", benchmark_options=conf, agent="reference", user="scripted")
    meter = UsageMeter()
    episode = bench.episode(session, 0, Hosts({}, None), settings, meter, 0)
    people = bench.user(session, settings, meter, 0, [])
    episode.tools.attach_user(people)
    return run(run_trial(session.key, 0, agent or episode.agent, people, episode.tools, episode.score,
                         Limits(max_steps=400)))


def test_the_reference_answers_only_when_every_live_result_is_the_stored_one(small):
    """The check can fail: a stored bundle changed in the session file makes the reference say so instead of the
    gold answer, and the rule grader fails that turn; the untouched session scores 1 on every turn."""
    import copy
    from dataclasses import replace

    s = next(x for x in small["sessions"] if any(a["name"].endswith(".search") for a in x.turns[0].gold_actions))
    record = _session_trial(small, s)
    assert [record.score_parts[f"T{i}/r"] for i in range(4)] == [1.0] * 4
    raw = copy.deepcopy(s.raw)
    step = next(a for a in raw["answer_list"][0] if a["action"]["name"].endswith(".search"))
    step["observation"] = {"resourceType": "Bundle", "type": "searchset", "total": 0, "entry": []}
    record = _session_trial(small, replace(s, raw=raw))
    answers = [m["content"] for m in record.messages if m["role"] == "assistant" and not m.get("tool_call")]
    assert answers[0].startswith("The tools disagree with the session file: ")
    assert record.score_parts["T0/r"] < 1.0 and record.score_parts["T1/r"] == 1.0


def test_the_shipped_sessions_every_gold_result_as_stored_through_ray_and_mlflow(ray_cluster, tmp_path, shared_world):
    """The project's 108 sessions on the world they were written from: the reference checks every gold action's
    live result against the stored one before answering, so rule_mRS 100 on all of them says they all match."""
    store = mlflow_store(tmp_path / "mlruns")
    out = _main(["benchmark=physassist", "trials=1", "data.dictionary=used", f"data.root={shared_world / 'gen'}",
                 f"tracking.root={store}", f"runtime.address={ray_cluster.address}",
                 f"hydra.run.dir={tmp_path / 'out'}"])
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["physassist"], output_format="list")
    m = run_.data.metrics
    assert m["sessions_scored"] == 108 and m["rule_mRS"] == 100.0 and m["rule_pass_session_75"] == 100.0


def test_the_shipped_sessions_gather_from_several_sources_as_the_original_s():
    """Data Gathering turns in the original use two or more sources, mixed record + patient among them, and its
    L3 sessions require a mixed turn: half the shipped DG turns make two calls, record and patient; every tier-3
    session with a DG turn has a mixed one; the gold answer of a mixed turn states both sources."""
    root = ROOT / "data" / "tasks" / "physassist"
    sessions = load_sessions(root, SCENARIOS)
    dg = [(s, t) for s in sessions for t in s.turns if t.kind == "DG"]
    mixed = [(s, t) for s, t in dg if t.tool_source == "mixed"]
    assert len(mixed) >= 0.4 * len(dg)
    for s, t in mixed:
        names = [a["name"] for a in t.gold_actions if a["name"] != "prepare_to_answer"]
        assert len(names) == 2 and names[1].startswith("patient.") and not names[0].startswith("patient.")
        assert t.gold_answer.startswith("The record has") and "The patient reports: " in t.gold_answer
    for s in sessions:
        if s.tier == 3 and any(t.kind == "DG" for t in s.turns):
            assert any(t.tool_source == "mixed" for t in s.turns), s.key


def test_the_rule_grader_passes_the_gold_of_every_shipped_turn():
    """Each shipped turn's gold answer and gold writes pass every item the rule grader can read (a gold answer that
    recommends what its own safety item forbids, say, would fail here)."""
    from ehrbench.benchmarks.physassist.scoring import TurnWork

    for s in load_sessions(ROOT / "data" / "tasks" / "physassist", SCENARIOS):
        for t in s.turns:
            calls = [(a["name"], a["arguments"]) for a in t.gold_actions]
            work = TurnWork(t.question, t.gold_answer, calls, [c for c in calls if c[0].endswith(".create")])
            failed = [(item, why) for item, (ok, why) in zip(t.items, rule_grade(t, work)) if ok is False]
            assert not failed, (s.key, t.index, failed)


def test_the_shipped_sessions_name_each_turn_s_antecedent_for_aid():
    """The original's AID reads the gold antecedent of an EA/AE turn from `dep_graph` (the previous turn's first
    entity): every shipped AE turn has one, and it is what the previous turn was about."""
    from ehrbench.benchmarks.physassist.iirs import antecedent

    turns = [(s, t) for s in load_sessions(ROOT / "data" / "tasks" / "physassist", SCENARIOS) for t in s.turns
             if t.subtype == "AE"]
    assert turns
    for s, t in turns:
        before = s.turns[t.index - 1]
        found = antecedent(s.raw, t.index)
        assert found and (found.lower() in (before.question + before.explicit + before.gold_answer).lower()
                          or found == "disposition"), (s.key, found)


def test_cha2ds2_vasc_turns_score_what_the_stored_results_give_by_the_published_rule():
    """Formula-based reasoning (the original's CHA2DS2-VASc prompts), recomputed here from the Patient.read and
    Condition.search results the session file stores, by the published rule (Lip et al. 2010): CHF 1, hypertension
    1, age >= 75 2 (65-74 1), diabetes 1, stroke/TIA 2, vascular disease 1, female 1; anticoagulation indicated
    from 2 (men) or 3 (women)."""
    checked = 0
    for s in load_sessions(ROOT / "data" / "tasks" / "physassist", SCENARIOS):
        for t in s.turns:
            if "CHA2DS2-VASc" not in t.explicit:
                continue
            steps = s.raw["answer_list"][t.index]
            patient = next(x["observation"] for x in steps if x["action"]["name"] == "Patient.read")
            bundle = next(x["observation"] for x in steps if x["action"]["name"] == "Condition.search")
            codes = {c["code"] for e in bundle["entry"] for c in e["resource"]["code"]["coding"][:1]}
            assert any(c.startswith(("I48", "42731")) for c in codes)
            age, female = int(patient["_anchor_age"]), patient["gender"] == "female"
            chf = any(c.startswith(("I50", "428")) for c in codes)
            htn = any(c.startswith(p) for c in codes for p in ("I10", "I11", "I12", "I13", "I15", "401", "402",
                                                                  "403", "404", "405"))
            dm = any(c.startswith(("E10", "E11", "E13", "250")) for c in codes)
            stroke = any(c.startswith(("I63", "I64", "G45", "434", "435", "436")) for c in codes)
            vascular = any(c.startswith(("I21", "I22", "I252", "I70", "410", "412", "440")) for c in codes)
            score = chf + htn + dm + 2 * stroke + vascular + (2 if age >= 75 else 1 if age >= 65 else 0) + female
            assert t.gold_answer.startswith(f"The CHA2DS2-VASc score is {score} "), (s.key, t.gold_answer)
            assert ("anticoagulation is indicated" in t.gold_answer) == (score >= (3 if female else 2))
            checked += 1
    assert checked >= 5


def test_creatinine_clearance_turns_follow_from_the_stored_results_by_cockcroft_gault():
    """Formula-based reasoning (the original's L2 option B): the clearance recomputed here from the Patient.read,
    weight and creatinine results the session file stores, (140 - age) x kg / (72 x creatinine), x 0.85 for women;
    the `near` check takes an agent's figure within 5% (or 1) and fails one further off."""
    from ehrbench.benchmarks.physassist.scoring import decide

    checked = 0
    for s in load_sessions(ROOT / "data" / "tasks" / "physassist", SCENARIOS):
        for t in s.turns:
            if "Cockcroft-Gault" not in t.explicit:
                continue
            steps = {x["action"]["name"] + str(x["action"]["arguments"].get("category", "")): x["observation"]
                     for x in s.raw["answer_list"][t.index]}
            patient = steps["Patient.read"]
            weight = steps["Observation.searchvital-signs"]["entry"][0]["resource"]
            kg = weight["valueQuantity"]["value"] if "valueQuantity" in weight else \
                float(weight["valueString"]) * 0.45359237
            creatinine = next(e["resource"]["valueQuantity"]["value"] for e in steps["Observation.searchlaboratory"]
                              ["entry"] if e["resource"]["code"]["text"] == "Creatinine")       # newest first
            crcl = (140 - int(patient["_anchor_age"])) * kg / (72 * creatinine) * \
                (0.85 if patient["gender"] == "female" else 1)
            assert f"about {round(crcl)} mL/min" in t.gold_answer, (s.key, crcl, t.gold_answer)
            check = t.checks[0]
            assert check["kind"] == "near"
            ok = lambda answer: decide(check, TurnWork(t.question, answer, [], []))[0]      # noqa: E731
            assert ok(f"CrCl is {crcl * 1.03:.0f} mL/min") and not ok(f"CrCl is {crcl * 1.15 + 2:.0f} mL/min")
            checked += 1
    assert checked >= 10


def _shipped_world(shared_world):
    """The world the shipped sessions were written from (their manifest), its per-patient files."""
    world = json.loads((ROOT / "data" / "tasks" / "physassist" / "manifest.json").read_text())["world"]
    source = build_database("mimic_iv", WorldSpec(seed=world["seed"], size=WorldSize(scale=world["scale"]),
                                                  dictionary="used"), shared_world / "gen")
    return split_patients(source, source.parent)


def test_the_shipped_patients_answers_agree_with_their_record_and_vary(shared_world):
    """What each shipped patient says is read back against the record by `contradictions` (the original's PHM
    verifier, for answers) and nothing is refuted; the answers vary (habits, onsets, pain scores, home lives,
    reasons for stopping a drug) instead of one template; and the verifier catches an answer the record refutes:
    an unordered drug, a wrong stop date, a home life against the marital status, another complaint, pain put down
    to something else, a never-smoker with COPD. Each session also qualifies for its tier by the original's
    per-scenario rules (`Context.qualifies`)."""
    import random

    from ehrbench.benchmarks.physassist.adapter import PatientRecord
    from ehrbench.benchmarks.physassist.patient_model import contradictions

    folder = _shipped_world(shared_world)
    sessions = load_sessions(ROOT / "data" / "tasks" / "physassist", SCENARIOS)
    said = {tool: set() for tool in ("social", "symptom", "pain", "stopped")}
    found_copd = None
    for s in sessions:
        record = PatientRecord(folder / f"patient_{s.subject_id}.db", folder / "reference.db")
        [admission] = record.rows("SELECT * FROM admissions WHERE hadm_id = ?", (s.hadm_id,))
        assert contradictions(record, admission, s.current_date, s.patient_answers) == [], s.key
        assert authoring.Context(record, admission, random.Random(0)).qualifies(s.raw["clinical_scenario"], s.tier)
        for a in s.patient_answers:
            high = a["responses"]["high"]
            if a["tool"] == "patient.get_social_history":
                said["social"].add(high)
                if "copd" in high.lower() or record.rows("SELECT 1 FROM discharge WHERE hadm_id = ? AND text LIKE "
                                                         "'%Past Medical History:%Copd%'", (s.hadm_id,)):
                    found_copd = (record, admission, s, a)
            elif a["tool"] == "patient.get_symptom_history":
                said["symptom"].add(re.sub(r"^.*?\. ", "", high).split(".")[0])          # the onset sentence
            elif a["tool"] == "patient.get_pain_assessment":
                said["pain"].add(re.search(r"(\d+) out of 10", high).group(1))
            elif "stopped" in high or "never started" in high:
                said["stopped"].add(high.split("because ")[-1])
    assert len(said["social"]) >= 8 and len(said["symptom"]) >= 6 and len(said["pain"]) >= 5, \
        {k: len(v) for k, v in said.items()}
    assert len(said["stopped"]) >= 3
    assert any("never smoked" in x for x in said["social"]) and any("still smoke" in x for x in said["social"])

    s = next(x for x in sessions if any(a["tool"] == "patient.get_pain_assessment" for a in x.patient_answers))
    record = PatientRecord(folder / f"patient_{s.subject_id}.db", folder / "reference.db")
    [admission] = record.rows("SELECT * FROM admissions WHERE hadm_id = ?", (s.hadm_id,))
    married = str(admission["marital_status"]).upper() == "MARRIED"

    def refuted(tool, text, topic=""):
        reply = {"tool": tool, "topic": topic, "withheld": False, "responses": {"high": text}}
        return contradictions(record, admission, s.current_date, [reply])

    assert refuted("patient.get_medication_adherence", "Yes, I take the Warfarin every day.", "warfarin")
    assert refuted("patient.get_social_history", "I live alone." if married else "I live with my spouse.")
    assert not refuted("patient.get_social_history", "I live with my spouse." if married else "I live alone.")
    assert refuted("patient.get_symptom_history", "My main problem was a toothache. It started last night.")
    assert refuted("patient.get_pain_assessment", "My pain is about a 5 out of 10. It's from the toothache pain.")
    assert refuted("patient.get_pain_assessment", "My pain is about a 12 out of 10.")
    ordered = record.rows("SELECT drug FROM prescriptions WHERE hadm_id = ? LIMIT 1", (s.hadm_id,))[0]["drug"]
    assert refuted("patient.get_medication_adherence", f"I stopped taking the {ordered} about 400 days ago.",
                   ordered.lower())
    assert found_copd, "the shipped set needs a patient with COPD in the history"
    record, admission, s, social = found_copd
    assert contradictions(record, admission, s.current_date, [{**social, "responses": {"high": "I've never smoked."}}])


def test_mutants_score_what_the_rule_checks_say_on_paper(small):
    """Scripted models with one defect each, through the real agent loop, tools, patient and rule grader. Expected
    per turn from the check kinds alone (an answer that says nothing passes only `absent` items, and `write_absent`
    ones when it writes nothing; a silent write turn likewise): mRS and Pass@Session follow by their formulas."""
    from ehrbench.benchmarks.physassist.benchmark import session_report
    from ehrbench.llm.base import ChatResponse
    from ehrbench.trial import InfrastructureError

    def silent_score(turn):             # no text, no write call: what passes on paper
        kinds = [(c or {}).get("kind") for c in turn.checks]
        return sum(k == "absent" or (k == "write_absent") for k in kinds) / len(kinds)

    class Model:
        def __init__(self, replies):
            self.replies = list(replies)

        async def complete(self, request):
            reply = self.replies.pop(0) if self.replies else ChatResponse("")
            if isinstance(reply, Exception):
                raise reply
            return reply

    refused = InfrastructureError("HTTP 400: context too long", agent_caused=True)
    checked = [x for x in small["sessions"] if all(c for t in x.turns for c in t.checks)]
    writes = [x for x in checked if x.turns[3].kind == "WU"][:2]
    warned = [x for x in checked if x not in writes and any((c or {}).get("kind") == "absent"
                                                            for t in x.turns for c in t.checks)][:2]
    sessions = writes + warned
    assert len(sessions) == 4 and any(0 < silent_score(t) for x in sessions for t in x.turns)
    mutants = {   # name: (model replies for the whole session, expected r per turn)
        "silent (three empty nudges a turn)": (lambda s: [ChatResponse("")] * 16,
                                               lambda s: [silent_score(t) for t in s.turns]),
        "every request refused": (lambda s: [refused] * 8,
                                  lambda s: [silent_score(t) for t in s.turns]),
        "the gold answers, never a call": (lambda s: [ChatResponse(t.gold_answer) for t in s.turns],
                                           lambda s: [1.0 if t.kind != "WU" else silent_score(t) for t in s.turns]),
    }
    for name, (replies, expected) in mutants.items():
        records, wanted = [], []
        for s in sessions:
            agent = PhysAssistAgent(Model(replies(s)), s, prompts())
            record = _session_trial(small, s, agent)
            assert record.termination == "user_stop", (name, record.termination)
            got = [record.score_parts[f"T{i}/r"] for i in range(4)]
            assert got == pytest.approx(expected(s)), (name, s.key)
            records.append(record)
            wanted.append(expected(s))
        report = session_report(records, sessions, 1, small["root"] / "mutants", False)
        mrs = 100 * sum(sum(w) / len(w) for w in wanted) / len(wanted)
        at60 = 100 * sum(all(x >= 0.6 for x in w) for w in wanted) / len(wanted)
        assert report.metrics["rule_mRS"] == pytest.approx(mrs) and report.metrics["rule_pass_session_60"] == \
            pytest.approx(at60), name


# ---- the MedAgentBench-style set ----------------------------------------------------------------------------------

def _medagent(small):
    from ehrbench.benchmarks.physassist.medagent import load_medagent

    return load_medagent(small["tasks"] / "medagent.json")


def _bundle_of(text: str) -> dict:
    prefix = "Here is the response from the GET request:\n"
    assert text.startswith(prefix), text[:200]
    return json.loads(text[len(prefix):text.rindex(". Please call FINISH")])


def test_medagent_references_follow_from_what_the_gets_return(small):
    """An oracle apart from authoring: each value task's answer recomputed from the GET's Bundle (its 24-hour
    window, latest, mean), and nothing the GET returns lies after the task's now."""
    from datetime import datetime, timedelta

    from ehrbench.benchmarks.physassist.medagent import MedAgentTools

    tasks = _medagent(small)
    assert {t.category for t in tasks} == {f"task{i}" for i in range(1, 11)}
    records = InProcess(FhirRecords(small["folder"]))
    checked = 0
    for t in tasks:
        get = next((s for s in t.ref["steps"] if s.startswith("GET")), None)
        if get is None or t.category in ("task1", "task2"):
            continue
        entries = _bundle_of(run(MedAgentTools(records, t).call("GET", {"url": get[3:].strip()})))["entry"]
        values = [(e["resource"]["effectiveDateTime"], e["resource"]["valueQuantity"]["value"]) for e in entries]
        assert all(when <= t.now for when, _ in values)
        since = (datetime.fromisoformat(t.now[:19]) - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%S")
        recent = [v for v in values if v[0][:19] >= since]
        first_latest = lambda vs: next(v for v in vs if v[0] == max(w for w, _ in vs))  # noqa: E731 - refsol: the
        latest = first_latest(values) if values else None                              # first of equal times
        expected = {"task4": [first_latest(recent)[1]] if recent else [-1],
                    "task5": [first_latest(recent)[1]] if recent else [-1],
                    "task6": [sum(v for _, v in recent) / len(recent)] if recent else [-1],
                    "task7": [latest[1]] if latest else [-1], "task9": [latest[1]] if latest else [-1],
                    "task10": [latest[1], latest[0]] if latest else [-1]}[t.category]
        assert t.ref["answer"] == pytest.approx(expected) if t.category == "task6" else t.ref["answer"] == expected, t.key
        checked += 1
    assert checked >= 15
    from ehrbench.benchmarks.physassist.adapter import PatientRecord

    for t in [t for t in tasks if t.mrn][:12]:        # orders and diagnoses: nothing known after now either
        record = PatientRecord(small["folder"] / f"patient_{t.mrn}.db", small["folder"] / "reference.db")
        tools = MedAgentTools(records, t)
        for resource, column, table in (("MedicationRequest", "starttime", "prescriptions"),
                                        ("Condition", None, "diagnoses_icd")):
            shown = _bundle_of(run(tools.call("GET", {"url": f"{t.ref['steps'][0].split()[1].split('?')[0].rsplit('/', 1)[0]}"
                                                            f"/{resource}?patient={t.mrn}&_count=5000"})))["entry"]
            if column:
                known = record.rows(f"SELECT COUNT(*) AS n FROM {table} WHERE REPLACE({column}, ' ', 'T') <= ?",
                                    (t.now[:19],))[0]["n"]
            else:
                known = record.rows("SELECT COUNT(*) AS n FROM diagnoses_icd d JOIN admissions a USING (hadm_id) "
                                    "WHERE REPLACE(a.dischtime, ' ', 'T') <= ?", (t.now[:19],))[0]["n"]
            assert len(shown) == known, (t.key, resource)
    people = run(records.find_patients(None, None, None))
    for t in (t for t in tasks if t.category == "task1"):
        gender, age = re.search(r"of the (\w+) patient aged (\d+)\?", t.instruction).groups()
        match = [p["id"] for p in people if p["gender"] == gender and str(p["_anchor_age"]) == age]
        assert t.ref["answer"] == (match if match else ["Patient not found"])


def _record_of(task, steps):
    """A finished trial's messages for a list of replies (GET/POST answered as the server answers)."""
    from ehrbench.benchmarks.physassist.medagent import POST_OK, parse_action
    from ehrbench.trial import TrialRecord

    messages = [{"role": "user", "content": "prompt"}]
    for text in steps:
        m = parse_action(text)
        call = {"name": m.tool_call.name, "arguments": m.tool_call.arguments, "id": "c"} if m.tool_call else None
        messages.append({"role": "assistant", "content": m.content, "tool_call": call})
        if call:
            ok = call["name"] == "GET" or _parses(call["arguments"]["payload"])
            messages.append({"role": "tool", "content": POST_OK if call["name"] == "POST" and ok else "x"})
    return TrialRecord(task.key, 0, "answered", None, messages=messages)


def _parses(text):
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


def test_gets_are_paged_sorted_and_counted_as_hapi_answers_them(small):
    """Without `_count` a page of 20 with a `next` link, whose GET gives the rest; `_sort=-date` newest first; an
    Observation search without a code finds every Observation of the patient (HAPI's, not nothing)."""
    from ehrbench.benchmarks.physassist.medagent import API_BASE, MedAgentTools

    records = InProcess(FhirRecords(small["folder"]))
    task = max((t for t in _medagent(small) if t.mrn), key=lambda t: len(_bundle_of(run(MedAgentTools(
        records, t).call("GET", {"url": f"{API_BASE}Observation?patient={t.mrn}&_count=5000"})))["entry"]))
    tools = MedAgentTools(records, task)
    every = _bundle_of(run(tools.call("GET", {"url": f"{API_BASE}Observation?patient={task.mrn}&_count=5000"})))
    assert len(every["entry"]) > 20 and "link" not in every
    first = _bundle_of(run(tools.call("GET", {"url": f"{API_BASE}Observation?patient={task.mrn}"})))
    assert first["entry"] == every["entry"][:20] and first["total"] == len(every["entry"])
    rest = []
    page = first
    while "link" in page:
        page = _bundle_of(run(tools.call("GET", {"url": page["link"][0]["url"]})))
        rest += page["entry"]
    assert first["entry"] + rest == every["entry"]
    newest = _bundle_of(run(tools.call("GET", {"url": f"{API_BASE}Observation?patient={task.mrn}&_sort=-date"
                                                      "&_count=3"})))["entry"]
    dates = sorted((e["resource"]["effectiveDateTime"] for e in every["entry"]), reverse=True)
    assert [e["resource"]["effectiveDateTime"] for e in newest] == dates[:3]


def test_refsol_passes_the_reference_and_fails_each_kind_of_mistake(small):
    from ehrbench.benchmarks.physassist.refsol import grade

    tasks = _medagent(small)
    for t in tasks:
        steps = t.ref["steps"] + [f"FINISH({json.dumps(t.ref['answer'])})"]
        assert grade(t, _record_of(t, steps)) == (True, "passed"), t.key
    ordered = [t for t in tasks if any(s.startswith("POST") for s in t.ref["steps"])]
    assert {t.category for t in ordered} >= {"task3", "task8"}
    for t in ordered:
        finish = f"FINISH({json.dumps(t.ref['answer'])})"
        posts = [s for s in t.ref["steps"] if s.startswith("POST")]
        gets = [s for s in t.ref["steps"] if s.startswith("GET")]
        assert grade(t, _record_of(t, gets + [finish]))[0] is False                     # the order left out
        assert grade(t, _record_of(t, gets + posts + posts[:1] + [finish]))[0] is False  # one too many
        first, _, body = posts[0].partition("\n")
        payload = json.loads(body)
        payload["subject"] = {"reference": "Patient/1"}
        assert grade(t, _record_of(t, gets + [f"{first}\n{json.dumps(payload)}"] + posts[1:] + [finish]))[0] is False
        assert grade(t, _record_of(t, gets + [first + "\n{not json"] + posts[1:] + [finish]))[0] is False
        # fenced: the harness strips the fences and accepts it, the grader reads the raw reply and cannot
        fenced = [f"```\n{p}\n```" for p in posts]
        record = _record_of(t, gets + fenced + [finish])
        assert any(str(m.get("content", "")).startswith("POST request accepted") for m in record.messages)
        assert grade(t, record)[0] is False
        slash = [p.replace("\n", "/\n", 1) for p in posts]                 # {base}Observation/ is not the url
        assert grade(t, _record_of(t, gets + slash + [finish]))[0] is False
    task3 = next(t for t in tasks if t.category == "task3")
    first, _, body = next(s for s in task3.ref["steps"] if s.startswith("POST")).partition("\n")
    payload = json.loads(body)
    payload["category"][0]["text"] = "Vital Signs"           # extra keys beside the one coding: still its category
    assert grade(task3, _record_of(task3, [f"{first}\n{json.dumps(payload)}",
                                           f"FINISH({json.dumps(task3.ref['answer'])})"]))[0] is True
    low = next(t for t in tasks if t.category == "task9" and len(t.ref["steps"]) == 3)
    gets, mr, sr = low.ref["steps"]                            # a string dose: the original's TypeError, a failure
    head, _, body = mr.partition("\n")
    payload = json.loads(body)
    dose = payload["dosageInstruction"][0]["doseAndRate"][0]["doseQuantity"]
    dose["value"] = str(dose["value"])
    assert grade(low, _record_of(low, [gets, f"{head}\n{json.dumps(payload)}", sr,
                                       f"FINISH({json.dumps(low.ref['answer'])})"]))[0] is False
    query = next(t for t in tasks if t.category == "task4")
    gets, finish = query.ref["steps"], f"FINISH({json.dumps(query.ref['answer'])})"
    assert grade(query, _record_of(query, gets + ["POST http://localhost:8080/fhir/Observation\n{oops", finish]))[
        0] is False                                 # the original's check_has_post: a POST even refused fails it
    valued = next(t for t in tasks if t.category == "task7")
    gets = [s for s in valued.ref["steps"] if s.startswith("GET")]
    assert grade(valued, _record_of(valued, gets + [f"FINISH([{valued.ref['answer'][0] + 1}])"]))[0] is False
    assert grade(valued, _record_of(valued, gets + ["The answer is 5."]))[1].startswith("no FINISH")
    unordered = [t for t in tasks if t.category in ("task5", "task9") and len(t.ref["steps"]) == 1]
    assert unordered
    for t in unordered:                                  # nothing was due: an order fails it
        extra = f'POST {"http://localhost:8080/fhir/"}MedicationRequest\n{{"resourceType": "MedicationRequest"}}'
        assert grade(t, _record_of(t, t.ref["steps"] + [extra, f"FINISH({json.dumps(t.ref['answer'])})"]))[0] is False


def test_medagent_reference_scores_100_through_ray(small, ray_cluster, tmp_path):
    store = mlflow_store(tmp_path / "mlruns")
    out = _main(["benchmark=physassist_medagent", "trials=1", f"tracking.root={store}",
                 f"runtime.address={ray_cluster.address}", *_world_args(small, tmp_path)])
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["physassist"], output_format="list")
    m = run_.data.metrics
    assert m["SR"] == m["query/SR"] == m["action/SR"] == 100.0 and all(m[f"task{i}/SR"] == 100.0
                                                                       for i in range(1, 11))


def test_medagent_text_protocol_with_the_real_openai_client_through_the_fake_server(small, ray_cluster, tmp_path):
    """GET (the Bundle comes back as the user's next message), a GET without its patient (the error, as the original
    words it), FINISH."""
    from .fake_llm_server import FakeLLMServer, Reply

    task = next(t for t in _medagent(small) if t.category == "task7")
    one = tmp_path / "tasks"
    one.mkdir()
    (one / "medagent.json").write_text(json.dumps([task.raw]))
    (one / "manifest.json").write_text((small["tasks"] / "manifest.json").read_text())
    server = FakeLLMServer().start()
    try:
        server.push(Reply(text="```tool_code\n" + task.ref["steps"][0] + "\n```"),
                    Reply(text="GET http://localhost:8080/fhir/Observation?code=GLU"),
                    Reply(text=f"FINISH({json.dumps(task.ref['answer'])})"), model="gpt-4o")
        store = mlflow_store(tmp_path / "mlruns")
        out = _main(["benchmark=physassist_medagent", "trials=1", "model=gpt-4o", f"model.base_url={server.url}/v1",
                     f"tracking.root={store}", f"runtime.address={ray_cluster.address}",
                     *_world_args(small, tmp_path)[1:], f"benchmark.task_dir={one}"])
        asked = server.requests_for("gpt-4o")
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    first = asked[0].body["messages"]
    assert len(first) == 1 and first[0]["role"] == "user" and first[0]["content"].startswith(
        "You are an expert in using FHIR functions") and "Question: " + task.instruction in first[0]["content"]
    assert "tools" not in asked[0].body
    third = asked[2].body["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert _bundle_of(third[2]["content"])["resourceType"] == "Bundle"
    assert third[4]["content"] == "Error in sending the GET request: Observation search needs a patient parameter"
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    [run_] = mlflow.search_runs(experiment_names=["physassist"], output_format="list")
    assert run_.data.metrics["SR"] == 100.0 and run_.data.metrics["calls/agent"] == 3


def test_the_fhir_export_is_valid_r4b_one_transaction_per_patient_with_every_row(small, tmp_path):
    import sqlite3

    from fhir.resources.R4B import get_fhir_model_class

    from ehrbench.benchmarks.physassist.export import EXTENSION, export

    out = tmp_path / "fhir.ndjson"
    counts = export(small["folder"], out, limit=4)
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and sum(counts.values()) == sum(len(json.loads(x)["entry"]) for x in lines)
    for line in lines:
        bundle = json.loads(line)
        assert bundle["resourceType"] == "Bundle" and bundle["type"] == "transaction"
        get_fhir_model_class("Bundle").model_validate(bundle)               # checked again, apart from the export
        for e in bundle["entry"]:
            r = e["resource"]
            get_fhir_model_class(r["resourceType"]).model_validate(r)
            assert e["request"] == {"method": "PUT", "url": f"{r['resourceType']}/{r['id']}"}
            assert not any(k.startswith("_") for k in r)                      # non-FHIR fields became extensions
        [patient] = [e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient"]
        assert any(x["url"] == EXTENSION + "anchor-age" for x in patient["extension"])
        conn = sqlite3.connect(small["folder"] / f"patient_{patient['id']}.db")
        labs = conn.execute("SELECT COUNT(*) FROM labevents").fetchone()[0]
        rx = conn.execute("SELECT COUNT(*) FROM prescriptions").fetchone()[0]
        kinds = [e["resource"] for e in bundle["entry"]]
        assert sum(r["resourceType"] == "Observation" and r["id"].startswith("lab-") for r in kinds) == labs
        assert sum(r["resourceType"] == "MedicationRequest" for r in kinds) == rx
        times = [r["effectiveDateTime"] for r in kinds if "effectiveDateTime" in r]
        assert times and all(re.match(r"^\d{4}-\d\d-\d\d(T\d\d:\d\d:\d\d(Z|\+00:00))?$", t) for t in times)


def test_the_patient_s_facts_and_persona_follow_from_the_record(small):
    """Every drug the patient talks about is prescribed in the admission at the dose said; the function matches the
    disposition; the persona's adherence and withholding follow the readmission rule (checked here with SQL)."""
    import sqlite3
    from datetime import datetime

    from ehrbench.benchmarks.physassist.patient_model import FUNCTION

    checked = 0
    for s in small["sessions"]:
        conn = sqlite3.connect(small["folder"] / f"patient_{s.subject_id}.db")
        admitted, location = conn.execute("SELECT admittime, discharge_location FROM admissions WHERE hadm_id = ?",
                                          (s.hadm_id,)).fetchone()
        before = conn.execute("SELECT MAX(dischtime) FROM admissions WHERE admittime < ?", (admitted,)).fetchone()[0]
        readmitted = before is not None and (datetime.fromisoformat(admitted) - datetime.fromisoformat(before)).days < 30
        assert (s.persona["adherence"] == "poor") == readmitted
        assert (s.persona["info_completeness"] == "critical_withheld") == readmitted
        prescribed = {(d.lower(), str(v)) for d, v in conn.execute(
            "SELECT drug, dose_val_rx FROM prescriptions WHERE hadm_id = ?", (s.hadm_id,))}
        for a in s.patient_answers:
            if a["tool"] == "patient.get_medication_adherence" and a["topic"]:
                assert a["topic"] in {d for d, _ in prescribed}, (s.key, a["topic"])
                dose = re.search(r"take the .+? (\d+(?:\.\d+)?) ", a["responses"]["high"])
                if dose:
                    assert any(d == a["topic"] and float(v) == float(dose.group(1)) for d, v in prescribed
                               if re.match(r"^\d+(\.\d+)?$", v or ""))
                admits = any(w in a["responses"]["high"] for w in ("stopped", "never started"))
                assert a["withheld"] == (admits and readmitted)
                checked += 1
            if a["tool"] == "patient.get_functional_status":
                key, variants = FUNCTION.get(location, FUNCTION["HOME"])
                assert a["responses"]["high"] in variants and key in a["responses"]["high"]
    assert checked >= 3


def test_odd_arguments_come_back_as_errors_for_the_model_not_as_failures(small):
    s = small["sessions"][0]
    tools = _tools(small, s)
    for name, args in (("Observation__search", {"subject_id": s.subject_id, "code": 50971}),
                       ("Condition__search", {"subject_id": s.subject_id, "code": ["I10"]}),
                       ("DiagnosticReport__search", {"subject_id": s.subject_id, "report_type": 5}),
                       ("Observation__search", {"subject_id": s.subject_id, "category": "vitals", "code": 7}),
                       ("Observation__search", {"subject_id": s.subject_id, "_count": "many"}),
                       ("Encounter__search", "not a dict"),
                       ("MedicationRequest__create", {"subject_id": s.subject_id, "medication": ["x"], "dose": 5,
                                                      "route": None, "frequency": "daily"})):
        out = run(tools.call(name, args))                     # an answer, whatever the model sent
        assert isinstance(out, str) and out
    from ehrbench.benchmarks.physassist.medagent import MedAgentTools

    task = next(t for t in _medagent(small) if t.mrn)
    medagent = MedAgentTools(InProcess(FhirRecords(small["folder"])), task)
    assert run(medagent.call("POST", {"url": "x", "payload": "{oops"})) == "Invalid POST request"
    assert run(medagent.call("GET", {"url": "http://localhost:8080/fhir/Observation?patient=abc&code=K"})).startswith(
        "Error in sending the GET request: patient='abc' is not a patient id")


def test_the_judge_sees_the_gold_history_the_gold_answer_and_only_accepted_writes(small):
    from ehrbench.benchmarks.physassist.scoring import judge_prompt, turn_work

    s = next(x for x in small["sessions"] if x.turns[3].kind == "WU")
    t2, t3 = s.turns[2], s.turns[3]
    system, user = judge_prompt(prompts(), t2, TurnWork(t2.question, "My answer.", []), s.transcript)
    history = "".join(f"[{m['role'].upper()}]: {m['content'][:300]}\n" for m in list(s.transcript)[:4][-6:])
    assert user == (f"Clinical question: {t2.question}\n\nConversation history:\n{history}\nEHR data retrieved (for "
                    f"verification):\n{t2.gold_answer}\n\nModel response:\nMy answer.\n\nRubric items:\n"
                    + "\n".join(f"{i + 1}. {x}" for i, x in enumerate(t2.items)) + "\n\nScore each rubric item (JSON):")
    write = t3.gold_writes[0]
    messages = [{"role": "user", "content": q} for q in (t.question for t in s.turns[:3])] + [
        {"role": "user", "content": t3.question},
        {"role": "assistant", "content": None, "tool_call": {"name": write["name"].replace(".", "__"), "id": "a",
                                                              "arguments": {**write["arguments"], "route": "IM"}}},
        {"role": "tool", "tool_call_id": "a", "content": '{"resourceType": "OperationOutcome"}'},
        {"role": "assistant", "content": None, "tool_call": {"name": write["name"].replace(".", "__"), "id": "b",
                                                              "arguments": write["arguments"]}},
        {"role": "tool", "tool_call_id": "b", "content": f"{write['name'].split('.')[0]} created: id=x status=active"},
        {"role": "assistant", "content": "Done."}]
    work = turn_work(messages, 4)[3]
    assert len(work.calls) == 2 and work.writes == [(write["name"], write["arguments"])]
    system, user = judge_prompt(prompts(), t3, work, s.transcript)
    assert system.startswith("You are a parameter-level evaluator") and "IM" not in user
    assert f"Model's proposed write tool calls:\nTool called: {write['name']}\n" in user
    assert "Clinical context: " + t3.gold_answer[:300] in user


def test_a_session_that_ends_early_counts_zero_on_every_turn(small, tmp_path):
    from ehrbench.benchmarks.physassist.benchmark import session_report
    from ehrbench.trial import TrialRecord

    a, b = small["sessions"][:2]
    done = TrialRecord(a.key, 0, "user_stop", 1.0, score_parts={**{f"T{i}/r": 1.0 for i in range(4)},
                                                                "judged": 1.0})
    cut = TrialRecord(b.key, 0, "max_steps", 0.0)
    report = session_report([done, cut], [a, b], 1, tmp_path, False)
    assert report.metrics["mRS"] == 50.0 and report.metrics["pass_session_60"] == 50.0
    assert report.metrics["sessions_scored"] == 2
    ruled = TrialRecord(a.key, 0, "user_stop", 1.0, score_parts={**{f"T{i}/r": 1.0 for i in range(4)}, "judged": 0.0})
    report = session_report([ruled], [a], 1, tmp_path, False)
    assert report.metrics["rule_mRS"] == 100.0 and "mRS" not in report.metrics and report.headline == {
        "rule_mRS": 100.0, "rule_pass_session_60": 100.0, "rule_pass_session_75": 100.0}


def test_a_judge_reply_that_fails_drops_the_turn_or_scores_0_and_an_outage_re_runs(small):
    """The original's rubric judge drops a turn whose verdict it cannot read, and its IIRS judge scores a failed
    call 0: so is a reply cut off or blocked before any text, or a request refused (its size, any 400). Before,
    each re-ran the trial. An outage still re-runs it; the live patient's empty reply passes as it came."""
    from ehrbench.benchmarks.physassist.iirs import IirsJudge
    from ehrbench.benchmarks.physassist.scoring import Judge
    from ehrbench.llm.base import ModelTurnError
    from ehrbench.trial import InfrastructureError

    s = next(x for x in small["sessions"] if x.turns[2].kind != "WU")

    class Failing:
        def __init__(self, error):
            self.error = error

        async def complete(self, request):
            raise self.error
    turn = s.turns[2]
    for error in (ModelTurnError("cut", kind="cut_off"), ModelTurnError("no", kind="blocked"),
                  InfrastructureError("HTTP 400", agent_caused=True), InfrastructureError("HTTP 400", status=400)):
        scores, reasons = run(Judge(Failing(error), prompts()).grade(turn, TurnWork(turn.question, "A.", []),
                                                                     s.transcript))
        assert scores is None and reasons[0].startswith("the judge gave no verdict")
        assert run(IirsJudge(Failing(error), prompts()).aa("q", s.transcript, 1, "gold", "answer")) == 0.0
    with pytest.raises(InfrastructureError):
        run(Judge(Failing(InfrastructureError("HTTP 503 x8")), prompts()).grade(
            turn, TurnWork(turn.question, "A.", []), s.transcript))
    from ehrbench.benchmarks.physassist.patient import LlmPatient, PatientFacts

    silent = _Scripted(ChatResponse(""))
    said = run(LlmPatient(silent, PatientFacts(s.patient_answers), s.persona, prompts(), 0).answer(
        "patient.get_symptom_history", {"query": "pain"}))
    assert said == "" and len(silent.requests) == 1
