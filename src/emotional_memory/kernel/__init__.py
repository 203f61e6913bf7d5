"""The differentiable scoring kernel: pure JAX, no pydantic, no I/O, no datetimes.

Everything here is a pure function of pytrees (:class:`MemoryColumns`,
:class:`QueryFeatures`, :class:`ScoringParams`) and can be ``jit``-ed, ``vmap``-ed
and differentiated. Time only enters as ages in seconds, computed at the boundary.
"""

from emotional_memory.kernel._compile_cache import enable_compile_cache
from emotional_memory.kernel.activation import spreading_activation_dense
from emotional_memory.kernel.columns import MemoryColumns, QueryFeatures, bucket_size, pad_columns
from emotional_memory.kernel.context import ContextInputs, context_signal, neighbour_blend
from emotional_memory.kernel.gates import adaptive_weights, apply_signal_mask, smooth_gate
from emotional_memory.kernel.lexical import LexicalInputs, bm25, lexical_signal
from emotional_memory.kernel.params import (
    CONTEXT_FIELDS,
    DECAY_FIELDS,
    GATE_FIELDS,
    LEXICAL_FIELDS,
    ContextParams,
    DecayParams,
    GateParams,
    LexicalParams,
    ScoringParams,
    pack_params,
    unpack_params,
)
from emotional_memory.kernel.plan import PlanOutput, retrieval_plan
from emotional_memory.kernel.score import (
    ScoreOutput,
    score_bank,
    score_given_semantic,
    score_with_weights,
    stable_rank,
    weighted_total,
)
from emotional_memory.kernel.signals import (
    SIGNAL_NAMES,
    affect_proximity,
    bank_cosine,
    cosine_similarity,
    effective_strength,
    momentum_alignment,
    signals,
    signals_given_semantic,
)

__all__ = [
    "CONTEXT_FIELDS",
    "DECAY_FIELDS",
    "GATE_FIELDS",
    "LEXICAL_FIELDS",
    "SIGNAL_NAMES",
    "ContextInputs",
    "ContextParams",
    "DecayParams",
    "GateParams",
    "LexicalInputs",
    "LexicalParams",
    "MemoryColumns",
    "PlanOutput",
    "QueryFeatures",
    "ScoreOutput",
    "ScoringParams",
    "adaptive_weights",
    "affect_proximity",
    "apply_signal_mask",
    "bank_cosine",
    "bm25",
    "bucket_size",
    "context_signal",
    "cosine_similarity",
    "effective_strength",
    "lexical_signal",
    "momentum_alignment",
    "neighbour_blend",
    "pack_params",
    "pad_columns",
    "retrieval_plan",
    "score_bank",
    "score_given_semantic",
    "score_with_weights",
    "signals",
    "signals_given_semantic",
    "smooth_gate",
    "spreading_activation_dense",
    "stable_rank",
    "unpack_params",
    "weighted_total",
]

# Scale (DESIGN "Scale"): chunked batch top-k and its sharded form.
from emotional_memory.kernel.chunked_topk import score_batch
from emotional_memory.kernel.sharding import (
    memory_mesh,
    score_batch_sharded,
    shard_columns,
)

__all__ += ["memory_mesh", "score_batch", "score_batch_sharded", "shard_columns"]

# Importing compiles nothing; the cache is configured before any program is compiled.
enable_compile_cache()
