"""Adapters for agent frameworks.

- :mod:`emotional_memory.integrations.langchain` (extra ``langchain``):
  ``EmotionalMemoryChatHistory``, ``EmotionalMemoryRetriever``,
  ``recommended_conversation_policy``, ``store_all_messages``.
- :mod:`emotional_memory.integrations.mem0` (no extra needed):
  ``EmotionalMemoryMem0Backend``, ``messages_to_content``.

Names are imported on first access, so ``import emotional_memory.integrations`` never
imports LangChain.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emotional_memory.integrations.langchain import (
        EmotionalMemoryChatHistory,
        EmotionalMemoryRetriever,
        recommended_conversation_policy,
        store_all_messages,
    )
    from emotional_memory.integrations.mem0 import (
        EmotionalMemoryMem0Backend,
        messages_to_content,
    )

_EXPORTS: dict[str, str] = {
    "EmotionalMemoryChatHistory": "emotional_memory.integrations.langchain",
    "EmotionalMemoryRetriever": "emotional_memory.integrations.langchain",
    "recommended_conversation_policy": "emotional_memory.integrations.langchain",
    "store_all_messages": "emotional_memory.integrations.langchain",
    "EmotionalMemoryMem0Backend": "emotional_memory.integrations.mem0",
    "messages_to_content": "emotional_memory.integrations.mem0",
}

__all__ = [
    "EmotionalMemoryChatHistory",
    "EmotionalMemoryMem0Backend",
    "EmotionalMemoryRetriever",
    "messages_to_content",
    "recommended_conversation_policy",
    "store_all_messages",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError(
            f"{name} needs the 'langchain' extra: pip install 'emotional-memory-jax[langchain]'"
        ) from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
