"""Question sets in MIMICSQL's style (TREQS) for the TREQS rendering.

MIMICSQL's template questions ("how many patients whose admission type is emergency and age is less than 71?",
"what is the drug name of subject id 2560?") are built from a table/condition/aggregation frame; its SQL is
`SELECT <agg> FROM DEMOGRAPHIC INNER JOIN <T> on DEMOGRAPHIC.HADM_ID = <T>.HADM_ID WHERE <T>."<COL>" = "<value>" AND
...` with every value double-quoted, numbers included. Conditions are sampled from one admission's rows, so each
question has an answer; numeric thresholds are chosen so that admission satisfies them.
"""
from __future__ import annotations

import random
from typing import Callable, Iterator

from ....schemas.treqs import COLUMNS

# (table, column) -> how MIMICSQL's templates say it
PHRASES = {
    ("DEMOGRAPHIC", "GENDER"): "gender", ("DEMOGRAPHIC", "AGE"): "age",
    ("DEMOGRAPHIC", "ADMISSION_TYPE"): "admission type", ("DEMOGRAPHIC", "MARITAL_STATUS"): "marital status",
    ("DEMOGRAPHIC", "INSURANCE"): "insurance", ("DEMOGRAPHIC", "ETHNICITY"): "ethnicity",
    ("DEMOGRAPHIC", "ADMISSION_LOCATION"): "admission location",
    ("DEMOGRAPHIC", "DISCHARGE_LOCATION"): "discharge location", ("DEMOGRAPHIC", "DIAGNOSIS"): "primary disease",
    ("DEMOGRAPHIC", "EXPIRE_FLAG"): "death status", ("DEMOGRAPHIC", "DAYS_STAY"): "days of hospital stay",
    ("DEMOGRAPHIC", "DOB_YEAR"): "year of birth", ("DEMOGRAPHIC", "ADMITYEAR"): "admission year",
    ("DEMOGRAPHIC", "RELIGION"): "religion", ("DEMOGRAPHIC", "LANGUAGE"): "language",
    ("DEMOGRAPHIC", "NAME"): "name", ("DEMOGRAPHIC", "DOB"): "date of birth", ("DEMOGRAPHIC", "DOD"): "date of death",
    ("DEMOGRAPHIC", "ADMITTIME"): "admission time", ("DEMOGRAPHIC", "DISCHTIME"): "discharge time",
    ("DIAGNOSES", "SHORT_TITLE"): "diagnoses short title", ("DIAGNOSES", "LONG_TITLE"): "diagnoses long title",
    ("DIAGNOSES", "ICD9_CODE"): "diagnoses icd9 code",
    ("PROCEDURES", "SHORT_TITLE"): "procedure short title", ("PROCEDURES", "LONG_TITLE"): "procedure long title",
    ("PROCEDURES", "ICD9_CODE"): "procedure icd9 code",
    ("PRESCRIPTIONS", "DRUG"): "drug name", ("PRESCRIPTIONS", "ROUTE"): "drug route",
    ("PRESCRIPTIONS", "DRUG_TYPE"): "drug type", ("PRESCRIPTIONS", "FORMULARY_DRUG_CD"): "drug code",
    ("PRESCRIPTIONS", "DRUG_DOSE"): "drug dose",
    ("LAB", "LABEL"): "lab test name", ("LAB", "FLUID"): "lab test fluid", ("LAB", "CATEGORY"): "lab test category",
    ("LAB", "FLAG"): "lab test abnormal status", ("LAB", "ITEMID"): "item id", ("LAB", "CHARTTIME"): "lab test chart time",
}
NUMERIC = {"AGE", "DAYS_STAY", "DOB_YEAR", "ADMITYEAR"}
CATEGORICAL_DEMOGRAPHIC = ["GENDER", "ADMISSION_TYPE", "MARITAL_STATUS", "INSURANCE", "ETHNICITY",
                           "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "DIAGNOSIS", "EXPIRE_FLAG", "RELIGION",
                           "LANGUAGE"]
CHILD_CONDITIONS = {"DIAGNOSES": ["SHORT_TITLE", "LONG_TITLE", "ICD9_CODE"],
                    "PROCEDURES": ["SHORT_TITLE", "LONG_TITLE", "ICD9_CODE"],
                    "PRESCRIPTIONS": ["DRUG", "ROUTE", "DRUG_TYPE", "FORMULARY_DRUG_CD"],
                    "LAB": ["LABEL", "FLUID", "CATEGORY", "FLAG", "ITEMID"]}
CHILD_RETRIEVALS = {"DIAGNOSES": ["SHORT_TITLE", "LONG_TITLE", "ICD9_CODE"],
                    "PROCEDURES": ["SHORT_TITLE", "LONG_TITLE", "ICD9_CODE"],
                    "PRESCRIPTIONS": ["DRUG", "ROUTE", "DRUG_DOSE", "DRUG_TYPE"],
                    "LAB": ["LABEL", "FLAG", "CHARTTIME", "CATEGORY"]}
RETRIEVED = ["MARITAL_STATUS", "AGE", "GENDER", "LANGUAGE", "RELIGION", "ADMISSION_TYPE", "DAYS_STAY", "INSURANCE",
             "ETHNICITY", "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "DIAGNOSIS", "DOB", "DOD", "ADMITTIME",
             "DISCHTIME", "DOB_YEAR"]
OPS = [("<", "less than"), (">", "greater than"), ("<=", "less than or equal to"), (">=", "greater than or equal to")]
Draft = tuple[str, str, str]


def value_text(v) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


class Generator:
    def __init__(self, rows: Callable[[str], list[tuple]], rng: random.Random):
        self.rows, self.rng = rows, rng
        self.admissions = [h for (h,) in rows('SELECT HADM_ID FROM DEMOGRAPHIC ORDER BY HADM_ID')]

    def row(self, table: str, hadm: int) -> dict | None:
        cur = self.rows(f'SELECT * FROM {table} WHERE HADM_ID = {hadm}')
        if not cur:
            return None
        return dict(zip([name for name, _ in COLUMNS[table]], self.rng.choice(cur)))

    def condition(self, table: str, column: str, value) -> tuple[str, str] | None:
        """(question words, SQL condition) that the sampled row satisfies."""
        if value is None:
            return None
        phrase = PHRASES[(table, column)]
        if column in NUMERIC and self.rng.random() < 0.7:
            op, words = self.rng.choice(OPS)
            shift = {"<": 1, "<=": 0, ">": -1, ">=": 0}[op] * self.rng.randint(1, 10) if op in ("<", ">") else 0
            threshold = int(value) + shift
            return f"{phrase} is {words} {threshold}", f'{table}."{column}" {op} "{threshold}"'
        return f"{phrase} is {value_text(value)}", f'{table}."{column}" = "{value_text(value)}"'

    @staticmethod
    def join(tables: list[str]) -> str:
        head, *rest = tables
        return head + "".join(f" INNER JOIN {t} on {head}.HADM_ID = {t}.HADM_ID" for t in rest)

    def count(self) -> Iterator[Draft]:
        hadm = self.rng.choice(self.admissions)
        demo = self.row("DEMOGRAPHIC", hadm)
        children = self.rng.sample(list(CHILD_CONDITIONS), k=self.rng.choice([0, 1, 1, 1, 2]))
        parts = [self.condition("DEMOGRAPHIC", c, demo[c])
                 for c in self.rng.sample(CATEGORICAL_DEMOGRAPHIC + sorted(NUMERIC), k=2 - min(1, len(children)))]
        for child in children:
            row = self.row(child, hadm)
            if row is None:
                return
            column = self.rng.choice(CHILD_CONDITIONS[child])
            parts.append(self.condition(child, column, row[column]))
        if any(p is None for p in parts):
            return
        words, where = " and ".join(p[0] for p in parts), " AND ".join(p[1] for p in parts)
        tables = ["DEMOGRAPHIC", *children]
        agg = self.rng.random()
        if agg < 0.8:
            yield ("count", f"how many patients whose {words}?",
                   f'SELECT COUNT ( DISTINCT DEMOGRAPHIC."SUBJECT_ID" ) FROM {self.join(tables)} WHERE {where}')
        else:
            fn, name = self.rng.choice([("AVG", "average"), ("MAX", "maximum"), ("MIN", "minimum")])
            column = self.rng.choice(["AGE", "DAYS_STAY"])
            yield ("aggregate", f"what is the {name} {PHRASES[('DEMOGRAPHIC', column)]} of patients whose {words}?",
                   f'SELECT {fn} ( DEMOGRAPHIC."{column}" ) FROM {self.join(tables)} WHERE {where}')

    def retrieve(self) -> Iterator[Draft]:
        hadm = self.rng.choice(self.admissions)
        demo = self.row("DEMOGRAPHIC", hadm)
        by_name = self.rng.random() < 0.4
        who = demo["NAME"] if by_name else f"subject id {demo['SUBJECT_ID']}"
        key = f'DEMOGRAPHIC."NAME" = "{demo["NAME"]}"' if by_name else \
            f'DEMOGRAPHIC."SUBJECT_ID" = "{demo["SUBJECT_ID"]}"'
        if self.rng.random() < 0.5:
            columns = self.rng.sample(RETRIEVED, k=self.rng.choice([1, 1, 2]))
            words = " and ".join(PHRASES[("DEMOGRAPHIC", c)] for c in columns)
            select = " , ".join(f'DEMOGRAPHIC."{c}"' for c in columns)
            yield "retrieve", f"what is the {words} of {who}?", f"SELECT {select} FROM DEMOGRAPHIC WHERE {key}"
            return
        child = self.rng.choice(list(CHILD_RETRIEVALS))
        column = self.rng.choice(CHILD_RETRIEVALS[child])
        if by_name:
            sql = f'SELECT {child}."{column}" FROM {self.join(["DEMOGRAPHIC", child])} WHERE {key}'
        else:
            sql = f'SELECT {child}."{column}" FROM {child} WHERE {child}."SUBJECT_ID" = "{demo["SUBJECT_ID"]}"'
        yield "retrieve", f"what is the {PHRASES[(child, column)]} of {who}?", sql


FAMILIES = {"count": 75, "retrieve": 25}


def drafts(rows: Callable[[str], list[tuple]], seed: int) -> Iterator[Draft]:
    rng = random.Random(seed)
    gen = Generator(rows, rng)
    names, weights = list(FAMILIES), list(FAMILIES.values())
    while True:
        yield from getattr(gen, rng.choices(names, weights)[0])()
