"""API embedders for value_similarity_search (the original's text-embedding-3-large, and Gemini's), tested with the
real openai and google-genai clients against the loopback fake server: batching, retries, the content-keyed index
cache, and keys that never leak into errors."""
import pytest

from ehrbench.retrieval.embedder import GeminiEmbedder, OpenAIEmbedder, build_embedder
from ehrbench.retrieval.value_index import ValueIndex

from .fake_llm_server import FakeLLMServer, Reply

VALUES = ["aspirin", "heparin sodium", "warfarin sodium", "metoprolol tartrate", "potassium chloride"]
KEY = "sk-embed-test-secret-123"


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    s = FakeLLMServer().start()
    yield s
    s.stop()


def embedders(server):
    return {"openai": lambda: OpenAIEmbedder(base_url=server.url + "/v1", batch_size=2, initial_backoff_s=0.01),
            "gemini": lambda: GeminiEmbedder(base_url=server.url, batch_size=2, initial_backoff_s=0.01)}


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_index_built_with_an_api_embedder_finds_the_close_value_and_is_cached_by_content(server, tmp_path, provider):
    make = embedders(server)[provider]
    index = ValueIndex(tmp_path, make())
    index.add_column("mimic_iv_star", "medicationorders", "medicationname", VALUES)
    calls = len(server.requests)
    assert calls == 3                                                   # 5 values in batches of 2
    assert index.search("mimic_iv_star", "medicationorders", "medicationname", "Warfarin", k=2)[0] == "warfarin sodium"
    again = ValueIndex(tmp_path, make())
    again.add_column("mimic_iv_star", "medicationorders", "medicationname", VALUES)
    assert again.embedded_values == 0 and len(server.requests) == calls + 1   # only the query above was embedded
    assert make().name == f"{provider}:{'text-embedding-3-large' if provider == 'openai' else 'gemini-embedding-001'}"


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_rate_limits_and_server_errors_are_retried_then_fail_clearly_without_the_key(server, provider):
    model = "text-embedding-3-large" if provider == "openai" else "gemini-embedding-001"
    server.push(Reply(status=429), Reply(status=500), model=model)
    vectors = embedders(server)[provider]().encode(["aspirin"])
    assert vectors.shape[0] == 1 and abs(float((vectors ** 2).sum()) - 1.0) < 1e-5   # normalised
    server.push(*[Reply(status=503)] * 5, model=model)
    with pytest.raises(RuntimeError, match=f"{provider}:{model}: embedding failed after 5 attempt") as failure:
        embedders(server)[provider]().encode(["aspirin"])
    assert KEY not in str(failure.value)
    headers = [{k.lower(): v for k, v in r.headers.items()} for r in server.requests]
    assert all(KEY in h.get("authorization", "") + h.get("x-goog-api-key", "") for h in headers)   # the key is sent


def test_an_api_embedder_without_a_key_stops_the_run_at_start(monkeypatch):
    from ehrbench.config import DataOptions
    from ehrbench.llm.base import ConfigurationError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match=r"data.embedder.provider=openai: needs an API key in \$OPENAI_API_KEY"):
        DataOptions(embedder={"provider": "openai"})
    with pytest.raises(ConfigurationError, match=r"data.embedder.provider='bert': choose one of \['gemini', 'local', 'openai'\]"):
        DataOptions(embedder={"provider": "bert"})
    assert build_embedder({"provider": "local", "model": None}).name == "sentence-transformers/all-MiniLM-L6-v2"
