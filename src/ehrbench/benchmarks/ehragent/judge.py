"""EHRAgent's two judges, side by side: the original's lenient substring test, and a strict normalised one.

`compatibility` is wshi83/EhrAgent's `judge` (main.py) step for step: the ground truth (values joined by ", ") passes
if it is a substring of the prediction window; else True/False in the prediction become 1/0, a ground truth of
True/Yes/False/No/None becomes 1/0, it is split on ", ", a trailing ".0" is dropped, and it passes if every item is a
substring. Lenient for yes/no, brittle for numbers: "0" passes "10", "12.0" passes "12.5".

`strict` compares the agent's `answer` value with the gold values as multisets after normalising each: numbers
rounded to 2 decimals (EHRSQL's ndigits), booleans and yes/no as 1/0, None as 0 only against a 0 gold, text lowercased
and stripped; a list answer may come in any order.
"""
from __future__ import annotations

import ast
import re
from collections import Counter


def compatibility(pred: str, ans: str) -> bool:
    """The original's judge (main.py, with its Yes/No mapping), verbatim in behaviour."""
    old_flag = ans in pred
    pred = pred.replace("True", "1") if "True" in pred else pred.replace("False", "0")
    mapped = {"False": "0", "false": "0", "True": "1", "true": "1", "No": "0", "no": "0", "Yes": "1", "yes": "1",
              "None": "0", "none": "0"}
    ans = mapped.get(ans, ans)
    items: str | list[str] = ans.split(", ") if ", " in ans else ans
    if items[-2:] == ".0":            # on a list this compares its last two items with ".0": never true
        items = items[:-2]
    if not isinstance(items, list):
        items = [items]
    return old_flag or all(item in pred for item in items)


def gold_text(values: list[str]) -> str:
    """The ground truth as the original joins a list answer."""
    return ", ".join(values)


def _number(x: float) -> str:
    """A number to 2 decimals, trailing zeros dropped: 12.0 -> "12", 1.7500001 -> "1.75", 1234567 -> "1234567"."""
    return format(round(x, 2), ".2f").rstrip("0").rstrip(".")


def _normal(value) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        return _number(float(value))
    text = str(value).strip().lower()
    if text in ("true", "yes"):
        return "1"
    if text in ("false", "no"):
        return "0"
    try:
        return _number(float(text))
    except (ValueError, OverflowError):
        return text


def _values(answer) -> list:
    """The agent's answer as a flat list of values: a Python literal (list, tuple, rows) or comma-separated text."""
    if isinstance(answer, str):
        text = answer.strip()
        try:
            answer = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return [part for part in re.split(r",\s*", text) if part] if "," in text else [text]
    return _flat(answer)


def _flat(value) -> list:
    """Nested lists, tuples and sets of values, flattened; a string inside them is one value, commas and all."""
    if isinstance(value, (list, tuple, set)):
        return [v for item in value for v in _flat(item)]
    return [value]


def strict(answer, gold: list[str]) -> bool:
    """The answer holds exactly the gold values (any order), each normalised."""
    got = [_normal(v) for v in _values(answer)]
    want = [_normal(v) for v in gold]
    if want == ["none"] or want == ["0"]:
        got = ["0" if g == "none" else g for g in got]
    return Counter(got) == Counter(want)
