"""Adapters between sync and async components (the original's module of this name).

``SyncToAsync*`` wrap blocking components so they satisfy the async protocols (each
call runs in a worker thread); :func:`as_async` builds an
:class:`~emotional_memory.async_engine.AsyncEmotionalMemory` over a sync engine's
parts. The adapters and the private bridges the async engine uses live in
``emotional_memory._async_bridge`` and ``as_async`` in
:mod:`emotional_memory.async_engine`, so imports run one way
(``async_adapters`` -> ``async_engine`` -> ``_async_bridge``) with no circle.
"""

from __future__ import annotations

from emotional_memory._async_bridge import (
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
    bridge_appraisal,
    bridge_embedder,
    bridge_store,
)
from emotional_memory.async_engine import as_async

__all__ = [
    "SyncToAsyncAppraisalEngine",
    "SyncToAsyncEmbedder",
    "SyncToAsyncStore",
    "as_async",
    "bridge_appraisal",
    "bridge_embedder",
    "bridge_store",
]
