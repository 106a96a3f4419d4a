"""A session's tools: FHIR reads from the patient's shard, writes kept with the session, the patient interviewed
through the session's people, `prepare_to_answer`; every result compacted as the original shows it to the model.

`FhirRecords` is one shard of the `records` service: it opens patients' per-patient files (the AgentEHR split of
the MIMIC-IV rendering) as they are asked for and answers searches as plain data, so the records live on the shard
that holds the patient and only result dicts cross the wire.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from ...trial import InfrastructureError
from .adapter import PatientRecord
from .compact import compact
from .fhir import PATIENT_TOOLS, SEARCHES, WRITES, canonical, clean_arguments, run_search, run_write

MAX_OPEN = 4096


class FhirRecords:
    """Patients' records, opened on first use and kept (the least recently used closed beyond `MAX_OPEN`)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.open: OrderedDict[int, PatientRecord] = OrderedDict()
        self.lock = threading.Lock()
        self._population: list[dict] | None = None

    def _record(self, subject_id: int) -> PatientRecord:
        with self.lock:
            record = self.open.get(subject_id)
            if record is not None:
                self.open.move_to_end(subject_id)
                return record
        path = self.folder / f"patient_{int(subject_id)}.db"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such patient file (the run's per-patient split lacks {subject_id})")
        record = PatientRecord(path, self.folder / "reference.db")
        with self.lock:
            self.open[subject_id] = record
            evicted = [self.open.popitem(last=False)[1] for _ in range(max(0, len(self.open) - MAX_OPEN))]
        for old in evicted:                 # closed under its lock: a query running on it finishes first
            old.close()
        return record

    def record(self, subject_id: int) -> PatientRecord | None:
        """A patient's record, None when the world has no such patient."""
        return self._record(subject_id) if (self.folder / f"patient_{int(subject_id)}.db").exists() else None

    def find_patients(self, identifier: str | None, gender: str | None, age) -> list[dict]:
        """Patient resources by identifier, or gender and age (MedAgentBench's Patient search on a world without
        names): the population's Patients are read once."""
        if self._population is None:        # read once, without keeping every patient's record open
            from .adapter import patient

            found = []
            for path in sorted(self.folder.glob("patient_*.db")):
                record = PatientRecord(path, self.folder / "reference.db")
                try:
                    found.append(patient(record))
                finally:
                    record.close()
            self._population = [r for r in found if r]
        out = self._population
        if identifier is not None:
            out = [p for p in out if p["id"] == str(identifier).split("/")[-1]]
        if gender is not None:
            out = [p for p in out if p["gender"] == str(gender).lower()]
        if age is not None:
            out = [p for p in out if str(p.get("_anchor_age")) == str(age)]
        return out

    def medagent_get(self, subject_id: int, resource: str, params: dict, now: str) -> dict:
        """A MedAgentBench GET (`medagent.search`); a bad request comes back as an error for the agent."""
        from .medagent import search

        try:
            return search(self, resource, params, now)
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            return {"error": str(e)}

    def search(self, subject_id: int, name: str, arguments: dict, current_date: str) -> dict:
        """A read tool in the file of the session's patient `subject_id` (a search for another finds nothing)."""
        return run_search(self._record(subject_id), name, arguments, current_date)

    def open_records(self) -> int:
        return len(self.open)


class SessionTools:
    """The 18 tools of one session. Writes are kept here (`writes`): the session's orders, never the record's."""

    def __init__(self, records, subject_id: int, current_date: str, session_id: str, validate_writes: bool = False,
                 original_arguments: bool = True):
        self.records, self.subject_id, self.current_date = records, subject_id, current_date
        self.session_id, self.validate_writes = session_id, validate_writes
        self.original_arguments = original_arguments
        self.people = None
        self.writes: list[dict] = []

    def attach_user(self, people) -> None:
        """The session's people (`patient.SessionPeople`, here or in a UserSimulator actor) answer the interview."""
        self.people = people

    async def call(self, name: str, arguments: dict) -> str:
        return compact(await self.result(canonical(name), arguments if isinstance(arguments, dict) else {}))

    async def result(self, name: str, arguments: dict):
        if name == "prepare_to_answer":
            return {"status": "ready", "answer_type": arguments.get("answer_type", "tool")}
        if name in WRITES:
            created = run_write(name, arguments, self.subject_id, self.current_date, len(self.writes) + 1,
                                self.validate_writes)
            if created.get("resourceType") != "OperationOutcome":
                self.writes.append(created)
            return created
        if name in PATIENT_TOOLS:
            if self.people is None:
                raise InfrastructureError("no simulated patient attached to this session", source="user")
            asked = {**clean_arguments(name, arguments), "subject_id": self.subject_id,
                     "session_id": self.session_id}           # the original overwrites both with the session's
            return {"patient_response": await self.people.answer_tool(name, asked)}
        if name in SEARCHES:
            if self.original_arguments and "subject_id" not in arguments:
                # the original injects no subject_id into EHR tools: Python's signature check refuses the call
                return {"error": f"Bad arguments for {name}: " + (
                    "fhir_patient_read() missing 1 required positional argument: 'subject_id'"
                    if name == "Patient.read" else "missing a required argument: 'subject_id'")}
            return await self.records.search(self.subject_id, name, arguments, self.current_date)
        return {"error": f"Unknown tool: {name}"}

