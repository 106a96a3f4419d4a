"""PhysAssistBench's graders: the original's rubric judge (one LLM call per turn) and ehrbench's rule grader.

A turn is graded on what the agent did in it: its final answer, or, on a Write/Update turn, only the arguments of
its write calls (the original's action judge ignores the text). Each rubric item is a YES/NO; the turn's score
r_t is the share of YES.

The rule grader decides an item from its machine-checkable form (`CHECKS`, written beside the item by ehrbench's
authoring); an item without one is undecided. The LLM judge is the original's: `rubric_eval.score_turn_rubric`
(the question, the last six messages of the gold transcript, the gold answer as "EHR data", the answer, the items)
or, on a Write/Update turn, `score_action_turn`; temperature 0.1. A verdict that is not JSON is an error: the
turn's judge score is None and the turn leaves the aggregates (the original's `rubric_score=None`), never a pass;
a verdict of the wrong length is padded with NO, as the original pads it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ...judges.parsing import parse_json_object
from ...llm.base import ChatRequest
from ...llm.usage import MeteredModel
from ...trial import Message
from .fhir import canonical
from .sessions import Turn

NUMBER = re.compile(r"\d+(?:\.\d+)?")
CHECKS = {
    "cites": "a number in the answer equals `value` at the precision it is written with (0.9 = 0.90)",
    "mentions": "the answer says one of `any` (case-insensitive)",
    "absent": "the answer says none of `any` (a dangerous recommendation absent)",
    "write": "a `tool` call's `field` holds one of `any`, or the number `value` (with `unit`)",
    "write_absent": "no `tool` call's `field` holds one of `any`",
}


@dataclass
class TurnWork:
    """What the agent did in one turn: its answer and its calls (canonical names, arguments as sent)."""
    question: str
    answer: str
    calls: list[tuple[str, dict]]

    @property
    def writes(self) -> list[tuple[str, dict]]:
        return [(n, a) for n, a in self.calls if n.endswith(".create")]


def turn_work(messages: list[dict], turns: int) -> list[TurnWork]:
    """The record split at the physician's questions: each turn's calls and its last message to the physician."""
    out: list[TurnWork] = []
    for m in messages:
        if m["role"] == "user":
            if len(out) == turns:
                break
            out.append(TurnWork(m.get("content") or "", "", []))
        elif out and m["role"] == "assistant":
            if m.get("tool_call"):
                args = m["tool_call"]["arguments"]
                out[-1].calls.append((canonical(m["tool_call"]["name"]), args if isinstance(args, dict) else {}))
            else:
                out[-1].answer = m.get("content") or ""
    return out + [TurnWork("", "", []) for _ in range(turns - len(out))]


def cites(text: str, value: float) -> bool:
    """Whether `text` states `value`, allowing the rounding of the value's written precision."""
    decimals = len(repr(float(value)).split(".")[1].rstrip("0")) if float(value) % 1 else 0
    tolerance = 0.5 * 10 ** -decimals - 1e-9
    return any(abs(float(n) - float(value)) < tolerance for n in NUMBER.findall(text.replace(",", "")))


def _field_values(writes: list[tuple[str, dict]], tool: str, field: str) -> list[str]:
    return [str(args.get(field, "")) for name, args in writes if name == tool]


def decide(check: dict | None, work: TurnWork) -> tuple[bool | None, str]:
    """One item by its check: (YES/NO, why), or (None, why) when it has no check the rule grader knows."""
    if not check or check.get("kind") not in CHECKS:
        return None, "no machine-checkable form"
    kind, answer = check["kind"], work.answer.lower()
    words = [str(w).lower() for w in check.get("any", [])]
    if kind == "cites":
        ok = cites(work.answer, float(check["value"]))
        return ok, f"{check['value']} {'stated' if ok else 'not stated'} in the answer"
    if kind == "mentions":
        found = [w for w in words if w in answer]
        return bool(found), f"says {found[0]!r}" if found else f"says none of {words}"
    if kind == "absent":
        found = [w for w in words if w in answer]
        return not found, f"says {found[0]!r}" if found else f"none of {words} said"
    values = _field_values(work.writes, check["tool"], check["field"])
    if kind == "write_absent":
        bad = [v for v in values if any(w in v.lower() for w in words)]
        return not bad, f"{check['field']}={bad[0]!r}" if bad else f"no {check['tool']} {check['field']} has {words}"
    if not values:
        return False, f"no {check['tool']} call"
    for v in values:
        if "value" in check:
            unit = str(check.get("unit", "")).lower()
            if cites(v, float(check["value"])) and unit in v.lower():
                return True, f"{check['field']}={v!r}"
        elif any(w in v.lower() for w in words):
            return True, f"{check['field']}={v!r}"
    return False, f"{check['field']}: {values}"


def rule_grade(turn: Turn, work: TurnWork) -> list[tuple[bool | None, str]]:
    return [decide(c, work) for c in turn.checks]


def turn_score(decisions: list[bool | None]) -> float | None:
    """r_t: YES over items; None when an item is undecided (the turn needs a judge)."""
    if not decisions or any(d is None for d in decisions):
        return None
    return sum(map(bool, decisions)) / len(decisions)


# ---- the LLM judge ---------------------------------------------------------------------------------------------

def _history(transcript: tuple[dict, ...], index: int) -> str:
    """The gold transcript before this turn, its last six messages, 300 characters each (the original's)."""
    return "".join(f"[{str(m.get('role', '')).upper()}]: {str(m.get('content', ''))[:300]}\n"
                   for m in list(transcript)[:index * 2][-6:])


def _writes_block(writes: list[tuple[str, dict]]) -> str:
    if not writes:
        return "(no write tool calls found)"
    return "\n".join(f"Tool called: {name}\n" + "".join(f"  {k}: {v}\n" for k, v in args.items()
                                                         if k != "subject_id" and v not in (None, ""))
                     for name, args in writes).rstrip("\n")


def judge_prompt(prompts: dict, turn: Turn, work: TurnWork, transcript: tuple[dict, ...]) -> tuple[str, str]:
    """(system, user) for one turn, as `score_turn_rubric` / `score_action_turn` write them."""
    items = "\n".join(f"{i + 1}. {item}" for i, item in enumerate(turn.items))
    history = _history(transcript, turn.index)
    if turn.kind == "WU":
        gold = "\n".join(f"Gold tool: {a['name']}\n" + "".join(f"  {k}: {v}\n" for k, v in a["arguments"].items())
                         for a in turn.gold_writes).rstrip("\n")
        return prompts["action_judge_system"], prompts["action_judge_user"].format(
            question=work.question, history=history, context=turn.gold_answer[:300], gold=gold,
            model=_writes_block(work.writes), items=items)
    return prompts["judge_system"], prompts["judge_user"].format(
        question=work.question, history=history, ehr=turn.gold_answer or "(no EHR summary available)",
        answer=work.answer, items=items)


def _to01(value) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return int(value >= 1)
    return int(str(value).strip().lower() in ("1", "true", "yes", "y", "pass"))


def read_verdict(text: str | None, n: int) -> tuple[list[int], list[str]] | None:
    """The judge's scores and reasons for n items (padded with NO, or cut, to n), or None when it is not JSON."""
    verdict = parse_json_object(text)
    if verdict is None:
        match = re.search(r"\[.*\]", text or "", re.S)
        try:
            verdict = json.loads(match.group(0)) if match else None
        except json.JSONDecodeError:
            verdict = None
    if isinstance(verdict, list):
        if verdict and all(isinstance(v, dict) for v in verdict):
            verdict = {"scores": [v.get("score", v.get("pass", 0)) for v in verdict],
                       "reasoning": [v.get("reasoning", v.get("rationale", "")) for v in verdict]}
        else:
            verdict = {"scores": verdict}
    if not isinstance(verdict, dict) or not isinstance(verdict.get("scores"), list):
        return None
    scores = [_to01(s) for s in verdict["scores"]][:n]
    reasons = [str(r) for r in (verdict.get("reasoning") or [])][:n]
    return scores + [0] * (n - len(scores)), reasons + [""] * (n - len(reasons))


class Judge:
    """The original's rubric judge on one model (metered under `grader`)."""

    def __init__(self, model: MeteredModel, prompts: dict, temperature: float = 0.1):
        self.model, self.prompts, self.temperature = model, prompts, temperature

    async def grade(self, turn: Turn, work: TurnWork, transcript: tuple[dict, ...]) -> tuple[list[int] | None, list[str]]:
        """(scores, reasons); scores None when the verdict could not be read (the reasons then hold the raw text)."""
        system, user = judge_prompt(self.prompts, turn, work, transcript)
        text = (await self.model.complete(ChatRequest([Message("user", user)], system=system,
                                                      temperature=self.temperature,
                                                      max_tokens=2000 if turn.kind == "WU" else 4000))).text
        verdict = read_verdict(text, len(turn.items))
        if verdict is None:
            return None, [f"unreadable judge verdict: {(text or '')[:1000]}"]
        return verdict
