"""Skip a test that needs the real MiniLM (its extras and weights, `make minilm`)."""

from __future__ import annotations

import pytest


def require_minilm() -> None:
    """Skip the calling test unless tokenizers, safetensors and the all-MiniLM-L6-v2
    weights are installed (CI installs them; EMOTIONAL_MEMORY_NO_SKIPS fails instead)."""
    pytest.importorskip("tokenizers", reason="MiniLMEmbedder needs tokenizers (make minilm)")
    pytest.importorskip("safetensors", reason="MiniLMEmbedder needs safetensors (make minilm)")
    from emotional_memory.embedders.minilm import default_model_dir

    if default_model_dir() is None:
        pytest.skip("the all-MiniLM-L6-v2 weights are not installed (make minilm)")
