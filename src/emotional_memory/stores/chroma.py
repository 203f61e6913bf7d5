"""Compatibility path: see :mod:`emotional_memory.stores.vectordb.chroma`."""

from emotional_memory.stores.vectordb.chroma import (
    ChromaStore,
)

__all__ = ['ChromaStore']
