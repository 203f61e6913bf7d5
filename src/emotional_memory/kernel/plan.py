"""The whole two-pass retrieval plan of docs/behaviour.md §5 as one compiled program.

:func:`retrieval_plan` runs, inside one ``jax.jit``:

1. the final weights: mood-adaptive weights of the (routed) base weights, then the
   ablation mask (:mod:`~emotional_memory.kernel.gates`);
2. pass 1: the signals of every candidate row and their weighted totals;
3. the stable pass-1 order and its top-k seeds (:func:`stable_rank`);
4. spreading activation from the seeds over the padded adjacency;
5. pass 2, re-scoring only the resonance term (the other weighted signals are summed
   once and reused, in the same left-to-right order as a full re-score);
6. the stable pass-2 order.

Padding rows (``valid`` False) sort last and are never seeds; with nothing reached,
pass 2 equals pass 1 bit for bit. :func:`retrieval_plan_packed` is the same program
behind a narrower boundary (7 host inputs and 2 outputs instead of 16 and 10, which
saves per-call buffer conversions), returning the very same bits.
"""

from __future__ import annotations

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Bool, Float, Int

from emotional_memory.kernel._types import Array
from emotional_memory.kernel.activation import spreading_activation_dense
from emotional_memory.kernel.columns import MemoryColumns, QueryFeatures
from emotional_memory.kernel.context import ContextInputs
from emotional_memory.kernel.gates import (
    adaptive_weights,
    adaptive_weights_context,
    adaptive_weights_lexical,
    apply_signal_mask,
)
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.kernel.params import ScoringParams, unpack_params
from emotional_memory.kernel.score import (
    check_signal_vector,
    score_with_weights,
    signal_count,
    stable_rank,
    weighted_total,
)

RESONANCE = 5
"""Index of the resonance signal s6 (the only one pass 2 changes)."""


class PlanOutput(eqx.Module):
    """Every array of one two-pass plan over a padded candidate bank of N rows.

    Attributes:
        weights: (S,) final weights (S = 7 with the lexical signal, 8 with the context
            signal too, else 6).
        raw1: (N, S) pass-1 signals; totals1: (N,) pass-1 totals (``-inf`` on padding).
        order1: (N,) rows by pass-1 rank (padding last).
        seeds: (N,) True on the pass-1 top-k real rows.
        activation: (N,) spreading activation; reached: (N,) rows it reached.
        resonance2: (N,) pass-2 resonance signal s6 (pass 2 differs from pass 1 only
            in this column).
        totals2: (N,) pass-2 totals; order2: (N,) rows by pass-2 rank.
    """

    weights: Float[Array, " S"]
    raw1: Float[Array, "N S"]
    totals1: Float[Array, " N"]
    order1: Int[Array, " N"]
    seeds: Bool[Array, " N"]
    activation: Float[Array, " N"]
    reached: Bool[Array, " N"]
    resonance2: Float[Array, " N"]
    totals2: Float[Array, " N"]
    order2: Int[Array, " N"]


def retrieval_plan_unjitted(
    params: ScoringParams,
    query: QueryFeatures,
    columns: MemoryColumns,
    targets: Int[Array, "N L"],
    strengths: Float[Array, "N L"],
    *,
    top_k: int,
    hops: int,
    spread: bool,
    weights: Float[Array, " S"] | None = None,
    weight_params: ScoringParams | None = None,
    signal_mask: Float[Array, " S"] | None = None,
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
    seed_count: Int[Array, ""] | None = None,
) -> PlanOutput:
    """:func:`retrieval_plan` before ``jax.jit`` (for use inside other transforms).

    Args and Returns: as :func:`retrieval_plan`; ``seed_count`` as
    :func:`retrieval_plan_packed`'s.
    """
    n_signals = signal_count(lexical, context)
    check_signal_vector("signal_mask", signal_mask, n_signals)
    dtype = jnp.result_type(query.affect)
    if weights is not None and jnp.shape(weights) == (6,) and n_signals > 6:
        # six final weights (the engine's precomputed_weights) with s7 / s8 scored:
        # the six are used as they are, the opt-in signals weigh 0
        weights = jnp.concatenate([jnp.asarray(weights, dtype),
                                   jnp.zeros((n_signals - 6,), dtype)])
    if weights is None:
        source = params if weight_params is None else weight_params
        if lexical is None:
            weights = adaptive_weights(source, query.mood[0], query.mood[1])
        elif context is None:  # the lexical weight is the signal parameters' (one per config)
            weights = adaptive_weights_lexical(
                eqx.tree_at(lambda p: p.lexical, source, params.lexical),
                query.mood[0], query.mood[1],
            )
        else:  # so are the lexical and the context weights
            weights = adaptive_weights_context(
                eqx.tree_at(lambda p: (p.lexical, p.context), source,
                            (params.lexical, params.context)),
                query.mood[0], query.mood[1],
            )
        if signal_mask is not None:
            weights = apply_signal_mask(weights, jnp.asarray(signal_mask, dtype))
    out1 = score_with_weights(weights, params, query, columns, lexical, context)
    order1 = stable_rank(out1.totals, columns.valid)
    n = columns.valid.shape[0]
    top = order1[: min(top_k, n)]
    # the valid rows among the top: a compare-and-reduce that fuses (not a scatter)
    hit = jnp.arange(n)[:, None] == top[None, :]
    if seed_count is not None:  # top_k is a bucket: only its first seed_count count
        hit = hit & (jnp.arange(top.shape[0]) < seed_count)[None, :]
    seeds = jnp.any(hit, axis=1) & columns.valid
    if spread:
        activation, reached = spreading_activation_dense(
            seeds, targets, jnp.asarray(strengths, dtype), hops
        )
    else:
        activation, reached = jnp.zeros((n,), dtype), jnp.zeros((n,), bool)
    w = out1.weights
    scale = jnp.asarray(params.signal_scale, dtype)[RESONANCE]
    shift = jnp.asarray(params.signal_shift, dtype)[RESONANCE]
    resonance2 = activation * scale + shift
    # weighted_total sums left to right: the first five terms are shared by both passes
    partial = weighted_total(w, out1.raw, terms=RESONANCE)
    total2 = partial + w[RESONANCE] * resonance2
    if lexical is not None:  # s7 comes last: the same left-to-right sum as pass 1
        total2 = total2 + w[RESONANCE + 1] * out1.raw[:, RESONANCE + 1]
    if context is not None:  # then s8: neighbours lend s1 and s7, which pass 2 keeps
        total2 = total2 + w[RESONANCE + 2] * out1.raw[:, RESONANCE + 2]
    totals2 = jnp.where(columns.valid, total2, jnp.asarray(-jnp.inf, dtype))
    order2 = stable_rank(totals2, columns.valid)
    return PlanOutput(
        weights=w, raw1=out1.raw, totals1=out1.totals, order1=order1, seeds=seeds,
        activation=activation, reached=reached, resonance2=resonance2, totals2=totals2,
        order2=order2,
    )


@functools.partial(jax.jit, static_argnames=("top_k", "hops", "spread"))
def retrieval_plan(
    params: ScoringParams,
    query: QueryFeatures,
    columns: MemoryColumns,
    targets: Int[Array, "N L"],
    strengths: Float[Array, "N L"],
    *,
    top_k: int,
    hops: int,
    spread: bool,
    weights: Float[Array, " S"] | None = None,
    weight_params: ScoringParams | None = None,
    signal_mask: Float[Array, " S"] | None = None,
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
) -> PlanOutput:
    """The two-pass plan of docs/behaviour.md §5 over a padded candidate bank, one compiled program.

    Args:
        params: parameters of the signals (decay, distance scale, calibration) and,
            unless ``weight_params`` is given, of the weights.
        query: unbatched query features; its dtype (of ``affect``) is the compute dtype.
        columns: (N, ...) candidates padded to a bucket (``valid`` False on padding);
            their ``activation`` column is pass 1's (zeros).
        targets: (N, L) int32 link target row per slot, -1 for none.
        strengths: (N, L) link strengths.
        top_k: number of seeds (static).
        hops: spreading-activation hops (static).
        spread: False skips spreading activation (static; resonance disabled).
        weights: optional (S,) final weights, used as they are; six with ``lexical``
            (or ``context``) give s7 (and s8) weight 0.
        weight_params: parameters of the mood-adaptive weights (a query route's base
            weights and the gates) when ``weights`` is None (default: ``params``).
        signal_mask: optional (S,) ablation mask applied to the adaptive weights.
        lexical: optional term statistics of the N rows: adds the lexical signal s7
            (its weight from ``params.lexical``) as a seventh signal.
        context: optional neighbours of the N rows (with ``lexical``): adds the
            context signal s8 (its weight and mix from ``params.context``) as an
            eighth signal.

    Returns:
        :class:`PlanOutput` over the N padded rows.
    """
    return retrieval_plan_unjitted(
        params, query, columns, targets, strengths, top_k=top_k, hops=hops, spread=spread,
        weights=weights, weight_params=weight_params, signal_mask=signal_mask,
        lexical=lexical, context=context,
    )


FEATURES: tuple[tuple[str, int], ...] = (
    ("affect", 3), ("mood", 3), ("velocity", 3), ("age_seconds", 1),
    ("consolidation", 1), ("retrieval_count", 1), ("activation", 1),
)
"""The columns of :func:`retrieval_plan_packed`'s ``features`` matrix: name and width."""

FEATURE_WIDTH: int = sum(width for _, width in FEATURES)
"""Width of :func:`retrieval_plan_packed`'s ``features`` matrix (13)."""

TABLE: tuple[str, ...] = (
    "totals1", "order1", "activation", "reached", "resonance2", "totals2", "order2",
)
"""The columns of :func:`retrieval_plan_packed`'s table after its S signal columns."""


def pack_columns(columns: MemoryColumns) -> tuple[Any, np.ndarray, Any]:
    """A bank's columns as :func:`retrieval_plan_packed` takes them (host side).

    Args:
        columns: (N, ...) padded columns with numpy leaves.

    Returns:
        ``(embedding, features, valid)``: the (N, D) embeddings and (N,) mask as they
        are, and the (N, 13) :data:`FEATURES` matrix (the columns' common dtype, so
        every value is kept).
    """
    parts = []
    for name, width in FEATURES:
        leaf = np.asarray(getattr(columns, name))
        parts.append(leaf if width > 1 else leaf[:, None])
    return columns.embedding, np.concatenate(parts, axis=1), columns.valid


def pack_query(query: QueryFeatures) -> tuple[Any, np.ndarray]:
    """A query as :func:`retrieval_plan_packed` takes it (host side).

    Args:
        query: the query features (numpy leaves; affect, mood and velocity of one
            dtype, the compute dtype).

    Returns:
        ``(embedding, state)``: the (D,) embedding and the (9,) affect, mood and
        velocity.
    """
    dtype = np.asarray(query.affect).dtype
    state = np.concatenate(
        (np.asarray(query.affect), np.asarray(query.mood), np.asarray(query.velocity))
    ).astype(dtype, copy=False)
    return query.embedding, state


def unpack_inputs(
    query_embedding: Float[Array, " D"],
    query_state: Float[Array, " 9"],
    embedding: Float[Array, "N D"],
    features: Float[Array, "N 13"],
    valid: Bool[Array, " N"],
) -> tuple[QueryFeatures, MemoryColumns]:
    """The query and columns of :func:`pack_query` / :func:`pack_columns`' arrays.

    Args:
        query_embedding, query_state: as :func:`pack_query` returns them.
        embedding, features, valid: as :func:`pack_columns` returns them.

    Returns:
        ``(query, columns)``: slices of the inputs, no arithmetic.
    """
    query = QueryFeatures(
        embedding=query_embedding, affect=query_state[0:3], mood=query_state[3:6],
        velocity=query_state[6:9],
    )
    leaves: dict[str, Any] = {}
    start = 0
    for name, width in FEATURES:
        leaves[name] = features[:, start:start + width] if width > 1 else features[:, start]
        start += width
    return query, MemoryColumns(embedding=embedding, valid=valid, **leaves)


def pack_output(out: PlanOutput) -> tuple[Float[Array, " S"], Float[Array, "N T"]]:
    """A plan's per-row results as one table (exact: orders and flags as floats).

    Args:
        out: the plan.

    Returns:
        ``(weights, table)``: the (S,) weights and the (N, S + 7) table of ``raw1``
        then the :data:`TABLE` columns (row indices and 0/1 flags are exact in the
        compute dtype for any N below 2**24).
    """
    dtype = out.raw1.dtype
    tail = [getattr(out, name).astype(dtype) for name in TABLE]
    return out.weights, jnp.concatenate([out.raw1, jnp.stack(tail, axis=1)], axis=1)


@functools.partial(jax.jit, static_argnames=("top_k", "hops", "spread"))
def retrieval_plan_packed(
    params: Float[Array, " P"],
    query_embedding: Float[Array, " D"],
    query_state: Float[Array, " 9"],
    embedding: Float[Array, "N D"],
    features: Float[Array, "N 13"],
    valid: Bool[Array, " N"],
    targets: Int[Array, "N L"],
    strengths: Float[Array, "N L"],
    *,
    top_k: int,
    hops: int,
    spread: bool,
    weights: Float[Array, " S"] | None = None,
    weight_params: Float[Array, " P"] | None = None,
    signal_mask: Float[Array, " S"] | None = None,
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
    seed_count: Int[Array, ""] | None = None,
) -> tuple[Float[Array, " S"], Float[Array, "N T"]]:
    """:func:`retrieval_plan` with packed inputs and outputs, one compiled program.

    Args:
        params: :func:`~emotional_memory.kernel.params.pack_params` of
            :func:`retrieval_plan`'s ``params`` (one operand instead of 24 leaves).
        query_embedding, query_state: the query (:func:`pack_query`); the state's dtype
            is the compute dtype.
        embedding, features, valid: the padded candidates (:func:`pack_columns`).
        targets, strengths, top_k, hops, spread, weights, signal_mask, lexical,
            context: as :func:`retrieval_plan`.
        weight_params: optional packed parameters of the adaptive weights, as
            :func:`retrieval_plan`'s (packed like ``params``).
        seed_count: optional () int: the number of seeds, traced, when the static
            ``top_k`` is only a bucket at least as large (:func:`top_k_bucket`): one
            program then serves every count up to the bucket, with the same seeds.

    Returns:
        ``(weights, table)`` of :func:`pack_output`: the same values as
        :func:`retrieval_plan`'s fields.
    """
    query, columns = unpack_inputs(query_embedding, query_state, embedding, features, valid)
    out = retrieval_plan_unjitted(
        unpack_params(params), query, columns, targets, strengths, top_k=top_k, hops=hops,
        spread=spread, weights=weights,
        weight_params=None if weight_params is None else unpack_params(weight_params),
        signal_mask=signal_mask, lexical=lexical, context=context, seed_count=seed_count,
    )
    return pack_output(out)


TOP_K_MIN_BUCKET = 8
"""The smallest :func:`top_k_bucket`."""


def top_k_bucket(top_k: int) -> int:
    """The static seed count a compiled plan is built for: ``top_k`` rounded up to a
    power of two, at least :data:`TOP_K_MIN_BUCKET` (a handful of programs serve
    every ``top_k``; the real count is passed traced as ``seed_count``).

    Args:
        top_k: the number of seeds (>= 1).

    Returns:
        The bucket (>= ``top_k``).
    """
    return max(TOP_K_MIN_BUCKET, 1 << (top_k - 1).bit_length())
