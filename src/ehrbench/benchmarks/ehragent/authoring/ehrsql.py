"""Question sets in EHRSQL's style for the EHRSQL MIMIC-III and eICU renderings.

EHRSQL's template families ("has patient {id} been diagnosed with {x} [time]?", "what was the last measured value
of a {lab} lab test of patient {id} [time]?", "what are the top three most frequent diagnoses [time]?", ...) are
written once here, over a `Schema` that says how each database stores a kind of event (`schemas.py`). Values are
sampled from the database and each time filter is chosen to hold for the sampled event, so nearly every question has
an answer; the driver still runs every gold SQL and drops the empty ones. SQL follows EHRSQL's conventions:
lowercase, `current_time` for now, `strftime('%y', ...)` for years, `%j` for day counts, normal ranges as
`<vital>_lower` / `<vital>_upper` placeholders, all replaced by `post_process_sql` as EHRSQL's evaluate.py does.
"""
from __future__ import annotations

import random
from datetime import datetime
from typing import Callable, Iterator

from .schemas import Schema, lit

EHRSQL_NOW = datetime(2105, 12, 31, 23, 59)
RANKS = {3: "three", 4: "four", 5: "five"}
AGGREGATES = [("maximum", "max"), ("minimum", "min"), ("average", "avg")]
Draft = tuple[str, str, str]          # (family, question, gold SQL before post-processing)
NEGATIVE_SHARE = 0.4                   # "has ... ever" questions drafted about something the patient never had


def time_filter(rng: random.Random, column: str, when: datetime) -> tuple[str, str]:
    """A time filter (question words, SQL condition on `column`) that holds for an event at `when`."""
    years_ago = EHRSQL_NOW.year - when.year
    months_ago = years_ago * 12 + EHRSQL_NOW.month - when.month
    options = [
        (f"in {when.year}", f"strftime('%y',{column}) = '{when.year}'"),
        (f"since {when.year}", f"strftime('%y',{column}) >= '{when.year}'"),
        (f"in {when.month:02d}/{when.year}", f"strftime('%y-%m',{column}) = '{when.year}-{when.month:02d}'"),
        (f"since {when.month:02d}/{when.year}", f"strftime('%y-%m',{column}) >= '{when.year}-{when.month:02d}'"),
        (f"since {years_ago + 1} year ago", f"datetime({column}) >= datetime(current_time,'-{years_ago + 1} year')"),
        (f"since {months_ago + 1} month ago", f"datetime({column}) >= datetime(current_time,'-{months_ago + 1} month')"),
    ]
    if years_ago == 0:
        options.append(("this year", f"datetime({column},'start of year') = datetime(current_time,'start of year',"
                                     "'-0 year')"))
    if years_ago == 1:
        options.append(("last year", f"datetime({column},'start of year') = datetime(current_time,'start of year',"
                                     "'-1 year')"))
    if months_ago == 0:
        options.append(("this month", f"datetime({column},'start of month') = datetime(current_time,'start of month',"
                                      "'-0 month')"))
    if years_ago >= 1:
        options.append((f"until {when.year}", f"strftime('%y',{column}) <= '{when.year}'"))
    return rng.choice(options)


class Generator:
    """The template families; each method yields at most one draft from freshly sampled values."""

    def __init__(self, schema: Schema, rows: Callable[[str], list[tuple]], rng: random.Random):
        self.s, self.rows, self.rng = schema, rows, rng
        self._counts: dict = {}

    def event(self, kind: str, current: bool = False) -> tuple | None:
        """(pid, name, time, value) of one event of `kind` drawn from the database (on an open visit if `current`)."""
        sql = self.s.sample_sql(kind, current)
        if sql not in self._counts:
            self._counts[sql] = self.rows(f"select count(*) from ({sql})")[0][0]
        if not self._counts[sql]:
            return None
        return self.rows(f"{sql} limit 1 offset {self.rng.randrange(self._counts[sql])}")[0]

    def when(self, kind: str, time: str) -> tuple[str, str]:
        """Nine in ten EHRSQL questions carry a time filter: words to append and SQL to AND."""
        if self.rng.random() < 0.1:
            return "", ""
        words, sql = time_filter(self.rng, self.s.time_column(kind), datetime.fromisoformat(time))
        return " " + words, " and " + sql

    def pick(self, *kinds: str) -> str:
        return self.rng.choice(kinds)

    # --- families ---
    def has_ever(self) -> Iterator[Draft]:
        """Some ask about something the patient never had (EHRSQL's "has ... ever" answers are not all yes):
        another patient's event of the same kind, its name one the patient has no event of."""
        kind = self.pick("diagnosis", "procedure", "drug", "lab", "micro", "intake")
        if ev := self.event(kind):
            pid, name, time, _ = ev
            if self.rng.random() < NEGATIVE_SHARE:
                for other in filter(None, (self.event(kind) for _ in range(5))):
                    if not self.rows(f"select count(*) from {self.s.table(kind)} where "
                                     f"{self.s.of_patient(kind, lit(pid))} and {self.s.named(kind, other[1])}")[0][0]:
                        name, time = other[1], other[2]
                        break
                else:
                    return
            words, cond = self.when(kind, time)
            yield ("has ever", f"has {self.s.patient(pid)} {self.s.verb(kind, name)}{words}?",
                   f"select count(*) > 0 from {self.s.table(kind)} where {self.s.of_patient(kind, lit(pid))} and "
                   f"{self.s.named(kind, name)}{cond}")

    def count_times(self) -> Iterator[Draft]:
        kind = self.pick("procedure", "drug", "lab", "intake", "output")
        if ev := self.event(kind):
            pid, name, time, _ = ev
            words, cond = self.when(kind, time)
            yield ("count the number", f"count the number of times that {self.s.patient(pid)} "
                   f"{self.s.verb(kind, name, 'past')}{words}.",
                   f"select count(*) from {self.s.table(kind)} where {self.s.of_patient(kind, lit(pid))} and "
                   f"{self.s.named(kind, name)}{cond}")

    def count_patients(self) -> Iterator[Draft]:
        kind = self.pick("diagnosis", "procedure", "drug", "lab", "micro")
        if ev := self.event(kind):
            _, name, time, _ = ev
            words, cond = self.when(kind, time)
            who = self.s.verb(kind, name, "cohort")
            yield ("count the number", f"count the number of patients who {who}{words}.",
                   self.s.count_patients(kind, f"{self.s.named(kind, name)}{cond}"))

    def when_time(self) -> Iterator[Draft]:
        kind = self.pick("diagnosis", "procedure", "drug", "lab", "micro", "intake", "output", "vital")
        if ev := self.event(kind):
            pid, name, time, _ = ev
            order = self.pick("first", "last")
            words, cond = self.when(kind, time)
            column = self.s.time_column(kind)
            yield ("when was", f"when was the {order} time that {self.s.patient(pid)} "
                   f"{self.s.verb(kind, name, 'past')}{words}?",
                   f"select {column} from {self.s.table(kind)} where {self.s.of_patient(kind, lit(pid))} and "
                   f"{self.s.named(kind, name)}{cond} order by {column} {'asc' if order == 'first' else 'desc'} limit 1")

    def what_value(self) -> Iterator[Draft]:
        kind = self.pick("lab", "vital", "lab")
        if ev := self.event(kind):
            pid, name, time, _ = ev
            words, cond = self.when(kind, time)
            value, column = self.s.value(kind, name), self.s.time_column(kind)
            base = (f"from {self.s.table(kind)} where {self.s.of_patient(kind, lit(pid))} and "
                    f"{self.s.named(kind, name)}{cond}")
            what = f"a {name} lab test" if kind == "lab" else name
            if self.rng.random() < 0.5:
                order = self.pick("first", "last")
                yield ("what is/was", f"what was the {order} measured value of {what} of {self.s.patient(pid)}{words}?",
                       f"select {value} {base} order by {column} {'asc' if order == 'first' else 'desc'} limit 1")
            else:
                agg, fn = self.rng.choice(AGGREGATES)
                yield ("what is/was", f"what was the {agg} {name} value of {self.s.patient(pid)}{words}?",
                       f"select {fn}({value}) {base}")

    def what_name(self) -> Iterator[Draft]:
        kind = self.pick("diagnosis", "procedure", "drug", "lab", "micro")
        if ev := self.event(kind):
            pid, _, time, _ = ev
            order = self.pick("first", "last")
            words, cond = self.when(kind, time)
            column = self.s.time_column(kind)
            yield ("what is/was", f"what was the name of the {self.s.noun(kind)} that {self.s.patient(pid)} "
                   f"{order} received{words}?",
                   f"select {self.s.name_of(kind)} from {self.s.table(kind)} where "
                   f"{self.s.of_patient(kind, lit(pid))}{cond} order by {column} "
                   f"{'asc' if order == 'first' else 'desc'} limit 1")

    def top_frequent(self) -> Iterator[Draft]:
        kind = self.pick("diagnosis", "procedure", "drug", "lab", "micro")
        if ev := self.event(kind):
            n = self.rng.choice(list(RANKS))
            words, cond = self.when(kind, ev[2])
            yield ("top frequent", f"what are the top {RANKS[n]} most frequent {self.s.plural(kind)}{words}?",
                   self.s.top(kind, cond, n))

    def days_since(self) -> Iterator[Draft]:
        kind = self.pick("diagnosis", "drug", "lab")
        if ev := self.event(kind, current=True):
            pid, name, _, _ = ev
            unit, factor = self.rng.choice([("days", 1), ("hours", 24)])
            order = self.pick("first", "last")
            column = self.s.time_column(kind)
            yield ("days since", f"how many {unit} have passed since the {order} time {self.s.patient(pid)} "
                   f"{self.s.verb(kind, name, 'past')} on the current hospital visit?",
                   f"select {factor} * ( strftime('%j',current_time) - strftime('%j',{column}) ) from "
                   f"{self.s.table(kind)} where {self.s.of_current_visit(kind, lit(pid))} and "
                   f"{self.s.named(kind, name)} order by {column} {'asc' if order == 'first' else 'desc'} limit 1")

    def list_values(self) -> Iterator[Draft]:
        if ev := self.event("lab"):
            pid, name, time, _ = ev
            words, cond = self.when("lab", time)
            agg, fn = self.rng.choice(AGGREGATES)
            yield ("list", f"list the daily {agg} {name} lab value of {self.s.patient(pid)}{words}.",
                   f"select {fn}({self.s.value('lab', name)}) from {self.s.table('lab')} where "
                   f"{self.s.of_patient('lab', lit(pid))} and {self.s.named('lab', name)}{cond} "
                   f"group by strftime('%y-%m-%d',{self.s.time_column('lab')})")

    def change(self) -> Iterator[Draft]:
        kind = self.pick("lab", "vital")
        if ev := self.event(kind, current=True):
            pid, name, _, _ = ev
            what = name if kind == "vital" else f"the value of {name}"
            value = self.s.value(kind, name)
            base = (f"from {self.s.table(kind)} where {self.s.of_current_visit(kind, lit(pid))} and "
                    f"{self.s.named(kind, name)} order by {self.s.time_column(kind)} desc limit 1")
            if self.rng.random() < 0.35:
                yield ("comparison", f"is {what} of {self.s.patient(pid)} last measured on the current hospital visit "
                       "greater than the second to last value measured on the current hospital visit?",
                       f"select ( select {value} {base} ) > ( select {value} {base} offset 1 )")
            else:
                yield ("change in value", f"what is the change in {what} of {self.s.patient(pid)} from the second to "
                       "last value measured on the current hospital visit compared to the last value measured on the "
                       "current hospital visit?",
                       f"select ( select {value} {base} ) - ( select {value} {base} offset 1 )")

    def intake_method(self) -> Iterator[Draft]:
        if ev := self.event("drug"):
            name = ev[1]
            yield ("what is/was", f"what is the intake method of {name}?",
                   f"select distinct {self.s.route_column} from {self.s.table('drug')} where "
                   f"{self.s.named('drug', name)}")

    def cost_of(self) -> Iterator[Draft]:
        kind = self.pick("diagnosis", "procedure", "drug", "lab")
        if ev := self.event(kind):
            name = ev[1]
            what = {"diagnosis": f"diagnosing {name}", "procedure": f"a procedure named {name}",
                    "drug": f"a drug named {name}", "lab": f"a {name} lab test"}[kind]
            yield "what is/was", f"what is the cost of {what}?", self.s.cost(kind, self.s.named(kind, name))

    def vital_normal(self) -> Iterator[Draft]:
        if (ev := self.event("vital")) and (placeholder := self.s.normal_range(ev[1])):
            pid, name, time, _ = ev
            words, cond = self.when("vital", time)
            yield ("has ever", f"has the {name} of {self.s.patient(pid)} been normal{words}?",
                   f"select count(*) > 0 from {self.s.table('vital')} where {self.s.of_patient('vital', lit(pid))} and "
                   f"{self.s.named('vital', name)} and {self.s.value('vital', name)} between {placeholder}_lower and "
                   f"{placeholder}_upper{cond}")

    def after_diagnosis(self) -> Iterator[Draft]:
        """EHRSQL's "... within 2 month after having been diagnosed with {x}" cohorts: four tables in MIMIC-III
        (visits, diagnoses and their dictionary, prescriptions), three in eICU."""
        kind = "drug"
        if not (dx := self.event("diagnosis")):
            return
        pid, diagnosis, time, _ = dx
        later = self.rows(f"select name, at from ( select {self.s.name_of(kind)} as name, {self.s.time_column(kind)} "
                          f"as at from {self.s.table(kind)} where {self.s.of_patient(kind, lit(pid))} ) where "
                          f"datetime(at) between datetime({lit(time)}) and datetime({lit(time)},'+2 month') "
                          "order by at")
        if not later:
            return
        name = self.rng.choice(later)[0]
        words, cond = self.when("diagnosis", time)
        first = self.s.events_of_patients("diagnosis", f"{self.s.named('diagnosis', diagnosis)}{cond}")
        then = self.s.events_of_patients(kind, self.s.named(kind, name))
        yield ("count the number", f"count the number of patients who {self.s.verb(kind, name, 'cohort')} within "
               f"2 month after having been diagnosed with {diagnosis}{words}.",
               f"select count( distinct t1.pid ) from ( {first} ) as t1 join ( {then} ) as t2 on t1.pid = t2.pid "
               f"where t1.at < t2.at and "
               f"datetime(t2.at) between datetime(t1.at) and datetime(t1.at,'+2 month')")

    def about_patient(self) -> Iterator[Draft]:
        yield from self.s.about_patient(self)


# family -> weight, after EHRSQL's MIMIC-III template distribution (what is/was 142, count the number 134, top-N 79,
# has ever 74, when was 62, days since 38, list 22, change 15, comparison 8)
FAMILIES = {"what_value": 70, "what_name": 30, "intake_method": 10, "cost_of": 12, "about_patient": 20,
            "count_times": 60, "count_patients": 54, "after_diagnosis": 20, "top_frequent": 79, "has_ever": 60, "vital_normal": 14,
            "when_time": 62, "days_since": 38, "list_values": 22, "change": 23}


def drafts(schema: Schema, rows: Callable[[str], list[tuple]], seed: int) -> Iterator[Draft]:
    """Drafts without end, families drawn by EHRSQL's template distribution."""
    rng = random.Random(seed)
    gen = Generator(schema, rows, rng)
    names, weights = list(FAMILIES), list(FAMILIES.values())
    while True:
        yield from getattr(gen, rng.choices(names, weights)[0])()
