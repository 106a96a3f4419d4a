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
WORDS_PLEASE = "You want the answer as a number written in words (e.g., ten)."


def brand_generic(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT patientid, medicationname, COUNT(*) FROM medicationorders GROUP BY 1, 2")
    for pid, drug, _ in ctx.sample([r for r in rows if ctx.vocab.drugs[r[1]].brands], 8):
        brand = ctx.vocab.drugs[drug].brands[0]
        sql = (f"WITH brand AS ( SELECT recordid FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + brand + '%')} ), "
               f"generic AS ( SELECT recordid FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + drug + '%')} ) "
               "SELECT CASE WHEN EXISTS (SELECT 1 FROM brand) THEN (SELECT COUNT(*) FROM brand) ELSE (SELECT COUNT(*) FROM generic) END")
        yield Draft(["Your goal is to check a patient's prescriptions for a specific medication.",
                     f"Specifically, you are interested in patient ID {pid} and want to know how many times they were prescribed {brand.title()}.",
                     f"If no {brand.title()} prescriptions are found, you want the same count for its generic equivalent, "
                     "without naming the generic yourself.", WORDS_PLEASE], sql, "brand-generic name resolution", f"bg/{pid}/{drug}")


def _class_members(ctx: Context, cls: str) -> list[str]:
    return [d.name for d in ctx.vocab.drugs_in_class(cls)]


def within_class(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT patientid, medicationname FROM medicationorders")
    by_patient: dict[int, set[str]] = {}
    for pid, drug in rows:
        by_patient.setdefault(pid, set()).add(drug)
    found = 0
    for pid in ctx.sample(sorted(by_patient), len(by_patient)):
        for cls in ("statin", "ssri", "beta blocker", "ace inhibitor", "anticoagulant", "antiepileptic", "loop diuretic"):
            members = _class_members(ctx, cls)
            have = sorted(by_patient[pid] & set(members))
            missing = [m for m in members if m not in by_patient[pid]]
            if len(have) != 1 or not missing or found >= 8:
                continue
            target = ctx.rng.choice(missing)
            label = ctx.vocab.drug_classes[cls]["label"]
            others = ", ".join(q(m) for m in members if m != target)
            sql = (f"WITH target AS ( SELECT 1 FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + target + '%')} ), "
                   f"same_class AS ( SELECT DISTINCT medicationname FROM medicationorders WHERE patientid = {pid} AND medicationname IN ({others}) ) "
                   "SELECT medicationname FROM same_class WHERE NOT EXISTS (SELECT 1 FROM target)")
            found += 1
            yield Draft(["Your goal is to explore a patient's medications within one drug class.",
                         f"Specifically, you want to know whether patient ID {pid} was prescribed {target}.",
                         f"If not, you want to know which other drugs of the same class ({label}) the patient was prescribed.",
                         "You want the drug names exactly as stored in the database."], sql, "within-class drug adaptation", f"wc/{pid}/{cls}")


def cross_class(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT patientid, medicationname FROM medicationorders")
    by_patient: dict[int, set[str]] = {}
    for pid, drug in rows:
        by_patient.setdefault(pid, set()).add(drug)
    found = 0
    for key in ("hyperlipidemia", "hypertension", "depression", "diabetes", "copd", "atrial fibrillation"):
        c = ctx.vocab.conditions[key]
        first, rest = c.drug_classes[0], c.drug_classes[1:]
        first_members = _class_members(ctx, first)
        rest_members = [m for cls in rest for m in _class_members(ctx, cls)]
        dx_pids = set(ctx.column(f"SELECT DISTINCT ad.patientid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)})"))
        for pid in sorted(dx_pids):
            have = by_patient.get(pid, set())
            alt = sorted(have & set(rest_members))
            if have & set(first_members) or not 1 <= len(alt) <= 2 or found >= 8:
                continue
            found += 1
            label = ctx.vocab.drug_classes[first]["label"]
            sql = (f"WITH first_line AS ( SELECT 1 FROM medicationorders WHERE patientid = {pid} AND medicationname IN ({', '.join(q(m) for m in first_members)}) ), "
                   f"other_classes AS ( SELECT DISTINCT medicationname FROM medicationorders WHERE patientid = {pid} "
                   f"AND medicationname IN ({', '.join(q(m) for m in rest_members)}) ) "
                   "SELECT medicationname FROM other_classes WHERE NOT EXISTS (SELECT 1 FROM first_line)")
            yield Draft(["Your goal is to review how a patient's condition was treated.",
                         f"Specifically, you want to know whether patient ID {pid}, who has {lay(c.lay, ctx.rng)}, was prescribed any {label}.",
                         f"If no such drug was prescribed, you want to know which drugs from other classes used to treat {c.key} the patient received.",
                         "You want the drug names exactly as stored in the database."], sql, "cross-class drug substitution", f"cc/{pid}/{key}")


def related_condition(ctx: Context) -> Iterator[Draft]:
    dx = ctx.rows(f"SELECT DISTINCT ad.patientid, dc.description FROM {DX_JOIN}")
    by_patient: dict[int, set[str]] = {}
    for pid, desc in dx:
        by_patient.setdefault(pid, set()).add(desc)
    found = 0
    for key, c in ctx.sample(list(ctx.vocab.conditions.items()), 100):
        descs = {ctx.vocab.diagnosis_description(c.icd9, 9), ctx.vocab.diagnosis_description(c.icd10, 10)}
        rel_descs = {ctx.vocab.diagnosis_description(ctx.vocab.conditions[r].icd9, 9) for r in c.related} | \
                    {ctx.vocab.diagnosis_description(ctx.vocab.conditions[r].icd10, 10) for r in c.related}
        for pid in sorted(by_patient):
            if found >= 6 or by_patient[pid] & descs or len(by_patient[pid] & rel_descs) != 1:
                continue
            found += 1
            sql = (f"WITH target AS ( SELECT 1 FROM {DX_JOIN} WHERE ad.patientid = {pid} AND dc.description IN ({', '.join(q(d) for d in sorted(descs))}) ), "
                   f"related AS ( SELECT DISTINCT dc.description FROM {DX_JOIN} WHERE ad.patientid = {pid} "
                   f"AND dc.description IN ({', '.join(q(d) for d in sorted(rel_descs))}) ) "
                   "SELECT description FROM related WHERE NOT EXISTS (SELECT 1 FROM target)")
            yield Draft(["Your goal is to check a patient's diagnoses.",
                         f"Specifically, you want to know whether patient ID {pid} was diagnosed with {lay(c.lay, ctx.rng)}.",
                         f"If not, you want to know whether the patient was diagnosed with any condition clinically related to "
                         f"{c.key} (such as its known complications or comorbidities: {', '.join(c.related)}).",
                         "You want the diagnosis names exactly as stored in the database."], sql, "clinically related condition lookup", f"rc/{pid}/{key}")
            break


LAB_ALTERNATIVES = [("troponin_i", "troponin_t", "myocardial damage"), ("hba1c", "glucose", "blood sugar control"),
                    ("ck_mb", "troponin_t", "heart muscle injury"), ("ntprobnp", "sodium", "heart failure"),
                    ("tsh", "cholesterol", "thyroid-related metabolism")]


def alternative_lab(ctx: Context) -> Iterator[Draft]:
    found = 0
    for a, b, purpose in LAB_ALTERNATIVES:
        la, lb = ctx.vocab.labs[a], ctx.vocab.labs[b]
        have_b = set(ctx.column(f"SELECT DISTINCT patientid FROM labresults WHERE itemcode = {lb['mimic_id']}"))
        have_a = set(ctx.column(f"SELECT DISTINCT patientid FROM labresults WHERE itemcode = {la['mimic_id']}"))
        for pid in ctx.sample(sorted(have_b - have_a), 2):
            found += 1
            sql = (f"WITH a AS ( SELECT lr.resultvalue FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode "
                   f"WHERE lr.patientid = {pid} AND lt.itemname = {q(la['mimic'])} ), "
                   f"b AS ( SELECT lr.resultvalue FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode "
                   f"WHERE lr.patientid = {pid} AND lt.itemname = {q(lb['mimic'])} ) "
                   "SELECT CASE WHEN EXISTS (SELECT 1 FROM a) THEN (SELECT MAX(resultvalue) FROM a) ELSE (SELECT MAX(resultvalue) FROM b) END")
            yield Draft(["Your goal is to assess a patient's lab results.",
                         f"Specifically, you want the highest {la['lay'][0]} value ever recorded for patient ID {pid}.",
                         f"If that test was never done, you want the highest value of a clinically equivalent alternative test "
                         f"used to assess {purpose}, without naming it yourself.",
                         "You want the value exactly as recorded."], sql, "alternative lab test for condition", f"al/{pid}/{a}")


PROCEDURE_ALTERNATIVES = [("hemodialysis", "peritoneal dialysis"), ("peritoneal dialysis", "hemodialysis"),
                          ("coronary stent", "cardiac catheterization"), ("coronary bypass", "coronary stent"),
                          ("intubation", "mechanical ventilation long"), ("cholecystectomy", "egd")]


def alternative_procedure(ctx: Context) -> Iterator[Draft]:
    px = ctx.rows(f"SELECT DISTINCT ap.patientid, pc.description FROM {PX_JOIN}")
    for a, b in PROCEDURE_ALTERNATIVES:
        pa, pb = ctx.vocab.procedures[a], ctx.vocab.procedures[b]
        with_b = {pid for pid, d in px if d in (pb.icd9[1], pb.icd10[1])}
        with_a = {pid for pid, d in px if d in (pa.icd9[1], pa.icd10[1])}
        for pid in ctx.sample(sorted(with_b - with_a), 2):
            sql = (f"WITH a AS ( SELECT 1 FROM {PX_JOIN} WHERE ap.patientid = {pid} AND pc.description IN ({px_descriptions(ctx, a)}) ), "
                   f"b AS ( SELECT DISTINCT pc.description FROM {PX_JOIN} WHERE ap.patientid = {pid} AND pc.description IN ({px_descriptions(ctx, b)}) ) "
                   "SELECT description FROM b WHERE NOT EXISTS (SELECT 1 FROM a)")
            yield Draft(["Your goal is to review the procedures a patient underwent.",
                         f"Specifically, you want to know whether patient ID {pid} had {pa.lay[0]}.",
                         f"If not, you want to know which alternative procedure for the same clinical purpose "
                         f"({pb.lay[-1]} or similar) the patient had.",
                         "You want the procedure name exactly as stored in the database."], sql, "alternative procedure for treatment", f"ap/{pid}/{a}")


def compound_fallback(ctx: Context) -> Iterator[Draft]:
    for key in ("diabetes", "chronic kidney disease", "sepsis", "acute kidney injury", "anemia", "heart failure"):
        c = ctx.vocab.conditions[key]
        lab_key = next(iter(c.labs), "glucose")
        lab = ctx.vocab.labs[lab_key]
        thr = round(lab["mean"] * 1.2, lab["decimals"])
        for hr in (200, 220):
            dx = f"dx AS ( SELECT DISTINCT ad.patientid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)}) )"
            lab_cte = (f"lab AS ( SELECT DISTINCT lr.patientid FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode "
                       f"WHERE lt.itemname = {q(lab['mimic'])} AND lr.resultvalue > {thr:g} )")
            hr_cte = (f"tachy AS ( SELECT DISTINCT ce.patientid FROM clinicalevents ce JOIN clinicalitemtypes ci ON ce.itemcode = ci.itemcode "
                      f"WHERE ci.itemname = 'heart rate' AND ce.value > {hr} )")
            full = "SELECT COUNT(*) FROM dx JOIN lab ON dx.patientid = lab.patientid JOIN tachy ON dx.patientid = tachy.patientid"
            relaxed = "SELECT COUNT(*) FROM dx JOIN lab ON dx.patientid = lab.patientid"
            sql = f"WITH {dx}, {lab_cte}, {hr_cte} SELECT CASE WHEN ({full}) > 0 THEN ({full}) ELSE ({relaxed}) END"
            yield Draft(["Your goal is to find a cohort of patients meeting several clinical criteria.",
                         f"Specifically, you want patients diagnosed with {lay(c.lay, ctx.rng)} (either coding version) "
                         f"who had a {lab['lay'][0]} value above {thr:g}.",
                         f"You also want them to have had a heart rate above {hr} at some point.",
                         "If no patient meets all criteria, you want to drop the heart rate criterion but keep the others.",
                         WORDS_PLEASE], sql, "compound criteria with fallback", f"cf/{key}/{hr}")


def schema_fallback(ctx: Context) -> Iterator[Draft]:
    registries = [("cancer registry", "breast cancer"), ("cancer registry", "colon cancer"), ("cancer registry", "liver neoplasm"),
                  ("chronic disease registry", "chronic kidney disease"), ("problem list", "hypertension"),
                  ("problem list", "copd")]
    for table, key in registries:
        c = ctx.vocab.conditions[key]
        sql = (f"WITH dx AS ( SELECT DISTINCT ad.patientid FROM {DX_JOIN} WHERE dc.description IN ({dx_descriptions(ctx, key)}) ) "
               "SELECT COUNT(*) FROM dx")
        yield Draft(["Your goal is to count patients with a condition using a dedicated table.",
                     f"Specifically, you want to know how many patients in the {table} table have {lay(c.lay, ctx.rng)}.",
                     "If there is no such table, you want the same count taken from the general diagnosis records, "
                     "with the diagnosis coded in either ICD-9 or ICD-10.", WORDS_PLEASE], sql, "schema fallback handling", f"sf/{table}/{key}")


ADAPT = [brand_generic, within_class, cross_class, related_condition, alternative_lab, alternative_procedure,
         compound_fallback, schema_fallback]
