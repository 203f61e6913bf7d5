"""The async protocols at the original library's module path.

``AsyncMemoryStore``, ``AsyncEmbedder`` and ``AsyncAppraisalEngine`` are defined in
:mod:`emotional_memory.interfaces`; this module re-exports them so code written for
the original (``from emotional_memory.interfaces_async import ...``) runs unchanged.
"""

from __future__ import annotations

from emotional_memory.interfaces import AsyncAppraisalEngine, AsyncEmbedder, AsyncMemoryStore

__all__ = ["AsyncAppraisalEngine", "AsyncEmbedder", "AsyncMemoryStore"]
