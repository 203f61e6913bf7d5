"""The sentence-transformers adapter answers an empty batch with its model's width."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest


class _Fake:
    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name

    def get_sentence_embedding_dimension(self) -> int:
        return 3

    def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
        return np.tile(np.array([[0.6, 0.8, 0.0]]), (len(texts), 1))


def test_an_empty_batch_has_the_models_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """It was (0, 0) while every other embedder answers (0, dim): stacking it with a
    non-empty batch, or a product with a (dim, k) head, failed."""
    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer = _Fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    from emotional_memory.embedders import SentenceTransformerEmbedder

    st = SentenceTransformerEmbedder("some/model")
    empty = st.embed_array([])
    assert empty.shape == (0, 3) and empty.dtype == np.float32
    assert np.vstack([empty, st.embed_array(["a"])]).shape == (1, 3)
