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

from emotional_memory._extras import install_hint, installed

if TYPE_CHECKING:
    # ``X as X``: explicit re-exports for type checkers (listed in __all__ only when
    # langchain-core is installed)
    from emotional_memory.integrations.langchain import (
        EmotionalMemoryChatHistory as EmotionalMemoryChatHistory,
    )
    from emotional_memory.integrations.langchain import (
        EmotionalMemoryRetriever as EmotionalMemoryRetriever,
    )
    from emotional_memory.integrations.langchain import (
        recommended_conversation_policy as recommended_conversation_policy,
    )
    from emotional_memory.integrations.langchain import (
        store_all_messages as store_all_messages,
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

_SUBMODULES = frozenset({"langchain", "mem0"})

_LANGCHAIN = frozenset({
    "EmotionalMemoryChatHistory",
    "EmotionalMemoryRetriever",
    "recommended_conversation_policy",
    "store_all_messages",
})

# As in the original: the LangChain names are listed only when langchain-core is
# installed (found without importing it), so ``from ... import *`` never fails.
__all__ = [
    "EmotionalMemoryMem0Backend",
    "messages_to_content",
]
if installed("langchain_core"):
    __all__ += sorted(_LANGCHAIN)


def __getattr__(name: str) -> Any:
    """Import the module defining ``name`` on first access (PEP 562).

    Args:
        name: an exported name.

    Returns:
        The object.

    Raises:
        ImportError: a LangChain name while langchain-core is not installed (with the
            install command).
        AttributeError: an unknown name, or the ``langchain`` submodule while
            langchain-core is not installed (as in the original, ``hasattr`` is False).
    """
    if name in _SUBMODULES:  # the original imported both with the package
        if name == "langchain" and not installed("langchain_core"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r} "
                                 f"(it needs the 'langchain' extra: {install_hint('langchain')})")
        return importlib.import_module(f"{__name__}.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        if name in _LANGCHAIN and not installed("langchain_core"):
            raise ImportError("langchain_core is not installed")
        value = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        hint = install_hint("langchain")
        raise ImportError(f"{name} needs the 'langchain' extra: {hint}") from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
