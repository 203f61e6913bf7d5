"""emotional_memory: affective memory for LLM agents, scored by a differentiable JAX model.

Memories carry an affective fingerprint (core affect, momentum, mood, appraisal,
resonance links) and are recalled by six signals whose weights shift with mood.

Names are imported lazily (PEP 562): ``import emotional_memory`` loads no JAX, no
pydantic and nothing optional; the first attribute access imports the module that
defines the name.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emotional_memory.affect import MAX_PAD_DISTANCE, AffectiveMomentum, CoreAffect
    from emotional_memory.appraisal import (
        AppraisalVector,
        GenericAppraisalVector,
        KeywordAppraisalEngine,
        KeywordRule,
        LLMCallable,
        StaticAppraisalEngine,
    )
    from emotional_memory.appraisal_llm import LLMAppraisalConfig, LLMAppraisalEngine
    from emotional_memory.appraisal_schema import (
        DIRECT_VAD_SCHEMA,
        SCHERER_CPM_SCHEMA,
        AppraisalDimension,
        AppraisalSchema,
    )
    from emotional_memory.async_adapters import (
        SyncToAsyncAppraisalEngine,
        SyncToAsyncEmbedder,
        SyncToAsyncStore,
        as_async,
    )
    from emotional_memory.async_engine import AsyncEmotionalMemory
    from emotional_memory.categorize import EmotionLabel, categorize_affect, label_tag
    from emotional_memory.decay import (
        DecayConfig,
        compute_effective_strength,
        compute_effective_strength_batch,
    )
    from emotional_memory.embedders.sentence_transformers import SentenceTransformerEmbedder
    from emotional_memory.engine import EmotionalMemory, EmotionalMemoryConfig

    # The original's optional names (``X as X``: explicit re-exports; see _OPTIONAL).
    from emotional_memory.integrations.langchain import (
        EmotionalMemoryChatHistory as EmotionalMemoryChatHistory,
    )
    from emotional_memory.integrations.langchain import (
        recommended_conversation_policy as recommended_conversation_policy,
    )
    from emotional_memory.integrations.langchain import store_all_messages as store_all_messages
    from emotional_memory.integrations.mem0 import (
        EmotionalMemoryMem0Backend as EmotionalMemoryMem0Backend,
    )
    from emotional_memory.integrations.mem0 import messages_to_content as messages_to_content
    from emotional_memory.interfaces import (
        AffectiveStateStore,
        AppraisalEngine,
        AsyncAppraisalEngine,
        AsyncEmbedder,
        AsyncMemoryStore,
        Embedder,
        MemoryStore,
        SequentialEmbedder,
    )
    from emotional_memory.logging_config import configure_logging
    from emotional_memory.models import (
        EmotionalTag,
        Memory,
        ResonanceLink,
        consolidation_strength,
        make_emotional_tag,
    )
    from emotional_memory.mood import MoodDecayConfig, MoodField
    from emotional_memory.query_classifier import (
        LOCOMO_ROUTING,
        QUERY_TYPES,
        HeuristicQueryClassifier,
        LLMQueryClassifier,
        QueryClassifier,
    )
    from emotional_memory.resonance import ResonanceConfig, hebbian_strengthen, spreading_activation
    from emotional_memory.retrieval import (
        AdaptiveWeightsConfig,
        QueryClassifierConfig,
        RetrievalBreakdown,
        RetrievalConfig,
        RetrievalExplanation,
        RetrievalSignals,
        compute_ape,
        update_prediction,
    )
    from emotional_memory.state import AffectiveState
    from emotional_memory.state_stores import InMemoryAffectiveStateStore, SQLiteAffectiveStateStore
    from emotional_memory.stores import InMemoryStore, SQLiteStore
    from emotional_memory.stores.redis.state import (
        RedisAffectiveStateStore as RedisAffectiveStateStore,
    )
    from emotional_memory.stores.vectordb.chroma import ChromaStore as ChromaStore
    from emotional_memory.stores.vectordb.qdrant import QdrantStore as QdrantStore

_EXPORTS: dict[str, str] = {
    "MAX_PAD_DISTANCE": "emotional_memory.affect",
    "AffectiveMomentum": "emotional_memory.affect",
    "CoreAffect": "emotional_memory.affect",
    "AppraisalVector": "emotional_memory.appraisal",
    "GenericAppraisalVector": "emotional_memory.appraisal",
    "DIRECT_VAD_SCHEMA": "emotional_memory.appraisal_schema",
    "SCHERER_CPM_SCHEMA": "emotional_memory.appraisal_schema",
    "AppraisalDimension": "emotional_memory.appraisal_schema",
    "AppraisalSchema": "emotional_memory.appraisal_schema",
    "KeywordAppraisalEngine": "emotional_memory.appraisal",
    "KeywordRule": "emotional_memory.appraisal",
    "LLMAppraisalConfig": "emotional_memory.appraisal_llm",
    "LLMAppraisalEngine": "emotional_memory.appraisal_llm",
    "LLMCallable": "emotional_memory.appraisal",
    "StaticAppraisalEngine": "emotional_memory.appraisal",
    "SyncToAsyncAppraisalEngine": "emotional_memory.async_adapters",
    "SyncToAsyncEmbedder": "emotional_memory.async_adapters",
    "SyncToAsyncStore": "emotional_memory.async_adapters",
    "AsyncEmotionalMemory": "emotional_memory.async_engine",
    "as_async": "emotional_memory.async_adapters",
    "EmotionLabel": "emotional_memory.categorize",
    "categorize_affect": "emotional_memory.categorize",
    "label_tag": "emotional_memory.categorize",
    "DecayConfig": "emotional_memory.decay",
    "compute_effective_strength": "emotional_memory.decay",
    "compute_effective_strength_batch": "emotional_memory.decay",
    "EmotionalMemory": "emotional_memory.engine",
    "EmotionalMemoryConfig": "emotional_memory.engine",
    "AffectiveStateStore": "emotional_memory.interfaces",
    "AppraisalEngine": "emotional_memory.interfaces",
    "AsyncAppraisalEngine": "emotional_memory.interfaces",
    "AsyncEmbedder": "emotional_memory.interfaces",
    "AsyncMemoryStore": "emotional_memory.interfaces",
    "Embedder": "emotional_memory.interfaces",
    "MemoryStore": "emotional_memory.interfaces",
    "SequentialEmbedder": "emotional_memory.interfaces",
    "configure_logging": "emotional_memory.logging_config",
    "EmotionalTag": "emotional_memory.models",
    "Memory": "emotional_memory.models",
    "ResonanceLink": "emotional_memory.models",
    "consolidation_strength": "emotional_memory.models",
    "make_emotional_tag": "emotional_memory.models",
    "MoodDecayConfig": "emotional_memory.mood",
    "MoodField": "emotional_memory.mood",
    "LOCOMO_ROUTING": "emotional_memory.query_classifier",
    "QUERY_TYPES": "emotional_memory.query_classifier",
    "HeuristicQueryClassifier": "emotional_memory.query_classifier",
    "LLMQueryClassifier": "emotional_memory.query_classifier",
    "QueryClassifier": "emotional_memory.query_classifier",
    "ResonanceConfig": "emotional_memory.resonance",
    "hebbian_strengthen": "emotional_memory.resonance",
    "spreading_activation": "emotional_memory.resonance",
    "AdaptiveWeightsConfig": "emotional_memory.retrieval",
    "QueryClassifierConfig": "emotional_memory.retrieval",
    "RetrievalBreakdown": "emotional_memory.retrieval",
    "RetrievalConfig": "emotional_memory.retrieval",
    "RetrievalExplanation": "emotional_memory.retrieval",
    "RetrievalSignals": "emotional_memory.retrieval",
    "compute_ape": "emotional_memory.retrieval",
    "update_prediction": "emotional_memory.retrieval",
    "AffectiveState": "emotional_memory.state",
    "InMemoryAffectiveStateStore": "emotional_memory.state_stores",
    "SQLiteAffectiveStateStore": "emotional_memory.state_stores",
    "InMemoryStore": "emotional_memory.stores",
    "SQLiteStore": "emotional_memory.stores",
    "SentenceTransformerEmbedder": "emotional_memory.embedders.sentence_transformers",
}
"""Public name -> defining module, imported on first access."""

_OPTIONAL: dict[str, tuple[str, str, str | None]] = {
    "QdrantStore": ("qdrant", "emotional_memory.stores.vectordb.qdrant", "qdrant_client"),
    "ChromaStore": ("chroma", "emotional_memory.stores.vectordb.chroma", "chromadb"),
    "RedisAffectiveStateStore": ("redis", "emotional_memory.stores.redis.state", "redis"),
    "EmotionalMemoryMem0Backend": ("mem0", "emotional_memory.integrations.mem0", None),
    "messages_to_content": ("mem0", "emotional_memory.integrations.mem0", None),
    "EmotionalMemoryChatHistory": (
        "langchain", "emotional_memory.integrations.langchain", "langchain_core"
    ),
    "recommended_conversation_policy": (
        "langchain", "emotional_memory.integrations.langchain", "langchain_core"
    ),
    "store_all_messages": (
        "langchain", "emotional_memory.integrations.langchain", "langchain_core"
    ),
}
"""The original's optional names: name -> (extra, defining module, package the extra
installs). As in the original, ``__all__`` lists those whose package is installed
(found without importing it: importing this package stays cheap) and ``dir()`` all of
them; accessing one whose package is missing raises ``ImportError`` with the install
command."""

__version__ = "0.1.0"

__all__ = [
    "DIRECT_VAD_SCHEMA",
    "LOCOMO_ROUTING",
    "MAX_PAD_DISTANCE",
    "QUERY_TYPES",
    "SCHERER_CPM_SCHEMA",
    "AdaptiveWeightsConfig",
    "AffectiveMomentum",
    "AffectiveState",
    "AffectiveStateStore",
    "AppraisalDimension",
    "AppraisalEngine",
    "AppraisalSchema",
    "AppraisalVector",
    "AsyncAppraisalEngine",
    "AsyncEmbedder",
    "AsyncEmotionalMemory",
    "AsyncMemoryStore",
    "CoreAffect",
    "DecayConfig",
    "Embedder",
    "EmotionLabel",
    "EmotionalMemory",
    "EmotionalMemoryConfig",
    "EmotionalTag",
    "GenericAppraisalVector",
    "HeuristicQueryClassifier",
    "InMemoryAffectiveStateStore",
    "InMemoryStore",
    "KeywordAppraisalEngine",
    "KeywordRule",
    "LLMAppraisalConfig",
    "LLMAppraisalEngine",
    "LLMCallable",
    "LLMQueryClassifier",
    "Memory",
    "MemoryStore",
    "MoodDecayConfig",
    "MoodField",
    "QueryClassifier",
    "QueryClassifierConfig",
    "ResonanceConfig",
    "ResonanceLink",
    "RetrievalBreakdown",
    "RetrievalConfig",
    "RetrievalExplanation",
    "RetrievalSignals",
    "SQLiteAffectiveStateStore",
    "SQLiteStore",
    "SentenceTransformerEmbedder",
    "SequentialEmbedder",
    "StaticAppraisalEngine",
    "SyncToAsyncAppraisalEngine",
    "SyncToAsyncEmbedder",
    "SyncToAsyncStore",
    "__version__",
    "as_async",
    "categorize_affect",
    "compute_ape",
    "compute_effective_strength",
    "compute_effective_strength_batch",
    "configure_logging",
    "consolidation_strength",
    "hebbian_strengthen",
    "label_tag",
    "make_emotional_tag",
    "spreading_activation",
    "update_prediction",
]


def _installed(package: str) -> bool:
    """``emotional_memory._extras.installed``, here so that importing the package (or
    only its kernel) loads no other module of it."""
    if package in sys.modules:
        return sys.modules[package] is not None
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


__all__ += sorted(
    name for name, (_, _, package) in _OPTIONAL.items() if package is None or _installed(package)
)


def __getattr__(name: str) -> Any:
    """Import the module defining ``name`` on first access (PEP 562).

    Args:
        name: a public name of :data:`__all__`.

    Returns:
        The object.

    Raises:
        AttributeError: if ``name`` is not exported.
        ImportError: an optional name whose extra is not installed (the message has
            the install command).
    """
    if name in _OPTIONAL:
        extra, defined_in, package = _OPTIONAL[name]
        if package is not None and not _installed(package):
            from emotional_memory._extras import install_hint

            raise ImportError(f"{name!r} needs the {extra!r} extra: {install_hint(extra)}")
        value = getattr(importlib.import_module(defined_in), name)
        globals()[name] = value
        return value
    module = _EXPORTS.get(name)
    if module is None:
        # a subpackage reached as an attribute (``emotional_memory.stores``)
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'emotional_memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_OPTIONAL))
