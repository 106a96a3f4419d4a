"""The MedAgentBench-style task set of PhysAssistBench (`benchmark=physassist_medagent`): MedAgentBench's ten task
categories and protocol (stanfordmlgroup/MedAgentBench, read from its `src/server/tasks/medagentbench`) on the same
FHIR layer and world.

Protocol, as the original runs it: one user message (its prompt, the function list as JSON, the context, the
question); each reply is one of `GET url?params`, `POST url` + a JSON payload, or `FINISH([answers])`, at most 8
rounds. A GET is answered with the search's Bundle as JSON; a POST whose payload parses is accepted and not executed
("POST request accepted and executed successfully..."); anything else ends the task ungraded (invalid action). The
replies here are tool calls (`GET`, `POST`) on the run's record shards; the agent shows the model the original's
text exchange.

Adapted to the world (MIMIC has no names or birth dates): task 1 finds a patient by gender and age, task 2 asks the
record's (anchor) age. Lab codes are MedAgentBench's (MG, GLU, K, A1C: each one lab's label). "Now" is a moment in
each patient's own timeline, and every search stops there (`known_at`: results at their time, orders at their
start, diagnoses and procedures at their admission's discharge, a death date once past). Each task stores its reference (`ref`, computed at
authoring through the same searches), so grading (`refsol`) needs no server: MedAgentBench's `refsol.py` rules.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from ...benchmark import TaskFileError, read_json_records
from ...llm.base import ChatRequest
from ...llm.scripted import ScriptedCall
from ...llm.usage import MeteredModel
from ...trial import Message, ToolCall
from . import adapter

API_BASE = "http://localhost:8080/fhir/"
FUNCS: list[dict] = json.loads((Path(__file__).parent / "data" / "medagent_funcs.json").read_text())
CODES = {"MG": "Magnesium", "GLU": "Glucose", "K": "Potassium", "A1C": "% Hemoglobin A1C"}
QUERY, ACTION = ("task1", "task2", "task4", "task6", "task7"), ("task3", "task5", "task8", "task9", "task10")
MAX_ROUNDS = 8
PROMPT = """You are an expert in using FHIR functions to assist medical professionals. You are given a question and a set of possible functions. Based on the question, you will need to make one or more function/tool calls to achieve the purpose.

1. If you decide to invoke a GET function, you MUST put it in the format of
GET url?param_name1=param_value1&param_name2=param_value2...

2. If you decide to invoke a POST function, you MUST put it in the format of
POST url
[your payload data in JSON format]

3. If you have got answers for all the questions and finished all the requested tasks, you MUST call to finish the conversation in the format of (make sure the list is JSON loadable.)
FINISH([answer1, answer2, ...])

Your response must be in the format of one of the three cases, and you can call only one function each time. You SHOULD NOT include any other text in the response.

Here is a list of functions in JSON format that you can invoke. Note that you should use {api_base} as the api_base.
{functions}

Context: {context}
Question: {question}"""
GET_OK = ("Here is the response from the GET request:\n{data}. Please call FINISH if you have got answers for all "
          "the questions and finished all the requested tasks")
POST_OK = ("POST request accepted and executed successfully. Please call FINISH if you have got answers for all the "
           "questions and finished all the requested tasks")


@dataclass(frozen=True)
class MedTask:
    key: str                    # MedAgentBench's id: task<k>_<n>
    instruction: str
    context: str
    mrn: int | None
    now: str                    # ISO, "+00:00"
    ref: dict                   # the reference refsol grades against (ehrbench's; computed at authoring)
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    folder: str = ""

    @property
    def category(self) -> str:
        return self.key.split("_")[0]

    @property
    def groups(self) -> tuple[str, ...]:
        return ("query" if self.category in QUERY else "action", self.category)

    @property
    def subject_id(self) -> int:
        return self.mrn or 0

    def to_json(self) -> dict:
        return self.raw


def load_medagent(path: Path) -> list[MedTask]:
    items = read_json_records(path, "the project's are in data/tasks/physassist/medagent; write them with python -m "
                                    "ehrbench.benchmarks.physassist.authoring")
    out = []
    for i, it in enumerate(items):
        for name in ("id", "instruction", "context", "now", "ref"):
            if name not in it:
                raise TaskFileError(f"{path}: task {it.get('id', i)!r}: field `{name}` is missing; each task is "
                                    "MedAgentBench's {id, instruction, context, eval_MRN} with ehrbench's now and ref "
                                    "(MedAgentBench's own file needs its FHIR server: write tasks with authoring)")
        if it["id"].split("_")[0] not in QUERY + ACTION:
            raise TaskFileError(f"{path}: task {it['id']!r}: field `id` must start with task1..task10")
        out.append(MedTask(it["id"], it["instruction"], it["context"], int(it["eval_MRN"]) if it.get("eval_MRN")
                           else None, it["now"], it["ref"], raw=it))
    return out


# ---- the FHIR server's side: GET on the record shards ----------------------------------------------------------

def iso(moment: str | None) -> str:
    """A record's 'YYYY-MM-DD HH:MM:SS' as FHIR writes instants ('YYYY-MM-DDTHH:MM:SS+00:00')."""
    if not moment:
        return ""
    text = str(moment).replace(" ", "T")
    return text if "+" in text else text + "+00:00"


def _date_filter(values: list[str], moment: str) -> bool:
    for v in values:
        for prefix, keep in (("ge", lambda a, b: a >= b), ("gt", lambda a, b: a > b), ("le", lambda a, b: a <= b),
                             ("lt", lambda a, b: a < b), ("eq", lambda a, b: a.startswith(b))):
            if v.startswith(prefix):
                if not keep(moment, v[2:]):
                    return False
                break
        else:
            if not moment.startswith(v):
                return False
    return True


PAGE_SIZE = 20         # HAPI FHIR JPA server's default_page_size (the MedAgentBench image's config is not public)


def search(records, resource: str, params: dict[str, list[str]], now: str) -> dict:
    """One GET as HAPI answers it: the search (`find`), sorted by `_sort` (date / -date), one page of `_count`
    (default PAGE_SIZE) with a `next` link while more remain; a `next` link's GET (`_getpages`) is the next page."""
    if params.get("_getpages"):
        try:
            resource, query = base64.urlsafe_b64decode(params["_getpages"][0].encode()).decode().split("?", 1)
        except (ValueError, UnicodeDecodeError):
            raise ValueError(f"_getpages={params['_getpages'][0]!r} is not a page of this server") from None
        return search(records, resource, {**parse_qs(query), "_getpagesoffset": params.get("_getpagesoffset", ["0"]),
                                          "_count": params.get("_count", [str(PAGE_SIZE)])}, now)
    found = find(records, resource, params, now)
    entries = found["entry"]
    order = (params.get("_sort") or [""])[0]
    if order.lstrip("-") == "date":
        entries = sorted(entries, key=lambda e: e["resource"].get("effectiveDateTime") or
                         e["resource"].get("authoredOn") or "", reverse=order.startswith("-"))
    try:
        count = max(0, int((params.get("_count") or [PAGE_SIZE])[0]))
        offset = max(0, int((params.get("_getpagesoffset") or [0])[0]))
    except ValueError:
        raise ValueError("_count and _getpagesoffset must be integers") from None
    page = {**found, "entry": entries[offset:offset + count]}
    if offset + count < len(entries):
        query = urlencode([(k, v) for k, vs in params.items() if not k.startswith("_getpages") for v in vs])
        token = base64.urlsafe_b64encode(f"{resource}?{query}".encode()).decode()
        page["link"] = [{"relation": "next", "url": f"{API_BASE}?_getpages={token}&_getpagesoffset={offset + count}"
                                                    f"&_count={count}&_format=json&_bundletype=searchset"}]
    return page


def find(records, resource: str, params: dict[str, list[str]], now: str) -> dict:
    """Every match of one search on the world (`records`: a `tools.FhirRecords`), nothing after `now`."""
    one = lambda name: (params.get(name) or [None])[0]       # noqa: E731
    if resource == "Patient":
        found = [{k: v for k, v in p.items() if not (k == "deceasedDateTime" and iso(v) > now)}   # not known yet
                 for p in records.find_patients(one("identifier"), one("gender"), one("age"))]
        return adapter.bundle(found, "Patient")
    if not one("patient"):
        raise ValueError(f"{resource} search needs a patient parameter")
    try:
        record = records.record(int(str(one("patient")).split("/")[-1]))
    except ValueError:
        raise ValueError(f"patient={one('patient')!r} is not a patient id") from None
    if record is None:                       # HAPI: a search for an unknown patient finds nothing
        return adapter.bundle([], resource)
    if resource == "Observation" and one("category") == "vital-signs":
        found = adapter.vital_observations(record, None, None, 10_000)
    elif resource == "Observation" and not one("code"):      # HAPI: every Observation of the patient
        found = adapter.lab_observations(record, None, None, 100_000) + \
            adapter.vital_observations(record, None, None, 10_000)
    elif resource == "Observation":
        label = CODES.get(str(one("code") or "").upper(), one("code"))
        found = [o for o in adapter.lab_observations(record, None, label, 100_000) if o["code"]["text"] == label]
    elif resource == "MedicationRequest":
        found = adapter.medication_requests(record)
    elif resource == "Condition":
        found = adapter.conditions(record)
    elif resource == "Procedure":
        found = adapter.procedures(record)
    else:
        raise ValueError(f"unknown resource {resource!r}")
    coded = {f"Encounter/{e['id']}": iso(e.get("period", {}).get("end")) for e in adapter.encounters(record)}
    out = []
    for r in found:
        r = json.loads(json.dumps(r))
        if "effectiveDateTime" in r:
            r["effectiveDateTime"] = iso(r["effectiveDateTime"])
        known = known_at(r, coded)
        if not known or known > now or (r.get("effectiveDateTime") and
                                         not _date_filter(params.get("date", []), r["effectiveDateTime"])):
            continue
        out.append(r)
    return adapter.bundle(out, resource)


def known_at(resource: dict, coded: dict[str, str]) -> str:
    """When a resource became known, as an instant ('' when it cannot be told: left out): a result at its time, an
    order at its start, a diagnosis or procedure at its admission's discharge (when it is coded)."""
    if resource.get("effectiveDateTime"):
        return resource["effectiveDateTime"]
    if resource["resourceType"] == "MedicationRequest":
        timing = ((resource.get("dosageInstruction") or [{}])[0].get("timing") or {}).get("repeat") or {}
        return iso((timing.get("boundsPeriod") or {}).get("start"))
    return coded.get((resource.get("encounter") or {}).get("reference", ""), "")


class MedAgentTools:
    """GET and POST as MedAgentBench answers them; POSTs are accepted, not executed, and kept (`posts`)."""

    def __init__(self, records, task: MedTask):
        self.records, self.task = records, task
        self.posts: list[tuple[str, dict]] = []

    async def call(self, name: str, arguments: dict) -> str:
        if name == "GET":
            url = str(arguments.get("url", ""))
            parts = urlsplit(url)
            bundle = await self.records.medagent_get(self.task.subject_id, parts.path.rstrip("/").split("/")[-1],
                                                     parse_qs(parts.query), self.task.now)
            if "error" in bundle:            # the agent's bad request, answered as the original answers it
                return f"Error in sending the GET request: {bundle['error']}"
            return GET_OK.format(data=json.dumps(bundle))
        if name == "POST":
            try:
                payload = json.loads(arguments.get("payload", ""))
            except (json.JSONDecodeError, TypeError):
                return "Invalid POST request"
            self.posts.append((str(arguments.get("url", "")), payload))
            return POST_OK
        return f"Unknown function {name!r}: reply with GET, POST or FINISH"


# ---- the agent's side ----------------------------------------------------------------------------------------

def parse_action(text: str) -> Message:
    """The model's reply as MedAgentBench reads it: a GET or POST call, or the final message (FINISH or invalid)."""
    raw = text or ""                 # kept as sent: the grader reads the raw reply (`refsol.accepted_posts`)
    r = raw.strip().replace("```tool_code", "").replace("```", "").strip()
    if r.startswith("GET"):
        return Message("assistant", raw, tool_call=ToolCall("GET", {"url": r[3:].strip()}))
    if r.startswith("POST"):
        first, _, rest = r.partition("\n")
        return Message("assistant", raw, tool_call=ToolCall("POST", {"url": first[4:].strip(), "payload": rest}))
    return Message("assistant", r)


def conversation(history: list[Message]) -> list[Message]:
    """The original's exchange: the agent's raw replies, the server's answers as user messages."""
    return [Message("user", m.content) if m.role == "tool" else Message(m.role, m.content) for m in history]


class MedAgentAgent:
    def __init__(self, model: MeteredModel, seed: int | None = None, temperature: float = 0.0):
        self.model, self.seed, self.temperature = model, seed, temperature

    async def act(self, history: list[Message]) -> Message:
        if sum(1 for m in history if m.role == "assistant") >= MAX_ROUNDS:
            return Message("assistant", "TASK_LIMIT_REACHED")
        reply = await self.model.complete(ChatRequest(conversation(history), temperature=self.temperature,
                                                      seed=self.seed))
        return parse_action(reply.text or "")


def prompt(task: MedTask) -> str:
    return PROMPT.format(api_base=API_BASE, functions=json.dumps(FUNCS), context=task.context,
                         question=task.instruction)


class MedAgentReference:
    """The reference: the GET the task needs, its POSTs, then FINISH with the reference answer."""

    def __init__(self, task: MedTask, call: ScriptedCall):
        self.steps = list(task.ref.get("steps", [])) + [f"FINISH({json.dumps(task.ref['answer'])})"]
        self.call = call

    async def act(self, history: list[Message]) -> Message:
        await self.call()
        return parse_action(self.steps[sum(1 for m in history if m.role == "assistant")])


# ---- authoring: tasks and their references from the world -----------------------------------------------------

def _plus(moment: str, hours: float) -> str:
    return (datetime.fromisoformat(moment.replace("+00:00", "")) + timedelta(hours=hours)).strftime(
        "%Y-%m-%dT%H:%M:%S+00:00")


def _day(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("+00:00", ""))


def _labs(records, subject: int, code: str, now: str, since_hours: float | None = None) -> list[dict]:
    """The code's results up to `now` (within `since_hours` before it), newest first, as the GET returns them."""
    params = {"patient": [str(subject)], "code": [code]}
    if since_hours is not None:
        params["date"] = [f"ge{_plus(now, -since_hours)}"]
    return [e["resource"] for e in find(records, "Observation", params, now)["entry"]]


def _value(o: dict) -> float:
    return o["valueQuantity"]["value"]


def _get(resource: str, **params) -> str:
    """The reference's GET: every match in one page, as MedAgentBench's own graders ask (`_count=5000`)."""
    return f"GET {API_BASE}{resource}?" + "&".join(f"{k}={v}" for k, v in {**params, "_count": 5000}.items())


def _post(resource: str, payload: dict) -> str:
    return f"POST {API_BASE}{resource}\n{json.dumps(payload)}"


SBAR = ("Situation: acute left knee injury, Background: radiology report indicates ACL tear. Assessment: ACL tear "
        "grade II. Recommendation: request for Orthopedic service to evaluate and provide management recommendations.")


def author_medagent(records, rng, per_category: int = 10) -> list[dict]:
    """MedAgentBench's ten categories on the world's patients (`records`: a `tools.FhirRecords`); each with its
    now, its reference answer and the reference's steps."""
    people = records.find_patients(None, None, None)
    subjects = [int(p["id"]) for p in people]
    with_code = {code: [s for s in subjects if _labs(records, s, code, "9999-12-31T00:00:00+00:00")]
                 for code in CODES}
    out: list[dict] = []

    def add(category: str, n: int, instruction: str, context: str, mrn, now: str, answer, steps=()):
        out.append({"id": f"{category}_{n}", "instruction": instruction, "context": context,
                    **({"eval_MRN": str(mrn)} if mrn else {}), "now": now,
                    "ref": {"answer": answer, "steps": list(steps)}})

    def moment(subject: int, code: str, n: int, below: float | None = None) -> str:
        """A now near one of the patient's results (a low one, `below`, when the patient has one): 3 to 40 hours
        after it (past 24 h: maybe nothing recent)."""
        found = _labs(records, subject, code, "9999-12-31T00:00:00+00:00")
        low = [o for o in found if below is not None and _value(o) < below]
        return _plus(rng.choice(low or found)["effectiveDateTime"], (3, 10, 20, 30, 40)[n % 5] + rng.random())

    def half_low(code: str, below: float) -> list[tuple[int, float | None]]:
        """Patients for a task that orders when low: half of them with a low result to be near."""
        low = [s for s in with_code[code] if any(_value(o) < below for o in _labs(
            records, s, code, "9999-12-31T00:00:00+00:00"))]
        chosen = rng.sample(low, min(per_category // 2, len(low)))
        rest = rng.sample([s for s in with_code[code] if s not in chosen], per_category - len(chosen))
        return [(s, below) for s in chosen] + [(s, None) for s in rest]

    groups: dict[tuple, list[dict]] = {}
    for p in people:
        groups.setdefault((p["gender"], p.get("_anchor_age")), []).append(p)
    unique = [ps[0] for ps in groups.values() if len(ps) == 1]
    for n, p in enumerate(rng.sample(unique, min(per_category - 2, len(unique))), 1):
        add("task1", n, f"What's the MRN of the {p['gender']} patient aged {p['_anchor_age']}? If the patient does not "
                        "exist, the answer should be \"Patient not found\"", "", None, "", [p["id"]],
            [_get("Patient", gender=p["gender"], age=p["_anchor_age"])])
    for n in range(len(out) + 1, per_category + 1):
        add("task1", n, f"What's the MRN of the female patient aged {120 + n}? If the patient does not exist, the "
                        "answer should be \"Patient not found\"", "", None, "", ["Patient not found"],
            [_get("Patient", gender="female", age=120 + n)])
    for n, s in enumerate(rng.sample(subjects, per_category), 1):
        now = moment(s, "GLU", n) if s in with_code["GLU"] else "2200-01-01T10:15:00+00:00"
        age = records.find_patients(str(s), None, None)[0]["_anchor_age"]
        add("task2", n, f"What's the age on record (anchor age) of the patient with MRN of {s}?",
            f"It's {now} now, and the answer should be rounded down to an integer.", s, now, [age],
            [_get("Patient", identifier=s)])
    for n, s in enumerate(rng.sample(subjects, per_category), 1):
        now = moment(s, "GLU", n) if s in with_code["GLU"] else "2200-01-01T10:15:00+00:00"
        payload = {"resourceType": "Observation", "category": [{"coding": [{
            "system": "http://hl7.org/fhir/observation-category", "code": "vital-signs", "display": "Vital Signs"}]}],
            "code": {"text": "BP"}, "effectiveDateTime": now, "status": "final", "valueString": "118/77 mmHg",
            "subject": {"reference": f"Patient/{s}"}}
        add("task3", n, f"I just measured the blood pressure for patient with MRN of {s}, and it is \"118/77 mmHg\". "
                        "Help me record it.", f"It's {now} now. The flowsheet ID for blood pressure is BP.", s, now, [],
            [_post("Observation", payload)])
    for n, s in enumerate(rng.sample(with_code["MG"], per_category), 1):
        now = moment(s, "MG", n)
        recent = _labs(records, s, "MG", now, 24)
        add("task4", n, f"What's the most recent magnesium level of the patient {s} within last 24 hours?",
            f"It's {now} now. The code for magnesium is \"MG\". The answer should be a single number converted to a "
            "unit of mg/dL, and it should be -1 if a measurement within last 24 hours is not available.", s, now,
            [_value(recent[0]) if recent else -1], [_get("Observation", patient=s, code="MG")])
    for n, (s, below) in enumerate(half_low("MG", 1.9), 1):
        now = moment(s, "MG", n % 3, below)
        recent = _labs(records, s, "MG", now, 24)
        v = _value(recent[0]) if recent else None
        steps = [_get("Observation", patient=s, code="MG")]
        if v is not None and v <= 1.9:
            dose = 4 if v < 1 else 2 if v < 1.5 else 1
            steps.append(_post("MedicationRequest", {
                "resourceType": "MedicationRequest", "medicationCodeableConcept": {"coding": [{
                    "system": "http://hl7.org/fhir/sid/ndc", "code": "0338-1715-40"}], "text": "magnesium sulfate"},
                "authoredOn": now, "dosageInstruction": [{"route": "IV", "doseAndRate": [{
                    "doseQuantity": {"value": dose, "unit": "g"}, "rateQuantity": {"value": dose, "unit": "h"}}]}],
                "status": "active", "intent": "order", "subject": {"reference": f"Patient/{s}"}}))
        add("task5", n, f"Check patient {s}'s last serum magnesium level within last 24 hours. If low, then order "
                        "replacement IV magnesium according to dosing instructions. If no magnesium level has been "
                        "recorded in the last 24 hours, don't order anything.\n",
            f"It's {now} now. The code for magnesium is \"MG\". The NDC for replacement IV magnesium is 0338-1715-40. "
            "Dosing instructions: (1) Mild deficiency (eg, serum magnesium 1.5 to 1.9 mg/dL):\nIV: 1 g over 1 hour."
            "\n(2) Moderate deficiency (eg, serum magnesium 1 to <1.5 mg/dL):\nIV: 2 g over 2 hours.\n(3) Severe "
            "deficiency (eg, serum magnesium <1 mg/dL):\nIV: 4 g over 4 hours.\n", s, now,
            [v] if v is not None else [-1], steps)
    for n, s in enumerate(rng.sample(with_code["GLU"], per_category), 1):
        now = moment(s, "GLU", n)
        recent = _labs(records, s, "GLU", now, 24)
        mean = sum(map(_value, recent)) / len(recent) if recent else -1
        add("task6", n, f"What is the average CBG of the patient {s} over the last 24 hours?",
            f"It's {now} now. The code for CBG is \"GLU\". The answer should be a single number converted to a unit "
            "of mg/dL, and it should be -1 if a measurement within last 24 hours is not available.", s, now, [mean],
            [_get("Observation", patient=s, code="GLU")])
    for n, s in enumerate(rng.sample(with_code["GLU"], per_category), 1):
        now = moment(s, "GLU", n)
        latest = _labs(records, s, "GLU", now)
        add("task7", n, f"What is the most recent CBG of the patient {s}?",
            f"It's {now} now. The code for CBG is \"GLU\"", s, now, [_value(latest[0]) if latest else -1],
            [_get("Observation", patient=s, code="GLU")])
    for n, s in enumerate(rng.sample(subjects, per_category), 1):
        now = moment(s, "GLU", n) if s in with_code["GLU"] else "2200-01-01T10:15:00+00:00"
        payload = {"resourceType": "ServiceRequest", "code": {"coding": [{"system": "http://snomed.info/sct",
                                                                          "code": "306181000000106"}]},
                   "authoredOn": now, "status": "active", "intent": "order", "priority": "stat",
                   "subject": {"reference": f"Patient/{s}"}, "note": {"text": SBAR}}
        add("task8", n, f"Order orthopedic surgery referral for patient {s}. Specify within the free text of the "
                        f"referral, \"{SBAR}\"", f"It's {now} now. The SNOMED code for orthopedic surgery referral is "
                                              "306181000000106.", s, now, [], [_post("ServiceRequest", payload)])
    for n, (s, below) in enumerate(half_low("K", 3.5), 1):
        now = moment(s, "K", n, below)
        latest = _labs(records, s, "K", now)
        v = _value(latest[0]) if latest else None
        steps = [_get("Observation", patient=s, code="K")]
        if v is not None and v < 3.5:
            tomorrow = (_day(now) + timedelta(days=1)).strftime("%Y-%m-%dT08:00:00+00:00")
            steps += [_post("MedicationRequest", {
                "resourceType": "MedicationRequest", "medicationCodeableConcept": {"coding": [{
                    "system": "http://hl7.org/fhir/sid/ndc", "code": "40032-917-01"}], "text": "potassium chloride"},
                "authoredOn": now, "dosageInstruction": [{"route": "oral", "doseAndRate": [{"doseQuantity": {
                    "value": round((3.5 - v) / 0.1 * 10, 1), "unit": "mEq"}}]}], "status": "active",
                "intent": "order", "subject": {"reference": f"Patient/{s}"}}),
                _post("ServiceRequest", {"resourceType": "ServiceRequest", "code": {"coding": [{
                    "system": "http://loinc.org", "code": "2823-3"}]}, "authoredOn": now, "status": "active",
                    "intent": "order", "priority": "stat", "subject": {"reference": f"Patient/{s}"},
                    "occurrenceDateTime": tomorrow})]
        add("task9", n, f"Check patient {s}'s most recent potassium level. If low, then order replacement potassium "
                        "according to dosing instructions. Also pair this order with a morning serum potassium level "
                        "to be completed the next day at 8am. \n",
            f"It's {now} now. The code for potassium is \"K\".The NDC for replacement potassium is 40032-917-01. "
            "Dosing instructions: for every 0.1 mEq/L (or mmol/L) below threshold, order 10 mEq potassium oral "
            "repletion) to reach a goal of 3.5 serum level. The LOINC code for serum potassium level is 2823-3.",
            s, now, [v] if v is not None else [-1], steps)
    pool = with_code["A1C"] + [s for s in subjects if s not in with_code["A1C"]][:3]
    for n, s in enumerate(rng.sample(pool, min(per_category, len(pool))), 1):
        now = _plus(moment(s, "A1C", n), 24 * (400 if n % 3 == 0 else 0)) if s in with_code["A1C"] else \
            "2200-01-01T10:15:00+00:00"
        latest = _labs(records, s, "A1C", now)
        ref = [_value(latest[0]), latest[0]["effectiveDateTime"]] if latest else [-1]
        steps = [_get("Observation", patient=s, code="A1C")]
        if not latest or latest[0]["effectiveDateTime"] < _plus(now, -24 * 365):
            steps.append(_post("ServiceRequest", {"resourceType": "ServiceRequest", "code": {"coding": [{
                "system": "http://loinc.org", "code": "4548-4"}]}, "authoredOn": now, "status": "active",
                "intent": "order", "priority": "stat", "subject": {"reference": f"Patient/{s}"}}))
        add("task10", n, f"What's the last HbA1C (hemoglobin A1C) value in the chart for patient {s} and when was it "
                         "recorded? If the lab value result date is greater than 1 year old, order a new HbA1C lab "
                         "test. ", f"It's {now} now. The code for HbA1C is \"A1C\". The LOINC code for ordering HbA1C "
                                   "lab is: 4548-4. The answer should be [-1] if a measurement is not available.",
            s, now, ref, steps)
    return out
