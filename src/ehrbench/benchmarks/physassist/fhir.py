"""PhysAssistBench's FHIR tools as the original defines them (tools/fhir/fhir_tools.py, tools/tool_registry.py):
the 18 schemas a session lists, the searches over one patient's record, and the three write tools.

Arguments are cleaned as the original cleans them before a tool runs: known aliases are renamed (`test_name` ->
`code`, `drug` -> `medication`, ...), unknown names dropped, and placeholder values (`''`, `0`) of optional
arguments read as "not given". `Observation.search` is the one date-bounded search: without a `date_to` the harness
sets it to the session's current date (a bare day, compared as a string, so that day's timed events are out too).
ehrbench also cuts a later `date_to` down to the current date, so no search reaches past the session's moment.

An empty search is an OperationOutcome with the original's message, not an empty Bundle (CarePlan excepted).
A search for another subject than the session's finds nothing: each session reaches only its own patient.

The write tools build real FHIR R4B resources (`fhir.resources`) and refuse, with an OperationOutcome naming the
field, what does not validate (the original accepts anything, filling gaps with ""): a session's orders are its own
and never touch the shared record.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from . import adapter
from .adapter import PatientRecord

SCHEMAS: list[dict] = json.loads((Path(__file__).parent / "data" / "tools.json").read_text())
NAMES = tuple(s["name"] for s in SCHEMAS)
PARAMS = {s["name"]: set(s["parameters"]["properties"]) for s in SCHEMAS}
TEXT = {s["name"]: {p for p, spec in s["parameters"]["properties"].items() if spec.get("type") == "string"}
        for s in SCHEMAS}
WRITES = ("MedicationRequest.create", "ServiceRequest.create", "Flag.create")
PATIENT_TOOLS = tuple(n for n in NAMES if n.startswith("patient."))
SEARCHES = tuple(n for n in NAMES if n not in WRITES + PATIENT_TOOLS + ("prepare_to_answer",))

ALIASES = {("Observation.search", "test_name"): "code", ("Observation.search", "lab_test"): "code",
           ("Observation.search", "item_name"): "code", ("Observation.search", "vital_name"): "code",
           ("Observation.search", "type"): "category", ("Observation.search", "limit"): "_count",
           ("Condition.search", "icd_code"): "code", ("Condition.search", "diagnosis"): "code",
           ("MedicationRequest.search", "drug"): "medication", ("MedicationRequest.search", "med"): "medication",
           ("DiagnosticReport.search", "type"): "report_type",
           ("DocumentReference.search", "type"): "type_code", ("DocumentReference.search", "query"): "keyword"}
KEEP = {"subject_id", "_count", "_sort", "abnormal_only", "answer_type"}     # never read as placeholders


def api_name(name: str) -> str:
    """The name a model API accepts (no dots), as the original's `_api_name` sends it: `Observation__search`."""
    return name.replace(".", "__")


def canonical(name: str) -> str:
    return name.replace("__", ".")


def model_tools() -> list[dict]:
    """The full tool set, every turn (the original: filtering would leak the turn's nature)."""
    return [{**s, "name": api_name(s["name"])} for s in SCHEMAS]


def clean_arguments(name: str, arguments: dict) -> dict:
    """Aliases renamed, unknown arguments dropped, placeholders ('', whitespace, 0) of optional ones removed."""
    valid, out = PARAMS.get(name, set()), {}
    for key, value in arguments.items():
        target = key if key in valid else ALIASES.get((name, key))
        if target is None or target in out:
            continue
        if target in TEXT.get(name, ()) and value is not None and not isinstance(value, str):
            value = ", ".join(map(str, value)) if isinstance(value, list) else str(value)   # 50971, ["I10"]
        if name not in ("Patient.read", "prepare_to_answer") and target not in KEEP and not isinstance(value, bool):
            if isinstance(value, str):
                value = value.strip() or None
            elif isinstance(value, int) and value == 0:
                value = None
            if value is None:
                continue
        out[target] = value
    return out


def bound_dates(arguments: dict, current_date: str) -> dict:
    """Observation.search's arguments bounded by the session's current date (given when absent, cut when later)."""
    given = arguments.get("date_to")
    if not isinstance(given, str) or given > current_date:
        return {**arguments, "date_to": current_date}
    return arguments


def _error(message: str) -> dict:
    return {"resourceType": "OperationOutcome", "issue": [{"severity": "error", "diagnostics": message}]}


def _int(value, field: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TypeError(f"{field} must be an integer, got {value!r}") from None


def search(record: PatientRecord, name: str, arguments: dict) -> dict:
    """One read tool on the session's patient: a Bundle, a Patient, or an OperationOutcome (arguments cleaned)."""
    a = arguments
    subject = _int(a.get("subject_id"), "subject_id")
    hadm = _int(a.get("hadm_id"), "hadm_id")
    ours = subject == record.subject_id
    if name == "Patient.read":
        found = adapter.patient(record) if ours else None
        return found if found is not None else _error(f"Patient/{subject} not found")
    if name == "CarePlan.search":
        return adapter.bundle(adapter.care_plans(record, hadm, a.get("category")) if ours else [], "CarePlan")
    found: list[dict] = []
    if name == "Encounter.search":
        found, kind, what = adapter.encounters(record, hadm) if ours else [], "Encounter", "encounters"
    elif name == "Condition.search":
        found = adapter.conditions(record, hadm, a.get("code")) if ours else []
        if a.get("clinical_status"):
            found = [r for r in found if any(c.get("code") == a["clinical_status"]
                                             for c in r.get("clinicalStatus", {}).get("coding", []))]
        kind, what = "Condition", "conditions"
    elif name == "Observation.search":
        kind, what = "Observation", "observations"
        category = str(a.get("category") or "").lower()
        count = _int(a.get("_count", 20), "_count")
        if not ours:
            found = []
        elif category in ("vital-signs", "vital_signs", "vitals"):
            found = adapter.vital_observations(record, None, a.get("code"), count)
        else:
            found = adapter.lab_observations(record, hadm, a.get("code"), count, a.get("date_from"), a.get("date_to"))
            if category == "microbiology":
                found = [r for r in found if any(w in str(r.get("code", {}).get("text", "")).lower()
                                                 for w in ("micro", "culture", "bacteria"))]
        if not found:
            return _error(f"No observations found for Patient/{subject}"
                          + (f" category={a['category']}" if a.get("category") else "")
                          + (f" code={a['code']}" if a.get("code") else ""))
    elif name == "MedicationRequest.search":
        found = adapter.medication_requests(record, hadm, a.get("medication"), a.get("status")) if ours else []
        kind, what = "MedicationRequest", "medication requests"
    elif name == "MedicationAdministration.search":
        found = adapter.medication_administrations(record, hadm, a.get("medication")) if ours else []
        kind, what = "MedicationAdministration", "medication administrations"
    elif name == "DiagnosticReport.search":
        found = adapter.diagnostic_reports(record, hadm, a.get("report_type")) if ours else []
        kind, what = "DiagnosticReport", "diagnostic reports"
    elif name == "DocumentReference.search":
        found = adapter.document_references(record, hadm, a.get("type_code"), a.get("keyword")) if ours else []
        kind, what = "DocumentReference", "documents"
    else:
        return {"error": f"Unknown tool: {name}"}
    return adapter.bundle(found, kind) if found else _error(f"No {what} found for Patient/{subject}")


def run_search(record: PatientRecord, name: str, arguments: dict, current_date: str) -> dict:
    """A read tool as the session's tool call runs it: arguments cleaned, dates bounded, errors as the original's."""
    cleaned = clean_arguments(name, arguments)
    if name == "Observation.search":
        cleaned = bound_dates(cleaned, current_date)
    try:
        return search(record, name, cleaned)
    except TypeError as e:
        return {"error": f"Bad arguments for {name}: {e}"}
    except (ValueError, AttributeError, re.error) as e:     # the original's call_tool answers any failure so
        return {"error": f"Tool execution error for {name}: {e}"}


# ---- write tools ----------------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z%/µ][A-Za-z0-9%/µ.\s]*)?\s*$")


@functools.lru_cache(maxsize=1)
def _models():
    from fhir.resources.R4B.flag import Flag
    from fhir.resources.R4B.medicationrequest import MedicationRequest
    from fhir.resources.R4B.servicerequest import ServiceRequest

    return {"MedicationRequest.create": MedicationRequest, "ServiceRequest.create": ServiceRequest,
            "Flag.create": Flag}


def _dose(text: str) -> dict:
    """'40 mg' -> a doseQuantity {value, unit}; anything else kept as text only (the original's `{"text": dose}`)."""
    m = _QUANTITY.match(text or "")
    if not m:
        return {}
    value = float(m.group(1))
    quantity = {"value": int(value) if value.is_integer() else value}
    return {"doseAndRate": [{"doseQuantity": {**quantity, **({"unit": m.group(2).strip()} if m.group(2) else {})}}]}


ID_PREFIX = {"MedicationRequest.create": "MR", "ServiceRequest.create": "SR", "Flag.create": "FL"}


def write_resource(name: str, arguments: dict, subject_id: int, current_date: str, serial: int) -> dict:
    """The FHIR resource a write tool creates, before any validation (`run_write`); its id names the session's n-th
    write."""
    a = clean_arguments(name, arguments)
    schema = next(s for s in SCHEMAS if s["name"] == name)["parameters"]
    missing = [f for f in schema.get("required", []) if a.get(f) in (None, "")]
    if missing:
        raise ValueError(f"missing required argument {missing[0]!r}")
    for field, spec in schema["properties"].items():      # FHIR's value sets, as the schema lists them
        if "enum" in spec and field in a and a[field] not in spec["enum"]:
            raise ValueError(f"{field} {a[field]!r} is not one of {spec['enum']}")
    if _int(a["subject_id"], "subject_id") != subject_id:
        raise ValueError(f"subject_id {a['subject_id']!r} is not this session's patient ({subject_id})")
    subject = {"reference": f"Patient/{subject_id}"}
    resource_id = f"{ID_PREFIX[name]}-sim-{subject_id}-{serial}"
    if name == "MedicationRequest.create":
        dose, route, frequency = str(a["dose"]), str(a["route"]), str(a["frequency"])
        out = {"resourceType": "MedicationRequest", "id": resource_id, "status": "active", "intent": "order",
               "medicationCodeableConcept": {"text": str(a["medication"])}, "subject": subject,
               "authoredOn": current_date,
               "dosageInstruction": [{"text": f"{dose} {route} {frequency}".strip(), "route": {"text": route},
                                      "timing": {"code": {"text": frequency}}, **_dose(dose)}]}
        if a.get("indication"):
            out["reasonCode"] = [{"text": str(a["indication"])}]
        if a.get("duration_days") is not None:
            days = _int(a["duration_days"], "duration_days")
            out["dispenseRequest"] = {"expectedSupplyDuration": {"value": days, "unit": "days",
                                                                 "system": "http://unitsofmeasure.org", "code": "d"}}
        return out
    if name == "ServiceRequest.create":
        out = {"resourceType": "ServiceRequest", "id": resource_id, "status": "active", "intent": "order",
               "priority": str(a["priority"]), "code": {"text": str(a["service_type"])}, "subject": subject,
               "authoredOn": current_date}
        if a.get("note"):
            out["note"] = [{"text": str(a["note"])}]
        if a.get("target_date"):
            out["occurrenceDateTime"] = str(a["target_date"])
        return out
    return {"resourceType": "Flag", "id": resource_id, "status": "active", "category": [{"text": str(a["category"])}],
            "code": {"text": str(a["code"]), "coding": [{"display": str(a["detail"])}]}, "subject": subject}


def validate(resource: dict) -> dict:
    """The resource as the FHIR R4B model reads it back; raises ValueError naming the fields that do not validate."""
    from pydantic import ValidationError

    name = {"MedicationRequest": "MedicationRequest.create", "ServiceRequest": "ServiceRequest.create",
            "Flag": "Flag.create"}.get(resource.get("resourceType"))
    model = _models().get(name) if name else None
    if model is None:
        from fhir.resources.R4B import get_fhir_model_class

        model = get_fhir_model_class(resource["resourceType"])
    try:
        return json.loads(model.model_validate(resource).model_dump_json())
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or resource['resourceType']}: {err['msg']}"
                           for err in e.errors()[:3])
        raise ValueError(f"not a valid FHIR R4B {resource['resourceType']}: {fields}") from None


def run_write(name: str, arguments: dict, subject_id: int, current_date: str, serial: int,
              validated: bool = False) -> dict:
    """A write tool's answer. The original's (`_exec_write_tool`): always a created resource, nothing checked (an
    argument missing or out of its value set is written as given). `validated` (ehrbench's opt-in): the resource
    as FHIR R4B reads it back, or an OperationOutcome saying what to fix."""
    try:
        resource = write_resource(name, arguments, subject_id, current_date, serial)
        return validate(resource) if validated else resource
    except (ValueError, TypeError) as e:
        if not validated:
            kind = name.split(".")[0]
            return {"resourceType": kind, "id": f"{ID_PREFIX[name]}-sim-{subject_id}-{serial}", "status": "active",
                    "_arguments": {k: v for k, v in (arguments or {}).items() if k != "subject_id"}}
        return {"resourceType": "OperationOutcome",
                "issue": [{"severity": "error", "code": "invalid", "diagnostics": f"{name}: {e}"}]}
