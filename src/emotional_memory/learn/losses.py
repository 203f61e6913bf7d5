"""The batch forward of the scoring model and the listwise recall loss."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from emotional_memory._precision import float64
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.kernel import ScoringParams, score_given_semantic
from emotional_memory.kernel.adapter import QueryAdapter, adapt_query
from emotional_memory.kernel.signals import bank_cosine
from emotional_memory.learn.recall_batch import RecallBatch

_NEG = -1e30


def batch_scores(
    params: ScoringParams, batch: RecallBatch, signal_mask: Any = None,
    adapter: QueryAdapter | None = None,
) -> jax.Array:
    """Pass-2 totals of every candidate of every query.

    Args:
        params: scoring parameters.
        batch: the recall batch (with ``lexical`` statistics, s7 is scored too; with
            ``context`` neighbours as well, s8).
        signal_mask: optional (6,) ablation mask (7 entries with lexical statistics,
            8 with neighbours too).
        adapter: optional query adapter: s1 is then the cosine of the adapted query
            embeddings with the candidates' (the batch must hold its embeddings,
            ``build_recall_batch(..., embeddings=True)``); None: ``batch.semantic``.

    Returns:
        (Q, C) totals; padding candidates get a very negative score.
    """
    semantic = batch.semantic
    if adapter is not None:
        if batch.query.embedding.shape[-1] == 0:
            raise ValueError(
                "the adapter needs the batch's embeddings: build_recall_batch(..., "
                "embeddings=True)"
            )
        adapted = adapt_query(adapter, batch.query.embedding)
        semantic = jax.vmap(bank_cosine)(adapted, batch.columns.embedding)

    def one(query: Any, columns: Any, semantic: Any, lexical: Any, context: Any) -> Any:
        return score_given_semantic(
            params, query, columns, semantic, signal_mask, lexical, context
        ).totals

    totals = jax.vmap(one)(batch.query, batch.columns, semantic, batch.lexical,
                           batch.context)
    return jnp.where(batch.columns.valid, totals, _NEG)


_batch_scores_jit = eqx.filter_jit(batch_scores)


def evaluate_batch(
    params: ScoringParams, batch: RecallBatch, config: EmotionalMemoryConfig | None = None
) -> np.ndarray:
    """Float64 pass-2 totals (Q, C) of ``batch`` under ``params`` (compiled).

    Args:
        params: scoring parameters.
        batch: recall batch.
        config: supplies the ablation mask (default: all signals on) and the query
            adapter (``retrieval.query_adapter``; the batch then needs its embeddings).

    Returns:
        (Q, C) numpy totals.
    """
    cfg = config or EmotionalMemoryConfig()
    batch = batch_for(batch, cfg)
    mask = batch_signal_mask(cfg, batch)
    spec = cfg.retrieval.query_adapter
    with float64():
        adapter = None if spec is None else QueryAdapter(
            *(jnp.asarray(f) for f in spec.factors())
        )
        return np.asarray(_batch_scores_jit(
            jax.tree_util.tree_map(jnp.asarray, params),
            jax.tree_util.tree_map(jnp.asarray, batch),
            jnp.asarray(mask, jnp.float64), adapter,
        ))


def batch_signal_mask(config: EmotionalMemoryConfig, batch: RecallBatch) -> list[float]:
    """The ablation mask for scoring ``batch``: 7 entries when it has lexical statistics,
    8 when it has neighbours too (s8 always on).

    Args:
        config: supplies the six switches (and ``enable_lexical``).
        batch: the recall batch.

    Returns:
        The mask as a list of floats.
    """
    mask = config.signal_mask()
    if batch.lexical is not None:
        mask.append(1.0 if config.enable_lexical else 0.0)
        if batch.context is not None:
            mask.append(1.0)
    return mask


def batch_for(
    batch: RecallBatch, config: EmotionalMemoryConfig, trainable: Iterable[str] = ()
) -> RecallBatch:
    """``batch`` as a model scores it: its neighbours only when the model uses s8.

    A model without the context signal (``context_weight`` 0 and the ``context`` group
    not trained) scores six (or seven) signals, as the engine does, even on a batch
    captured with neighbours.

    Args:
        batch: the recall batch.
        config: the model's configuration.
        trainable: the groups a fit trains.

    Returns:
        ``batch``, or a copy without ``context``.
    """
    if batch.context is None or config.retrieval.context_on or "context" in tuple(trainable):
        return batch
    return dataclasses.replace(batch, context=None)


def listwise_loss(totals: Any, labels: Any, valid: Any, temperature: Any) -> jax.Array:
    """Per-query ``-log(sum of softmax(totals / T) over the positives)``.

    Args:
        totals: (Q, C) scores.
        labels: (Q, C) positives.
        valid: (Q, C) real candidates.
        temperature: softmax temperature (> 0).

    Returns:
        (Q,) losses (0 for queries without a positive candidate).
    """
    z = jnp.where(valid, totals / temperature, _NEG)
    pos = labels & valid
    has_pos = jnp.any(pos, axis=-1)
    lse_all = jax.nn.logsumexp(z, axis=-1)
    lse_pos = jax.nn.logsumexp(jnp.where(pos, z, _NEG), axis=-1)
    return jnp.where(has_pos, lse_all - lse_pos, 0.0)
