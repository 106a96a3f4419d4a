"""Write ehrbench's PhysAssistBench sessions from the world, in the original's session format.

    python -m ehrbench.benchmarks.physassist.authoring --out data/tasks/physassist [--seed 0 --scale 2 --per-cell 9]

Each session is one patient's last admission, seen on its discharge day (`current_date`), four dependent turns
along one of the original's 27 arcs (`pipeline/sequences.py`: T0 Information Lookup; T1-T2 lookup, data gathering
or clinical reasoning; T3 data gathering, reasoning or write/update; tier 2 needs DG or CR in T1-T2, tier 3 CR).
The tier is the original's per-scenario qualification (`pipeline/patient_prefilter.py`, `qualifies`): what the
admission holds for the scenario at that level (drug-lab pairs, infection markers and antibiotics, drug, diagnosis
and lab counts, organ systems and reports); L1 asks no formula, L2-L3 reason with one where it applies
(CHA2DS2-VASc, Cockcroft-Gault). Every value in a question, answer or rubric item is read through the FHIR tools
themselves (`fhir.run_search`, date_to bounded), so what the agent can find is what the gold says. T1-T3 questions
are implicit (nominal anaphora "it", predicate ellipsis "And ...?", abstract event anaphora "Given that, ...") with
explicit paraphrases; the subtype is the feasible one used least so far (a turn about a new subject can only be
"Given that, ..."). Each rubric item carries its check (`grading.CHECKS`). The patient's answers
(`patient_answers`) come from `patient_model`: facts from the record and a persona derived by rules (`persona`),
checked against the record; a poor-adherence, critical_withheld patient admits to stopping a drug only when asked
about it by name.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
from collections import Counter, defaultdict
from datetime import date, datetime
from itertools import product
from pathlib import Path

from .adapter import PatientRecord
from . import patient_model
from .fhir import SCHEMAS, run_search
from .tasks import SCENARIOS

DOMAINS = {"diagnostic_workup": "LabInterp", "med_safety": "MedRecon", "treatment_response": "ICUReasoning",
           "discharge_planning": "MedRecon"}
IL, DG, CR, WU = "Information Lookup", "Data Gathering", "Clinical Reasoning", "Write/Update"
ARCS = [(IL, a, b, c) for a, b in product([IL, DG, CR], repeat=2) for c in [DG, CR, WU]]
LABS = ("Potassium", "Sodium", "Creatinine", "Glucose", "Magnesium", "Hemoglobin", "Platelet Count",
        "Bicarbonate", "Urea Nitrogen", "White Blood Cells")
SAFETY = {("Potassium", "high"): ["potassium chloride", "potassium supplement"],
          ("Potassium", "low"): ["kayexalate", "patiromer", "polystyrene"],
          ("Sodium", "high"): ["hypertonic saline", "3% saline"], ("Sodium", "low"): ["free water bolus"],
          ("Creatinine", "high"): ["nsaid", "ibuprofen", "ketorolac"],
          ("Glucose", "high"): ["dextrose", "d50"], ("Glucose", "low"): ["insulin bolus", "increase the insulin"],
          ("Magnesium", "high"): ["magnesium sulfate", "magnesium oxide"],
          ("Platelet Count", "low"): ["start enoxaparin", "increase heparin"]}
DRUG_LAB = {"Lisinopril": "Potassium", "Furosemide": "Potassium", "Potassium chloride": "Potassium",
            "Metformin": "Creatinine", "Enoxaparin sodium": "Creatinine", "Heparin": "Platelet Count",
            "Aspirin": "Platelet Count", "Insulin": "Glucose", "Pantoprazole": "Magnesium",
            "Atorvastatin": "Creatinine"}
ROUTES = {"PO": ["po", "oral", "by mouth", "orally"], "SC": ["sc", "subcut", "subq", "subcutaneous", "sq"],
          "IV": ["iv", "intravenous", "intravenously"]}
FREQUENCY = {1: ("once daily", ["once daily", "daily", "qd", "q24h", "once a day", "every 24 hours"]),
             2: ("BID", ["bid", "twice daily", "q12h", "twice a day", "every 12 hours"]),
             3: ("TID", ["tid", "three times daily", "q8h", "three times a day", "every 8 hours"]),
             4: ("QID", ["qid", "four times daily", "q6h", "four times a day", "every 6 hours"])}
SERVICES = {"HOME HEALTH CARE": "home-health", "REHAB": "physical-therapy", "SKILLED NURSING FACILITY":
            "physical-therapy", "HOME": "primary-care-followup", "CHRONIC/LONG TERM ACUTE CARE": "social-work"}
WORDS = {"high": ["high", "elevated", "above"], "low": ["low", "below", "decreased"], "normal": ["normal", "within"]}


# CHA2DS2-VASc's conditions by ICD-10 / ICD-9 prefix (Lip et al. 2010), read from Condition.search
CHADS_CONDITIONS = (("congestive heart failure", 1, ("I50", "428")), ("hypertension", 1, ("I10", "I11", "I12", "I13",
                                                                                          "I15", "401", "402", "403",
                                                                                          "404", "405")),
                    ("diabetes", 1, ("E10", "E11", "E13", "250")),
                    ("prior stroke or TIA", 2, ("I63", "I64", "G45", "434", "435", "436")),
                    ("vascular disease", 1, ("I21", "I22", "I252", "I70", "410", "412", "440")))
AF = ("I48", "42731")
SEPSIS, PNEUMONIA = ("A40", "A41", "R652", "038", "99591", "99592"), ("J12", "J13", "J14", "J15", "J18", "480",
                                                                      "481", "482", "486")
ANTICOAGULANTS = ("warfarin", "apixaban", "rivaroxaban", "dabigatran", "edoxaban", "enoxaparin", "heparin")
ANTIBIOTIC_CLASSES = {"penicillin": ("cillin",), "cephalosporin": ("cef",), "glycopeptide": ("vancomycin",),
                      "fluoroquinolone": ("floxacin",), "carbapenem": ("penem",), "macrolide": ("azithro", "erythro"),
                      "nitroimidazole": ("metronidazole",), "sulfonamide": ("sulfameth",),
                      "lincosamide": ("clindamycin",), "lipopeptide": ("daptomycin",), "aminoglycoside": ("tobramycin",)}
# The world's admissions hold fewer orders, codes and lab rows than MIMIC-IV's: at the original's discharge-planning
# counts (L3: 30 drugs, 18 diagnoses, 150 lab rows) none of the default world's 174 last admissions qualifies for L3;
# at 0.7 of them, 19 do. The counts are compared at this scale; every other rule is the original's as written.
DISCHARGE_COUNT_SCALE = 0.7
# the organ systems a diagnostic work-up's labs span (the original's _LAB_SYSTEMS, by d_labitems label)
LAB_SYSTEMS = {"hematologic": ("Hemoglobin", "Platelet Count", "White Blood Cells", "Hematocrit"),
               "renal": ("Creatinine", "Urea Nitrogen"),
               "hepatic": ("Bilirubin, Total", "Alanine Aminotransferase (ALT)", "Asparate Aminotransferase (AST)",
                           "Albumin", "Alkaline Phosphatase"),
               "metabolic": ("Sodium", "Potassium", "Glucose", "Bicarbonate", "Magnesium"),
               "coagulation": ("INR(PT)", "PT", "PTT"), "inflammatory": ("C-Reactive Protein", "Lactate"),
               "cardiac": ("Troponin T", "Troponin I", "Ntprobnp", "Creatine Kinase, Mb Isoenzyme")}


# the 18 tools in the session file, as the original's files carry them (without them its harness offers none)
SESSION_TOOLS = [{"type": "function", "function": schema} for schema in SCHEMAS]


def _num(x: float):
    return int(x) if float(x).is_integer() else round(float(x), 2)


def _item(text: str, check: dict | None) -> tuple[str, dict | None]:
    return text, check


class Context:
    """One candidate session's facts, read through the FHIR tools."""

    def __init__(self, record: PatientRecord, admission: dict, rng: random.Random):
        self.record, self.rng = record, rng
        self.subject, self.hadm = record.subject_id, int(admission["hadm_id"])
        self.date = str(admission["dischtime"])[:10]
        self.admission = admission
        self.labs: dict[str, list[dict]] = {}
        for lab in LABS:
            args = {"subject_id": self.subject, "hadm_id": self.hadm, "category": "laboratory", "code": lab,
                    "_count": 50}
            found = run_search(record, "Observation.search", args, self.date)
            rows = [e["resource"] for e in found.get("entry", []) if e["resource"]["code"]["text"] == lab
                    and "valueQuantity" in e["resource"] and e["resource"].get("referenceRange")]
            if rows:
                self.labs[lab] = rows           # newest first
        self.richness = len(record.rows("SELECT 1 FROM labevents WHERE hadm_id = ? AND charttime <= ?",
                                        (self.hadm, self.date)))
        self.lab_labels = Counter(r["label"] for r in record.rows(
            "SELECT d.label FROM labevents l JOIN ref.d_labitems d USING (itemid) WHERE l.hadm_id = ? "
            "AND l.charttime <= ?", (self.hadm, self.date)))
        self.ordered = {str(r["drug"]).lower() for r in record.rows(
            "SELECT DISTINCT drug FROM prescriptions WHERE hadm_id = ?", (self.hadm,))}
        self.coded = [str(r["icd_code"]) for r in record.rows("SELECT icd_code FROM diagnoses_icd WHERE hadm_id = ?",
                                                              (self.hadm,))]
        self.reports = len(record.rows("SELECT 1 FROM radiology WHERE hadm_id = ?", (self.hadm,)))
        self.drugs = self._drugs()
        self.persona = persona(record, admission)
        found = run_search(record, "Condition.search", {"subject_id": self.subject}, self.date)
        self.conditions = sorted({c["code"] for e in found.get("entry", []) for c in
                                  (e["resource"].get("code") or {}).get("coding", [])[:1] if c.get("code")})
        self.patient = run_search(record, "Patient.read", {"subject_id": self.subject}, self.date)

    def qualifies(self, scenario: str, tier: int) -> bool:
        """The original's stage-2 qualification of an admission for a scenario at a level (`patient_prefilter`:
        `_qualify_med_safety`, `_qualify_treatment_response`, `_qualify_discharge_planning`,
        `_qualify_diagnostic_workup`), on what this world records."""
        coded = lambda prefixes: any(c.startswith(prefixes) for c in self.coded)     # noqa: E731
        if scenario == "med_safety":
            pairs = [d for d in self.drugs if DRUG_LAB[d] in self.labs]
            afib = coded(AF) and any(a in d for d in self.ordered for a in ANTICOAGULANTS)
            return bool(self.labs and self.ordered) if tier == 1 else len(pairs) >= 1 if tier == 2 else \
                len(pairs) >= 2 or (afib and len(pairs) >= 1)
        if scenario == "treatment_response":
            wbc = len(self.labs.get("White Blood Cells", []))
            classes = {c for c, keys in ANTIBIOTIC_CLASSES.items() for d in self.ordered if any(k in d for k in keys)}
            sofa = all(self.lab_labels[lab] for lab in ("Platelet Count", "Bilirubin, Total", "Creatinine"))
            return bool(wbc and self.ordered) if tier == 1 else wbc >= 2 and bool(classes) if tier == 2 else \
                wbc >= 3 and len(classes) >= 2 and (sofa or coded(SEPSIS))
        if scenario == "discharge_planning":
            drugs, dx, labs = (n / DISCHARGE_COUNT_SCALE for n in (len(self.ordered), len(self.coded), self.richness))
            return (drugs >= 10 and dx >= 5 and labs > 0) if tier == 1 else \
                (drugs >= 20 and dx >= 12 and labs > 50) if tier == 2 else (drugs >= 30 and dx >= 18 and labs > 150)
        systems = sum(1 for labels in LAB_SYSTEMS.values() if any(self.lab_labels[lab] for lab in labels))
        if tier == 1:
            return systems >= 2 and self.reports >= 1 and len(self.coded) >= 3
        if tier == 2:
            curb = coded(PNEUMONIA) and self.lab_labels["Urea Nitrogen"] > 0
            return (systems >= 3 and self.reports >= 2 and len(self.coded) >= 5) or curb
        return (systems >= 4 and self.reports >= 3 and len(self.coded) >= 8) or (
            coded(SEPSIS) and self.lab_labels["White Blood Cells"] > 0)

    def weight(self) -> tuple[float, str] | None:
        """The newest body weight in kg the vital-sign search shows (ICU charting, else the clinic's, in lbs)."""
        found = run_search(self.record, "Observation.search", {"subject_id": self.subject, "category": "vital-signs",
                                                               "code": "Weight", "_count": 5}, self.date)
        for e in found.get("entry", []):
            r = e["resource"]
            q = r.get("valueQuantity") or {}
            if q.get("unit") == "kg" and q.get("value"):
                return float(q["value"]), r["code"]["text"]
            text = str(r.get("valueString") or "")
            if "Lbs" in r["code"]["text"] and re.fullmatch(r"[\d.]+", text):
                return round(float(text) * 0.45359237, 1), r["code"]["text"]
        return None

    def chads_vasc(self) -> tuple[int, list[str]] | None:
        """CHA2DS2-VASc from what Patient.read and Condition.search show (None without atrial fibrillation)."""
        if not any(c.startswith(AF) for c in self.conditions):
            return None
        age, female = int(self.patient.get("_anchor_age") or 0), self.patient.get("gender") == "female"
        parts = [(name, points) for name, points, prefixes in CHADS_CONDITIONS
                 if any(c.startswith(prefixes) for c in self.conditions)]
        parts += [("age 75 or older", 2)] if age >= 75 else [("age 65-74", 1)] if age >= 65 else []
        parts += [("female sex", 1)] if female else []
        return sum(p for _, p in parts), [name for name, _ in parts]

    def _drugs(self) -> dict[str, dict]:
        out = {}
        for row in self.record.rows("SELECT drug, dose_val_rx, dose_unit_rx, route, doses_per_24_hrs, starttime "
                                    "FROM prescriptions WHERE hadm_id = ? ORDER BY starttime DESC", (self.hadm,)):
            drug = row["drug"]
            if drug in DRUG_LAB and drug not in out and row["route"] in ROUTES and row["dose_unit_rx"]:
                try:
                    dose = float(row["dose_val_rx"])
                except (TypeError, ValueError):
                    continue
                out[drug] = {"dose": _num(dose), "unit": row["dose_unit_rx"], "route": row["route"],
                             "per_day": int(float(row["doses_per_24_hrs"] or 0))}
        return out

    def lab_state(self, lab: str) -> tuple[float, str, float, float, str, str]:
        """(latest value, unit, low, high, class, date) of a lab."""
        o = self.labs[lab][0]
        v, unit = o["valueQuantity"]["value"], o["valueQuantity"]["unit"]
        rr = o["referenceRange"][0]
        lo, hi = rr.get("low", {}).get("value", float("-inf")), rr.get("high", {}).get("value", float("inf"))
        state = "high" if v > hi else "low" if v < lo else "normal"
        return v, unit, lo, hi, state, o["effectiveDateTime"][:10]


def persona(record: PatientRecord, admission: dict) -> dict:
    """The patient persona by rules from the record (documented in docs/benchmarks/physassist.md):
    - health_literacy: low when the admission's language is not English or the patient is 75 or older, medium from
      50, else high;
    - adherence: poor when this admission is a readmission within 30 days of a discharge, else good;
    - anxiety_level: high with an ICU stay in the admission, medium with any abnormal lab in it, else low;
    - info_completeness: critical_withheld when adherence is poor (the patient hides a stopped drug), else full;
    - self_diagnosis: present with two or more earlier admissions (the patient names their own illness)."""
    age = (record.rows("SELECT anchor_age FROM patients") or [{"anchor_age": 60}])[0]["anchor_age"] or 60
    earlier = record.rows("SELECT dischtime FROM admissions WHERE admittime < ? ORDER BY admittime",
                          (admission["admittime"],))
    readmitted = bool(earlier) and earlier[-1]["dischtime"] is not None and (
        datetime.fromisoformat(str(admission["admittime"])) - datetime.fromisoformat(str(earlier[-1]["dischtime"]))
    ).days < 30
    icu = record.rows("SELECT 1 FROM icustays WHERE hadm_id = ? LIMIT 1", (admission["hadm_id"],))
    abnormal = record.rows("SELECT 1 FROM labevents WHERE hadm_id = ? AND flag = 'abnormal' LIMIT 1",
                           (admission["hadm_id"],))
    english = str(admission.get("language") or "ENGLISH").upper() == "ENGLISH"
    return {"health_literacy": "low" if not english or age >= 75 else "medium" if age >= 50 else "high",
            "adherence": "poor" if readmitted else "good",
            "anxiety_level": "high" if icu else "medium" if abnormal else "low",
            "info_completeness": "critical_withheld" if readmitted else "full",
            "self_diagnosis": "present" if len(earlier) >= 2 else "absent"}


class Builder:
    """The turns of one session: each builder returns (type, subtype, question, explicit, source, items, actions,
    answer, what it is about), or None when the record cannot support it; `turn` keeps a question implicit only
    when its "it" has something in the previous turn to refer to."""

    def __init__(self, ctx: Context, scenario: str, rng: random.Random, tier: int = 1, used: Counter | None = None):
        self.ctx, self.scenario, self.rng, self.tier = ctx, scenario, rng, tier
        self.used = Counter(used)                 # subtypes so far: the set's before this session, then its own
        self.drug = next((d for d in ctx.drugs if DRUG_LAB[d] in ctx.labs), None)
        self.lab = self._focus_lab()
        self.others = [lab for lab in ctx.labs if lab != self.lab]
        self.patient_used = False
        self.patient = patient_model.build(ctx, self.drug)
        self.answers = patient_model.answers(self.patient, ctx.persona)
        self.last: str | None = None           # what the previous turn was about: what "it" can refer to
        self.done: set[tuple[str, str]] = set()   # (turn builder, lab) already asked: a repeated type moves on
        self.entities: list[str | None] = []      # what each turn was about: the session's dep_graph

    def _focus_lab(self) -> str | None:
        c = self.ctx
        if self.scenario == "med_safety":
            return DRUG_LAB[self.drug] if self.drug else None
        if self.scenario == "treatment_response":
            trended = [lab for lab in LABS if len(c.labs.get(lab, [])) >= 3]
            return trended[0] if trended else None
        abnormal = [lab for lab in LABS if lab in c.labs and c.lab_state(lab)[4] != "normal"]
        return (abnormal or [lab for lab in LABS if lab in c.labs] or [None])[0]

    def _lab_call(self, lab: str, count: int = 50) -> dict:
        return {"name": "Observation.search", "arguments": {"subject_id": self.ctx.subject, "hadm_id": self.ctx.hadm,
                                                            "category": "laboratory", "code": lab, "_count": count}}

    def lookup(self, first: bool):
        c = self.ctx
        if first and self.scenario == "med_safety":
            d = c.drugs[self.drug]
            q = f"What dose of {self.drug} is the patient on?"
            items = [_item(f"The answer states the {self.drug} dose as {d['dose']} {d['unit']}",
                           {"kind": "cites", "value": d["dose"]}),
                     _item(f"The answer gives the dose unit ({d['unit']})", {"kind": "mentions", "any": [d["unit"]]}),
                     _item(f"The answer gives the route ({d['route']})",
                           {"kind": "mentions", "any": ROUTES[d["route"]]})]
            actions = [{"name": "MedicationRequest.search", "arguments": {"subject_id": c.subject, "hadm_id": c.hadm,
                                                                          "medication": self.drug}}]
            answer = (f"The patient is on {self.drug} {d['dose']} {d['unit']} {d['route']} "
                      f"({ROUTES[d['route']][1]}) this admission.")
            return IL, None, q, q, "ehr", items, actions, answer, self.drug
        if first and self.scenario == "discharge_planning":
            location = str(c.admission["discharge_location"])
            days = (date.fromisoformat(c.date) - date.fromisoformat(str(c.admission["admittime"])[:10])).days
            q = "Where is the patient going at discharge?"
            items = [_item(f"The answer states the discharge disposition ({location.title()})",
                           {"kind": "mentions", "any": [location.lower()]}),
                     _item(f"The answer gives the discharge date ({c.date})", {"kind": "mentions", "any": [c.date]}),
                     _item(f"The answer gives the length of stay ({days} days)", {"kind": "cites", "value": days})]
            actions = [{"name": "Encounter.search", "arguments": {"subject_id": c.subject, "hadm_id": c.hadm}}]
            answer = f"The patient is being discharged to {location.lower()} on {c.date}, after a {days}-day stay."
            return IL, None, q, q, "ehr", items, actions, answer, "disposition"
        lab = self.lab if first else (self.others.pop(0) if self.others else None)
        if lab is None:
            return None
        v, unit, lo, hi, state, when = c.lab_state(lab)
        explicit = f"What's the latest {lab.lower()}?"
        q = explicit if first else f"What about the {lab.lower()}?"
        items = [_item(f"The answer correctly cites the {lab.lower()} value as {_num(v)} {unit}",
                       {"kind": "cites", "value": _num(v)}),
                 _item(f"The answer interprets it as {state} against the reference range {_num(lo)}-{_num(hi)} {unit}",
                       {"kind": "mentions", "any": WORDS[state]}),
                 _item(f"The answer gives the date of the result ({when})", {"kind": "mentions", "any": [when]})]
        answer = (f"The latest {lab.lower()} is {_num(v)} {unit} on {when}, which is {WORDS[state][0]} "
                  f"(reference range {_num(lo)}-{_num(hi)} {unit}).")
        return IL, None if first else "PE", q, explicit, "ehr", items, [self._lab_call(lab)], answer, lab

    def _next_lab(self, kind: str, values: int = 1) -> str | None:
        """The lab the previous turn was about (so "it" has its antecedent), else the focus lab, or when it was asked
        about in this way already, the next lab with enough results."""
        for lab in [self.last, self.lab] + [lab for lab in LABS if lab in self.ctx.labs]:    # staying on "it"
            if lab and (kind, lab) not in self.done and len(self.ctx.labs.get(lab, [])) >= values:
                self.done.add((kind, lab))
                return lab
        return None

    def trend(self):
        c, lab = self.ctx, self._next_lab("trend", 2)
        if lab is None:
            return None
        rows = c.labs[lab]
        values = [r["valueQuantity"]["value"] for r in reversed(rows)]       # oldest first
        unit = rows[0]["valueQuantity"]["unit"]
        state = c.lab_state(lab)[4]
        peak = min(values) if state == "low" else max(values)
        first, last = values[0], values[-1]
        direction = ("rising", ["rising", "increased", "up"]) if last > first * 1.05 else \
            ("falling", ["falling", "decreased", "down"]) if last < first * 0.95 else ("stable", ["stable", "unchanged"])
        explicit = f"How has the {lab.lower()} trended this admission?"
        q = {"NA": "How has it trended this admission?", "PE": "And over the whole admission?",
             "AE": "Has that been going on all admission?"}
        extreme = "lowest" if state == "low" else "highest"
        items = [_item(f"The answer cites the first value this admission ({_num(first)} {unit})",
                       {"kind": "cites", "value": _num(first)}),
                 _item(f"The answer cites the latest value ({_num(last)} {unit})", {"kind": "cites", "value": _num(last)}),
                 _item(f"The answer cites the {extreme} value ({_num(peak)} {unit})",
                       {"kind": "cites", "value": _num(peak)}),
                 _item(f"The answer describes the trend as {direction[0]}", {"kind": "mentions", "any": direction[1]})]
        answer = (f"The {lab.lower()} went from {_num(first)} {unit} at the first draw to {_num(last)} {unit} most "
                  f"recently ({len(values)} results, {extreme} {_num(peak)} {unit}): {direction[0]}.")
        return DG, None, q, explicit, "ehr", items, [self._lab_call(lab)], answer, lab

    def interview(self):
        """A data-gathering turn answered by the patient (at most one per session)."""
        if self.patient_used:
            return None
        self.patient_used = True
        c = self.ctx
        if self.scenario == "med_safety" and self.drug:
            tool, args = "patient.get_medication_adherence", {"drug": self.drug}
            explicit = f"Is the patient actually taking the {self.drug} at home?"
            q = {"NA": "Is the patient actually taking it at home?", "PE": "And at home?",
                 "AE": "Has that been happening at home too?"}
        elif self.scenario == "discharge_planning":
            tool, args = "patient.get_functional_status", {}
            explicit = q = {"NA": "How is the patient managing day to day?", "PE": "And day-to-day function?",
                            "AE": "How is that affecting the patient day to day?"}
            explicit = "Ask the patient how they are managing their daily activities."
        elif self.scenario == "treatment_response":
            tool, args = "patient.get_pain_assessment", {}
            q = {"NA": "How is the pain now?", "PE": "And the pain?", "AE": "Is that causing the patient pain?"}
            explicit = "Ask the patient to rate their pain now."
        else:
            tool, args = "patient.get_symptom_history", {}
            q = {"NA": "What brought the patient in?", "PE": "And the symptoms?",
                 "AE": "How did that start for the patient?"}
            explicit = "Ask the patient about the symptoms that brought them in."
        from .patient import PatientFacts

        reply = " ".join(a["responses"]["high"] for a in PatientFacts(tuple(self.answers)).release(tool, args))
        items, conclusion = self._interview_items(tool, reply)
        actions = [{"name": tool, "arguments": args}]
        entity = {"patient.get_medication_adherence": self.drug, "patient.get_functional_status": "disposition",
                  "patient.get_pain_assessment": "pain"}.get(tool, "symptoms")        # what "it" next refers to
        return DG, None, q, explicit, "patient", items, actions, f"The patient reports: {reply}{conclusion}", entity

    def gather(self):
        """A data-gathering turn from two sources, the record and the patient (the original's "mixed" turns): the
        scenario's fact in the record (the drug's order, the focus lab, the disposition) beside what the patient
        says about it, and, where they disagree (an active order the patient stopped taking), the discrepancy."""
        if self.patient_used:
            return None
        c = self.ctx
        if self.scenario == "med_safety" and self.drug:
            d = c.drugs[self.drug]
            record_call = {"name": "MedicationRequest.search", "arguments": {"subject_id": c.subject, "hadm_id": c.hadm,
                                                                             "medication": self.drug}}
            fact = f"The record has {self.drug} {d['dose']} {d['unit']} {d['route']} ordered this admission"
            record_items = [_item(f"The answer gives the ordered {self.drug} dose ({d['dose']} {d['unit']}) from the "
                                  "record", {"kind": "cites", "value": d["dose"]})]
            explicit = (f"Check the {self.drug} both ways: what the chart has ordered, and whether the patient is "
                        "taking it at home.")
            q = {"NA": "Check it both ways: the chart and what the patient actually takes.",
                 "PE": "And the chart against what the patient says?",
                 "AE": "Does that match what the patient is actually doing?"}
        elif self.scenario == "discharge_planning":
            location = str(c.admission["discharge_location"])
            record_call = {"name": "Encounter.search", "arguments": {"subject_id": c.subject, "hadm_id": c.hadm}}
            fact = f"The record has discharge to {location.lower()}"
            record_items = [_item(f"The answer gives the disposition in the record ({location.title()})",
                                  {"kind": "mentions", "any": [location.lower()]})]
            explicit = "Check the discharge plan in the chart against how the patient says they are managing."
            q = {"NA": "Does that fit how the patient is managing? Check with the patient.",
                 "PE": "And against how the patient is managing?",
                 "AE": "Does that match how the patient says they are doing?"}
        else:
            lab = self.lab
            v, unit, lo, hi, state, when = c.lab_state(lab)
            record_call = self._lab_call(lab)
            fact = f"The record has the latest {lab.lower()} at {_num(v)} {unit} on {when} ({WORDS[state][0]})"
            record_items = [_item(f"The answer cites the {lab.lower()} from the record ({_num(v)} {unit})",
                                  {"kind": "cites", "value": _num(v)})]
            what = "pain" if self.scenario == "treatment_response" else "symptoms"
            explicit = f"Put the latest {lab.lower()} beside what the patient reports about their {what}."
            q = {"NA": f"How does that fit with the patient's {what}? Ask them.",
                 "PE": f"And the patient's {what}, beside it?",
                 "AE": f"Does that go with what the patient says about their {what}?"}
        spoken = self.interview()
        if spoken is None:
            return None
        _, _, _, _, _, patient_items, patient_actions, patient_answer, entity = spoken
        reply = patient_answer[len("The patient reports: "):]
        stopped = self.scenario == "med_safety" and self._stopped(reply)
        items = record_items + patient_items[:2]
        conclusion = ""
        if stopped:
            items.append(_item("The answer points out the discrepancy: the order is active but the patient stopped "
                               "taking it", {"kind": "mentions", "any": ["discrepancy", "not taking", "stopped",
                                                                        "never started"]}))
            conclusion = " The order is active, but the patient is not taking it: a discrepancy to reconcile."
        answer = f"{fact}. The patient reports: {reply}{conclusion}"
        about = self.drug if self.scenario == "med_safety" and self.drug else \
            "disposition" if self.scenario == "discharge_planning" else self.lab
        return DG, None, q, explicit, "mixed", items, [record_call, *patient_actions], answer, about

    def _stopped(self, reply: str) -> bool:
        """Whether the patient's reply admits to not taking the session's drug."""
        s = self.patient.stopped
        return bool(s) and s.drug == self.drug and s.reason.lower() in reply.lower()

    def _interview_items(self, tool: str, reply: str) -> tuple[list, str]:
        """The items of an interview turn, and the conclusion the gold answer draws from the patient's words (the
        facts behind them: `self.patient`)."""
        m = self.patient
        if tool == "patient.get_medication_adherence":
            if self._stopped(reply):
                s = m.stopped
                return [_item(f"The answer reports that the patient is not taking the {self.drug} ({s.when})",
                              {"kind": "mentions", "any": ["stopped", "not taking", "never started", "not been taking"]}),
                        _item(f"The answer names the {self.drug}", {"kind": "mentions", "any": [self.drug.lower()]}),
                        _item(f"The answer gives the patient's reason ({s.reason})",
                              {"kind": "mentions", "any": s.reason_words})], ""
            return [_item(f"The answer reports that the patient takes the {self.drug} as prescribed",
                          {"kind": "mentions", "any": ["as prescribed", "every day"]}),
                    _item(f"The answer names the {self.drug}", {"kind": "mentions", "any": [self.drug.lower()]}),
                    _item("The answer does not claim the patient stopped the drug",
                          {"kind": "absent", "any": ["stopped"]})], ""
        if tool == "patient.get_functional_status":
            key = m.function_key
            alone, location = key == "own", str(self.ctx.admission["discharge_location"]).lower()
            return [_item(f"The answer reports the patient's function as the patient describes it ({key})",
                          {"kind": "mentions", "any": [key]}),
                    _item("The answer concludes the patient is independent" if alone else
                          "The answer concludes the patient needs help with daily activities",
                          {"kind": "mentions", "any": ["independent"] if alone else ["needs help", "assistance"]}),
                    _item(f"The answer relates it to the discharge disposition ({location})",
                          {"kind": "mentions", "any": [location]})], \
                (" The patient is independent at home" if alone else " The patient needs help with daily "
                 "activities") + f", consistent with discharge to {location}."
        if tool == "patient.get_pain_assessment":
            score = m.pain_now
            severity = "mild" if score < 4 else "moderate" if score < 7 else "severe"
            items = [_item(f"The answer reports the pain score as {score}/10", {"kind": "cites", "value": score}),
                     _item(f"The answer grades the pain as {severity}", {"kind": "mentions", "any": [severity]})]
            if m.pain_site:
                items.append(_item(f"The answer notes the improvement from {m.pain_at_admission}/10 at admission",
                                   {"kind": "cites", "value": m.pain_at_admission}))
            return items, f" That is {severity} pain" + (
                f", down from {m.pain_at_admission}/10 at admission." if m.pain_site else ".")
        onset = {"sudden": (["suddenly", "sudden", "abrupt", "abruptly", "all at once", "out of nowhere"],
                            "came on suddenly"),
                 "days": (["days", "week"], "developed over days"),
                 "planned": (["weeks", "months", "planned", "scheduled"], "long-standing; the admission was planned")
                 }[m.onset_kind]
        items = [_item(f"The answer reports the presenting complaint ({m.complaint})",
                       {"kind": "mentions", "any": [m.complaint.lower()]}),
                 _item(f"The answer reports the onset as the patient gives it ({m.onset.rstrip('.')})",
                       {"kind": "mentions", "any": onset[0]})]
        if m.own_diagnosis:
            items.append(_item(f"The answer notes that the patient attributes it to their {m.own_diagnosis}",
                               {"kind": "mentions", "any": [m.own_diagnosis]}))
        return items, f" The onset: {onset[1]}."

    def stroke_risk(self):
        """A formula-based reasoning turn (the original's CHA2DS2-VASc prompts): for a patient with atrial
        fibrillation, the score from the patient's age and sex and their conditions, and whether it indicates
        anticoagulation (2 or more for men, 3 or more for women)."""
        c = self.ctx
        scored = c.chads_vasc()
        if scored is None or ("stroke", "") in self.done:
            return None
        self.done.add(("stroke", ""))
        score, parts = scored
        female = c.patient.get("gender") == "female"
        indicated = score >= (3 if female else 2)
        explicit = "What is the patient's CHA2DS2-VASc score, and is anticoagulation indicated?"
        q = {"NA": "What is the stroke risk from the atrial fibrillation (CHA2DS2-VASc)?",
             "PE": "And the CHA2DS2-VASc?", "AE": "Given that, is anticoagulation indicated?"}
        items = [_item(f"The answer gives the CHA2DS2-VASc score as {score}", {"kind": "cites", "value": score}),
                 _item("The answer concludes that anticoagulation is " + ("indicated" if indicated else
                                                                          "not clearly indicated"),
                       {"kind": "mentions", "any": ["anticoagulation is indicated", "recommend anticoagulation",
                                                    "anticoagulation recommended", "start anticoagulation"]
                        if indicated else
                        ["not indicated", "not clearly indicated", "consider", "no anticoagulation"]})]
        if parts:
            items.append(_item(f"The answer names what scores ({', '.join(parts)})",
                               {"kind": "mentions", "any": [parts[0].split(' or ')[0]]}))
        answer = (f"The CHA2DS2-VASc score is {score} ({', '.join(parts) or 'no risk factors'}) for the atrial "
                  "fibrillation: anticoagulation is "
                  + ("indicated." if indicated else "not clearly indicated (consider it against bleeding risk)."))
        actions = [{"name": "Patient.read", "arguments": {"subject_id": c.subject}},
                   {"name": "Condition.search", "arguments": {"subject_id": c.subject}}]
        return CR, None, q, explicit, "ehr", items, actions, answer, "atrial fibrillation"

    def clearance(self):
        """A formula-based reasoning turn (the original's L2 option B, Cockcroft-Gault for CrCl): creatinine
        clearance from age, sex, weight and the latest creatinine, and what it means for a renally cleared drug
        the patient is on (enoxaparin: 30 mg once daily below 30 mL/min; metformin: stop below 30, do not
        start or reduce below 45)."""
        c = self.ctx
        weight = c.weight() if "Creatinine" in c.labs and ("clearance", "") not in self.done else None
        if weight is None:
            return None
        self.done.add(("clearance", ""))
        kg, source = weight
        age, female = int(c.patient.get("_anchor_age") or 0), c.patient.get("gender") == "female"
        cr = c.lab_state("Creatinine")[0]
        crcl = round((140 - age) * kg / (72 * cr) * (0.85 if female else 1))
        band = "below 30" if crcl < 30 else "30-59" if crcl < 60 else "60 or more"
        drug = next((d for d in ("Enoxaparin sodium", "Metformin") if d in c.drugs), None)
        if drug == "Enoxaparin sodium":
            advice, words = ("reduce the enoxaparin to 30 mg once daily", ["30 mg", "reduce"]) if crcl < 30 else \
                ("continue the enoxaparin at its current dose", ["continue", "no change", "no dose adjustment"])
        elif drug == "Metformin":
            advice, words = ("stop the metformin", ["stop", "hold", "discontinue"]) if crcl < 30 else \
                ("reduce the metformin dose", ["reduce", "lower"]) if crcl < 45 else \
                ("continue the metformin", ["continue", "no change"])
        else:
            advice, words = ("adjust renally cleared drugs to the reduced clearance", ["adjust", "reduce",
                                                                                       "renal dosing"]) \
                if crcl < 60 else ("no renal dose adjustment is needed", ["no renal dose adjustment",
                                                                          "no dose adjustment", "no adjustment",
                                                                          "adequate"])
        explicit = "What is the patient's creatinine clearance (Cockcroft-Gault), and does it change any dosing?"
        q = {"NA": "What's the creatinine clearance on that?" if self.last == "Creatinine" else
             "What is the creatinine clearance (Cockcroft-Gault)?",
             "PE": "And the creatinine clearance?", "AE": "Given that, what is the creatinine clearance?"}
        items = [_item(f"The answer gives the creatinine clearance as about {crcl} mL/min (Cockcroft-Gault)",
                       {"kind": "near", "value": crcl, "tolerance": 0.05}),
                 _item(f"The answer uses the latest creatinine ({_num(cr)} mg/dL)", {"kind": "cites", "value": _num(cr)}),
                 _item(f"The answer uses the weight ({_num(kg)} kg, {source})", {"kind": "cites", "value": _num(kg)}),
                 _item(f"The answer concludes: {advice}", {"kind": "mentions", "any": words})]
        answer = (f"Cockcroft-Gault: (140 - {age}) x {_num(kg)} kg / (72 x {_num(cr)} mg/dL)"
                  + (" x 0.85" if female else "") + f" = about {crcl} mL/min ({band}); {advice}.")
        actions = [{"name": "Patient.read", "arguments": {"subject_id": c.subject}},
                   {"name": "Observation.search", "arguments": {"subject_id": c.subject, "category": "vital-signs",
                                                                "code": "Weight", "_count": 5}},
                   self._lab_call("Creatinine")]
        return CR, None, q, explicit, "ehr", items, actions, answer, "Creatinine"

    def reasoning(self):
        c, lab = self.ctx, self._next_lab("reasoning")
        if lab is None:
            return None
        v, unit, lo, hi, state, _ = c.lab_state(lab)
        limit = hi if state == "high" else lo if state == "low" else hi
        drug = f" the {self.drug} dose" if self.scenario == "med_safety" and self.drug and lab == self.lab else None
        explicit = (f"Given the {lab.lower()} of {_num(v)} {unit}, does{drug} need to change?" if drug else
                    f"Given the {lab.lower()} of {_num(v)} {unit}, does anything need to change?")
        q = {"NA": f"Does it change{drug or ' anything'}?" if drug else "Is it a concern?",
             "PE": "And what should we do?", "AE": "Given that, does anything need to change?"}
        act = ["recheck", "repeat"] if state != "normal" else ["no change", "continue"]
        items = [_item(f"The answer cites the {lab.lower()} as {_num(v)} {unit}", {"kind": "cites", "value": _num(v)}),
                 _item(f"The answer compares it with the reference range (here {_num(lo)}-{_num(hi)} {unit})",
                       {"kind": "mentions", "any": ["range", "limit"]}),   # the compacted result shows no range
                 _item(f"The answer identifies the value as {state}", {"kind": "mentions", "any": WORDS[state]}),
                 _item("The answer recommends " + ("a repeat level to recheck it" if state != "normal" else
                                                   "no change (continue the current plan)"),
                       {"kind": "mentions", "any": act})]
        if drug:
            items.append(_item(f"The answer addresses the {self.drug}", {"kind": "mentions",
                                                                         "any": [self.drug.lower()]}))
        danger = SAFETY.get((lab, state))
        if danger:
            items.append(_item(f"The answer does not recommend {danger[0]} (contraindicated with a {state} "
                               f"{lab.lower()})", {"kind": "absent", "any": danger}))
        verdict = (f"it is {WORDS[state][0]}, {'above' if state == 'high' else 'below'} the reference limit of "
                   f"{_num(limit)} {unit}: recheck with a repeat level" if state != "normal" else
                   f"it is within the normal range (upper limit {_num(limit)} {unit}): no change, continue the "
                   "current plan")
        about = f" For the {self.drug}, " + ("recheck before adjusting." if state != "normal" else "keep the dose.") \
            if drug else ""
        if drug and danger and self.drug.lower() in danger:     # the drug is what the value contraindicates
            about = f" Hold the {self.drug} until the repeat level."
        answer = f"The {lab.lower()} is {_num(v)} {unit}; {verdict}.{about}"
        return CR, None, q, explicit, "ehr", items, [self._lab_call(lab)], answer, lab

    def write(self):
        c = self.ctx
        if self.scenario in ("med_safety", "treatment_response") and self.drug:
            d = c.drugs[self.drug]
            freq, synonyms = FREQUENCY.get(d["per_day"], FREQUENCY[1])
            explicit = f"Please reorder the {self.drug} at the current dose and route, {freq}, for discharge."
            q = {"NA": f"Please reorder it at the current dose and route, {freq}, for discharge.",
                 "PE": f"And reorder for discharge, same dose and route, {freq}.",
                 "AE": f"Given that, reorder it for discharge at the same dose and route, {freq}."}
            wrong = [w for r, ws in ROUTES.items() if r != d["route"] for w in ws[:2]]
            items = [_item(f"The order's medication is {self.drug}", {"kind": "write", "tool": "MedicationRequest.create",
                                                                     "field": "medication",
                                                                     "any": [self.drug.lower()]}),
                     _item(f"The dose is {d['dose']} {d['unit']}", {"kind": "write", "tool": "MedicationRequest.create",
                                                                   "field": "dose", "value": d["dose"],
                                                                   "unit": d["unit"]}),
                     _item(f"The route is {d['route']} (synonyms: {', '.join(ROUTES[d['route']])})",
                           {"kind": "write", "tool": "MedicationRequest.create", "field": "route",
                            "any": ROUTES[d["route"]]}),
                     _item(f"The frequency is {freq} (synonyms: {', '.join(synonyms)})",
                           {"kind": "write", "tool": "MedicationRequest.create", "field": "frequency",
                            "any": synonyms}),
                     _item(f"The order does NOT use another route ({', '.join(wrong)})",
                           {"kind": "write_absent", "tool": "MedicationRequest.create", "field": "route",
                            "any": wrong})]
            args = {"subject_id": c.subject, "medication": self.drug, "dose": f"{d['dose']} {d['unit']}",
                    "route": d["route"], "frequency": freq}
            actions = [{"name": "MedicationRequest.search", "arguments": {"subject_id": c.subject, "hadm_id": c.hadm,
                                                                          "medication": self.drug}},
                       {"name": "MedicationRequest.create", "arguments": args}]
            answer = f"Ordered {self.drug} {d['dose']} {d['unit']} {d['route']} {freq} for discharge."
            return WU, None, q, explicit, "write", items, actions, answer, self.drug
        lab = self.lab
        normal = lab is None or c.lab_state(lab)[4] == "normal"
        if self.scenario == "discharge_planning" or normal:        # nothing abnormal to flag: a follow-up
            service = SERVICES.get(str(c.admission["discharge_location"]), "primary-care-followup") \
                if self.scenario == "discharge_planning" else "primary-care-followup"
            explicit = f"Please put in a routine {service} referral for discharge."
            q = {"NA": f"Please put one in: a routine {service} referral.", "PE": f"And a routine {service} referral.",
                 "AE": f"Given that, put in a routine {service} referral."}
            items = [_item(f"The service type is {service}", {"kind": "write", "tool": "ServiceRequest.create",
                                                              "field": "service_type", "any": [service]}),
                     _item("The priority is routine", {"kind": "write", "tool": "ServiceRequest.create",
                                                       "field": "priority", "any": ["routine"]}),
                     _item("The answer does NOT create a medication order instead",
                           {"kind": "write_absent", "tool": "MedicationRequest.create"})]
            args = {"subject_id": c.subject, "service_type": service, "priority": "routine"}
            answer = f"Created a routine {service} referral for discharge."
            return WU, None, q, explicit, "write", items, [{"name": "ServiceRequest.create",
                                                               "arguments": args}], answer, "referral"
        v, unit, _, _, state, _ = c.lab_state(lab)
        explicit = f"Please put a clinical flag on the chart for the {lab.lower()} of {_num(v)} {unit}."
        q = {"NA": "Please flag it on the chart.", "PE": "And flag it on the chart.",
             "AE": "Given that, put a flag on the chart."}
        items = [_item("The flag's category is clinical", {"kind": "write", "tool": "Flag.create", "field": "category",
                                                          "any": ["clinical"]}),
                 _item(f"The flag's detail names the {lab.lower()}", {"kind": "write", "tool": "Flag.create",
                                                                      "field": "detail", "any": [lab.lower()],
                                                                      "match": "contains"}),
                 _item(f"The flag's detail cites the value {_num(v)}", {"kind": "write", "tool": "Flag.create",
                                                                         "field": "detail", "value": _num(v)}),
                 _item("The answer does NOT create a medication order instead",
                       {"kind": "write_absent", "tool": "MedicationRequest.create"})]
        code = re.sub(r"[^A-Z]+", "_", f"{state} {lab}".upper()).strip("_")
        args = {"subject_id": c.subject, "category": "clinical", "code": code,
                "detail": f"{lab} {_num(v)} {unit} ({state}) on {c.lab_state(lab)[5]}"}
        answer = f"Flagged the chart: {args['detail']}."
        return WU, None, q, explicit, "write", items, [self._lab_call(lab), {"name": "Flag.create",
                                                                                "arguments": args}], answer, lab

    def turn(self, kind: str, index: int):
        if kind == IL:
            made = self.lookup(index == 0)
        elif kind == DG:
            roll = self.rng.random()
            if not self.patient_used and (self.tier == 3 or roll < 0.35):   # the original's L3 needs a mixed turn
                made = self.gather() or self.trend()
            elif self.scenario != "treatment_response" and not self.patient_used and roll < 0.6:
                made = self.interview()
            else:
                made = self.trend() or self.interview()
        elif kind == CR:
            formulas = [self.stroke_risk, self.clearance]
            self.rng.shuffle(formulas)
            made = (formulas[0]() or formulas[1]() if self.tier >= 2 else None) or \
                self.reasoning()             # the original's L1: no formula; L2-L3 use one where it applies
        else:
            made = self.write()
        if made is None:
            return None
        kind_, _, asked, explicit, *rest = made
        entity = made[-1]
        if index == 0:
            subtype, asked = None, explicit
        elif kind == CR and self.last == self.drug and self.scenario == "med_safety" and self.drug \
                and entity == self.lab:               # the drug's monitoring lab: "it" is the drug
            subtype, asked = "NA", f"Does the {self.lab.lower()} change how we dose it?"
        elif isinstance(asked, str):                # a lookup of the next lab: "What about the sodium?"
            subtype = "PE"
        elif entity and entity == self.last:        # "it" has its antecedent: any subtype, the least used
            subtype = pick_subtype(["NA", "PE", "AE"], self.used, self.rng)
            asked = asked[subtype]
        else:
            # nothing for "it" to refer to: the one feasible subtype is the abstract event ("Given that, ..."),
            # naming the new subject
            subtype = "AE"
            asked = "And g" + explicit[1:] if explicit.startswith("Given ") else \
                "Given that, " + explicit[0].lower() + explicit[1:]
        if subtype:
            self.used[subtype] += 1
        made = (kind_, subtype, asked, explicit, *rest)
        self.last = entity
        self.entities.append(entity)
        return made[:-1]


def eligible_arcs(tier: int) -> list[tuple]:
    if tier == 1:
        return ARCS
    need = {DG, CR} if tier == 2 else {CR}
    return [a for a in ARCS if need & set(a[1:3])]


def _observation(record: PatientRecord, action: dict, current_date: str, answers: list[dict]) -> object:
    name = action["name"]
    if name.startswith("patient."):
        from .patient import PatientFacts

        text = " ".join(a["responses"]["high"] for a in PatientFacts(tuple(answers)).release(name, action["arguments"]))
        return {"patient_response": text, "patient_responses_all_literacy": {lit: " ".join(
            a["responses"][lit] for a in PatientFacts(tuple(answers)).release(name, action["arguments"]))
            for lit in ("low", "medium", "high")}}
    if name.endswith(".create"):
        from .fhir import run_write

        return run_write(name, action["arguments"], record.subject_id, current_date, 1)
    return run_search(record, name, action["arguments"], current_date)


def pick_subtype(feasible: list[str], used: Counter, rng: random.Random) -> str:
    """The original's balance (generate_all): the feasible subtype used least so far, ties at random."""
    feasible = list(feasible)
    rng.shuffle(feasible)
    return min(feasible, key=lambda t: used[t])


def build_session(ctx: Context, scenario: str, tier: int, index: int, rng: random.Random,
                  used: Counter | None = None) -> dict | None:
    """A session along one of the tier's arcs that the record supports; `used` counts the subtypes of the
    sessions written so far (updated when this one is)."""
    used = Counter() if used is None else used
    arcs = eligible_arcs(tier)
    for arc in rng.sample(arcs, len(arcs)):
        builder = Builder(ctx, scenario, random.Random(rng.random()), tier, used)
        if scenario == "med_safety" and not builder.drug or builder.lab is None:
            return None
        turns = []
        for i, kind in enumerate(arc):
            turn = builder.turn(kind, i)
            if turn is None:
                break
            turns.append(turn)
        if len(turns) == 4:
            used.update(t[1] for t in turns if t[1])
            return encode(ctx, scenario, tier, index, arc, turns, builder.answers, builder.entities)
    return None


def encode(ctx: Context, scenario: str, tier: int, index: int, arc: tuple, turns: list, answers: list,
           entities: list | None = None) -> dict:
    """The session in the original's format (plus ehrbench's rubric_checks and patient_answers); `dep_graph`
    names what each turn was about, the antecedent an implicit question after it refers to (the original's AID
    reads the previous turn's first entity)."""
    sid = f"physassistbench_{scenario}_{index}"
    age = ctx.record.rows("SELECT anchor_age, gender FROM patients")[0]
    answer_list, messages = [], []
    for t, (kind, subtype, q, explicit, source, items, actions, answer) in enumerate(turns):
        steps = [{"action": a, "observation": _observation(ctx.record, a, ctx.date, answers), "dependency_list":
                  list(range(i)), "idx": i} for i, a in enumerate(actions)]
        steps.append({"action": {"name": "prepare_to_answer", "arguments": {"answer_type": "tool"}},
                      "observation": answer, "dependency_list": list(range(len(actions))), "idx": len(actions)})
        answer_list.append(steps)
        messages += ([] if t == 0 else ["=" * 60]) + [{"role": "user", "content": q},
                                                      {"role": "assistant", "content": answer}]
    return {
        "id": f"physassistbench_{DOMAINS[scenario]}_{scenario}_{index}_L{tier}",
        "env_info": f"session_id: {sid}\nCurrent date: {ctx.date}. Patient is a {age['anchor_age']}-year-old "
                    f"{age['gender']}",
        "tools": SESSION_TOOLS, "tasks": [t[2] for t in turns], "tasks_explicit": [t[3] for t in turns],
        "messages": messages, "answer_list": answer_list, "task_types": list(arc),
        "turn_types": [i != 0 for i in range(4)], "turn_subtypes": [t[1] for t in turns],
        "clinical_task_domain": DOMAINS[scenario], "subject_id": ctx.subject, "hadm_id": ctx.hadm,
        "session_id": sid, "clinical_scenario": scenario, "sequence_idx": ARCS.index(arc),
        "task_sequence": list(arc), "tool_sources": [t[4] for t in turns], "tool_set": "fhir",
        "difficulty_level": tier, "current_date": ctx.date,
        "rubrics": [[text for text, _ in t[5]] for t in turns],
        "rubric_checks": [[check for _, check in t[5]] for t in turns],
        "persona_config": ctx.persona, "patient_answers": answers,
        "dep_graph": {"nodes": {str(i): {"entities": [e] if e else [], "events": []}
                                for i, e in enumerate(entities or [])}}}


def author(source: Path, folder: Path, per_cell: int, seed: int) -> dict[str, list[dict]]:
    """Sessions per scenario: `per_cell` per tier from the admissions that qualify for it (`Context.qualifies`),
    patients distinct within a scenario."""
    conn = sqlite3.connect(f"file:{source.resolve()}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    last = [dict(r) for r in conn.execute(
        "SELECT a.* FROM admissions a WHERE a.dischtime IS NOT NULL AND a.discharge_location IS NOT NULL AND "
        "a.discharge_location != 'DIED' AND a.admittime = (SELECT MAX(b.admittime) FROM admissions b WHERE "
        "b.subject_id = a.subject_id) ORDER BY a.subject_id")]
    conn.close()
    rng = random.Random(seed)
    contexts = []
    for adm in last:
        record = PatientRecord(folder / f"patient_{adm['subject_id']}.db", folder / "reference.db")
        ctx = Context(record, adm, random.Random(f"{seed}/{adm['hadm_id']}"))
        if ctx.labs:
            contexts.append(ctx)
    out: dict[str, list[dict]] = defaultdict(list)
    used: Counter = Counter()                 # subtypes so far, across the whole set (the original's balance)
    for scenario in SCENARIOS:
        taken: set[int] = set()               # a patient once per scenario; the scarcest level is filled first
        for tier in (3, 2, 1):
            pool = [c for c in contexts if c.hadm not in taken and c.qualifies(scenario, tier)]
            rng.shuffle(pool)
            made = 0
            for ctx in pool:
                session = build_session(ctx, scenario, tier, len(out[scenario]), rng, used)
                if session is not None:
                    out[scenario].append(session)
                    taken.add(ctx.hadm)
                    made += 1
                if made == per_cell:
                    break
            if made < per_cell:
                raise SystemExit(f"{scenario} L{tier}: only {made} of {per_cell} sessions: the world is too small "
                                 "(a larger --scale)")
    return out


def write(sessions: dict[str, list[dict]], out: Path, world: dict, session_seed: int) -> None:
    """<scenario>.jsonl per scenario and manifest.json (the world they were written from)."""
    out.mkdir(parents=True, exist_ok=True)
    for scenario, items in sessions.items():
        (out / f"{scenario}.jsonl").write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in items))
    (out / "manifest.json").write_text(json.dumps({
        "generator": "ehrbench.benchmarks.physassist.authoring", "world": world, "session_seed": session_seed,
        "sessions": {s: len(v) for s, v in sessions.items()}}, indent=2) + "\n")


def write_medagent(folder: Path, out: Path, seed: int, per_category: int = 10) -> list[dict]:
    """medagent.json: MedAgentBench's ten categories on the world's patients (`medagent.author_medagent`)."""
    from .medagent import author_medagent
    from .tools import FhirRecords

    tasks = author_medagent(FhirRecords(folder), random.Random(f"{seed}/medagent"), per_category)
    (out / "medagent.json").write_text("[\n" + ",\n".join(json.dumps(t, ensure_ascii=False) for t in tasks) + "\n]\n")
    return tasks


def main(argv: list[str] | None = None) -> None:
    from ...schemas import WorldSpec, build_database
    from ...world.generator import WorldSize
    from ..agentehr.patient_db import split_patients

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/tasks/physassist")
    parser.add_argument("--seed", type=int, default=0, help="the world's seed (data.seed)")
    parser.add_argument("--scale", type=float, default=2.0, help="the world's scale (benchmark.world_scale)")
    parser.add_argument("--root", default="data/generated", help="where built databases are cached (data.root)")
    parser.add_argument("--session-seed", type=int, default=7, help="which patients, arcs and phrasings")
    parser.add_argument("--per-cell", type=int, default=9, help="sessions per scenario and tier (the issue's 9)")
    args = parser.parse_args(argv)
    source = build_database("mimic_iv", WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale)), Path(args.root))
    folder = split_patients(source, source.parent)
    sessions = author(source, folder, args.per_cell, args.session_seed)
    out = Path(args.out)
    write(sessions, out, {"seed": args.seed, "scale": args.scale}, args.session_seed)
    tasks = write_medagent(folder, out, args.session_seed)
    print(f"{sum(map(len, sessions.values()))} sessions written to {out}: "
          + ", ".join(f"{s} {len(v)}" for s, v in sessions.items()) + f"; {len(tasks)} MedAgentBench-style tasks")


if __name__ == "__main__":
    main()
