"""Multi-signal, mood-adaptive retrieval scoring: the public, seed-compatible API.

Recall is ranked by six signals (docs/behaviour.md §4) - semantic similarity, mood congruence
(Bower 1981), affect proximity, momentum alignment, recency (power-law decay) and
spreading-activation resonance (Collins & Loftus 1975) - whose weights shift with
mood. Every number here comes from the JAX kernel (``emotional_memory.kernel``),
evaluated in float64 inside a local x64 context, so explanations, training and the
runtime path share one implementation.
"""

from __future__ import annotations

from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE
from emotional_memory.retrieval._common import (
    SIGNAL_FIELDS,
    ParamsLike,
)
from emotional_memory.retrieval.config import (
    AdaptiveWeightsConfig,
    QueryAdapterConfig,
    QueryClassifierConfig,
    RelevanceCalibration,
    RetrievalConfig,
    adapter_checksum,
    check_min_relevance,
)
from emotional_memory.retrieval.plan import (
    PlanArrays,
    build_retrieval_plan,
    explain_top,
    pad_lexical,
    plan_arrays,
    plan_from_arrays,
    rank_bank,
    rank_candidates,
)
from emotional_memory.retrieval.reconsolidation import (
    affective_prediction_error,
    compute_ape,
    prediction_fields,
    reconsolidate,
    reconsolidation_fields,
    update_prediction,
)
from emotional_memory.retrieval.results import (
    PlanWeights,
    RankedMemory,
    RetrievalBreakdown,
    RetrievalExplanation,
    RetrievalPlan,
    RetrievalSignals,
)
from emotional_memory.retrieval.scoring import (
    adaptive_weights,
    breakdown_from_values,
    masked_weights,
    mood_weights,
    retrieval_breakdown,
    retrieval_score,
    scoring_params,
)

__all__ = [
    "SIGNAL_FIELDS",
    "AdaptiveWeightsConfig",
    "ParamsLike",
    "PlanArrays",
    "PlanWeights",
    "QueryAdapterConfig",
    "QueryClassifierConfig",
    "RankedMemory",
    "RelevanceCalibration",
    "RetrievalBreakdown",
    "RetrievalConfig",
    "RetrievalExplanation",
    "RetrievalPlan",
    "RetrievalSignals",
    "adapter_checksum",
    "adaptive_weights",
    "affective_prediction_error",
    "breakdown_from_values",
    "build_retrieval_plan",
    "check_min_relevance",
    "compute_ape",
    "explain_top",
    "masked_weights",
    "mood_weights",
    "pad_lexical",
    "plan_arrays",
    "plan_from_arrays",
    "prediction_fields",
    "rank_bank",
    "rank_candidates",
    "reconsolidate",
    "reconsolidation_fields",
    "retrieval_breakdown",
    "retrieval_score",
    "scoring_params",
    "update_prediction",
]
