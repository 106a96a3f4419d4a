"""Pluggable web search for the `web_search` tool.

The original called a commercial search API. Offline, `VocabularyWebSearch` answers from the world's own clinical
vocabulary (brand and generic drug names, drug classes and what they treat, related conditions, alternative labs
and procedures), ranked by word overlap, as a JSON list of up to 10 result snippets.
"""
from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from math import log
from typing import Protocol

from ...world.vocab import vocabulary


class WebSearch(Protocol):
    def search(self, query: str, max_results: int = 10) -> list[dict]: ...


@dataclass(frozen=True)
class _Doc:
    title: str
    snippet: str


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _join(items) -> str:
    items = list(dict.fromkeys(items))
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + (items[-1] if items else "")


def _documents() -> list[_Doc]:
    v = vocabulary()
    docs: list[_Doc] = []
    for d in v.drugs.values():
        cls = v.drug_classes[d.drug_class]
        peers = [x.name for x in v.drugs_in_class(d.drug_class) if x.name != d.name]
        brand = f" (brand names: {_join(d.brands)})" if d.brands else ""
        uses = f" It is used for {_join(cls['treats'])}." if cls["treats"] else ""
        docs.append(_Doc(f"{d.name} - drug information",
                         f"{d.name}{brand} is a {cls['label']}.{uses}"
                         + (f" Other drugs in the same class: {_join(peers)}." if peers else "")))
        for b in d.brands:
            docs.append(_Doc(f"{b} ({d.name})", f"{b} is a brand name of {d.name}, a {cls['label']}. "
                                               f"The generic name of {b} is {d.name}."))
    for key, cls in v.drug_classes.items():
        members = [d.name for d in v.drugs_in_class(key)]
        if members:
            docs.append(_Doc(f"{cls['label']} - drug class",
                             f"{cls['label']} drugs include {_join(members)}."
                             + (f" They are used for {_join(cls['treats'])}." if cls["treats"] else "")))
    for c in v.conditions.values():
        treatments = [f"{v.drug_classes[k]['label']} ({_join(d.name for d in v.drugs_in_class(k))})"
                      for k in c.drug_classes]
        labs = [v.labs[k]["mimic"] for k in c.labs]
        procs = [v.procedures[k].icd9[1] for k in c.procedures]
        text = f"{c.key} (also called {_join(c.lay)})."
        if treatments:
            text += f" Medications used: {'; '.join(treatments)}."
        if labs:
            text += f" Relevant lab tests: {_join(labs)}."
        if procs:
            text += f" Procedures: {_join(procs)}."
        if c.related:
            text += f" Related conditions and complications: {_join(c.related)}."
        docs.append(_Doc(f"{c.key} - overview", text))
    for p in v.procedures.values():
        alts = {q.icd9[1] for c in v.conditions.values() if p.key in c.procedures
                for q in (v.procedures[k] for k in c.procedures) if q.key != p.key}
        docs.append(_Doc(f"{p.icd9[1]} - procedure",
                         f"{p.icd9[1]} (also called {_join(p.lay)})."
                         + (f" Alternative procedures for the same conditions: {_join(sorted(alts))}." if alts else "")))
    for key, lab in v.labs.items():
        conds = [c.key for c in v.conditions.values() if key in c.labs]
        alts = sorted({v.labs[k]["mimic"] for c in v.conditions.values() if key in c.labs for k in c.labs} - {lab["mimic"]})
        docs.append(_Doc(f"{lab['mimic']} - lab test",
                         f"{lab['mimic']} (also called {_join(lab['lay'])}) is measured in {lab['unit'] or 'ratio'}."
                         + (f" It is used to assess {_join(conds)}." if conds else "")
                         + (f" Alternative tests for the same conditions: {_join(alts)}." if alts else "")))
    return docs


class VocabularyWebSearch:
    """BM25 over vocabulary documents: deterministic, offline, and grounded in the same facts as the world."""

    def __init__(self) -> None:
        self.docs = _documents()
        self._tf = [Counter(_tokens(d.title + " " + d.snippet)) for d in self.docs]
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg = sum(self._len) / len(self._len)
        df = Counter(t for tf in self._tf for t in tf)
        n = len(self.docs)
        self._idf = {t: log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def search(self, query: str, max_results: int = 10) -> list[dict]:
        q = set(_tokens(query))
        scored = []
        for i, tf in enumerate(self._tf):
            s = 0.0
            for t in q:
                if t in tf:
                    f = tf[t]
                    s += self._idf[t] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * self._len[i] / self._avg))
            if s > 0:
                scored.append((-s, i))
        scored.sort()
        return [{"title": self.docs[i].title, "snippet": self.docs[i].snippet} for _, i in scored[:max_results]]


BACKENDS = {"vocabulary": VocabularyWebSearch}


@functools.lru_cache(maxsize=None)
def web_search_backend(name: str) -> WebSearch:
    """The configured backend (`benchmark.web_search`), built once per process."""
    try:
        return BACKENDS[name]()
    except KeyError:
        raise ValueError(f"benchmark.web_search={name!r} is unknown; choose one of {sorted(BACKENDS)}") from None
