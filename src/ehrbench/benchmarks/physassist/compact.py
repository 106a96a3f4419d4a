"""What the model sees of a tool's result: the original's compaction (eval_runner._compact_observation_str and
_compact_fhir_bundle), written once per resource type.

A searchset Bundle becomes "(N results)" and one line per resource for the first 15 ("  - Creatinine: 0.9 mg/dL
(Abnormal) @ 2209-05-20"), then "  ... (M more)"; a patient's answer is cut to 1,500 characters; a created resource
is one line ("MedicationRequest created: id=... status=active"); anything else is its JSON. Every observation is
then cut to 4,000 characters, saying how long it was.
"""
from __future__ import annotations

import json

MAX_ENTRIES = 15
MAX_CHARS = 4000
PATIENT_CHARS = 1500
CREATED = ("MedicationRequest", "ServiceRequest", "Flag")


def _text(value) -> str:
    return (value or {}).get("text", "") if isinstance(value, dict) else ""


def _observation(r: dict) -> str:
    code, quantity = _text(r.get("code")) or "", r.get("valueQuantity") or {}
    value, unit = quantity.get("value", ""), quantity.get("unit", "")
    date = (r.get("effectiveDateTime") or r.get("issued") or "")[:10]
    interp = ""
    if r.get("interpretation"):
        coding = (r["interpretation"][0].get("coding") or [{}])[0]
        interp = f" ({coding.get('display') or coding.get('code') or ''})"
    value_str = r.get("valueString") or (r.get("valueCodeableConcept") or {}).get("text", "")
    if value != "":
        return f"  - {code}: {value} {unit}{interp} @ {date}"
    if value_str:
        return f"  - {code}: {value_str}{interp} @ {date}"
    return f"  - {code} @ {date}"


def _medication_request(r: dict) -> str:
    dose = (r.get("dosageInstruction") or [{}])[0].get("text", "")
    return f"  - {_text(r.get('medicationCodeableConcept'))} [{r.get('status', '')}]: {dose} @ " \
           f"{(r.get('authoredOn') or '')[:10]}"


def _medication_administration(r: dict) -> str:
    dosage = r.get("dosage") or {}
    quantity = dosage.get("dose") or {}
    dose = dosage.get("text") or f"{quantity.get('value', '')} {quantity.get('unit', '')}"
    return f"  - {_text(r.get('medicationCodeableConcept'))}: {dose} @ {(r.get('effectiveDateTime') or '')[:16]}"


def _condition(r: dict) -> str:
    status = r.get("clinicalStatus") or {}
    clinical = status.get("text") or ((status.get("coding", [{}]) or [{}])[0].get("code", ""))
    return f"  - {_text(r.get('code'))} [{clinical}] @ {(r.get('recordedDate') or '')[:10]}"


def _diagnostic_report(r: dict) -> str:
    head = f"  - {_text(r.get('code'))} @ {(r.get('effectiveDateTime') or '')[:10]}"
    text = next((p["data"] for p in r.get("presentedForm") or [] if isinstance(p.get("data"), str)), "")
    conclusion = r.get("conclusion") or text
    return f"{head}: {conclusion[:600]}" if conclusion else head


def _encounter(r: dict) -> str:
    kind = (r.get("type") or [{}])[0].get("text", "") if r.get("type") else ""
    period = r.get("period") or {}
    disposition = next((h.get("display", "") or h.get("code", "") for h in
                        r.get("hospitalization", {}).get("dischargeDisposition", {}).get("coding", [])), "")
    return f"  - {(r.get('class') or {}).get('code', '')} {kind} {(period.get('start') or '')[:10]}\u2013" \
           f"{(period.get('end') or '')[:10]} {disposition}"


def _allergy(r: dict) -> str:
    reactions = [m.get("text", "") for rx in r.get("reaction") or [] for m in rx.get("manifestation") or []]
    return f"  - {_text(r.get('code'))} [{r.get('criticality', '')}]: {', '.join(reactions)}"


def _procedure(r: dict) -> str:
    return f"  - {_text(r.get('code'))} [{r.get('status', '')}] @ {(r.get('performedDateTime') or '')[:10]}"


def _care_plan(r: dict) -> str:
    category = (r.get("category") or [{}])[0].get("text", "") if r.get("category") else ""
    return f"  - {r.get('title') or category} [{r.get('status', '')}]"


def _document(r: dict) -> str:
    head = f"  - {_text(r.get('type'))} @ {(r.get('date') or '')[:10]}"
    text = next((c["attachment"]["data"] for c in r.get("content") or []
                 if (c.get("attachment") or {}).get("data")), "")
    return f"{head}: {text[:800]}" if text else head


LINES = {"Observation": _observation, "MedicationRequest": _medication_request,
         "MedicationAdministration": _medication_administration, "Condition": _condition,
         "DiagnosticReport": _diagnostic_report, "Encounter": _encounter, "AllergyIntolerance": _allergy,
         "Procedure": _procedure, "CarePlan": _care_plan, "DocumentReference": _document}


def compact_bundle(bundle: dict) -> str:
    entries = bundle.get("entry", []) or []
    total = bundle.get("total", len(entries))
    if not entries:
        return "(0 results)"
    lines = [f"({total} results)"]
    for entry in entries[:MAX_ENTRIES]:
        r = entry.get("resource", {}) or {}
        kind = r.get("resourceType", "")
        lines.append(LINES[kind](r) if kind in LINES else f"  - {kind}: {json.dumps(r, default=str)[:200]}")
    if total > MAX_ENTRIES:
        lines.append(f"  ... ({total - MAX_ENTRIES} more)")
    return "\n".join(lines)


def compact(observation) -> str:
    """A tool's result as the model sees it, at most 4,000 characters (and the note of how long it was)."""
    if isinstance(observation, dict) and observation.get("resourceType") == "Bundle":
        text = compact_bundle(observation)
    elif isinstance(observation, dict) and "patient_response" in observation:
        text = str(observation.get("patient_response", ""))[:PATIENT_CHARS]
    elif isinstance(observation, dict) and observation.get("resourceType") in CREATED:
        text = f'{observation["resourceType"]} created: id={observation.get("id", "")} ' \
               f'status={observation.get("status", "")}'
    else:
        text = json.dumps(observation, ensure_ascii=False, default=str)
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS] + f"\n... [truncated: {len(text)} chars total]"
    return text
