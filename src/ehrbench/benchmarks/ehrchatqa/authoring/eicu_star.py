"""eICU* gold SQL and candidate lookups for the IncreQA (`incre.py`) and AdaptQA (`adapt.py`) templates."""
from __future__ import annotations

from ....schemas.eicu_star import shows_brand
from .common import Context, in_list, present_unless, q

NOW = "'2100-12-31 23:59:00'"
PRESCRIBED = "FROM prescription m JOIN icupatient p ON m.unit_id = p.unit_id WHERE p.patient_id = {pid}"
DIAGNOSED = "FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id WHERE p.patient_id = {pid}"
TREATED = "FROM treatment t JOIN icupatient p ON t.unit_id = p.unit_id WHERE p.patient_id = {pid}"


def _since(column: str, days: int) -> str:
    return f"datetime({column}) >= datetime({NOW}, '-{days} days')"


def _age_at_least(years: int) -> str:
    """eICU stores ages over 89 as the text '> 89', which CAST turns into 0."""
    return f"(CAST(p.age AS INTEGER) >= {years} OR p.age = '> 89')"


def _drug_filter(names: list[str]) -> str:
    """eICU stores "<generic> <strength> <form>": match the generic as the leading word(s)."""
    return " OR ".join(f"m.drug_name LIKE {q(n + ' %')}" for n in sorted(names))


def _generic_of(ctx: Context, drug_string: str) -> str | None:
    """The curated generic a drug string names, or None for a long-tail drug (questions keep to curated drugs)."""
    return max((d for d in ctx.vocab.drugs if drug_string.startswith(d + " ")), key=len, default=None)


def stay_cte(pid: str, scope: str) -> str:
    """The ICU stays of the patient's first or most recent hospital stay."""
    order = "DESC" if scope == "last" else "ASC"
    return (f"stay AS ( SELECT unit_id, hosp_id FROM icupatient WHERE hosp_id = ( SELECT hosp_id FROM icupatient "
            f"WHERE patient_id = {q(pid)} ORDER BY hospital_admit_time {order} LIMIT 1 ) )")


class EicuTasks:
    patient = "patient {}"
    population = "ICU patients"
    coding_sentence = None
    entries = "medication entries"
    coding_note = ""

    def condition_names(self, ctx: Context, key: str) -> set[str]:
        return set(ctx.vocab.conditions[key].eicu_names)     # the plain name and its qualified forms

    def procedure_names(self, ctx: Context, key: str) -> set[str]:
        return {ctx.vocab.procedures[key].eicu}

    # --- IncreQA ---------------------------------------------------------------------------------------------------
    def present_conditions(self, ctx):
        names = set(ctx.column("SELECT DISTINCT condition_name FROM condition"))
        return [k for k, c in ctx.vocab.conditions.items() if names & set(c.eicu_names)]

    def cohort_count(self, ctx, key, restriction):
        kind, value = restriction
        where = {"window": lambda: _since("p.hospital_admit_time", value), "age": lambda: _age_at_least(value),
                 "gender": lambda: f"p.gender = {q('female' if value == 'f' else 'male')}"}[kind]()
        return (f"WITH cond AS ( SELECT DISTINCT c.unit_id FROM condition c WHERE c.condition_name IN "
                f"({in_list(self.condition_names(ctx, key))}) ) SELECT COUNT(DISTINCT p.patient_id) FROM icupatient p "
                f"JOIN cond ON p.unit_id = cond.unit_id WHERE {where}")

    def patient_labs(self, ctx):
        by_name = {v["eicu"]: k for k, v in ctx.vocab.labs.items()}
        return [(pid, by_name[name]) for pid, name in ctx.rows(
            "SELECT DISTINCT p.patient_id, l.lab_name FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id ORDER BY 1, 2")
                if name in by_name]                   # the curated labs, which have lay names; not the tail

    def patient_lab(self, ctx, pid, lab, scope, agg):
        src = f"FROM lab l JOIN stay s ON l.unit_id = s.unit_id WHERE l.lab_name = {q(ctx.vocab.labs[lab]['eicu'])}"
        if agg in ("max", "min"):
            return f"WITH {stay_cte(pid, scope)} SELECT {agg.upper()}(l.lab_result) {src}"
        order = "DESC" if agg == "last" else "ASC"
        return f"WITH {stay_cte(pid, scope)} SELECT l.lab_result {src} ORDER BY l.lab_result_time {order} LIMIT 1"

    def medication_count(self, ctx, pid, drug, scope):
        like = f"m.drug_name LIKE {q('%' + drug + '%')}"
        if scope == "all":
            return f"SELECT COUNT(*) {PRESCRIBED.format(pid=q(pid))} AND {like}"
        return (f"WITH {stay_cte(pid, scope)} SELECT COUNT(*) FROM prescription m JOIN stay s ON m.unit_id = s.unit_id "
                f"WHERE {like}")

    def drug_cohort(self, ctx, drug, days):
        return (f"SELECT COUNT(DISTINCT p.patient_id) FROM prescription m JOIN icupatient p ON m.unit_id = p.unit_id "
                f"WHERE m.drug_name LIKE {q('%' + drug + '%')} AND {_since('m.medication_start_time', days)}")

    def top_diagnoses(self, ctx, restriction, n):
        kind, value = restriction
        where = {"age": lambda: _age_at_least(value),
                 "under": lambda: f"CAST(p.age AS INTEGER) < {value} AND p.age <> '> 89'",
                 "gender": lambda: f"p.gender = {q('female' if value == 'f' else 'male')}",
                 "window": lambda: _since("p.hospital_admit_time", value)}[kind]()
        return (f"WITH counts AS ( SELECT c.condition_name, COUNT(*) AS n FROM condition c JOIN icupatient p "
                f"ON c.unit_id = p.unit_id WHERE {where} GROUP BY c.condition_name ), ranked AS ( SELECT condition_name, "
                f"DENSE_RANK() OVER (ORDER BY n DESC) AS rnk FROM counts ) SELECT condition_name FROM ranked WHERE rnk <= {n}")

    def icu_patients(self, ctx):
        return ctx.column("SELECT DISTINCT patient_id FROM icupatient ORDER BY 1")

    def vital(self, ctx, pid, vital, agg):
        column = ctx.vocab.vitals[vital]["eicu"]
        return (f"WITH first_unit AS ( SELECT unit_id FROM icupatient WHERE patient_id = {q(pid)} ORDER BY unit_admit_time "
                f"ASC LIMIT 1 ) SELECT ROUND({agg}(v.{column}), 4) FROM vital_signs v JOIN first_unit f ON v.unit_id = f.unit_id")

    def patients(self, ctx):
        return self.icu_patients(ctx)

    def stay_cost(self, ctx, pid, scope):
        order = "DESC" if scope == "last" else "ASC"
        return (f"WITH visit AS ( SELECT hosp_id FROM icupatient WHERE patient_id = {q(pid)} ORDER BY hospital_admit_time "
                f"{order} LIMIT 1 ) SELECT ROUND(SUM(c.cost_amount), 4) FROM cost c JOIN visit v ON c.hosp_id = v.hosp_id")

    def culture_sites(self, ctx):
        return ctx.rows("SELECT DISTINCT p.patient_id, m.culture_site FROM microbiology m JOIN icupatient p "
                        "ON m.unit_id = p.unit_id WHERE m.organism <> 'no growth' ORDER BY 1, 2")

    def organisms(self, ctx, pid, site):
        return (f"SELECT DISTINCT m.organism FROM microbiology m JOIN icupatient p ON m.unit_id = p.unit_id "
                f"WHERE p.patient_id = {q(pid)} AND m.culture_site = {q(site)} AND m.organism <> 'no growth'")

    def procedures_done(self, ctx):
        names = set(ctx.column("SELECT DISTINCT treatment_name FROM treatment"))
        return [k for k, p in ctx.vocab.procedures.items() if p.eicu in names]

    def procedure_cohort(self, ctx, key, days):
        return (f"SELECT COUNT(DISTINCT p.patient_id) FROM treatment t JOIN icupatient p ON t.unit_id = p.unit_id "
                f"WHERE t.treatment_name = {q(ctx.vocab.procedures[key].eicu)} AND {_since('t.treatment_time', days)}")

    def lab_values(self, ctx, lab):
        return ctx.column(f"SELECT lab_result FROM lab WHERE lab_name = {q(ctx.vocab.labs[lab]['eicu'])}")

    def diagnosis_lab_cohort(self, ctx, key, lab, threshold):
        name = ctx.vocab.labs[lab]["eicu"]
        return (f"WITH cond AS ( SELECT DISTINCT unit_id FROM condition WHERE condition_name IN "
                f"({in_list(self.condition_names(ctx, key))}) ) SELECT COUNT(DISTINCT p.patient_id) FROM lab l JOIN cond "
                f"ON l.unit_id = cond.unit_id JOIN icupatient p ON l.unit_id = p.unit_id WHERE l.lab_name = {q(name)} "
                f"AND l.lab_result > {threshold:g}")

    # --- AdaptQA ---------------------------------------------------------------------------------------------------
    def patient_drugs(self, ctx: Context) -> dict:
        out: dict = {}
        for pid, s in ctx.rows("SELECT DISTINCT p.patient_id, m.drug_name FROM prescription m "
                               "JOIN icupatient p ON m.unit_id = p.unit_id ORDER BY 1, 2"):
            generic = _generic_of(ctx, s)
            if generic and generic not in out.setdefault(pid, []):
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
                          f"WHERE c.condition_name IN ({in_list(self.condition_names(ctx, key))}) ORDER BY 1")

    def patient_conditions(self, ctx):
        return ctx.grouped("SELECT DISTINCT p.patient_id, c.condition_name FROM condition c "
                                  "JOIN icupatient p ON c.unit_id = p.unit_id")

    def related_unless(self, ctx, pid, target, related):
        return present_unless(DIAGNOSED.format(pid=q(pid)), "c.condition_name", target, related, "related")

    def lab_patients(self, ctx, lab):
        return set(ctx.column("SELECT DISTINCT p.patient_id FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id "
                              f"WHERE l.lab_name = {q(ctx.vocab.labs[lab]['eicu'])}"))

    def max_lab_or_alternative(self, ctx, pid, lab, alternative):
        src = f"SELECT l.lab_result FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id WHERE p.patient_id = {q(pid)} AND l.lab_name = "
        return (f"WITH a AS ( {src}{q(ctx.vocab.labs[lab]['eicu'])} ), b AS ( {src}{q(ctx.vocab.labs[alternative]['eicu'])} ) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM a) THEN (SELECT MAX(lab_result) FROM a) ELSE (SELECT MAX(lab_result) FROM b) END")

    def patient_procedures(self, ctx):
        return ctx.grouped("SELECT DISTINCT p.patient_id, t.treatment_name FROM treatment t "
                                  "JOIN icupatient p ON t.unit_id = p.unit_id")

    def procedure_unless(self, ctx, pid, key, alternative):
        return present_unless(TREATED.format(pid=q(pid)), "t.treatment_name", self.procedure_names(ctx, key),
                              self.procedure_names(ctx, alternative), "alternative")

    def cohort_with_fallback(self, ctx, key, lab, threshold, heart_rate):
        ctes = (f"cond AS ( SELECT DISTINCT p.patient_id FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id "
                f"WHERE c.condition_name IN ({in_list(self.condition_names(ctx, key))}) ), lab_hit AS ( SELECT DISTINCT p.patient_id "
                f"FROM lab l JOIN icupatient p ON l.unit_id = p.unit_id WHERE l.lab_name = {q(ctx.vocab.labs[lab]['eicu'])} "
                f"AND l.lab_result > {threshold:g} ), tachy AS ( SELECT DISTINCT p.patient_id FROM vital_signs v "
                f"JOIN icupatient p ON v.unit_id = p.unit_id WHERE v.heart_rate > {heart_rate} )")
        full = ("SELECT COUNT(*) FROM cond JOIN lab_hit ON cond.patient_id = lab_hit.patient_id "
                "JOIN tachy ON cond.patient_id = tachy.patient_id")
        relaxed = "SELECT COUNT(*) FROM cond JOIN lab_hit ON cond.patient_id = lab_hit.patient_id"
        return f"WITH {ctes} SELECT CASE WHEN ({full}) > 0 THEN ({full}) ELSE ({relaxed}) END"

    def condition_count(self, ctx, key):
        return (f"WITH cond AS ( SELECT DISTINCT p.patient_id FROM condition c JOIN icupatient p ON c.unit_id = p.unit_id "
                f"WHERE c.condition_name IN ({in_list(self.condition_names(ctx, key))}) ) SELECT COUNT(*) FROM cond")


SCHEMA = EicuTasks()
