"""EHRAgent's scoring: the log the original wrote, its two judges, and a strict normalised one beside them.

The original scored a question from the log file main.py wrote (`original_log`: the question, the gold, every
message of the chat, the gold again), not from the agent's answer: evaluate.py counts it completed when "TERMINATE"
appears anywhere in the log, and judges the text from the end of the last code cell's arguments to the last
TERMINATE (`prediction`). The paper's SR is evaluate.py's judge (`evaluate_judge`); main.py's own judge
(`compatibility`, with a Yes/No mapping) decided which questions entered the long-term memory, TERMINATE or not.

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
import json
import re
from collections import Counter


def compatibility(pred: str, ans: str, yes_no: bool = True) -> bool:
    """The original's judge (main.py, with its Yes/No mapping; `yes_no=False`: evaluate.py's), verbatim in behaviour."""
    old_flag = ans in pred
    pred = pred.replace("True", "1") if "True" in pred else pred.replace("False", "0")
    mapped = {"False": "0", "false": "0", "True": "1", "true": "1", "None": "0", "none": "0"}
    if yes_no:
        mapped.update({"No": "0", "no": "0", "Yes": "1", "yes": "1"})
    ans = mapped.get(ans, ans)
    items: str | list[str] = ans.split(", ") if ", " in ans else ans
    if items[-2:] == ".0":            # on a list this compares its last two items with ".0": never true
        items = items[:-2]
    if not isinstance(items, list):
        items = [items]
    return old_flag or all(item in pred for item in items)


def evaluate_judge(pred: str, ans: str) -> bool:
    """evaluate.py's judge, which gave the paper's numbers: main.py's without the Yes/No mapping."""
    return compatibility(pred, ans, yes_no=False)


SEPARATOR = "\n----------------------------------------------------------\n"


def original_log(question: str, gold: list[str], opening: str, messages: list[dict], unexecuted: dict | None = None,
                 crash: str | None = None) -> str:
    """The log main.py wrote for one question: the question, str() of the gold list, then each message of the chat
    from the proxy's side (its content, or for a function call without content its arguments: as the model wrote
    them where they were not valid JSON, else as indented JSON, the form GPT-4 wrote), then "Ground-Truth Answer ---> " and the gold. A proxy that raised left only
    the error's text. `messages` are the trial's, the first (the question) standing for `opening`."""
    if crash is not None:
        entries = [crash]
    else:
        entries = [question, str(gold), opening]
        for m in messages[1:]:
            call = m.get("tool_call")
            if m.get("content") is not None:
                entries.append(m["content"])
            elif call is not None or (unexecuted is not None and m is messages[-1]):
                call = call or unexecuted
                arguments = call["arguments"]
                entries.append(call.get("raw") or (json.dumps(arguments, indent=2, ensure_ascii=False)
                                                   if isinstance(arguments, dict) else str(arguments)))
    return SEPARATOR.join(entries + ["Ground-Truth Answer ---> " + gold_text(gold)])


def prediction(log: str) -> str:
    """The original's prediction window: from the end of the last cell's arguments (or, with none, the last
    "Solution:") to the last TERMINATE."""
    start = log.rfind('"\n}') if '"cell": "' in log else log.rfind("Solution:")
    return log[start:log.rfind("TERMINATE")]


def evaluate_log(log: str, gold: list[str]) -> tuple[bool, bool]:
    """(completed, successful) as evaluate.py decides them."""
    completed = "TERMINATE" in log
    return completed, completed and evaluate_judge(prediction(log), gold_text(gold))


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
