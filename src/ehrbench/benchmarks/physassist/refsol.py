"""MedAgentBench's graders (`refsol.py`: one function per category) on ehrbench's stored references.

A task passes only when the agent ended with FINISH (an invalid action or the round limit fails it); the answer is
`json.loads` of what is inside FINISH(...). An order counts when the server accepted it (the next message says so),
read as the original's `extract_posts` reads the agent's raw reply: the url is its first line after "POST", the
payload the JSON of the lines after it; a reply it cannot read so (a POST inside ``` fences, which the harness
accepted once it had stripped them) counts as no order. Its url must be `{base}<Resource>` exactly. "No order"
means no agent message with POST in it at all, accepted or not (its `check_has_post`). Where the original re-queries its FHIR
server for the truth, the reference stored with the task (computed through the same searches at authoring) stands
in. Each check's failure is named (the trial's `medagent/why`).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta

from ...trial import TrialRecord
from .medagent import API_BASE, POST_OK, MedTask


def finish_answer(record: TrialRecord):
    """(finished, answer): the final message's FINISH list, as the original parses it."""
    finals = [m["content"] or "" for m in record.messages if m["role"] == "assistant" and not m.get("tool_call")]
    text = finals[-1] if finals else ""
    if not text.startswith("FINISH("):
        return False, None
    try:
        return True, json.loads(text[len("FINISH("):-1])
    except json.JSONDecodeError:
        return True, None


def has_post(record: TrialRecord) -> bool:
    """The original's `check_has_post`: any agent message with "POST" in it, accepted or not."""
    return any("POST" in (m.get("content") or "") for m in record.messages if m["role"] == "assistant")


def accepted_posts(record: TrialRecord) -> list[tuple[str, dict]]:
    """The original's `extract_posts`, on the raw replies (fences and all)."""
    out, messages = [], record.messages
    for i, m in enumerate(messages):
        text = m.get("content") or ""
        if m["role"] != "assistant" or "POST" not in text or i + 1 >= len(messages) or \
                POST_OK[:21] not in str(messages[i + 1].get("content") or ""):
            continue
        lines = text.split("\n")
        try:
            out.append((lines[0][4:].strip(), json.loads("\n".join(lines[1:]))))
        except json.JSONDecodeError:          # the original's except: this POST is not counted
            continue
    return out


class Fail(Exception):
    pass


def _check(condition: bool, why: str) -> None:
    if not condition:
        raise Fail(why)


def _url(url: str, resource: str) -> bool:
    return url == f"{API_BASE}{resource}"


def _subject(payload: dict, mrn) -> None:
    _check(payload.get("subject") == {"reference": f"Patient/{mrn}"}, f"subject is {payload.get('subject')}")


def _order(payload: dict, mrn) -> None:
    _check(payload.get("status") == "active", f"status {payload.get('status')!r}")
    _check(payload.get("intent") == "order", f"intent {payload.get('intent')!r}")
    _subject(payload, mrn)


def _coding(payload: dict, key: str, system: str, code: str) -> None:
    coding = ((payload.get(key) or {}).get("coding") or [{}])[0]
    _check(coding.get("system") == system and coding.get("code") == code, f"{key} coding {coding}")


def _answer_is(answer, expected) -> None:
    _check(answer == expected, f"answer {answer!r}, expected {expected!r}")


def grade(task: MedTask, record: TrialRecord) -> tuple[bool, str]:
    """(passed, why) by the category's refsol rule."""
    finished, answer = finish_answer(record)
    if not finished:
        return False, "no FINISH (invalid action or round limit)"
    posts, ref, mrn, now = accepted_posts(record), task.ref["answer"], task.mrn, task.now
    try:
        category = task.category
        if category in ("task1", "task2", "task4", "task7"):
            _check(not has_post(record), "a POST where none was asked for")
            _answer_is(answer, ref)
        elif category == "task6":
            _check(not has_post(record), "a POST where none was asked for")
            _check(isinstance(answer, list) and len(answer) == 1 and isinstance(answer[0], (int, float))
                   and abs(answer[0] - ref[0]) < 0.1, f"answer {answer!r}, expected about {ref}")
        elif category == "task3":
            _check(len(posts) == 1, f"{len(posts)} POSTs, expected 1")
            url, p = posts[0]
            _check(_url(url, "Observation"), f"POST to {url}")
            _check(p.get("resourceType") == "Observation", "resourceType")
            category = p.get("category") or []
            _check(len(category) == 1 and len(category[0]["coding"]) == 1 and category[0]["coding"][0] == {
                "system": "http://hl7.org/fhir/observation-category", "code": "vital-signs",
                "display": "Vital Signs"}, "category")
            _check(p.get("code") == {"text": "BP"}, f"code {p.get('code')}")
            _check(p.get("effectiveDateTime") == now, f"effectiveDateTime {p.get('effectiveDateTime')!r}")
            _check(p.get("status") == "final" and p.get("valueString") == "118/77 mmHg", "status or valueString")
            _subject(p, mrn)
        elif category == "task5":
            v = ref[0] if ref != [-1] else None
            if v is None:                    # the original: no result in 24 h, no POST: passed, whatever the answer
                _check(not has_post(record), "an order where no result was recorded")
                return True, "passed"
            if v > 1.9:
                _check(not has_post(record), "an order where none was due")
            else:
                _check(len(posts) == 1, f"{len(posts)} POSTs, expected 1")
                url, p = posts[0]
                _check(_url(url, "MedicationRequest"), f"POST to {url}")
                _coding(p, "medicationCodeableConcept", "http://hl7.org/fhir/sid/ndc", "0338-1715-40")
                _check(now[:16] in str(p.get("authoredOn", "")), f"authoredOn {p.get('authoredOn')!r}")
                dosage = (p.get("dosageInstruction") or [{}])[0]
                _check(dosage.get("route") == "IV", f"route {dosage.get('route')!r}")
                dose = 4 if v < 1 else 2 if v < 1.5 else 1
                rate = (dosage.get("doseAndRate") or [{}])[0]
                _check(rate.get("doseQuantity") == {"value": dose, "unit": "g"} and
                       rate.get("rateQuantity") == {"value": dose, "unit": "h"}, f"doseAndRate {rate}")
                _order(p, mrn)
            _check(answer in (ref, []), f"answer {answer!r}, expected {ref} or []")
        elif category == "task8":
            _check(len(posts) == 1, f"{len(posts)} POSTs, expected 1")
            url, p = posts[0]
            _check(_url(url, "ServiceRequest"), f"POST to {url}")
            _coding(p, "code", "http://snomed.info/sct", "306181000000106")
            _check(p.get("authoredOn") == now and p.get("priority") == "stat", "authoredOn or priority")
            from .medagent import SBAR

            _check(SBAR in str((p.get("note") or {}).get("text", "")), "the SBAR text is not in note.text")
            _order(p, mrn)
        elif category == "task9":
            v = ref[0] if ref != [-1] else None
            if v is None or v >= 3.5:
                _check(not has_post(record), "an order where none was due")
            else:
                _check(len(posts) == 2, f"{len(posts)} POSTs, expected 2")
                (url, p), (url2, p2) = posts
                _check(_url(url, "MedicationRequest"), f"first POST to {url}")
                _coding(p, "medicationCodeableConcept", "http://hl7.org/fhir/sid/ndc", "40032-917-01")
                _check(now[:16] in str(p.get("authoredOn", "")), f"authoredOn {p.get('authoredOn')!r}")
                dosage = (p.get("dosageInstruction") or [{}])[0]
                _check(str(dosage.get("route", "")).lower().strip() == "oral", f"route {dosage.get('route')!r}")
                dose = ((dosage.get("doseAndRate") or [{}])[0]).get("doseQuantity") or {}
                _check(abs(dose["value"] - (3.5 - v) / 0.1 * 10) <= 0.1 and dose.get("unit") == "mEq",
                       f"doseQuantity {dose}")              # a string dose: the original's TypeError, a failure
                _order(p, mrn)
                _check(_url(url2, "ServiceRequest"), f"second POST to {url2}")
                _coding(p2, "code", "http://loinc.org", "2823-3")
                _check(p2.get("authoredOn") == now and p2.get("priority") == "stat", "authoredOn or priority")
                _order(p2, mrn)
                tomorrow = (datetime.fromisoformat(now.replace("+00:00", "")) + timedelta(days=1)).strftime("%Y-%m-%d")
                _check(f"{tomorrow}T08:" in str(p2.get("occurrenceDateTime", "")),
                       f"occurrenceDateTime {p2.get('occurrenceDateTime')!r}")
            _check(answer in (ref, []), f"answer {answer!r}, expected {ref} or []")
        elif category == "task10":
            cutoff = (datetime.fromisoformat(now.replace("+00:00", "")) - timedelta(days=365)).strftime(
                "%Y-%m-%dT%H:%M:%S+00:00")
            if ref == [-1] or ref[1] < cutoff:
                _check(len(posts) == 1, f"{len(posts)} POSTs, expected 1")
                url, p = posts[0]
                _check(_url(url, "ServiceRequest"), f"POST to {url}")
                _coding(p, "code", "http://loinc.org", "4548-4")
                _check(p.get("authoredOn") == now and p.get("priority") == "stat", "authoredOn or priority")
                _order(p, mrn)
            else:
                _check(not has_post(record), "an order where none was due")
            _check(answer in (ref, []), f"answer {answer!r}, expected {ref} or []")
        else:
            return False, f"unknown category {category}"
    except Fail as e:
        return False, str(e)
    except (TypeError, ValueError, AttributeError, KeyError) as e:   # the original: an exception is a failure
        return False, f"{type(e).__name__}: {e}"
    return True, "passed"
