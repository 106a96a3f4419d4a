"""How many tokens a conversation takes, for agents that keep their context under a cap (AgentEHR's 64,000).

A cap counted in the wrong unit either wastes the model's context or overflows it (a refused request). So the count
is the model's own where it can be had offline, and an estimate that errs high otherwise:
- `tokenizer: hf:<folder or repo id>` in the model's conf: that tokenizer's chat template over the messages and
  the tools, `apply_chat_template(..., add_generation_prompt=True)`, which is how AgentEHR's code counts for a
  vLLM-served model (a local folder, or a repo already in the Hugging Face cache: the run never downloads);
- an OpenAI model (the conf's `model` is one `bpe_openai` knows: gpt-4o, gpt-4.1, o4-mini, ...): its byte-pair
  encoding (o200k_base, cl100k_base; the tables ship inside the package) over each message's text and call, and over
  the tool schemas, plus OpenAI's 3 tokens a message and 3 for the reply;
- anything else (Gemini, the scripted model): 1.5 characters a token. Tables of times, ids and values, most of what
  an EHR agent reads, run 1.7 (compact rows) to 2.2 (pandas' padded tables) characters a token in o200k_base, and
  tokenizers that split every digit (Qwen, Gemini) take more tokens still: `hf:` counts those exactly.
"""
from __future__ import annotations

import functools
import json
import math
import re
from typing import Protocol

from ..trial import Message

CHARS_PER_TOKEN = 1.5        # the estimate: errs high for the tables EHR agents read (see above)
PER_MESSAGE = 3              # OpenAI's framing: tokens around every message, and before the reply
CHUNK = 200_000              # characters encoded at once (bpe_openai refuses a million)
O200K = re.compile(r"^(o\d|gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|chatgpt)")   # OpenAI's models on o200k_base


class TokenCounter(Protocol):
    name: str

    def count(self, messages: list[Message], tools: list[dict] | None = None) -> int: ...


def _text(m: Message) -> str:
    call = f"{m.tool_call.name}{json.dumps(m.tool_call.arguments, default=str)}" if m.tool_call else ""
    return (m.content or "") + call


class Estimate:
    """Characters over CHARS_PER_TOKEN, tools included: no tokenizer for this model."""

    name = f"estimate ({CHARS_PER_TOKEN} characters a token)"

    def count(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        chars = sum(len(_text(m)) for m in messages) + (len(json.dumps(tools)) if tools else 0)
        return math.ceil(chars / CHARS_PER_TOKEN) + PER_MESSAGE * (len(messages) + 1)


class OpenAIEncoding:
    """An OpenAI model's own byte-pair encoding (the tables ship inside bpe_openai: nothing is downloaded)."""

    def __init__(self, model: str):
        import bpe_openai

        try:
            self.encoding = bpe_openai.encoding_for_model(model)
        except bpe_openai.UnsupportedModelError:
            if not O200K.match(model):
                raise
            self.encoding = bpe_openai.get_encoding("o200k_base")     # newer than the package's list
        self.name = f"{self.encoding.name} ({model})"
        self._tokens = functools.lru_cache(maxsize=4096)(self._encode)

    def _encode(self, text: str) -> int:
        return sum(len(self.encoding.encode(text[i:i + CHUNK], disallowed_special=()))
                   for i in range(0, len(text), CHUNK))

    def count(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        total = sum(self._tokens(_text(m)) + PER_MESSAGE for m in messages) + PER_MESSAGE
        return total + (self._tokens(json.dumps(tools)) if tools else 0)


class ChatTemplate:
    """A Hugging Face tokenizer's chat template over the whole request, as the original counts for vLLM models."""

    def __init__(self, source: str):
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        except Exception as e:  # noqa: BLE001 - any failure to find it reads the same to the user
            raise ValueError(f"tokenizer hf:{source}: cannot load it offline ({type(e).__name__}: {e}); give a "
                             "local folder holding tokenizer.json and its chat template, or a repo already in the "
                             "Hugging Face cache") from None
        self.name = f"hf:{source}"

    @staticmethod
    def _dicts(messages: list[Message]) -> list[dict]:
        out = []
        for m in messages:
            d: dict = {"role": m.role, "content": m.content or ""}
            if m.tool_call:
                d["tool_calls"] = [{"type": "function", "id": m.tool_call.id, "function": {
                    "name": m.tool_call.name, "arguments": m.tool_call.arguments}}]
            if m.tool_call_id:
                d["tool_call_id"] = m.tool_call_id
            out.append(d)
        return out

    def count(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        schemas = [{"type": "function", "function": t} for t in tools] if tools else None
        ids = self.tokenizer.apply_chat_template(self._dicts(messages), tools=schemas, tokenize=True,
                                                 add_generation_prompt=True)
        return len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def token_counter(model: dict | None) -> TokenCounter:
    """The counter for a model conf: its `tokenizer` (hf:...), else its OpenAI encoding, else the estimate (one per
    distinct choice in a process: loading a tokenizer takes a while)."""
    model = model or {}
    return _counter(*(str(model.get(k) or "") for k in ("tokenizer", "provider", "server", "model")))


@functools.lru_cache(maxsize=16)
def _counter(chosen: str, provider: str, server: str, name: str) -> TokenCounter:
    model = {"tokenizer": chosen, "provider": provider, "server": server, "model": name}
    if chosen:
        kind, _, source = str(chosen).partition(":")
        if kind == "hf" and source:
            return ChatTemplate(source)
        if kind == "openai" and source:
            return OpenAIEncoding(source)
        if kind == "estimate":
            return Estimate()
        raise ValueError(f"model.tokenizer={chosen!r}: hf:<folder or repo id>, openai:<model>, or estimate")
    if model.get("provider") == "openai-compatible" and model.get("server") != "vllm" and model.get("model"):
        try:
            return OpenAIEncoding(str(model["model"]))
        except Exception:  # noqa: BLE001 - a model bpe_openai does not know: estimate
            pass
    return Estimate()
