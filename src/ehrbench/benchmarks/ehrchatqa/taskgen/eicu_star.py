"""IncreQA and AdaptQA templates for eICU*."""
from __future__ import annotations

from typing import Iterator

from ....schemas.eicu_star import shows_brand
from .common import WINDOWS, Context, Draft, lay, q

NOW = "'2100-12-31 23:59:00'"
STAY_WORDS = {"last": "most recent hospital stay", "first": "first hospital stay"}


def stays_cte(pid: str, which: str) -> str:
    order = "DESC" if which == "last" else "ASC"
    return (f"stay AS ( SELECT unit_id FROM icupatient WHERE hosp_id = ( SELECT hosp_id FROM icupatient WHERE patient_id = {q(pid)} "
            f"ORDER BY hospital_admit_time {order} LIMIT 1 ) )")


def present(ctx: Context) -> list[str]:
    names = set(ctx.column("SELECT DISTINCT condition_name FROM condition"))
    return [k for k, c in ctx.vocab.conditions.items() if c.eicu in names]


def cond_patients(ctx: Context) -> Iterator[Draft]:
    for key in ctx.sample(present(ctx), 30):
        c = ctx.vocab.conditions[key]
        kind = ctx.rng.choice(["window", "age", "gender"])
        base = (f"WITH cond AS ( SELECT p.patient_id, p.hospital_admit_time, p.age, p.gender FROM condition c "
                f"JOIN icupatient p ON c.unit_id = p.unit_id WHERE c.condition_name = {q(c.eicu)} )")
        if kind == "window":
            days, text = ctx.rng.choice(WINDOWS)
            sql = f"{base} SELECT COUNT(DISTINCT patient_id) FROM cond WHERE datetime(hospital_admit_time) >= datetime({NOW}, '-{days} days')"
            extra, k = f"You only want patients admitted to the hospital within the past {text}.", f"w{days}"
        elif kind == "age":
            lo = ctx.rng.choice([40, 50, 60, 70, 80])
            sql = f"{base} SELECT COUNT(DISTINCT patient_id) FROM cond WHERE CAST(age AS INTEGER) BETWEEN {lo} AND {lo + 9}"
            extra, k = f"You only want patients who were in their {lo}s at that stay.", f"a{lo}"
        else:
            g = ctx.rng.choice(["female", "male"])
            sql = f"{base} SELECT COUNT(DISTINCT patient_id) FROM cond WHERE gender = {q(g)}"
            extra, k = f"You only want {g} patients.", f"g{g}"
        yield Draft(["Your goal is to find the number of ICU patients with a specific diagnosis.",
                     f"Specifically, you want to count patients diagnosed with {lay(c.lay, ctx.rng)}.", extra],
                    sql, "diagnosis cohort", f"dx/{key}/{k}")


def patient_lab(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT p.patient_id, l.lab_name FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id")
    by_name = {v["eicu"]: v for v in ctx.vocab.labs.values()}
    for pid, name in ctx.sample(rows, 40):
        which, agg = ctx.rng.choice(["first", "last"]), ctx.rng.choice(["last", "first", "max", "min"])
        src = f"FROM lab l JOIN stay s ON l.unit_id = s.unit_id WHERE l.lab_name = {q(name)}"
        if agg in ("max", "min"):
            sql = f"WITH {stays_cte(pid, which)} SELECT {agg.upper()}(l.lab_result) {src}"
            want = f"You want the {'highest' if agg == 'max' else 'lowest'} value."
        else:
            sql = (f"WITH {stays_cte(pid, which)} SELECT l.lab_result {src} ORDER BY l.lab_result_time "
                   f"{'DESC' if agg == 'last' else 'ASC'} LIMIT 1")
            want = f"You want only the {'most recent' if agg == 'last' else 'first'} value."
        term = lay(by_name[name]["lay"], ctx.rng)
        yield Draft(["Your goal is to look up a lab test result for a specific patient.",
                     f"Specifically, you are interested in patient {pid} and their {term} results, and since you do not "
                     f"know how {term} is stored, you let the DB agent find it.",
                     f"You only want results from the patient's {STAY_WORDS[which]}.", want], sql, "patient lab",
                    f"lab/{pid}/{name}/{which}/{agg}")


def _generic_of(ctx: Context, drug_string: str) -> str:
    return max((d for d in ctx.vocab.drugs if drug_string.startswith(d)), key=len)


def patient_medication(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT p.patient_id, m.drug_name FROM prescription m JOIN icupatient p ON m.unit_id = p.unit_id")
    for pid, drug_string in ctx.sample(rows, 40):
        drug = _generic_of(ctx, drug_string)
        sql = (f"SELECT COUNT(*) FROM prescription m JOIN icupatient p ON m.unit_id = p.unit_id "
               f"WHERE p.patient_id = {q(pid)} AND m.drug_name LIKE {q('%' + drug + '%')}")
        yield Draft(["Your goal is to review a specific patient's medication orders.",
                     f"Specifically, you want to know how many times patient {pid} was prescribed {drug}.",
                     "You want to count orders across all of the patient's ICU stays, in any strength or form."],
                    sql, "patient medication", f"med/{pid}/{drug}")


def drug_patients(ctx: Context) -> Iterator[Draft]:
    for drug in ctx.sample(sorted({_generic_of(ctx, s) for s in ctx.column("SELECT DISTINCT drug_name FROM prescription")}), 25):
        days, text = ctx.rng.choice(WINDOWS)
        sql = (f"SELECT COUNT(DISTINCT p.patient_id) FROM prescription m JOIN icupatient p ON m.unit_id = p.unit_id "
               f"WHERE m.drug_name LIKE {q('%' + drug + '%')} AND datetime(m.medication_start_time) >= datetime({NOW}, '-{days} days')")
        yield Draft(["Your goal is to find how many patients received a specific medication.",
                     f"Specifically, you want the number of patients prescribed {drug}, in any strength or form.",
                     f"You only want prescriptions started within the past {text}."], sql, "medication cohort", f"drugpat/{drug}/{days}")


def top_conditions(ctx: Context) -> Iterator[Draft]:
    filters = [("CAST(p.age AS INTEGER) >= 60", "patients aged 60 or older"), ("CAST(p.age AS INTEGER) BETWEEN 18 AND 59", "patients aged 18 to 59"),
               ("p.gender = 'female'", "female patients"), ("p.gender = 'male'", "male patients"),
               ("h.region = 'midwest'", "hospitals in the midwest region"), ("h.region = 'south'", "hospitals in the south region")]
    for cond, text in filters:
        for n in (3, 5):
            sql = (f"WITH counts AS ( SELECT c.condition_name, COUNT(*) AS n FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id "
                   f"JOIN hospital h ON p.hospital_id = h.hospital_id WHERE {cond} GROUP BY c.condition_name ), "
                   "ranked AS ( SELECT condition_name, DENSE_RANK() OVER (ORDER BY n DESC) AS rnk FROM counts ) "
                   f"SELECT condition_name FROM ranked WHERE rnk <= {n}")
            yield Draft(["Your goal is to find the most common diagnoses in a group of ICU patients.",
                         f"Specifically, you want the top {n} most frequent diagnoses, including all ties.",
                         f"You only want {text}."], sql, "ranking", f"top/{cond}/{n}")


def patient_vital(ctx: Context) -> Iterator[Draft]:
    cols = [v for v in ctx.vocab.vitals.values() if v["eicu"]]
    for pid in ctx.sample(ctx.column("SELECT DISTINCT patient_id FROM icupatient"), 20):
        spec, agg = ctx.rng.choice(cols), ctx.rng.choice(["AVG", "MAX", "MIN"])
        sql = (f"WITH first_unit AS ( SELECT unit_id FROM icupatient WHERE patient_id = {q(pid)} ORDER BY unit_admit_time ASC LIMIT 1 ) "
               f"SELECT ROUND({agg}(v.{spec['eicu']}), 4) FROM vital_signs v JOIN first_unit f ON v.unit_id = f.unit_id")
        word = {"AVG": "average", "MAX": "highest", "MIN": "lowest"}[agg]
        yield Draft(["Your goal is to review a patient's vital signs in the ICU.",
                     f"Specifically, you want the {word} {lay(spec['lay'], ctx.rng)} of patient {pid}.",
                     "You only want measurements from the patient's first ICU stay."], sql, "patient vitals", f"vital/{pid}/{spec['eicu']}/{agg}")


def patient_cost(ctx: Context) -> Iterator[Draft]:
    for pid in ctx.sample(ctx.column("SELECT DISTINCT patient_id FROM icupatient"), 15):
        which = ctx.rng.choice(["first", "last"])
        order = "DESC" if which == "last" else "ASC"
        sql = (f"WITH visit AS ( SELECT hosp_id FROM icupatient WHERE patient_id = {q(pid)} ORDER BY hospital_admit_time {order} LIMIT 1 ) "
               "SELECT ROUND(SUM(c.cost_amount), 4) FROM cost c JOIN visit v ON c.hosp_id = v.hosp_id")
        yield Draft(["Your goal is to find hospital charges for a specific patient.",
                     f"Specifically, you want the total cost for patient {pid}.",
                     f"You only want the charges of the patient's {STAY_WORDS[which]}."], sql, "cost", f"cost/{pid}/{which}")


def patient_micro(ctx: Context) -> Iterator[Draft]:
    rows = ctx.rows("SELECT DISTINCT p.patient_id, m.culture_site FROM microbiology m JOIN icupatient p ON m.unit_id = p.unit_id "
                    "WHERE m.organism <> 'no growth'")
    for pid, site in ctx.sample(rows, 15):
        sql = (f"SELECT DISTINCT m.organism FROM microbiology m JOIN icupatient p ON m.unit_id = p.unit_id "
               f"WHERE p.patient_id = {q(pid)} AND m.culture_site = {q(site)} AND m.organism <> 'no growth'")
        yield Draft(["Your goal is to review a patient's microbiology results.",
                     f"Specifically, you want to know which organisms grew in cultures of patient {pid}.",
                     f"You only care about cultures taken from the {site.split(',')[0]} ({site})."], sql, "microbiology", f"micro/{pid}/{site}")


def treatment_patients(ctx: Context) -> Iterator[Draft]:
    names = set(ctx.column("SELECT DISTINCT treatment_name FROM treatment"))
    for key, p in ctx.vocab.procedures.items():
        if p.eicu not in names:
            continue
        for days, text in ctx.sample(WINDOWS, 2):
            sql = (f"SELECT COUNT(DISTINCT p.patient_id) FROM treatment t JOIN icupatient p ON t.unit_id = p.unit_id "
                   f"WHERE t.treatment_name = {q(p.eicu)} AND datetime(t.treatment_time) >= datetime({NOW}, '-{days} days')")
            yield Draft(["Your goal is to count ICU patients who received a treatment.",
                         f"Specifically, you want the number of patients who received {lay(p.lay, ctx.rng)}.",
                         f"You only want treatments given within the past {text}."], sql, "procedure cohort", f"tx/{key}/{days}")


def cond_lab_threshold(ctx: Context) -> Iterator[Draft]:
    for key in present(ctx):
        c = ctx.vocab.conditions[key]
        for lab_key in c.labs:
            spec = ctx.vocab.labs[lab_key]
            vals = sorted(ctx.column(f"SELECT lab_result FROM lab WHERE lab_name = {q(spec['eicu'])}"))
            if not vals:
                continue
            thr = round(vals[int(len(vals) * 0.8)], spec["decimals"])
            sql = (f"WITH cond AS ( SELECT DISTINCT unit_id FROM condition WHERE condition_name = {q(c.eicu)} ) "
                   f"SELECT COUNT(DISTINCT p.patient_id) FROM lab l JOIN cond ON l.unit_id = cond.unit_id "
                   f"JOIN icupatient p ON l.unit_id = p.unit_id WHERE l.lab_name = {q(spec['eicu'])} AND l.lab_result > {thr:g}")
            yield Draft(["Your goal is to find patients with a diagnosis and an abnormal lab result.",
                         f"Specifically, you want ICU patients diagnosed with {lay(c.lay, ctx.rng)}.",
                         f"Among them, you want those with a {lay(spec['lay'], ctx.rng)} value above {thr:g} during the same ICU stay.",
                         "You want the number of such patients."], sql, "diagnosis and lab", f"dxlab/{key}/{lab_key}")


INCRE = [cond_patients, patient_lab, patient_medication, drug_patients, top_conditions, patient_vital, patient_cost,
         patient_micro, treatment_patients, cond_lab_threshold]


# ---------------------------------------------------------------------------------------------------------- AdaptQA
PRESCRIBED = "FROM prescription m JOIN icupatient p ON m.unit_id = p.unit_id WHERE p.patient_id = {pid}"
DIAGNOSED = "FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id WHERE p.patient_id = {pid}"
TREATED = "FROM treatment t JOIN icupatient p ON t.unit_id = p.unit_id WHERE p.patient_id = {pid}"


def _drug_filter(names: list[str]) -> str:
    """eICU stores "<generic> <strength> <form>": match the generic as the leading word(s)."""
    return " OR ".join(f"m.drug_name LIKE {q(n + ' %')}" for n in sorted(names))


def _in(values) -> str:
    return ", ".join(q(v) for v in sorted(values))


class EicuAdapt:
    """eICU* gold SQL and candidate lookups for the AdaptQA scenarios of `adapt.py`."""
    patient = "patient {}"
    entries = "medication entries"
    coding_note = ""

    def patient_drugs(self, ctx: Context) -> dict:
        out: dict = {}
        for pid, s in ctx.rows("SELECT DISTINCT p.patient_id, m.drug_name FROM prescription m "
                               "JOIN icupatient p ON m.unit_id = p.unit_id ORDER BY 1, 2"):
            generic = _generic_of(ctx, s)
            if generic not in out.setdefault(pid, []):
                out[pid].append(generic)
        return out

    def stores_brand(self, ctx: Context, drug: str) -> bool:
        return shows_brand(ctx.vocab.drugs[drug])

    def brand_or_generic_count(self, ctx, pid, brand, generic):
        src = PRESCRIBED.format(pid=q(pid))
        return (f"WITH brand AS ( SELECT m.prescription_id {src} AND m.drug_name LIKE {q('%' + brand + '%')} ), "
                f"generic AS ( SELECT m.prescription_id {src} AND m.drug_name LIKE {q('%' + generic + '%')} ) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM brand) THEN (SELECT COUNT(*) FROM brand) ELSE (SELECT COUNT(*) FROM generic) END")

    def drugs_unless(self, ctx, pid, names, exclude, cte):
        src = PRESCRIBED.format(pid=q(pid))
        return (f"WITH target AS ( SELECT 1 {src} AND ({_drug_filter(exclude)}) ), "
                f"{cte} AS ( SELECT DISTINCT m.drug_name {src} AND ({_drug_filter(names)}) ) "
                f"SELECT drug_name FROM {cte} WHERE NOT EXISTS (SELECT 1 FROM target)")

    def condition_patients(self, ctx, key):
        return ctx.column(f"SELECT DISTINCT p.patient_id FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id "
                          f"WHERE c.condition_name = {q(ctx.vocab.conditions[key].eicu)} ORDER BY 1")

    def patient_conditions(self, ctx):
        out: dict = {}
        for pid, name in ctx.rows("SELECT DISTINCT p.patient_id, c.condition_name FROM condition c "
                                  "JOIN icupatient p ON c.unit_id = p.unit_id"):
            out.setdefault(pid, set()).add(name)
        return out

    def condition_names(self, ctx, key):
        return {ctx.vocab.conditions[key].eicu}

    def related_unless(self, ctx, pid, target, related):
        src = DIAGNOSED.format(pid=q(pid))
        return (f"WITH target AS ( SELECT 1 {src} AND c.condition_name IN ({_in(target)}) ), related AS ( SELECT DISTINCT "
                f"c.condition_name {src} AND c.condition_name IN ({_in(related)}) ) "
                "SELECT condition_name FROM related WHERE NOT EXISTS (SELECT 1 FROM target)")

    def lab_patients(self, ctx, lab):
        return set(ctx.column("SELECT DISTINCT p.patient_id FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id "
                              f"WHERE l.lab_name = {q(ctx.vocab.labs[lab]['eicu'])}"))

    def max_lab_or_alternative(self, ctx, pid, lab, alternative):
        src = f"SELECT l.lab_result FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id WHERE p.patient_id = {q(pid)} AND l.lab_name = "
        return (f"WITH a AS ( {src}{q(ctx.vocab.labs[lab]['eicu'])} ), b AS ( {src}{q(ctx.vocab.labs[alternative]['eicu'])} ) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM a) THEN (SELECT MAX(lab_result) FROM a) ELSE (SELECT MAX(lab_result) FROM b) END")

    def patient_procedures(self, ctx):
        out: dict = {}
        for pid, name in ctx.rows("SELECT DISTINCT p.patient_id, t.treatment_name FROM treatment t "
                                  "JOIN icupatient p ON t.unit_id = p.unit_id"):
            out.setdefault(pid, set()).add(name)
        return out

    def procedure_names(self, ctx, key):
        return {ctx.vocab.procedures[key].eicu}

    def procedure_unless(self, ctx, pid, key, alternative):
        src = TREATED.format(pid=q(pid))
        a, b = ctx.vocab.procedures[key].eicu, ctx.vocab.procedures[alternative].eicu
        return (f"WITH a AS ( SELECT 1 {src} AND t.treatment_name = {q(a)} ), b AS ( SELECT DISTINCT t.treatment_name "
                f"{src} AND t.treatment_name = {q(b)} ) SELECT treatment_name FROM b WHERE NOT EXISTS (SELECT 1 FROM a)")

    def cohort_with_fallback(self, ctx, key, lab, threshold, heart_rate):
        ctes = (f"cond AS ( SELECT DISTINCT p.patient_id FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id "
                f"WHERE c.condition_name = {q(ctx.vocab.conditions[key].eicu)} ), lab_hit AS ( SELECT DISTINCT p.patient_id "
                f"FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id WHERE l.lab_name = {q(ctx.vocab.labs[lab]['eicu'])} "
                f"AND l.lab_result > {threshold:g} ), tachy AS ( SELECT DISTINCT p.patient_id FROM vital_signs v "
                f"JOIN icupatient p ON v.unit_id = p.unit_id WHERE v.heart_rate > {heart_rate} )")
        full = ("SELECT COUNT(*) FROM cond JOIN lab_hit ON cond.patient_id = lab_hit.patient_id "
                "JOIN tachy ON cond.patient_id = tachy.patient_id")
        relaxed = "SELECT COUNT(*) FROM cond JOIN lab_hit ON cond.patient_id = lab_hit.patient_id"
        return f"WITH {ctes} SELECT CASE WHEN ({full}) > 0 THEN ({full}) ELSE ({relaxed}) END"

    def cohort_count(self, ctx, key):
        return (f"WITH cond AS ( SELECT DISTINCT p.patient_id FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id "
                f"WHERE c.condition_name = {q(ctx.vocab.conditions[key].eicu)} ) SELECT COUNT(*) FROM cond")


ADAPT = EicuAdapt()
