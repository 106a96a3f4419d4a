"""PhysAssistBench's graders: the original's rubric judge (one LLM call per turn) and ehrbench's rule grader.

A turn is graded on what the agent did in it: its final answer, or, on a Write/Update turn, only the arguments of
its write calls (the original's action judge ignores the text). Each rubric item is a YES/NO; the turn's score
r_t is the share of YES.

The rule grader decides an item from its machine-checkable form (`CHECKS`, written beside the item by ehrbench's
authoring); an item without one is undecided. The LLM judge is the original's: `rubric_eval.score_turn_rubric`
(the question, the last six messages of the gold transcript, the gold answer as "EHR data", the answer, the items)
or, on a Write/Update turn, `score_action_turn`; temperature 0.1. A verdict that is not JSON is an error: the
turn's judge score is None and the turn leaves the aggregates (the original's `rubric_score=None`), never a pass;
JSON with too few scores (or none) is padded with NO, as the original pads it; the write-turn judge's scores are
read as its `int(bool(s))` reads them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from ...failures import kind_of
from ...llm.base import ChatRequest, ModelTurnError, Sampling
from ...llm.usage import MeteredModel
from ...trial import InfrastructureError, Message
from .fhir import canonical
from .tasks import Turn

NUMBER = re.compile(r"\d+(?:\.\d+)?")
CHECKS = {
    "cites": "a number in the answer equals `value` at the precision it is written with (0.9 = 0.90)",
    "near": "a number in the answer lies within `tolerance` (relative, at least 1) of `value`: a computed figure "
            "(a clearance) whose inputs an agent may round differently",
    "mentions": "the answer says one of `any` (case-insensitive, as words)",
    "absent": "no sentence of the answer says one of `any` without first negating it (a dangerous recommendation "
              "absent: 'avoid X' is no recommendation of X)",
    "write": "an accepted `tool` call's `field` is one of `any` (`match: contains`: says one of them), or holds the "
             "number `value` (with `unit`)",
    "write_absent": "no accepted `tool` call's `field` is one of `any` (no `field`: no `tool` call at all)",
}


@dataclass
class TurnWork:
    """What the agent did in one turn: its answer, its calls (canonical names, arguments as sent) and the writes
    the tools accepted (a refused write placed nothing)."""
    question: str
    answer: str
    calls: list[tuple[str, dict]]
    writes: list[tuple[str, dict]] = field(default_factory=list)


def turn_work(messages: list[dict], turns: int) -> list[TurnWork]:
    """The record split at the physician's questions: each turn's calls and its last message to the physician."""
    results = {m.get("tool_call_id"): m.get("content") or "" for m in messages if m["role"] == "tool"}
    out: list[TurnWork] = []
    for m in messages:
        if m["role"] == "user":
            if len(out) == turns:
                break
            out.append(TurnWork(m.get("content") or "", "", []))
        elif out and m["role"] == "assistant":
            if m.get("tool_call"):
                call = m["tool_call"]
                name, args = canonical(call["name"]), call["arguments"] if isinstance(call["arguments"], dict) else {}
                out[-1].calls.append((name, args))
                if name.endswith(".create") and results.get(call.get("id"), "").startswith(
                        f"{name.split('.')[0]} created:"):
                    out[-1].writes.append((name, args))
            else:
                out[-1].answer = m.get("content") or ""
    return out + [TurnWork("", "", []) for _ in range(turns - len(out))]


def _says(text: str, phrase: str) -> bool:
    """`phrase` in `text` as words (case-insensitive): "normal" is not in "abnormal", nor "up" in "follow-up"."""
    return re.search(rf"(?<![a-z0-9]){re.escape(phrase.lower())}(?![a-z0-9])", text.lower()) is not None


def _recommends(text: str, phrase: str) -> bool:
    """`phrase` said in a sentence that does not first negate it ("avoid a free water bolus" recommends none)."""
    for sentence in re.split(r"[.;!?\n]", text.lower()):
        at = re.search(rf"(?<![a-z0-9]){re.escape(phrase.lower())}(?![a-z0-9])", sentence)
        if at and not NEGATION.search(sentence[:at.start()]):
            return True
    return False


NEGATION = re.compile(r"(?<![a-z])(no|not|avoid|avoiding|don't|do not|without|never|hold|stop|contraindicated)"
                      r"(?![a-z])")
MOMENTS = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?|(?<!\d)\d{1,2}:\d{2}(?::\d{2})?")


def cites(text: str, value: float) -> bool:
    """Whether `text` states `value`, allowing the rounding of the value's written precision."""
    decimals = len(repr(float(value)).split(".")[1].rstrip("0")) if float(value) % 1 else 0
    tolerance = 0.5 * 10 ** -decimals - 1e-9
    text = MOMENTS.sub(" ", text.replace(",", ""))          # a date's or a time's digits are not values
    return any(abs(float(n) - float(value)) < tolerance for n in NUMBER.findall(text))


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
    if kind == "near":
        value, tolerance = float(check["value"]), float(check.get("tolerance", 0.1))
        numbers = [float(n) for n in NUMBER.findall(MOMENTS.sub(" ", work.answer.replace(",", "")))]
        ok = any(abs(n - value) <= max(tolerance * abs(value), 1) for n in numbers)
        return ok, f"about {check['value']} {'stated' if ok else 'not stated'} in the answer"
    if kind == "mentions":
        found = [w for w in words if _says(answer, w)]
        return bool(found), f"says {found[0]!r}" if found else f"says none of {words}"
    if kind == "absent":
        found = [w for w in words if _recommends(answer, w)]
        return not found, f"recommends {found[0]!r}" if found else f"recommends none of {words}"
    if kind == "write_absent" and "field" not in check:
        made = [a for n, a in work.writes if n == check["tool"]]
        return not made, f"{len(made)} {check['tool']} calls" if made else f"no {check['tool']} call"
    values = _field_values(work.writes, check["tool"], check["field"])
    exact = lambda v: v.strip().lower() in words                      # noqa: E731 - the judge's "exact unless
    if kind == "write_absent":                                         # the rubric lists synonyms"
        bad = [v for v in values if exact(v)]
        return not bad, f"{check['field']}={bad[0]!r}" if bad else f"no {check['tool']} {check['field']} in {words}"
    if not values:
        return False, f"no {check['tool']} call"
    for v in values:
        if "value" in check:
            unit = str(check.get("unit", ""))
            if cites(v, float(check["value"])) and (not unit or _says(v, unit)):
                return True, f"{check['field']}={v!r}"
        elif exact(v) or (check.get("match") == "contains" and any(_says(v, w) for w in words)):
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


def extract_json(text: str | None):
    """The original's `llm_client.extract_json`: the reply as JSON, then the first closed ``` fence, then an
    unclosed one, then the span from the first { or [ to the last } or ], each tried as is and with \\' made ';
    None where it raises."""
    def attempt(candidate: str):
        for variant in (candidate, re.sub(r"\\'", "'", candidate)):
            try:
                return json.loads(variant)
            except json.JSONDecodeError:
                continue
        return None

    text = text or ""
    found = attempt(text)
    for pattern in (r"```(?:json)?\s*([\s\S]*?)```", r"```(?:json)?\s*([\s\S]+)$"):
        if found is None and (m := re.search(pattern, text)):
            found = attempt(m.group(1).strip())
    if found is None and (m := re.search(r"(\{[\s\S]*\}|\[[\s\S]*\])", text)):
        found = attempt(m.group(1))
    return found


def read_verdict(text: str | None, n: int, coerce=None, lists: bool = True) -> tuple[list[int], list[str]] | None:
    """The judge's scores and reasons for n items (padded with NO, or cut, to n), or None where the original's
    `score_turn_rubric` leaves the turn unscored: no JSON in the reply, `scores` not a list, no items.
    `coerce` reads one score: `_to01` (score_turn_rubric's) by default; the write-turn judge's is `int(bool(s))`.
    `lists=False` (the write-turn judge's `score_action_turn`, which calls `.get` on the reply): a JSON list is
    unreadable, None, as the original's AttributeError leaves the turn unscored."""
    coerce = coerce or _to01
    verdict = extract_json(text)
    if isinstance(verdict, list) and not lists:
        return None
    if isinstance(verdict, list):
        if all(isinstance(v, dict) for v in verdict):
            scores = [v.get("score", v.get("pass", 0)) for v in verdict]
            reasons = [str(v.get("reasoning", v.get("rationale", ""))) for v in verdict]
        else:
            scores, reasons = list(verdict), [""] * len(verdict)
    elif isinstance(verdict, dict):
        scores = verdict.get("scores", [])
        reasons = verdict.get("reasoning", [""] * len(scores) if isinstance(scores, list) else [])
    else:
        return None
    if not n or not isinstance(scores, list) or (len(scores) != n and not isinstance(reasons, list)):
        return None                     # the original's TypeError on `scores + [0] * n`: the turn unscored
    scores = [coerce(x) for x in (scores + [0] * n)[:n]]
    reasons = [str(r) for r in (list(reasons) + [""] * n)[:n]] if isinstance(reasons, list) else [str(reasons)] * n
    return scores, reasons


class Judge:
    """The original's rubric judge on one model (metered under `grader`)."""

    def __init__(self, model: MeteredModel, prompts: dict,
                 sampling: Sampling = Sampling(temperature=0.1, max_tokens=4000, max_tokens_name="max_tokens")):
        """`sampling`: the benchmark's table's for the grader; a write turn's verdict is allowed 2,000 tokens, as
        the original's write-turn judge (`eval_discharge_planning.py`)."""
        self.model, self.prompts, self.sampling = model, prompts, sampling

    async def grade(self, turn: Turn, work: TurnWork, transcript: tuple[dict, ...]) -> tuple[list[int] | None, list[str]]:
        """(scores, reasons); scores None when the verdict could not be read (the reasons then hold the raw text)."""
        system, user = judge_prompt(self.prompts, turn, work, transcript)
        params = replace(self.sampling, max_tokens=2000) if turn.kind == "WU" else self.sampling
        try:
            text = (await self.model.complete(ChatRequest([Message("user", user)], system=system,
                                                          **params.request()))).text
        except (ModelTurnError, InfrastructureError) as e:
            if kind_of(e) is None:       # an outage: the trial is re-run
                raise
            return None, [f"the judge gave no verdict ({e})"]     # the original drops the turn, as unreadable
        write_turn = turn.kind == "WU"
        verdict = read_verdict(text, len(turn.items), (lambda s: int(bool(s))) if write_turn else None,
                               lists=not write_turn)
        if verdict is None:
            return None, [f"unreadable judge verdict: {(text or '')[:1000]}"]
        return verdict
