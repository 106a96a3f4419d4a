"""IncreQA and AdaptQA templates for MIMIC-IV*."""
from __future__ import annotations

from typing import Iterator

from .common import WINDOWS, Context, Draft, lay, q

NOW = "'2100-12-31 23:59:00'"
DX_JOIN = "admissiondiagnoses ad JOIN diagnosiscodes dc ON ad.icdcode = dc.icdcode AND ad.codeversion = dc.codeversion"
PX_JOIN = ("admissionprocedures ap JOIN procedurecodes pc ON ap.icdcode = pc.icdcode "
           "AND ap.codeversion = pc.codeversion")
BOTH_CODES = "The diagnosis may be coded in either ICD-9 or ICD-10, and you want both counted."


def dx_descriptions(ctx: Context, key: str) -> str:
    c = ctx.vocab.conditions[key]
    return ", ".join(q(ctx.vocab.diagnosis_description(code, v)) for code, v in ((c.icd9, 9), (c.icd10, 10)))


def px_descriptions(ctx: Context, key: str) -> str:
    p = ctx.vocab.procedures[key]
    return ", ".join(q(t) for t in dict.fromkeys((p.icd9[1], p.icd10[1])))


def present_conditions(ctx: Context) -> list[str]:
    coded = set(ctx.column(f"SELECT DISTINCT dc.description FROM {DX_JOIN}"))
    return [k for k, c in ctx.vocab.conditions.items()
            if ctx.vocab.diagnosis_description(c.icd9, 9) in coded or ctx.vocab.diagnosis_description(c.icd10, 10) in coded]


def patients(ctx: Context, where: str = "1=1") -> list[int]:
    return ctx.column(f"SELECT DISTINCT patientid FROM hospitaladmissions WHERE {where} ORDER BY patientid")


def visit_cte(pid: int, which: str) -> str:
    order = "DESC" if which == "last" else "ASC"
    return f"visit AS ( SELECT admissionid FROM hospitaladmissions WHERE patientid = {pid} ORDER BY admitdatetime {order} LIMIT 1 )"


VISIT_WORDS = {"last": "most recent hospital visit", "first": "first hospital visit"}


# ---------------------------------------------------------------------------------------------------------- IncreQA
def dx_patients(ctx: Context) -> Iterator[Draft]:
    for key in ctx.sample(present_conditions(ctx), 30):
        c = ctx.vocab.conditions[key]
        kind = ctx.rng.choice(["window", "age", "gender"])
        base = f"WITH dx AS ( SELECT ad.patientid, ad.admissionid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)}) )"
        if kind == "window":
            days, text = ctx.rng.choice(WINDOWS)
            sql = (f"{base} SELECT COUNT(DISTINCT ha.patientid) FROM hospitaladmissions ha JOIN dx ON ha.admissionid = dx.admissionid "
                   f"WHERE datetime(ha.admitdatetime) >= datetime({NOW}, '-{days} days')")
            extra, k = f"You only want patients admitted to the hospital within the past {text}.", f"w{days}"
        elif kind == "age":
            age = ctx.rng.choice([50, 60, 65, 70, 80])
            sql = (f"{base} SELECT COUNT(DISTINCT ha.patientid) FROM hospitaladmissions ha JOIN dx ON ha.admissionid = dx.admissionid "
                   f"WHERE ha.age >= {age}")
            extra, k = f"You only want hospital stays where the patient was {age} years or older at admission.", f"a{age}"
        else:
            g = ctx.rng.choice(["f", "m"])
            sql = (f"{base} SELECT COUNT(DISTINCT d.patientid) FROM demographics d JOIN dx ON d.patientid = dx.patientid "
                   f"WHERE d.gender = {q(g)}")
            extra, k = f"You only want {'female' if g == 'f' else 'male'} patients.", f"g{g}"
        yield Draft(["Your goal is to find the number of patients with a specific diagnosis.",
                     f"Specifically, you want to count patients diagnosed with {lay(c.lay, ctx.rng)}.", BOTH_CODES, extra],
                    sql, "diagnosis cohort", f"dx/{key}/{k}")


def patient_lab(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT lr.patientid, lt.itemname FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode")
    by_name = {v["mimic"]: v for v in ctx.vocab.labs.values()}
    for pid, item in ctx.sample(rows, 40):
        which = ctx.rng.choice(["first", "last"])
        agg = ctx.rng.choice(["last", "first", "max", "min"])
        lab_cte = f"lab AS ( SELECT itemcode FROM labtesttypes WHERE itemname = {q(item)} )"
        src = (f"FROM labresults lr JOIN visit v ON lr.admissionid = v.admissionid JOIN lab l ON lr.itemcode = l.itemcode "
               f"WHERE lr.patientid = {pid}")
        if agg in ("max", "min"):
            sql = f"WITH {visit_cte(pid, which)}, {lab_cte} SELECT {agg.upper()}(lr.resultvalue) {src}"
            want = f"You want the {'highest' if agg == 'max' else 'lowest'} value."
        else:
            sql = (f"WITH {visit_cte(pid, which)}, {lab_cte} SELECT lr.resultvalue {src} "
                   f"ORDER BY lr.resultdatetime {'DESC' if agg == 'last' else 'ASC'} LIMIT 1")
            want = f"You want only the {'most recent' if agg == 'last' else 'first'} value."
        name = lay(by_name[item]["lay"], ctx.rng)
        yield Draft(["Your goal is to look up a lab test result for a specific patient.",
                     f"Specifically, you are interested in patient ID {pid} and their {name} results, "
                     f"and since you do not know how {name} is stored, you let the DB agent find it.",
                     f"You only want results from the patient's {VISIT_WORDS[which]}.", want],
                    sql, "patient lab", f"lab/{pid}/{item}/{which}/{agg}")


def patient_medication(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT patientid, medicationname FROM medicationorders")
    for pid, drug in ctx.sample(rows, 40):
        d = ctx.vocab.drugs[drug]
        which = ctx.rng.choice(["first", "last", "all"])
        named = d.brands[0] if d.brands and ctx.rng.random() < 0.3 else drug
        if which == "all":
            sql = f"SELECT COUNT(*) FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + drug + '%')}"
            scope = "You want to count orders across all of the patient's hospital visits."
        else:
            sql = (f"WITH {visit_cte(pid, which)} SELECT COUNT(*) FROM medicationorders mo JOIN visit v ON mo.admissionid = v.admissionid "
                   f"WHERE mo.patientid = {pid} AND mo.medicationname LIKE {q('%' + drug + '%')}")
            scope = f"You only want orders from the patient's {VISIT_WORDS[which]}."
        yield Draft(["Your goal is to review a specific patient's medication orders.",
                     f"Specifically, you want to know how many times patient ID {pid} was prescribed {named}.", scope],
                    sql, "patient medication", f"med/{pid}/{drug}/{which}")


def drug_patients(ctx: Context) -> Iterator[Draft]:
    for drug in ctx.sample(ctx.column("SELECT DISTINCT medicationname FROM medicationorders"), 25):
        days, text = ctx.rng.choice(WINDOWS)
        sql = (f"SELECT COUNT(DISTINCT patientid) FROM medicationorders WHERE medicationname LIKE {q('%' + drug + '%')} "
               f"AND datetime(startdatetime) >= datetime({NOW}, '-{days} days')")
        yield Draft(["Your goal is to find how many patients received a specific medication.",
                     f"Specifically, you want the number of patients prescribed {drug}.",
                     f"You only want prescriptions started within the past {text}."],
                    sql, "medication cohort", f"drugpat/{drug}/{days}")


def top_diagnoses(ctx: Context) -> Iterator[Draft]:
    filters = [("ha.age >= 60", "patients aged 60 or older"), ("ha.age < 60", "patients younger than 60"),
               ("ha.age >= 75", "patients aged 75 or older"), ("d.gender = 'f'", "female patients"),
               ("d.gender = 'm'", "male patients"), (f"datetime(ha.admitdatetime) >= datetime({NOW}, '-180 days')",
                                                     "admissions within the past 180 days")]
    for cond, text in filters:
        for n in (3, 5):
            sql = (f"WITH counts AS ( SELECT dc.description, COUNT(*) AS n FROM {DX_JOIN} JOIN hospitaladmissions ha "
                   f"ON ad.admissionid = ha.admissionid JOIN demographics d ON d.patientid = ha.patientid WHERE {cond} "
                   f"GROUP BY dc.description ), ranked AS ( SELECT description, DENSE_RANK() OVER (ORDER BY n DESC) AS rnk "
                   f"FROM counts ) SELECT description FROM ranked WHERE rnk <= {n}")
            yield Draft(["Your goal is to find the most common diagnoses in a group of patients.",
                         f"Specifically, you want the top {n} most frequent diagnoses, including all ties.",
                         f"You only want {text}."], sql, "ranking", f"top/{cond}/{n}")


def patient_vital(ctx: Context) -> Iterator[Draft]:
    vitals = [v for v in ctx.vocab.vitals.values() if v["mimic_id"] != 226512]
    for pid in ctx.sample(ctx.column("SELECT DISTINCT patientid FROM icuepisodes"), 20):
        spec = ctx.rng.choice(vitals)
        agg = ctx.rng.choice(["AVG", "MAX", "MIN"])
        sql = (f"WITH stay AS ( SELECT icuadmissionid FROM icuepisodes WHERE patientid = {pid} ORDER BY admitdatetime ASC LIMIT 1 ), "
               f"item AS ( SELECT itemcode FROM clinicalitemtypes WHERE itemname = {q(spec['mimic'])} ) "
               f"SELECT ROUND({agg}(ce.value), 4) FROM clinicalevents ce JOIN stay s ON ce.icuadmissionid = s.icuadmissionid "
               f"JOIN item i ON ce.itemcode = i.itemcode")
        word = {"AVG": "average", "MAX": "highest", "MIN": "lowest"}[agg]
        yield Draft(["Your goal is to review a patient's vital signs in the ICU.",
                     f"Specifically, you want the {word} {lay(spec['lay'], ctx.rng)} of patient ID {pid}.",
                     "You only want measurements from the patient's first ICU stay."],
                    sql, "patient vitals", f"vital/{pid}/{spec['mimic']}/{agg}")


def patient_cost(ctx: Context) -> Iterator[Draft]:
    for pid in ctx.sample(patients(ctx), 15):
        which = ctx.rng.choice(["first", "last"])
        sql = (f"WITH {visit_cte(pid, which)} SELECT ROUND(SUM(cr.costamount), 4) FROM costrecords cr "
               f"JOIN visit v ON cr.admissionid = v.admissionid")
        yield Draft(["Your goal is to find hospital charges for a specific patient.",
                     f"Specifically, you want the total cost for patient ID {pid}.",
                     f"You only want the charges of the patient's {VISIT_WORDS[which]}."],
                    sql, "cost", f"cost/{pid}/{which}")


def patient_micro(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT patientid, specimentype FROM microbiologyresults WHERE organismname IS NOT NULL")
    for pid, spec in ctx.sample(rows, 15):
        sql = (f"SELECT DISTINCT organismname FROM microbiologyresults WHERE patientid = {pid} "
               f"AND specimentype = {q(spec)} AND organismname IS NOT NULL")
        yield Draft(["Your goal is to review a patient's microbiology results.",
                     f"Specifically, you want to know which organisms were found for patient ID {pid}.",
                     f"You only care about {spec} specimens."], sql, "microbiology", f"micro/{pid}/{spec}")


def procedure_patients(ctx: Context) -> Iterator[Draft]:
    done = set(ctx.column(f"SELECT DISTINCT pc.description FROM {PX_JOIN}"))
    keys = [k for k, p in ctx.vocab.procedures.items() if p.icd9[1] in done or p.icd10[1] in done]
    for key in keys:
        p = ctx.vocab.procedures[key]
        for days, text in ctx.sample(WINDOWS, 2):
            sql = (f"WITH px AS ( SELECT ap.patientid, ap.recordeddatetime FROM {PX_JOIN} WHERE pc.description IN ({px_descriptions(ctx, key)}) ) "
                   f"SELECT COUNT(DISTINCT patientid) FROM px WHERE datetime(recordeddatetime) >= datetime({NOW}, '-{days} days')")
            yield Draft(["Your goal is to count patients who underwent a procedure.",
                         f"Specifically, you want the number of patients who had {lay(p.lay, ctx.rng)}, coded in either ICD-9 or ICD-10.",
                         f"You only want procedures done within the past {text}."], sql, "procedure cohort", f"px/{key}/{days}")


def dx_lab_threshold(ctx: Context) -> Iterator[Draft]:
    for key in present_conditions(ctx):
        c = ctx.vocab.conditions[key]
        for lab_key in c.labs:
            spec = ctx.vocab.labs[lab_key]
            vals = sorted(ctx.column(f"SELECT resultvalue FROM labresults WHERE itemcode = {spec['mimic_id']}"))
            if not vals:
                continue
            thr = round(vals[int(len(vals) * 0.8)], spec["decimals"])
            sql = (f"WITH dx AS ( SELECT ad.admissionid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)}) ), "
                   f"lab AS ( SELECT itemcode FROM labtesttypes WHERE itemname = {q(spec['mimic'])} ) "
                   f"SELECT COUNT(DISTINCT lr.patientid) FROM labresults lr JOIN lab l ON lr.itemcode = l.itemcode "
                   f"JOIN dx ON lr.admissionid = dx.admissionid WHERE lr.resultvalue > {thr:g}")
            yield Draft(["Your goal is to find patients with a diagnosis and an abnormal lab result.",
                         f"Specifically, you want patients diagnosed with {lay(c.lay, ctx.rng)}. {BOTH_CODES}",
                         f"Among them, you want those with a {lay(spec['lay'], ctx.rng)} value above {thr:g} "
                         "during the same hospital stay as the diagnosis.", "You want the number of such patients."],
                        sql, "diagnosis and lab", f"dxlab/{key}/{lab_key}")


INCRE = [dx_patients, patient_lab, patient_medication, drug_patients, top_diagnoses, patient_vital, patient_cost,
         patient_micro, procedure_patients, dx_lab_threshold]


# ---------------------------------------------------------------------------------------------------------- AdaptQA
def _in(values) -> str:
    return ", ".join(q(v) for v in sorted(values))


class MimicAdapt:
    """MIMIC-IV* gold SQL and candidate lookups for the AdaptQA scenarios of `adapt.py`."""
    patient = "patient ID {}"
    entries = "drug names"
    coding_note = " (coded in either ICD-9 or ICD-10)"

    def patient_drugs(self, ctx: Context) -> dict:
        out: dict = {}
        for pid, drug in ctx.rows("SELECT DISTINCT patientid, medicationname FROM medicationorders ORDER BY 1, 2"):
            out.setdefault(pid, []).append(drug)
        return out

    def stores_brand(self, ctx: Context, drug: str) -> bool:
        return False

    def brand_or_generic_count(self, ctx, pid, brand, generic):
        return (f"WITH brand AS ( SELECT recordid FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + brand + '%')} ), "
                f"generic AS ( SELECT recordid FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + generic + '%')} ) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM brand) THEN (SELECT COUNT(*) FROM brand) ELSE (SELECT COUNT(*) FROM generic) END")

    def drugs_unless(self, ctx, pid, names, exclude, cte):
        return (f"WITH target AS ( SELECT 1 FROM medicationorders WHERE patientid = {pid} AND medicationname IN ({_in(exclude)}) ), "
                f"{cte} AS ( SELECT DISTINCT medicationname FROM medicationorders WHERE patientid = {pid} AND medicationname IN ({_in(names)}) ) "
                f"SELECT medicationname FROM {cte} WHERE NOT EXISTS (SELECT 1 FROM target)")

    def condition_patients(self, ctx, key):
        return ctx.column(f"SELECT DISTINCT ad.patientid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)}) ORDER BY 1")

    def patient_conditions(self, ctx):
        out: dict = {}
        for pid, desc in ctx.rows(f"SELECT DISTINCT ad.patientid, dc.description FROM {DX_JOIN}"):
            out.setdefault(pid, set()).add(desc)
        return out

    def condition_names(self, ctx, key):
        c = ctx.vocab.conditions[key]
        return {ctx.vocab.diagnosis_description(c.icd9, 9), ctx.vocab.diagnosis_description(c.icd10, 10)}

    def related_unless(self, ctx, pid, target, related):
        return (f"WITH target AS ( SELECT 1 FROM {DX_JOIN} WHERE ad.patientid = {pid} AND dc.description IN ({_in(target)}) ), "
                f"related AS ( SELECT DISTINCT dc.description FROM {DX_JOIN} WHERE ad.patientid = {pid} AND dc.description IN ({_in(related)}) ) "
                "SELECT description FROM related WHERE NOT EXISTS (SELECT 1 FROM target)")

    def lab_patients(self, ctx, lab):
        return set(ctx.column(f"SELECT DISTINCT patientid FROM labresults WHERE itemcode = {ctx.vocab.labs[lab]['mimic_id']}"))

    def max_lab_or_alternative(self, ctx, pid, lab, alternative):
        labs = ctx.vocab.labs
        src = ("SELECT lr.resultvalue FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode "
               f"WHERE lr.patientid = {pid} AND lt.itemname = ")
        return (f"WITH a AS ( {src}{q(labs[lab]['mimic'])} ), b AS ( {src}{q(labs[alternative]['mimic'])} ) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM a) THEN (SELECT MAX(resultvalue) FROM a) ELSE (SELECT MAX(resultvalue) FROM b) END")

    def patient_procedures(self, ctx):
        out: dict = {}
        for pid, desc in ctx.rows(f"SELECT DISTINCT ap.patientid, pc.description FROM {PX_JOIN}"):
            out.setdefault(pid, set()).add(desc)
        return out

    def procedure_names(self, ctx, key):
        p = ctx.vocab.procedures[key]
        return {p.icd9[1], p.icd10[1]}

    def procedure_unless(self, ctx, pid, key, alternative):
        a, b = ctx.vocab.procedures[key], ctx.vocab.procedures[alternative]
        return (f"WITH a AS ( SELECT 1 FROM {PX_JOIN} WHERE ap.patientid = {pid} AND pc.description IN ({_in({a.icd9[1], a.icd10[1]})}) ), "
                f"b AS ( SELECT DISTINCT pc.description FROM {PX_JOIN} WHERE ap.patientid = {pid} AND pc.description IN ({_in({b.icd9[1], b.icd10[1]})}) ) "
                "SELECT description FROM b WHERE NOT EXISTS (SELECT 1 FROM a)")

    def cohort_with_fallback(self, ctx, key, lab, threshold, heart_rate):
        name = ctx.vocab.labs[lab]["mimic"]
        ctes = (f"dx AS ( SELECT DISTINCT ad.patientid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)}) ), "
                f"lab AS ( SELECT DISTINCT lr.patientid FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode "
                f"WHERE lt.itemname = {q(name)} AND lr.resultvalue > {threshold:g} ), "
                f"tachy AS ( SELECT DISTINCT ce.patientid FROM clinicalevents ce JOIN clinicalitemtypes ci ON ce.itemcode = ci.itemcode "
                f"WHERE ci.itemname = 'heart rate' AND ce.value > {heart_rate} )")
        full = "SELECT COUNT(*) FROM dx JOIN lab ON dx.patientid = lab.patientid JOIN tachy ON dx.patientid = tachy.patientid"
        relaxed = "SELECT COUNT(*) FROM dx JOIN lab ON dx.patientid = lab.patientid"
        return f"WITH {ctes} SELECT CASE WHEN ({full}) > 0 THEN ({full}) ELSE ({relaxed}) END"

    def cohort_count(self, ctx, key):
        return (f"WITH dx AS ( SELECT DISTINCT ad.patientid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)}) ) "
                "SELECT COUNT(*) FROM dx")


ADAPT = MimicAdapt()
