"""IncreQA templates, written once for every database.

Each template samples values the database actually holds (so every task has an answer), words the instruction in
the paper's SQL-to-text style (one constraint per sentence, lay terms for stored values), and asks the database's
`IncreSchema` for the gold SQL in CTE style.
"""
from __future__ import annotations

from typing import Iterator, Protocol

from .common import WINDOWS, Context, Draft, lay

Restriction = tuple[str, object]   # ("window", days) | ("age", years) | ("gender", "f" | "m")
AGE_CUTOFFS = [50, 60, 65, 70, 80]
TOP_RESTRICTIONS: list[tuple[Restriction, str]] = [
    (("age", 60), "patients aged 60 or older"), (("under", 60), "patients younger than 60"),
    (("age", 75), "patients aged 75 or older"), (("gender", "f"), "female patients"),
    (("gender", "m"), "male patients"), (("window", 180), "admissions within the past 180 days")]
SCOPES = {"first": "first hospital stay", "last": "most recent hospital stay"}


class IncreSchema(Protocol):
    patient: str                  # how instructions name a patient, e.g. "patient ID {}"
    population: str               # "patients" / "ICU patients"
    coding_sentence: str | None   # said after a diagnosis when codes come in two versions

    def present_conditions(self, ctx: Context) -> list[str]: ...
    def cohort_count(self, ctx: Context, key: str, restriction: Restriction) -> str: ...
    def patient_labs(self, ctx: Context) -> list[tuple]: ...                 # (pid, lab key)
    def patient_lab(self, ctx: Context, pid, lab: str, scope: str, agg: str) -> str: ...
    def patient_drugs(self, ctx: Context) -> dict: ...                       # pid -> generic names
    def medication_count(self, ctx: Context, pid, drug: str, scope: str) -> str: ...
    def drug_cohort(self, ctx: Context, drug: str, days: int) -> str: ...
    def top_diagnoses(self, ctx: Context, restriction: Restriction, n: int) -> str: ...
    def icu_patients(self, ctx: Context) -> list: ...
    def vital(self, ctx: Context, pid, vital: str, agg: str) -> str: ...
    def patients(self, ctx: Context) -> list: ...
    def stay_cost(self, ctx: Context, pid, scope: str) -> str: ...
    def culture_sites(self, ctx: Context) -> list[tuple]: ...                # (pid, stored site) with growth
    def organisms(self, ctx: Context, pid, site: str) -> str: ...
    def procedures_done(self, ctx: Context) -> list[str]: ...
    def procedure_cohort(self, ctx: Context, key: str, days: int) -> str: ...
    def lab_values(self, ctx: Context, lab: str) -> list[float]: ...
    def diagnosis_lab_cohort(self, ctx: Context, key: str, lab: str, threshold: float) -> str: ...


def _diagnosis_sentences(ctx: Context, s: IncreSchema, key: str, verb: str) -> list[str]:
    sentence = f"Specifically, you want {verb} diagnosed with {lay(ctx.vocab.conditions[key].lay, ctx.rng)}."
    return [sentence] + ([s.coding_sentence] if s.coding_sentence else [])


def diagnosis_cohort(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    for key in ctx.sample(s.present_conditions(ctx), 30):
        kind = ctx.rng.choice(["window", "age", "gender"])
        if kind == "window":
            days, text = ctx.rng.choice(WINDOWS)
            restriction, extra = ("window", days), f"You only want patients admitted to the hospital within the past {text}."
        elif kind == "age":
            age = ctx.rng.choice(AGE_CUTOFFS)
            restriction, extra = ("age", age), f"You only want hospital stays where the patient was {age} years or older."
        else:
            g = ctx.rng.choice(["f", "m"])
            restriction, extra = ("gender", g), f"You only want {'female' if g == 'f' else 'male'} patients."
        yield Draft([f"Your goal is to find the number of {s.population} with a specific diagnosis.",
                     *_diagnosis_sentences(ctx, s, key, "to count patients"), extra],
                    s.cohort_count(ctx, key, restriction), "diagnosis cohort", f"dx/{key}/{restriction}")


def patient_lab(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    for pid, lab in ctx.sample(s.patient_labs(ctx), 40):
        scope, agg = ctx.rng.choice(["first", "last"]), ctx.rng.choice(["last", "first", "max", "min"])
        want = {"max": "You want the highest value.", "min": "You want the lowest value.",
                "last": "You want only the most recent value.", "first": "You want only the first value."}[agg]
        term = lay(ctx.vocab.labs[lab]["lay"], ctx.rng)
        yield Draft(["Your goal is to look up a lab test result for a specific patient.",
                     f"Specifically, you are interested in {s.patient.format(pid)} and their {term} results, and since "
                     f"you do not know how {term} is stored, you let the DB agent find it.",
                     f"You only want results from the patient's {SCOPES[scope]}.", want],
                    s.patient_lab(ctx, pid, lab, scope, agg), "patient lab", f"lab/{pid}/{lab}/{scope}/{agg}")


def patient_medication(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    drugs = s.patient_drugs(ctx)
    for pid, drug in ctx.sample([(p, d) for p in sorted(drugs) for d in drugs[p]], 40):
        brands = ctx.vocab.drugs[drug].brands
        named = brands[0].title() if brands and ctx.rng.random() < 0.3 else drug
        scope = ctx.rng.choice(["first", "last", "all"])
        where = ("You want to count orders across all of the patient's hospital stays, in any strength or form."
                 if scope == "all" else f"You only want orders from the patient's {SCOPES[scope]}.")
        yield Draft(["Your goal is to review a specific patient's medication orders.",
                     f"Specifically, you want to know how many times {s.patient.format(pid)} was prescribed {named}.",
                     where], s.medication_count(ctx, pid, drug, scope), "patient medication", f"med/{pid}/{drug}/{scope}")


def drug_cohort(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    in_use = sorted({d for ds in s.patient_drugs(ctx).values() for d in ds})
    for drug in ctx.sample(in_use, 25):
        days, text = ctx.rng.choice(WINDOWS)
        yield Draft(["Your goal is to find how many patients received a specific medication.",
                     f"Specifically, you want the number of patients prescribed {drug}, in any strength or form.",
                     f"You only want prescriptions started within the past {text}."],
                    s.drug_cohort(ctx, drug, days), "medication cohort", f"drugpat/{drug}/{days}")


def top_diagnoses(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    for restriction, text in TOP_RESTRICTIONS:
        for n in (3, 5):
            yield Draft([f"Your goal is to find the most common diagnoses in a group of {s.population}.",
                         f"Specifically, you want the top {n} most frequent diagnoses, including all ties.",
                         f"You only want {text}."], s.top_diagnoses(ctx, restriction, n), "ranking",
                        f"top/{restriction}/{n}")


def patient_vital(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    vitals = [k for k, v in ctx.vocab.vitals.items() if v["eicu"]]
    for pid in ctx.sample(s.icu_patients(ctx), 20):
        vital, agg = ctx.rng.choice(vitals), ctx.rng.choice(["AVG", "MAX", "MIN"])
        word = {"AVG": "average", "MAX": "highest", "MIN": "lowest"}[agg]
        yield Draft(["Your goal is to review a patient's vital signs in the ICU.",
                     f"Specifically, you want the {word} {lay(ctx.vocab.vitals[vital]['lay'], ctx.rng)} of "
                     f"{s.patient.format(pid)}.", "You only want measurements from the patient's first ICU stay."],
                    s.vital(ctx, pid, vital, agg), "patient vitals", f"vital/{pid}/{vital}/{agg}")


def patient_cost(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    for pid in ctx.sample(s.patients(ctx), 15):
        scope = ctx.rng.choice(["first", "last"])
        yield Draft(["Your goal is to find hospital charges for a specific patient.",
                     f"Specifically, you want the total cost for {s.patient.format(pid)}.",
                     f"You only want the charges of the patient's {SCOPES[scope]}."],
                    s.stay_cost(ctx, pid, scope), "cost", f"cost/{pid}/{scope}")


def patient_micro(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    for pid, site in ctx.sample(s.culture_sites(ctx), 15):
        yield Draft(["Your goal is to review a patient's microbiology results.",
                     f"Specifically, you want to know which organisms grew in cultures of {s.patient.format(pid)}.",
                     f"You only care about {site} specimens."], s.organisms(ctx, pid, site), "microbiology",
                    f"micro/{pid}/{site}")


def procedure_cohort(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    for key in s.procedures_done(ctx):
        p = ctx.vocab.procedures[key]
        for days, text in ctx.sample(WINDOWS, 2):
            yield Draft(["Your goal is to count patients who underwent a procedure.",
                         f"Specifically, you want the number of patients who had {lay(p.lay, ctx.rng)}.",
                         f"You only want procedures done within the past {text}."],
                        s.procedure_cohort(ctx, key, days), "procedure cohort", f"px/{key}/{days}")


def diagnosis_and_lab(ctx: Context, s: IncreSchema) -> Iterator[Draft]:
    for key in s.present_conditions(ctx):
        for lab in ctx.vocab.conditions[key].labs:
            values = sorted(s.lab_values(ctx, lab))
            if not values:
                continue
            threshold = round(values[int(len(values) * 0.8)], ctx.vocab.labs[lab]["decimals"])
            yield Draft(["Your goal is to find patients with a diagnosis and an abnormal lab result.",
                         *_diagnosis_sentences(ctx, s, key, s.population),
                         f"Among them, you want those with a {lay(ctx.vocab.labs[lab]['lay'], ctx.rng)} value above "
                         f"{threshold:g} during the same hospital stay as the diagnosis.",
                         "You want the number of such patients."],
                        s.diagnosis_lab_cohort(ctx, key, lab, threshold), "diagnosis and lab", f"dxlab/{key}/{lab}")


TEMPLATES = [diagnosis_cohort, patient_lab, patient_medication, drug_cohort, top_diagnoses, patient_vital,
             patient_cost, patient_micro, procedure_cohort, diagnosis_and_lab]
