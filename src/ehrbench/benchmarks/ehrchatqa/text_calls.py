"""Tool calls written as text, read as the original reads them (glee4810/EHR-ChatQA `src/utils.py`, `get_action`).

Some models answer a function-calling request with the call in a fenced block instead of a native call. The
original reads two such forms, by the model's name, and its parsers' quirks are part of the benchmark:

- a Gemini model whose reply holds "```tool_call": the first ```tool_call (or ```tool_code) block's first
  `name(...)` or `print(default_api.name(...))`, its arguments the `key="value"` pairs before the first ")" (so
  `sql_execute(query="SELECT name FROM t")` parses whole, `sql_execute(query="SELECT COUNT(*) FROM t")` parses to
  `{}`, and every value is a string); the text before the block is the reply's text. A block with no call in it
  raises, and the original asks again.
- a Llama model whose reply holds "```json": everything from the first "```json" line to the last "```" as one
  JSON object `{"name": ..., "parameters": ...}`, a call if it reads (else the reply is text); the text before the
  block is the reply's. An object without "parameters" or "name", or parameters that are not an object, raise.

Either way the call replaces whatever native calls the reply had, and goes into the conversation as a call (the
text is gone), as litellm sends the parsed message back. `ValueError` is the original's exception: ask again.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Callable

from ...trial import ToolCall

GEMINI_BLOCK = re.compile(r"```(?:tool_call|tool_code)\n(.*?)\n```", re.DOTALL)
GEMINI_CALL = re.compile(r"(?:print\(default_api\.)?(\w+)\((.*?)\)\)?")
GEMINI_ARGUMENT = re.compile(r"(\w+)=['\"]([^'\"]*)['\"]")
LLAMA_BLOCK = re.compile(r"```json\n(.+)?\n```", re.DOTALL)

Parsed = tuple[str | None, list[ToolCall]]


def gemini_text_call(text: str) -> Parsed:
    block = GEMINI_BLOCK.search(text)
    if not block:
        return text.strip(), []
    call = GEMINI_CALL.search(block.group(1).strip())
    if not call:
        raise ValueError("Invalid tool call format")
    arguments = dict(GEMINI_ARGUMENT.findall(call.group(2) or ""))
    return text[:block.start()].strip() or None, [ToolCall(call.group(1), arguments, f"call_{uuid.uuid4()}")]


def llama_text_calls(text: str) -> Parsed:
    calls, offset = [], 0
    for i, block in enumerate(LLAMA_BLOCK.finditer(text)):
        if i == 0:
            offset = block.start()
        if block.group(1) is None:
            raise ValueError("an empty ```json block")
        try:
            function = json.loads(block.group(1))
        except json.JSONDecodeError:
            continue                                   # the original prints it and reads on
        if not isinstance(function, dict) or "parameters" not in function or "name" not in function:
            raise ValueError("a ```json block that is not a call with a name and parameters")
        arguments = function["parameters"]
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        if not isinstance(arguments, dict):
            raise ValueError("a call whose parameters are not an object")
        calls.append(ToolCall(str(function["name"]), arguments, str(uuid.uuid4())))
    if not calls:
        return text, []
    return text[:offset].strip(), calls


# model-name fragment, the text that marks a written call, its parser (get_action's order: Llama, then Gemini)
PARSERS = (("llama", "```json", llama_text_calls), ("gemini", "```tool_call", gemini_text_call))


def text_call_reader(model_id: str) -> Callable[[str], Parsed | None] | None:
    """For a model the original reads written calls from (by its name, as `'gemini' in model`): text -> (its text,
    its calls) where the reply holds a written call, else None; None for every other model."""
    name = model_id.lower()
    chosen = next(((marker, parse) for fragment, marker, parse in PARSERS if fragment in name), None)
    if chosen is None:
        return None
    marker, parse = chosen
    return lambda text: parse(text) if marker in text else None
