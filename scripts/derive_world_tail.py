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


def _gem(path: Path) -> dict[str, str]:
    """ICD-9 code -> the first ICD-10 target the GEM lists that is not a no-map (CMS writes codes without dots; some
    files drop leading zeros, so both spellings are keyed)."""
    out: dict[str, str] = {}
    for r in _rows(path):
        if r.get("no_map") == "1" or r["icd10cm"] in ("NoDx", "NoPCS"):
            continue
        out.setdefault(r["icd9cm"], r["icd10cm"])
    return out


def _lookup(gem: dict[str, str], code: str) -> str | None:
    return gem.get(code) or gem.get(code.lstrip("0"))


def _decimals(values: list[str]) -> int:
    places = [len(v.split(".")[1]) if "." in v else 0 for v in values[:500]]
    return min(2, collections.Counter(places).most_common(1)[0][0])


def diagnoses(demo: Path, gem: dict[str, str], n_adm: int) -> dict:
    core = {c.icd9 for c in vocabulary().conditions.values()}
    titles, icd10 = icd9_titles(), icd_diagnoses(10)
    out = {}
    for code, share in sorted(_shares(_rows(demo / "DIAGNOSES_ICD.csv"), lambda r: r["ICD9_CODE"], n_adm).items(),
                              key=lambda kv: (-kv[1], kv[0])):
        target = _lookup(gem, code)
        if code in core or code not in titles or target not in icd10:
            continue
        out[code] = {"share": round(share, 4), "icd10": target}
        if len(out) == TOP["diagnoses"]:
            break
    return out


def procedures(demo: Path, gem: dict[str, str], n_adm: int) -> dict:
    v = vocabulary()
    core = {p.icd9[0] for p in v.procedures.values()} | {c for c, ver, _ in v.extra_procedure_codes if ver == 9}
    titles = {r["ICD9_CODE"]: r["LONG_TITLE"] for r in _rows(demo / "D_ICD_PROCEDURES.csv")}
    out = {}
    for code, share in sorted(_shares(_rows(demo / "PROCEDURES_ICD.csv"), lambda r: r["ICD9_CODE"], n_adm).items(),
                              key=lambda kv: (-kv[1], kv[0])):
        target = _lookup(gem, code)
        if code in core or code not in titles or not target:
            continue
        out[code] = {"share": round(share, 4), "title": titles[code].lower(), "icd10": target}
        if len(out) == TOP["procedures"]:
            break
    return out


def drugs(demo: Path, n_adm: int) -> dict:
    v = vocabulary()
    core = set(v.drugs) | {name.lower() for name in mimic_iii()["drugs"].values()}
    rows = [r for r in _rows(demo / "PRESCRIPTIONS.csv") if r["DRUG"].strip()]
    by_name = collections.defaultdict(list)
    for r in rows:
        by_name[r["DRUG"].strip().lower()].append(r)
    out = {}
    shares = _shares(rows, lambda r: r["DRUG"].strip().lower(), n_adm)
    for name, share in sorted(shares.items(), key=lambda kv: (-kv[1], kv[0])):
        if name in core:
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
                     "unit": unit[0][0].lower(), "route": route[0][0].lower(),
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
        out[itemid] = {"share": round(share, 4), "label": d["LABEL"], "fluid": d["FLUID"].title(),
                       "category": d["CATEGORY"].title(), "unit": unit[0][0] if unit else "",
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
            "diagnoses": diagnoses(args.demo, _gem(args.gem_dx), n_adm),
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
