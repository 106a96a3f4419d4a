"""The real openai and google-genai clients against the loopback fake server: parsing, retries, faults."""
import asyncio

import pytest

from ehrbench.llm.base import ChatRequest, ConfigurationError
from ehrbench.llm.gemini import GeminiModel
from ehrbench.llm.openai_compatible import OpenAICompatibleModel
from ehrbench.trial import InfrastructureError, Message, ToolCall

from .conftest import FAST, ROOT
from .fake_llm_server import Reply

TOOLS = [{"name": "sql_execute", "description": "run SQL",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}]
CONVERSATION = [Message("user", "How many patients?"),
                Message("assistant", tool_call=ToolCall("sql_execute", {"query": "SELECT COUNT(*) FROM d"}, "c1")),
                Message("tool", "[(100,)]", tool_call_id="c1")]


def run(coro):
    return asyncio.run(coro)


def test_tool_call_and_usage_are_parsed_and_one_call_per_step_is_requested(model_factory, server):
    server.push(Reply(tool="sql_execute", args={"query": "SELECT 1"}, usage=(120, 7)))
    response = run(model_factory().complete(ChatRequest(CONVERSATION, system="sys", tools=TOOLS, temperature=0.0)))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("sql_execute", {"query": "SELECT 1"})]
    assert (response.usage.input_tokens, response.usage.output_tokens, response.malformed) == (120, 7, None)
    body = server.requests[-1].body
    if model_factory.provider == "openai":
        assert body["parallel_tool_calls"] is False and body["temperature"] == 0.0
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
        assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "name": "sql_execute", "content": "[(100,)]"}
    else:
        assert [c.get("role") for c in body["contents"]] == ["user", "model", None]   # as litellm sends it
        assert body["contents"][2]["parts"][0]["functionResponse"] == {"name": "sql_execute",
                                                                      "response": {"content": "[(100,)]"}}
        assert body["systemInstruction"]["parts"][0]["text"] == "sys"


def test_429_then_success_is_retried_and_counted_once(model_factory, server):
    server.push(Reply(status=429), Reply(text="Hello"))
    model = model_factory()
    response = run(model.complete(ChatRequest([Message("user", "hi")])))
    assert response.text == "Hello"
    assert (model.attempts, model.calls, len(server.requests)) == (2, 1, 2)


def test_persistent_500_is_an_infrastructure_error(model_factory, server):
    server.push(*[Reply(status=500)] * 3)
    model = model_factory()
    with pytest.raises(InfrastructureError) as err:
        run(model.complete(ChatRequest([Message("user", "hi")])))
    assert err.value.source == "model" and "failed 3 times" in str(err.value)
    assert (model.attempts, model.calls) == (3, 0)


def test_timeout_is_retried(model_factory, server):
    server.push(Reply(text="late", delay_s=2.0), Reply(text="on time"))
    model = model_factory(timeout_s=0.5)
    assert run(model.complete(ChatRequest([Message("user", "hi")]))).text == "on time"
    assert model.attempts == 2


def test_malformed_tool_arguments_come_back_as_malformed(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server.push(Reply(tool="sql_execute", raw_args='{"query": "SELECT 1"'))  # truncated JSON
    response = run(OpenAICompatibleModel("gpt-4o", base_url=server.url + "/v1", retry=FAST)
                   .complete(ChatRequest([Message("user", "hi")], tools=TOOLS)))
    assert response.tool_calls[0].name == "sql_execute" and response.tool_calls[0].arguments == {}
    assert response.malformed.startswith("tool call arguments are not valid JSON")


def test_missing_keys_stop_at_start_naming_the_variable(monkeypatch):
    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigurationError, match="set GEMINI_API_KEY"):
        GeminiModel("gemini-2.5-flash")
    with pytest.raises(ConfigurationError, match="set OPENAI_API_KEY"):
        OpenAICompatibleModel("gpt-4o")


def test_response_cache_reuses_identical_requests_only(server, monkeypatch, tmp_path):
    from ehrbench.llm.registry import build_model

    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    cfg = {"provider": "gemini", "model": "cached-llm", "base_url": server.url, "cache_dir": str(tmp_path),
           "retry": {"max_attempts": 2, "initial_backoff_s": 0.01}}
    server.push(Reply(text="first"), Reply(text="second"), model="cached-llm")
    model = build_model(cfg)
    ask = lambda text, seed: run(model.complete(ChatRequest([Message("user", text)], seed=seed)))  # noqa: E731
    assert ask("hi", 1).text == "first"
    assert ask("hi", 1).text == "first"          # from the cache: no request sent
    assert ask("hi", 2).text == "second"         # another seed is another request
    assert len(server.requests_for("cached-llm")) == 2 and model.hits == 1
    later = [Message("user", "hi", t=3.5, dt=0.7), Message("assistant", "first", t=4.2, dt=1.1),
             Message("user", "and?")]
    server.push(Reply(text="third"), model="cached-llm")
    assert run(model.complete(ChatRequest(later, seed=1))).text == "third"
    for m in later:                              # the same conversation made at other times: a re-run's request
        m.t, m.dt = m.t + 60, m.dt * 2
    assert run(model.complete(ChatRequest(later, seed=1))).text == "third"
    assert len(server.requests_for("cached-llm")) == 3 and model.hits == 2


def test_bad_request_is_refused_without_retries_and_marked_as_the_requests_own_doing(model_factory, server):
    """HTTP 400 (a context overflow, a malformed conversation): not retried, marked agent_caused, so an agent's turn
    is scored (FIDELITY rule 4) while a user's or judge's call is re-run."""
    overflow = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."
    server.push(Reply(status=400, message=overflow), Reply(text="never sent"))
    model = model_factory()
    with pytest.raises(InfrastructureError, match="400") as refused:
        run(model.complete(ChatRequest([Message("user", "hi")])))
    assert model.attempts == 1 and refused.value.agent_caused


def test_a_bad_request_about_anything_else_is_the_run_s_not_the_agent_s(model_factory, server):
    """A 400 for a bad key or a parameter the provider does not take: not retried, and never scored as the agent's."""
    server.push(Reply(status=400, message="API key not valid. Please pass a valid API key."), Reply(text="never"))
    model = model_factory()
    with pytest.raises(InfrastructureError, match="400") as refused:
        run(model.complete(ChatRequest([Message("user", "hi")])))
    assert model.attempts == 1 and not refused.value.agent_caused


def test_an_unauthorised_request_is_not_the_agent_s_doing(model_factory, server):
    server.push(Reply(status=401), Reply(text="never sent"))
    with pytest.raises(InfrastructureError, match="401") as unauthorised:
        run(model_factory().complete(ChatRequest([Message("user", "hi")])))
    assert not unauthorised.value.agent_caused


def test_text_sent_beside_a_tool_call_is_kept_by_both_clients(model_factory, server):
    """The original keeps it (its validator shows it); only the user never sees it."""
    server.push(Reply(text="Let me check the tables.", tool="table_search", args={"tool_input": ""}))
    response = run(model_factory().complete(ChatRequest(CONVERSATION, tools=TOOLS)))
    assert response.text == "Let me check the tables." and response.tool_calls[0].name == "table_search"


def test_structured_output_is_requested_in_each_protocol(model_factory, server):
    from ehrbench.llm.base import OutputSchema

    server.push(Reply(text='{"reflection": "r", "new_response": "n"}'))
    schema = OutputSchema("ReflectionOutputFormat", ("reflection", "new_response"))
    run(model_factory().complete(ChatRequest(CONVERSATION[:1], response_schema=schema)))
    body = server.requests[-1].body
    if model_factory.provider == "openai":
        assert body["response_format"]["json_schema"]["schema"]["required"] == ["reflection", "new_response"]
    else:
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        schema = body["generationConfig"]["responseSchema"]            # as litellm sends it (EHR-ChatQA's twin)
        order = schema.get("propertyOrdering", schema.get("property_ordering"))    # the API reads either spelling
        assert schema["required"] == order == ["reflection", "new_response"]


MODEL_CONFS = sorted(p for p in (ROOT / "conf" / "model").glob("*.yaml") if p.stem != "scripted")


@pytest.mark.parametrize("path", MODEL_CONFS, ids=lambda p: p.stem)
def test_every_model_conf_starts_and_answers_with_its_provider_s_quirks(path, server, monkeypatch):
    """Each conf/model choice (the papers' models and judges) is built from its YAML as a run builds it and makes
    one call against the fake server: the model id it names is the one sent, a model that rejects `temperature`
    gets none, the request's own parameters (a benchmark's table: reasoning effort, thinking budget, provider
    switches) are sent as asked, a conf holds none of them, and its price is read."""
    import yaml

    from ehrbench.llm.registry import build_model, price_of

    cfg = yaml.safe_load(path.read_text())
    gemini = cfg["provider"] == "gemini"
    cfg["base_url"] = server.url if gemini else server.url + "/v1"
    cfg["retry"] = {"max_attempts": 2, "initial_backoff_s": 0.01, "max_backoff_s": 0.02}
    monkeypatch.setenv("GEMINI_API_KEY" if gemini else cfg.get("api_key_env", "OPENAI_API_KEY"), "test-key")
    server.push(Reply(text="ok"))
    assert not {"reasoning_effort", "thinking_budget", "extra_body", "top_p", "seed"} & set(cfg)   # the benchmark's
    asked = ChatRequest(CONVERSATION, system="sys", temperature=0.0, max_tokens=64, max_tokens_name="max_tokens",
                        reasoning_effort=None if gemini else "low", thinking_budget=128 if gemini else None,
                        extra_body=None if gemini else {"chat_template_kwargs": {"enable_thinking": False}})
    response = run(build_model(cfg).complete(asked))
    assert response.text == "ok"
    assert price_of(cfg).output > 0 or cfg.get("server") == "vllm"          # self-hosted: the user's own figure
    seen = server.requests[-1]
    if gemini:
        assert f"models/{cfg['model']}:" in seen.path
        config = seen.body["generationConfig"]
        thinking = config["thinkingConfig"]
        assert thinking.get("thinkingBudget", thinking.get("thinking_budget")) == 128     # the API reads either
        assert config["maxOutputTokens"] == 64
    else:
        assert seen.body["model"] == cfg["model"]
        takes = cfg.get("supports_temperature", True)
        assert ("temperature" in seen.body) == takes
        assert seen.body.get("max_tokens" if takes else "max_completion_tokens") == 64   # reasoning: its only name
        assert seen.body["reasoning_effort"] == "low"
        assert seen.body["chat_template_kwargs"] == {"enable_thinking": False}          # extra_body, merged


def test_the_legacy_functions_shape_goes_out_and_comes_back_as_ehragents_autogen_sends_it(server, monkeypatch):
    """`api="functions"` (EHRAgent's chatbot, pyautogen 0.2.0): the tools go as `functions`, an earlier call as the
    assistant's `function_call` and its result as a `function` message with the function's name; the model's
    `function_call` is read back as the turn's call."""
    from ehrbench.llm.openai_compatible import OpenAICompatibleModel
    from ehrbench.trial import Message, ToolCall

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    server.push(Reply(tool="python", args={"cell": "answer = 2"}))
    history = [Message("user", "q"), Message("assistant", None, tool_call=ToolCall("python", {"cell": "x = 1"}, "c1")),
               Message("tool", "done", tool_call_id="c1")]
    tool = {"name": "python", "description": "run a cell", "parameters": {"type": "object", "properties": {}}}
    response = run(OpenAICompatibleModel("gpt-4o", base_url=server.url + "/v1", retry=FAST).complete(
        ChatRequest(history, tools=[tool], api="functions")))
    body = server.requests[-1].body
    assert body["functions"] == [tool] and "tools" not in body and "parallel_tool_calls" not in body
    assert body["messages"][1] == {"role": "assistant", "content": None,
                                   "function_call": {"name": "python", "arguments": '{"cell": "x = 1"}'}}
    assert body["messages"][2] == {"role": "function", "name": "python", "content": "done"}
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("python", {"cell": "answer = 2"})]
