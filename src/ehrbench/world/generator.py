"""Seeded generator of the synthetic clinical world.

Every patient draws from its own `random.Random(f"{seed}/patient/{index}")`, so a world is a pure function of
(seed, sizes): the same arguments give the same world, and adding patients does not change earlier ones.
Conditions drive everything downstream: they pick the codes, the drugs (one drug per class per patient, so a
patient on a statin stays on the same statin), the procedures, the lab and vital distributions, the cultures.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from .model import (NOW, Admission, CodedEvent, FluidEvent, Hospital, IcuStay, LabEvent, MedicationOrder,
                    MicroEvent, Patient, VitalEvent, World)
from .vocab import Vocabulary, vocabulary

YEAR_START = datetime(2100, 1, 1)


@dataclass(frozen=True)
class WorldSize:
    """How big and how dense a world is. `scale` multiplies the patient counts (1.0 is demo-sized). Vital signs are
    charted every `vitals_every_min` minutes (at the MIMIC site, at the eICU sites) over at most the stay's last
    `vitals_window_h` hours (None: the whole stay); `ehrsql_patients` caps the patients EHRSQL's renderings take
    (the first of the MIMIC site's, of the eICU sites'), as EHRSQL sampled 1,000 per database."""
    mimic_patients: int = 100
    eicu_patients: int = 1700
    eicu_hospitals: int = 24
    scale: float = 1.0
    vitals_every_min: tuple[int, int] = (120, 120)
    vitals_window_h: int | None = 72
    ehrsql_patients: int | None = None

    @property
    def n_mimic(self) -> int:
        return max(1, round(self.mimic_patients * self.scale))

    @property
    def n_eicu(self) -> int:
        return max(0, round(self.eicu_patients * self.scale))


def _weighted(rng: random.Random, table: dict[str, float]) -> str:
    keys = list(table)
    return rng.choices(keys, weights=[table[k] for k in keys], k=1)[0]


def _minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


# Share of patients in the hospital now (MIMIC site; eICU sites, whose ICU census is a smaller share of patients).
CURRENT_SHARE = {True: 0.1, False: 0.05}


class _PatientBuilder:
    """Builds one patient with its own RNG; kept as a class so each step reads as one short method."""

    def __init__(self, vocab: Vocabulary, seed: int, index: int, hospital: int, mimic: bool,
                 size: WorldSize = WorldSize()):
        self.v = vocab
        self.rng = random.Random(f"{seed}/patient/{index}")
        self.seed, self.index, self.hospital, self.mimic = seed, index, hospital, mimic
        self.vitals_every = timedelta(minutes=size.vitals_every_min[0 if mimic else 1])
        self.vitals_window = timedelta(hours=size.vitals_window_h) if size.vitals_window_h else None

    def build(self) -> Patient:
        rng, v = self.rng, self.v
        age0 = int(rng.triangular(18, 91, 70))
        first_admit = YEAR_START + timedelta(days=rng.uniform(0, 362), hours=rng.uniform(0, 23))
        dob = datetime(first_admit.year - age0, rng.randint(1, 12), rng.randint(1, 28))
        older = min(1.6, max(0.5, age0 / 55))
        conditions = [c.key for c in v.conditions.values()
                      if not c.acute and rng.random() < c.prevalence * older]
        drug_choice = {}
        for cls in v.drug_classes:
            drugs = v.drugs_in_class(cls)
            if drugs:
                drug_choice[cls] = rng.choices([d.name for d in drugs],
                                               weights=[3] + [1] * (len(drugs) - 1), k=1)[0]
        patient = Patient(index=self.index, hospital=self.hospital, gender=rng.choice("mf"), dob=dob, dod=None,
                          ethnicity=_weighted(rng, v.hospital["ethnicities"]), conditions=conditions,
                          drug_choice=drug_choice)
        n_adm = rng.choices([1, 2, 3, 4, 5], weights=[35, 25, 18, 12, 10])[0] if self.mimic else \
            rng.choices([1, 2], weights=[85, 15])[0]
        t = first_admit
        for k in range(n_adm):
            los = timedelta(days=rng.uniform(1, 9), hours=rng.uniform(0, 12))
            if t + los > NOW - timedelta(days=1):
                break
            adm = self._admission(patient, _minute(t), _minute(t + los), last=(k == n_adm - 1))
            patient.admissions.append(adm)
            if adm.died:
                patient.dod = adm.discharge.replace(hour=0, minute=0)
                break
            t = adm.discharge + timedelta(days=rng.uniform(5, 120))
        self._current_admission(patient)
        return patient

    def _current_admission(self, p: Patient) -> None:
        """Some patients are in the hospital now: admitted in the last days (a third within the last day), with
        events up to the minute and no discharge yet."""
        rng = self.rng
        if p.dod is not None or rng.random() >= CURRENT_SHARE[self.mimic]:
            return
        hours = rng.uniform(1, 22) if rng.random() < 0.35 else rng.uniform(22, 150)
        admit = _minute(NOW - timedelta(hours=hours))
        if p.admissions and p.admissions[-1].discharge > admit - timedelta(days=2):
            return
        p.admissions.append(self._admission(p, admit, None, last=False))

    # --- one hospital stay -------------------------------------------------------------------------------
    def _admission(self, p: Patient, admit: datetime, discharge: datetime | None, last: bool) -> Admission:
        rng, v, h = self.rng, self.v, self.v.hospital
        acute = [c.key for c in v.conditions.values() if c.acute and rng.random() < c.prevalence * 1.2]
        present = list(dict.fromkeys(p.conditions + acute))
        died = last and rng.random() < (0.12 if {"sepsis", "respiratory failure"} & set(acute) else 0.02)
        destination = "died" if died else _weighted(rng, h["discharge_destinations"])
        adm = Admission(
            admit=admit, discharge=discharge,
            admission_type=_weighted(rng, h["admission_types"]), admit_source=_weighted(rng, h["admit_sources"]),
            discharge_destination=destination if discharge is not None else None,
            insurance=_weighted(rng, h["insurance"]), language=_weighted(rng, h["languages"]),
            marital=None if rng.random() < 0.05 else _weighted(rng, h["marital"]),
            age=admit.year - p.dob.year - ((admit.month, admit.day) < (p.dob.month, p.dob.day)),
            icd_version=rng.choice([9, 10]), died=died)
        for key in present:
            if key in acute or rng.random() < 0.9:
                adm.diagnoses.append(CodedEvent(key, admit))
        coded = {d.key for d in adm.diagnoses}
        self._procedures(adm, coded)
        self._labs(adm, coded, acute)
        self._medications(p, adm, coded)
        self._micro(adm, coded)
        needs_icu = bool({"sepsis", "respiratory failure", "myocardial infarction"} & coded)
        if not self.mimic or needs_icu or rng.random() < 0.35:
            adm.icu_stays.append(self._icu_stay(adm, coded))
        self._wards(adm)
        if not self.mimic and rng.random() < 0.2:
            allergy = h["allergies"]
            adm.allergies.append((rng.choice(allergy["drugs"]), rng.choice(allergy["reactions"])))
        self._tail(adm)
        return adm

    def _during(self, adm: Admission, start_frac: float = 0.0, end_frac: float = 1.0) -> datetime:
        span = (adm.end - adm.admit).total_seconds()
        return _minute(adm.admit + timedelta(seconds=self.rng.uniform(start_frac, end_frac) * span))

    def _procedures(self, adm: Admission, coded: set[str]) -> None:
        for key in sorted(coded):
            for proc, prob in self.v.conditions[key].procedures.items():
                if self.rng.random() < prob:
                    adm.procedures.append(CodedEvent(proc, self._during(adm, 0.05, 0.6)))
        adm.procedures.sort(key=lambda e: (e.time, e.key))

    def _lab_value(self, lab: str, coded: set[str], progress: float) -> float:
        spec = self.v.labs[lab]
        mult = 1.0
        for key in sorted(coded):
            m = self.v.conditions[key].labs.get(lab)
            if m == "rising":
                mult *= 1.3 + 2.2 * progress
            elif m is not None:
                mult *= float(m)
        value = self.rng.gauss(spec["mean"] * mult, spec["sd"] * max(1.0, mult ** 0.5))
        return round(max(value, spec["mean"] * 0.05), spec["decimals"])

    def _labs(self, adm: Admission, coded: set[str], acute: list[str]) -> None:
        rng, v = self.rng, self.v
        days = max(1, min(8, (adm.end - adm.admit).days + 1))
        first_day = max(0, (adm.end - adm.admit).days + 1 - days)     # the latest days of a long current stay
        extra = {lab for key in coded for lab in v.conditions[key].labs}
        for lab in v.labs:
            if lab in v.routine_labs:
                draws = days if rng.random() < 0.95 else 0
            elif lab in extra:
                draws = rng.randint(1, 3)
            else:
                draws = 1 if rng.random() < 0.12 else 0
            for d in range(draws):
                t = adm.admit + timedelta(days=first_day + d, hours=rng.uniform(1, 20))
                if t >= adm.end:
                    t = adm.end - timedelta(hours=rng.uniform(0.5, 3))
                adm.labs.append(LabEvent(lab, _minute(t), self._lab_value(lab, coded, d / max(1, days - 1))))
        adm.labs.sort(key=lambda e: (e.time, e.lab))

    def _medications(self, p: Patient, adm: Admission, coded: set[str]) -> None:
        rng, v = self.rng, self.v
        wanted: list[str] = [d for d in v.routine_drugs if rng.random() < 0.5]
        for key in sorted(coded):
            classes = v.conditions[key].drug_classes
            for rank, cls in enumerate(classes):
                if rng.random() < (0.75 if rank == 0 else 0.3):
                    wanted.append(p.drug_choice[cls])
        for name in dict.fromkeys(wanted):
            drug = v.drugs[name]
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                start = self._during(adm, 0.0, 0.8).replace(minute=0)
                end = start + timedelta(hours=rng.choice([12, 24, 36, 48, 72, 96]))
                end = end if adm.current else min(adm.discharge, end)     # a current order may run past now
                adm.medications.append(MedicationOrder(name, start, _minute(end), rng.choice(drug.doses)))
        adm.medications.sort(key=lambda m: (m.start, m.drug))

    def _micro(self, adm: Admission, coded: set[str]) -> None:
        rng = self.rng
        kinds = [self.v.conditions[k].micro for k in sorted(coded) if self.v.conditions[k].micro]
        if rng.random() < 0.15:
            kinds.append("screen")
        for kind in kinds:
            organisms = self.v.micro[kind]["organisms"]
            organism = rng.choice(organisms) if rng.random() < 0.65 else None
            adm.micro.append(MicroEvent(kind, self._during(adm, 0.0, 0.5), organism))

    def _tail(self, adm: Admission) -> None:
        """The long tail (tail.yaml): secondary diagnoses, procedures, drugs and labs drawn independently of the
        conditions, each with its hospital share scaled to the mean count per admission. Its own random stream, so
        the curated world above is the same with or without it."""
        t, rng = self.v.tail, random.Random(f"{self.seed}/tail/{self.index}/{adm.admit:%Y%m%d%H%M}")
        pick = lambda items, kind: [k for k in items if rng.random() < t.share[k] * scale[kind]]  # noqa: E731
        scale = {kind: n / sum(t.share[k] for k in getattr(t, kind)) for kind, n in t.per_admission.items()}
        during = lambda lo, hi: _minute(adm.admit + timedelta(  # noqa: E731
            seconds=rng.uniform(lo, hi) * (adm.end - adm.admit).total_seconds()))
        adm.diagnoses += [CodedEvent(key, adm.admit) for key in pick(t.diagnoses, "diagnoses")]
        adm.procedures += [CodedEvent(key, during(0.05, 0.8)) for key in pick(t.procedures, "procedures")]
        for name in pick(t.drugs, "drugs"):
            drug = t.drugs[name]
            for _ in range(rng.choice([1, 1, 2])):
                start = during(0.0, 0.8).replace(minute=0)
                end = start + timedelta(hours=rng.choice([12, 24, 48, 72]))
                adm.medications.append(MedicationOrder(name, start, end if adm.current else min(adm.discharge, end),
                                                       rng.choice(drug.doses)))
        for key in pick(t.labs, "labs"):
            spec = t.labs[key]
            for _ in range(rng.choice([1, 1, 2, 3])):
                value = max(spec["low"], rng.gauss(spec["mean"], spec["sd"]))
                adm.labs.append(LabEvent(key, during(0.02, 0.98), round(value, spec["decimals"])))
        adm.procedures.sort(key=lambda e: (e.time, e.key))
        adm.medications.sort(key=lambda m: (m.start, m.drug))
        adm.labs.sort(key=lambda e: (e.time, e.lab))

    def _icu_stay(self, adm: Admission, coded: set[str]) -> IcuStay:
        rng, v = self.rng, self.v
        units = v.hospital["icu_units"]
        if "myocardial infarction" in coded or "heart failure" in coded:
            first = units[3]
        elif {"coronary bypass", "cardiac catheterization"} & {e.key for e in adm.procedures}:
            first = units[2]
        else:
            first = rng.choice(units)
        intime = self._during(adm, 0.0, 0.3)
        planned = intime + timedelta(hours=rng.uniform(20, 120))
        if adm.current and (planned > NOW - timedelta(hours=2) or rng.random() < 0.5):
            outtime = None                                   # still in the unit now
        else:
            outtime = _minute(max(min(adm.end - timedelta(hours=2), planned), intime + timedelta(hours=6)))
        stay = IcuStay(first, first if rng.random() < 0.85 else rng.choice(units), intime, outtime,
                       height_cm=round(rng.gauss(170, 9), 0), weight_kg=round(rng.gauss(80, 16), 1))
        end = outtime or NOW
        sick = bool({"sepsis", "respiratory failure"} & coded)
        stay.arterial_line = rng.random() < v.icu_procedures["arterial line"] + (0.35 if sick else 0.0)
        self._vitals(stay, coded, end)
        self._bedside(adm, stay, coded, end)
        self._fluids(stay, coded, end)
        return stay

    def _vitals(self, stay: IcuStay, coded: set[str], end: datetime) -> None:
        """Charted every 2 hours (`WorldSize.vitals_every_min`) over (at most) the last 72 hours of the stay
        (`vitals_window_h`); a current stay up to the minute."""
        rng, v = self.rng, self.v
        vital_mult = {}
        for key in sorted(coded):
            for vit, m in v.conditions[key].vitals.items():
                vital_mult[vit] = vital_mult.get(vit, 1.0) * m
        charted = [k for k, spec in v.vitals.items()
                   if k != "weight" and (stay.arterial_line or not spec.get("arterial"))]
        times = []
        window = self.vitals_window or (end - stay.intime)
        t = stay.intime if stay.outtime is not None else max(stay.intime, end - window)
        window_end = min(end, t + window)
        while t < window_end:
            times.append(t)
            t += self.vitals_every
        if stay.outtime is None:
            times.append(_minute(NOW - timedelta(minutes=rng.uniform(1, 50))))
        for t in times:
            for vit in charted:
                spec = v.vitals[vit]
                mean = spec["mean"] * vital_mult.get(vit, 1.0)
                value = round(rng.gauss(mean, spec["sd"]), spec["decimals"])
                if vit == "spo2":
                    value = min(100.0, value)
                stay.vitals.append(VitalEvent(vit, t, value))
        stay.vitals.append(VitalEvent("weight", stay.intime, stay.weight_kg))

    def _bedside(self, adm: Admission, stay: IcuStay, coded: set[str], end: datetime) -> None:
        """The ICU's everyday layer, whatever the diagnoses: lines, taps and scopes, sedation, analgesia, cover."""
        rng, v = self.rng, self.v
        span = max(60.0, (end - stay.intime).total_seconds())
        at = lambda: _minute(stay.intime + timedelta(seconds=rng.uniform(0.02, 0.9) * span))  # noqa: E731
        if stay.arterial_line:
            adm.procedures.append(CodedEvent("arterial line", _minute(stay.intime + timedelta(minutes=40))))
        for key, prob in v.icu_procedures.items():
            if key != "arterial line" and rng.random() < prob:
                adm.procedures.append(CodedEvent(key, at()))
        adm.procedures.sort(key=lambda e: (e.time, e.key))
        for name, prob in v.icu_drugs.items():
            if rng.random() < prob:
                start = at().replace(minute=0)
                stop = start + timedelta(hours=rng.choice([6, 12, 24, 48]))
                stop = stop if adm.current else min(adm.end, stop)
                adm.medications.append(MedicationOrder(name, start, _minute(stop), rng.choice(v.drugs[name].doses)))
        adm.medications.sort(key=lambda m: (m.start, m.drug))

    def _fluids(self, stay: IcuStay, coded: set[str], end: datetime) -> None:
        rng, v = self.rng, self.v
        drips = ["nacl", "d5w", "lr", "kcl", "po_intake"]
        if "sepsis" in coded:
            drips.append("norepinephrine")
        if "respiratory failure" in coded:
            drips += ["propofol", "fentanyl", "midazolam"]
        if {"gastrointestinal bleeding", "sepsis"} & coded:
            drips.append("albumin")
        if {"pulmonary embolism", "deep vein thrombosis"} & coded or rng.random() < 0.05:
            drips.append("heparin drip")
        if (end - stay.intime) > timedelta(hours=48) and rng.random() < 0.5:
            drips.append("enteral")
        t = stay.intime + timedelta(hours=1)
        while t < end:
            item = rng.choice(drips)
            spec = v.inputs[item]
            stay.fluids.append(FluidEvent(item, t, round(max(5.0, rng.gauss(spec["mean"], spec["sd"])), 0), "intake"))
            out = "foley" if rng.random() < 0.7 else rng.choice(["void", "stool", "chest_tube"])
            spec = v.outputs[out]
            if t + timedelta(minutes=30) < end:
                stay.fluids.append(FluidEvent(out, t + timedelta(minutes=30),
                                              round(max(5.0, rng.gauss(spec["mean"], spec["sd"])), 0), "output"))
            t += timedelta(hours=rng.choice([3, 4, 6]))
        # Blood products, as units given when the patient bleeds or is anaemic (and now and then otherwise).
        span = max(60.0, (end - stay.intime).total_seconds())
        bleeding = {"gastrointestinal bleeding", "anemia"} & coded
        for item, prob in (("prbc", 0.7 if bleeding else 0.12), ("ffp", 0.3 if "gastrointestinal bleeding" in coded
                                                                else 0.05),
                           ("platelets", 0.25 if "sepsis" in coded else 0.04), ("cryo", 0.02)):
            if rng.random() < prob:
                for _ in range(rng.choice([1, 1, 2, 3])):
                    spec = v.inputs[item]
                    when = _minute(stay.intime + timedelta(seconds=rng.uniform(0.05, 0.95) * span))
                    stay.fluids.append(FluidEvent(item, when, round(rng.gauss(spec["mean"], spec["sd"]), 0), "intake"))
        stay.fluids.sort(key=lambda f: (f.time, f.item))

    def _wards(self, adm: Admission) -> None:
        rng, wards = self.rng, self.v.hospital["wards"]
        if adm.admit_source == "emergency room":
            leave = _minute(adm.admit + timedelta(hours=rng.uniform(2, 8)))
            adm.wards.append(("emergency department", adm.admit, leave if leave < adm.end else None))
        if adm.icu_stays and adm.icu_stays[-1].outtime is None:
            return                                       # still in the ICU: no ward stay after it yet
        if adm.wards and adm.wards[-1][2] is None:
            return                                       # still in the emergency department
        ward = rng.choice(wards)
        start = adm.icu_stays[-1].outtime if adm.icu_stays else (adm.wards[-1][2] if adm.wards else adm.admit)
        adm.wards.append((ward, _minute(start), adm.discharge))


def hospitals(seed: int, size: WorldSize) -> list[Hospital]:
    """Hospital 0 (the MIMIC site) and the eICU sites, drawn from their own RNG."""
    h = vocabulary().hospital
    rng = random.Random(f"{seed}/hospitals")
    return [Hospital(i, rng.choice(h["eicu_regions"]), rng.choice(h["eicu_bed_categories"]), rng.random() < 0.3)
            for i in range(size.eicu_hospitals + 1)]


def generate_patients(seed: int, size: WorldSize, start: int = 0, stop: int | None = None) -> list[Patient]:
    """Patients `start` to `stop` (exclusive) of the world: indices below `n_mimic` are MIMIC-site patients, the rest
    eICU patients. Each depends only on (seed, index, size), so any chunk can be built anywhere, in any order."""
    v = vocabulary()
    stop = size.n_mimic + size.n_eicu if stop is None else stop
    patients = []
    for i in range(start, stop):
        if i < size.n_mimic:
            patients.append(_PatientBuilder(v, seed, i, 0, mimic=True, size=size).build())
        else:
            hosp = 1 + random.Random(f"{seed}/site/{i}").randrange(size.eicu_hospitals)
            patients.append(_PatientBuilder(v, seed, i, hosp, mimic=False, size=size).build())
    return patients


def generate_world(seed: int = 0, size: WorldSize = WorldSize()) -> World:
    """The whole world for one seed, in memory: hospital 0 (the MIMIC site, `n_mimic` patients) and the eICU sites.
    Databases are built in patient chunks instead (`schemas.build`); this is for tests and small probes."""
    return World(seed=seed, hospitals=hospitals(seed, size), patients=generate_patients(seed, size))
