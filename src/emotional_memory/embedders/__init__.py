"""Text embedders that turn strings into dense vectors for memory retrieval.

``MiniLMEmbedder`` (JAX all-MiniLM-L6-v2; needs ``make minilm``) and
``SentenceTransformerEmbedder`` (needs ``sentence-transformers``) are imported lazily,
on first attribute access, so importing this package never needs their optional
dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from emotional_memory.embedders.hashing import HashingEmbedder

if TYPE_CHECKING:
    from emotional_memory.embedders.minilm import MiniLMEmbedder
    from emotional_memory.embedders.sentence_transformers import SentenceTransformerEmbedder

__all__ = ["HashingEmbedder", "MiniLMEmbedder", "SentenceTransformerEmbedder"]

_LAZY = {
    "MiniLMEmbedder": "emotional_memory.embedders.minilm",
    "SentenceTransformerEmbedder": "emotional_memory.embedders.sentence_transformers",
}


def __getattr__(name: str) -> Any:
    """Import the optional embedders on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Public names, including the lazily imported ones."""
    return sorted(set(globals()) | set(__all__))
