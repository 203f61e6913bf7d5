"""Scoring a memory bank: the six signals vmapped over rows, weights, totals, ranks."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Bool, Float, Int

from emotional_memory.kernel._types import Array
from emotional_memory.kernel.columns import (
    MemoryColumns,
    QueryFeatures,
    check_bank_rows,
    check_query,
)
from emotional_memory.kernel.context import ContextInputs, context_signal, neighbour_blend
from emotional_memory.kernel.gates import (
    adaptive_weights,
    adaptive_weights_context,
    adaptive_weights_lexical,
    apply_signal_mask,
)
from emotional_memory.kernel.lexical import LexicalInputs, lexical_signal
from emotional_memory.kernel.params import ScoringParams
from emotional_memory.kernel.signals import bank_cosine, signals_given_semantic


class ScoreOutput(eqx.Module):
    """Result of scoring one query against a bank.

    Attributes:
        raw: (N, S) signals per memory: S = 6, or 7 with the lexical signal s7 last,
            or 8 with the context signal s8 after s7.
        weights: (S,) the weights used (adaptive, then ablation mask).
        totals: (N,) ``sum_i weights[i] * raw[:, i]``; ``-inf`` on padding rows.
    """

    raw: Float[Array, "N S"]
    weights: Float[Array, " S"]
    totals: Float[Array, " N"]


def signal_count(lexical: Any = None, context: Any = None) -> int:
    """S, the number of signals: 6, 7 with lexical inputs, 8 with context inputs too."""
    return 6 + (lexical is not None) + (context is not None)


def check_signal_vector(name: str, value: Any, n_signals: int) -> None:
    """``value`` (a mask or weights) is None or has one entry per signal.

    Raises:
        ValueError: naming ``name``; a short vector was indexed with a clamped index
            (the last entry reused) or broadcast.
    """
    if value is not None and jnp.shape(value) != (n_signals,):
        raise ValueError(f"{name} must have shape ({n_signals},) (one entry per signal), "
                         f"got {jnp.shape(value)}")


def check_score_inputs(
    query: QueryFeatures,
    columns: MemoryColumns,
    *,
    embeddings: bool,
    semantic: Any = None,
    signal_mask: Any = None,
    weights: Any = None,
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
) -> None:
    """Static shapes and dtypes of one query's scoring inputs (no device sync; works
    while tracing, under ``jit`` and ``vmap``).

    Args:
        query, columns, semantic, signal_mask, weights, lexical, context: as the
            scorers take them.
        embeddings: the scorer reads the embeddings (their D must agree).

    Raises:
        ValueError / TypeError: naming the malformed argument.
    """
    if context is not None and lexical is None:
        raise ValueError("the context signal s8 needs lexical inputs (it blends s1 and s7)")
    check_query(query)
    bank = jnp.shape(columns.embedding)
    dim = jnp.shape(query.embedding)[0] if embeddings else "D"
    if len(bank) != 2 or (embeddings and bank[1] != dim):
        raise ValueError(f"columns.embedding must be (N, {dim}) like query.embedding's D, "
                         f"got shape {bank}")
    n = bank[0]
    check_bank_rows(columns, n)
    if semantic is not None and jnp.shape(semantic) != (n,):
        raise ValueError(f"semantic must be ({n},), one per row, got shape {jnp.shape(semantic)}")
    n_signals = signal_count(lexical, context)
    check_signal_vector("signal_mask", signal_mask, n_signals)
    check_signal_vector("weights", weights, n_signals)
    if lexical is not None:
        _check_lexical(lexical, n)
    if context is not None:
        shape = jnp.shape(context.neighbours)
        if len(shape) != 2 or shape[0] != n:
            raise ValueError(f"context.neighbours must be ({n}, K), got shape {shape}")


def _check_lexical(lexical: LexicalInputs, n: int) -> None:
    """The lexical inputs of ``n`` rows: tf (n, T), length (n,), df (T,), scalars."""
    df = jnp.shape(lexical.df)
    if len(df) != 1:
        raise ValueError(f"lexical.df must be (T,), got shape {df}")
    for name, want in (("tf", (n, df[0])), ("length", (n,))):
        shape = jnp.shape(getattr(lexical, name))
        if shape != want:
            raise ValueError(f"lexical.{name} must be {want} (rows, lexical.df's terms), "
                             f"got shape {shape}")
    for name in ("n_docs", "avg_length"):
        shape = jnp.shape(getattr(lexical, name))
        if shape != ():
            raise ValueError(f"lexical.{name} must be a scalar, got shape {shape}")


def weighted_total(
    weights: Float[Array, 6], raw: Float[Array, "... 6"], terms: int | None = None
) -> Float[Array, ...]:
    """``w0*s0 + w1*s1 + ... + w5*s5`` summed left to right, as the reference does.

    A fixed summation order keeps totals bit-compatible with a plain-Python sum, so
    near-ties break the same way.

    Args:
        weights: (S,) signal weights.
        raw: (..., S) raw signals, e.g. (N, 6) for a bank.
        terms: sum only the first ``terms`` signals (default: all); the full total is
            then ``partial + w[terms] * s[terms] + ...``, bit for bit.

    Returns:
        (...) weighted totals, e.g. (N,).
    """
    size = raw.shape[-1]
    count = size if terms is None else terms
    if not 0 <= count <= size:  # an index past S would be clamped to the last signal
        raise ValueError(f"terms must lie in [0, {size}], got {terms}")
    if count == 0:
        return jnp.zeros(raw.shape[:-1], jnp.result_type(weights, raw))
    total = weights[0] * raw[..., 0]
    for i in range(1, count):
        total = total + weights[i] * raw[..., i]
    return total


def score_bank(
    params: ScoringParams,
    query: QueryFeatures,
    columns: MemoryColumns,
    signal_mask: Float[Array, " S"] | None = None,
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
) -> ScoreOutput:
    """Score every row of ``columns`` for one query.

    Args:
        params: scoring parameters.
        query: unbatched query features.
        columns: (N, ...) bank, possibly padded (``valid`` mask).
        signal_mask: optional (S,) ablation mask (1 enabled, 0 disabled).
        lexical: optional term statistics of the rows: adds the lexical signal s7.
        context: optional neighbours of the rows: adds the context signal s8 (needs
            ``lexical``).

    Returns:
        :class:`ScoreOutput` with raw (N, S), weights (S,), totals (N,); S = 6, 7
        with ``lexical``, 8 with ``context`` too.
    """
    check_score_inputs(query, columns, embeddings=True, signal_mask=signal_mask,
                       lexical=lexical, context=context)
    semantic = bank_cosine(query.embedding, columns.embedding)
    return score_given_semantic(params, query, columns, semantic, signal_mask, lexical,
                                context)


def score_given_semantic(
    params: ScoringParams,
    query: QueryFeatures,
    columns: MemoryColumns,
    semantic: Float[Array, " N"],
    signal_mask: Float[Array, " S"] | None = None,
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
) -> ScoreOutput:
    """Like :func:`score_bank`, with the semantic similarity s1 of every row supplied.

    The weights are the mood-adaptive ones (then the ablation mask), as in
    :func:`score_bank`. Use it when s1 is already known, e.g. precomputed once for a
    recall batch that is scored many times while fitting the other parameters.

    Args:
        params: scoring parameters.
        query: unbatched query features (its embedding is not used).
        columns: (N, ...) bank, possibly padded (``valid`` mask); its embeddings are
            not used.
        semantic: (N,) s1 of every row, e.g. :func:`bank_cosine` of the query.
        signal_mask: optional (S,) ablation mask (1 enabled, 0 disabled).
        lexical: optional term statistics of the rows: adds the lexical signal s7.
        context: optional neighbours of the rows: adds the context signal s8 (needs
            ``lexical``).

    Returns:
        :class:`ScoreOutput` with raw (N, S), weights (S,), totals (N,).
    """
    check_score_inputs(query, columns, embeddings=False, semantic=semantic,
                       signal_mask=signal_mask, lexical=lexical, context=context)
    dtype = jnp.result_type(query.affect)
    weigh = (adaptive_weights if lexical is None
             else adaptive_weights_lexical if context is None else adaptive_weights_context)
    weights = weigh(params, query.mood[0], query.mood[1])
    if signal_mask is not None:
        weights = apply_signal_mask(weights, jnp.asarray(signal_mask, dtype))
    return _score_rows(weights, params, query, columns, semantic, lexical, context)


def score_with_weights(
    weights: Float[Array, " S"],
    params: ScoringParams,
    query: QueryFeatures,
    columns: MemoryColumns,
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
) -> ScoreOutput:
    """Score every row of ``columns`` with given (already final) weights.

    Args:
        weights: (S,) weights, used as they are (7 with ``lexical``, 8 with
            ``context`` too, else 6).
        params: scoring parameters (signals only).
        query: unbatched query features.
        columns: (N, ...) bank.
        lexical: optional term statistics of the rows: adds the lexical signal s7.
        context: optional neighbours of the rows: adds the context signal s8.

    Returns:
        :class:`ScoreOutput`.
    """
    check_score_inputs(query, columns, embeddings=True, weights=weights, lexical=lexical,
                       context=context)
    semantic = bank_cosine(query.embedding, columns.embedding)
    return _score_rows(weights, params, query, columns, semantic, lexical, context)


def _score_rows(
    weights: Float[Array, " S"],
    params: ScoringParams,
    query: QueryFeatures,
    columns: MemoryColumns,
    semantic: Float[Array, " N"],
    lexical: LexicalInputs | None = None,
    context: ContextInputs | None = None,
) -> ScoreOutput:
    """The one place signals, weighted totals and the padding mask are put together
    (inputs checked by the caller, :func:`check_score_inputs`)."""
    dtype = jnp.result_type(query.affect)
    weights = jnp.asarray(weights, dtype)
    raw = jax.vmap(signals_given_semantic, in_axes=(None, None, 0, 0))(
        params, query, columns, semantic
    )
    if lexical is not None:
        k1 = jnp.asarray(params.lexical.k1, dtype)
        b = jnp.asarray(params.lexical.b, dtype)
        s7 = lexical_signal(k1, b, lexical, columns.valid).astype(dtype)
        raw = jnp.concatenate([raw, s7[:, None]], axis=-1)
    if context is not None:
        raw = jnp.concatenate([raw, context_column(params, raw, context, columns.valid)[:, None]],
                              axis=-1)
    totals = weighted_total(weights, raw)
    totals = jnp.where(columns.valid, totals, jnp.asarray(-jnp.inf, dtype))
    return ScoreOutput(raw=raw, weights=weights, totals=totals)


def context_column(
    params: ScoringParams, raw: Float[Array, "N S"], context: ContextInputs,
    valid: Bool[Array, " N"],
) -> Float[Array, " N"]:
    """s8 of every row from the rows' own signals (s1 in column 0, s7 in column 6).

    Args:
        params: scoring parameters (``context.mix``).
        raw: (N, >= 7) signals, calibrated s1 first and s7 seventh.
        context: the rows' neighbours.
        valid: (N,) False on padding rows.

    Returns:
        (N,) s8 (:func:`~emotional_memory.kernel.context.context_signal`).
    """
    mix = jnp.asarray(params.context.mix, raw.dtype)
    return context_signal(neighbour_blend(raw[:, 0], raw[:, 6], mix), context, valid)


def stable_rank(
    totals: Float[Array, " N"], valid: Bool[Array, " N"] | None = None
) -> Int[Array, " N"]:
    """Indices sorting ``totals`` descending; ties keep their original order.

    The order of numpy's ``argsort(-totals, kind="stable")`` (NaN totals after every
    number), with invalid rows after all valid ones.

    Args:
        totals: (N,) scores.
        valid: optional (N,) mask; invalid rows sort last.

    Returns:
        (N,) int32 indices.
    """
    n = totals.shape[0]
    keys = -totals
    keys = jnp.where(jnp.isnan(keys), jnp.asarray(jnp.nan, keys.dtype), keys)  # +NaN: last
    invalid: jax.Array
    if valid is None:
        invalid = jnp.zeros((n,), jnp.int32)
    else:  # invalid rows: after every valid one, in index order
        invalid = jnp.asarray(~jnp.asarray(valid), jnp.int32)
        keys = jnp.where(valid, keys, jnp.zeros((), keys.dtype))
    iota = jnp.arange(n, dtype=jnp.int32)
    *_, order = jax.lax.sort((invalid, keys, iota), num_keys=2, is_stable=True)
    return order
