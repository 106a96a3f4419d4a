"""MIMIC-IV* gold SQL and candidate lookups for the IncreQA (`incre.py`) and AdaptQA (`adapt.py`) templates."""
from __future__ import annotations

from .common import Context, in_list, present_unless, q

NOW = "'2100-12-31 23:59:00'"
DX_JOIN = "admissiondiagnoses ad JOIN diagnosiscodes dc ON ad.icdcode = dc.icdcode AND ad.codeversion = dc.codeversion"
PX_JOIN = ("admissionprocedures ap JOIN procedurecodes pc ON ap.icdcode = pc.icdcode "
           "AND ap.codeversion = pc.codeversion")


def _since(column: str, days: int) -> str:
    return f"datetime({column}) >= datetime({NOW}, '-{days} days')"


def visit_cte(pid: int, scope: str) -> str:
    order = "DESC" if scope == "last" else "ASC"
    return (f"visit AS ( SELECT admissionid FROM hospitaladmissions WHERE patientid = {pid} "
            f"ORDER BY admitdatetime {order} LIMIT 1 )")


class MimicTasks:
    patient = "patient ID {}"
    population = "patients"
    coding_sentence = "The diagnosis may be coded in either ICD-9 or ICD-10, and you want both counted."
    entries = "drug names"
    coding_note = " (coded in either ICD-9 or ICD-10)"

    def condition_names(self, ctx: Context, key: str) -> set[str]:
        c = ctx.vocab.conditions[key]
        return {ctx.vocab.diagnosis_description(c.icd9, 9), ctx.vocab.diagnosis_description(c.icd10, 10)}

    def procedure_names(self, ctx: Context, key: str) -> set[str]:
        p = ctx.vocab.procedures[key]
        return {p.icd9[1], p.icd10[1]}

    def _dx_cte(self, ctx: Context, key: str, columns: str = "ad.patientid, ad.admissionid") -> str:
        return f"dx AS ( SELECT DISTINCT {columns} FROM {DX_JOIN} WHERE dc.description IN ({in_list(self.condition_names(ctx, key))}) )"

    # --- IncreQA ---------------------------------------------------------------------------------------------------
    def present_conditions(self, ctx):
        coded = set(ctx.column(f"SELECT DISTINCT dc.description FROM {DX_JOIN}"))
        return [k for k in ctx.vocab.conditions if self.condition_names(ctx, k) & coded]

    def cohort_count(self, ctx, key, restriction):
        kind, value = restriction
        where = {"window": lambda: _since("ha.admitdatetime", value), "age": lambda: f"ha.age >= {value}",
                 "gender": lambda: f"d.gender = {q(value)}"}[kind]()
        return (f"WITH {self._dx_cte(ctx, key)} SELECT COUNT(DISTINCT ha.patientid) FROM hospitaladmissions ha "
                f"JOIN dx ON ha.admissionid = dx.admissionid JOIN demographics d ON d.patientid = ha.patientid WHERE {where}")

    def patient_labs(self, ctx):
        by_id = {v["mimic_id"]: k for k, v in ctx.vocab.labs.items()}
        return [(pid, by_id[code]) for pid, code in ctx.rows("SELECT DISTINCT patientid, itemcode FROM labresults ORDER BY 1, 2")
                if code in by_id]                     # the curated labs, which have lay names; not the tail

    def patient_lab(self, ctx, pid, lab, scope, agg):
        lab_cte = f"lab AS ( SELECT itemcode FROM labtesttypes WHERE itemname = {q(ctx.vocab.labs[lab]['mimic'])} )"
        src = (f"FROM labresults lr JOIN visit v ON lr.admissionid = v.admissionid JOIN lab l ON lr.itemcode = l.itemcode "
               f"WHERE lr.patientid = {pid}")
        if agg in ("max", "min"):
            return f"WITH {visit_cte(pid, scope)}, {lab_cte} SELECT {agg.upper()}(lr.resultvalue) {src}"
        order = "DESC" if agg == "last" else "ASC"
        return f"WITH {visit_cte(pid, scope)}, {lab_cte} SELECT lr.resultvalue {src} ORDER BY lr.resultdatetime {order} LIMIT 1"

    def medication_count(self, ctx, pid, drug, scope):
        like = f"mo.medicationname LIKE {q('%' + drug + '%')}"
        if scope == "all":
            return f"SELECT COUNT(*) FROM medicationorders mo WHERE mo.patientid = {pid} AND {like}"
        return (f"WITH {visit_cte(pid, scope)} SELECT COUNT(*) FROM medicationorders mo JOIN visit v "
                f"ON mo.admissionid = v.admissionid WHERE mo.patientid = {pid} AND {like}")

    def drug_cohort(self, ctx, drug, days):
        return (f"SELECT COUNT(DISTINCT patientid) FROM medicationorders WHERE medicationname LIKE {q('%' + drug + '%')} "
                f"AND {_since('startdatetime', days)}")

    def top_diagnoses(self, ctx, restriction, n):
        kind, value = restriction
        where = {"age": lambda: f"ha.age >= {value}", "under": lambda: f"ha.age < {value}",
                 "gender": lambda: f"d.gender = {q(value)}", "window": lambda: _since("ha.admitdatetime", value)}[kind]()
        return (f"WITH counts AS ( SELECT dc.description, COUNT(*) AS n FROM {DX_JOIN} JOIN hospitaladmissions ha "
                f"ON ad.admissionid = ha.admissionid JOIN demographics d ON d.patientid = ha.patientid WHERE {where} "
                "GROUP BY dc.description ), ranked AS ( SELECT description, DENSE_RANK() OVER (ORDER BY n DESC) AS rnk "
                f"FROM counts ) SELECT description FROM ranked WHERE rnk <= {n}")

    def icu_patients(self, ctx):
        return ctx.column("SELECT DISTINCT patientid FROM icuepisodes ORDER BY 1")

    def vital(self, ctx, pid, vital, agg):
        return (f"WITH stay AS ( SELECT icuadmissionid FROM icuepisodes WHERE patientid = {pid} ORDER BY admitdatetime ASC LIMIT 1 ), "
                f"item AS ( SELECT itemcode FROM clinicalitemtypes WHERE itemname = {q(ctx.vocab.vitals[vital]['mimic'])} ) "
                f"SELECT ROUND({agg}(ce.value), 4) FROM clinicalevents ce JOIN stay s ON ce.icuadmissionid = s.icuadmissionid "
                "JOIN item i ON ce.itemcode = i.itemcode")

    def patients(self, ctx):
        return ctx.column("SELECT DISTINCT patientid FROM hospitaladmissions ORDER BY 1")

    def stay_cost(self, ctx, pid, scope):
        return (f"WITH {visit_cte(pid, scope)} SELECT ROUND(SUM(cr.costamount), 4) FROM costrecords cr "
                "JOIN visit v ON cr.admissionid = v.admissionid")

    def culture_sites(self, ctx):
        return ctx.rows("SELECT DISTINCT patientid, specimentype FROM microbiologyresults WHERE organismname IS NOT NULL ORDER BY 1, 2")

    def organisms(self, ctx, pid, site):
        return (f"SELECT DISTINCT organismname FROM microbiologyresults WHERE patientid = {pid} "
                f"AND specimentype = {q(site)} AND organismname IS NOT NULL")

    def procedures_done(self, ctx):
        done = set(ctx.column(f"SELECT DISTINCT pc.description FROM {PX_JOIN}"))
        return [k for k in ctx.vocab.procedures if self.procedure_names(ctx, k) & done]

    def procedure_cohort(self, ctx, key, days):
        return (f"WITH px AS ( SELECT ap.patientid, ap.recordeddatetime FROM {PX_JOIN} WHERE pc.description IN "
                f"({in_list(self.procedure_names(ctx, key))}) ) SELECT COUNT(DISTINCT patientid) FROM px "
                f"WHERE {_since('recordeddatetime', days)}")

    def lab_values(self, ctx, lab):
        return ctx.column(f"SELECT resultvalue FROM labresults WHERE itemcode = {ctx.vocab.labs[lab]['mimic_id']}")

    def diagnosis_lab_cohort(self, ctx, key, lab, threshold):
        return (f"WITH {self._dx_cte(ctx, key, 'ad.admissionid')}, lab AS ( SELECT itemcode FROM labtesttypes "
                f"WHERE itemname = {q(ctx.vocab.labs[lab]['mimic'])} ) SELECT COUNT(DISTINCT lr.patientid) FROM labresults lr "
                f"JOIN lab l ON lr.itemcode = l.itemcode JOIN dx ON lr.admissionid = dx.admissionid WHERE lr.resultvalue > {threshold:g}")

    # --- AdaptQA ---------------------------------------------------------------------------------------------------
    def patient_drugs(self, ctx: Context) -> dict:
        out: dict = {}
        for pid, drug in ctx.rows("SELECT DISTINCT patientid, medicationname FROM medicationorders ORDER BY 1, 2"):
            if drug in ctx.vocab.drugs:               # the curated drugs (brands, classes); not the long tail
                out.setdefault(pid, []).append(drug)
        return out

    def stores_brand(self, ctx: Context, drug: str) -> bool:
        return False

    def brand_or_generic_count(self, ctx, pid, brand, generic):
        return (f"WITH brand AS ( SELECT recordid FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + brand + '%')} ), "
                f"generic AS ( SELECT recordid FROM medicationorders WHERE patientid = {pid} AND medicationname LIKE {q('%' + generic + '%')} ) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM brand) THEN (SELECT COUNT(*) FROM brand) ELSE (SELECT COUNT(*) FROM generic) END")

    def drugs_unless(self, ctx, pid, names, exclude, cte):
        return present_unless(f"FROM medicationorders WHERE patientid = {pid}", "medicationname", exclude, names, cte)

    def condition_patients(self, ctx, key):
        return ctx.column(f"WITH {self._dx_cte(ctx, key, 'ad.patientid')} SELECT patientid FROM dx ORDER BY 1")

    def patient_conditions(self, ctx):
        return ctx.grouped(f"SELECT DISTINCT ad.patientid, dc.description FROM {DX_JOIN}")

    def related_unless(self, ctx, pid, target, related):
        return present_unless(f"FROM {DX_JOIN} WHERE ad.patientid = {pid}", "dc.description", target, related, "related")

    def lab_patients(self, ctx, lab):
        return set(ctx.column(f"SELECT DISTINCT patientid FROM labresults WHERE itemcode = {ctx.vocab.labs[lab]['mimic_id']}"))

    def max_lab_or_alternative(self, ctx, pid, lab, alternative):
        labs = ctx.vocab.labs
        src = ("SELECT lr.resultvalue FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode "
               f"WHERE lr.patientid = {pid} AND lt.itemname = ")
        return (f"WITH a AS ( {src}{q(labs[lab]['mimic'])} ), b AS ( {src}{q(labs[alternative]['mimic'])} ) "
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM a) THEN (SELECT MAX(resultvalue) FROM a) ELSE (SELECT MAX(resultvalue) FROM b) END")

    def patient_procedures(self, ctx):
        return ctx.grouped(f"SELECT DISTINCT ap.patientid, pc.description FROM {PX_JOIN}")

    def procedure_unless(self, ctx, pid, key, alternative):
        return present_unless(f"FROM {PX_JOIN} WHERE ap.patientid = {pid}", "pc.description",
                              self.procedure_names(ctx, key), self.procedure_names(ctx, alternative), "alternative")

    def cohort_with_fallback(self, ctx, key, lab, threshold, heart_rate):
        name = ctx.vocab.labs[lab]["mimic"]
        ctes = (f"{self._dx_cte(ctx, key, 'ad.patientid')}, "
                f"lab AS ( SELECT DISTINCT lr.patientid FROM labresults lr JOIN labtesttypes lt ON lr.itemcode = lt.itemcode "
                f"WHERE lt.itemname = {q(name)} AND lr.resultvalue > {threshold:g} ), "
                f"tachy AS ( SELECT DISTINCT ce.patientid FROM clinicalevents ce JOIN clinicalitemtypes ci ON ce.itemcode = ci.itemcode "
                f"WHERE ci.itemname = 'heart rate' AND ce.value > {heart_rate} )")
        full = "SELECT COUNT(*) FROM dx JOIN lab ON dx.patientid = lab.patientid JOIN tachy ON dx.patientid = tachy.patientid"
        relaxed = "SELECT COUNT(*) FROM dx JOIN lab ON dx.patientid = lab.patientid"
        return f"WITH {ctes} SELECT CASE WHEN ({full}) > 0 THEN ({full}) ELSE ({relaxed}) END"

    def condition_count(self, ctx, key):
        return f"WITH {self._dx_cte(ctx, key, 'ad.patientid')} SELECT COUNT(*) FROM dx"


SCHEMA = MimicTasks()
