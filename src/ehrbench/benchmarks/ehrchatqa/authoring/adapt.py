"""AdaptQA scenarios (paper Table 10), written once for every database.

Each category finds patients in the world for whom the scenario holds (a patient on atorvastatin with no Lipitor
record; hyperlipidemia with no statin but a fibrate; no troponin I but troponin T ...) and words the instruction.
The database-specific part, the gold SQL and the lookups that find candidates, comes from an `AdaptSchema`.
"""
from __future__ import annotations

from typing import Iterator, Protocol

from .common import Context, Draft, lay

WORDS_PLEASE = "You want the answer as a number written in words (e.g., ten)."
WITHIN_CLASSES = ("statin", "ssri", "beta blocker", "ace inhibitor", "anticoagulant", "antiepileptic", "loop diuretic")
CROSS_CLASS_CONDITIONS = ("hyperlipidemia", "hypertension", "depression", "diabetes", "copd", "atrial fibrillation")
LAB_ALTERNATIVES = [("troponin_i", "troponin_t", "myocardial damage"), ("hba1c", "glucose", "blood sugar control"),
                    ("ck_mb", "troponin_t", "heart muscle injury"), ("ntprobnp", "sodium", "heart failure"),
                    ("tsh", "cholesterol", "thyroid-related metabolism")]
PROCEDURE_ALTERNATIVES = [("hemodialysis", "peritoneal dialysis"), ("peritoneal dialysis", "hemodialysis"),
                          ("coronary stent", "cardiac catheterization"), ("coronary bypass", "coronary stent"),
                          ("intubation", "mechanical ventilation long"), ("cholecystectomy", "egd")]
COMPOUND_CONDITIONS = ("diabetes", "chronic kidney disease", "sepsis", "acute kidney injury", "anemia", "heart failure")
MISSING_TABLES = [("cancer registry", "breast cancer"), ("cancer registry", "colon cancer"),
                  ("cancer registry", "liver neoplasm"), ("chronic disease registry", "chronic kidney disease"),
                  ("problem list", "hypertension"), ("problem list", "copd")]


class AdaptSchema(Protocol):
    patient: str          # how instructions name a patient, e.g. "patient ID {}"
    entries: str          # what stored medication values are called, e.g. "drug names"
    coding_note: str      # said after a diagnosis where codes come in two versions, or ""

    def patient_drugs(self, ctx: Context) -> dict: ...                         # pid -> generic names ordered
    def stores_brand(self, ctx: Context, drug: str) -> bool: ...                           # brand written in stored values
    def brand_or_generic_count(self, ctx: Context, pid, brand: str, generic: str) -> str: ...
    def drugs_unless(self, ctx: Context, pid, names: list[str], exclude: list[str], cte: str) -> str: ...
    def condition_patients(self, ctx: Context, key: str) -> list: ...
    def patient_conditions(self, ctx: Context) -> dict: ...                    # pid -> stored diagnosis names
    def condition_names(self, ctx: Context, key: str) -> set[str]: ...
    def related_unless(self, ctx: Context, pid, target: set[str], related: set[str]) -> str: ...
    def lab_patients(self, ctx: Context, lab: str) -> set: ...
    def max_lab_or_alternative(self, ctx: Context, pid, lab: str, alternative: str) -> str: ...
    def patient_procedures(self, ctx: Context) -> dict: ...                    # pid -> stored procedure names
    def procedure_names(self, ctx: Context, key: str) -> set[str]: ...
    def procedure_unless(self, ctx: Context, pid, key: str, alternative: str) -> str: ...
    def cohort_with_fallback(self, ctx: Context, key: str, lab: str, threshold: float, heart_rate: int) -> str: ...
    def condition_count(self, ctx: Context, key: str) -> str: ...


def brand_generic(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    drugs = s.patient_drugs(ctx)
    pairs = [(pid, d) for pid in sorted(drugs) for d in drugs[pid]
             if ctx.vocab.drugs[d].brands and not s.stores_brand(ctx, d)]
    for pid, drug in ctx.sample(pairs, 8):
        brand = ctx.vocab.drugs[drug].brands[0].title()
        yield Draft(["Your goal is to check a patient's prescriptions for a specific medication.",
                     f"Specifically, you are interested in {s.patient.format(pid)} and want to know how many times "
                     f"they were prescribed {brand}.",
                     f"If no {brand} prescriptions are found, you want the same count for its generic equivalent, "
                     "without naming the generic yourself.", WORDS_PLEASE],
                    s.brand_or_generic_count(ctx, pid, brand.lower(), drug), "brand-generic name resolution", f"bg/{pid}/{drug}")


def within_class(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    drugs = s.patient_drugs(ctx)
    found = 0
    for pid in ctx.sample(sorted(drugs), len(drugs)):
        for cls in WITHIN_CLASSES:
            members = [d.name for d in ctx.vocab.drugs_in_class(cls)]
            have = [m for m in members if m in drugs[pid]]
            missing = [m for m in members if m not in drugs[pid]]
            if len(have) != 1 or not missing or found >= 8:
                continue
            target = ctx.rng.choice(missing)
            found += 1
            yield Draft(["Your goal is to explore a patient's medications within one drug class.",
                         f"Specifically, you want to know whether {s.patient.format(pid)} was prescribed {target}.",
                         f"If not, you want to know which other drugs of the same class "
                         f"({ctx.vocab.drug_classes[cls]['label']}) the patient was prescribed.",
                         f"You want the {s.entries} exactly as stored in the database."],
                        s.drugs_unless(ctx, pid, [m for m in members if m != target], [target], "same_class"),
                        "within-class drug adaptation", f"wc/{pid}/{cls}")


def cross_class(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    drugs = s.patient_drugs(ctx)
    found = 0
    for key in CROSS_CLASS_CONDITIONS:
        c = ctx.vocab.conditions[key]
        first = [d.name for d in ctx.vocab.drugs_in_class(c.drug_classes[0])]
        rest = [d.name for cls in c.drug_classes[1:] for d in ctx.vocab.drugs_in_class(cls)]
        for pid in s.condition_patients(ctx, key):
            have = set(drugs.get(pid, ()))
            if have & set(first) or not 1 <= len(have & set(rest)) <= 2 or found >= 8:
                continue
            found += 1
            label = ctx.vocab.drug_classes[c.drug_classes[0]]["label"]
            yield Draft(["Your goal is to review how a patient's condition was treated.",
                         f"Specifically, you want to know whether {s.patient.format(pid)}, who has "
                         f"{lay(c.lay, ctx.rng)}, was prescribed any {label}.",
                         f"If no such drug was prescribed, you want to know which drugs from other classes used to "
                         f"treat {c.key} the patient received.",
                         f"You want the {s.entries} exactly as stored in the database."],
                        s.drugs_unless(ctx, pid, rest, first, "other_classes"), "cross-class drug substitution", f"cc/{pid}/{key}")


def related_condition(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    by_patient = s.patient_conditions(ctx)
    found = 0
    for key, c in ctx.sample(list(ctx.vocab.conditions.items()), len(ctx.vocab.conditions)):
        target = s.condition_names(ctx, key)
        related = set().union(*(s.condition_names(ctx, r) for r in c.related))
        for pid in sorted(by_patient):
            if found >= 6 or by_patient[pid] & target or len(by_patient[pid] & related) != 1:
                continue
            found += 1
            yield Draft(["Your goal is to check a patient's diagnoses.",
                         f"Specifically, you want to know whether {s.patient.format(pid)} was diagnosed with "
                         f"{lay(c.lay, ctx.rng)}.",
                         f"If not, you want to know whether the patient was diagnosed with any condition clinically "
                         f"related to {c.key} (such as its known complications or comorbidities: {', '.join(c.related)}).",
                         "You want the diagnosis names exactly as stored in the database."],
                        s.related_unless(ctx, pid, target, related), "clinically related condition lookup", f"rc/{pid}/{key}")
            break


def alternative_lab(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    for a, b, purpose in LAB_ALTERNATIVES:
        for pid in ctx.sample(sorted(s.lab_patients(ctx, b) - s.lab_patients(ctx, a)), 2):
            yield Draft(["Your goal is to assess a patient's lab results.",
                         f"Specifically, you want the highest {ctx.vocab.labs[a]['lay'][0]} value ever recorded for "
                         f"{s.patient.format(pid)}.",
                         f"If that test was never done, you want the highest value of a clinically equivalent "
                         f"alternative test used to assess {purpose}, without naming it yourself.",
                         "You want the value exactly as recorded."],
                        s.max_lab_or_alternative(ctx, pid, a, b), "alternative lab test for condition", f"al/{pid}/{a}")


def alternative_procedure(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    by_patient = s.patient_procedures(ctx)
    for a, b in PROCEDURE_ALTERNATIVES:
        pa, pb = ctx.vocab.procedures[a], ctx.vocab.procedures[b]
        names_a, names_b = s.procedure_names(ctx, a), s.procedure_names(ctx, b)
        candidates = [pid for pid in sorted(by_patient) if by_patient[pid] & names_b and not by_patient[pid] & names_a]
        for pid in ctx.sample(candidates, 2):
            yield Draft(["Your goal is to review the procedures a patient underwent.",
                         f"Specifically, you want to know whether {s.patient.format(pid)} had {pa.lay[0]}.",
                         f"If not, you want to know which alternative procedure for the same clinical purpose "
                         f"({pb.lay[-1]} or similar) the patient had.",
                         "You want the procedure name exactly as stored in the database."],
                        s.procedure_unless(ctx, pid, a, b), "alternative procedure for treatment", f"ap/{pid}/{a}")


def compound_fallback(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    for key in COMPOUND_CONDITIONS:
        c = ctx.vocab.conditions[key]
        lab_key = next(iter(c.labs), "glucose")
        lab = ctx.vocab.labs[lab_key]
        threshold = round(lab["mean"] * 1.2, lab["decimals"])
        for heart_rate in (200, 220):  # above anything the world records: the full criteria find nobody
            yield Draft(["Your goal is to find a cohort of patients meeting several clinical criteria.",
                         f"Specifically, you want patients diagnosed with {lay(c.lay, ctx.rng)}{s.coding_note} "
                         f"who had a {lab['lay'][0]} value above {threshold:g}.",
                         f"You also want them to have had a heart rate above {heart_rate} at some point.",
                         "If no patient meets all criteria, you want to drop the heart rate criterion but keep the others.",
                         WORDS_PLEASE], s.cohort_with_fallback(ctx, key, lab_key, threshold, heart_rate),
                        "compound criteria with fallback", f"cf/{key}/{heart_rate}")


def schema_fallback(ctx: Context, s: AdaptSchema) -> Iterator[Draft]:
    for table, key in MISSING_TABLES:
        c = ctx.vocab.conditions[key]
        yield Draft(["Your goal is to count patients with a condition using a dedicated table.",
                     f"Specifically, you want to know how many patients in the {table} table have {lay(c.lay, ctx.rng)}.",
                     f"If there is no such table, you want the same count taken from the general diagnosis "
                     f"records{s.coding_note}.", WORDS_PLEASE], s.condition_count(ctx, key), "schema fallback handling",
                    f"sf/{table}/{key}")


SCENARIOS = [brand_generic, within_class, cross_class, related_condition, alternative_lab, alternative_procedure,
             compound_fallback, schema_fallback]
