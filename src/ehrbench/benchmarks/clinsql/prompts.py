"""ClinSQL's chain-of-thought and self-refinement prompts (utils/prompt_utils.py), and the schema text they carry.

Under `benchmark.contract=original` the schema reference is the authors' own, word for word
(`data/mimic4_schema.txt`, copied as data from Barryshen1/ClinSQL model_inference/mimic4_schema.txt at 337f783f:
31 tables of the HOSP and ICU modules and its notes; like the original it does not list mimiciv_derived). Under
`contract=ehrbench` it is written from the MIMIC-IV rendering (`schemas/mimic_iv.py`) in the same format, so the
model sees the tables this database has, with two more notes (ICD codes without dots, the age at an admission).
"""
from __future__ import annotations

import re

NOTES = """# Concise notes — only commonly confusing columns

- **hadm_id vs stay_id**: `hadm_id` = hospital admission id; `stay_id` = ICU stay id (sub-episode within an admission).
- **charttime vs storetime**: `charttime` = when the event/measurement occurred; `storetime` = when it was recorded. \
Prefer `charttime` for temporal analyses.
- **itemid**: numeric code for labs/measurements — lookup in `d_labitems` or `d_items`.
- **value / valuenum / valueuom**: `value` may be text; `valuenum` is the numeric form (use for calculations); \
`valueuom` is the unit.
- **seq_num**: ordering for billing entries (diagnoses/procedures); lower often indicates higher priority.
- **icd_code**: stored without dots; `icd_version` is 9 or 10.
- **anchor_age / anchor_year**: the patient's age in `anchor_year` (shifted); age at an admission is \
anchor_age + (year of admittime - anchor_year)."""


def schema_text(contract: str = "original") -> str:
    """The schema reference: the authors' file (original), or the HOSP and ICU modules' tables and columns of the
    rendering in its format (ehrbench)."""
    from importlib import resources

    from ...schemas.mimic_iv import COLUMNS, MODULE

    if contract == "original":
        return resources.files("ehrbench.benchmarks.clinsql.data").joinpath("mimic4_schema.txt").read_text("utf-8")

    parts = []
    for module in ("hosp", "icu"):
        parts.append(f"# MIMIC-IV — {module.upper()} module\n")
        for table, columns in COLUMNS.items():
            if MODULE[table] == module:
                parts.append(f"## {table}\nColumns:\n{', '.join(c for c, _ in columns)}\n")
    return "\n".join(parts) + "\n\n" + NOTES


def generation_prompt(question: str, schema: str | None) -> str:
    schema_section = f"\n\nMIMIC-IV Schema Reference (HOSP + ICU):\n{schema}\n" if schema else ""
    return ("You are a clinical data analyst expert specializing in the MIMIC-IV database. "
            "Your goal is to produce a correct BigQuery SQL query for the question below.\n\n"
            "Constraints:\n"
            "- Target platform: Google BigQuery.\n"
            "- Use the correct datasets: `physionet-data.mimiciv_3_1_hosp`, `physionet-data.mimiciv_3_1_icu`.\n"
            f"{schema_section}\n"
            "Clinical question:\n"
            f"\"{question}\"\n\n"
            "Your output should be organized in the following two parts:\n"
            "Reasoning:\n"
            "- Think step by step about relevant tables, joins, filters, groupings, and edge cases.\n"
            "- Briefly justify important choices.\n"
            "SQL (wrap the final query in a fenced code block using ```sql and ```):\n\n"
            "Think step by step and then generate the complete SQL query.")


def refinement_prompt(question: str, previous_sql: str, error_message: str, schema: str | None) -> str:
    schema_section = f"\n\nMIMIC-IV Schema Reference (HOSP + ICU):\n{schema}\n" if schema else ""
    return ("You are a clinical data analyst expert for the MIMIC-IV dataset. "
            "The following SQL failed to run on Google BigQuery. Refine it to resolve the error and better answer "
            "the question.\n\n"
            "Constraints:\n"
            "- Use valid BigQuery SQL.\n"
            "- Use the correct datasets: `physionet-data.mimiciv_3_1_hosp`, `physionet-data.mimiciv_3_1_icu`.\n"
            "- Modify only what is necessary; prefer minimal, correct fixes.\n"
            f"{schema_section}\n"
            "Clinical question:\n"
            f"{question}\n\n"
            "Previous SQL attempt (for reference):\n"
            f"```sql\n{previous_sql}\n```\n\n"
            "BigQuery error message:\n"
            f"{error_message}\n\n"
            "Your output should be organized in the following two parts:\n"
            "Reasoning:\n"
            "- Step by step, explain the cause of the error and the fix.\n"
            "- Justify key changes briefly.\n"
            "SQL (wrap the final corrected query in a fenced code block using ```sql and ```):\n\n"
            "Think step by step and then generate the complete corrected SQL query.")


def clean_sql_response(response: str) -> str:
    """The SQL in a model's reply, as the original's utils/sql_utils.py finds it: the last fenced block, else an
    [sql] tag, else the text from the last `SQL:` or the first WITH / SELECT; ends with `;`; "" when empty."""
    if not response or not response.strip():
        return ""
    blocks = re.findall(r"```(?:sql)?\s*(.*?)\s*```", response, flags=re.DOTALL | re.IGNORECASE)
    if blocks:
        text = blocks[-1].strip()
    else:
        tag = re.search(r"\[sql\](.*?)(?:\[/sql\]|$)", response, flags=re.DOTALL | re.IGNORECASE)
        if tag:
            text = tag.group(1).strip()
        else:
            body = response.strip()
            lowered = body.lower()
            if "\nsql:" in lowered or lowered.startswith("sql:"):
                body = body[lowered.rfind("sql:"):]
            with_ = re.search(r"(?is)(with\s+.*)$", body)
            select = re.search(r"(?is)(select\s+.*)$", body)
            text = (with_ or select).group(1).strip() if (with_ or select) else body
    text = re.sub(r"```+", "", text)
    text = re.sub(r"\[/?sql\]", "", text, flags=re.IGNORECASE)
    start = re.search(r"(?is)\bwith\b", text) or re.search(r"(?is)\bselect\b", text)
    if start and start.start() > 0:
        text = text[start.start():]
    if text and not text.rstrip().endswith(";"):
        text = text.rstrip() + ";"
    return text
