"""How EHRSQL's MIMIC-III and eICU store each kind of event, for the question generator (`ehrsql.py`).

A kind of event ("diagnosis", "lab", "vital", ...) is a table, a time column, the column that names it (directly, or
an id looked up in a dictionary table, as MIMIC-III's itemid in d_labitems), and optionally a value; the SQL
fragments of every family are composed from these, in EHRSQL's style (a patient's rows through their hospital
visits, names through dictionary subqueries).
"""
from __future__ import annotations

from dataclasses import dataclass


def lit(v) -> str:
    """A SQL literal as EHRSQL writes one: numbers bare, text in single quotes."""
    return str(v) if isinstance(v, (int, float)) else "'" + str(v).replace("'", "''") + "'"


@dataclass(frozen=True)
class Kind:
    table: str
    time: str
    key: str                          # the column naming the event, or the id looked up in `lookup`
    verb: str                         # after "has patient 1": "been diagnosed with {v}" ("{v}" is the name)
    past: str                         # after "the time that patient 1": "was diagnosed with {v}"
    noun: str
    plural: str                       # "top three most frequent ..."
    value: str | None = None
    lookup: tuple[str, str, str, str] | None = None   # (table, id column, name column, extra condition)
    cost_type: str | None = None      # the event's type in the cost table
    pk: str = "row_id"


class Schema:
    db_id = ""
    kinds: dict[str, Kind] = {}
    route_column = ""
    normal_ranges: dict[str, str] = {}     # vital name -> EHRSQL's placeholder stem (heart_rate -> heart_rate_lower)

    def patient(self, pid) -> str:
        return f"patient {pid}"

    def table(self, kind: str) -> str:
        return self.kinds[kind].table

    def time_column(self, kind: str) -> str:
        k = self.kinds[kind]
        return f"{k.table}.{k.time}"

    def verb(self, kind: str, name: str, tense: str = "perfect") -> str:
        """How a question says the event happened: "perfect" (has patient 1 ...), "past" (the time that patient 1
        ...), "cohort" (patients who ...)."""
        k = self.kinds[kind]
        text = k.verb if tense == "perfect" else k.past.replace("was ", "were ") if tense == "cohort" else k.past
        return text.format(v=name)

    def noun(self, kind: str) -> str:
        return self.kinds[kind].noun

    def plural(self, kind: str) -> str:
        return self.kinds[kind].plural

    def name_of(self, kind: str) -> str:
        k = self.kinds[kind]
        if k.lookup is None:
            return f"{k.table}.{k.key}"
        table, key, name, extra = k.lookup
        return f"( select {table}.{name} from {table} where {table}.{key} = {k.table}.{k.key}{extra} )"

    def named(self, kind: str, name: str) -> str:
        k = self.kinds[kind]
        if k.lookup is None:
            return f"{k.table}.{k.key} = {lit(name)}"
        table, key, col, extra = k.lookup
        return f"{k.table}.{k.key} in ( select {table}.{key} from {table} where {table}.{col} = {lit(name)}{extra} )"

    def value(self, kind: str, name: str) -> str:
        k = self.kinds[kind]
        return f"{k.table}.{k.value}"

    def top(self, kind: str, cond: str, n: int) -> str:
        k = self.kinds[kind]
        ranked = (f"( select {k.table}.{k.key}, dense_rank() over ( order by count(*) desc ) as c1 from {k.table} "
                  f"where 1 = 1{cond} group by {k.table}.{k.key} ) as t1 where t1.c1 <= {n}")
        if k.lookup is None:
            return f"select t1.{k.key} from {ranked}"
        table, key, col, extra = k.lookup
        return f"select {table}.{col} from {table} where {table}.{key} in ( select t1.{k.key} from {ranked} ){extra}"

    def cost(self, kind: str, cond: str) -> str:
        raise NotImplementedError

    def normal_range(self, name: str) -> str | None:
        return self.normal_ranges.get(name)

    def sample_sql(self, kind: str, current: bool) -> str:
        raise NotImplementedError

    def of_patient(self, kind: str, pid: str) -> str:
        raise NotImplementedError

    def of_current_visit(self, kind: str, pid: str) -> str:
        raise NotImplementedError

    def count_patients(self, kind: str, cond: str) -> str:
        raise NotImplementedError

    def events_of_patients(self, kind: str, cond: str) -> str:
        """SQL of (pid, at): patient id and event time of the events of `kind` meeting `cond`."""
        raise NotImplementedError

    def about_patient(self, gen):
        raise NotImplementedError


class MimicIII(Schema):
    db_id = "ehrsql_mimic_iii"
    d_items = lambda linksto: ("d_items", "itemid", "label", f" and d_items.linksto = '{linksto}'")  # noqa: E731
    kinds = {
        "diagnosis": Kind("diagnoses_icd", "charttime", "icd9_code", "been diagnosed with {v}", "was diagnosed with {v}",
                          "diagnosis", "diagnoses", lookup=("d_icd_diagnoses", "icd9_code", "short_title", ""),
                          cost_type="diagnoses_icd"),
        "procedure": Kind("procedures_icd", "charttime", "icd9_code", "received a {v} procedure",
                          "received a {v} procedure", "procedure", "procedures",
                          lookup=("d_icd_procedures", "icd9_code", "short_title", ""), cost_type="procedures_icd"),
        "drug": Kind("prescriptions", "startdate", "drug", "been prescribed {v}", "was prescribed {v}", "drug",
                     "prescribed drugs", value="dose_val_rx", cost_type="prescriptions"),
        "lab": Kind("labevents", "charttime", "itemid", "received a {v} lab test", "received a {v} lab test",
                    "lab test", "lab tests", value="valuenum", lookup=("d_labitems", "itemid", "label", ""),
                    cost_type="labevents"),
        "micro": Kind("microbiologyevents", "charttime", "spec_type_desc", "had a {v} microbiology test",
                      "had a {v} microbiology test", "specimen", "specimens tested"),
        "vital": Kind("chartevents", "charttime", "itemid", "had a {v} measured", "had a {v} measured", "vital sign",
                      "vital signs", value="valuenum", lookup=d_items("chartevents")),
        "intake": Kind("inputevents_cv", "charttime", "itemid", "had a {v} intake", "had a {v} intake", "intake",
                       "intake events", value="amount", lookup=d_items("inputevents_cv")),
        "output": Kind("outputevents", "charttime", "itemid", "had a {v} output", "had a {v} output", "output",
                       "output events", value="value", lookup=d_items("outputevents")),
    }
    route_column = "prescriptions.route"
    normal_ranges = {"heart rate": "heart_rate", "sao2": "sao2", "respiratory rate": "respiration",
                     "temperature c (calc)": "temperature", "arterial bp [systolic]": "systolic_bp",
                     "arterial bp [diastolic]": "diastolic_bp", "arterial bp mean": "mean_bp"}

    icu_tables = {"chartevents", "inputevents_cv", "outputevents"}

    def of_patient(self, kind: str, pid: str) -> str:
        """Through the patient's hospital visits, and for ICU charting through their ICU stays, as EHRSQL writes it."""
        visits = f"( select admissions.hadm_id from admissions where admissions.subject_id = {pid} )"
        t = self.table(kind)
        if t in self.icu_tables:
            return f"{t}.icustay_id in ( select icustays.icustay_id from icustays where icustays.hadm_id in {visits} )"
        return f"{t}.hadm_id in {visits}"

    def events_of_patients(self, kind: str, cond: str) -> str:
        k = self.kinds[kind]
        return (f"select admissions.subject_id as pid, {k.table}.{k.time} as at from {k.table} join admissions on "
                f"{k.table}.hadm_id = admissions.hadm_id where {cond}")

    def of_current_visit(self, kind: str, pid: str) -> str:
        return (f"{self.table(kind)}.hadm_id in ( select admissions.hadm_id from admissions where "
                f"admissions.subject_id = {pid} and admissions.dischtime is null )")

    def sample_sql(self, kind: str, current: bool) -> str:
        k = self.kinds[kind]
        return (f"select admissions.subject_id, {self.name_of(kind)}, {k.table}.{k.time}, "
                f"{f'{k.table}.{k.value}' if k.value else 'null'} from {k.table} join admissions on "
                f"admissions.hadm_id = {k.table}.hadm_id{' where admissions.dischtime is null' if current else ''} "
                f"order by {k.table}.row_id")

    def count_patients(self, kind: str, cond: str) -> str:
        t = self.table(kind)
        return (f"select count( distinct admissions.subject_id ) from admissions where admissions.hadm_id in "
                f"( select {t}.hadm_id from {t} where {cond} )")

    def cost(self, kind: str, cond: str) -> str:
        k = self.kinds[kind]
        return (f"select distinct cost.cost from cost where cost.event_type = '{k.cost_type}' and cost.event_id in "
                f"( select {k.table}.row_id from {k.table} where {cond} )")

    def about_patient(self, gen):
        pids = gen.rows("select distinct subject_id from admissions order by subject_id")
        open_pids = gen.rows("select distinct subject_id from admissions where dischtime is null order by subject_id")
        pid = gen.rng.choice(pids)[0]
        choice = gen.rng.randrange(6)
        if choice == 0:
            yield ("what is/was", f"what is the gender of patient {pid}?",
                   f"select distinct patients.gender from patients where patients.subject_id = {pid}")
        elif choice == 1:
            yield ("what is/was", f"what is the date of birth of patient {pid}?",
                   f"select distinct patients.dob from patients where patients.subject_id = {pid}")
        elif choice == 2 and open_pids:
            pid = gen.rng.choice(open_pids)[0]
            yield ("what is/was", f"what is the age of patient {pid} on the current hospital visit?",
                   f"select admissions.age from admissions where admissions.subject_id = {pid} and "
                   "admissions.dischtime is null")
        elif choice == 3:
            yield ("count the number", "count the number of current patients.",
                   "select count( distinct admissions.subject_id ) from admissions where admissions.dischtime is null")
        elif choice == 4:
            order = gen.pick("first", "last")
            yield ("when was", f"when was the {order} hospital admission time of patient {pid}?",
                   f"select admissions.admittime from admissions where admissions.subject_id = {pid} order by "
                   f"admissions.admittime {'asc' if order == 'first' else 'desc'} limit 1")
        else:
            yield ("count the number", f"count the number of hospital visits of patient {pid}.",
                   f"select count( distinct admissions.hadm_id ) from admissions where admissions.subject_id = {pid}")


class Eicu(Schema):
    db_id = "ehrsql_eicu"
    kinds = {
        "diagnosis": Kind("diagnosis", "diagnosistime", "diagnosisname", "been diagnosed with {v}",
                          "were diagnosed with {v}", "diagnosis", "diagnoses", cost_type="diagnosis", pk="diagnosisid"),
        "procedure": Kind("treatment", "treatmenttime", "treatmentname", "received a {v} procedure",
                          "received a {v} procedure", "procedure", "procedures", cost_type="treatment",
                          pk="treatmentid"),
        "drug": Kind("medication", "drugstarttime", "drugname", "been prescribed {v}", "was prescribed {v}", "drug",
                     "prescribed drugs", cost_type="medication", pk="medicationid"),
        "lab": Kind("lab", "labresulttime", "labname", "received a {v} lab test", "received a {v} lab test",
                    "lab test", "lab tests", value="labresult", cost_type="lab", pk="labid"),
        "micro": Kind("microlab", "culturetakentime", "culturesite", "had a {v} microbiology test",
                      "had a {v} microbiology test", "specimen", "specimens tested", pk="microlabid"),
        "vital": Kind("vitalperiodic", "observationtime", "", "had a {v} measured", "had a {v} measured", "vital sign",
                      "vital signs", pk="vitalperiodicid"),
        "intake": Kind("intakeoutput", "intakeoutputtime", "celllabel", "had a {v} intake", "had a {v} intake",
                       "intake", "intake events", value="cellvaluenumeric", pk="intakeoutputid"),
        "output": Kind("intakeoutput", "intakeoutputtime", "celllabel", "had a {v} output", "had a {v} output",
                       "output", "output events", value="cellvaluenumeric", pk="intakeoutputid"),
    }
    route_column = "medication.routeadmin"
    vitals = {"heart rate": "heartrate", "sao2": "sao2", "respiration": "respiration", "temperature": "temperature",
              "systolic blood pressure": "systemicsystolic", "diastolic blood pressure": "systemicdiastolic",
              "mean blood pressure": "systemicmean"}
    normal_ranges = {"heart rate": "heart_rate", "sao2": "sao2", "respiration": "respiration",
                     "temperature": "temperature", "systolic blood pressure": "systolic_bp",
                     "diastolic blood pressure": "diastolic_bp", "mean blood pressure": "mean_bp"}
    paths = {"intake": "%intake%", "output": "%output%"}

    def _stays(self, pid: str, extra: str = "") -> str:
        return (f"( select patient.patientunitstayid from patient where patient.patienthealthsystemstayid in "
                f"( select patient.patienthealthsystemstayid from patient where patient.uniquepid = {pid}{extra} ) )")

    def of_patient(self, kind: str, pid: str) -> str:
        return f"{self.table(kind)}.patientunitstayid in {self._stays(pid)}"

    def of_current_visit(self, kind: str, pid: str) -> str:
        return f"{self.table(kind)}.patientunitstayid in {self._stays(pid, ' and patient.hospitaldischargetime is null')}"

    def events_of_patients(self, kind: str, cond: str) -> str:
        k = self.kinds[kind]
        return (f"select patient.uniquepid as pid, {k.table}.{k.time} as at from {k.table} join patient on "
                f"{k.table}.patientunitstayid = patient.patientunitstayid where {cond}")

    def named(self, kind: str, name: str) -> str:
        if kind == "vital":
            return f"vitalperiodic.{self.vitals[name]} is not null"
        if kind in self.paths:
            return f"intakeoutput.cellpath like '{self.paths[kind]}' and intakeoutput.celllabel = {lit(name)}"
        return super().named(kind, name)

    def value(self, kind: str, name: str) -> str:
        return f"vitalperiodic.{self.vitals[name]}" if kind == "vital" else super().value(kind, name)

    def sample_sql(self, kind: str, current: bool) -> str:
        k = self.kinds[kind]
        if kind == "vital":      # one column per vital: every charted value of every vital, named
            return " union all ".join(f"select * from ({self._sample(k, lit(name), f'vitalperiodic.{column}', current, [f'vitalperiodic.{column} is not null'])})" for name, column in self.vitals.items())
        where = [f"{k.table}.cellpath like '{self.paths[kind]}'"] if kind in self.paths else []
        return self._sample(k, f"{k.table}.{k.key}", f"{k.table}.{k.value}" if k.value else "null", current, where)

    def _sample(self, k: Kind, name: str, value: str, current: bool, where: list[str]) -> str:
        where = where + (["patient.hospitaldischargetime is null"] if current else [])
        return (f"select patient.uniquepid, {name}, {k.table}.{k.time}, {value} from {k.table} join patient on "
                f"patient.patientunitstayid = {k.table}.patientunitstayid"
                f"{' where ' + ' and '.join(where) if where else ''} order by {k.table}.{k.pk}")

    def count_patients(self, kind: str, cond: str) -> str:
        t = self.table(kind)
        return (f"select count( distinct patient.uniquepid ) from patient where patient.patientunitstayid in "
                f"( select {t}.patientunitstayid from {t} where {cond} )")

    def cost(self, kind: str, cond: str) -> str:
        k = self.kinds[kind]
        return (f"select distinct cost.cost from cost where cost.eventtype = '{k.cost_type}' and cost.eventid in "
                f"( select {k.table}.{k.pk} from {k.table} where {cond} )")

    def about_patient(self, gen):
        pids = gen.rows("select distinct uniquepid from patient order by uniquepid")
        pid = lit(gen.rng.choice(pids)[0])
        choice = gen.rng.randrange(5)
        if choice == 0:
            yield ("what is/was", f"what is the gender of patient {pid[1:-1]}?",
                   f"select distinct patient.gender from patient where patient.uniquepid = {pid}")
        elif choice == 1:
            order = gen.pick("first", "last")
            yield ("what is/was", f"what was the {order} height of patient {pid[1:-1]}?",
                   f"select patient.admissionheight from patient where patient.uniquepid = {pid} and "
                   f"patient.admissionheight is not null order by patient.unitadmittime "
                   f"{'asc' if order == 'first' else 'desc'} limit 1")
        elif choice == 2:
            yield ("count the number", "count the number of current patients.",
                   "select count( distinct patient.uniquepid ) from patient where patient.hospitaldischargetime is null")
        elif choice == 3:
            order = gen.pick("first", "last")
            yield ("when was", f"when was the {order} hospital admission time of patient {pid[1:-1]}?",
                   f"select patient.hospitaladmittime from patient where patient.uniquepid = {pid} order by "
                   f"patient.hospitaladmittime {'asc' if order == 'first' else 'desc'} limit 1")
        else:
            yield ("count the number", f"count the number of icu visits of patient {pid[1:-1]}.",
                   f"select count( distinct patient.patientunitstayid ) from patient where patient.uniquepid = {pid}")


SCHEMAS = {s.db_id: s for s in (MimicIII(), Eicu())}
