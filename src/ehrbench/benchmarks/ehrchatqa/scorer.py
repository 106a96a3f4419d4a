"""EHR-ChatQA reward rules, exactly as the public implementation scores (see specs/ehr-chatqa.md, Rewards).

IncreQA re-executes every `sql_execute` query of the trajectory and passes if, for any query, any column's set of
distinct normalised values equals the set of first-column gold values (lenient by design: row order, duplicates
and extra columns are ignored). AdaptQA reads `<answer>` tags in the agent's messages to the user.
"""
from __future__ import annotations

import re
from typing import Awaitable, Callable, Iterable

from num2words import num2words

from ...trial import InfrastructureError

_ANSWER_TAG = re.compile(r"<\s*answer\s*>(.*?)<\s*/\s*answer\s*>", re.I | re.S)
_ANSWER_FENCE = re.compile(r"```\s*answer\s*\n(.*?)```", re.I | re.S)
# Tokens that may surround gold strings in a passing answer; longest first so ".0000" goes before ".0".
_RESIDUE = [r"\.0000", r"\.000", r"\.00", r"\.0", r"%", r",", r";", r"\band\b", r"\bdays\b", r"\bday\b"]
_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
NUMERAL_WORDS: dict[str, str] = {str(i): w for i, w in enumerate(_WORDS)}
NUMERAL_WORDS.update({"20": "twenty", "30": "thirty", "40": "forty", "50": "fifty", "60": "sixty", "70": "seventy",
                      "80": "eighty", "90": "ninety", "100": "one hundred"})
WORD_NUMERALS = {w: n for n, w in NUMERAL_WORDS.items()}


# --- IncreQA -----------------------------------------------------------------------------------------------------
def normalize_value(v) -> str:
    try:
        return str(round(float(v), 4))
    except (TypeError, ValueError):
        return str(v)


def normalize_rows(rows: Iterable[Iterable], limit: int = 100) -> list[tuple[str, ...]]:
    return sorted(tuple(normalize_value(v) for v in row) for row in rows)[:limit]


def gold_values(gold_answer: list[list]) -> set[str]:
    return {normalize_value(row[0]) for row in gold_answer if row} - {"None"}


def result_matches(rows: list[tuple], gold: set[str]) -> bool:
    norm = normalize_rows(rows)
    if not norm:
        return False
    for j in range(len(norm[0])):
        column = {row[j] for row in norm if j < len(row)} - {"None"}
        if column == gold:
            return True
    return False


async def incre_reward(queries: list[str], gold_answer: list[list],
                       execute: Callable[[str], Awaitable[list[tuple]]]) -> float:
    """`await execute(sql) -> rows` re-runs a query (raising on error); queries that fail are skipped."""
    gold = gold_values(gold_answer)
    for sql in queries:
        try:
            rows = await execute(sql)
        except InfrastructureError:
            raise                      # the database host failed, not the query: the trial is re-run
        except Exception:  # noqa: BLE001 - a failing query simply earns nothing
            continue
        if result_matches(rows, gold):
            return 1.0
    return 0.0


# --- AdaptQA -----------------------------------------------------------------------------------------------------
def words(n: int) -> str:
    return num2words(int(n))


def render_answer(rows: list[tuple]) -> list[list]:
    """AdaptQA gold answers: counts as words, decimals rounded to 4 places, text as stored (paper A.6.2)."""
    out = []
    for row in rows:
        vals = []
        for v in row:
            if isinstance(v, bool) or v is None:
                vals.append(str(v))
            elif isinstance(v, int):
                vals.append(words(v))
            elif isinstance(v, float):
                vals.append(f"{round(v, 4):g}" if abs(v) < 1e15 else str(v))
            else:
                vals.append(str(v))
        out.append(vals)
    return out


def extract_answers(message: str) -> list[str]:
    return _ANSWER_TAG.findall(message) + _ANSWER_FENCE.findall(message)


def _variants(gold: str) -> list[str]:
    g = gold.strip().lower()
    out = [g]
    if g in NUMERAL_WORDS:
        out.append(NUMERAL_WORDS[g])
    if g in WORD_NUMERALS:
        out.append(WORD_NUMERALS[g])
    return out


def answer_matches(answer: str, golds: list[str]) -> bool:
    text = answer.lower()
    for gold in golds:
        hit = next((v for v in _variants(gold) if v and v in text), None)
        if hit is None:
            return False
        text = text.replace(hit, " ")
    for token in _RESIDUE:
        text = re.sub(token, " ", text)
    return text.strip() == ""


def adapt_reward(agent_messages: list[str], gold_answer: list[list]) -> float:
    golds = [str(v) for row in gold_answer for v in row]
    for message in agent_messages:
        for answer in extract_answers(message):
            if answer_matches(answer, golds):
                return 1.0
    return 0.0
