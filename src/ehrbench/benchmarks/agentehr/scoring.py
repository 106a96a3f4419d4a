"""AgentEHR's metrics: set F1 per sample, Best@K over runs, and the interaction-error taxonomy.

F1 is the original's (src/test.py): prediction and labels as sets, compared case-insensitively by exact string;
P = |Y ∩ Y*| / |Y|, R = |Y ∩ Y*| / |Y*|; an empty or unreadable prediction scores 0. The prediction is read as
JSON (a list of strings, or of objects whose first value is the name), never with eval; the original's reader
also stopped at the first `]`, which this one does not. Best@K is the expected maximum F1 over K of N runs.
The taxonomy is the paper's (the public code has none): see `interaction_errors`.
"""
from __future__ import annotations

import ast
import difflib
import json
import math
import re


def parse_prediction(text: str | None) -> list[str]:
    """The names in a final answer: a JSON list (in a ```json fence or bare), or a Python list literal as a model
    writes one (['A', 'B'], which the original's eval read: `ast.literal_eval` reads literals only, never code),
    else nothing."""
    if not text:
        return []
    body = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    candidates = [body] + re.findall(r"\[.*\]", body, flags=re.S)
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except RecursionError:                       # a list nested past Python's limit: nothing readable
            return []
        except json.JSONDecodeError:
            try:
                value = ast.literal_eval(candidate) if len(candidate) < 100_000 else None
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
        if isinstance(value, list):
            names = [next(iter(v.values()), "") if isinstance(v, dict) else v for v in value]
            return [str(n).strip() for n in names if isinstance(n, (str, int, float)) and str(n).strip()]
    return []


def parse_original(text: str | None) -> list[str]:
    """`finish`'s answer as the original's f1_score (src/test.py) read `str(response)`: inside a ```json fence if
    there is one, the first, shortest `[...]`, its backslashes removed, read as a list (the original eval()'d it; a
    literal reader reads the same lists and runs nothing). A list whose first item is a string gives its items, one
    whose first item is a dict each dict's first value; a bare name, an empty or nested list, a list of numbers or
    text with no brackets gives nothing. Names are kept as written (the original stripped only the labels). A list
    mixing names with other values crashed the original's whole evaluation; here it reads as nothing."""
    if not text:
        return []
    fenced = re.search(r"```json\s*(.*?)\s*```", text, flags=re.S)
    body = fenced.group(1) if fenced else text
    first = re.search(r"\[(.*?)\]", body, flags=re.S)
    if first is None:
        return []
    try:
        value = ast.literal_eval(first.group(0).replace("\\", "")) if len(first.group(0)) < 100_000 else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return []
    if not isinstance(value, list) or not value:
        return []
    if isinstance(value[0], str):
        names = value
    elif isinstance(value[0], dict):
        names = [next(iter(v.values()), None) if isinstance(v, dict) else None for v in value]
    else:
        return []
    return list(names) if all(isinstance(n, str) for n in names) else []


def parse_ehrbench(text: str | None) -> list[str]:
    """ehrbench's reading (`benchmark.contract=ehrbench`): an answer that starts with a list (or a fence) is read
    as that list, whole (JSON or a Python literal, brackets inside names kept); any other answer is one name."""
    if text is None or not text.strip() or text.strip() == "None":
        return []
    if not text.strip().startswith(("[", "```")):
        return [text.strip()]
    return parse_prediction(text)


def f1(predicted: list[str], labels: list[str], strip: bool = True) -> dict[str, float]:
    """Set F1, case-insensitive; `strip=False` is the original's (labels stripped, predictions not: " Sepsis "
    misses)."""
    pred = {(p.strip() if strip else p).lower() for p in predicted if p and p.strip()}
    gold = {g.strip().lower() for g in labels if g and g.strip()}
    hit = len(pred & gold)
    if not pred or not gold or not hit:
        return {"f1": 0.0, "precision": hit / len(pred) if pred else 0.0, "recall": hit / len(gold) if gold else 0.0}
    p, r = hit / len(pred), hit / len(gold)
    return {"f1": 2 * p * r / (p + r), "precision": p, "recall": r}


def best_at_k(scores: list[float], k: int) -> float:
    """Expected max over a random k of the n runs (the original's calculate_true_best_at_k)."""
    s, n = sorted(scores), len(scores)
    k = min(k, n)
    return sum(math.comb(i - 1, k - 1) / math.comb(n, k) * s[i - 1] for i in range(k, n + 1)) if n else 0.0


ERRORS = ("no_prediction", "tool_repeat", "single_tool_loop", "multi_tool_cyclic_loop", "tool_usage_error",
          "no_candidate_tool")


def _similar(a: str, b: str) -> bool:
    """Ratcliff-Obershelp similarity above 0.95 (its cheap upper bounds first: most pairs stop there)."""
    m = difflib.SequenceMatcher(None, a, b)
    return m.real_quick_ratio() > 0.95 and m.quick_ratio() > 0.95 and m.ratio() > 0.95


def interaction_errors(calls: list[tuple[str, dict, str]], predicted: list[str]) -> dict[str, int]:
    """The paper's taxonomy over a trajectory's (tool, arguments, observation) calls, each 0 or 1:
    no prediction; tool repeat (the same tool and arguments 5 calls running); single-tool loop (the same tool 10
    calls running with arguments > 0.95 similar, Ratcliff-Obershelp); multi-tool cyclic loop (more than 15 calls
    each > 0.95 similar to an earlier call of the same tool, not all one tool); tool usage error (an unknown tool or
    bad arguments: a column or table that is not there, a malformed call); no candidate tool (no candidate search
    before answering). load_ehr, which the agent makes itself, is not counted."""
    calls = [(name, json.dumps(args, sort_keys=True, default=str), obs) for name, args, obs in calls
             if name != "load_ehr"]                           # the agent's own first step, not the model's
    out = dict.fromkeys(ERRORS, 0)
    out["no_prediction"] = int(not predicted)
    run = 1
    for prev, cur in zip(calls, calls[1:]):
        run = run + 1 if (prev[0], prev[1]) == (cur[0], cur[1]) else 1
        if run >= 5:
            out["tool_repeat"] = 1
    run = 1
    for prev, cur in zip(calls, calls[1:]):
        run = run + 1 if prev[0] == cur[0] and _similar(prev[1], cur[1]) else 1
        if run >= 10:
            out["single_tool_loop"] = 1
    similar = sum(1 for i, c in enumerate(calls)
                  if any(p[0] == c[0] and _similar(p[1], c[1]) for p in calls[:i]))
    out["multi_tool_cyclic_loop"] = int(similar > 15 and len({c[0] for c in calls}) > 1)
    usage = ("Error: Unknown tool", "Unknown tool", "Error executing tool", "Error: malformed", "Error: Column",
             "Error: Table")                              # "Unknown tool: x": the original's MCP client's wording
    out["tool_usage_error"] = int(any(o.startswith(usage) for _, _, o in calls))
    out["no_candidate_tool"] = int(bool(predicted) and not any(c[0].startswith("get_candidates_by") for c in calls))
    return out
