"""PhysAssistBench's per-turn metrics beside the rubric: IIRS and the tool-use rates (the original's eval/iirs.py
and run_eval.compute_iirs_for_entries), and the turn and session accuracy built on them (eval/metrics.py).

Per turn, from the gold actions and the agent's calls (control tools left out):
- ER, ellipsis recovery (PE and AU turns; else 1): the F1 of the gold and called tool-name sets (1 with no gold);
- AC, argument completion: the share of the first gold call's arguments (ids aside) that the agent's first call
  gives the same value (compared as lower-cased, stripped text);
- FPTR / MTR: 1 when the agent called a tool the gold does not have / missed one it has;
- with a judge only: AA, answer accuracy (0-1 from the judge against the gold answer; 0 when either is empty),
  AID, antecedent identification (EA and AE turns; the antecedent from the session's `dep_graph`, empty without
  one, as in the original), and PAQ, patient-answer quality (turns whose gold interviews the patient: the mean of
  faithfulness, coverage and relevance to the stored reply); each asked with the original's prompt at
  temperature 0, its reply read as `_llm_score` reads it (a fenced reply unwrapped, JSON, anything else 0).
IIRS_turn = mean(the subtype's components) x AA (EA/AE: AID, AA; PE: ER, AA; AU: ER, AC, AA; others: AC, AA); a
session's IIRS is its turns' mean and the run's the mean over sessions; a turn is correct when AA >= 0.5. Beside
them, judge or not, the authors' rule checker (`rule_checker.py`, their `--rule_based` mode): whether the turn's
tool use alone is correct, and that mode's IIRS, AC x (1 or 0).
"""
from __future__ import annotations

import json

from ...failures import kind_of
from ...llm.base import ChatRequest, ModelTurnError, Sampling
from ...llm.usage import MeteredModel
from ...trial import InfrastructureError, Message
from . import rule_checker
from .rule_checker import CONTROL, KNOWN
from .tasks import Turn

COMPONENTS = {"EA": ("AID", "AA"), "AE": ("AID", "AA"), "PE": ("ER", "AA"), "AU": ("ER", "AC", "AA")}
CORRECT = 0.5


def tool_use(calls: list[tuple[str, dict]]) -> tuple[list[str], dict]:
    """(the tools called, control tools aside; the first such call's arguments)."""
    names = [name for name, _ in calls if name not in CONTROL]
    first = next((args for name, args in calls if name not in CONTROL), {})
    return names, first if isinstance(first, dict) else {}


def score_er(gold: list[str], called: list[str], subtype: str | None) -> float:
    if subtype not in ("PE", "AU"):
        return 1.0
    gold_set, called_set = set(gold), set(called)
    if not gold_set:
        return 1.0
    both = gold_set & called_set
    precision = len(both) / len(called_set) if called_set else 0.0
    recall = len(both) / len(gold_set)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def score_ac(gold_args: dict, called_args: dict) -> float:
    total = correct = 0
    for key, gold in gold_args.items():
        if key in KNOWN:
            continue
        total += 1
        value = called_args.get(key)
        if value is None:
            continue
        if str(gold).lower().strip() == str(value).lower().strip():
            correct += 1
        elif isinstance(gold, (int, float)) and isinstance(value, (int, float)) and abs(gold - value) < 1e-6:
            correct += 1
    return correct / total if total else 1.0


def read_score(text: str | None, key: str) -> float:
    """`_llm_score`: a reply opening with ``` is unwrapped (and a leading "json" dropped), then JSON; anything else
    is no score, 0."""
    raw = (text or "").strip()
    if raw.startswith("```"):
        raw = raw.split("```")[1]
        if raw.startswith("json"):
            raw = raw[4:]
    try:
        value = json.loads(raw)
        return float(value.get(key, 0.0)) if isinstance(value, dict) else 0.0
    except (json.JSONDecodeError, TypeError, ValueError):
        return 0.0


def _history(transcript: tuple[dict, ...], index: int, last: int, chars: int) -> str:
    return "\n".join(f"[{str(m.get('role', '')).upper()}]: {str(m.get('content', ''))[:chars]}"
                     for m in list(transcript)[:index * 2][-last:])


class IirsJudge:
    """AA and AID through the run's grader (metered under `grader`), as `score_AA` / `score_AID` ask."""

    def __init__(self, model: MeteredModel, prompts: dict,
                 sampling: Sampling = Sampling(temperature=0.0, max_tokens=4000, max_tokens_name="max_tokens")):
        self.model, self.prompts, self.params = model, prompts, sampling.request()

    async def _ask(self, prompt: str, key: str) -> float:
        return read_score(await self._reply(prompt), key)

    async def _reply(self, prompt: str) -> str | None:
        """The judge's reply; one cut off, blocked or refused (its size, any 400) is none, which scores 0, as the
        original's `_llm_score` scores a failed call; an outage re-runs the trial."""
        try:
            return (await self.model.complete(ChatRequest([Message("user", prompt)],
                                                          system=self.prompts["iirs_system"], **self.params))).text
        except (ModelTurnError, InfrastructureError) as e:
            if kind_of(e) is None:
                raise
            return None

    async def aa(self, question: str, transcript: tuple[dict, ...], index: int, gold: str, answer: str) -> float:
        if not answer or not gold:
            return 0.0
        return await self._ask(self.prompts["iirs_aa"].format(
            question=question, history=_history(transcript, index, 4, 200), gold=gold[:600], answer=answer[:600]),
            "AA")

    async def paq(self, question: str, patient: str, answer: str) -> float:
        """`score_patient_answer_quality`: faithfulness, coverage and relevance of the answer to the patient's
        stored reply (0-1 each, from the judge), their mean rounded to 4 places; 0 with either empty."""
        if not patient or not answer:
            return 0.0
        text = await self._reply(self.prompts["iirs_paq"].format(question=question, patient=patient, answer=answer))
        return round(sum(read_score(text, k) for k in ("F", "C", "R")) / 3.0, 4)

    async def aid(self, question: str, transcript: tuple[dict, ...], index: int, antecedent: str,
                  answer: str) -> float:
        return await self._ask(self.prompts["iirs_aid"].format(
            question=question, history=_history(transcript, index, 6, 300), antecedent=antecedent,
            answer=answer[:500]), "AID")


def antecedent(session_raw: dict, index: int) -> str:
    """The gold antecedent of an EA/AE turn: the previous turn's first entity, else its first event (`dep_graph`)."""
    prior = ((session_raw.get("dep_graph") or {}).get("nodes") or {}).get(str(index - 1)) or {}
    return (prior.get("entities") or [None])[0] or (prior.get("events") or [None])[0] or ""


async def turn_metrics(turn: Turn, question: str, answer: str, calls: list[tuple[str, dict]],
                       transcript: tuple[dict, ...], session_raw: dict, judge: IirsJudge | None) -> dict[str, float]:
    """One turn's ER, AC, FPTR, MTR and, with a judge, AA, AID, IIRS_turn and whether it is correct."""
    gold_tools, gold_args = tool_use([(a["name"], a.get("arguments") or {}) for a in turn.gold_actions])
    called, called_args = tool_use(calls)
    out = {"ER": score_er(gold_tools, called, turn.subtype), "AC": score_ac(gold_args, called_args),
           "FPTR": float(bool(set(called) - set(gold_tools))), "MTR": float(bool(set(gold_tools) - set(called)))}
    checked, _ = rule_checker.is_correct(gold_tools, gold_args, called, called_args,
                                         session_raw.get("tools_en") or session_raw.get("tools") or [])
    out["rule_correct"] = float(checked)            # the `--rule_based` mode: AA = this, IIRS = AC x AA
    out["rule_IIRS"] = out["AC"] * out["rule_correct"]
    if judge is None:
        return out
    out["AA"] = await judge.aa(question, transcript, turn.index, turn.gold_answer, answer)
    out["AID"] = await judge.aid(question, transcript, turn.index, antecedent(session_raw, turn.index), answer) \
        if turn.subtype in ("EA", "AE") else 1.0
    out["IIRS"] = iirs_turn(turn.subtype, out)
    out["correct"] = float(out["AA"] >= CORRECT)
    if any(name.startswith("patient.") for name in gold_tools):   # PAQ: only where the gold interviews
        out["PAQ"] = await judge.paq(question, stored_patient_reply(session_raw, turn.index), answer)
    return out


def stored_patient_reply(session_raw: dict, index: int) -> str:
    """The first stored `patient_response` among the turn's gold actions (_extract_gold_turn_info)."""
    for step in ((session_raw.get("answer_list") or [])[index:index + 1] or [[]])[0]:
        obs = step.get("observation") if isinstance(step, dict) else None
        if isinstance(obs, dict) and "patient_response" in obs:
            return str(obs["patient_response"])
    return ""


def iirs_turn(subtype: str | None, scores: dict[str, float]) -> float:
    """compute_iirs_turn: the mean of the subtype's components, times AA (the quality gate)."""
    used = COMPONENTS.get(subtype or "", ("AC", "AA"))
    return sum(scores[c] for c in used) / len(used) * scores["AA"]
