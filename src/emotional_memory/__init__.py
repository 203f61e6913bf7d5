"""emotional_memory: affective memory for LLM agents, scored by a differentiable JAX model.

Memories carry an affective fingerprint (core affect, momentum, mood, appraisal,
resonance links) and are recalled by six signals whose weights shift with mood.
"""

from emotional_memory.affect import MAX_PAD_DISTANCE, AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import (
    AppraisalVector,
    KeywordAppraisalEngine,
    KeywordRule,
    LLMAppraisalConfig,
    LLMAppraisalEngine,
    LLMCallable,
    StaticAppraisalEngine,
)
from emotional_memory.async_adapters import (
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
)
from emotional_memory.async_engine import AsyncEmotionalMemory, as_async
from emotional_memory.categorize import EmotionLabel, categorize_affect, label_tag
from emotional_memory.decay import (
    DecayConfig,
    compute_effective_strength,
    compute_effective_strength_batch,
)
from emotional_memory.engine import EmotionalMemory, EmotionalMemoryConfig
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

__version__ = "0.1.0"

__all__ = [
    "LOCOMO_ROUTING",
    "MAX_PAD_DISTANCE",
    "QUERY_TYPES",
    "AdaptiveWeightsConfig",
    "AffectiveMomentum",
    "AffectiveState",
    "AffectiveStateStore",
    "AppraisalEngine",
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
    "consolidation_strength",
    "hebbian_strengthen",
    "label_tag",
    "make_emotional_tag",
    "spreading_activation",
    "update_prediction",
]
