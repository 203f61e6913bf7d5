"""The opt-in lexical signal s7: Okapi BM25 of the query against each memory's words.

The store supplies term statistics (:class:`LexicalInputs`); the kernel turns them into
BM25 scores and maps them into [0, 1], so ``k1``, ``b`` and the weight are
differentiable and fittable like every other parameter.

BM25 of a query with (distinct) terms t against a memory d::

    idf(t)   = ln(1 + (n_docs - df(t) + 0.5) / (df(t) + 0.5))
    bm25(d)  = sum_t idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * len(d) / avg_len))

The signal is BM25 relative to the best candidate of the same query::

    s7(d) = bm25(d) / max_{c in candidates} bm25(c)      (0 when no candidate shares a term)

so the best lexical match of every query scores 1 whatever the query's length or the
rarity of its words, which puts s7 on the scale of the cosine s1. With hybrid
candidates (the union of the semantic and the lexical shortlists) the maximum over the
candidates is the maximum over the whole store.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Bool, Float

from emotional_memory.kernel._types import Array


class LexicalInputs(eqx.Module):
    """Term statistics of one query's T terms over N candidate rows.

    Padding terms have ``df = 0`` and ``tf = 0`` on every row; padding rows have
    ``tf = 0``: neither contributes to any score.

    Attributes:
        tf: (N, T) occurrences of each query term in each candidate's content.
        length: (N,) number of tokens of each candidate's content.
        df: (T,) number of memories of the store containing each term.
        n_docs: () number of memories in the store.
        avg_length: () mean token count over the store's memories.
    """

    tf: Float[Array, "N T"]
    length: Float[Array, " N"]
    df: Float[Array, " T"]
    n_docs: Float[Array, ""]
    avg_length: Float[Array, ""]


def bm25(
    k1: Float[Array, ""], b: Float[Array, ""], lex: LexicalInputs
) -> Float[Array, " N"]:
    """Okapi BM25 of the query against every row (see the module docstring).

    Gradient-safe: the division is guarded where a row has no occurrence of a term
    (its contribution is exactly 0) and where the average length is 0.

    Args:
        k1: () term-frequency saturation (> 0).
        b: () length normalisation in [0, 1].
        lex: the term statistics.

    Returns:
        (N,) BM25 scores (>= 0), in the dtype of ``lex.tf``.
    """
    dtype = jnp.result_type(lex.tf)
    k1 = jnp.asarray(k1, dtype)
    b = jnp.asarray(b, dtype)
    df = jnp.asarray(lex.df, dtype)
    idf = jnp.log1p((lex.n_docs - df + 0.5) / (df + 0.5))
    avg_ok = lex.avg_length > 0
    rel = jnp.where(avg_ok, lex.length / jnp.where(avg_ok, lex.avg_length, 1.0), 1.0)
    norm = k1 * (1.0 - b + b * rel)  # (N,)
    tf = lex.tf
    present = tf > 0
    denom = jnp.where(present, tf + norm[:, None], 1.0)
    terms = jnp.where(present, tf * (k1 + 1.0) / denom, 0.0)
    return jnp.sum(terms * idf[None, :], axis=-1)


def lexical_signal(
    k1: Float[Array, ""], b: Float[Array, ""], lex: LexicalInputs, valid: Bool[Array, " N"]
) -> Float[Array, " N"]:
    """s7: BM25 divided by the best valid row's BM25 (0 when every row scores 0).

    Args:
        k1: () BM25 k1.
        b: () BM25 b.
        lex: term statistics of the N rows.
        valid: (N,) False on padding rows (never the maximum).

    Returns:
        (N,) values in [0, 1]; padding rows 0.
    """
    scores = jnp.where(valid, bm25(k1, b, lex), 0.0)
    top = jnp.max(scores, initial=-jnp.inf)  # an empty bank: not ok, every row 0
    ok = top > 0
    ratio = scores / jnp.where(ok, top, 1.0)
    # XLA may compute the division as a product with the reciprocal (not correctly
    # rounded): the best rows are set to exactly 1, as documented.
    ratio = jnp.where(scores == top, jnp.ones_like(ratio), ratio)
    return jnp.where(ok, ratio, 0.0)
