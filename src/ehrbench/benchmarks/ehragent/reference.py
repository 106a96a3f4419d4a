"""EHRAgent's reference agent: it answers as an agent would, by reading the question and writing a cell with the
code interface (LoadDB, FilterDB, GetValue, Calendar) that computes the answer on the trial's own database.

The cell is written from the question's words alone (EHRSQL's templates: "has patient 2238 been diagnosed with
hypertension nos since 2104?", "when was the last time that patient 3963 had a urine out foley output?"), never from
the gold SQL or answer, so a reference that scores 100 shows that the tools, their pandas types, the clock, the row
caps and the scorer agree with the gold SQL run on the same database. Questions whose template it does not know
(cohort counts, top-N, day differences, daily lists, changes, costs: SQL-shaped questions) are answered through
SQLInterpreter with the gold SQL, and say so in their cell (`SQL_FALLBACK`); `tool_plan` tells which path a question
takes, so a test can hold the share of tool-answered questions up.
"""
from __future__ import annotations

import re

from .authoring.schemas import SCHEMAS

SQL_FALLBACK = "# no tool plan for this template: the gold SQL through SQLInterpreter\n"
TIME = (r"(?P<time> in \d{4}| since \d{4}| in \d{2}/\d{4}| since \d{2}/\d{4}| since \d+ year ago| since \d+ month ago"
        r"| this year| last year| this month| until \d{4})?")
PATIENT = r"patient (?P<pid>[\w-]+)"
EVENTS = [(r"(?:been|was|were) diagnosed with (?P<name>.+)", "diagnosis"),
          (r"received a (?P<name>.+) procedure", "procedure"), (r"received a (?P<name>.+) lab test", "lab"),
          (r"(?:been|was|were) prescribed (?P<name>.+)", "drug"),
          (r"had a (?P<name>.+) microbiology test", "micro"), (r"had a (?P<name>.+) intake", "intake"),
          (r"had a (?P<name>.+) output", "output"), (r"had a (?P<name>.+) measured", "vital")]


def event(phrase: str) -> tuple[str, str] | None:
    """(kind, name) of "been diagnosed with X", "received a X lab test", ..."""
    for pattern, kind in EVENTS:
        if m := re.fullmatch(pattern, phrase):
            return kind, m["name"]
    return None


def time_filter(column: str, words: str | None) -> str:
    """Lines that keep the rows of `events` whose `column` falls in the question's time window (FilterDB on the
    time text; Calendar for windows that count back from now)."""
    if not words:
        return ""
    w = words.strip()
    if m := re.fullmatch(r"(in|since|until) (\d{4})", w):
        year = int(m[2])
        conds = {"in": f"{column}>={year}-01-01||{column}<{year + 1}-01-01", "since": f"{column}>={year}-01-01",
                 "until": f"{column}<{year + 1}-01-01"}[m[1]]
        return f"events = FilterDB(events, '{conds}')\n"
    if m := re.fullmatch(r"(in|since) (\d{2})/(\d{4})", w):
        month, year = int(m[2]), int(m[3])
        after = f"{year + month // 12}-{month % 12 + 1:02d}-01"
        conds = f"{column}>={year}-{month:02d}-01" + (f"||{column}<{after}" if m[1] == "in" else "")
        return f"events = FilterDB(events, '{conds}')\n"
    if m := re.fullmatch(r"since (\d+) (year|month) ago", w):
        return f"events = FilterDB(events, '{column}>=' + Calendar('-{m[1]} {m[2]}'))\n"
    if w == "this year":
        return f"events = FilterDB(events, '{column}>=' + Calendar('start of year'))\n"
    if w == "this month":
        return f"events = FilterDB(events, '{column}>=' + Calendar('start of month'))\n"
    if w == "last year":
        return ("year = int(Calendar('0 year')[:4]) - 1\n"
                f"events = FilterDB(events, '{column}>={{}}-01-01||{column}<{{}}-01-01'.format(year, year + 1))\n")
    raise ValueError(f"unknown time window {words!r}")


class Plans:
    """Cells for one database's schema, in its column names (EHRSQL's MIMIC-III writes them upper case)."""

    def __init__(self, db_id: str):
        self.db_id, self.schema = db_id, SCHEMAS[db_id]
        self.mimic = db_id == "ehrsql_mimic_iii"

    def col(self, name: str) -> str:
        return name.upper() if self.mimic else name

    def patient_events(self, kind: str, pid: str) -> str:
        """`events`: the rows of the kind's table that belong to the patient (every hospital visit)."""
        table = self.schema.table(kind)
        if self.mimic:
            code = (f"visits = FilterDB(LoadDB('admissions'), 'SUBJECT_ID={pid}')\n"
                    "hadm = [int(float(v)) for v in GetValue(visits, 'HADM_ID, list')]\n"
                    f"events = LoadDB('{table}')\n")
            if table in self.schema.icu_tables:
                return code + ("icu = LoadDB('icustays')\n"
                               "stays = icu[icu['HADM_ID'].isin(hadm)]['ICUSTAY_ID'].tolist()\n"
                               "events = events[events['ICUSTAY_ID'].isin(stays)]\n")
            return code + "events = events[events['HADM_ID'].isin(hadm)]\n"
        return (f"patient = LoadDB('patient')\n"
                f"systems = patient[patient['uniquepid'] == '{pid}']['patienthealthsystemstayid'].tolist()\n"
                "stays = patient[patient['patienthealthsystemstayid'].isin(systems)]['patientunitstayid'].tolist()\n"
                f"events = LoadDB('{table}')\n"
                "events = events[events['patientunitstayid'].isin(stays)]\n")

    def named(self, kind: str, name: str) -> str:
        """Lines that keep the events named `name` (through the dictionary table where the schema has one)."""
        k = self.schema.kinds[kind]
        if not self.mimic and kind == "vital":
            return f"events = events[events['{self.schema.vitals[name]}'].notna()]\n"
        if not self.mimic and kind in ("intake", "output"):
            return (f"events = events[events['cellpath'].str.contains('{kind}', case=False, na=False)]\n"
                    f"events = events[events['celllabel'] == {name!r}]\n")
        if k.lookup is None:
            return f"events = events[events['{self.col(k.key)}'] == {name!r}]\n"
        table, key, label, extra = k.lookup
        code = f"names = LoadDB('{table}')\nnames = names[names['{self.col(label)}'] == {name!r}]\n"
        if extra:                                 # d_items: the item's table ("linksto")
            code += f"names = names[names['LINKSTO'] == '{k.table}']\n"
        # a code read as a number in one table and as text in another ('0389' / 389) is the same code
        return code + (f"ids = {{str(v).lstrip('0') for v in names['{self.col(key)}']}}\n"
                       f"events = events[events['{self.col(k.key)}'].map(lambda v: str(v).lstrip('0')).isin(ids)]\n")

    def value_column(self, kind: str, name: str) -> str:
        if not self.mimic and kind == "vital":
            return self.schema.vitals[name]
        return self.col(self.schema.kinds[kind].value)

    def time_column(self, kind: str) -> str:
        return self.col(self.schema.kinds[kind].time)

    def cell(self, question: str) -> str | None:
        """The cell that answers `question`, or None for a template without a tool plan."""
        q = question
        if m := re.fullmatch(rf"has {PATIENT} (?P<what>.+?){TIME}\?", q):
            if (ev := event(m["what"])) is None:
                return None
            return self._events(*ev, m["pid"], m["time"]) + "answer = int(len(events) > 0)\n"
        if m := re.fullmatch(rf"count the number of times that {PATIENT} (?P<what>.+?){TIME}\.", q):
            if (ev := event(m["what"])) is None:
                return None
            return self._events(*ev, m["pid"], m["time"]) + "answer = len(events)\n"
        if m := re.fullmatch(rf"when was the (?P<order>first|last) time that {PATIENT} (?P<what>.+?){TIME}\?", q):
            if (ev := event(m["what"])) is None:
                return None
            column = self.time_column(ev[0])
            return self._events(*ev, m["pid"], m["time"]) + \
                f"answer = GetValue(events, '{column}, {'min' if m['order'] == 'first' else 'max'}')\n"
        if m := re.fullmatch(rf"what was the (?P<order>first|last) measured value of (?:a (?P<lab>.+) lab test|"
                             rf"(?P<vital>.+)) of {PATIENT}{TIME}\?", q):
            kind, name = ("lab", m["lab"]) if m["lab"] else ("vital", m["vital"])
            value, column = self.value_column(kind, name), self.time_column(kind)
            return self._events(kind, name, m["pid"], m["time"]) + (
                f"events = events.sort_values('{column}', kind='stable', ascending={m['order'] == 'first'})\n"
                f"answer = events['{value}'].tolist()[0]\n")
        if m := re.fullmatch(rf"what was the (?P<agg>maximum|minimum) (?P<name>.+) value of {PATIENT}{TIME}\?", q):
            pick = f"'{{}}, {'max' if m['agg'] == 'maximum' else 'min'}'"
            if self.mimic:        # a lab test or a charted vital: the agent looks the name up, as it would have to
                lab, vital = (self._events(kind, m["name"], m["pid"], m["time"]) for kind in ("lab", "vital"))
                return (f"if {m['name']!r} in set(LoadDB('d_labitems')['LABEL']):\n{_indent(lab)}else:\n"
                        f"{_indent(vital)}events = events[events['VALUENUM'].notna()]\n"
                        f"answer = GetValue(events, {pick}.format('VALUENUM'))\n")
            kind = "vital" if m["name"] in self.schema.vitals else "lab"
            value = self.value_column(kind, m["name"])
            return self._events(kind, m["name"], m["pid"], m["time"]) + (
                f"events = events[events['{value}'].notna()]\n"
                f"answer = GetValue(events, {pick}.format('{value}'))\n")
        if m := re.fullmatch(r"what is the intake method of (?P<name>.+)\?", q):
            drug, route = self.schema.kinds["drug"], self.schema.route_column.split(".")[1]
            return (f"drugs = LoadDB('{drug.table}')\n"
                    f"drugs = drugs[drugs['{self.col(drug.key)}'] == {m['name']!r}]\n"
                    f"answer = GetValue(drugs, '{self.col(route)}')\n")
        return self._about_patient(q)

    def _events(self, kind: str, name: str, pid: str, time: str | None) -> str:
        return (self.patient_events(kind, pid) + self.named(kind, name)
                + time_filter(self.time_column(kind), time))

    def _about_patient(self, q: str) -> str | None:
        if self.mimic:
            if m := re.fullmatch(r"what is the (?P<what>gender|date of birth) of patient (?P<pid>\d+)\?", q):
                column = "GENDER" if m["what"] == "gender" else "DOB"
                return (f"people = FilterDB(LoadDB('patients'), 'SUBJECT_ID={m['pid']}')\n"
                        f"answer = GetValue(people, '{column}')\n")
            if m := re.fullmatch(r"what is the age of patient (?P<pid>\d+) on the current hospital visit\?", q):
                return (f"visits = FilterDB(LoadDB('admissions'), 'SUBJECT_ID={m['pid']}')\n"
                        "answer = GetValue(visits[visits['DISCHTIME'].isna()], 'AGE')\n")
            if m := re.fullmatch(r"when was the (?P<order>first|last) hospital admission time of patient "
                                 r"(?P<pid>\d+)\?", q):
                return (f"visits = FilterDB(LoadDB('admissions'), 'SUBJECT_ID={m['pid']}')\n"
                        f"answer = GetValue(visits, 'ADMITTIME, {'min' if m['order'] == 'first' else 'max'}')\n")
            if m := re.fullmatch(r"count the number of hospital visits of patient (?P<pid>\d+)\.", q):
                return (f"visits = FilterDB(LoadDB('admissions'), 'SUBJECT_ID={m['pid']}')\n"
                        "answer = len(set(GetValue(visits, 'HADM_ID, list')))\n")
            if q == "count the number of current patients.":
                return ("visits = LoadDB('admissions')\n"
                        "answer = len(set(GetValue(visits[visits['DISCHTIME'].isna()], 'SUBJECT_ID, list')))\n")
            return None
        if m := re.fullmatch(r"what is the gender of patient (?P<pid>[\w-]+)\?", q):
            return (f"people = LoadDB('patient')\n"
                    f"answer = GetValue(people[people['uniquepid'] == '{m['pid']}'], 'gender')\n")
        if m := re.fullmatch(r"what was the (?P<order>first|last) height of patient (?P<pid>[\w-]+)\?", q):
            return (f"stays = LoadDB('patient')\n"
                    f"stays = stays[(stays['uniquepid'] == '{m['pid']}') & stays['admissionheight'].notna()]\n"
                    f"stays = stays.sort_values('unitadmittime', kind='stable', ascending={m['order'] == 'first'})\n"
                    "answer = stays['admissionheight'].tolist()[0]\n")
        if m := re.fullmatch(r"when was the (?P<order>first|last) hospital admission time of patient "
                             r"(?P<pid>[\w-]+)\?", q):
            return (f"stays = LoadDB('patient')\n"
                    f"stays = stays[stays['uniquepid'] == '{m['pid']}']\n"
                    f"answer = GetValue(stays, 'hospitaladmittime, {'min' if m['order'] == 'first' else 'max'}')\n")
        if m := re.fullmatch(r"count the number of icu visits of patient (?P<pid>[\w-]+)\.", q):
            return (f"stays = LoadDB('patient')\n"
                    f"answer = len(set(GetValue(stays[stays['uniquepid'] == '{m['pid']}'], "
                    f"'patientunitstayid, list')))\n")
        if q == "count the number of current patients.":
            return ("stays = LoadDB('patient')\n"
                    "answer = len(set(GetValue(stays[stays['hospitaldischargetime'].isna()], 'uniquepid, list')))\n")
        return None


def _indent(code: str) -> str:
    return "".join("    " + line + "\n" for line in code.splitlines())


_PLANS: dict[str, Plans] = {}


def tool_plan(db_id: str, question: str) -> str | None:
    """The reference's cell for a question, or None where it has no plan (TREQS, SQL-shaped templates)."""
    if db_id not in SCHEMAS:
        return None
    if db_id not in _PLANS:
        _PLANS[db_id] = Plans(db_id)
    try:
        return _PLANS[db_id].cell(question)
    except (KeyError, ValueError):       # a template's words with a name or window it does not know: no plan
        return None

