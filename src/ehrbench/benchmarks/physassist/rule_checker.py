"""The authors' deterministic turn checker (eval/rule_checker.py, run_eval's `--rule_based` mode): is a turn
correct by its tool use alone, no LLM?

In order: the set of tools called (control tools aside) must be the gold's; with gold tools, for each of them that
the session's tool schemas know, the agent's first call's arguments must fit that schema (required arguments
present, none undefined, JSON types, enums, nested objects and arrays; ids aside) and match the gold's first call
on every key the gold gives: the same type, strings equal, or equal once blanks are removed and case folded, or
alike enough (difflib's ratio at least 0.8 under 10 characters, else at least 0.7: the original's ROUGE-L needs the
optional `rouge` package and falls back to this ratio without it), numbers and booleans equal, lists of one length
compared item by item, objects with the same keys. The reason names the first check that failed, in the original's
words. In that mode the original scores AA = 1 or 0 by it and IIRS_turn = AC x AA.
"""
from __future__ import annotations

from difflib import SequenceMatcher

CONTROL = ("prepare_to_answer", "ask_user_for_required_parameters")     # tools that carry no work
KNOWN = ("subject_id", "hadm_id", "session_id")                        # arguments always given, never compared
TYPES = {"string": (str,), "integer": (int,), "float": (float,), "number": (int, float), "boolean": (bool,),
         "array": (list,), "object": (dict,), "null": (type(None),)}


def _fits(value, schema: dict) -> str | None:
    """Why `value` does not fit its schema (the original's _check_value_schema), None when it does."""
    if "anyOf" in schema:
        return None if any(_fits(value, sub) is None for sub in schema["anyOf"]) else \
            "error_schema: args type inconsistent"
    allowed = TYPES.get(schema["type"], ()) if "type" in schema else ()
    if allowed and not isinstance(value, allowed):
        return "error_schema: args type inconsistent"
    if "enum" in schema and value not in schema["enum"]:
        return "error_schema: args value not in enum"
    if isinstance(value, dict) and "properties" in schema:
        if set(schema.get("required", [])) - set(value):
            return "error_schema: required args missing"
        for k, v in value.items():
            if k not in schema["properties"]:
                return "error_schema: args not defined"
            if (why := _fits(v, schema["properties"][k])) is not None:
                return why
    if isinstance(value, list) and "items" in schema:
        for item in value:
            if (why := _fits(item, schema["items"])) is not None:
                return why
    return None


def _same(called, gold, schema: dict, path: str) -> str | None:
    """Why `called` does not match `gold` (the original's _compare_values), None when it does."""
    at = f" at '{path}'" if path else ""
    if type(called) is not type(gold):
        return f"error_match: value type inconsistent{at}"
    if isinstance(gold, dict):
        if set(called) != set(gold):
            return f"error_match: args keys mismatch{at}"
        props = schema.get("properties", {})
        return next((why for k in gold if (why := _same(called[k], gold[k], props.get(k, {}), f"{path}.{k}"))),
                    None)
    if isinstance(gold, list):
        if len(called) != len(gold):
            return f"error_match: array length mismatch{at}"
        return next((why for i, (c, g) in enumerate(zip(called, gold))
                     if (why := _same(c, g, schema.get("items", {}), f"{path}[{i}]"))), None)
    if isinstance(gold, str):
        if called == gold or "".join(called.split()).lower() == "".join(gold.split()).lower():
            return None
        ratio = SequenceMatcher(None, called, gold).ratio()
        if len(gold) < 10:
            return f"error_match: string similarity too low{at} (edit={ratio:.2f})" if ratio < 0.8 else None
        return f"error_match: string similarity too low{at} (rouge-l={ratio:.2f})" if ratio < 0.7 else None
    return None if called == gold else f"error_match: value mismatch{at} (pred={called!r} gold={gold!r})"


def is_correct(gold_tools: list[str], gold_args: dict, called: list[str], called_args: dict,
               tools: list[dict]) -> tuple[bool, str]:
    """(correct, "correct" or the first failure in the original's words)."""
    gold_tools = [t for t in gold_tools if t not in CONTROL]
    called = [t for t in called if t not in CONTROL]
    if set(gold_tools) != set(called):
        return False, f"error: tool name mismatch: gold={sorted(gold_tools)} pred={sorted(called)}"
    schemas = {}
    for tool in tools or []:
        function = tool.get("function", {}) if isinstance(tool, dict) else {}
        if function.get("name"):
            parameters = function.get("parameters", {})
            schemas[function["name"]] = (set(parameters.get("required", [])), parameters.get("properties", {}))
    for name in gold_tools:
        if name not in schemas:
            continue
        required, properties = schemas[name]
        missing = required - set(called_args) - set(KNOWN)
        if missing:
            return False, f"error_schema: required args missing: {sorted(missing)}"
        for key, value in called_args.items():
            if key in KNOWN:
                continue
            if key not in properties:
                return False, f"error_schema: args not defined: '{key}'"
            if (why := _fits(value, properties[key])) is not None:
                return False, why
        for key, gold in gold_args.items():
            if key in KNOWN or key not in called_args:
                continue
            if (why := _same(called_args[key], gold, properties.get(key, {}), key)) is not None:
                return False, why
    return True, "correct"
