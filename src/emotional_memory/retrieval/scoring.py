"""Signal weights and scores from the kernel (float64), for one memory or a bank."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray

from emotional_memory._bank import (
    columns_from_memories,
    embedding_dim,
    query_features,
)
from emotional_memory._params import params_from_config
from emotional_memory._precision import float64
from emotional_memory._validation import (
    weight_vector,
)
from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import (
    ScoringParams,
    apply_signal_mask,
)
from emotional_memory.kernel import adaptive_weights as kernel_adaptive_weights
from emotional_memory.kernel import signals as kernel_signals
from emotional_memory.kernel.params import unpack_params
from emotional_memory.models import Memory
from emotional_memory.mood import MoodField
from emotional_memory.retrieval._common import (
    SIGNAL_FIELDS,
    ParamsLike,
)
from emotional_memory.retrieval.config import (
    AdaptiveWeightsConfig,
    RetrievalConfig,
)
from emotional_memory.retrieval.results import (
    RetrievalBreakdown,
    RetrievalSignals,
)


def _signals_from_values(values: Sequence[float]) -> RetrievalSignals:
    return RetrievalSignals(**dict(zip(SIGNAL_FIELDS, (float(v) for v in values), strict=True)))


def breakdown_from_values(weights: Sequence[float], raw: Sequence[float]) -> RetrievalBreakdown:
    """Build a :class:`RetrievalBreakdown` from the weights and raw signals.

    Args:
        weights: the six weights, or seven with the lexical signal s7 last, or eight
            with the context signal s8 after s7.
        raw: the signal values (as many as ``weights``).

    Returns:
        The breakdown; ``total_score`` is the left-to-right sum of ``w_i * s_i``.
    """
    w = tuple(float(v) for v in weights)
    s = tuple(float(v) for v in raw)
    if len(w) != len(s) or len(w) not in (6, 7, 8):
        raise ValueError(
            f"need 6, 7 or 8 weights and as many signals, got {len(w)} and {len(s)}"
        )
    weighted = _signals_from_values(tuple(a * b for a, b in zip(w[:6], s[:6], strict=True)))
    total = weighted.total()
    if len(w) == 8:
        return RetrievalBreakdown(
            weights=_signals_from_values(w[:6]),
            raw_signals=_signals_from_values(s[:6]),
            weighted_signals=weighted,
            total_score=total + w[6] * s[6] + w[7] * s[7],
            lexical_weight=w[6],
            lexical_signal=s[6],
            context_weight=w[7],
            context_signal=s[7],
        )
    if len(w) == 7:
        return RetrievalBreakdown(
            weights=_signals_from_values(w[:6]),
            raw_signals=_signals_from_values(s[:6]),
            weighted_signals=weighted,
            total_score=total + w[6] * s[6],
            lexical_weight=w[6],
            lexical_signal=s[6],
        )
    return RetrievalBreakdown(
        weights=_signals_from_values(w),
        raw_signals=_signals_from_values(s),
        weighted_signals=weighted,
        total_score=total,
    )


def scoring_params(
    retrieval_config: RetrievalConfig,
    decay_config: DecayConfig,
    base_weights: Sequence[float] | None = None,
) -> ScoringParams:
    """Float64 :class:`ScoringParams` for these configs (optional routed base weights).

    Args:
        retrieval_config: Source of the base weights and the gate parameters.
        decay_config: Source of the recency parameters.
        base_weights: Optional (6,) override of ``retrieval_config.base_weights``.

    Returns:
        The parameters with float64 numpy leaves.
    """
    return params_from_config(retrieval_config, decay_config, base_weights=base_weights)


_weights_jit = jax.jit(kernel_adaptive_weights)
_packed_weights_jit = jax.jit(
    lambda packed, valence, arousal: kernel_adaptive_weights(
        unpack_params(packed), valence, arousal
    )
)
_signals_jit = jax.jit(kernel_signals)


def check_weights(
    precomputed_weights: Any, *, lexical: bool = False, context: bool = False
) -> np.ndarray:
    arr = np.asarray(precomputed_weights, dtype=np.float64).reshape(-1)
    if lexical and arr.shape == ((8,) if context else (7,)):
        pass
    elif arr.shape != (6,):
        raise ValueError(f"precomputed_weights must have exactly 6 elements, got {arr.size}")
    if not np.isfinite(arr).all():
        raise ValueError("precomputed_weights contains NaN or infinite values")
    return arr


def _check_query_embedding(query_embedding: Sequence[float] | None) -> None:
    if query_embedding is not None and len(query_embedding):
        arr = np.asarray(query_embedding, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError("query_embedding must be a 1-D sequence of numbers")




def adaptive_weights(
    mood: MoodField,
    base: Sequence[float],
    config: AdaptiveWeightsConfig | None = None,
) -> NDArray[np.float64]:
    """Return retrieval weights modulated by the current mood (Bower 1981).

    Negative mood raises mood congruence and affect proximity, high arousal raises
    momentum alignment, a calm mood raises semantic similarity; all as smooth gates.

    Args:
        mood: current mood (valence and arousal are used).
        base: six base weights.
        config: gate parameters (default: ``AdaptiveWeightsConfig()``).

    Returns:
        (6,) float64 array: clipped at 0 and normalised (uniform when all cancel).
    """
    base_w = weight_vector("base", base, nonneg=False)
    cfg = config if config is not None else AdaptiveWeightsConfig()
    params = params_from_config(
        RetrievalConfig(adaptive_weights_config=cfg), DecayConfig(), base_weights=base_w
    )
    with float64():
        out = _weights_jit(
            params, jnp.asarray(mood.valence, jnp.float64), jnp.asarray(mood.arousal, jnp.float64)
        )
        return np.asarray(out, dtype=np.float64)


def retrieval_breakdown(
    query_embedding: list[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    memory: Memory,
    activation_map: dict[str, float],
    now: datetime,
    decay_config: DecayConfig,
    retrieval_config: RetrievalConfig,
    precomputed_weights: NDArray[np.float64] | None = None,
) -> RetrievalBreakdown:
    """Return the full score decomposition for one memory.

    The explainable counterpart of :func:`retrieval_score`, on the same kernel path.

    Args:
        query_embedding: (D,) or None/empty (semantic signal 0).
        query_affect: affect for the proximity signal s3.
        current_mood: mood for s2 and the weight gates.
        current_momentum: momentum for s4.
        memory: the memory to score.
        activation_map: id -> spreading activation (empty in pass 1).
        now: aware datetime for recency.
        decay_config: recency parameters.
        retrieval_config: weights and gates.
        precomputed_weights: optional (6,) weights used as they are.

    Returns:
        :class:`RetrievalBreakdown` (weights, raw, weighted, total).

    Raises:
        ValueError: unequal embedding lengths, or malformed ``precomputed_weights``.
    """
    _check_query_embedding(query_embedding)
    dim = embedding_dim(query_embedding, [memory])
    cols = columns_from_memories([memory], now, dim, activation_map)
    row = jax.tree_util.tree_map(lambda x: x[0], cols)
    query = query_features(query_embedding, query_affect, current_mood, current_momentum, dim)
    params = scoring_params(retrieval_config, decay_config)
    with float64():
        if precomputed_weights is not None:
            weights = check_weights(precomputed_weights)
        else:
            weights = np.asarray(
                _weights_jit(params, jnp.float64(current_mood.valence),
                             jnp.float64(current_mood.arousal)),
                dtype=np.float64,
            )
        raw = np.asarray(_signals_jit(params, query, row), dtype=np.float64)
    return breakdown_from_values(weights.tolist(), raw.tolist())


def retrieval_score(
    query_embedding: list[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    memory: Memory,
    activation_map: dict[str, float],
    now: datetime,
    decay_config: DecayConfig,
    retrieval_config: RetrievalConfig,
    precomputed_weights: NDArray[np.float64] | None = None,
) -> float:
    """Composite retrieval score for one memory: ``retrieval_breakdown(...).total_score``.

    Args: as :func:`retrieval_breakdown`.

    Returns:
        The weighted sum of the six signals.
    """
    return retrieval_breakdown(
        query_embedding=query_embedding,
        query_affect=query_affect,
        current_mood=current_mood,
        current_momentum=current_momentum,
        memory=memory,
        activation_map=activation_map,
        now=now,
        decay_config=decay_config,
        retrieval_config=retrieval_config,
        precomputed_weights=precomputed_weights,
    ).total_score


def mood_weights(params: ParamsLike, mood: MoodField) -> NDArray[np.float64]:
    """Mood-adaptive weights from ready-made parameters (the kernel, float64).

    :func:`adaptive_weights` without building parameters from configs each call.

    Args:
        params: parameters (or their packed vector) whose ``base_weights`` and
            ``gates`` are used.
        mood: the current mood.

    Returns:
        (6,) float64 weights.
    """
    weights = _weights_jit if isinstance(params, ScoringParams) else _packed_weights_jit
    with float64():
        out = weights(params, np.float64(mood.valence), np.float64(mood.arousal))
        return np.asarray(out, dtype=np.float64)


_mask_jit = jax.jit(apply_signal_mask)


def masked_weights(weights: Sequence[float], mask: Sequence[float]) -> NDArray[np.float64]:
    """Apply the engine's ablation mask to final weights (kernel path, float64).

    Args:
        weights: (6,) normalised weights.
        mask: (6,) 1.0 for enabled signals, 0.0 for disabled ones.

    Returns:
        (6,) float64 weights: unchanged when all enabled, else renormalised (uniform
        over enabled signals when all enabled weights are 0).
    """
    with float64():
        out = _mask_jit(
            jnp.asarray(np.asarray(weights, np.float64)), jnp.asarray(np.asarray(mask, np.float64))
        )
        return np.asarray(out, dtype=np.float64)
