"""The world's entities, schema-neutral: what happened to whom and when. Renderers turn them into tables."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

NOW = datetime(2100, 12, 31, 23, 59, 0)       # the benchmark's present; questions say "today" of it


@dataclass
class LabEvent:
    lab: str            # key of items.yaml labs
    time: datetime
    value: float


@dataclass
class VitalEvent:
    vital: str          # key of items.yaml vitals
    time: datetime
    value: float


@dataclass
class MedicationOrder:
    drug: str           # key of drugs.yaml drugs (the generic)
    start: datetime
    end: datetime
    dose: float


@dataclass
class FluidEvent:
    item: str           # key of items.yaml inputs or outputs
    time: datetime
    amount: float
    direction: str      # "intake" | "output"


@dataclass
class MicroEvent:
    kind: str           # key of items.yaml micro
    time: datetime
    organism: str | None


@dataclass
class CodedEvent:
    key: str            # condition or procedure key
    time: datetime


@dataclass
class IcuStay:
    first_unit: str
    last_unit: str
    intime: datetime
    outtime: datetime | None            # None: still in the unit now
    vitals: list[VitalEvent] = field(default_factory=list)
    fluids: list[FluidEvent] = field(default_factory=list)
    height_cm: float = 170.0
    weight_kg: float = 80.0
    arterial_line: bool = False         # invasive arterial pressure is charted


@dataclass
class Admission:
    admit: datetime
    discharge: datetime | None          # None: still in the hospital now
    admission_type: str
    admit_source: str
    discharge_destination: str | None
    insurance: str
    language: str
    marital: str | None
    age: int
    icd_version: int                    # 9 or 10: the coding system in force for this stay
    died: bool = False
    diagnoses: list[CodedEvent] = field(default_factory=list)
    procedures: list[CodedEvent] = field(default_factory=list)
    labs: list[LabEvent] = field(default_factory=list)
    medications: list[MedicationOrder] = field(default_factory=list)
    micro: list[MicroEvent] = field(default_factory=list)
    icu_stays: list[IcuStay] = field(default_factory=list)
    wards: list[tuple[str, datetime, datetime | None]] = field(default_factory=list)
    allergies: list[tuple[str, str]] = field(default_factory=list)

    @property
    def current(self) -> bool:
        return self.discharge is None

    @property
    def end(self) -> datetime:
        """When the stay's record ends: the discharge, or now for a patient still in the hospital."""
        return self.discharge or NOW


@dataclass
class Patient:
    index: int
    hospital: int                       # 0 is the MIMIC site; every hospital is an eICU site
    gender: str                         # "m" | "f"
    dob: datetime
    dod: datetime | None
    ethnicity: str
    conditions: list[str]               # chronic conditions, present at every admission
    drug_choice: dict[str, str]         # drug class -> the drug this patient gets from it
    admissions: list[Admission] = field(default_factory=list)


@dataclass
class Hospital:
    index: int
    region: str
    bed_category: str
    teaching: bool


@dataclass
class World:
    seed: int
    hospitals: list[Hospital]
    patients: list[Patient]

    def mimic_patients(self) -> list[Patient]:
        return [p for p in self.patients if p.hospital == 0]
