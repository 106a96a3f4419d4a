"""EHR-ChatQA reward rules, as the authors' public code scores (glee4810/EHR-ChatQA, src/envs/base.py, src/utils.py).

Values are normalised as the original does (`process_item`: round to 4 places, then text; `process_result`: rows
sorted, the first 100 kept). IncreQA re-executes every `sql_execute` query of the trajectory and passes if, for any
query, any column's set of values (without "None") equals the set of the gold's first-column values (a gold
holding None can never match, as in the original). AdaptQA reads the first `<answer>`, ```answer or bare ``` block
of each message the user was shown; the answer passes if it contains every gold value (the first column of each
gold row, lower-cased, integers as digits) and nothing is left once those values, the joiners and units the
original lists, and trailing zeros are removed.

Number words: the original maps a gold value, and an answer, that is exactly one of the words of its table
(`ORIGINAL_NUMBER_WORDS`, the words its task files use) to digits, and leaves every other word as it is (gold "two",
answer "twenty": 0). Under `contract=original` that is the rule, and a gold word outside the table (this world
renders any count in words; the original's files never hold one) also passes as its digits, in any spelling of the
same number. `contract=ehrbench` maps any English cardinal, gold or answer, to digits (docs/benchmarks/ehrchatqa.md,
Differences from the original; gold "two", answer "twenty" then passes through the original's trailing-zero strip).
"""
from __future__ import annotations

import re
from ast import literal_eval
from typing import Awaitable, Callable

from num2words import num2words

from ...trial import InfrastructureError

ANSWER_PATTERN = re.compile(r"(?:<answer>|```answer|```\s*\n)(.*?)(?:</answer>|```)", re.DOTALL)
# Removed from what is left of an answer once the gold values are gone; order matters (".0000" before ".0").
RESIDUE = ["and", ",", ";", ".0000", ".000", ".00", ".0", "%", "days", "day"]
MAX_ROWS = 100   # the original compares only the first 100 rows after sorting


# --- the original's normal forms ---------------------------------------------------------------------------------
def process_item(value) -> str:
    try:
        value = round(float(value), 4)
    except (TypeError, ValueError, OverflowError):
        pass
    return str(value)


def comparable_row(row) -> tuple[str, ...]:
    return tuple(process_item(v) for v in row)


def process_result(result) -> list[tuple[str, ...]]:
    """Rows as the original compares them: each value normalised, rows sorted, the first 100 kept."""
    if isinstance(result, str):
        try:
            result = literal_eval(result)
        except (ValueError, SyntaxError):
            return result
    return sorted(comparable_row(row) for row in result)[:MAX_ROWS]


def process_answer(value) -> str:
    text = str(value).lower().strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else str(round(number, 4))


# --- number words ------------------------------------------------------------------------------------------------
# src/envs/base.py's `numeric_to_words` (despite its name, words -> digits): the number words of its task files
ORIGINAL_NUMBER_WORDS = {
    **{w: str(n) for n, spellings in {247: ("two hundred and forty-seven", "two hundred forty-seven"),
                                      659: ("six hundred and fifty-nine", "six hundred fifty-nine"),
                                      35: ("thirty five", "thirty-five"), 48: ("forty-eight", "forty eight"),
                                      37: ("thirty-seven", "thirty seven"), 28: ("twenty-eight", "twenty eight"),
                                      72: ("seventy-two", "seventy two")}.items() for w in spellings},
    **{w: str(n) for w, n in (("eleven", 11), ("thirty", 30), ("three", 3), ("four", 4), ("five", 5), ("six", 6),
                              ("seven", 7), ("eight", 8), ("nine", 9), ("ten", 10), ("fourteen", 14),
                              ("sixteen", 16), ("nineteen", 19), ("zero", 0), ("two", 2), ("one", 1))}}
_UNITS = {w: i for i, w in enumerate("one two three four five six seven eight nine".split(), start=1)}
_TEENS = {w: i for i, w in enumerate("ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen "
                                        "nineteen".split(), start=10)}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9}


def words_to_int(text: str) -> int | None:
    """An English cardinal written in words ("thirty five", "two hundred and forty-seven", num2words' "one
    thousand, one hundred"), or None for anything else ("two, three" is a list, not five)."""
    text = text.strip().lower()
    if text == "zero":
        return 0
    tokens = [t for t in re.split(r"[\s,-]+", text) if t]
    total = group = 0
    state, last_scale = "start", None     # start | U (units) | H (hundred) | T (tens) | X (group done) | S (scale)
    for token in tokens:
        if token == "and":
            if state not in ("H", "S"):
                return None
        elif token in _UNITS and state in ("start", "H", "S", "T"):
            group, state = group + _UNITS[token], {"start": "U", "S": "U", "H": "X", "T": "X"}[state]
        elif token in _TEENS and state in ("start", "H", "S"):
            group, state = group + _TEENS[token], "X"
        elif token in _TENS and state in ("start", "H", "S"):
            group, state = group + _TENS[token], "T"
        elif token == "hundred" and state == "U":
            group, state = group * 100, "H"
        elif token in _SCALES and state not in ("start", "S") and (last_scale is None or _SCALES[token] < last_scale):
            total, group, state, last_scale = total + group * _SCALES[token], 0, "S", _SCALES[token]
        else:
            return None
    if state == "start" or tokens[-1] == "and":
        return None
    return total + group


def digits_if_number_words(text: str) -> str:
    number = words_to_int(text)
    return str(number) if number is not None else text


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
                vals.append(str(round(v, 4)))      # every digit the 4-place rounding keeps ("%g" would drop some)
            else:
                vals.append(str(v))
        out.append(vals)
    return out


# --- IncreQA -----------------------------------------------------------------------------------------------------
def gold_values(gold_answer) -> set[str]:
    return {row[0] for row in process_result(gold_answer) if row}


def result_matches(rows, gold: set[str]) -> bool:
    """Any column of the (sorted, first 100) rows, "None" left out, has exactly the gold's values."""
    normalised = process_result(rows)
    for column in zip(*normalised):
        if {v for v in column if v != "None"} == gold:
            return True
    return False


async def incre_reward(queries: list[str], gold_answer, execute: Callable[[str], Awaitable[list[tuple]]]) -> float:
    """`await execute(sql) -> rows` re-runs a query (raising on error); queries that fail are skipped."""
    gold = gold_values(gold_answer)
    for sql in queries:
        try:
            rows = await execute(sql.strip())
        except InfrastructureError:
            raise                      # the database host failed, not the query: the trial is re-run
        except Exception:  # noqa: BLE001 - a failing query simply earns nothing
            continue
        if result_matches(rows, gold):
            return 1.0
    return 0.0


# --- AdaptQA -----------------------------------------------------------------------------------------------------
def gold_answers(gold_answer, to_digits: Callable[[str], str] = digits_if_number_words) -> list[str]:
    """The first column of each gold row in the original's normal form, number words as `to_digits` maps them."""
    return [to_digits(process_answer(row[0])) for row in process_result(gold_answer) if row]


def table_words(also: frozenset[int] = frozenset()) -> Callable[[str], str]:
    """The original's mapping: a text that is exactly a word of its table becomes digits; so does any spelling of
    a number in `also`; anything else stays as it is."""
    def to_digits(text: str) -> str:
        if text in ORIGINAL_NUMBER_WORDS:
            return ORIGINAL_NUMBER_WORDS[text]
        number = words_to_int(text) if also else None
        return str(number) if number is not None and number in also else text
    return to_digits


def extract_answer(message: str) -> str | None:
    """The first answer block of a message (<answer>, ```answer or a bare ``` block), or None."""
    match = ANSWER_PATTERN.search(message)
    return match.group(1).strip() if match else None


def answer_matches(answer: str, golds: list[str], to_digits: Callable[[str], str] = digits_if_number_words) -> bool:
    predicted = to_digits(answer.lower())
    if any(gold.lower() not in predicted for gold in golds):
        return False
    rest = predicted
    for gold in sorted(golds, key=len)[::-1]:        # longest first, each removed once
        rest = rest.replace(gold, "", 1)
    for token in RESIDUE:
        rest = rest.replace(token, "")
    return rest.rstrip("0").rstrip(".").strip() == ""


def adapt_reward(shown_messages: list[str], gold_answer, any_cardinal: bool = False) -> float:
    """`shown_messages`: the agent's messages the user received, in order (never text beside a tool call).
    `any_cardinal`: every number word as digits (`contract=ehrbench`); else the original's table, a gold word
    outside it also passing as its digits (see the module docstring)."""
    if any_cardinal:
        return _first_match(shown_messages, gold_answer, digits_if_number_words)
    if _first_match(shown_messages, gold_answer, table_words()):
        return 1.0
    beyond = frozenset(n for g in gold_answers(gold_answer, str) if g not in ORIGINAL_NUMBER_WORDS
                       and (n := words_to_int(g)) is not None)
    return _first_match(shown_messages, gold_answer, table_words(beyond)) if beyond else 0.0


def _first_match(shown_messages: list[str], gold_answer, to_digits: Callable[[str], str]) -> float:
    golds = gold_answers(gold_answer, to_digits)
    for message in shown_messages:
        answer = extract_answer(message or "")
        if answer is not None and answer_matches(answer, golds, to_digits):
            return 1.0
    return 0.0
