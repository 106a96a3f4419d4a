"""AgentEHR's knowledge side: table descriptions, and the substitute corpus behind the four retrieve_* tools.

The original retrieves with BM25 from MedRAG's corpora (PubMed, textbooks, StatPearls, Wikipedia: tens of GB, not
shippable offline). ehrbench ships a substitute: one document per condition, drug and test of the world's vocabulary
(what it is, its ICD codes, lay names, the labs it moves, what treats it), ranked by BM25 (rank-bm25), top 5, in the
original's "Document [i] (Title: ...) ..." lines, each answer saying which corpus it stands in for.
"""
from __future__ import annotations

import functools
import re
from importlib import resources

import yaml

TOP_K = 5


@functools.lru_cache(maxsize=1)
def _tables() -> dict:
    return yaml.safe_load(resources.files("ehrbench.benchmarks.agentehr.data").joinpath("tables.yaml").read_text())


def table_description(table: str) -> str:
    from ...schemas.mimic_iv import COLUMNS

    entry = _tables().get(table)
    if entry is None:
        return f"Table '{table}' not found in category'"          # the original's words
    module, text = entry
    columns = "\n".join(f"  - {c}" for c, _ in COLUMNS.get(table, ()))
    return f"Table: {table} ({module})\nDescription: {text}\nColumns:\n{columns}"


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


@functools.lru_cache(maxsize=1)
def corpus() -> list[tuple[str, str]]:
    """(title, content) documents from the world's vocabulary."""
    from ...world.vocab import icd_diagnoses, vocabulary

    v, docs = vocabulary(), []
    icd9, icd10 = icd_diagnoses(9), icd_diagnoses(10)
    for key, c in v.conditions.items():
        labs = ", ".join(f"{lab} {'rises' if m == 'rising' or (isinstance(m, float) and m > 1) else 'falls'}"
                         for lab, m in c.labs.items())
        docs.append((key.title(), f"{key} ({', '.join(c.lay)}). ICD-9 {c.icd9}: {icd9.get(c.icd9, '')}; ICD-10 "
                                  f"{c.icd10}: {icd10.get(c.icd10, '')}. {'Acute' if c.acute else 'Chronic'} "
                                  f"condition. Laboratory findings: {labs or 'none typical'}. Treated with: "
                                  f"{', '.join(c.drug_classes) or 'no specific drug class'}. Often seen with: "
                                  f"{', '.join(c.related) or 'nothing in particular'}."))
    for name, d in v.drugs.items():
        docs.append((name.title(), f"{name} ({', '.join(d.brands) or 'generic'}) is a {d.drug_class}, given "
                                   f"{d.route} as {d.form}, doses {', '.join(map(str, d.doses))} {d.unit}."))
    for name, lab in v.labs.items():
        docs.append((lab["mimic"].title(), f"{lab['mimic']} ({', '.join(lab.get('lay', []))}) is a laboratory test "
                                           f"in {lab['unit']}; normal about {lab['mean']} (sd {lab['sd']})."))
    return docs


@functools.lru_cache(maxsize=1)
def _index():
    from rank_bm25 import BM25Okapi

    return BM25Okapi([_tokens(f"{t} {c}") for t, c in corpus()])


def search(query: str, stands_for: str) -> str:
    scores = _index().get_scores(_tokens(query))
    ranked = sorted(range(len(scores)), key=lambda i: -scores[i])[:TOP_K]
    docs = corpus()
    lines = [f"Document [{n}] (Title: {docs[i][0]}) {docs[i][1]}" for n, i in enumerate(ranked) if scores[i] > 0]
    note = (f"[ehrbench substitute for the {stands_for} corpus: documents from the benchmark world's vocabulary, "
            "ranked by BM25]")
    return "\n".join([note, *lines]) if lines else f"{note}\nNo documents match '{query}'."


class Knowledge:
    """What the tools hold: `search(query, corpus_name)`."""

    def search(self, query: str, stands_for: str) -> str:
        return search(query, stands_for)
