"""Token counts for context caps (`llm/tokens.py`): an OpenAI model's own encoding, a local Hugging Face tokenizer's
chat template (the original AgentEHR's count for vLLM models), and the estimate for the rest."""
from __future__ import annotations

import json

import pytest

from ehrbench.llm.tokens import PER_MESSAGE, ChatTemplate, Estimate, OpenAIEncoding, token_counter
from ehrbench.trial import Message, ToolCall

TABLE = "\n".join(f"10001234 2150-01-{d:02d} 09:{d:02d}:00 50912 {d * 1.1:.1f} mg/dL" for d in range(1, 29))
TOOLS = [{"name": "get_records_by_keyword", "description": "Search a table.",
          "parameters": {"type": "object", "properties": {"keyword": {"type": "string"}}}}]
CONVERSATION = [Message("user", "Predict the diagnoses."),
                Message("assistant", None, tool_call=ToolCall("get_records_by_keyword", {"keyword": "creat"}, "c1")),
                Message("tool", TABLE, tool_call_id="c1")]


def test_openai_models_are_counted_with_their_own_encoding():
    import bpe_openai

    counter = token_counter({"provider": "openai-compatible", "model": "gpt-4o"})
    assert isinstance(counter, OpenAIEncoding) and counter.encoding.name == "o200k_base"
    encoding = bpe_openai.get_encoding("o200k_base")
    texts = ["Predict the diagnoses.", 'get_records_by_keyword{"keyword": "creat"}', TABLE]
    expected = sum(len(encoding.encode(t)) for t in texts) + PER_MESSAGE * 4 + len(encoding.encode(json.dumps(TOOLS)))
    assert counter.count(CONVERSATION, TOOLS) == expected
    assert token_counter({"provider": "openai-compatible", "model": "o4-mini"}).encoding.name == "o200k_base"
    long = Message("tool", TABLE * 2000)                      # past bpe_openai's one-call limit: encoded in parts
    assert counter.count([long]) > 2000 * len(encoding.encode(TABLE)) * 0.99


def test_the_estimate_errs_high_for_tables_and_covers_the_rest():
    import bpe_openai

    exact = len(bpe_openai.get_encoding("o200k_base").encode(TABLE))
    assert Estimate().count([Message("tool", TABLE)]) > exact            # more than o200k counts for a table
    for model in ({"provider": "gemini", "model": "gemini-2.5-flash"},
                  {"provider": "openai-compatible", "server": "vllm", "model": "Qwen/Qwen3-32B"},
                  {"provider": "scripted"}, None):
        assert isinstance(token_counter(model), Estimate)


def test_a_local_hugging_face_tokenizer_counts_the_chat_template_with_tools(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted(set(" ".join([TABLE, "Predict the diagnoses. user assistant tool creat"]).split()))
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tokenizer.chat_template = ("{% for t in tools or [] %}tool {{ t.function.name }} {% endfor %}"
                               "{% for m in messages %}{{ m.role }} {{ m.content }} "
                               "{% for c in m.tool_calls or [] %}{{ c.function.name }} {% endfor %}{% endfor %}"
                               "{% if add_generation_prompt %}assistant{% endif %}")
    tokenizer.save_pretrained(tmp_path / "tok")
    counter = token_counter({"tokenizer": f"hf:{tmp_path / 'tok'}", "provider": "openai-compatible",
                             "server": "vllm", "model": "Qwen/Qwen3-32B"})
    assert isinstance(counter, ChatTemplate)
    rendered = ("tool get_records_by_keyword user Predict the diagnoses. assistant  get_records_by_keyword "
                f"tool {TABLE} assistant")
    assert counter.count(CONVERSATION, TOOLS) == len(tokenizer(rendered)["input_ids"])
    assert counter.count(CONVERSATION, TOOLS) > counter.count(CONVERSATION[:1], TOOLS)


def test_a_tokenizer_that_cannot_be_had_offline_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="cannot load it offline.*local folder"):
        token_counter({"tokenizer": f"hf:{tmp_path / 'missing'}"})
    with pytest.raises(ValueError, match="hf:<folder or repo id>, openai:<model>, or estimate"):
        token_counter({"tokenizer": "sentencepiece"})
