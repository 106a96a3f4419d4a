"""The question templates of ehrbench's ClinSQL tasks: one per scenario and difficulty, each turning an anchor
patient and a drawn concept (a condition, a lab, a vital sign, a drug, a procedure group) into a question, its gold
BigQuery SQL, the SQL rubric's leaves and the result columns with their clinical ranges (`Draft`).

The catalogs below name real MIMIC-IV item ids and ICD-9 / ICD-10 prefixes; `authoring.py` runs the drafts on the
world and writes the tasks.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

HOSP, ICU, DERIVED = "physionet-data.mimiciv_3_1_hosp", "physionet-data.mimiciv_3_1_icu", \
    "physionet-data.mimiciv_3_1_derived"



def t(module: str, table: str) -> str:
    return f"`{module}.{table}`"


# --- what the questions are about -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    name: str
    icd9: tuple[str, ...]
    icd10: tuple[str, ...]

    def where(self, alias: str = "d") -> str:
        nine = " OR ".join(f"{alias}.icd_code LIKE '{c}%'" for c in self.icd9)
        ten = " OR ".join(f"{alias}.icd_code LIKE '{c}%'" for c in self.icd10)
        return f"(({alias}.icd_version = 9 AND ({nine})) OR ({alias}.icd_version = 10 AND ({ten})))"

    def codes(self) -> str:
        return f"ICD-9 {', '.join(self.icd9)} / ICD-10 {', '.join(self.icd10)}"


CONDITIONS = (Condition("heart failure", ("428",), ("I50",)), Condition("acute kidney injury", ("584",), ("N17",)),
              Condition("sepsis", ("038", "99591", "99592"), ("A40", "A41", "R652")),
              Condition("pneumonia", ("480", "481", "482", "483", "484", "485", "486"),
                        ("J12", "J13", "J14", "J15", "J16", "J17", "J18")),
              Condition("diabetes", ("250",), ("E10", "E11")), Condition("COPD", ("491", "492", "496"), ("J44",)),
              Condition("atrial fibrillation", ("42731",), ("I48",)),
              Condition("chronic kidney disease", ("585",), ("N18",)),
              Condition("acute myocardial infarction", ("410",), ("I21",)),
              Condition("hypertension", ("401",), ("I10",)), Condition("anemia", ("285",), ("D64",)),
              Condition("coronary artery disease", ("414",), ("I25",)))


@dataclass(frozen=True)
class Measure:
    name: str
    itemid: int
    unit: str
    plausible: tuple[float, float]
    high: float | None = None          # an abnormal-high threshold (episodes, categories)
    low: float | None = None


LABS = (Measure("creatinine", 50912, "mg/dL", (0.1, 20), high=1.3), Measure("sodium", 50983, "mEq/L", (100, 180),
                                                                            high=145, low=135),
        Measure("potassium", 50971, "mEq/L", (1.5, 9), high=5.0, low=3.5),
        Measure("troponin T", 51003, "ng/mL", (0, 25), high=0.01), Measure("glucose", 50931, "mg/dL", (20, 1500),
                                                                           high=180, low=70),
        Measure("hemoglobin", 51222, "g/dL", (2, 22), low=12), Measure("platelet count", 51265, "K/uL", (1, 1500),
                                                                       low=150),
        Measure("white blood cell count", 51301, "K/uL", (0.1, 150), high=11, low=4),
        Measure("urea nitrogen", 51006, "mg/dL", (1, 250), high=20), Measure("bicarbonate", 50882, "mEq/L", (3, 60),
                                                                             low=22),
        Measure("magnesium", 50960, "mg/dL", (0.3, 8), low=1.6))
VITALS = (Measure("heart rate", 220045, "bpm", (20, 250), high=100, low=60),
          Measure("respiratory rate", 220210, "insp/min", (3, 70), high=20, low=12),
          Measure("SpO2", 220277, "%", (50, 100), low=92),
          Measure("non-invasive mean arterial pressure", 220181, "mmHg", (20, 200), low=65, high=110),
          Measure("temperature", 223762, "°C", (30, 43), high=38.0, low=36.0),
          Measure("non-invasive systolic blood pressure", 220179, "mmHg", (40, 260), high=140, low=90))
DRUGS = ("heparin", "insulin", "pantoprazole", "acetaminophen", "metformin", "lisinopril", "atorvastatin", "aspirin",
         "furosemide", "vancomycin", "metoprolol", "enoxaparin", "warfarin", "ceftriaxone", "famotidine")
PROCEDURE_GROUPS = (("cardiac", ("35", "36", "37"), ("02",)), ("respiratory", ("96", "33"), ("0B", "5A1")),
                    ("imaging", ("87", "88"), ("B",)), ("digestive", ("42", "43", "44", "45", "46"), ("0D",)),
                    ("urinary and dialysis", ("39", "55", "56", "57"), ("0T", "5A1D")))
ICU_PROCEDURES = (("invasive ventilation", 225792), ("arterial line", 225752), ("multi-lumen central line", 224263),
                  ("chest X-ray", 225459), ("intubation", 224385))
ADMISSION_GROUPS = (("emergency", ("EW EMER.", "DIRECT EMER.")), ("elective", ("ELECTIVE",)),
                    ("urgent", ("URGENT",)), ("observation", ("EU OBSERVATION", "OBSERVATION ADMIT",
                                                              "DIRECT OBSERVATION", "AMBULATORY OBSERVATION")),
                    ("same-day surgical", ("SURGICAL SAME DAY ADMISSION",)))
STATS = (("median", 50), ("75th percentile", 75), ("25th percentile", 25), ("90th percentile", 90))


def stat_name(k: int) -> str:
    """A percentile's column suffix: median, p75, ..."""
    return "median" if k == 50 else f"p{k}"


# --- the anchor patient -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Anchor:
    """The anchor patient and the cohort drawn around them: same sex, age within ±5 years, and, for `restriction`
    1 to 3, only patients with an emergency, a Medicare-insured or an emergency-room admission (ClinSQL's cohorts
    often carry such a third criterion; it also varies the queries' shapes)."""
    age: int
    male: bool
    style: int
    restriction: int = 0

    @property
    def lo(self) -> int:
        return self.age - 5

    @property
    def hi(self) -> int:
        return self.age + 5

    @property
    def g(self) -> str:
        return "M" if self.male else "F"

    @property
    def people(self) -> str:
        return "men" if self.male else "women"

    @property
    def adj(self) -> str:
        return "male" if self.male else "female"

    def opening(self, extra: str = "") -> str:
        """How the question introduces the anchor patient (the validation split's phrasings)."""
        hyphen = "‑" if self.style % 2 else "-"
        noun = "patient" if not extra else f"patient with {extra}"
        return [f"For my {self.age}{hyphen}year{hyphen}old {self.adj} {noun}",
                f"I have a {self.age}{hyphen}year{hyphen}old {'man' if self.male else 'woman'}"
                + (f" with {extra}" if extra else ""),
                f"My {self.age}{hyphen}year{hyphen}old {self.adj} inpatient" + (f" has {extra}" if extra else ""),
                f"As a clinician: for my {self.age}{hyphen}year{hyphen}old {self.adj}"
                + (f" with {extra}" if extra else "")][self.style % 4]

    def where(self, indent: int, how: str = "anchor_age") -> str:
        """The cohort's WHERE clause (after `WHERE `), its lines indented as the query around it."""
        pad = " " * (indent + 2)
        age = "p.anchor_age" if how == "anchor_age" else age_at_admission()
        lines = [f"p.gender = '{self.g}'", f"{pad}AND {age} BETWEEN {self.lo} AND {self.hi}"]
        if self.restriction:
            column, values = RESTRICTIONS[self.restriction][1:3]
            lines.append(f"{pad}AND EXISTS (\n{pad}  SELECT 1 FROM {t(HOSP, 'admissions')} AS ra\n{pad}  WHERE "
                         f"ra.subject_id = p.subject_id AND ra.{column} IN ({', '.join(repr(v) for v in values)})"
                         f"\n{pad})")
        return "\n".join(lines)

    def sentence(self) -> str:
        """The cohort's third criterion as the question states it ('' without one)."""
        return f" Only include patients with {RESTRICTIONS[self.restriction][0]}." if self.restriction else ""

    def cohort_leaves(self, how: str = "anchor_age") -> list[tuple[str, str, bool]]:
        age = ("`p.anchor_age BETWEEN {lo} AND {hi}`" if how == "anchor_age" else
               "the age at admission (`p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year`) between "
               "{lo} and {hi}").format(lo=self.lo, hi=self.hi)
        leaves = [("gender-selection", f"Filters the cohort to {self.people} only, as specified by "
                   f"`p.gender = '{self.g}'`.", True),
                  ("age-range-selection", f"Restricts the cohort to ages {self.lo} to {self.hi}, using {age}.", True)]
        if self.restriction:
            what, column, values = RESTRICTIONS[self.restriction]
            leaves.append((f"{column.replace('_', '-')}-restriction", f"Keeps only patients with {what} (an "
                           f"`admissions` row of the same `subject_id` with `{column}` in "
                           f"({', '.join(repr(v) for v in values)})), whichever admission is analysed.", True))
        return leaves


RESTRICTIONS = {1: ("at least one emergency admission", "admission_type", ("EW EMER.", "DIRECT EMER.")),
                2: ("at least one Medicare-insured admission", "insurance", ("Medicare",)),
                3: ("at least one admission through the emergency room", "admission_location", ("EMERGENCY ROOM",))}


def age_at_admission() -> str:
    return "(p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year)"


# --- one template's output --------------------------------------------------------------------------------------
@dataclass
class Draft:
    question: str
    sql: str
    leaves: dict[str, list[tuple[str, str, bool]]]          # SQL tree category id -> (id, requirement, critical)
    outputs: dict[str, tuple[str, float, float]]             # column -> (description, plausible lo, hi)
    sequential_analytics: bool = False


Template = Callable[[Anchor, random.Random], Draft]


def with_extra(draft: Draft, rng: random.Random, item: str, column: str, sentence: str,
               output: tuple[str, float, float], leaf: tuple[str, str]) -> Draft:
    """Half the instances of a template also ask for one more measure (a sentence at the question's end, a column
    at the end of the outer SELECT, its output range and its analytics leaf): ClinSQL's cells vary in what they
    report, not only in their concepts."""
    if rng.random() < 0.5:
        return draft
    at = draft.sql.rindex("\nFROM ")
    draft.sql = f"{draft.sql[:at]},\n  {item} AS {column}{draft.sql[at:]}"
    draft.question += f" Also report {sentence}."
    draft.outputs[column] = output
    draft.leaves.setdefault("clinical-analytics", []).append((*leaf, False))
    return draft


# --- the templates: one per scenario and difficulty ---------------------------------------------------------------
COUNT = ("number of patients", 1, 100000)
PCT = ("percentage", 0, 100)
LOS_DAYS = ("length of stay in days", 0, 365)
LOS_HOURS = ("length of stay in hours", 0, 8760)


def demographics_easy(an: Anchor, rng: random.Random) -> Draft:
    group, types = rng.choice(ADMISSION_GROUPS)
    stat, k = rng.choice(STATS)
    col = f"p{k}_los_days" if k != 50 else "median_los_days"
    listed = ", ".join(f"'{x}'" for x in types)
    sql = f"""SELECT
  APPROX_QUANTILES(DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0, 100)[OFFSET({k})] AS {col}
FROM {t(HOSP, 'patients')} AS p
JOIN {t(HOSP, 'admissions')} AS a
  ON p.subject_id = a.subject_id
WHERE {an.where(0)}
  AND a.admission_type IN ({listed});"""
    return Draft(f"{an.opening()}, among {an.people} aged {an.lo}–{an.hi} with {group} admissions, what is the "
                 f"{stat} hospital length of stay in days?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [
                         ("admission-type-selection", f"Selects {group} admissions with `a.admission_type IN "
                          f"({listed})`.", True)],
                     "database-integration": [("patients-admissions-join", "Joins `patients` and `admissions` on "
                                               "`subject_id`.", True)],
                     "clinical-analytics": [("los-calculation", "Computes length of stay in days from `admittime` to "
                                             "`dischtime` (e.g., DATETIME_DIFF in hours / 24).", False),
                                            ("percentile-calculation", f"Computes the {stat} (e.g., "
                                             f"APPROX_QUANTILES(..., 100)[OFFSET({k})]).", False)]},
                 {col: (f"{stat} length of stay in days", 0, 365)})


def demographics_medium(an: Anchor, rng: random.Random) -> Draft:
    insurance = rng.choice(("Medicare", "Medicaid", "Other"))
    sql = f"""WITH cohort AS (
  SELECT
    a.hadm_id,
    DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0 AS los_days,
    CASE
      WHEN a.hospital_expire_flag = 1 THEN 'In-hospital death'
      WHEN a.discharge_location IN ('HOME', 'HOME HEALTH CARE') THEN 'Home'
      ELSE 'Facility or other'
    END AS disposition
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  WHERE {an.where(2, "admission")}
    AND a.insurance = '{insurance}'
)
SELECT
  disposition,
  COUNT(*) AS num_admissions,
  ROUND(AVG(los_days), 2) AS mean_los_days,
  APPROX_QUANTILES(los_days, 4)[OFFSET(2)] AS median_los_days,
  ROUND(100 * COUNTIF(los_days <= 10) / COUNT(*), 2) AS pct_los_le_10_days
FROM cohort
GROUP BY disposition
ORDER BY disposition;"""
    draft = Draft(f"{an.opening()}, among {insurance} {an.adj} admissions aged {an.lo}–{an.hi} at admission, give "
                 "the length-of-stay distribution (count, mean, median, percent ≤10 days) by discharge to home, "
                 "to a facility, or in-hospital death.", sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission") + [
                         ("insurance-selection", f"Restricts to admissions with `a.insurance = '{insurance}'`.",
                          True)],
                     "medical-concept-implementation": [
                         ("disposition-definition", "Groups admissions by in-hospital death "
                          "(`hospital_expire_flag = 1`), discharge home (HOME, HOME HEALTH CARE) or elsewhere.", True)],
                     "database-integration": [("patients-admissions-join", "Joins `patients` and `admissions` on "
                                               "`subject_id`.", True)],
                     "clinical-analytics": [("los-calculation", "Computes length of stay in days from admittime "
                                             "and dischtime.", False),
                                            ("distribution-statistics", "Reports count, mean and median LOS per "
                                             "disposition group.", False),
                                            ("threshold-percentage", "Computes the percentage of stays of at most "
                                             "10 days.", False)]},
                 {"num_admissions": ("number of admissions", 1, 100000), "mean_los_days": LOS_DAYS,
                  "median_los_days": LOS_DAYS, "pct_los_le_10_days": PCT})
    return with_extra(draft, rng, "APPROX_QUANTILES(los_days, 100)[OFFSET(90)]", "p90_los_days",
                      "the 90th percentile of length of stay", ("90th percentile length of stay in days", 0, 365),
                      ("p90-los", "Computes the 90th percentile of LOS per group."))


def demographics_hard(an: Anchor, rng: random.Random) -> Draft:
    cond = rng.choice(CONDITIONS)
    sql = f"""WITH admissions_aged AS (
  SELECT
    a.subject_id, a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag,
    ROW_NUMBER() OVER (PARTITION BY a.subject_id ORDER BY a.admittime) AS admission_order,
    LEAD(a.admittime) OVER (PARTITION BY a.subject_id ORDER BY a.admittime) AS next_admittime
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  WHERE {an.where(2, "admission")}
),
flagged AS (
  SELECT
    x.*,
    EXISTS (
      SELECT 1 FROM {t(HOSP, 'diagnoses_icd')} AS d
      WHERE d.hadm_id = x.hadm_id AND {cond.where('d')}
    ) AS has_condition
  FROM admissions_aged AS x
  WHERE x.admission_order = 1
)
SELECT
  IF(has_condition, '{cond.name}', 'all other index admissions') AS cohort,
  COUNT(*) AS num_patients,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(100 * COUNTIF(next_admittime IS NOT NULL AND DATETIME_DIFF(next_admittime, dischtime, DAY) <= 30) / COUNT(*), 2)
    AS readmission_30d_pct
FROM flagged
GROUP BY cohort
ORDER BY cohort;"""
    return Draft(f"{an.opening(cond.name)}. Among {an.adj} patients aged {an.lo}–{an.hi} at their first (index) "
                 f"admission, compare index admissions with {cond.name} to all other index admissions: number of "
                 "patients, mean LOS, in-hospital mortality (%) and 30-day readmission (%).", sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission") + [
                         ("index-admission", "Keeps each patient's first admission (ROW_NUMBER over admittime = 1).",
                          True)],
                     "medical-concept-implementation": [
                         ("condition-codes", f"Identifies {cond.name} with both code systems ({cond.codes()}) on "
                          "`diagnoses_icd`, checking `icd_version`.", True)],
                     "database-integration": [("patients-admissions-join", "Joins `patients` and `admissions` on "
                                               "`subject_id`.", True),
                                              ("diagnoses-link", "Links diagnoses to the admission by `hadm_id`.",
                                               True)],
                     "clinical-analytics": [("readmission-window", "Finds the next admission (LEAD over admittime) "
                                             "and counts readmissions within 30 days of discharge.", False),
                                            ("mortality-rate", "Computes in-hospital mortality from "
                                             "`hospital_expire_flag`.", False),
                                            ("group-comparison", "Reports the measures for both groups side by side.",
                                             False)]},
                 {"num_patients": COUNT, "mean_los_days": LOS_DAYS, "mortality_pct": PCT,
                  "readmission_30d_pct": PCT}, sequential_analytics=True)


def vitals_easy(an: Anchor, rng: random.Random) -> Draft:
    m = rng.choice(VITALS)
    stat, k = rng.choice(STATS)
    col = f"first_value_{stat_name(k)}"
    sql = f"""WITH first_values AS (
  SELECT
    ce.stay_id,
    ce.valuenum,
    ROW_NUMBER() OVER (PARTITION BY ce.stay_id ORDER BY ce.charttime) AS rn
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(ICU, 'icustays')} AS i
    ON p.subject_id = i.subject_id
  JOIN {t(ICU, 'chartevents')} AS ce
    ON i.stay_id = ce.stay_id
  WHERE {an.where(2)}
    AND ce.itemid = {m.itemid}
    AND ce.valuenum IS NOT NULL
)
SELECT
  APPROX_QUANTILES(valuenum, 100)[OFFSET({k})] AS {col}
FROM first_values
WHERE rn = 1;"""
    return Draft(f"{an.opening()}, among ICU {an.people} aged {an.lo}–{an.hi}, what is the {stat} of the "
                 f"first-recorded {m.name} ({m.unit}) of the ICU stay?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [
                         ("vital-itemid", f"Selects {m.name} with `ce.itemid = {m.itemid}` and non-null "
                          "`valuenum`.", True)],
                     "database-integration": [("icu-join", "Joins `patients`, `icustays` and `chartevents` "
                                               "on subject_id / stay_id.", True)],
                     "clinical-analytics": [("first-measurement", "Takes the first measurement per ICU stay "
                                             "(ROW_NUMBER over charttime).", False),
                                            ("percentile", f"Computes the {stat}.", False)]},
                 {col: (f"{stat} first {m.name}", *m.plausible)})


def vitals_medium(an: Anchor, rng: random.Random) -> Draft:
    m = rng.choice([v for v in VITALS if v.low is not None and v.high is not None])
    hours = rng.choice((24, 48))
    sql = f"""WITH stay_means AS (
  SELECT
    i.stay_id,
    AVG(ce.valuenum) AS mean_value
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(ICU, 'icustays')} AS i
    ON p.subject_id = i.subject_id
  JOIN {t(ICU, 'chartevents')} AS ce
    ON i.stay_id = ce.stay_id
  WHERE {an.where(2)}
    AND ce.itemid = {m.itemid}
    AND ce.valuenum IS NOT NULL
    AND ce.charttime BETWEEN i.intime AND DATETIME_ADD(i.intime, INTERVAL {hours} HOUR)
  GROUP BY i.stay_id
)
SELECT
  CASE
    WHEN mean_value < {m.low:g} THEN 'low (<{m.low:g})'
    WHEN mean_value > {m.high:g} THEN 'high (>{m.high:g})'
    ELSE 'normal ({m.low:g}-{m.high:g})'
  END AS category,
  COUNT(*) AS num_stays,
  ROUND(AVG(mean_value), 2) AS mean_value,
  APPROX_QUANTILES(mean_value, 100)[OFFSET(50)] AS median_value
FROM stay_means
GROUP BY category
ORDER BY category;"""
    draft = Draft(f"{an.opening()}. Among {an.adj} ICU patients {an.lo}–{an.hi}, categorize per-stay average "
                 f"{m.name} during the first {hours} hours as <{m.low:g}, {m.low:g}–{m.high:g}, >{m.high:g} and give "
                 "n, mean and median.", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [
                         ("vital-itemid", f"Selects {m.name} with `ce.itemid = {m.itemid}`.", True),
                         ("time-window", f"Keeps measurements within the first {hours} hours after ICU `intime`.",
                          True)],
                     "database-integration": [("icu-join", "Joins `patients`, `icustays` and `chartevents` "
                                               "on subject_id / stay_id.", True)],
                     "clinical-analytics": [("per-stay-average", "Averages the values per ICU stay.", False),
                                            ("categorization", f"Categorizes the averages at {m.low:g} and "
                                             f"{m.high:g}.", False),
                                            ("summary-statistics", "Reports count, mean and median per category.",
                                             False)]},
                 {"num_stays": ("number of ICU stays", 1, 100000), "mean_value": (f"mean {m.name}", *m.plausible),
                  "median_value": (f"median {m.name}", *m.plausible)})
    return with_extra(draft, rng, "ROUND(STDDEV(mean_value), 2)", "sd_value", "the standard deviation",
                      (f"standard deviation of {m.name}", 0, m.plausible[1] - m.plausible[0]),
                      ("standard-deviation", "Computes the standard deviation of the per-stay averages."))


def vitals_hard(an: Anchor, rng: random.Random) -> Draft:
    m = rng.choice(VITALS)
    above = m.high is not None and (m.low is None or rng.random() < 0.5)
    test, word = (f"ce.valuenum > {m.high:g}", f"{m.name} above {m.high:g}") if above else \
        (f"ce.valuenum < {m.low:g}", f"{m.name} below {m.low:g}")
    sql = f"""WITH first_stays AS (
  SELECT
    i.subject_id, i.hadm_id, i.stay_id, i.intime, i.los,
    ROW_NUMBER() OVER (PARTITION BY i.subject_id ORDER BY i.intime) AS stay_order
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(ICU, 'icustays')} AS i
    ON p.subject_id = i.subject_id
  WHERE {an.where(2)}
),
episodes AS (
  SELECT
    s.stay_id, s.hadm_id, s.los,
    COUNTIF({test}) AS abnormal_episodes
  FROM first_stays AS s
  LEFT JOIN {t(ICU, 'chartevents')} AS ce
    ON s.stay_id = ce.stay_id
    AND ce.itemid = {m.itemid}
    AND ce.charttime BETWEEN s.intime AND DATETIME_ADD(s.intime, INTERVAL 24 HOUR)
  WHERE s.stay_order = 1
  GROUP BY s.stay_id, s.hadm_id, s.los
),
quartiles AS (
  SELECT e.*, a.hospital_expire_flag, NTILE(4) OVER (ORDER BY e.abnormal_episodes, e.stay_id) AS quartile
  FROM episodes AS e
  JOIN {t(HOSP, 'admissions')} AS a
    ON e.hadm_id = a.hadm_id
)
SELECT
  quartile,
  COUNT(*) AS num_stays,
  ROUND(AVG(abnormal_episodes), 2) AS mean_abnormal_episodes,
  ROUND(AVG(los * 24), 1) AS mean_icu_los_hours,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct
FROM quartiles
GROUP BY quartile
ORDER BY quartile;"""
    draft = Draft(f"{an.opening()}: among {an.adj} first ICU stays aged {an.lo}–{an.hi}, count measurements of "
                 f"{word} in the first 24 hours, stratify stays into quartiles of that count and report per "
                 "quartile the number of stays, mean count, mean ICU LOS in hours and in-hospital mortality (%).",
                 sql, {
                     "patient-cohort-construction": an.cohort_leaves() + [
                         ("first-icu-stay", "Keeps each patient's first ICU stay (ROW_NUMBER over intime = 1).",
                          True)],
                     "medical-concept-implementation": [
                         ("vital-itemid", f"Uses {m.name} (`itemid = {m.itemid}`).", True),
                         ("abnormal-threshold", f"Counts measurements with {test.replace('ce.', '')}.", True),
                         ("time-window", "Restricts to the first 24 hours after ICU `intime`.", False)],
                     "database-integration": [("icu-join", "Joins `patients`, `icustays`, `chartevents` and "
                                               "`admissions` on subject_id / stay_id / hadm_id.", True),
                                              ("left-join-zero", "Keeps stays without abnormal measurements "
                                               "(LEFT JOIN, count 0).", False)],
                     "clinical-analytics": [("quartiles", "Stratifies stays into quartiles (NTILE(4)).", False),
                                            ("outcomes", "Reports count, mean episodes, ICU LOS in hours and "
                                             "in-hospital mortality per quartile.", False)]},
                 {"num_stays": ("number of ICU stays", 1, 100000),
                  "mean_abnormal_episodes": ("mean abnormal measurements", 0, 500),
                  "mean_icu_los_hours": LOS_HOURS, "mortality_pct": PCT}, sequential_analytics=True)
    return with_extra(draft, rng, "APPROX_QUANTILES(los * 24, 100)[OFFSET(50)]", "median_icu_los_hours",
                      "the median ICU LOS in hours per quartile", ("median ICU length of stay in hours", 0, 8760),
                      ("median-icu-los", "Computes the median ICU LOS in hours per quartile."))


def labs_easy(an: Anchor, rng: random.Random) -> Draft:
    m = rng.choice(LABS)
    stat, k = rng.choice(STATS)
    col = f"first_{m.name.replace(' ', '_').lower()}_{stat_name(k)}"
    sql = f"""WITH first_labs AS (
  SELECT
    le.hadm_id,
    le.valuenum,
    ROW_NUMBER() OVER (PARTITION BY le.hadm_id ORDER BY le.charttime) AS rn
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'labevents')} AS le
    ON p.subject_id = le.subject_id
  WHERE {an.where(2)}
    AND le.itemid = {m.itemid}
    AND le.valuenum IS NOT NULL
    AND le.hadm_id IS NOT NULL
)
SELECT
  APPROX_QUANTILES(valuenum, 100)[OFFSET({k})] AS {col}
FROM first_labs
WHERE rn = 1;"""
    return Draft(f"{an.opening()}, among {an.people} aged {an.lo}–{an.hi}, what is the {stat} of the first "
                 f"{m.name} ({m.unit}) measured in each hospitalization?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [("lab-itemid", f"Selects {m.name} with `le.itemid = "
                                                         f"{m.itemid}` and non-null `valuenum`.", True)],
                     "database-integration": [("labevents-join", "Joins `patients` and `labevents` on "
                                               "`subject_id`, per hospitalization (`hadm_id`).", True)],
                     "clinical-analytics": [("first-measurement", "Takes the first value per admission.", False),
                                            ("percentile", f"Computes the {stat}.", False)]},
                 {col: (f"{stat} first {m.name}", *m.plausible)})


def labs_medium(an: Anchor, rng: random.Random) -> Draft:
    m = rng.choice(LABS)
    cond = rng.choice(CONDITIONS)
    sql = f"""WITH cohort AS (
  SELECT DISTINCT a.hadm_id
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  JOIN {t(HOSP, 'diagnoses_icd')} AS d
    ON a.hadm_id = d.hadm_id
  WHERE {an.where(2, "admission")}
    AND {cond.where('d')}
),
initial AS (
  SELECT
    le.hadm_id, le.valuenum, le.ref_range_lower, le.ref_range_upper,
    ROW_NUMBER() OVER (PARTITION BY le.hadm_id ORDER BY le.charttime) AS rn
  FROM cohort AS c
  JOIN {t(HOSP, 'labevents')} AS le
    ON c.hadm_id = le.hadm_id
  WHERE le.itemid = {m.itemid}
    AND le.valuenum IS NOT NULL
)
SELECT
  CASE
    WHEN valuenum < ref_range_lower THEN 'Below reference range'
    WHEN valuenum > ref_range_upper THEN 'Above reference range'
    ELSE 'Within reference range'
  END AS category,
  COUNT(*) AS num_admissions,
  ROUND(100 * COUNT(*) / SUM(COUNT(*)) OVER (), 2) AS pct_admissions
FROM initial
WHERE rn = 1
GROUP BY category
ORDER BY category;"""
    return Draft(f"{an.opening(cond.name)}. Among {an.adj} admissions with {cond.name} aged {an.lo}–{an.hi}, "
                 f"what is the percent distribution of the initial {m.name} below, within and above the "
                 "laboratory's reference range?", sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission"),
                     "medical-concept-implementation": [
                         ("condition-codes", f"Identifies {cond.name} ({cond.codes()}) by `icd_version`.", True),
                         ("lab-itemid", f"Selects {m.name} (`itemid = {m.itemid}`).", True),
                         ("reference-range", "Categorizes with `ref_range_lower` / `ref_range_upper`.", False)],
                     "database-integration": [("cohort-joins", "Joins patients, admissions, diagnoses_icd and "
                                               "labevents on subject_id / hadm_id.", True)],
                     "clinical-analytics": [("initial-value", "Takes the first value per admission.", False),
                                            ("percent-distribution", "Reports counts and percentages of the total.",
                                             False)]},
                 {"num_admissions": ("number of admissions", 1, 100000), "pct_admissions": PCT})


def labs_hard(an: Anchor, rng: random.Random) -> Draft:
    cond = rng.choice(CONDITIONS)
    hours = rng.choice((24, 48, 72))
    sql = f"""WITH cohort AS (
  SELECT DISTINCT a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  JOIN {t(HOSP, 'diagnoses_icd')} AS d
    ON a.hadm_id = d.hadm_id
  WHERE {an.where(2, "admission")}
    AND {cond.where('d')}
),
instability AS (
  SELECT
    c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag,
    COUNTIF(le.flag = 'abnormal') AS abnormal_results
  FROM cohort AS c
  LEFT JOIN {t(HOSP, 'labevents')} AS le
    ON c.hadm_id = le.hadm_id
    AND le.charttime BETWEEN c.admittime AND DATETIME_ADD(c.admittime, INTERVAL {hours} HOUR)
  GROUP BY c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag
),
ranked AS (
  SELECT *, NTILE(4) OVER (ORDER BY abnormal_results, hadm_id) AS quartile
  FROM instability
)
SELECT
  IF(quartile = 4, 'top quartile', 'lower three quartiles') AS instability_group,
  COUNT(*) AS num_admissions,
  ROUND(AVG(abnormal_results), 2) AS mean_abnormal_results,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days
FROM ranked
GROUP BY instability_group
ORDER BY instability_group;"""
    return Draft(f"{an.opening(cond.name)}. Among {an.adj} {cond.name} admissions aged {an.lo}–{an.hi}, score lab "
                 f"instability as the number of abnormal-flagged results in the first {hours} hours; for the top "
                 "quartile versus the rest report admissions, mean score, in-hospital mortality (%) and mean LOS.",
                 sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission"),
                     "medical-concept-implementation": [
                         ("condition-codes", f"Identifies {cond.name} ({cond.codes()}) by `icd_version`.", True),
                         ("abnormal-flag", "Counts lab results with `flag = 'abnormal'`.", True),
                         ("time-window", f"Restricts to the first {hours} hours after `admittime`.", False)],
                     "database-integration": [("cohort-joins", "Joins patients, admissions, diagnoses_icd and "
                                               "labevents on subject_id / hadm_id.", True),
                                              ("left-join-zero", "Keeps admissions without abnormal results.",
                                               False)],
                     "clinical-analytics": [("quartiles", "Assigns quartiles of the score (NTILE(4)).", False),
                                            ("group-outcomes", "Reports count, mean score, mortality and LOS for "
                                             "the top quartile and the rest.", False)]},
                 {"num_admissions": ("number of admissions", 1, 100000),
                  "mean_abnormal_results": ("mean abnormal results", 0, 1000), "mortality_pct": PCT,
                  "mean_los_days": LOS_DAYS}, sequential_analytics=True)


def medication_easy(an: Anchor, rng: random.Random) -> Draft:
    drug = rng.choice(DRUGS)
    stat, k = rng.choice(STATS)
    col = f"duration_days_{stat_name(k)}"
    sql = f"""SELECT
  APPROX_QUANTILES(DATETIME_DIFF(rx.stoptime, rx.starttime, HOUR) / 24.0, 100)[OFFSET({k})] AS {col}
FROM {t(HOSP, 'patients')} AS p
JOIN {t(HOSP, 'prescriptions')} AS rx
  ON p.subject_id = rx.subject_id
WHERE {an.where(0)}
  AND LOWER(rx.drug) LIKE '%{drug}%'
  AND rx.stoptime > rx.starttime;"""
    return Draft(f"{an.opening()}. Among {an.people} aged {an.lo}–{an.hi}, what is the {stat} duration in days "
                 f"of inpatient {drug} prescriptions?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [("drug-match", f"Matches {drug} case-insensitively on "
                                                         "`prescriptions.drug`.", True)],
                     "database-integration": [("prescriptions-join", "Joins `patients` and `prescriptions` on "
                                               "`subject_id`.", True)],
                     "clinical-analytics": [("duration", "Computes the duration from starttime to stoptime in days, "
                                             "excluding non-positive durations.", False),
                                            ("percentile", f"Computes the {stat}.", False)]},
                 {col: (f"{stat} prescription duration in days", 0, 365)})


def medication_medium(an: Anchor, rng: random.Random) -> Draft:
    drug = rng.choice(DRUGS)
    cond = rng.choice(CONDITIONS)
    hours = rng.choice((24, 48))
    sql = f"""WITH cohort AS (
  SELECT
    a.hadm_id, a.admittime,
    EXISTS (
      SELECT 1 FROM {t(HOSP, 'diagnoses_icd')} AS d
      WHERE d.hadm_id = a.hadm_id AND {cond.where('d')}
    ) AS has_condition
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  WHERE {an.where(2, "admission")}
),
exposure AS (
  SELECT
    c.hadm_id, c.has_condition,
    COUNTIF(rx.starttime BETWEEN c.admittime AND DATETIME_ADD(c.admittime, INTERVAL {hours} HOUR)) > 0 AS exposed
  FROM cohort AS c
  LEFT JOIN {t(HOSP, 'prescriptions')} AS rx
    ON c.hadm_id = rx.hadm_id
    AND LOWER(rx.drug) LIKE '%{drug}%'
  GROUP BY c.hadm_id, c.has_condition
)
SELECT
  IF(has_condition, 'with {cond.name}', 'without {cond.name}') AS cohort,
  COUNT(*) AS num_admissions,
  ROUND(100 * COUNTIF(exposed) / COUNT(*), 2) AS pct_with_drug
FROM exposure
GROUP BY cohort
ORDER BY cohort;"""
    return Draft(f"{an.opening(cond.name)}. Among {an.adj} inpatients {an.lo}–{an.hi}, what percentage received "
                 f"{drug} within the first {hours} hours, with versus without {cond.name}?", sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission"),
                     "medical-concept-implementation": [
                         ("drug-match", f"Matches {drug} on `prescriptions.drug`.", True),
                         ("condition-codes", f"Flags {cond.name} ({cond.codes()}).", True),
                         ("time-window", f"Counts prescriptions started within {hours} hours of admittime.", False)],
                     "database-integration": [("cohort-joins", "Joins patients, admissions, diagnoses_icd and "
                                               "prescriptions on subject_id / hadm_id.", True),
                                              ("left-join-unexposed", "Keeps admissions without the drug in the "
                                               "denominator.", True)],
                     "clinical-analytics": [("prevalence", "Computes the percentage exposed per group.", False)]},
                 {"num_admissions": ("number of admissions", 1, 100000), "pct_with_drug": PCT})


def medication_hard(an: Anchor, rng: random.Random) -> Draft:
    hours = rng.choice((48, 72))
    tiles = rng.choice((4, 5))
    word = {4: "quartile", 5: "quintile"}[tiles]
    sql = f"""WITH cohort AS (
  SELECT
    a.subject_id, a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag,
    LEAD(a.admittime) OVER (PARTITION BY a.subject_id ORDER BY a.admittime) AS next_admittime
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  WHERE {an.where(2, "admission")}
),
complexity AS (
  SELECT
    c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag, c.next_admittime,
    COUNT(DISTINCT LOWER(rx.drug)) AS distinct_drugs
  FROM cohort AS c
  LEFT JOIN {t(HOSP, 'prescriptions')} AS rx
    ON c.hadm_id = rx.hadm_id
    AND rx.starttime BETWEEN c.admittime AND DATETIME_ADD(c.admittime, INTERVAL {hours} HOUR)
  GROUP BY c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag, c.next_admittime
),
ranked AS (
  SELECT *, NTILE({tiles}) OVER (ORDER BY distinct_drugs, hadm_id) AS {word}
  FROM complexity
)
SELECT
  {word},
  COUNT(*) AS num_admissions,
  ROUND(AVG(distinct_drugs), 2) AS mean_distinct_drugs,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(100 * COUNTIF(next_admittime IS NOT NULL AND DATETIME_DIFF(next_admittime, dischtime, DAY) <= 30) / COUNT(*), 2)
    AS readmission_30d_pct
FROM ranked
GROUP BY {word}
ORDER BY {word};"""
    draft = Draft(f"{an.opening()}. Among {an.adj} inpatients aged {an.lo}–{an.hi}, compute medication complexity "
                 f"as distinct drugs started in the first {hours} hours, stratify into {word}s, and report LOS, "
                 f"in-hospital mortality (%) and 30-day readmission (%) per {word}.", sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission"),
                     "medical-concept-implementation": [
                         ("complexity-definition", "Counts distinct drugs (`prescriptions.drug`) per admission.",
                          True),
                         ("time-window", f"Restricts to prescriptions started within {hours} hours of admittime.",
                          False)],
                     "database-integration": [("cohort-joins", "Joins patients, admissions and prescriptions on "
                                               "subject_id / hadm_id.", True),
                                              ("left-join-zero", "Keeps admissions without prescriptions (count 0).",
                                               False)],
                     "clinical-analytics": [("strata", f"Stratifies into {word}s with NTILE({tiles}).", False),
                                            ("readmission", "Computes 30-day readmission with the next admission.",
                                             False),
                                            ("outcomes", "Reports LOS and mortality per stratum.", False)]},
                 {"num_admissions": ("number of admissions", 1, 100000),
                  "mean_distinct_drugs": ("mean distinct drugs", 0, 200), "mean_los_days": LOS_DAYS,
                  "mortality_pct": PCT, "readmission_30d_pct": PCT}, sequential_analytics=True)
    return with_extra(draft, rng, "APPROX_QUANTILES(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0, 100)[OFFSET(50)]",
                      "median_los_days", f"the median LOS in days per {word}", LOS_DAYS,
                      ("median-los", f"Computes the median LOS per {word}."))


def procedures_easy(an: Anchor, rng: random.Random) -> Draft:
    name, nine, ten = rng.choice(PROCEDURE_GROUPS)
    stat, k = rng.choice(STATS)
    col = f"procedures_{stat_name(k)}"
    where = (f"((pr.icd_version = 9 AND ({' OR '.join(f'pr.icd_code LIKE {c!r}' for c in (x + '%' for x in nine))}))"
             f" OR (pr.icd_version = 10 AND ({' OR '.join(f'pr.icd_code LIKE {c!r}' for c in (x + '%' for x in ten))}"
             ")))")
    sql = f"""SELECT
  APPROX_QUANTILES(procedure_count, 100)[OFFSET({k})] AS {col}
FROM (
  SELECT
    pr.hadm_id,
    COUNT(DISTINCT pr.icd_code) AS procedure_count
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'procedures_icd')} AS pr
    ON p.subject_id = pr.subject_id
  WHERE {an.where(2)}
    AND {where}
  GROUP BY pr.hadm_id
) AS per_admission;"""
    return Draft(f"{an.opening()}, among {an.people} aged {an.lo}–{an.hi} what is the {stat} of distinct {name} "
                 "procedures per hospitalization?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [
                         ("icd-version-handling", "Separates ICD-9 and ICD-10 procedure codes with `icd_version`.",
                          False),
                         ("procedure-code-selection", f"Identifies {name} procedures by code prefix (ICD-9 "
                          f"{', '.join(nine)}; ICD-10 {', '.join(ten)}).", False)],
                     "database-integration": [("patients-procedures-join", "Joins `patients` and `procedures_icd` "
                                               "on `subject_id`.", True)],
                     "clinical-analytics": [("distinct-count", "Counts distinct procedure codes per hospitalization.",
                                             False),
                                            ("percentile", f"Computes the {stat}.", False)]},
                 {col: (f"{stat} of distinct procedures", 1, 100)})


def procedures_medium(an: Anchor, rng: random.Random) -> Draft:
    name, itemid = rng.choice(ICU_PROCEDURES)
    sql = f"""WITH stays AS (
  SELECT i.stay_id, i.first_careunit
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(ICU, 'icustays')} AS i
    ON p.subject_id = i.subject_id
  WHERE {an.where(2)}
),
events AS (
  SELECT
    s.stay_id, s.first_careunit,
    COUNT(pe.itemid) AS num_events,
    SUM(DATETIME_DIFF(pe.endtime, pe.starttime, MINUTE)) / 60.0 AS hours_total
  FROM stays AS s
  LEFT JOIN {t(ICU, 'procedureevents')} AS pe
    ON s.stay_id = pe.stay_id
    AND pe.itemid = {itemid}
  GROUP BY s.stay_id, s.first_careunit
)
SELECT
  IF(first_careunit LIKE '%Surgical%' OR first_careunit LIKE '%SICU%', 'surgical ICU', 'medical or cardiac ICU')
    AS unit_type,
  COUNT(*) AS num_stays,
  ROUND(100 * COUNTIF(num_events > 0) / COUNT(*), 2) AS pct_with_procedure
FROM events
GROUP BY unit_type
ORDER BY unit_type;"""
    draft = Draft(f"{an.opening()}, among {an.adj} ICU stays aged {an.lo}–{an.hi}, what share of stays had "
                 f"{name} (procedureevents), in surgical versus medical or cardiac ICUs?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [
                         ("procedure-itemid", f"Identifies {name} with `procedureevents.itemid = {itemid}`.", True),
                         ("unit-grouping", "Groups stays by `first_careunit` into surgical and other ICUs.", False)],
                     "database-integration": [("icu-joins", "Joins patients, icustays and procedureevents on "
                                               "subject_id / stay_id.", True),
                                              ("left-join-denominator", "Keeps stays without the procedure in the "
                                               "denominator.", True)],
                     "clinical-analytics": [("share", "Computes the percentage of stays with the procedure per unit "
                                             "type.", False)]},
                 {"num_stays": ("number of ICU stays", 1, 100000), "pct_with_procedure": PCT})
    return with_extra(draft, rng, "ROUND(AVG(num_events), 2)", "mean_events_per_stay",
                      f"the mean number of {name} events per stay", ("mean events per stay", 0, 1000),
                      ("events-per-stay", "Averages the number of events per stay, stays without any counting 0."))


def procedures_hard(an: Anchor, rng: random.Random) -> Draft:
    cond = rng.choice(CONDITIONS)
    stat, k = rng.choice((("90th percentile", 90), ("75th percentile", 75), ("median", 50)))
    sql = f"""WITH stays AS (
  SELECT
    i.stay_id, i.hadm_id, i.intime, i.los, a.hospital_expire_flag,
    EXISTS (
      SELECT 1 FROM {t(HOSP, 'diagnoses_icd')} AS d
      WHERE d.hadm_id = i.hadm_id AND {cond.where('d')}
    ) AS has_condition
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(ICU, 'icustays')} AS i
    ON p.subject_id = i.subject_id
  JOIN {t(HOSP, 'admissions')} AS a
    ON i.hadm_id = a.hadm_id
  WHERE {an.where(2)}
),
counts AS (
  SELECT
    s.stay_id, s.los, s.hospital_expire_flag, s.has_condition,
    COUNT(pe.itemid) AS procedures_72h
  FROM stays AS s
  LEFT JOIN {t(ICU, 'procedureevents')} AS pe
    ON s.stay_id = pe.stay_id
    AND pe.starttime BETWEEN s.intime AND DATETIME_ADD(s.intime, INTERVAL 72 HOUR)
  GROUP BY s.stay_id, s.los, s.hospital_expire_flag, s.has_condition
)
SELECT
  IF(has_condition, '{cond.name}', 'other ICU patients') AS cohort,
  COUNT(*) AS num_stays,
  APPROX_QUANTILES(procedures_72h, 100)[OFFSET({k})] AS procedures_72h_p{k},
  ROUND(AVG(los), 2) AS mean_icu_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct
FROM counts
GROUP BY cohort
ORDER BY cohort;"""
    return Draft(f"{an.opening()}. Among {an.adj} ICU patients aged {an.lo}–{an.hi}, comparing those with "
                 f"{cond.name} versus other ICU patients, what is the {stat} of bedside procedures in the first 72 "
                 "hours, and the associated ICU LOS and in-hospital mortality (%)?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [
                         ("condition-codes", f"Flags {cond.name} ({cond.codes()}).", True),
                         ("time-window", "Counts procedureevents started within 72 hours of ICU intime.", False)],
                     "database-integration": [("icu-joins", "Joins patients, icustays, admissions, diagnoses_icd and "
                                               "procedureevents on subject_id / hadm_id / stay_id.", True),
                                              ("left-join-zero", "Keeps stays without procedures (count 0).",
                                               False)],
                     "clinical-analytics": [("percentile", f"Computes the {stat} per group.", False),
                                            ("outcomes", "Reports mean ICU LOS and in-hospital mortality per group.",
                                             False)]},
                 {"num_stays": ("number of ICU stays", 1, 100000),
                  f"procedures_72h_p{k}": (f"{stat} of procedures", 0, 500), "mean_icu_los_days": LOS_DAYS,
                  "mortality_pct": PCT}, sequential_analytics=True)


def outcomes_easy(an: Anchor, rng: random.Random) -> Draft:
    cond = rng.choice(CONDITIONS)
    stat, k = rng.choice(STATS)
    col = f"los_days_{stat_name(k)}"
    sql = f"""SELECT
  APPROX_QUANTILES(DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0, 100)[OFFSET({k})] AS {col}
FROM {t(HOSP, 'patients')} AS p
JOIN {t(HOSP, 'admissions')} AS a
  ON p.subject_id = a.subject_id
JOIN {t(HOSP, 'diagnoses_icd')} AS d
  ON a.hadm_id = d.hadm_id
WHERE {an.where(0)}
  AND d.seq_num <= 3
  AND {cond.where('d')};"""
    return Draft(f"{an.opening()}, among {an.people} aged {an.lo}–{an.hi} with {cond.name} among the first three "
                 f"coded diagnoses of an admission, what is the {stat} hospital length of stay in days?", sql, {
                     "patient-cohort-construction": an.cohort_leaves(),
                     "medical-concept-implementation": [
                         ("condition-codes", f"Identifies {cond.name} ({cond.codes()}) by `icd_version`.", True),
                         ("diagnosis-priority", "Restricts to `seq_num <= 3`.", True)],
                     "database-integration": [("admission-joins", "Joins patients, admissions and diagnoses_icd on "
                                               "subject_id / hadm_id.", True)],
                     "clinical-analytics": [("los-calculation", "Computes LOS in days.", False),
                                            ("percentile", f"Computes the {stat}.", False)]},
                 {col: (f"{stat} length of stay in days", 0, 365)})


def outcomes_medium(an: Anchor, rng: random.Random) -> Draft:
    cond = rng.choice(CONDITIONS)
    sql = f"""WITH cohort AS (
  SELECT DISTINCT
    a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag,
    EXISTS (SELECT 1 FROM {t(ICU, 'icustays')} AS i WHERE i.hadm_id = a.hadm_id) AS had_icu
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  JOIN {t(HOSP, 'diagnoses_icd')} AS d
    ON a.hadm_id = d.hadm_id
  WHERE {an.where(2, "admission")}
    AND {cond.where('d')}
)
SELECT
  IF(had_icu, 'ICU', 'no ICU') AS icu_group,
  COUNT(*) AS num_admissions,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct
FROM cohort
GROUP BY icu_group
ORDER BY icu_group;"""
    return Draft(f"{an.opening(cond.name)}: among {an.adj} patients {an.lo}–{an.hi} admitted with {cond.name}, "
                 "ICU versus no ICU, report admissions, mean LOS and in-hospital mortality (%).", sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission"),
                     "medical-concept-implementation": [
                         ("condition-codes", f"Identifies {cond.name} ({cond.codes()}).", True),
                         ("icu-flag", "Flags admissions with an `icustays` row.", True)],
                     "database-integration": [("admission-joins", "Joins patients, admissions, diagnoses_icd and "
                                               "icustays by subject_id / hadm_id without duplicating admissions.",
                                               True)],
                     "clinical-analytics": [("group-measures", "Reports count, mean LOS and mortality percentage per "
                                             "group.", False)]},
                 {"num_admissions": ("number of admissions", 1, 100000), "mean_los_days": LOS_DAYS,
                  "mortality_pct": PCT})


def outcomes_hard(an: Anchor, rng: random.Random) -> Draft:
    cond = rng.choice(CONDITIONS)
    sql = f"""WITH cohort AS (
  SELECT DISTINCT a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag
  FROM {t(HOSP, 'patients')} AS p
  JOIN {t(HOSP, 'admissions')} AS a
    ON p.subject_id = a.subject_id
  JOIN {t(HOSP, 'diagnoses_icd')} AS d
    ON a.hadm_id = d.hadm_id
  WHERE {an.where(2, "admission")}
    AND {cond.where('d')}
),
scored AS (
  SELECT
    c.*, ch.charlson_comorbidity_index,
    CASE
      WHEN ch.charlson_comorbidity_index <= 3 THEN 'low (0-3)'
      WHEN ch.charlson_comorbidity_index <= 6 THEN 'medium (4-6)'
      ELSE 'high (7+)'
    END AS burden
  FROM cohort AS c
  JOIN {t(DERIVED, 'charlson')} AS ch
    ON c.hadm_id = ch.hadm_id
)
SELECT
  burden,
  COUNT(*) AS num_admissions,
  ROUND(AVG(charlson_comorbidity_index), 2) AS mean_charlson,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days
FROM scored
GROUP BY burden
ORDER BY burden;"""
    return Draft(f"{an.opening(cond.name)}. For {an.adj} {cond.name} admissions aged {an.lo}–{an.hi}, stratify by "
                 "Charlson comorbidity burden (0–3, 4–6, 7+) and report admissions, mean Charlson index, "
                 "in-hospital mortality (%) and mean LOS per stratum.", sql, {
                     "patient-cohort-construction": an.cohort_leaves("admission"),
                     "medical-concept-implementation": [
                         ("condition-codes", f"Identifies {cond.name} ({cond.codes()}).", True),
                         ("charlson-source", "Uses `charlson_comorbidity_index` from the derived charlson table.",
                          True),
                         ("burden-strata", "Stratifies at 3 and 6.", False)],
                     "database-integration": [("admission-joins", "Joins patients, admissions, diagnoses_icd and "
                                               "mimiciv_derived.charlson on hadm_id.", True)],
                     "clinical-analytics": [("strata-outcomes", "Reports count, mean index, mortality and LOS per "
                                             "stratum.", False)]},
                 {"num_admissions": ("number of admissions", 1, 100000), "mean_charlson": ("Charlson index", 0, 40),
                  "mortality_pct": PCT, "mean_los_days": LOS_DAYS}, sequential_analytics=True)


TEMPLATES: dict[tuple[str, str], Template] = {
    ("Patient_Demographics_and_Admissions", "easy"): demographics_easy,
    ("Patient_Demographics_and_Admissions", "medium"): demographics_medium,
    ("Patient_Demographics_and_Admissions", "hard"): demographics_hard,
    ("Vital_Signs_Monitoring", "easy"): vitals_easy,
    ("Vital_Signs_Monitoring", "medium"): vitals_medium,
    ("Vital_Signs_Monitoring", "hard"): vitals_hard,
    ("Laboratory_Results_Analysis", "easy"): labs_easy,
    ("Laboratory_Results_Analysis", "medium"): labs_medium,
    ("Laboratory_Results_Analysis", "hard"): labs_hard,
    ("Medication_Management", "easy"): medication_easy,
    ("Medication_Management", "medium"): medication_medium,
    ("Medication_Management", "hard"): medication_hard,
    ("Diagnostic_Procedures", "easy"): procedures_easy,
    ("Diagnostic_Procedures", "medium"): procedures_medium,
    ("Diagnostic_Procedures", "hard"): procedures_hard,
    ("Disease_Diagnosis_and_Outcomes", "easy"): outcomes_easy,
    ("Disease_Diagnosis_and_Outcomes", "medium"): outcomes_medium,
    ("Disease_Diagnosis_and_Outcomes", "hard"): outcomes_hard,
}
