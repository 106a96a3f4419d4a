"""PhysAssistBench sessions: the original's session files, read unchanged, as typed sessions and turns.

A session file is one JSON object per line (`<scenario>.jsonl`, as the original's generator writes them and its
`run_eval.load_benchmark_entries` reads them): four dependent turns, each a physician question (implicit, and its
explicit paraphrase), a turn type, binary rubric items, and gold actions (`answer_list`: the tool calls, their
results, and the gold answer as the observation of the closing `prepare_to_answer`).

ehrbench's own sessions add two fields the loader also reads, and the originals do without:
- `rubric_checks`: per turn, per item, the item's machine-checkable form (`grading.CHECKS`), so an offline rule
  grader decides it; None where only a judge can;
- `patient_answers`: what the simulated patient can say, per interview tool: `{tool, topic, withheld, responses:
  {low, medium, high}}`, the stored variants the replayed patient answers from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...benchmark import TaskFileError, read_json_records

SCENARIOS = ("diagnostic_workup", "med_safety", "treatment_response", "discharge_planning")
TURN_TYPES = ("Information Lookup", "Data Gathering", "Clinical Reasoning", "Write/Update")
SHORT = {"Information Lookup": "IL", "Data Gathering": "DG", "Clinical Reasoning": "CR", "Write/Update": "WU"}
SUBTYPES = {"NA": "nominal anaphora", "PE": "predicate ellipsis", "AE": "abstract event anaphora"}
LITERACY = ("low", "medium", "high")
FIX = "each session needs it (see the original's examples/med_safety_example.jsonl)"


@dataclass(frozen=True)
class Turn:
    index: int
    task_type: str                        # one of TURN_TYPES
    subtype: str | None                   # NA | PE | AE (None at T0, or when the file says none)
    question: str                         # implicit, as the agent is asked
    explicit: str                         # the explicit paraphrase (the ablation: benchmark.explicit=true)
    tool_source: str                      # ehr | patient | mixed | write
    items: tuple[str, ...]                # binary rubric items
    checks: tuple[dict | None, ...]       # their machine-checkable forms (ehrbench's sessions)
    gold_actions: tuple[dict, ...]        # {"name", "arguments"} in order, prepare_to_answer last
    gold_answer: str

    @property
    def kind(self) -> str:
        return SHORT.get(self.task_type, self.task_type)

    @property
    def gold_writes(self) -> list[dict]:
        return [a for a in self.gold_actions if a["name"].endswith(".create")]


@dataclass(frozen=True)
class Session:
    key: str
    scenario: str
    tier: int                             # difficulty_level 1..3: data-sparse, moderate, rich
    subject_id: int
    hadm_id: int
    current_date: str
    session_id: str
    env_info: str
    turns: tuple[Turn, ...]
    persona: dict
    patient_answers: tuple[dict, ...] = ()
    transcript: tuple[dict, ...] = ()     # the gold transcript (the judge's history), separators dropped
    folder: str = ""                      # the per-patient files, set once the run's database is ready
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def groups(self) -> tuple[str, ...]:
        return (self.scenario, f"L{self.tier}")

    def to_json(self) -> dict:
        return self.raw


def _patient_answers(entry: dict, turns_actions: list[list[dict]]) -> list[dict]:
    """ehrbench's `patient_answers`; an original file's are its gold interview calls' stored variants (the
    original's replay)."""
    if entry.get("patient_answers"):
        return list(entry["patient_answers"])
    out = []
    for actions in turns_actions:
        for a in actions:
            obs = a.get("observation")
            if a["name"].startswith("patient.") and isinstance(obs, dict) and "patient_response" in obs:
                variants = obs.get("patient_responses_all_literacy") or {}
                args = a.get("arguments") or {}
                out.append({"tool": a["name"], "topic": args.get("drug") or args.get("query") or "",
                            "withheld": False, "responses": {lit: str(variants.get(lit) or obs["patient_response"])
                                                             for lit in LITERACY}})
    return out


def parse_session(entry: dict, path: Path, line: int) -> Session:
    where = f"{path}: session {entry.get('id', f'on line {line}')!r}"

    def need(name: str, kind: type | tuple, fix: str = FIX):
        value = entry.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TaskFileError(f"{where}: field `{name}` is {'missing' if value is None else repr(value)[:80]}; {fix}")
        return value

    tasks = entry.get("tasks_en") or need("tasks", list)
    explicit = entry.get("tasks_en_explicit") or entry.get("tasks_explicit") or tasks
    rubrics, types, answers = need("rubrics", list), need("task_types", list), need("answer_list", list)
    n = len(tasks)
    for name, values in (("tasks_explicit", explicit), ("rubrics", rubrics), ("task_types", types),
                         ("answer_list", answers)):
        if len(values) != n:
            raise TaskFileError(f"{where}: field `{name}` has {len(values)} entries for {n} turns; one per turn")
    bad = [t for t in types if t not in TURN_TYPES]
    if bad:
        raise TaskFileError(f"{where}: field `task_types` has {bad[0]!r}; use one of {list(TURN_TYPES)}")
    subtypes = list(entry.get("turn_subtypes") or [None] * n) + [None] * n
    sources = list(entry.get("tool_sources") or ["ehr"] * n) + ["ehr"] * n
    checks = entry.get("rubric_checks") or [[None] * len(r) for r in rubrics]
    turns, actions_by_turn = [], []
    for i in range(n):
        actions = [a.get("action", a) | {"observation": a.get("observation")} for a in answers[i]]
        if any(not isinstance(a.get("name"), str) for a in actions):
            raise TaskFileError(f"{where}: answer_list[{i}]: an action without a `name`; each is "
                                "{\"action\": {\"name\", \"arguments\"}, \"observation\": ...}")
        closing = [a for a in actions if a["name"] == "prepare_to_answer"]
        gold = closing[-1]["observation"] if closing and isinstance(closing[-1]["observation"], str) else None
        if gold is None:
            raise TaskFileError(f"{where}: answer_list[{i}]: no prepare_to_answer action whose observation is the "
                                "gold answer text; every turn ends with one")
        if not isinstance(rubrics[i], list) or not rubrics[i] or len(checks[i] or []) != len(rubrics[i]):
            raise TaskFileError(f"{where}: rubrics[{i}] must be a non-empty list of items (and rubric_checks[{i}], "
                                "when given, one check or null per item)")
        actions_by_turn.append(actions)
        turns.append(Turn(i, types[i], subtypes[i] if subtypes[i] in SUBTYPES else None, str(tasks[i]),
                          str(explicit[i]), str(sources[i]), tuple(map(str, rubrics[i])), tuple(checks[i]),
                          tuple({"name": a["name"], "arguments": a.get("arguments") or {}} for a in actions),
                          gold))
    scenario = need("clinical_scenario", str)
    if scenario not in SCENARIOS:
        raise TaskFileError(f"{where}: field `clinical_scenario` is {scenario!r}; use one of {list(SCENARIOS)}")
    tier = need("difficulty_level", int)
    if tier not in (1, 2, 3):
        raise TaskFileError(f"{where}: field `difficulty_level` is {tier}; use 1, 2 or 3 (data-sparse to rich)")
    messages = entry.get("messages_en") or entry.get("messages") or []
    return Session(key=str(need("id", str)), scenario=scenario, tier=tier, subject_id=int(need("subject_id", int)),
                   hadm_id=int(need("hadm_id", int)), current_date=need("current_date", str)[:10],
                   session_id=need("session_id", str), env_info=need("env_info", str), turns=tuple(turns),
                   persona=dict(entry.get("persona_config") or {}),
                   patient_answers=tuple(_patient_answers(entry, actions_by_turn)),
                   transcript=tuple(m for m in messages if isinstance(m, dict)), raw=entry)


def load_sessions(task_dir: Path, scenarios: list[str]) -> list[Session]:
    """`<scenario>.jsonl` for each scenario, in order (the original's `load_benchmark_entries`)."""
    out: list[Session] = []
    for scenario in scenarios:
        path = Path(task_dir) / f"{scenario}.jsonl"
        records = read_json_records(path, "the project's sessions are in data/tasks/physassist; write them with "
                                          "python -m ehrbench.benchmarks.physassist.authoring")
        out += [parse_session(entry, path, i + 1) for i, entry in enumerate(records)]
    seen: set[str] = set()
    for s in out:
        if s.key in seen:
            raise TaskFileError(f"{task_dir}: session id {s.key!r} appears twice; ids must be unique")
        seen.add(s.key)
    return out
