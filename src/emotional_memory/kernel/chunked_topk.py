"""Batch scoring at scale: Q queries against an N-row bank in one compiled program.

:func:`score_batch` returns each query's top-k memories by the pass-1 score
(docs/behaviour.md §4: six signals, mood-adaptive weights, optional ablation mask)
without materialising the (Q, N) score matrix: a ``lax.scan`` over chunks of
``chunk_size`` rows carries a running (Q, k) top-k. Per chunk the semantic signal is
one ``(Q, D) @ (D, chunk)`` product scaled by precomputed inverse norms, the other five
are broadcast from per-row quantities, and totals are summed in
:func:`~emotional_memory.kernel.score.weighted_total`'s order, so they equal
:func:`~emotional_memory.kernel.score.score_bank` to a few ulp.

Ties go to the lowest row index; -0.0 ties with +0.0. A query or row embedding
holding NaN or an infinity has cosine 0 (as in ``score_bank``). Invalid rows (and a
valid row whose total is NaN) are never selected; missing slots hold index -1 and
score -inf.
float16 / bfloat16 embeddings are cast chunk by chunk. Usage and guarantees:
``docs/scale.md``, "Batch scorer".
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Float, Int

from emotional_memory.kernel._types import Array
from emotional_memory.kernel.columns import MemoryColumns, QueryFeatures, check_bank_rows
from emotional_memory.kernel.gates import adaptive_weights, apply_signal_mask
from emotional_memory.kernel.params import ScoringParams
from emotional_memory.kernel.signals import MOMENTUM_EPS, effective_strength

DEFAULT_CHUNK_SIZE = 16384
"""Rows per scan step. 16,384 reached 93% of a bare matmul + top-k at N = 100,000,
D = 384, Q = 256 on CPU (65,536: 69%; ``benchmarks/batch_throughput.py``); with
:func:`grouped_top_k` for each chunk, 115% (the bare top-k scans every product)."""


def _safe_sqrt(sq: Array) -> tuple[Array, Array]:
    """``(sqrt(sq) where ok else 0, ok)`` with ``ok = 0 < sq < inf`` (False for NaN)
    and a finite gradient at 0."""
    ok = (sq > 0) & (sq < jnp.inf)
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 1.0)), 0.0), ok


Components = tuple[Array, Array, Array]
"""Three (C,) arrays: one PAD (or velocity) component per array, contiguous in memory."""


def _components(points: Float[Array, "N 3"]) -> Components:
    return (points[:, 0], points[:, 1], points[:, 2])


def _pair_proximity(
    query_points: Float[Array, "Q 3"], row_points: Components, inv_scale: Array
) -> Float[Array, "Q C"]:
    """``max(0, 1 - |q - r| / scale)`` for every (query, row) pair (signals s2, s3).

    Row components come as separate 1-D arrays: the fused (Q, C) loop then reads
    contiguous memory and vectorises (a strided (C, 3) or transposed layout is
    several times slower on CPU). ``sqrt(0) == 0`` gives the exact value without a
    branch (this path ranks; it is not meant for gradients), and the division is a
    multiply by ``1 / scale``.
    """
    d0 = query_points[:, 0:1] - row_points[0][None, :]
    d1 = query_points[:, 1:2] - row_points[1][None, :]
    d2 = query_points[:, 2:3] - row_points[2][None, :]
    dist = jnp.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
    return jnp.maximum(0.0, 1.0 - dist * inv_scale)


def _pair_momentum(
    query_direction: Float[Array, "Q 3"], row_direction: Components
) -> Float[Array, "Q C"]:
    """``(cos + 1) / 2`` of every (query, row) velocity pair (docs/behaviour.md §4, s4).

    Directions are unit velocities, or zero vectors below speed 1e-12, which gives
    exactly the contract's 0.5 with no branch.
    """
    cos = (
        query_direction[:, 0:1] * row_direction[0][None, :]
        + query_direction[:, 1:2] * row_direction[1][None, :]
        + query_direction[:, 2:3] * row_direction[2][None, :]
    )
    return (cos + 1.0) * 0.5


def _directions(velocity: Float[Array, "M 3"]) -> Float[Array, "M 3"]:
    """Unit velocities; zero rows where the speed is below 1e-12 (s4's cut-off)."""
    speed = jnp.sqrt(jnp.sum(velocity * velocity, axis=-1, keepdims=True))
    moving = speed >= MOMENTUM_EPS
    return jnp.where(moving, velocity / jnp.where(moving, speed, 1.0), 0.0)


def _inverse(x: Array, ok: Array) -> Array:
    """``1 / x`` where ``ok``, else 0."""
    return jnp.where(ok, 1.0 / jnp.where(ok, x, 1.0), 0.0)


def _pow2_factor(x: Float[Array, "M D"]) -> Float[Array, " M"]:
    """Per row, the power of two ``2**-e`` that brings ``max |x|`` into [0.5, 1).

    Multiplying by it is exact, changes no cosine, and keeps the squared norm of a
    finite row from overflowing (entries ~1e20 in float32) or underflowing (~1e-20).
    1 for zero and non-finite rows; ``e`` is capped so the factor is a normal number.
    """
    peak = jnp.max(jnp.abs(x), axis=-1, initial=0.0)
    usable = jnp.isfinite(peak) & (peak > 0)
    _, exponent = jnp.frexp(jnp.where(usable, peak, 1.0))
    limit = jnp.finfo(x.dtype).maxexp - 2
    exponent = jnp.where(usable, jnp.clip(exponent, -limit, limit), 0)
    return jnp.ldexp(jnp.ones_like(peak), -exponent)


def _scaled_inverse_norm(x: Float[Array, "M D"]) -> tuple[Array, Array, Array]:
    """``(factor, inv_norm, ok)`` of every row of ``x``, free of overflow and underflow.

    ``factor`` is :func:`_pow2_factor`; ``inv_norm`` is ``1 / |x * factor|`` (0 where
    not ``ok``); ``ok`` is False for zero, NaN, infinite rows and rows too small for
    the inverse norm to be finite. With ``factor`` 1 (the usual |x| near 1) the norm
    is the plain one, bit for bit; otherwise exactly the plain one rescaled.
    """
    factor = _pow2_factor(x)
    scaled = x * factor[:, None]
    norm, ok = _safe_sqrt(jnp.sum(scaled * scaled, axis=-1))
    inv = _inverse(norm, ok)
    return factor, inv, ok & jnp.isfinite(inv)


def _bank_inverse_norm(x: Float[Array, "N D"]) -> tuple[Array, Array, Array]:
    """``(scale, inv_norm, ok)`` of every bank row: ``inv_norm = 1 / |row * scale|``
    (0 where not ``ok``), ``scale`` a power of two.

    One reduction when every squared norm is a normal number, zero, NaN or inf (the
    usual bank: ``scale`` 1 and the plain norm, bit for bit); when some finite nonzero
    row's square leaves that range (entries ~1e20 or ~1e-20 in float32), those rows
    get :func:`_pow2_factor` as ``scale`` and the norm of the rescaled row (a second
    pass over the bank). The scan multiplies such rows by ``scale`` before the product:
    near float32's maximum neither their products with the query nor ``1 / |row|``
    (a subnormal, flushed to 0) are representable.
    """
    sq = jnp.sum(x * x, axis=-1)
    tiny = jnp.finfo(x.dtype).tiny
    # finite rows whose square overflowed (inf from finite entries) or left the
    # normal range; a zero square from nonzero entries needs its row's peak
    peak = jnp.max(jnp.abs(x), axis=-1, initial=0.0)
    odd = jnp.isfinite(peak) & (peak > 0) & ~((sq >= tiny) & (sq < jnp.inf))

    def plain(_: None) -> tuple[Array, Array, Array]:
        norm, ok = _safe_sqrt(sq)
        return jnp.ones_like(sq), _inverse(norm, ok), ok

    def rescaled(_: None) -> tuple[Array, Array, Array]:  # only the odd rows change
        factor, inv_scaled, ok_scaled = _scaled_inverse_norm(x)
        one, inv, ok = plain(None)
        return (jnp.where(odd, factor, one), jnp.where(odd, inv_scaled, inv),
                jnp.where(odd, ok_scaled, ok))

    return jax.lax.cond(jnp.any(odd), rescaled, plain, None)


class RowFeatures(NamedTuple):
    """Query-independent row quantities, computed once per bank before the scan.

    Attributes:
        embedding: (N, D) embeddings in their storage dtype (cast per chunk).
        scale: (N,) power of two each row is multiplied by before the product (1 but
            for rows whose squared norm leaves the normal range).
        inv_norm: (N,) ``1 / |row * scale|``; ok: (N,) False for zero-norm or NaN rows.
        mood, affect: the PAD columns as three (N,) arrays each (contiguous memory
            for the fused (Q, chunk) loop).
        direction: unit velocities (zero when the speed is < 1e-12), three (N,) arrays.
        recency: (N,) calibrated recency signal s5; resonance: (N,) calibrated s6.
        valid: (N,) row mask.
    """

    embedding: Array
    scale: Array
    inv_norm: Array
    ok: Array
    mood: Components
    affect: Components
    direction: Components
    recency: Array
    resonance: Array
    valid: Array


def row_features(params: ScoringParams, columns: MemoryColumns, dtype: Any) -> RowFeatures:
    """Precompute every query-independent row quantity of ``columns`` in ``dtype``.

    Row norms follow :func:`bank_cosine`: a row holding a NaN or an infinity counts
    as a zero row (cosine 0).
    """
    emb = columns.embedding
    # A squared norm is NaN exactly when the row holds a NaN (squares are >= 0, so no
    # inf - inf) and inf when it holds an infinity: one reduction and ``0 < sq < inf``
    # find zero, NaN and infinite rows alike. Rows are rescaled by a power of two
    # first, so a finite row's square neither overflows nor underflows.
    row_scale, inv_norm, ok = _bank_inverse_norm(jnp.asarray(emb, dtype))
    scale = jnp.asarray(params.signal_scale, dtype)
    shift = jnp.asarray(params.signal_shift, dtype)
    recency = jax.vmap(effective_strength, in_axes=(None, 0, 0, 0, 0))(
        params,
        jnp.asarray(columns.age_seconds, dtype),
        jnp.asarray(columns.affect, dtype)[:, 1],
        jnp.asarray(columns.consolidation, dtype),
        jnp.asarray(columns.retrieval_count, dtype),
    )
    return RowFeatures(
        embedding=emb,
        scale=row_scale,
        inv_norm=inv_norm,  # 1 / |row * scale|
        ok=ok,
        mood=_components(jnp.asarray(columns.mood, dtype)),
        affect=_components(jnp.asarray(columns.affect, dtype)),
        direction=_components(_directions(jnp.asarray(columns.velocity, dtype))),
        recency=recency * scale[4] + shift[4],
        resonance=jnp.asarray(columns.activation, dtype) * scale[5] + shift[5],
        valid=jnp.asarray(columns.valid, bool),
    )


def slice_rows(rows: RowFeatures, start: Any, size: int) -> RowFeatures:
    """Rows ``start : start + size`` of every field (``start`` may be traced)."""
    return jax.tree_util.tree_map(
        lambda x: jax.lax.dynamic_slice_in_dim(x, start, size, axis=0), rows
    )


class PreparedQueries(NamedTuple):
    """Query-side quantities: NaN-cleaned embeddings, inverse norms, unit velocities and
    final weights (leading axis Q)."""

    embedding: Array
    inv_norm: Array
    ok: Array
    affect: Array
    mood: Array
    direction: Array
    weights: Array


def prepare_queries(
    params: ScoringParams,
    queries: QueryFeatures,
    dtype: Any,
    signal_mask: Float[Array, 6] | None = None,
) -> PreparedQueries:
    """Cast, clean (a query embedding holding NaN or an infinity scores cosine 0, as
    in :func:`bank_cosine`) and weight a query batch."""
    emb = jnp.asarray(queries.embedding, dtype)
    q_bad = jnp.any(~jnp.isfinite(emb), axis=-1)
    emb = jnp.where(q_bad[:, None], 0.0, emb)
    # scaled by a power of two (no cosine changes): no overflow in the norm or product
    factor, inv_norm, ok = _scaled_inverse_norm(emb)
    mood = jnp.asarray(queries.mood, dtype)
    return PreparedQueries(
        embedding=emb * factor[:, None],
        inv_norm=inv_norm,
        ok=ok,
        affect=jnp.asarray(queries.affect, dtype),
        mood=mood,
        direction=_directions(jnp.asarray(queries.velocity, dtype)),
        weights=batch_weights(params, mood, signal_mask),
    )


def batch_weights(
    params: ScoringParams,
    moods: Float[Array, "Q 3"],
    signal_mask: Float[Array, 6] | None = None,
) -> Float[Array, "Q 6"]:
    """Each query's final weights: adaptive weights of its mood, then the ablation mask.

    Args:
        params: scoring parameters.
        moods: (Q, 3) current mood per query (valence, arousal, dominance).
        signal_mask: optional (6,) ablation mask.

    Returns:
        (Q, 6) weights in the dtype of ``moods``.
    """
    weights = jax.vmap(adaptive_weights, in_axes=(None, 0, 0))(params, moods[:, 0], moods[:, 1])
    if signal_mask is not None:
        mask = jnp.asarray(signal_mask, moods.dtype)
        weights = jax.vmap(apply_signal_mask, in_axes=(0, None))(weights, mask)
    return weights


def chunk_totals(
    params: ScoringParams, queries: PreparedQueries, rows: RowFeatures
) -> Float[Array, "Q C"]:
    """Pass-1 totals of every (query, row) pair of one chunk; ``-inf`` where invalid.

    Args:
        params: scoring parameters.
        queries: from :func:`prepare_queries`.
        rows: a chunk of :func:`row_features`.

    Returns:
        (Q, C) totals in the query dtype.
    """
    dtype = queries.affect.dtype
    # ONE matmul for the semantic term. A NaN in a row only reaches its own column and
    # is masked below (rows.ok), so the rows need no cleaning before the product.
    emb = rows.embedding.astype(dtype)
    # rows near the dtype's range are rescaled (exactly); the usual chunk skips the pass
    emb = jax.lax.cond(jnp.any(rows.scale != 1), lambda e: e * rows.scale[:, None],
                       lambda e: e, emb)
    dots = jnp.matmul(
        queries.embedding, emb.T,
        precision=jax.lax.Precision.HIGHEST, preferred_element_type=dtype,
    )
    ok = queries.ok[:, None] & rows.ok[None, :]
    semantic = jnp.where(ok, dots * queries.inv_norm[:, None] * rows.inv_norm[None, :], 0.0)

    inv_scale = 1.0 / jnp.asarray(params.distance_scale, dtype)
    mood = _pair_proximity(queries.mood, rows.mood, inv_scale)
    affect = _pair_proximity(queries.affect, rows.affect, inv_scale)
    momentum = _pair_momentum(queries.direction, rows.direction)

    scale = jnp.asarray(params.signal_scale, dtype)
    shift = jnp.asarray(params.signal_shift, dtype)
    w = queries.weights
    # Same order as weighted_total: w0*s0 + w1*s1 + ... + w5*s5, left to right.
    total = w[:, 0:1] * (semantic * scale[0] + shift[0])
    total = total + w[:, 1:2] * (mood * scale[1] + shift[1])
    total = total + w[:, 2:3] * (affect * scale[2] + shift[2])
    total = total + w[:, 3:4] * (momentum * scale[3] + shift[3])
    total = total + w[:, 4:5] * rows.recency[None, :]
    total = total + w[:, 5:6] * rows.resonance[None, :]
    keep = rows.valid[None, :] & ~jnp.isnan(total)
    return jnp.where(keep, total, jnp.asarray(-jnp.inf, dtype))


GROUP_SIZE = 16
"""Values per group of :func:`grouped_top_k`. 16 and 32 were equally fast for the
store search's (256, 32,768) float32 chunks of the time; 16 gathers less."""


def grouped_top_k(
    x: Float[Array, "... N"], k: int, group: int = GROUP_SIZE
) -> tuple[Float[Array, "... K"], Int[Array, "... K"]]:
    """``lax.top_k`` along the last axis, selecting through group maxima first.

    The last axis is cut into groups of ``group`` consecutive values. The ``k``
    groups with the highest maxima (ties: lower group first) hold the top k values:
    a value outside them is preceded, in the order value-descending then
    index-ascending, by the first maximum of each of the k groups. So one
    reduction over ``x`` and a ``lax.top_k`` over the ``N / group`` maxima and over
    the ``k * group`` values of the chosen groups (in index order) give exactly
    ``lax.top_k``'s answer, ties included, for a fraction of its comparisons.

    ``lax.top_k`` orders floats totally (-0.0 below +0.0, NaN above +inf, a
    negative NaN below -inf) while a maximum does not, so ``x`` is first made
    canonical: every zero +0.0, every NaN the positive quiet NaN (arrays with neither
    -0.0 nor NaN are unchanged; integer arrays always). Falls back to ``lax.top_k``
    of the canonical ``x`` when the groups would not save work (``N`` not a multiple
    of ``group``, or fewer than ``4 k`` groups), so the answer is the same either way.

    Args:
        x: (..., N) floating-point (or integer) values.
        k: how many (static, ``k <= N``).
        group: values per group (static).

    Returns:
        ``(values, index)``: (..., k) values, highest first, and their int32 positions
        along the last axis; equal to ``lax.top_k(canonical(x), k)``.
    """
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = jnp.where(jnp.isnan(x), jnp.asarray(jnp.nan, x.dtype), jnp.where(x == 0, 0, x))
    n = x.shape[-1]
    groups = n // group
    if n % group or groups < 4 * k:
        return jax.lax.top_k(x, k)
    lead = x.shape[:-1]
    maxima = jnp.max(x.reshape(*lead, groups, group), axis=-1)
    _, chosen = jax.lax.top_k(maxima, k)
    chosen = jnp.sort(chosen, axis=-1)  # index order: ties keep the lower position
    columns = chosen[..., None] * group + jnp.arange(group, dtype=chosen.dtype)
    columns = columns.reshape(*lead, k * group)
    values, position = jax.lax.top_k(jnp.take_along_axis(x, columns, axis=-1), k)
    return values, jnp.take_along_axis(columns, position, axis=-1)


def merge_top_k(
    best_scores: Float[Array, "Q K"],
    best_index: Int[Array, "Q K"],
    scores: Float[Array, "Q C"],
    first_row: Any,
    k: int,
) -> tuple[Float[Array, "Q K"], Int[Array, "Q K"]]:
    """Merge a running top-k with a chunk of rows ``first_row, first_row + 1, ...``.

    The chunk's own top-k is taken first (ties: lower row first), then merged with the
    running top-k, which holds only rows below ``first_row`` and precedes it in the
    concatenation; since ``lax.top_k`` puts the lower position first among equal
    values, position order is row order and ties resolve to the lowest row.

    Args:
        best_scores, best_index: (Q, k) running top-k, sorted.
        scores: (Q, C) totals of the chunk.
        first_row: row index of the chunk's first row (int32 scalar).
        k: static k.

    Returns:
        The merged (Q, k) scores and row indices.
    """
    width = min(k, scores.shape[1])
    chunk_scores, chunk_pos = grouped_top_k(scores, width)
    chunk_index = first_row + chunk_pos.astype(jnp.int32)
    merged, position = jax.lax.top_k(jnp.concatenate([best_scores, chunk_scores], axis=1), k)
    index = jnp.take_along_axis(jnp.concatenate([best_index, chunk_index], axis=1), position, 1)
    return merged, index


def _count(name: str, value: Any) -> int:
    """``value`` as an int >= 1 (numpy integers accepted, bool and float rejected).

    The kernel's own copy of ``emotional_memory._validation.positive_int``: the kernel
    imports nothing of the package outside it (and ``_validation`` must not pull in jax).
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        out = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if out < 1:
        raise ValueError(f"{name} must be >= 1, got {out}")
    return out


def _leaf_array(name: str, x: Any) -> Any:
    """``x`` as a JAX array if it is a (nested) list or tuple, else ``x`` itself.

    Raises:
        ValueError: a ragged or non-numeric list (named).
    """
    if not isinstance(x, list | tuple):
        return x
    try:
        return jnp.asarray(x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a rectangular array of numbers: {err}") from None


def batch_arrays(
    params: ScoringParams, queries: QueryFeatures, columns: MemoryColumns,
    signal_mask: Any = None,
) -> tuple[QueryFeatures, MemoryColumns, Any]:
    """The batch scorers' inputs with every list / tuple leaf made a JAX array (inside
    ``jax.jit`` a list arrives as a list of tracers, whose shape cannot be read).

    Raises:
        TypeError: ``params`` / ``queries`` / ``columns`` no ScoringParams /
            QueryFeatures / MemoryColumns.
        ValueError: a ragged or non-numeric list (named).
    """
    for name, value, kind in (("params", params, ScoringParams),
                              ("queries", queries, QueryFeatures),
                              ("columns", columns, MemoryColumns)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return (_module_arrays("queries", queries), _module_arrays("columns", columns),
            _leaf_array("signal_mask", signal_mask))


def _module_arrays(prefix: str, module: Any) -> Any:
    """``module`` rebuilt with its list / tuple fields as arrays (itself when none)."""
    fields = {f.name: getattr(module, f.name) for f in dataclasses.fields(module)}
    if not any(isinstance(v, list | tuple) for v in fields.values()):
        return module
    return type(module)(**{f: _leaf_array(f"{prefix}.{f}", v) for f, v in fields.items()})


def check_batch_inputs(
    queries: QueryFeatures, columns: MemoryColumns, k: Any, chunk_size: Any,
    signal_mask: Any = None,
) -> None:
    """Check the static shapes and types of a batch scorer's inputs (no device sync).

    Raises:
        TypeError: ``k`` / ``chunk_size`` not an int, or a non-float query dtype.
        ValueError: ``k`` / ``chunk_size`` < 1; query leaves not (Q, D) / (Q, 3) with
            one Q; a bank embedding not (N, D) with the queries' D; a mask not (6,).
    """
    _count("k", k)
    _count("chunk_size", chunk_size)
    emb_shape = jnp.shape(queries.embedding)
    if len(emb_shape) != 2:
        raise ValueError(f"queries.embedding must be (Q, D), got shape {emb_shape}")
    n_queries = emb_shape[0]
    for name in ("affect", "mood", "velocity"):
        shape = jnp.shape(getattr(queries, name))
        if shape != (n_queries, 3):
            raise ValueError(f"queries.{name} must be ({n_queries}, 3) like "
                             f"queries.embedding's Q, got shape {shape}")
    if not jnp.issubdtype(jnp.result_type(queries.affect), jnp.floating):
        raise TypeError("queries.affect must be floating point (it sets the compute "
                        f"dtype), got {jnp.result_type(queries.affect)}")
    bank_shape = jnp.shape(columns.embedding)
    if len(bank_shape) != 2 or bank_shape[1] != emb_shape[1]:
        raise ValueError(f"columns.embedding must be (N, {emb_shape[1]}) like the queries' "
                         f"dimension, got shape {bank_shape}")
    check_bank_rows(columns, bank_shape[0])
    if signal_mask is not None and jnp.shape(signal_mask) != (6,):
        raise ValueError(f"signal_mask must have shape (6,), got {jnp.shape(signal_mask)}")


def score_batch_unjitted(
    params: ScoringParams,
    queries: QueryFeatures,
    columns: MemoryColumns,
    k: int,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    signal_mask: Float[Array, 6] | None = None,
) -> tuple[Int[Array, "Q K"], Float[Array, "Q K"]]:
    """:func:`score_batch` before ``jax.jit`` (for use inside other transformations).

    Args and Returns: as :func:`score_batch`.
    """
    queries, columns, signal_mask = batch_arrays(params, queries, columns, signal_mask)
    check_batch_inputs(queries, columns, k, chunk_size, signal_mask)
    dtype = jnp.result_type(queries.affect)
    prepared = prepare_queries(params, queries, dtype, signal_mask)
    rows = row_features(params, columns, dtype)
    return top_k_over_rows(params, prepared, rows, k, chunk_size=chunk_size)


def top_k_over_rows(
    params: ScoringParams,
    queries: PreparedQueries,
    rows: RowFeatures,
    k: int,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    row_offset: Any = 0,
) -> tuple[Int[Array, "Q K"], Float[Array, "Q K"]]:
    """The chunked scan: running top-k of :func:`chunk_totals` over all rows.

    Args:
        params: scoring parameters.
        queries: from :func:`prepare_queries`.
        rows: from :func:`row_features`.
        k: static k.
        chunk_size: static rows per scan step.
        row_offset: added to the returned indices (a shard's first global row).

    Returns:
        ``(indices, scores)`` as :func:`score_batch`.
    """
    n = rows.valid.shape[0]
    n_queries = queries.embedding.shape[0]
    dtype = queries.affect.dtype
    size = min(int(chunk_size), max(n, 1))
    n_steps = -(-n // size)  # a short last chunk is a full-width one ending at row n

    def step(carry: Any, chunk_id: Any) -> tuple[Any, None]:
        # Every step scores `size` rows: a narrower product rounds differently, so
        # identical rows past the last full chunk did not tie with the earlier ones.
        # The last step starts at n - size; its rows before chunk_id * size (already
        # scanned) are masked, so the rows it adds all follow the running top-k's.
        best_scores, best_index = carry
        start = jnp.minimum(chunk_id * size, n - size)
        chunk = slice_rows(rows, start, size)
        fresh = start + jnp.arange(size, dtype=jnp.int32) >= chunk_id * size
        totals = chunk_totals(params, queries, chunk._replace(valid=chunk.valid & fresh))
        return merge_top_k(best_scores, best_index, totals, start, k), None

    carry: Any = (
        jnp.full((n_queries, k), -jnp.inf, dtype),
        jnp.full((n_queries, k), -1, jnp.int32),
    )
    if n_steps:
        carry, _ = jax.lax.scan(step, carry, jnp.arange(n_steps, dtype=jnp.int32))
    scores, index = carry
    found = ~jnp.isneginf(scores)
    return jnp.where(found, index + jnp.asarray(row_offset, jnp.int32), -1), scores


score_batch_compiled = jax.jit(score_batch_unjitted, static_argnames=("k", "chunk_size"))
"""The compiled program behind :func:`score_batch` (``k`` and ``chunk_size`` plain ints;
``.lower(...)`` shows it)."""


def score_batch(
    params: ScoringParams,
    queries: QueryFeatures,
    columns: MemoryColumns,
    k: int,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    signal_mask: Float[Array, 6] | None = None,
) -> tuple[Int[Array, "Q K"], Float[Array, "Q K"]]:
    """Top-k rows of ``columns`` for every query by the pass-1 score, one compiled program.

    Args:
        params: scoring parameters (shared by all queries).
        queries: :class:`QueryFeatures` with a leading axis Q on every leaf:
            embedding (Q, D), affect (Q, 3), mood (Q, 3), velocity (Q, 3). The query
            dtype (of ``affect``) is the compute dtype. Leaves (here and in
            ``columns``, ``signal_mask``) may be numpy / JAX arrays or nested lists.
        columns: (N, ...) bank, possibly padded (``valid`` False rows never win);
            embeddings may be float16/bfloat16 and are upcast chunk by chunk.
        k: how many rows per query (static).
        chunk_size: rows scored per scan step (static, default
            :data:`DEFAULT_CHUNK_SIZE` = 16,384); bounds memory to O(Q * chunk_size).
        signal_mask: optional (6,) ablation mask applied after the adaptive weights.

    Returns:
        ``(indices, scores)``: (Q, k) int32 row indices, best first (ties: lowest row
        index first), and their totals; slots past the number of valid rows hold
        ``-1`` and ``-inf``.

    Raises:
        TypeError / ValueError: a malformed argument, named (``k`` and ``chunk_size``
            ints >= 1, a 0-d integer array accepted; not bool or float).
    """
    # static arguments are cache keys: checked and made plain ints before the cache
    # (a bool k hashed as 1, a 0-d array was unhashable)
    k, chunk_size = _count("k", k), _count("chunk_size", chunk_size)
    return score_batch_compiled(
        params, queries, columns, k, chunk_size=chunk_size, signal_mask=signal_mask
    )
