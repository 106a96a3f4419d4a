"""The reference agent's reading of a question: SQL written from the question text alone, never from the gold.

ClinSQL's self-check (../FIDELITY.md rule 3) needs a reference that reaches its answer as an agent would. A scripted
agent cannot write SQL from free text in general, but the project's questions come from known templates
(`templates.py`), so it reads a question the way a careful clinician reading the template catalogue would: the
anchor's age and sex from the opening, the cohort's third criterion from its sentence, and each choice the template
makes (a condition, a lab, a statistic, a window) from the options the question names. It tries those readings in
order until one renders exactly the question it was given, then writes that reading's SQL.

What this proves: every shipped question states all that its gold query needs (its age band, its concept, its
statistic, its window); a question that leaves a choice unstated, or names two options where the template cannot
tell them apart, has no reading or two, and the reference then writes nothing or the wrong query and scores below
100. What it does not prove: that a clinician would write the template's SQL (its ICD prefixes, its item ids);
that is the judge's and the rubric's business, tested against the authors' scorer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .templates import RESTRICTIONS, TEMPLATES, Anchor, Draft, Template

MAX_READINGS = 20_000          # a template draws at most four times from catalogues of at most 15 options


class Unread(Exception):
    """The question has no reading the template could have written."""


def _label(option) -> str | None:
    """The words a question uses for a catalogue option (None: an option questions do not name)."""
    if hasattr(option, "name"):
        return option.name
    if isinstance(option, str):
        return option
    if isinstance(option, tuple) and option and isinstance(option[0], str):
        return option[0]
    if isinstance(option, int):
        return str(option)
    return None


def _named(text: str, label: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(label.lower())}(?![\w])", text) is not None


@dataclass
class _Draws:
    """Stands in for the template's random source: each draw takes the option the current reading says, recording
    how many options that draw had (only those the question names, when it names any)."""
    text: str
    script: list[int]
    sizes: list[int]

    def _pick(self, options: list):
        at = len(self.sizes)
        self.sizes.append(len(options))
        return options[self.script[at] if at < len(self.script) else 0]

    def choice(self, seq):
        seq = list(seq)
        named = [o for o in seq if (label := _label(o)) is not None and _named(self.text, label)]
        return self._pick(named or seq)

    def random(self) -> float:
        return self._pick([0.25, 0.75])


def readings(question: str, template: Template):
    """Every draft the template writes for an anchor and choices the question names, in order."""
    text = question.lower()
    found = re.search(r"(\d+)[-‑]year[-‑]old", question)
    if found is None:
        raise Unread("the question names no anchor age ('<N>-year-old')")
    age = int(found.group(1))
    male = re.search(r"\b(male|man|men)\b", text) is not None and not re.search(r"\b(female|woman|women)\b", text)
    restriction = next((r for r, (what, *_) in RESTRICTIONS.items()
                        if f"only include patients with {what.lower()}" in text), 0)
    for style in range(4):
        script: list[int] = []
        for _ in range(MAX_READINGS):
            draws = _Draws(text, script, [])
            anchor = Anchor(age, male, style, restriction)
            draft = template(anchor, draws)
            draft.question += anchor.sentence()          # as the authoring appends it
            yield draft
            # the next reading: advance the last draw that has options left (an odometer over the draws)
            script = script + [0] * (len(draws.sizes) - len(script))
            while script and script[-1] + 1 >= draws.sizes[len(script) - 1]:
                script.pop()
            if not script:
                break
            script[-1] += 1


def read_question(question: str, scenario: str, difficulty: str) -> Draft:
    """The draft of the cell's template whose question is exactly `question` (the sentence of a cohort's third
    criterion included); Unread when none is."""
    template = TEMPLATES[scenario, difficulty]
    for draft in readings(question, template):
        if draft.question == question:
            return draft
    raise Unread(f"no reading of the {scenario}/{difficulty} template gives this question")

