"""Export the world's MIMIC-IV rendering as FHIR R4 transaction Bundles, one patient per line (ndjson), so the same
patients load into any FHIR server (`POST` each line to the server's base URL); every resource is validated with the
`fhir.resources` R4B models on the way out.

    python -m ehrbench.benchmarks.physassist.export --out fhir.ndjson [--seed 0 --scale 2]

The resources are the FHIR layer's (`adapter.py`: what the agent's tools return), made strict FHIR: the fields
outside FHIR that the original keeps with an underscore (`_anchor_age`, `_seq_num`, `_stay_id`, ...) become
extensions under `EXTENSION`, code systems get absolute URIs under `SYSTEM`, times become instants, attachment
text base64, and empty values are dropped. Each
entry is a `PUT <type>/<id>`, so loading twice changes nothing.
"""
from __future__ import annotations

import argparse
import base64
import functools
import json
import re
from pathlib import Path

from tqdm import tqdm

from . import adapter
from .adapter import PatientRecord

EXTENSION = "https://ehrbench.dev/fhir/StructureDefinition/"
SYSTEM = "https://ehrbench.dev/fhir/CodeSystem/"
MOMENT = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})?$")


def _strict(value, key: str = ""):
    """FHIR JSON: no empty values, absolute code systems; an underscore field becomes an extension."""
    if isinstance(value, dict):
        out, extensions = {}, []
        for k, v in value.items():
            if k.startswith("_"):
                if v not in (None, "", [], {}):
                    kind = "valueInteger" if isinstance(v, int) and not isinstance(v, bool) else "valueString"
                    extensions.append({"url": EXTENSION + k[1:].replace("_", "-"),
                                       kind: v if kind == "valueInteger" else str(v)})
                continue
            v = _strict(v, k)
            if v not in (None, "", [], {}):
                out[k] = v
        if extensions:
            out["extension"] = out.get("extension", []) + extensions
        return out
    if isinstance(value, list):
        return [x for x in (_strict(v, key) for v in value) if x not in (None, "", [], {})]
    if key == "system" and isinstance(value, str) and not re.match(r"^[a-z]+:", value):
        return SYSTEM + value.replace("/", "-")
    if isinstance(value, str) and MOMENT.match(value):     # the record's "YYYY-MM-DD HH:MM:SS": a FHIR instant
        return value.replace(" ", "T") + (":00" if len(value) == 16 else "") + "+00:00"
    if key == "data" and isinstance(value, str):          # an attachment's text (the tools show it plain)
        return base64.b64encode(value.encode()).decode()
    if key == "id" and isinstance(value, str):
        return re.sub(r"[^A-Za-z0-9\-.]", "-", value)[:64]
    return value


@functools.lru_cache(maxsize=None)
def _model(resource_type: str):
    from fhir.resources.R4B import get_fhir_model_class

    return get_fhir_model_class(resource_type)


def validated(resource: dict) -> dict:
    """The resource as the R4B model reads it back; ValueError naming the resource and the fields that fail."""
    from pydantic import ValidationError

    strict = _strict(resource)
    try:
        return json.loads(_model(strict["resourceType"]).model_validate(strict).model_dump_json())
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:3])
        raise ValueError(f"{strict['resourceType']}/{strict.get('id')}: {fields}") from None


def patient_resources(record: PatientRecord) -> list[dict]:
    """Everything the FHIR layer serves for one patient, without search limits (as the tools shape it: omr vitals
    only for a patient without chartevents, microbiology one report per specimen and time)."""
    out = [p for p in [adapter.patient(record)] if p]
    out += adapter.encounters(record) + adapter.conditions(record)
    out += adapter.lab_observations(record, _count=10 ** 9)
    out += [o for o in adapter.vital_observations(record, _count=10 ** 9)]
    out += adapter.medication_requests(record)
    out += adapter.medication_administrations(record, _count=10 ** 9)
    out += adapter.procedures(record)
    out += adapter.diagnostic_reports(record, _count=10 ** 9)
    out += adapter.document_references(record, _count=10 ** 9)
    out += adapter.care_plans(record) + adapter.allergies(record)
    return out


def transaction(record: PatientRecord) -> tuple[dict, int]:
    """(the patient's transaction Bundle, how many resources), every resource validated."""
    entries, seen = [], set()
    for r in patient_resources(record):
        v = validated(r)
        if v.get("id") is None:
            raise ValueError(f"{v['resourceType']}: a resource without an id")
        base, n = v["id"], 1
        while (v["resourceType"], v["id"]) in seen:     # the tools' ids can repeat (two specimens at one time)
            n += 1
            v["id"] = f"{base[:60]}-{n}"
        seen.add((v["resourceType"], v["id"]))
        entries.append({"fullUrl": f"{v['resourceType']}/{v['id']}", "resource": v,
                        "request": {"method": "PUT", "url": f"{v['resourceType']}/{v['id']}"}})
    bundle = {"resourceType": "Bundle", "type": "transaction", "entry": entries}
    _model("Bundle").model_validate(bundle)
    return bundle, len(entries)


def export(folder: Path, out: Path, limit: int | None = None) -> dict[str, int]:
    """One line per patient; returns resources written by type."""
    counts: dict[str, int] = {}
    files = sorted(folder.glob("patient_*.db"))[:limit]
    with out.open("w") as f:
        for path in tqdm(files, desc="FHIR export", unit="patient"):
            record = PatientRecord(path, folder / "reference.db")
            try:
                bundle, _ = transaction(record)
            finally:
                record.close()
            for e in bundle["entry"]:
                counts[e["resource"]["resourceType"]] = counts.get(e["resource"]["resourceType"], 0) + 1
            f.write(json.dumps(bundle, ensure_ascii=False) + "\n")
    return counts


def main(argv: list[str] | None = None) -> None:
    from ...schemas import WorldSpec, build_database
    from ...world.generator import WorldSize
    from ..agentehr.patient_db import split_patients

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="fhir.ndjson")
    parser.add_argument("--seed", type=int, default=0, help="the world's seed (data.seed)")
    parser.add_argument("--scale", type=float, default=2.0, help="the world's scale")
    parser.add_argument("--root", default="data/generated", help="where built databases are cached (data.root)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N patients")
    args = parser.parse_args(argv)
    source = build_database("mimic_iv", WorldSpec(seed=args.seed, size=WorldSize(scale=args.scale)), Path(args.root))
    counts = export(split_patients(source, source.parent), Path(args.out), args.limit)
    print(f"{sum(counts.values())} resources, every one valid FHIR R4B, in {args.out}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
