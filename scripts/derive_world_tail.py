"""Derive the world's long tail (src/ehrbench/world/data/tail.yaml) from open data. Run once by a maintainer; the
result is committed, so nothing here runs in a build or a test.

Why: the curated world (33 conditions, 24 procedures, 89 drugs, 28 labs) makes every question about anything else
come back empty; a hospital's records have hundreds of codes, drugs and lab items, most of them rare. The tail gives
the world that breadth with a real hospital's frequencies, without touching the curated clinical logic.

Sources (none shipped; pass their paths):
- the MIMIC-III Clinical Database Demo v1.4 (100 patients, open access under the ODbL; PhysioNet,
  doi:10.13026/C2HM2Q): DIAGNOSES_ICD, PROCEDURES_ICD, D_ICD_PROCEDURES, PRESCRIPTIONS, LABEVENTS, D_LABITEMS;
- CMS's 2018 General Equivalence Mappings (public domain) from ICD-9-CM to ICD-10-CM and ICD-10-PCS, as CSV.

What is kept: per item, the share of the demo's admissions that have it (not counts per patient), and for labs and
drugs the units, routes and value ranges; items the curated world already has are left out. Codes must exist in the
vocabulary packages (ICD-9-CM billable, ICD-10-CM leaf); a code without an ICD-10 equivalent is dropped.

    python scripts/derive_world_tail.py --demo DIR --labevents FILE --gem-dx FILE --gem-pcs FILE
"""
from __future__ import annotations

import argparse
import collections
import csv
import statistics
from pathlib import Path

import yaml

from ehrbench.world.vocab import icd9_titles, icd_diagnoses, mimic_iii, vocabulary

TOP = {"diagnoses": 300, "procedures": 100, "drugs": 250, "labs": 150}


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _shares(rows: list[dict], key, n_adm: int) -> dict[str, float]:
    """Share of admissions with each key (an admission counts once however often it has the key)."""
    seen = collections.defaultdict(set)
    for r in rows:
        if r["HADM_ID"]:
            seen[key(r)].add(r["HADM_ID"])
    return {k: min(1.0, len(v) / n_adm) for k, v in seen.items() if k}


def _gem(path: Path, zero_stripped: bool = False) -> dict[str, list[str]]:
    """ICD-9 code -> its ICD-10 targets in the GEM's order, no-maps left out. `zero_stripped`: the file writes codes
    without their leading zeros, so "0340" (streptococcal sore throat) and "340" (multiple sclerosis) are both
    "340"; the file is sorted by the full code, so each row's code is the smallest full spelling (a billable ICD-9
    code) not before the previous row's."""
    titles = icd9_titles()
    out: dict[str, list[str]] = collections.defaultdict(list)
    previous = ""
    for r in _rows(path):
        code = r["icd9cm"]
        if zero_stripped and code[0].isdigit():
            spellings = sorted(c for c in (code, "0" + code, "00" + code) if c in titles and c >= previous)
            code = spellings[0] if spellings else code
        previous = max(previous, code)
        if r.get("no_map") != "1" and r["icd10cm"] not in ("NoDx", "NoPCS"):
            out[code].append(r["icd10cm"])
    return out


def _decimals(values: list[str]) -> int:
    places = [len(v.split(".")[1]) if "." in v else 0 for v in values[:500]]
    return min(2, collections.Counter(places).most_common(1)[0][0])


def diagnoses(demo: Path, gem: dict[str, list[str]], n_adm: int) -> dict:
    """The commonest diagnoses the curated conditions do not already code: not their ICD-9 code, their ICD-10 code
    or their eICU name (a tail "sepsis" would silently grow the curated sepsis cohorts of some renderings)."""
    curated = vocabulary().conditions.values()
    taken = {c.icd9 for c in curated} | {c.icd10 for c in curated} | {n for c in curated for n in c.eicu_names}
    titles, icd10, long_titles = icd9_titles(), icd_diagnoses(10), icd_diagnoses(9)
    out = {}
    for code, share in sorted(_shares(_rows(demo / "DIAGNOSES_ICD.csv"), lambda r: r["ICD9_CODE"], n_adm).items(),
                              key=lambda kv: (-kv[1], kv[0])):
        target = next(iter(gem.get(code, [])), None)
        if code not in titles or target not in icd10 or {code, target, long_titles[code]} & taken:
            continue
        taken.add(target)
        out[code] = {"share": round(share, 4), "icd10": target}
        if len(out) == TOP["diagnoses"]:
            break
    return out


def procedures(demo: Path, gem: dict[str, list[str]], n_adm: int) -> dict:
    """The commonest procedures not already curated (by ICD-9 code, ICD-10-PCS target or name) nor distractors."""
    v = vocabulary()
    taken = {p.icd9[0] for p in v.procedures.values()} | {p.icd10[0] for p in v.procedures.values()} | \
        {p.eicu for p in v.procedures.values()} | {c for c, ver, _ in v.extra_procedure_codes if ver == 9}
    titles = {r["ICD9_CODE"]: r["LONG_TITLE"] for r in _rows(demo / "D_ICD_PROCEDURES.csv")}
    out = {}
    for code, share in sorted(_shares(_rows(demo / "PROCEDURES_ICD.csv"), lambda r: r["ICD9_CODE"], n_adm).items(),
                              key=lambda kv: (-kv[1], kv[0])):
        target = next(iter(gem.get(code, [])), None)
        if code not in titles or not target or {code, target, titles[code].lower()} & taken:
            continue
        taken.add(target)
        out[code] = {"share": round(share, 4), "title": titles[code].lower(), "icd10": target}
        if len(out) == TOP["procedures"]:
            break
    return out


def drugs(demo: Path, n_adm: int) -> dict:
    """The commonest drugs that are not a curated generic, its MIMIC-III spelling, a salt or form of it ("heparin
    sodium": eICU's drug strings start with the generic) or a curated brand ("unasyn", "metronidazole (flagyl)")."""
    v = vocabulary()
    core = set(v.drugs) | {name.lower() for name in mimic_iii()["drugs"].values()}
    brands = {b for d in v.drugs.values() for b in d.brands}

    def curated(name: str) -> bool:
        words = set(name.replace("(", " ").replace(")", " ").split())
        return name in core or any(name.startswith(g + " ") for g in v.drugs) or bool(words & brands)

    rows = [r for r in _rows(demo / "PRESCRIPTIONS.csv") if r["DRUG"].strip()]
    by_name = collections.defaultdict(list)
    for r in rows:
        by_name[r["DRUG"].strip().lower()].append(r)
    out = {}
    shares = _shares(rows, lambda r: r["DRUG"].strip().lower(), n_adm)
    for name, share in sorted(shares.items(), key=lambda kv: (-kv[1], kv[0])):
        if curated(name):
            continue
        rs = by_name[name]
        def mode(field: str, rs=rs) -> list:
            return collections.Counter(r[field].strip() for r in rs if r[field].strip()).most_common(1)
        doses = [d for d, _ in collections.Counter(r["DOSE_VAL_RX"] for r in rs).most_common(6)
                 if d.replace(".", "", 1).isdigit()][:3]
        unit, route, form = mode("DOSE_UNIT_RX"), mode("ROUTE"), mode("FORM_UNIT_DISP")
        if not doses or not unit or not route:
            continue
        spelling = collections.Counter(r["DRUG"].strip() for r in rs).most_common(1)[0][0]
        out[name] = {"share": round(share, 4), "mimic": spelling,
                     "type": mode("DRUG_TYPE")[0][0], "doses": [float(d) for d in doses],
                     "unit": unit[0][0].lower(), "mimic_unit": unit[0][0], "route": route[0][0].lower(),
                     "form": (form[0][0] if form else "vial").lower()}
        if len(out) == TOP["drugs"]:
            break
    return out


def labs(demo: Path, labevents: Path, n_adm: int) -> dict:
    core = {spec["mimic_id"] for spec in vocabulary().labs.values()}
    # A label is one item: two items called "glucose" (blood gas and chemistry, as MIMIC has) would make every
    # question about glucose ambiguous in the renderings that name labs without their fluid.
    taken = {spec[k] for spec in vocabulary().labs.values() for k in ("mimic", "eicu")}
    items = {int(r["ITEMID"]): r for r in _rows(demo / "D_LABITEMS.csv")}
    rows = _rows(labevents)
    values = collections.defaultdict(list)
    for r in rows:
        values[int(r["ITEMID"])].append(r)
    out = {}
    shares = _shares(rows, lambda r: int(r["ITEMID"]), len({r["HADM_ID"] for r in rows if r["HADM_ID"]}))
    for itemid, share in sorted(shares.items(), key=lambda kv: (-kv[1], kv[0])):
        rs = values[itemid]
        nums = []
        for r in rs:
            try:
                nums.append(float(r["VALUE"]))
            except ValueError:
                pass
        if itemid in core or itemid not in items or len(nums) < 0.9 * len(rs) or len(nums) < 3 \
                or items[itemid]["LABEL"].lower() in taken:
            continue
        taken.add(items[itemid]["LABEL"].lower())
        nums.sort()
        lo, hi = nums[int(0.05 * (len(nums) - 1))], nums[int(0.95 * (len(nums) - 1))]
        trimmed = [x for x in nums if lo <= x <= hi] or nums
        unit = collections.Counter(r["VALUEUOM"] for r in rs if r["VALUEUOM"]).most_common(1)
        d = items[itemid]
        spelled = lambda text: text.title() if text.isupper() else text  # noqa: E731  (a few rows are all caps)
        out[itemid] = {"share": round(share, 4), "label": d["LABEL"], "fluid": spelled(d["FLUID"]),
                       "category": spelled(d["CATEGORY"]), "unit": unit[0][0] if unit else "",
                       "mean": round(statistics.mean(trimmed), 3),
                       "sd": round(statistics.pstdev(trimmed) or abs(statistics.mean(trimmed)) * 0.1 or 0.1, 3),
                       "low": lo, "decimals": _decimals([r["VALUE"] for r in rs])}
        if len(out) == TOP["labs"]:
            break
    return out


def _flow(value) -> str:
    """One YAML line: an item per line keeps the file readable and its diffs small."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("...").strip()


HEADER = """\
# The world's long tail: the secondary diagnoses, procedures, drugs and lab items a hospital records besides the
# curated conditions' own (conditions.yaml, procedures.yaml, drugs.yaml, items.yaml), with a real hospital's
# frequencies. share: the share of admissions having the item in the source; the generator scales the shares so an
# admission gets `per_admission` of each kind on average, from its own random stream (the curated world is unchanged).
# Derived by scripts/derive_world_tail.py from the MIMIC-III Clinical Database Demo v1.4 (Johnson, Pollard, Mark;
# PhysioNet; open access under the Open Database License, ODbL 1.0), and CMS's 2018 ICD-9 -> ICD-10 General
# Equivalence Mappings (public domain) for the ICD-10 codes. Item frequencies and value ranges only: no patient data.
# An ICD-10-PCS code here is its ICD-9 procedure's GEM target; its dictionary title is the ICD-9 title.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="folder with the demo's CSV files")
    ap.add_argument("--labevents", type=Path, required=True, help="the demo's LABEVENTS.csv")
    ap.add_argument("--gem-dx", type=Path, required=True, help="ICD-9-CM -> ICD-10-CM GEM, CSV (icd9cm, icd10cm, ...)")
    ap.add_argument("--gem-pcs", type=Path, required=True, help="ICD-9-CM -> ICD-10-PCS GEM as CSV")
    ap.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "src/ehrbench/world/data/tail.yaml")
    args = ap.parse_args()
    n_adm = len(_rows(args.demo / "ADMISSIONS.csv"))
    tail = {"per_admission": {"diagnoses": 8.0, "procedures": 1.5, "drugs": 12.0, "labs": 25.0},
            "diagnoses": diagnoses(args.demo, _gem(args.gem_dx, zero_stripped=True), n_adm),
            "procedures": procedures(args.demo, _gem(args.gem_pcs), n_adm),
            "drugs": drugs(args.demo, n_adm),
            "labs": labs(args.demo, args.labevents, n_adm)}
    lines = [HEADER.rstrip("\n"), "per_admission: " + _flow(tail["per_admission"])]
    for kind in ("diagnoses", "procedures", "drugs", "labs"):
        lines.append(f"{kind}:")
        lines += [f"  {_flow(key)}: {_flow(item)}" for key, item in tail[kind].items()]
    args.out.write_text("\n".join(lines) + "\n")
    print({k: len(v) for k, v in tail.items() if k != "per_admission"}, "->", args.out)


if __name__ == "__main__":
    main()
