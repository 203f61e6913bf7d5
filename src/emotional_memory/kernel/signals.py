"""The six retrieval signals for one memory, gradient-safe at every branch.

Each branch of docs/behaviour.md §4 (missing or zero-norm embeddings, NaNs, zero
velocity, ``max(0, .)``, ``sqrt`` at 0, the age floor, the arousal floor) uses the
double-``where`` pattern: the value matches the contract and the gradient stays finite.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Float

from emotional_memory.kernel._types import Array
from emotional_memory.kernel.columns import MemoryColumns, QueryFeatures
from emotional_memory.kernel.params import ScoringParams

SIGNAL_NAMES: tuple[str, ...] = (
    "semantic_similarity",
    "mood_congruence",
    "affect_proximity",
    "momentum_alignment",
    "recency",
    "resonance",
)

MOMENTUM_EPS = 1e-12
Scalar = Float[Array, ""]


def _safe_norm(x: Float[Array, " K"]) -> tuple[Scalar, Scalar]:
    """Return ``(norm, ok)`` where ``ok`` says the norm is > 0; grad finite at 0."""
    sq = jnp.sum(x * x)
    ok = sq > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 1.0)), 0.0), ok


def _sum3(x: Float[Array, 3]) -> Scalar:
    """``x[0] + x[1] + x[2]``, left to right: what a 3-element reduction sums, written
    as element-wise adds so XLA fuses it with its neighbours (one loop, not one
    reduction thunk per signal)."""
    return (x[0] + x[1]) + x[2]


def _safe_norm3(x: Float[Array, 3]) -> tuple[Scalar, Scalar]:
    """:func:`_safe_norm` of a PAD vector (:func:`_sum3` of the squares)."""
    sq = _sum3(x * x)
    ok = sq > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 1.0)), 0.0), ok


def cosine_similarity(a: Float[Array, " D"], b: Float[Array, " D"]) -> Scalar:
    """Cosine of two vectors; 0 when either has a NaN/inf or zero norm (docs/behaviour.md §4, s1).

    Args:
        a, b: (D,) vectors.

    Returns:
        Scalar cosine in the dtype of the inputs.
    """
    # NaN (docs/behaviour.md §4, s1) and, by extension, +-inf make a vector unusable: cosine 0.
    a_nan = jnp.any(~jnp.isfinite(a))
    b_nan = jnp.any(~jnp.isfinite(b))
    a_safe = jnp.where(a_nan, 0.0, a)
    b_safe = jnp.where(b_nan, 0.0, b)
    na, a_ok = _safe_norm(a_safe)
    nb, b_ok = _safe_norm(b_safe)
    ok = a_ok & b_ok & ~a_nan & ~b_nan
    denom = jnp.where(ok, na * nb, 1.0)
    return jnp.where(ok, jnp.dot(a_safe, b_safe) / denom, 0.0)


def affect_proximity(
    a: Float[Array, 3], b: Float[Array, 3], distance_scale: Scalar
) -> Scalar:
    """``max(0, 1 - |a - b| / distance_scale)`` over PAD points (docs/behaviour.md §4, s2, s3).

    Args:
        a: (3,) PAD point.
        b: (3,) PAD point.
        distance_scale: () normaliser (sqrt 6 by default).

    Returns:
        Scalar proximity in [0, 1] (gradient-safe at ``a == b``).
    """
    dist, _ = _safe_norm3(a - b)
    return jnp.maximum(0.0, 1.0 - dist / distance_scale)


def momentum_alignment(v_now: Float[Array, 3], v_tag: Float[Array, 3]) -> Scalar:
    """``(cos(v_now, v_tag) + 1) / 2``; 0.5 if either speed is < 1e-12 (docs/behaviour.md §4, s4).

    Args:
        v_now: (3,) current momentum velocity.
        v_tag: (3,) velocity stored in the memory's tag.

    Returns:
        Scalar alignment in [0, 1].
    """
    n_now, _ = _safe_norm3(v_now)
    n_tag, _ = _safe_norm3(v_tag)
    ok = (n_now >= MOMENTUM_EPS) & (n_tag >= MOMENTUM_EPS)
    denom = jnp.where(ok, n_now * n_tag, 1.0)
    cos = _sum3(v_now * v_tag) / denom
    return jnp.where(ok, (cos + 1.0) / 2.0, 0.5)


def effective_strength(
    params: ScoringParams,
    age_seconds: Scalar,
    arousal: Scalar,
    consolidation: Scalar,
    retrieval_count: Scalar,
) -> Scalar:
    """Power-law forgetting modulated by arousal and rehearsal (docs/behaviour.md §3, s5).

    Args:
        params: uses ``decay`` (base_decay, arousal_modulation, retrieval_boost,
            floor_arousal_threshold, floor_value, min_seconds, power).
        age_seconds: seconds since encoding (may be < min_seconds or negative).
        arousal: the tag's core-affect arousal.
        consolidation: consolidation strength in [0, 1].
        retrieval_count: times retrieved.

    Returns:
        Scalar strength in [0, consolidation].
    """
    dtype = jnp.result_type(age_seconds)
    d = params.decay
    base_decay, modulation, boost, floor_threshold, floor_value, min_seconds, power = (
        jnp.asarray(x, dtype)
        for x in (d.base_decay, d.arousal_modulation, d.retrieval_boost,
                  d.floor_arousal_threshold, d.floor_value, d.min_seconds, d.power)
    )
    elapsed = jnp.maximum(age_seconds, min_seconds)
    rate = jnp.maximum(
        0.0, base_decay * (1.0 - modulation * arousal) / (1.0 + boost * retrieval_count)
    )
    positive = elapsed > 0
    # elapsed <= 0 only happens with min_seconds <= 0; the power law then diverges
    # and the clip below would return the consolidation strength anyway. A zero
    # consolidation is 0 at any age: its power term may overflow to inf (an age
    # below 1 s, a steep law) and 0 * inf is NaN, so it is taken at age 1.
    safe_elapsed = jnp.where(positive & (consolidation > 0), elapsed, 1.0)
    decayed = jnp.where(positive, consolidation * safe_elapsed ** (-rate * power), consolidation)
    strength = jnp.clip(decayed, 0.0, consolidation)
    floored = jnp.maximum(strength, jnp.minimum(floor_value, consolidation))
    return jnp.where(arousal >= floor_threshold, floored, strength)


def signals(
    params: ScoringParams, query: QueryFeatures, memory: MemoryColumns
) -> Float[Array, 6]:
    """The six (calibrated) signals of one memory, in :data:`SIGNAL_NAMES` order.

    Args:
        params: scoring parameters.
        query: unbatched query features.
        memory: unbatched columns of one memory (leaves without the N axis).

    Returns:
        (6,) signals; with default calibration exactly the raw signals s1..s6.
    """
    semantic = cosine_similarity(query.embedding, memory.embedding)
    return signals_given_semantic(params, query, memory, semantic)


def signals_given_semantic(
    params: ScoringParams, query: QueryFeatures, memory: MemoryColumns, semantic: Scalar
) -> Float[Array, 6]:
    """Like :func:`signals`, with the semantic similarity s1 supplied.

    Bank scoring computes s1 for all rows as one matrix product and vmaps this
    function for the five affective signals.

    Args:
        params: scoring parameters.
        query: unbatched query features (its embedding is not used).
        memory: unbatched columns of one memory.
        semantic: s1 for this memory.

    Returns:
        (6,) calibrated signals.
    """
    dtype = jnp.result_type(query.affect)
    scale = jnp.asarray(params.distance_scale, dtype=dtype)
    s2 = affect_proximity(query.mood, memory.mood, scale)
    s3 = affect_proximity(query.affect, memory.affect, scale)
    s4 = momentum_alignment(query.velocity, memory.velocity)
    s5 = effective_strength(
        params, memory.age_seconds, memory.affect[1], memory.consolidation,
        memory.retrieval_count,
    )
    s6 = memory.activation
    raw = jnp.stack([jnp.asarray(semantic, dtype), s2, s3, s4, s5, s6]).astype(dtype)
    return raw * jnp.asarray(params.signal_scale, dtype) + jnp.asarray(params.signal_shift, dtype)


def bank_cosine(
    query_embedding: Float[Array, " D"], embeddings: Float[Array, "N D"]
) -> Float[Array, " N"]:
    """Cosine of the query with every row as one matrix-vector product (docs/behaviour.md §4, s1).

    Rows (or a query) with a NaN or zero norm give 0, with finite gradients.

    Args:
        query_embedding: (D,) query.
        embeddings: (N, D) bank.

    Returns:
        (N,) cosines.
    """
    q_nan = jnp.any(~jnp.isfinite(query_embedding))
    q = jnp.where(q_nan, 0.0, query_embedding)
    row_nan = jnp.any(~jnp.isfinite(embeddings), axis=-1)
    rows = jnp.where(row_nan[:, None], 0.0, embeddings)
    q_norm, q_ok = _safe_norm(q)
    row_sq = jnp.sum(rows * rows, axis=-1)
    row_ok = row_sq > 0
    row_norm = jnp.where(row_ok, jnp.sqrt(jnp.where(row_ok, row_sq, 1.0)), 0.0)
    ok = row_ok & q_ok & ~q_nan & ~row_nan
    denom = jnp.where(ok, q_norm * row_norm, 1.0)
    # A row-wise multiply-reduce rather than a matmul: XLA lowers an (N, D) @ (D,)
    # product differently for N == 1, and padded banks must score bit-identically.
    return jnp.where(ok, jnp.sum(rows * q, axis=-1) / denom, 0.0)
